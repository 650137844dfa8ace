"""Vectorised interval algebra on half-open [start, end) int64 arrays.

Every function takes and returns a pair ``(starts, ends)`` of numpy int64 arrays. Results of ``union``,
``intersect`` and ``difference`` are *normalised*: sorted, disjoint, non-touching, non-empty. No Python loop
runs over intervals, so a million kernels cost milliseconds.
"""
from __future__ import annotations

import numpy as np

Intervals = tuple[np.ndarray, np.ndarray]

_EMPTY = np.empty(0, dtype=np.int64)


def empty() -> Intervals:
    """An empty interval set."""
    return _EMPTY.copy(), _EMPTY.copy()


def as_intervals(starts, ends) -> Intervals:
    """Coerce to int64 arrays and drop empty or inverted intervals."""
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    keep = e > s
    return s[keep], e[keep]


def union(starts, ends) -> Intervals:
    """Merge overlapping or touching intervals into a normalised set."""
    s, e = as_intervals(starts, ends)
    if s.size == 0:
        return s, e
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    run_end = np.maximum.accumulate(e)
    # A new merged block starts where an interval begins after everything before it has ended.
    new_block = np.empty(s.size, dtype=bool)
    new_block[0] = True
    new_block[1:] = s[1:] > run_end[:-1]
    out_s = s[new_block]
    last_idx = np.r_[np.flatnonzero(new_block)[1:] - 1, s.size - 1]
    out_e = run_end[last_idx]
    return out_s, out_e


def total(iv: Intervals) -> int:
    """Summed length of a normalised set (call ``union`` first for raw intervals)."""
    s, e = iv
    return int((e - s).sum())


def length_of_union(starts, ends) -> int:
    """|∪ intervals| in one call."""
    return total(union(starts, ends))


def _boundaries(a: Intervals, b: Intervals, need: int) -> Intervals:
    """Sweep two normalised sets; keep the pieces covered by ``need`` of them (1 = either, 2 = both)."""
    sa, ea = a
    sb, eb = b
    pts = np.concatenate([sa, ea, sb, eb])
    if pts.size == 0:
        return empty()
    delta = np.concatenate([
        np.ones(sa.size, np.int64), -np.ones(ea.size, np.int64),
        np.ones(sb.size, np.int64), -np.ones(eb.size, np.int64),
    ])
    # Order among equal points is irrelevant: the pieces between equal points have zero length and are dropped.
    order = np.argsort(pts, kind="stable")
    pts, delta = pts[order], delta[order]
    depth = np.cumsum(delta)
    inside = depth >= need
    seg_s = pts[:-1][inside[:-1]]
    seg_e = pts[1:][inside[:-1]]
    return union(seg_s, seg_e)


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """A ∩ B for two normalised sets."""
    if a[0].size == 0 or b[0].size == 0:
        return empty()
    return _boundaries(a, b, 2)


def difference(a: Intervals, b: Intervals) -> Intervals:
    """A − B for two normalised sets."""
    if a[0].size == 0 or b[0].size == 0:
        return a
    # Points of A not in B: sweep with A counted +2 and B −1, keep depth exactly 2.
    sa, ea = a
    sb, eb = b
    pts = np.concatenate([sa, ea, sb, eb])
    delta = np.concatenate([
        np.full(sa.size, 2, np.int64), np.full(ea.size, -2, np.int64),
        -np.ones(sb.size, np.int64), np.ones(eb.size, np.int64),
    ])
    order = np.argsort(pts, kind="stable")
    pts, delta = pts[order], delta[order]
    depth = np.cumsum(delta)
    inside = depth == 2
    return union(pts[:-1][inside[:-1]], pts[1:][inside[:-1]])


def clip(iv: Intervals, lo: int, hi: int) -> Intervals:
    """Restrict a set to the window [lo, hi)."""
    s, e = iv
    s2 = np.maximum(s, lo)
    e2 = np.minimum(e, hi)
    keep = e2 > s2
    return s2[keep], e2[keep]


