"""Ranks whose traces disagree on a group's collectives: one lacks a collective the others ran, runs an extra one,
or runs them in another order — a desync, the precursor of a hang.

Every member of a process group issues the same collectives in the same order (NCCL and gloo match them by
order alone). Per group, the consensus is the most common count (ties: the larger) and, position by position,
the most common op among the ranks with that count; a reference rank follows it exactly. A rank with fewer (or
more) collectives is aligned to the reference by time: with d collectives missing, the alignment keeps its
order and skips exactly d reference positions, choosing those that make its starts and ends line up best with
the reference's (both on their own clocks, up to a constant offset). A missing collective then shifts nothing:
the rank's later collectives get the sequence numbers of the instances they belong to, so the matching, waits
and straggler statistics stay right. Reported only where the rank recorded the step (a trace that starts later
or was cut off lacks the collectives outside its window; that is not a desync).
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
import pandas as pd

#: Alignments are searched for at most this many missing or extra collectives per rank and group.
MAX_SKIPS = 8
#: Sequence numbers for extra collectives (they join no instance).
EXTRA_SEQ = 1 << 40
#: Below this margin (in units of the fit's noise per row) the next best position is reported too.
UNSURE_MARGIN = 1.0
#: Weight of an op mismatch in the alignment cost (in units of the group's typical spacing).
OP_MISMATCH = 10.0


def _consensus(sub: pd.DataFrame) -> tuple[int, int, np.ndarray, np.ndarray, bool]:
    """(count, reference rank, op codes of the reference sequence, op code table, whether every rank has that
    count and follows it exactly) of one group."""
    counts = sub.groupby("rank").size()
    freq = counts.value_counts()
    n = int(max(freq[freq == freq.max()].index))
    full = sub[sub["rank"].isin(counts[counts == n].index)]
    codes, table = pd.factorize(full["op"])
    ranks = full["rank"].to_numpy()
    urank, ridx = np.unique(ranks, return_inverse=True)
    mat = np.zeros((len(urank), n), dtype=np.int64)
    mat[ridx, full["seq"].to_numpy()] = codes
    votes = np.stack([(mat == c).sum(axis=0) for c in range(len(table))])
    ref_ops = votes.argmax(axis=0)
    exact = np.flatnonzero((mat == ref_ops).all(axis=1))
    ref_rank = int(urank[exact[0]] if len(exact) else urank[0])
    agree = len(counts) == len(urank) and len(exact) == len(urank)
    return n, ref_rank, ref_ops, np.asarray(table), agree


def _align(rs: np.ndarray, re: np.ndarray, rop: np.ndarray, fs: np.ndarray, fe: np.ndarray, fop: np.ndarray,
           scale: float, offset: float) -> tuple[float, np.ndarray]:
    """Order-keeping map of the rank's m rows onto n ≥ m reference rows skipping exactly n − m of them.

    Cost of matching i to j: (|start difference| + |end difference|) / scale after the clock offset, plus
    OP_MISMATCH when their signatures (op and element count) differ. Returns (total cost, reference index of each rank row).
    """
    m, n = len(rs), len(fs)
    d = n - m
    # cost[i, k]: rank rows < i matched, k reference rows skipped (the next reference row is i + k)
    cost = np.full((m + 1, d + 1), np.inf)
    cost[0, :] = 0.0
    came = np.zeros((m + 1, d + 1), dtype=bool)  # True: reached by skipping reference row i + k - 1
    ks = np.arange(d + 1)
    for i in range(1, m + 1):
        j = i - 1 + ks
        c = (np.abs(rs[i - 1] + offset - fs[j]) + np.abs(re[i - 1] + offset - fe[j])) / scale + \
            OP_MISMATCH * (rop[i - 1] != fop[j])
        acc = cost[i - 1] + c
        for k in range(1, d + 1):  # or arrive at k by skipping a reference row after matching row i - 1
            if acc[k - 1] < acc[k]:
                acc[k] = acc[k - 1]
                came[i, k] = True
        cost[i] = acc
    total = float(cost[m, d])
    # backtrack
    out = np.empty(m, dtype=np.int64)
    i, k = m, d
    while i > 0:
        while came[i, k]:
            k -= 1
        out[i - 1] = i - 1 + k
        i -= 1
    return total, out


def _best_alignment(rs, re, rop, fs, fe, fop, scale, offset: Optional[float] = None) -> tuple[float, np.ndarray]:
    """Alignment with the clock offset refined on the matched pairs (``offset``: from the clock alignment, the
    only start when given — a periodic sequence fits one period off as well; else guesses from either end)."""
    m, n = len(rs), len(fs)
    d = n - m
    best: Optional[tuple[float, np.ndarray]] = None
    starts = [offset] if offset is not None else [-float(np.median(re - fe[:m])), -float(np.median(re - fe[d:]))]
    for off in starts:
        for _ in range(2):
            total, mapping = _align(rs, re, rop, fs, fe, fop, scale, off)
            off = -float(np.median(re - fe[mapping]))
        total, mapping = _align(rs, re, rop, fs, fe, fop, scale, off)
        if best is None or total < best[0]:
            best = (total, mapping)
    return best


def _margin(rs, re, rop, fs, fe, fop, scale, mapping) -> tuple[float, Optional[int]]:
    """With one reference row skipped: how much worse the best alignment skipping another row is (in units of
    the fit's mean cost per row: the timing noise), and that row; (nan, None) otherwise."""
    m, n = len(rs), len(fs)
    if n - m != 1:
        return float("nan"), None
    off = -float(np.median(re - fe[mapping]))
    a = (np.abs(rs + off - fs[:m]) + np.abs(re + off - fe[:m])) / scale + OP_MISMATCH * (rop != fop[:m])
    b = (np.abs(rs + off - fs[1:]) + np.abs(re + off - fe[1:])) / scale + OP_MISMATCH * (rop != fop[1:])
    # skipping reference row p: rows < p match p-for-p, rows >= p match p+1
    pre = np.concatenate([[0.0], np.cumsum(a)])
    suf = np.concatenate([np.cumsum(b[::-1])[::-1], [0.0]])
    costs = pre + suf
    p = int(np.setdiff1d(np.arange(n), mapping)[0])
    alt = np.delete(np.arange(n), p)
    if not len(alt):
        return float("inf"), None
    q = int(alt[np.argmin(costs[alt])])
    # in units of the fit's own noise (its mean cost per matched row; at least 0.1 spacing)
    return float(costs[q] - costs[p]) / max(0.1, float(costs[p]) / max(1, m)), q


def realign(coll: pd.DataFrame, job: Any, offset_of: Optional[dict] = None) -> tuple[pd.DataFrame, list[dict], bool]:
    """Sequence numbers that follow the group's consensus, the desyncs found (docs/cross-rank.md), and whether
    any sequence number changed. ``offset_of``: clock offsets per rank (ns to add to local times), when known."""
    if not len(coll):
        return coll, [], False
    cols = {k: coll[k].to_numpy() for k in _COLUMNS}
    found, changed = realign_columns(cols, job, offset_of)
    if changed:
        coll = coll.assign(seq=cols["seq"])
    return coll, found, changed


#: The columns of a group's collective rows that the consensus and the alignments read.
_COLUMNS = ("rank", "seq", "op", "nelems", "start", "end", "step", "process_group")


def realign_columns(coll: dict, job: Any, offset_of: Optional[dict] = None) -> tuple[list[dict], bool]:
    """:func:`realign` on a dict of columns (section.py's), one group at a time: ``coll["seq"]`` is replaced
    when a sequence number changes. Groups are visited in order of first appearance (rows sorted by rank)."""
    found: list[dict] = []
    changed = False
    if not len(coll["rank"]):
        return found, changed
    kept = _kept_steps(job)
    codes, names = pd.factorize(coll["process_group"])
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(names) + 1))
    opcode = pd.factorize(coll["op"])[0]
    seqs = coll["seq"]
    for g, pg in enumerate(names):
        idx = order[bounds[g]:bounds[g + 1]]
        rank = coll["rank"][idx]
        if len(idx) < 2 or (rank == rank[0]).all() or _all_agree(rank, coll["seq"][idx], opcode[idx]):
            continue
        sub = pd.DataFrame({k: coll[k][idx] for k in _COLUMNS if k != "process_group"}, index=idx)
        sub["seq"] = seqs[idx]
        new = _realign_group(sub, pg, kept, offset_of, found)
        if new is not None:
            if not changed:
                seqs = seqs.copy()
                changed = True
            seqs[idx] = new
    if changed:
        coll["seq"] = seqs
    return found, changed


