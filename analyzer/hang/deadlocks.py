"""Ranks that wait for each other: cycles of the wait-for graph (an order inversion across groups, a deadlock
within one) and send/recv pairs blocked on each other.
"""
from __future__ import annotations

from collections import Counter

import numpy as np

from analyzer.hang import p2p
from analyzer.hang.diagnosis import HangDiagnosis
from analyzer.hang.evidence import group_desc
from analyzer.hang.inputs import HangInputs
from analyzer.hang.waits import RankStates
from parsers.table import Table, isin
from rules.phrases import ranks_text


def cycle_diag(inp: HangInputs, st: RankStates, edges: Table, comp: list[int]) -> HangDiagnosis:
    """Ranks waiting for each other. Across ≥ 2 groups: an order inversion; name the rank whose order differs."""
    e = edges[isin(edges["waiter"], comp) & isin(edges["target"], comp)]
    groups = sorted(set(e["group"].tolist()))
    where = "; ".join(f"rank {b.rank} waits in group {b.group} ({group_desc(inp, b.group)}) {b.op} #{b.seq} for "
                      f"{ranks_text([t for t in b.targets if t in comp])}" for r in comp if (b := st.blocked.get(r)))
    if len(groups) >= 2:
        odd, tie = order_outlier(inp, st, comp)
        culprits = odd if not tie else comp
        awaited = e[isin(e["target"], culprits)]  # where the others wait for the culprit: the earliest wait first
        t0 = np.where(awaited["created_ns"] > 0, awaited["created_ns"].astype(float), np.inf)  # unknown times last
        awaited = awaited.with_columns(t0=t0).sort_values(["t0", "seq"])
        g, s, op = (str(awaited["group"][0]), int(awaited["seq"][0]), str(awaited["op"][0])) \
            if len(awaited) else (st.blocked[culprits[0]].group, st.blocked[culprits[0]].seq,
                                  st.blocked[culprits[0]].op)
        d = HangDiagnosis(kind="order_inversion", process_group=g, pg_desc=group_desc(inp, g), seq=s,
                          op=op, culprit_ranks=sorted(culprits), waiting_ranks=[], tie=tie,
                          confidence=0.45 if tie else 0.8, source="flight_recorder",
                          cause=("deadlock across process groups " + ", ".join(groups) + ": " + where
                                 + ("" if tie else f"; {ranks_text(culprits)} entered the groups in a different order "
                                                   "than their own history (and the other ranks) say")))
        if not tie and len(culprits) == 1:
            _as_skip(inp, st, d, culprits[0])
    else:
        b = st.blocked[comp[0]]
        d = HangDiagnosis(kind="deadlock", process_group=b.group, pg_desc=group_desc(inp, b.group), seq=b.seq, op=b.op,
                          culprit_ranks=sorted(comp), waiting_ranks=[], tie=True, confidence=0.45,
                          source="flight_recorder", cause="ranks wait for each other: " + where)
    for r in comp:
        if (b := st.blocked.get(r)) is not None:
            row = b.row
            d.evidence.append((str(row["file"]), None, str(row["text"]) + (f" at {row['frame']}" if row["frame"] else "")))
    return d



