"""Which process group each gloo worker thread serves, for collectives that name no group (gloo writes no
``Process Group Name``). Each gloo process group runs its collectives on threads of its own, and the members of
one collective finish it together: a rank's thread belongs to the group whose other members each have a thread
whose same collectives (op and size) end at the same moments, and no other group's members do. On one host the
ranks share a clock; across hosts the traces' wall-clock base keeps the ends within the tolerance only where the
clocks agree (else nothing is decided and the rows keep the stream-order key)."""
from __future__ import annotations

from typing import Any

import numpy as np

from analyzer.rank.summary import collective_column

#: a group wins a thread when its worst member aligns this many times better than the next group's
MARGIN = 3.0
#: and at most this far apart (median end difference, ns)
MAX_ALIGN_NS = 20_000_000
#: the thread test runs on jobs up to this many ranks (it compares every rank with its groups' members)
MAX_RANKS = 256


def _rows(job: Any) -> dict[int, dict[int, tuple[np.ndarray, np.ndarray]]]:
    """Per rank and thread: (row keys 'op|nelems' codes, ends) of the unnamed group collectives, sorted by end."""
    out: dict[int, dict[int, tuple[np.ndarray, np.ndarray]]] = {}
    for r, t in job.traces.items():
        op = collective_column(t, "op")
        if not len(op):
            continue
        pg = np.asarray(collective_column(t, "pg_name")).astype(str)
        op = np.asarray(op).astype(str)
        sel = (pg == "") & ~np.isin(op, ("send", "recv"))
        if not sel.any():
            continue
        stream = np.asarray(collective_column(t, "stream"))[sel]
        end = np.asarray(collective_column(t, "end"), dtype=np.int64)[sel]
        n = np.maximum(np.asarray(collective_column(t, "in_nelems"), dtype=np.int64)[sel],
                       np.asarray(collective_column(t, "out_nelems"), dtype=np.int64)[sel])
        # all-to-all moves uneven splits (each member's size differs): its op alone is its key
        key = np.where(op[sel] == "alltoall", op[sel], np.char.add(np.char.add(op[sel], "|"), n.astype(str)))
        per = {}
        for s in np.unique(stream):
            m = stream == s
            o = np.argsort(end[m], kind="stable")
            per[int(s)] = (key[m][o], end[m][o])
        out[int(r)] = per
    return out


def _align(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> float:
    """Median over a's rows of the nearest end of b's row with the same key (inf when none matches)."""
    ka, ea = a
    kb, eb = b
    d = np.full(len(ka), np.inf)
    for k in np.unique(ka):
        ma, mb = ka == k, kb == k
        if not mb.any():
            continue
        e = eb[mb]
        i = np.clip(np.searchsorted(e, ea[ma]), 1, len(e)) if len(e) > 1 else np.zeros(int(ma.sum()), int)
        lo = np.abs(ea[ma] - e[np.maximum(i - 1, 0)])
        hi = np.abs(ea[ma] - e[np.minimum(i, len(e) - 1)])
        d[ma] = np.minimum(lo, hi)
    return float(np.median(d)) if len(d) else float("inf")


def thread_groups(job: Any, groups_of_rank: dict[int, list[tuple[str, list[int]]]]) -> dict[tuple[int, int], str]:
    """(rank, thread) → group name, for the threads whose group the end times decide (see the module doc).
    ``groups_of_rank``: per rank, the (name, ranks) of the groups it is in (size > 1)."""
    if len(job.traces) > MAX_RANKS:
        return {}
    rows = _rows(job)
    # a member's rows of every thread together (which of its threads ran a collective does not matter)
    whole = {}
    for q, th in rows.items():
        k = np.concatenate([x[0] for x in th.values()])
        e = np.concatenate([x[1] for x in th.values()])
        o = np.argsort(e, kind="stable")
        whole[q] = (k[o], e[o])
    out: dict[tuple[int, int], str] = {}
    for r, threads in rows.items():
        cands = [(n, g) for n, g in groups_of_rank.get(r, []) if len(g) > 1]
        if len(cands) < 2:
            if len(cands) == 1:
                for s in threads:
                    out[(r, s)] = cands[0][0]
            continue
        for s, a in threads.items():
            best: dict[int, float] = {}
            scores = []
            for name, g in cands:
                worst = 0.0
                for q in g:
                    if q == r or q not in rows:
                        continue
                    if q not in best:
                        best[q] = _align(a, whole[q])
                    worst = max(worst, best[q])
                scores.append((worst, len(g), name))
            scores.sort()
            top = scores[0]
            nxt = next((x for x in scores[1:] if x[2] != top[2]), None)
            if top[0] <= MAX_ALIGN_NS and (nxt is None or nxt[0] >= MARGIN * max(top[0], 1.0)):
                out[(r, s)] = top[2]
    return out