def _all_agree(rank: np.ndarray, seq: np.ndarray, ops: np.ndarray) -> bool:
    """Whether every rank of a group ran one sequence of ops: the common case, decided without building the
    group's table (one reshape when the rows come rank by rank in sequence order, as section.py's do)."""
    if len(rank) > 1 and ((rank[1:] < rank[:-1]).any() or ((rank[1:] == rank[:-1]) & (seq[1:] < seq[:-1])).any()):
        order = np.lexsort((seq, rank))
        rank, ops = rank[order], ops[order]
    starts = np.flatnonzero(np.r_[True, rank[1:] != rank[:-1]])
    n = len(rank) // len(starts)
    if n * len(starts) != len(rank) or (np.diff(np.r_[starts, len(rank)]) != n).any():
        return False
    mat = ops.reshape(len(starts), n)
    return bool((mat == mat[0]).all())


def _realign_group(sub: pd.DataFrame, pg: Any, kept: set, offset_of: Optional[dict],
                   found: list[dict]) -> Optional[np.ndarray]:
    """One group's corrected sequence numbers (None when none changes); its desyncs are appended to ``found``."""
    n, ref_rank, ref_ops, table, agree = _consensus(sub)
    if agree:  # every rank ran the reference sequence: nothing to realign or report
        return None
    seqs: Optional[pd.Series] = None
    ref = sub[sub["rank"] == ref_rank].sort_values("seq")
    fs, fe = ref["start"].to_numpy().astype(np.float64), ref["end"].to_numpy().astype(np.float64)
    fstep = ref["step"].to_numpy()
    gaps = np.diff(np.sort(fe))
    scale = float(np.median(gaps[gaps > 0])) if (gaps > 0).any() else 1_000.0
    code_of = {op: i for i, op in enumerate(table)}
    # signature for the alignment: op and element count (-1 where a trace records none: gloo without record_shapes)
    sig = pd.factorize(pd.MultiIndex.from_arrays([sub["op"], sub["nelems"]]))[0]
    sig = pd.Series(sig, index=sub.index)
    fsig = sig.loc[ref.index].to_numpy()
    for r, rows in sub.groupby("rank", sort=True):
        rows = rows.sort_values("seq")
        rop = np.array([code_of.get(o, -1) for o in rows["op"]], dtype=np.int64)
        rsig = sig.loc[rows.index].to_numpy()
        m = len(rows)
        if m == n:
            diff = np.flatnonzero(rop != ref_ops)
            if len(diff) and r != ref_rank:
                j = int(diff[0])
                if _recorded(kept, int(r), int(fstep[j])):
                    found.append(_record("order", int(r), pg, str(rows["op"].iloc[j]), j, fstep, ref_rank,
                                         1.0, expected=str(table[ref_ops[j]])))
            continue
        d = abs(n - m)
        if d > MAX_SKIPS or m == 0:
            continue
        rs, re_ = rows["start"].to_numpy().astype(np.float64), rows["end"].to_numpy().astype(np.float64)
        off = None if offset_of is None else float(offset_of.get(int(r), 0) - offset_of.get(ref_rank, 0))
        if seqs is None:
            seqs = pd.Series(sub["seq"].to_numpy().copy(), index=sub.index)
        if m < n:
            total, mapping = _best_alignment(rs, re_, rsig, fs, fe, fsig, scale, off)
            margin, alt = _margin(rs, re_, rsig, fs, fe, fsig, scale, mapping)
            seqs.loc[rows.index] = ref["seq"].to_numpy()[mapping]
            lo, hi = int(mapping.min()), int(mapping.max())
            for j in np.setdiff1d(np.arange(n), mapping):
                st = int(fstep[j])
                if _recorded(kept, int(r), st) or (st < 0 and lo < j < hi):
                    rec = _record("missing", int(r), pg, str(table[ref_ops[j]]), int(j), fstep, ref_rank,
                                  _confidence(margin))
                    if alt is not None and margin < UNSURE_MARGIN:
                        rec["or_position"] = alt  # about as good a fit (collectives that ran together)
                    found.append(rec)
        else:  # extra collectives on this rank: align the reference onto it instead
            total, mapping = _best_alignment(fs, fe, fsig, rs, re_, rsig, scale,
                                             None if off is None else -off)
            seq = np.full(m, -1, dtype=np.int64)
            seq[mapping] = ref["seq"].to_numpy()
            extra = np.flatnonzero(seq < 0)
            seq[extra] = EXTRA_SEQ + extra
            seqs.loc[rows.index] = seq
            rstep = rows["step"].to_numpy()
            for i in extra:
                if _recorded(kept, int(r), int(rstep[i])):
                    before = int((mapping < i).sum())
                    found.append(_record("extra", int(r), pg, str(rows["op"].iloc[i]), before, fstep, ref_rank,
                                         0.6, step=int(rstep[i])))
    return None if seqs is None else seqs.to_numpy()