def clipped_lengths(iv: Intervals, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """|set ∩ [lo_k, hi_k)| for many windows at once (a normalised set; vectorised by prefix sums)."""
    s, e = iv
    lo = np.asarray(lo, dtype=np.int64)
    hi = np.asarray(hi, dtype=np.int64)
    if s.size == 0:
        return np.zeros(lo.size, dtype=np.int64)
    cum = np.concatenate([[0], np.cumsum(e - s)])

    def covered_before(t: np.ndarray) -> np.ndarray:
        # Length of the set lying before time t.
        k = np.searchsorted(s, t, side="right")  # intervals starting at or before t
        full = cum[k]
        # the k-th interval (index k-1) may extend past t
        idx = np.maximum(k - 1, 0)
        over = np.where(k > 0, np.maximum(e[idx] - t, 0), 0)
        return full - over

    return covered_before(hi) - covered_before(lo)


#: A thread blocked on a collective wakes up this soon after the collective's span ends (gloo, contended CPU).
WAKE_NS = 1_000_000


def exclusive_compute(start: np.ndarray, end: np.ndarray, stream: np.ndarray, comm_op: np.ndarray,
                      comm: Intervals, waits: Intervals | None = None) -> tuple[Intervals, Intervals]:
    """Compute of nested CPU op spans with the communication inside them taken out: (compute, comm ops).

    CPU traces nest ops on a thread (``stream``): an `autograd::engine::evaluate_function: …Backward` span holds
    FSDP's pre-backward all_gather wait, a DTensor op holds `_c10d_functional::all_reduce` and its `wait_tensor`.
    Counting the outer span as compute makes a rank that waits for a straggler look as busy as the straggler.
    ``comm_op`` marks the rows that are communication ops themselves (functional collectives and their waits):
    they become communication (the second set). Of the rest, a span's time covered by a leaf op (no op
    starts inside it) is compute; a gap a parent covers alone (no child op running) that ends within
    ``WAKE_NS`` of the end of a communication span overlapping it (``comm``: the gloo spans, and the
    ``comm_op`` rows) is the thread blocked on that communication: its overlap with it is not compute. Other
    parent-only time (Python glue while a gradient all-reduce runs on gloo's thread) stays compute.
    ``waits``: spans in which a thread waits on communication though they are no rows here (the parser keeps
    ``c10d::wait``, ``c10d::barrier`` … apart, in ``cpu_comm``; metrics.kind_sets passes those of the compute
    threads): a parent's own time inside them is never compute (only that time: they do not make the rest of a gap
    a wait).
    Exclusive time, as in a profiler's "self time", by interval set algebra on the whole trace at once (no loop
    over events): docs/metrics.md.
    """
    s, e = np.asarray(start, np.int64), np.asarray(end, np.int64)
    st, op = np.asarray(stream), np.asarray(comm_op, bool)
    ops = union(s[op], e[op])
    if not s.size:
        return empty(), ops
    order = np.lexsort((-e, s, st))  # per thread by start; a parent before the children starting with it
    so, eo, sto = s[order], e[order], st[order]
    has_child = np.zeros(s.size, bool)
    # properly nested spans: the next span of the same thread starts inside this one iff this one has a child
    has_child[:-1] = (sto[1:] == sto[:-1]) & (so[1:] < eo[:-1]) & (so[1:] >= so[:-1])
    child = np.empty(s.size, bool)
    child[order] = has_child
    plain = ~op
    leaves = union(s[plain & ~child], e[plain & ~child])
    spans = union(s[plain], e[plain])
    alone = difference(spans, leaves)  # time a parent covers with no child op running: glue, or a blocked wait
    w = waits if waits is not None else empty()
    if w[0].size and alone[0].size:  # inside a c10d call: the thread communicates or waits, whatever follows
        spans = difference(spans, intersect(alone, union(w[0], w[1])))
    # the calls are no ends a blocked gap waits for: DDP's glue around a c10d::allreduce_ enqueue stays compute
    waiting = union(np.concatenate([comm[0], ops[0]]), np.concatenate([comm[1], ops[1]]))
    if alone[0].size and waiting[0].size:
        # a blocked wait ends when the communication it waits on ends: keep as compute the parent-only gaps that
        # do not end within WAKE_NS of the end of a communication span that overlaps them
        ends = np.sort(waiting[1])
        k = np.searchsorted(ends, alone[1] + WAKE_NS, side="right") - 1
        cand = np.where(k >= 0, ends[np.maximum(k, 0)], np.iinfo(np.int64).min)
        blocked = (k >= 0) & (cand >= alone[1] - WAKE_NS) & (cand > alone[0])
        wait = intersect(union(alone[0][blocked], alone[1][blocked]), waiting)
        spans = difference(spans, wait)
    return union(np.concatenate([leaves[0], spans[0]]), np.concatenate([leaves[1], spans[1]])), ops
