"""Which process group each gloo worker thread serves, for collectives that name no group (gloo writes no
``Process Group Name``). Each gloo process group runs its collectives on threads of its own, and the members of
one collective finish it together: a rank's thread belongs to the group whose other members each have a thread
whose same collectives (op and size) end at the same moments, and no other group's members do. On one host the
ranks share a clock; across hosts the traces' wall-clock base keeps the ends within the tolerance only where the
clocks agree (else nothing is decided and the rows keep the stream-order key).

Where the end times are not decisive (a loaded host wakes a waiting rank milliseconds late; two ranks that another
group has just synchronised end together by coincidence), three facts settle it: the groups of one dimension run
the same collectives (SPMD), a group's threads share their ops and sizes, and a group's threads are started one
after the other (consecutive thread ids)."""
from __future__ import annotations

from typing import Any, Optional

import numpy as np


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


def thread_groups(job: Any, groups_of_rank: dict[int, list[tuple[str, list[int]]]],
                  dim_of: Optional[dict[str, str]] = None) -> dict[tuple[int, int], str]:
    """(rank, thread) → group name, for the threads whose group the end times decide (see the module doc).
    ``groups_of_rank``: per rank, the (name, ranks) of the groups it is in (size > 1); ``dim_of``: group name →
    its mesh dimension (the groups of one dimension run the same collectives: SPMD)."""
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
    scored: dict[tuple[int, int], list] = {}
    for r, threads in rows.items():
        cands = [(n, g) for n, g in groups_of_rank.get(r, []) if len(g) > 1]
        if not cands:
            continue
        if len(cands) == 1:
            for s in threads:
                out[(r, s)] = cands[0][0]
            continue
        best: dict[int, float] = {}
        for s, a in threads.items():
            scores = []
            for name, g in cands:
                worst = 0.0
                for q in g:
                    if q == r or q not in whole:
                        continue
                    if q not in best:
                        best[q] = _align(a, whole[q])
                    worst = max(worst, best[q])
                scores.append((worst, len(g), name))
            scores.sort()
            best.clear()
            scored[(r, s)] = scores
            won = _winner(scores)
            if won is not None:
                out[(r, s)] = won
    # the groups of one dimension run the same collectives: a thread booked to a group with ops and sizes that no
    # other group of its dimension has is a coincidence of end times (two ranks synchronised by another group)
    barred: dict[tuple[int, int], set] = {}
    if dim_of:
        keys_of: dict[str, set] = {}
        for (r, s), g in out.items():
            keys_of.setdefault(g, set()).update(rows[r][s][0].tolist())
        by_dim: dict[str, list[str]] = {}
        for g, d in dim_of.items():
            by_dim.setdefault(d, []).append(g)
        for d, gs in by_dim.items():
            if len(gs) < 2 or any(g not in keys_of for g in gs):
                continue
            common = set.intersection(*(keys_of[g] for g in gs))
            for (r, s), g in list(out.items()):
                if dim_of.get(g) == d and not (set(rows[r][s][0].tolist()) & common):
                    del out[(r, s)]
                    barred.setdefault((r, s), set()).add(g)
    # second pass: a group whose decided threads on this rank carry other collectives only is not this thread's
    # (a gloo group's threads take turns at its collectives: they share their ops and sizes); and where one group
    # of the mesh is left beside the world group, and it aligns at least as well, it is that group
    world = {n for rs in groups_of_rank.values() for n, g in rs if len(g) == len(groups_of_rank)}
    for (r, s), scores in scored.items():
        if (r, s) in out:
            continue
        keys = set(rows[r][s][0].tolist())
        mine = {}
        for (r2, s2), g in out.items():
            if r2 == r:
                mine.setdefault(g, set()).update(rows[r][s2][0].tolist())
        left = [x for x in scores if not (x[2] in mine and not (mine[x[2]] & keys))
                and x[2] not in barred.get((r, s), ())]
        won = _winner(left)
        if won is None:
            rest = [x for x in left if x[2] not in world]
            if len(rest) == 1 and all(rest[0][0] <= x[0] for x in left) and rest[0][0] <= MAX_ALIGN_NS:
                won = rest[0][2]
        if won is None and left and left[0][0] <= MAX_ALIGN_NS and left[0][2] in mine:
            # the best-aligned group is also the one whose threads on this rank share most of its ops and sizes
            def overlap(g: str) -> float:
                k = mine.get(g, set())
                return len(k & keys) / len(k | keys) if k else 0.0
            if all(overlap(left[0][2]) > overlap(x[2]) for x in left[1:] if x[2] != left[0][2]):
                won = left[0][2]
        if won is None:
            # a gloo group starts its worker threads one after the other: a thread next to a decided one (thread id
            # ± 1 in the same process) serves that thread's group, when that group aligns within the limit
            twin = out.get((r, s - 1)) or out.get((r, s + 1))
            if twin is not None and any(x[2] == twin and x[0] <= MAX_ALIGN_NS for x in left):
                won = twin
        if won is not None:
            out[(r, s)] = won
    return out


def _winner(scores: list) -> "str | None":
    """The group whose worst member aligns MARGIN times better than the next group's, within MAX_ALIGN_NS."""
    if not scores:
        return None
    top = scores[0]
    nxt = next((x for x in scores[1:] if x[2] != top[2]), None)
    if top[0] <= MAX_ALIGN_NS and (nxt is None or nxt[0] >= MARGIN * max(top[0], 1.0)):
        return top[2]
    return None


def collective_column(t: Any, name: str) -> Any:
    """One column of a rank's collectives (analyzer.rank.summary, imported here: a run without traces — a hang
    post-mortem — never loads the table library)."""
    from analyzer.rank.summary import collective_column as column
    return column(t, name)