def _as_skip(inp: HangInputs, st: RankStates, d: HangDiagnosis, x: int) -> None:
    """A sub-group's collective the culprit left out: the others wait for it in a group whose members are a strict
    subset of the group the culprit went on into, and the culprit issued more calls there since its last call of
    the sub-group than its own history puts between two of them (it went past the point where the sub-group's call
    was due: an eval or checkpoint group skipped on a stale list of ranks). Matched by the groups' members, never by
    their descriptions ('undefined' for every new_group made without one). An order inversion at the end of a step
    leaves the same dumps; the skip is the common cause, and the cause says both."""
    b = st.blocked.get(x)
    sub, big = inp.groups.get(d.process_group), inp.groups.get(b.group) if b is not None else None
    if sub is None or big is None or not sub.members or not big.members or not set(sub.members) < set(big.members):
        return
    def pattern(r: int) -> tuple[int, int] | None:
        """(most calls of the big group before one of the sub-group's in r's history, calls of it since r's last
        sub-group call); the first segment holds any set-up calls too, so it can only make the bound larger."""
        c = inp.calls[(inp.calls["rank"] == r) & (inp.calls["kind"] == "coll")].sort_values("order")
        groups = [str(g) for g in c["group"]]
        subs = [i for i, g in enumerate(groups) if g == sub.key]
        if not subs:
            return None
        between = [sum(1 for g in groups[i + 1:j] if g == big.key) for i, j in zip([-1] + subs, subs)]
        return max(between), sum(1 for g in groups[subs[-1] + 1:] if g == big.key)

    mine = pattern(x)
    if mine is None or mine[1] <= mine[0] or not _next_after_sub(inp, x, sub.key, b):
        return
    for r in d.waiting_ranks or [w for w in sub.members if w != x]:  # the others kept the pattern
        theirs = pattern(r)
        if theirs is None or theirs[1] > theirs[0]:
            return
    between, since = [mine[0]], mine[1]
    d.kind = "skipped_collective"
    d.cause += (f"; rank {x} left out group {sub.key}'s #{d.seq} ({d.op}): its own history puts at most "
                f"{max(between)} call(s) of group {big.key} before each of group {sub.key}'s, and it issued {since} "
                f"since its last one (the sub-group's members are a subset of group {big.key}'s: it went on without "
                "them). An order inversion at the end of a step would leave the same dumps")


def _next_after_sub(inp: HangInputs, x: int, sub: str, b) -> bool:
    """The call the culprit is blocked in is one its own history issues right after a call of the sub-group (same
    group, op and call site): it did what comes after the sub-group's call, i.e. left that call out. A rank that
    called something of a later phase early (an order inversion inside the step) is blocked elsewhere."""
    c = inp.calls[(inp.calls["rank"] == x) & (inp.calls["kind"] == "coll")].sort_values("order")
    rows = list(zip([str(g) for g in c["group"]], [str(o) for o in c["op"]], [str(f) for f in c["frame"]]))
    mine = (str(b.group), str(b.op), str(b.row.get("frame", "")))
    after = {rows[i + 1] for i in range(len(rows) - 1) if rows[i][0] == sub}
    return mine in after


def order_outlier(inp: HangInputs, st: RankStates, comp: list[int]) -> tuple[list[int], bool]:
    """The rank(s) of a cross-group cycle whose blocking call breaks the group order of their own history.

    Each rank's recorded collectives repeat with the step (a period of groups: TP, TP, DP, ...); the group the
    period puts next (without a clean period: the group that most often followed its last one) is the one it
    should have entered. A rank that entered another group differs.
    """
    odd = []
    for r in comp:
        c = inp.calls[(inp.calls["rank"] == r) & (inp.calls["kind"] == "coll")].sort_values("order")
        b = st.blocked.get(r)
        if b is None or len(c) < 3:
            continue
        pos = np.flatnonzero((c["group"] == b.group) & (c["seq"] == b.seq))
        if not len(pos):
            continue
        hist = c["group"][:pos[0]].tolist()
        nxt = p2p.period_next(hist)
        if nxt is None and len(hist) >= 2:  # no clean period: the group that most often followed the last one
            succ = Counter(hist[k + 1] for k in range(len(hist) - 1) if hist[k] == hist[-1])
            nxt = succ.most_common(1)[0][0] if succ else None
        if nxt is not None and nxt != b.group:
            odd.append(r)
    if odd and len(odd) < len(comp):
        return sorted(odd), False
    return sorted(comp), True



def stuck_pair_root(inp: HangInputs, st: RankStates, r: int) -> HangDiagnosis | None:
    """Two ranks blocked on the same send/recv: a stuck pair (neither is waiting on anyone else)."""
    b = st.blocked.get(r)
    if b is None or b.stuck_pair < 0:
        return None
    pair = sorted({r, b.stuck_pair})
    return HangDiagnosis(kind="stuck_p2p", process_group=b.group, pg_desc=group_desc(inp, b.group), seq=None, op=b.op,
                         culprit_ranks=pair, waiting_ranks=[], tie=True, confidence=0.45, source="flight_recorder",
                         p2p={"src": r if b.op == "send" else b.stuck_pair,
                              "dst": b.stuck_pair if b.op == "send" else r, "tag": None},
                         cause=f"ranks {pair[0]} and {pair[1]} both posted a send/recv to each other in group "
                               f"{b.group} and neither completed", evidence=[(str(b.row["file"]), None, str(b.row["text"]))])