def _kept_steps(job: Any) -> set:
    """(rank, step) pairs the metrics keep (recorded, not damaged by a cut)."""
    sm = getattr(job, "step_metrics", None)
    if sm is None or not len(sm):
        return set()
    return set(zip(sm["rank"].to_numpy().tolist(), sm["step"].to_numpy().tolist()))


def _recorded(kept: set, rank: int, step: int) -> bool:
    return step >= 0 and (rank, step) in kept


def _confidence(margin: float) -> float:
    """From the margin of the chosen position over the next best (noise units): 1 − e^−margin in [0.5, 0.99];
    0.7 when not computed (several collectives missing)."""
    if margin != margin:
        return 0.7
    return round(float(min(0.99, max(0.5, 1.0 - np.exp(-margin)))), 3)


def _record(kind: str, rank: int, pg: Any, op: str, position: int, fstep: np.ndarray, ref_rank: int,
            confidence: float, expected: Optional[str] = None, step: Optional[int] = None) -> dict:
    """One desync: where (group position, step, index within the step) and against which reference rank."""
    pos = min(position, len(fstep) - 1)
    s = int(fstep[pos]) if step is None else step
    index = int((fstep[:position] == s).sum())
    out = {"kind": kind, "rank": rank, "process_group": str(pg), "op": op, "position": int(position),
           "step": s if s >= 0 else None, "index_in_step": index if s >= 0 else None,
           "reference_rank": ref_rank, "confidence": confidence}
    if expected is not None:
        out["expected_op"] = expected
    return out
