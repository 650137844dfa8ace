"""From divergences, blocking points, wait edges and stderr facts to ranked root-cause diagnoses.

Roots, strongest evidence first:
1. a rank whose stderr shows an origin failure (a gloo size check, an exception in user code, out of memory,
   a CUDA error, a fatal signal); the waits on it (edges to it, or to a rank that left no dump) are its effect;
2. a group whose members issued incompatible calls at one sequence number (op, size, dtype, order) — decided by
   majority; a tie stays a tie (all suspects, confidence below 0.5) unless stderr names one of them;
3. ranks that wait for each other (a cycle of the wait-for graph): across two groups an order inversion;
4. ranks whose own work stopped completing while their peers completed it (device stalled);
5. ranks others wait for that are not waiting themselves (stopped issuing work: stalled or never joined);
6. ranks that left no record at all, with the reason when stderr gives one.
Every other blocked rank is a consequence: its wait is listed in `explains` of the root at the head of its chain.
"""
from __future__ import annotations

import re
from collections import Counter

import pandas as pd

from analyzer.cross_rank.collectives import DTYPE_BYTES
from analyzer.hang.diagnosis import FIX, HangDiagnosis
from analyzer.hang.inputs import HangInputs
from analyzer.phrases import per_rank_text, ranks_text, values_text
from analyzer.hang import p2p
from analyzer.hang.matching import Divergence
from analyzer.hang.stderr_facts import StderrFacts, origin_sentence
from analyzer.hang.waits import RankStates, cycles, reachable_roots

KIND_ORDER = {"mismatched_op": 0, "order_mismatch": 0, "extra_collective": 0, "skipped_collective": 0,
              "mismatched_size": 0, "mismatched_dtype": 0, "crashed_rank": 1, "nccl_error": 1, "order_inversion": 2,
              "deadlock": 2, "p2p_mismatch": 2, "device_stalled": 3, "stuck_p2p": 4, "lagging_rank": 5,
              "missing_rank": 5, "rendezvous_failure": 1, "watchdog_timeout": 9}


def _desc(inp: HangInputs, g: str) -> str:
    return inp.groups[g].desc if g in inp.groups else ""


def _ev_row(r: dict) -> tuple:
    return (r["file"], r.get("line"), r["text"])


def _waiters_of(edges: pd.DataFrame, culprits: set[int]) -> set[int]:
    """Every rank whose chain of waits reaches one of `culprits` (reverse reachability; culprits excluded)."""
    if edges.empty:
        return set()
    prev: dict[int, set[int]] = {}
    for w, t in zip(edges["waiter"], edges["target"]):
        prev.setdefault(int(t), set()).add(int(w))
    seen, stack = set(culprits), list(culprits)
    while stack:
        for w in prev.get(stack.pop(), ()):
            if w not in seen:
                seen.add(w)
                stack.append(w)
    return seen - culprits


def _explains(edges: pd.DataFrame, culprits: set[int], inp: HangInputs) -> list[dict]:
    """The wait points whose chain leads to `culprits`: (group, seq, waiting ranks, whom they wait for)."""
    if edges.empty:
        return []
    waiters = _waiters_of(edges, culprits)
    e = edges[edges["waiter"].isin(waiters)]
    out = []
    for (g, s), df in e.groupby(["group", "seq"], sort=True):
        out.append(dict(process_group=str(g), pg_desc=_desc(inp, g), seq=int(s), op=str(df["op"].iloc[0]),
                        waiting=sorted(int(x) for x in set(df["waiter"])),
                        on=sorted(int(x) for x in set(df["target"]))))
    out.sort(key=lambda x: (-len(x["waiting"]), x["process_group"], x["seq"]))
    return out


def _status_evidence(inp: HangInputs, g: str, ranks: list[int]) -> list[tuple]:
    """One evidence line per rank: how far it got in group g (last enqueued / completed)."""
    p = inp.progress[(inp.progress["group"] == g) & inp.progress["rank"].isin(ranks)]
    return [(str(x.file), None, f"rank {x.rank} group {g}: last enqueued {x.coll_enqueued}, last completed "
                                f"{x.coll_completed}" + (f" (pg_status read as {x.space} numbers)"
                                                         if x.space not in ("collective", "") else ""))
            for x in p.sort_values("rank").itertuples(index=False)]


def _failure_evidence(facts: StderrFacts, ranks: list[int]) -> list[tuple]:
    """Each rank's own stderr lines: the line of its origin failure first, then up to two more."""
    out = []
    for r in ranks:
        f = facts.ranks.get(r)
        if f is None:
            continue
        mine = [(f.origin["file"], f.origin["line"], f.origin["text"])] if f.origin and f.origin.get("text") else []
        mine += [e for e in f.evidence if e not in mine]
        out.extend(mine[:3])
    return out


def _failed_itself(facts: StderrFacts, r: int) -> bool:
    """stderr shows the rank's own failure: an origin line, or a death other than the launcher's SIGTERM."""
    f = facts.ranks.get(r)
    return bool(f and (f.origin or (f.died and "SIGTERM" not in f.how and f.how)))


def _size_abort(facts: StderrFacts, r: int) -> bool:
    f = facts.ranks.get(r)
    return bool(f and f.origin and f.origin.get("kind") in ("gloo_size_mismatch", "gloo_invalid_tensor_size"))


def _abort_side(inp: HangInputs, d: Divergence, facts: StderrFacts) -> tuple[list[int], str] | None:
    """Break a tie with ranks that gloo aborted in this group for receiving more data than their own buffer holds:
    such a rank holds the smaller buffer, so it sides with the ranks whose call moves fewer bytes."""
    members = inp.groups[d.group].members if d.group in inp.groups else set()
    aborted = [r for r in sorted(members or ()) if r not in d.present and _size_abort(facts, r)
               and facts.ranks[r].origin.get("bytes_a", -1) > facts.ranks[r].origin.get("bytes_b", -1) >= 0]
    if not aborted:
        return None
    nbytes = {r: _call_bytes(inp, d.group, d.seq, r) for r in d.present}
    if any(v < 0 for v in nbytes.values()) or len(set(nbytes.values())) < 2:
        return None
    small = min(nbytes.values())
    votes = Counter("small" if v == small else "large" for v in nbytes.values())
    votes["small"] += len(aborted)
    if votes["small"] <= votes["large"]:
        return None
    odd = sorted(r for r, v in nbytes.items() if v != small)
    why = (f"{ranks_text(aborted)} aborted in gloo's size check (received more bytes than their own buffer holds), so "
           f"their call moves the smaller amount, like {ranks_text(sorted(r for r in nbytes if nbytes[r] == small))}")
    return odd, why


def _size_abort_majorities(inp: HangInputs, facts: StderrFacts, taken: set[int]) -> list[HangDiagnosis]:
    """Ranks gloo aborted for receiving more than their own buffer holds are receivers, not necessarily the odd
    ones: when two or more of them agree on their own buffer's size and are most of the smallest known group that
    holds them all, the group's other members are the ones whose call moves more (the majority rule of a
    mismatch, with the aborted ranks voting for the buffer they hold)."""
    aborted = [r for r in facts.origin_ranks() if r not in taken and _size_abort(facts, r)]
    by_size: dict[int, list[int]] = {}
    for r in aborted:
        o = facts.ranks[r].origin
        if o.get("bytes_a", -1) > o.get("bytes_b", -1) >= 0:
            by_size.setdefault(int(o["bytes_b"]), []).append(r)
    out = []
    for held, ranks in sorted(by_size.items()):
        if len(ranks) < 2:
            continue
        homes = sorted((g for g in inp.groups.values() if g.members and set(ranks) <= set(g.members)),
                       key=lambda g: (len(g.members), g.key))
        if not homes:
            continue
        g = homes[0]
        others = sorted(set(g.members) - set(ranks))
        if not others or len(others) >= len(ranks) or any(_size_abort(facts, r) for r in others):
            continue
        got = ", ".join(f"rank {r}: {facts.ranks[r].origin['bytes_a']}" for r in ranks)
        cause = (f"gloo's size check aborted {ranks_text(ranks)} (SIGABRT): each received more than its own "
                 f"{held}-byte buffer holds ({got} bytes). They agree with each other on the size and are "
                 f"{len(ranks)} of the {len(g.members)} members of group {g.key} ({g.desc or 'no description'}), "
                 f"the smallest group holding them all; its other member{'s' if len(others) > 1 else ''} "
                 f"{ranks_text(others)} sent the larger data: {'their' if len(others) > 1 else 'its'} call differs "
                 "(a skipped or extra collective there, or a different size)")
        seqs = inp.calls.loc[(inp.calls["group"] == g.key) & inp.calls["rank"].isin(others), "seq"]
        seq = int(seqs.max()) if len(seqs) else None
        d = HangDiagnosis(kind="mismatched_size", process_group=g.key, pg_desc=g.desc, seq=seq,
                          op=_op_at(inp, g.key, seq) if seq is not None else "", culprit_ranks=others,
                          waiting_ranks=sorted(ranks), cause=cause, confidence=0.7, source="stderr")
        d.evidence.extend(_failure_evidence(facts, sorted(ranks)))
        if seq is not None:
            d.evidence.extend(_calls_at(inp, g.key, seq, others)[:4])
        out.append(d)
    return out


#: Bytes per element of the dtype names Kineto writes and the ones hang/inputs.py normalises FR's to.
ITEM_BYTES = {**DTYPE_BYTES, "fp8_e4m3": 1, "fp8_e5m2": 1, "complex64": 8}


def _dtype_from_abort(inp: HangInputs, facts: StderrFacts, d: HangDiagnosis) -> None:
    """A size abort whose bytes received / held is the ratio of the others' element size to another dtype's
    (float32 against bfloat16: 2) may be a dtype mismatch with equal shapes; gloo's numbers cannot tell it from a
    shape twice as large, so the cause says both (the kind stays a size mismatch)."""
    others = {str(d.dtypes.get(r, "")) for r in d.sizes if r not in d.culprit_ranks}
    if len(others) != 1:
        return
    dt = others.pop()
    s = ITEM_BYTES.get(dt.split(",")[0], -1)
    ratios = set()
    for r in d.culprit_ranks:
        o = facts.ranks[r].origin if r in facts.ranks else None
        got, held = (o.get("bytes_a", -1), o.get("bytes_b", -1)) if o else (-1, -1)
        if s < 0 or held <= 0 or got <= held or got % held:
            return
        ratios.add(got // held)
    if len(ratios) != 1 or (k := ratios.pop()) not in (2, 4, 8) or s % k:
        return
    small = {1: "an 8-bit dtype", 2: "a 16-bit dtype (bfloat16 / float16)", 4: "a 32-bit dtype"}[s // k]
    d.cause += (f"; received / held = {k}, which is also what the same shape in {small} against the others' {dt} "
                "gives: check the dtypes as well as the shapes")


def _call_bytes(inp: HangInputs, g: str, seq: int, r: int) -> int:
    """Bytes one rank's call moves at (g, seq): Σ input elements × element size (-1 when unknown)."""
    c = inp.calls[(inp.calls["group"] == g) & (inp.calls["seq"] == seq) & (inp.calls["rank"] == r)
                  & (inp.calls["kind"] == "coll")]
    if c.empty or (c["numel_in"] < 0).any():
        return -1
    total = 0
    for n, dt in zip(c["numel_in"], c["dtype_in"]):
        item = max((ITEM_BYTES.get(x, -1) for x in str(dt).split(",")), default=-1)
        if item < 0:
            return -1
        total += int(n) * item
    return total


def from_divergence(inp: HangInputs, d: Divergence, facts: StderrFacts) -> HangDiagnosis:
    """A mismatch root; a tie is broken only by evidence: a suspect's own error, or ranks gloo aborted."""
    culprits, tie, conf = list(d.culprits), d.tie, 0.9 if len(d.present) >= 3 else 0.8
    cause = d.cause
    side = _abort_side(inp, d, facts) if tie else None
    if side is not None:
        culprits, tie, conf = side[0], False, 0.75
        cause += "; the tie is broken because " + side[1]
    if tie:
        named = [r for r in culprits if facts.ranks.get(r) and facts.ranks[r].origin]
        if named and len(named) < len(culprits):
            culprits, tie, conf = named, False, 0.75
            o = facts.ranks[named[0]].origin
            cause += f"; the tie is broken by rank {named[0]}'s own error: {o['text'][:200]}"
        else:
            conf = 0.45
    x = HangDiagnosis(kind=d.kind, process_group=d.group, pg_desc=_desc(inp, d.group), seq=d.seq,
                      op=Counter(d.ops.values()).most_common(1)[0][0] if d.ops else "", culprit_ranks=culprits,
                      waiting_ranks=[], ops=d.ops, sizes=d.sizes, dtypes=d.dtypes,
                      evidence=[_ev_row(r) for r in sorted(d.rows, key=lambda r: r["rank"] not in culprits)],
                      cause=cause, source="flight_recorder", confidence=conf, tie=tie)
    x.evidence.extend(_failure_evidence(facts, culprits))
    return x


def _best_group(inp: HangInputs, st: RankStates, edges: pd.DataFrame, culprits: list[int],
                kind: str = "") -> tuple[str, int, str]:
    """(group, seq, op) that shows a root best: for stalled devices the group holding all culprits where their own
    work stopped (largest completion gap); otherwise where most ranks wait directly on the culprits."""
    direct = edges[edges["target"].isin(culprits)] if len(edges) else edges
    if len(direct) and kind != "device_stalled":
        # the wait that began first (earliest-created blocking call) is the first collective the culprits missed
        t0 = direct["created_ns"].where(direct["created_ns"] > 0)
        top = direct.assign(t0=t0).groupby(["group", "seq", "op"]).agg(
            n=("waiter", "nunique"), m=("target", "nunique"), t0=("t0", "min"))
        top = top.reset_index().sort_values(["m", "t0", "n", "seq"], ascending=[False, True, False, True],
                                            na_position="last")
        covering = top[top["m"] == len(set(culprits))]
        row = (covering if len(covering) else top).iloc[0]
        return str(row["group"]), int(row["seq"]), str(row["op"])
    stalls = [s for r in culprits for s in st.device_stalled.get(r, [])]
    if stalls:
        by_g: dict[str, list[dict]] = {}
        for s in stalls:
            by_g.setdefault(s["group"], []).append(s)
        g = max(by_g, key=lambda k: (len({r for r in culprits if any(x["group"] == k for x in
                                                                   st.device_stalled.get(r, []))}),
                                     max(x["peers_completed"] - x["completed"] for x in by_g[k])))
        seq = min(x["seq"] for x in by_g[g])
        op = _op_at(inp, g, seq)
        return g, seq, op
    return "", -1, ""


def _source_at(inp: HangInputs, g: str, seq: int, facts: StderrFacts) -> str:
    """The best source that shows the wait at (g, seq): a dump, a COLL line, a watchdog line, else stderr."""
    c = inp.calls[(inp.calls["group"] == g) & (inp.calls["seq"] == seq)] if g else inp.calls.iloc[0:0]
    for src in ("flight_recorder", "nccl_log", "watchdog"):
        if (c["source"] == src).any():
            return src
    return "flight_recorder" if inp.dumps else ("stderr" if facts.ranks else "nccl_log")


def _divergence_seq(st: RankStates, kind: str, g: str, culprits: list[int], wait_seq: int) -> int:
    """Where culprits diverged in group g: the first collective a laggard never issued, the first a stalled rank
    never saw complete; for a rank that left nothing, where the others wait."""
    if kind in ("lagging_rank", "missing_rank"):
        enq = [st.enqueued[(g, r)] for r in culprits if (g, r) in st.enqueued]
        return min(enq) + 1 if enq else wait_seq
    if kind == "device_stalled":
        done = [st.completed[(g, r)] for r in culprits if (g, r) in st.completed]
        return min(done) + 1 if done else wait_seq
    return wait_seq


def _op_at(inp: HangInputs, g: str, seq: int) -> str:
    c = inp.calls[(inp.calls["group"] == g) & (inp.calls["kind"] == "coll") & (inp.calls["seq"] == seq)]
    return str(c["op"].mode().iloc[0]) if len(c) else ""


def _calls_at(inp: HangInputs, g: str, seq: int, ranks: list[int]) -> list[tuple]:
    c = inp.calls[(inp.calls["group"] == g) & (inp.calls["seq"] == seq) & inp.calls["rank"].isin(ranks)]
    return [(str(x.file), None if int(x.line) < 0 else int(x.line), str(x.text) + (f" at {x.frame}" if x.frame else ""))
            for x in c.sort_values("rank").itertuples(index=False)]


def _root(inp: HangInputs, st: RankStates, edges: pd.DataFrame, kind: str, culprits: list[int], cause: str,
          conf: float, facts: StderrFacts) -> HangDiagnosis:
    """A diagnosis for ranks at the head of chains, placed at the group/seq where the others wait for them."""
    g, seq, op = _best_group(inp, st, edges, culprits, kind)
    seq = _divergence_seq(st, kind, g, culprits, seq)
    op = _op_at(inp, g, seq) or op if g else op
    d = HangDiagnosis(kind=kind, process_group=g, pg_desc=_desc(inp, g), seq=seq if seq >= 0 else None, op=op,
                      culprit_ranks=sorted(culprits), waiting_ranks=[], cause=cause, confidence=conf,
                      source=_source_at(inp, g, seq, facts))
    at = inp.calls[(inp.calls["group"] == g) & (inp.calls["kind"] == "coll") & (inp.calls["seq"] == seq)] if g else None
    if at is not None and len(at):
        for x in at.itertuples(index=False):
            d.ops[int(x.rank)], d.sizes[int(x.rank)] = str(x.op), int(x.numel_in)
            d.dtypes[int(x.rank)] = str(x.dtype_in)
    d.evidence.extend(_failure_evidence(facts, culprits))
    if g:
        d.evidence.extend(_status_evidence(inp, g, sorted(set(culprits) | set(
            edges.loc[(edges["group"] == g) & edges["target"].isin(culprits), "waiter"]) if len(edges) else set())))
        d.evidence.extend(_calls_at(inp, g, seq, culprits)[:4])
    return d


def _cycle_diag(inp: HangInputs, st: RankStates, edges: pd.DataFrame, comp: list[int]) -> HangDiagnosis:
    """Ranks waiting for each other. Across ≥ 2 groups: an order inversion; name the rank whose order differs."""
    e = edges[edges["waiter"].isin(comp) & edges["target"].isin(comp)]
    groups = sorted(set(e["group"]))
    where = "; ".join(f"rank {b.rank} waits in group {b.group} ({_desc(inp, b.group)}) {b.op} #{b.seq} for "
                      f"{ranks_text([t for t in b.targets if t in comp])}" for r in comp if (b := st.blocked.get(r)))
    if len(groups) >= 2:
        odd, tie = _order_outlier(inp, st, comp)
        culprits = odd if not tie else comp
        awaited = e[e["target"].isin(culprits)]  # where the others wait for the culprit: the earliest wait first
        awaited = awaited.assign(t0=awaited["created_ns"].where(awaited["created_ns"] > 0)).sort_values(
            ["t0", "seq"], na_position="last")
        g, s, op = (str(awaited.iloc[0]["group"]), int(awaited.iloc[0]["seq"]), str(awaited.iloc[0]["op"])) \
            if len(awaited) else (st.blocked[culprits[0]].group, st.blocked[culprits[0]].seq,
                                  st.blocked[culprits[0]].op)
        d = HangDiagnosis(kind="order_inversion", process_group=g, pg_desc=_desc(inp, g), seq=s,
                          op=op, culprit_ranks=sorted(culprits), waiting_ranks=[], tie=tie,
                          confidence=0.45 if tie else 0.8, source="flight_recorder",
                          cause=("deadlock across process groups " + ", ".join(groups) + ": " + where
                                 + ("" if tie else f"; {ranks_text(culprits)} entered the groups in a different order "
                                                   "than their own history (and the other ranks) say")))
    else:
        b = st.blocked[comp[0]]
        d = HangDiagnosis(kind="deadlock", process_group=b.group, pg_desc=_desc(inp, b.group), seq=b.seq, op=b.op,
                          culprit_ranks=sorted(comp), waiting_ranks=[], tie=True, confidence=0.45,
                          source="flight_recorder", cause="ranks wait for each other: " + where)
    for r in comp:
        if (b := st.blocked.get(r)) is not None:
            row = b.row
            d.evidence.append((str(row["file"]), None, str(row["text"]) + (f" at {row['frame']}" if row["frame"] else "")))
    return d


def _order_outlier(inp: HangInputs, st: RankStates, comp: list[int]) -> tuple[list[int], bool]:
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
        pos = c.index[(c["group"] == b.group) & (c["seq"] == b.seq)]
        if not len(pos):
            continue
        hist = list(c["group"].iloc[:c.index.get_loc(pos[0])])
        nxt = p2p.period_next(hist)
        if nxt is None and len(hist) >= 2:  # no clean period: the group that most often followed the last one
            succ = Counter(hist[k + 1] for k in range(len(hist) - 1) if hist[k] == hist[-1])
            nxt = succ.most_common(1)[0][0] if succ else None
        if nxt is not None and nxt != b.group:
            odd.append(r)
    if odd and len(odd) < len(comp):
        return sorted(odd), False
    return sorted(comp), True


def _p2p_root(inp: HangInputs, st: RankStates, r: int) -> HangDiagnosis | None:
    """Two ranks blocked on the same send/recv: a stuck pair (neither is waiting on anyone else)."""
    b = st.blocked.get(r)
    if b is None or b.stuck_pair < 0:
        return None
    pair = sorted({r, b.stuck_pair})
    return HangDiagnosis(kind="stuck_p2p", process_group=b.group, pg_desc=_desc(inp, b.group), seq=None, op=b.op,
                         culprit_ranks=pair, waiting_ranks=[], tie=True, confidence=0.45, source="flight_recorder",
                         p2p={"src": r if b.op == "send" else b.stuck_pair,
                              "dst": b.stuck_pair if b.op == "send" else r, "tag": None},
                         cause=f"ranks {pair[0]} and {pair[1]} both posted a send/recv to each other in group "
                               f"{b.group} and neither completed", evidence=[(str(b.row["file"]), None, str(b.row["text"]))])


def build(inp: HangInputs, st: RankStates, edges: pd.DataFrame, divs: list[Divergence],
          facts: StderrFacts, lates: list[Divergence] = ()) -> tuple[list[HangDiagnosis], dict[int, str]]:
    """Ranked root diagnoses and the reason each rank without a dump has none (module docstring)."""
    diags: list[HangDiagnosis] = []
    claimed: set[int] = set()
    # a rank that died in a send/recv (stderr) is not waiting in the collective its dump ends with: that wait is
    # stale (gloo records no send/recv, so the dump's last entry is an older collective)
    blocked_p2p = p2p.blocked_directions(facts)
    if blocked_p2p and len(edges):
        edges = edges[~(edges["waiter"].isin(list(blocked_p2p)) & (edges["kind"] == "coll"))]
    world = set(inp.world) | set(facts.ranks)
    no_dump = _no_dump_reasons(inp, facts, world)
    if facts.rendezvous and not inp.dumps and not any(f.timed_out for f in facts.ranks.values()):
        diags.append(_rendezvous(facts))
    # 1-2: mismatches at a shared sequence number, ties broken only by a suspect's own error; the debug wrapper's
    # own comparison (TORCH_DISTRIBUTED_DEBUG=DETAIL) when no dump shows it
    if not divs and (x := _detail_mismatch(inp, facts)) is not None:
        diags.append(x)
        claimed |= set(x.culprit_ranks)
    div_groups = {d.group: d for d in divs}
    for d in divs:
        x = from_divergence(inp, d, facts)
        diags.append(x)
        claimed |= set(x.culprit_ranks)
    # origin failures in stderr that no mismatch already explains (a gloo size abort inside a group that shows a
    # divergence is that divergence seen from the receiving side)
    explained = {r for r in facts.origin_ranks() if _size_abort(facts, r) and any(
        r in (inp.groups[d.group].members or ()) for d in divs if d.group in inp.groups)}
    for x in _size_abort_majorities(inp, facts, claimed | explained):
        diags.append(x)
        claimed |= set(x.culprit_ranks)
        explained |= set(x.waiting_ranks)
    origins = [r for r in facts.origin_ranks() if r not in claimed and r not in explained]
    by_kind: dict[tuple[str, str], list[int]] = {}
    for r in origins:  # one diagnosis per kind of failure (out of memory, a GPU error, an exception, ...)
        o = facts.ranks[r].origin
        by_kind.setdefault((_origin_kind(o), o.get("kind", "")), []).append(r)
    claimed |= explained
    for (kind, _), ranks in by_kind.items():
        o = facts.ranks[ranks[0]].origin
        cause = "; ".join(origin_sentence(r, facts.ranks[r].origin) for r in ranks[:4])
        nodump = [r for r in ranks if r not in inp.dumps]
        if nodump and inp.dumps:
            cause += f" ({ranks_text(nodump)} left no Flight Recorder dump)"
        x = _root(inp, st, edges, kind, ranks, cause, 0.9 if o["kind"] != "signal" else 0.8, facts)
        _refine_by_call_site(inp, st, edges, facts, x)
        if kind == "mismatched_size":
            _dtype_from_abort(inp, facts, x)
        diags.append(x)
        claimed |= set(ranks)
    # 3: ranks that wait for each other
    for comp in cycles(edges):
        if set(comp) & claimed:
            continue
        diags.append(_cycle_diag(inp, st, edges, comp))
        claimed |= set(comp)
    # 4: device stalls not explained by an earlier mismatch in the same group
    stalled = [r for r, v in sorted(st.device_stalled.items()) if r not in claimed
               and not any(s["group"] in div_groups and s["seq"] >= div_groups[s["group"]].seq for s in v)]
    if stalled:
        strong = [r for r in stalled if len(st.device_stalled[r]) >= 2 or
                  any(s["peers_completed"] - s["completed"] >= 2 for s in st.device_stalled[r])]
        conf = 0.85 if strong and len(strong) == len(stalled) else 0.6
        cause = "; ".join(f"rank {r} completed only up to seq {s['completed']} in group {s['group']} "
                          f"({_desc(inp, s['group'])}) while its peers completed {s['peers_completed']}"
                          for r in stalled for s in st.device_stalled[r][:2])
        diags.append(_root(inp, st, edges, "device_stalled", stalled,
                           "their own work stopped completing though their peers finished the same collectives: "
                           + cause, conf, facts))
        claimed |= set(stalled)
    # send/recv that no dump records (gloo): a rank that broke its own P2P pattern, or ranks that died in a P2P
    for x in _p2p_roots(inp, facts, blocked_p2p, claimed):
        diags.append(x)
        claimed |= set(x.culprit_ranks)
        extra = [dict(waiter=r, target=c, group=x.process_group, seq=-1, kind="p2p", op=blocked_p2p.get(r, ""),
                      absent=False, unknown=False, created_ns=-1)
                 for r in blocked_p2p if r not in x.culprit_ranks for c in x.culprit_ranks]
        if extra:
            edges = pd.concat([edges, pd.DataFrame(extra, columns=edges.columns)], ignore_index=True)
    claimed |= {r for r in blocked_p2p if any(r in (d.culprit_ranks + d.waiting_ranks) for d in diags)}
    # late arrivals: everyone issued the call, but one rank only after the others' timeout had run out
    for la in lates:
        if set(la.culprits) & claimed:
            continue
        d = HangDiagnosis(kind="lagging_rank", process_group=la.group, pg_desc=_desc(inp, la.group), seq=la.seq,
                          op=_op_at(inp, la.group, la.seq), culprit_ranks=la.culprits, waiting_ranks=[],
                          confidence=0.8, source="flight_recorder", cause=la.cause,
                          evidence=[_ev_row(r) for r in la.rows])
        d.waiting_ranks = sorted(set(la.present) - set(la.culprits))
        diags.append(d)
        claimed |= set(d.culprit_ranks)
    # 5-6: heads of chains that are not blocked themselves
    heads = _heads(edges, st, claimed | set(blocked_p2p))
    for kind, ranks in heads.items():
        conf = {"lagging_rank": 0.75, "missing_rank": 0.75, "crashed_rank": 0.6, "unknown_rank": 0.45}[kind]
        silent = [r for r in ranks if kind == "crashed_rank" and r in facts.seen and not _failed_itself(facts, r)]
        if silent and len(silent) == len(ranks):
            kind, conf = "missing_rank", 0.7
            cause = (f"{ranks_text(ranks)} left no dump, and their own output shows no error and no death: they never "
                     f"joined the collective the others {_wait_text(st, edges, ranks)} (they left their loop early — "
                     "fewer batches than the others — or are stuck outside collectives)")
        elif kind == "crashed_rank":
            why = {r: no_dump.get(r, "") for r in ranks}
            where = _wait_text(st, edges, ranks)
            cause = (f"{ranks_text(ranks)} left no Flight Recorder dump or record while the others {where}: "
                     + "; ".join(f"rank {r}: {w}" for r, w in why.items() if w)) if any(why.values()) else \
                (f"{ranks_text(ranks)} left no Flight Recorder dump or record while the others {where}: they most "
                 "likely crashed or were killed before they could dump (or their dumps are not in the folder)")
        elif kind == "unknown_rank":
            kind = "missing_rank"
            cause = (f"the others wait at a collective every rank with a record issued; {ranks_text(ranks)} left records "
                     "but none of this group, so they are the only candidates (not proven)")
        elif (x := _failed_where_others_passed(inp, st, edges, facts, ranks)) is not None:
            diags.append(x)
            claimed |= set(ranks)
            continue
        else:
            g, seq, _ = _best_group(inp, st, edges, ranks)
            lag = {r: st.enqueued.get((g, r), -1) for r in ranks}
            cause = (f"{ranks_text(ranks)} stopped issuing collectives (last enqueued in group {g}: "
                     f"{per_rank_text(lag)}) while others wait for them at seq {seq}; they are not waiting in any "
                     "collective themselves")
        diags.append(_root(inp, st, edges, kind, ranks, cause, conf, facts))
        claimed |= set(ranks)
    for r in sorted(st.blocked):
        if r not in claimed and (p := _p2p_root(inp, st, r)) is not None:
            diags.append(p)
            claimed |= set(p.culprit_ranks)
    if not diags:
        diags.extend(_silent_members(inp, facts, blocked_p2p))
    if not diags:
        diags.extend(_call_site_outliers(inp, facts))
    if not diags:
        diags.extend(_timeouts_only(inp, facts))
    inp.warnings.extend(_quiet_absent(inp, st, edges))
    for d in diags:
        culprits = set(d.culprit_ranks)
        d.waiting_ranks = sorted((set(d.waiting_ranks) | _waiters_of(edges, culprits) | _group_waiters(inp, d))
                                 - culprits)
        d.explains = [x for x in _explains(edges, culprits, inp)
                      if not (x["process_group"] == d.process_group and x["seq"] == d.seq)]
        d.fix = d.fix or FIX.get(d.kind, "")
    diags.sort(key=lambda d: (_order(d), -len(d.waiting_ranks), -d.confidence,
                              d.seq if d.seq is not None else 1 << 62, d.process_group))
    return diags, no_dump


ROOTED_OPS = {"broadcast", "reduce", "gather", "scatter"}


def _failed_where_others_passed(inp: HangInputs, st: RankStates, edges: pd.DataFrame, facts: StderrFacts,
                                ranks: list[int]) -> HangDiagnosis | None:
    """Ranks that stopped at one collective which every member issued and the others completed, while their own
    call of it failed (their stderr: a timeout or lost peer inside the collective). They are not lagging: they
    were inside it. The members disagree on an argument Flight Recorder does not record (a rooted op's root, the
    reduce op) or the path between these ranks broke; which of them is wrong the dumps cannot say (a tie)."""
    g, _, _ = _best_group(inp, st, edges, ranks)
    if not g or g not in inp.groups or not all(facts.ranks.get(r) and facts.ranks[r].timed_out for r in ranks):
        return None
    last = {st.enqueued.get((g, r), -1) for r in ranks}
    if len(last) != 1 or (seq := last.pop()) < 0:
        return None
    members = set(inp.groups[g].members or ())
    c = inp.calls[(inp.calls["group"] == g) & (inp.calls["kind"] == "coll") & (inp.calls["seq"] == seq)]
    issued = set(int(r) for r in c["rank"])
    passed = sorted(r for r in members - set(ranks)  # went on to a later call of the group, or completed this one
                    if st.enqueued.get((g, r), -1) > seq or st.completed.get((g, r), -1) >= seq)
    if not members or not members <= issued or not passed:
        return None
    op = _op_at(inp, g, seq)
    hint = (f"{op} is rooted: a different root (src/dst) on some member leaves exactly this pattern, and Flight "
            "Recorder does not record the root" if op in ROOTED_OPS else
            "Flight Recorder records no root or reduce op, so a disagreement there is invisible to it")
    cause = (f"every member of group {g} ({_desc(inp, g)}) issued {op} #{seq}; {ranks_text(passed)} completed it and "
             f"went on, while on {ranks_text(ranks)} it failed (their stderr: a timeout or a lost peer inside the "
             f"collective) and they issued nothing after it. The members disagree on an argument of that call or "
             f"the path between {ranks_text(ranks)} broke; {hint}. The dumps cannot tell which of "
             f"{ranks_text(ranks)} is wrong")
    d = HangDiagnosis(kind="mismatched_op", process_group=g, pg_desc=_desc(inp, g), seq=seq, op=op,
                      culprit_ranks=sorted(ranks), waiting_ranks=[], cause=cause, confidence=0.45,
                      source="flight_recorder", tie=True)
    for x in c.itertuples(index=False):
        d.ops[int(x.rank)], d.sizes[int(x.rank)], d.dtypes[int(x.rank)] = str(x.op), int(x.numel_in), str(x.dtype_in)
    d.evidence.extend(_status_evidence(inp, g, sorted(members)))
    d.evidence.extend(_failure_evidence(facts, sorted(ranks)))
    return d


def _wait_text(st: RankStates, edges: pd.DataFrame, targets: list[int]) -> str:
    """'wait after seq 3, at seq 4' (waiters completed everything before) or 'wait at seq 4'."""
    e = edges[edges["target"].isin(targets)]
    if e.empty:
        return "wait"
    s = int(e["seq"].min())
    g = str(e.loc[e["seq"] == s, "group"].iloc[0])
    done = {st.completed.get((g, int(w)), -1) for w in e.loc[e["seq"] == s, "waiter"]}
    return f"wait after seq {s - 1}, at seq {s}" if done == {s - 1} else f"wait at seq {s}"


def _quiet_absent(inp: HangInputs, st: RankStates, edges: pd.DataFrame) -> list[str]:
    """Warnings for groups whose members left no record while nobody present is seen waiting for them."""
    out = []
    awaited = set(int(t) for t in edges["target"]) if len(edges) else set()
    for key, g in sorted(inp.groups.items()):
        absent = sorted(m for m in g.members or () if m not in inp.dumps and m not in inp.log_ranks
                        and m not in awaited)
        present = sorted(m for m in g.members or () if (key, m) in st.enqueued)
        if absent and present and not any(b.group == key for b in st.blocked.values()):
            upto = ", ".join(f"rank {r} through seq {st.enqueued[(key, r)]}" for r in present)
            out.append(f"group {key} ({g.desc}): {ranks_text(absent)} left no Flight Recorder dump or record; the "
                       f"others completed every collective they issued ({upto}) and nothing timed out, so there is "
                       "no sign of a hang in this group")
    return out


def _refine_by_call_site(inp: HangInputs, st: RankStates, edges: pd.DataFrame, facts: StderrFacts,
                         d: HangDiagnosis) -> None:
    """For a culprit known only from its traceback (no dump): was its fatal collective an extra one, or made
    after it left the loop the others are in? Its call stack against the group's recorded call sites."""
    if len(d.culprit_ranks) != 1 or d.kind not in ("mismatched_size", "crashed_rank") or not d.process_group:
        return
    from analyzer.hang.matching import call_site_kind, user_stack
    from analyzer.hang.stderr_facts import COLLECTIVE_APIS
    r = d.culprit_ranks[0]
    if r not in facts.ranks or facts.ranks[r].blocked_in not in COLLECTIVE_APIS:
        return  # its traceback is not a collective call (an exception in its own code), or it has none
    c = inp.calls[(inp.calls["group"] == d.process_group) & (inp.calls["kind"] == "coll")]
    kind = call_site_kind(user_stack(facts.ranks[r].stack), {user_stack(x) for x in c["stack"]})
    if kind == "left_loop":
        d.kind = "missing_rank"
        d.cause = (f"rank {r}'s last collective came from outside the loop every recorded collective of the group "
                   "came from (it ran out of batches or left early), so it never joined the one the others wait in; "
                   + d.cause)
    elif kind == "extra":
        d.kind = "extra_collective"
        d.cause = (f"rank {r} issued a collective from a call site the others never used (a collective in a "
                   "rank-dependent branch); " + d.cause)


def _rendezvous(facts: StderrFacts) -> HangDiagnosis:
    """The job never formed: a port in use, a store that could not be reached, a rendezvous that timed out."""
    first = facts.rendezvous[0]
    kinds = sorted({x["kind"] for x in facts.rendezvous})
    what = {"rendezvous_eaddrinuse": "the rendezvous port was already in use (EADDRINUSE)",
            "rendezvous_refused": "the ranks could not connect to the rendezvous store (MASTER_ADDR:MASTER_PORT "
                                  "refused or timed out)",
            "store_timeout": "the rendezvous store timed out before every rank joined",
            "rendezvous_timeout": "the rendezvous timed out before every node joined (a node never started, or "
                                  "could not reach the rendezvous endpoint)",
            "rendezvous_error": "the rendezvous failed"}
    return HangDiagnosis(kind="rendezvous_failure", process_group="", pg_desc="", seq=None, op="",
                         culprit_ranks=[], waiting_ranks=[], confidence=0.9, source="stderr",
                         cause="; ".join(what.get(k, k) for k in kinds) + (f" ({first['peer']})" if first.get("peer", -1)
                                                                            not in (-1, "") else ""),
                         evidence=[(x["file"], x["line"], x["text"]) for x in facts.rendezvous[:4]])


_ASPECT = {"Op type": "mismatched_op", "Tensor shape": "mismatched_size", "Tensor dtype": "mismatched_dtype"}


def _detail_mismatch(inp: HangInputs, facts: StderrFacts) -> HangDiagnosis | None:
    """TORCH_DISTRIBUTED_DEBUG=DETAIL reports 'Rank A is running X, but Rank B is running Y' on each rank: the op
    every report gives each rank, then a majority (the fingerprint numbers collectives from 0, dumps from 1)."""
    reps = facts.mismatch_reports
    if not reps:
        return None
    ops: dict[int, str] = {}
    kind = "mismatched_op"
    for x in reps:
        r, peer = int(x.get("rank", -1)), int(x.get("peer", -1))
        m = re.search(r"(Op type|Tensor shape|Tensor dtype)s?:\s*(\S+?)\s*vs\s*(\S+)", x.get("reason", ""), re.I)
        if m:
            kind = _ASPECT.get(m.group(1).capitalize(), kind)
        if r >= 0 and x.get("op"):
            ops.setdefault(r, str(x["op"]).lower())
        if peer >= 0 and m:
            ops.setdefault(peer, m.group(3).lower())
    if len(ops) < 2:
        return None
    from analyzer.hang.matching import majority
    _, odd, tie = majority(ops)
    seq = max((int(x.get("seq", -1)) for x in reps), default=-1)
    return HangDiagnosis(kind=kind, process_group="", pg_desc="", seq=seq + 1 if seq >= 0 else None,
                         op=Counter(ops.values()).most_common(1)[0][0], culprit_ranks=odd, waiting_ranks=[],
                         ops=ops, tie=tie, confidence=0.45 if tie else 0.85, source="stderr",
                         cause=("the debug wrapper (TORCH_DISTRIBUTED_DEBUG=DETAIL) compared the ranks' calls: "
                                + ", ".join(f"rank {r}: {o}" for r, o in sorted(ops.items()))),
                         evidence=[(x["file"], x["line"], x["text"][:400]) for x in reps[:3]])


def _p2p_roots(inp: HangInputs, facts: StderrFacts, blocked: dict[int, str], claimed: set[int]
               ) -> list[HangDiagnosis]:
    """P2P roots the dumps cannot show: a gloo rank whose unrecorded-op count broke its pattern (it left a send or
    recv out), else the ranks that died waiting in a send and a recv (a stuck pair: wrong tag or peer)."""
    anoms = [a for a in p2p.gloo_anomalies(inp) if a.rank not in claimed]
    senders, receivers = p2p.senders_receivers(blocked)
    out = []
    if anoms:
        culprits = sorted({a.rank for a in anoms})
        a = anoms[0]
        fewer = a.issued < a.usual
        partner = [r for r in (senders if fewer else receivers) if r not in culprits]
        src, dst = (partner[0], a.rank) if fewer and len(partner) == 1 else \
            ((a.rank, partner[0]) if len(partner) == 1 else (None, None))
        cause = "; ".join(f"rank {x.rank} issued {x.issued} send/recv op(s) before collective #{x.seq} of group "
                          f"{x.group} where its own repeating pattern issues {x.usual}" for x in anoms)
        cause += (": it left a send/recv out (or added one), so its peer's transfer never matched"
                  + (f" — the stuck pair is {p2p.pair_text(src, dst)}" if src is not None else ""))
        ev = [(str(r.file), None, str(r.text)) for r in inp.calls[
            (inp.calls["rank"].isin(culprits)) & (inp.calls["group"] == a.group) & (inp.calls["seq"] == a.seq)
            & (inp.calls["kind"] == "coll")].itertuples(index=False)]
        out.append(HangDiagnosis(kind="p2p_mismatch", process_group=a.group, pg_desc=_desc(inp, a.group), seq=None,
                                 op="send/recv", culprit_ranks=culprits, waiting_ranks=[], confidence=0.75,
                                 source="flight_recorder", p2p={"src": src, "dst": dst, "tag": None}, cause=cause,
                                 evidence=ev + _failure_evidence(facts, [r for r in (src, dst) if r is not None])))
    elif senders and receivers and not (set(senders) | set(receivers)) & claimed:
        src = senders[0] if len(senders) == 1 else None
        dst = receivers[0] if len(receivers) == 1 else None
        pair = sorted(set(senders) | set(receivers))
        out.append(HangDiagnosis(
            kind="p2p_mismatch", process_group="", pg_desc="", seq=None, op="send/recv", culprit_ranks=pair,
            waiting_ranks=[], tie=True, confidence=0.45, source="stderr", p2p={"src": src, "dst": dst, "tag": None},
            cause=(f"{ranks_text(senders)} died waiting in a send and {ranks_text(receivers)} in a recv, with no other failure: "
                   f"the transfer {p2p.pair_text(src, dst)} never matched (a wrong tag or peer on one side; the "
                   "evidence does not say which)" if src is not None and dst is not None else
                   f"{ranks_text(senders)} died waiting in sends and {receivers} in receives, with no other failure"),
            evidence=_failure_evidence(facts, pair)))
    return out


def _silent_members(inp: HangInputs, facts: StderrFacts, blocked_p2p: dict[int, str]) -> list[HangDiagnosis]:
    """Without dumps: some ranks timed out in collectives while the others of the world neither timed out nor
    failed (they were still running, or killed by the launcher): the silent ones are whom the others waited for."""
    timed = {r for r, f in facts.ranks.items() if f.timed_out and r not in blocked_p2p}
    world = set(inp.world) | facts.seen | set(facts.ranks)
    if inp.dumps or not timed or not world:
        return []
    silent = sorted(r for r in world - timed - set(blocked_p2p) if not _failed_itself(facts, r))
    if not silent or len(silent) * 2 > len(world):
        return []
    apis = sorted({facts.ranks[r].blocked_in for r in timed if facts.ranks[r].blocked_in})
    ev = _failure_evidence(facts, silent)
    for r in sorted(timed)[:3]:
        ev.extend((c["file"], c["line"], c["text"]) for c in facts.ranks[r].consequences[:1])
    return [HangDiagnosis(
        kind="lagging_rank", process_group="", pg_desc="", seq=None, op=apis[0] if len(apis) == 1 else "",
        culprit_ranks=silent, waiting_ranks=sorted(timed), confidence=0.65, source="stderr", evidence=ev,
        cause=(f"{ranks_text(sorted(timed))} timed out waiting in {', '.join(apis) or 'collectives'} while "
               f"{ranks_text(silent)} neither timed out nor failed (they were still running until the launcher stopped them): "
               "the others waited for them"))]


def _sites(facts: StderrFacts) -> dict[str, list[int]]:
    """Where each rank that timed out without a failure of its own was waiting: its user-code stack (function:line,
    outermost first) and the API it waited in."""
    out: dict[str, list[int]] = {}
    for r, f in sorted(facts.ranks.items()):
        if f.timed_out and not f.origin and f.stack:
            site = " › ".join(f.stack.split(";"))
            last = f.stack.split(";")[-1].split(":")[0]
            out.setdefault(site if f.blocked_in in ("", last) else f"{site} in {f.blocked_in}", []).append(r)
    return out


def _call_site_outliers(inp: HangInputs, facts: StderrFacts) -> list[HangDiagnosis]:
    """No dump shows the hang, but the ranks' tracebacks do: most ranks timed out at one call site and a few at
    another (a barrier after the loop, a send of their own). The few are not where the others wait for them: they
    are the suspects (a majority rule over call sites, as over ops in a dump)."""
    sites = _sites(facts)
    if len(sites) < 2:
        return []
    ranked = sorted(sites.items(), key=lambda kv: -len(kv[1]))
    (main_site, main), rest = ranked[0], ranked[1:]
    odd = sorted(r for _, rs in rest for r in rs)
    if len(main) < 2 or len(main) <= len(odd) or len(ranked[1][1]) == len(main):
        return []
    p2p_only = all(facts.ranks[r].blocked_in_p2p for r in odd)
    if p2p_only and any(facts.ranks[r].p2p_direction != "send" for r in odd):
        return []  # blocked in a recv: it waits for a sender that went on; stderr does not say which (below)
    kind = "p2p_mismatch" if p2p_only else "missing_rank"
    where = "; ".join(f"{ranks_text(rs)} timed out at {site}" for site, rs in rest)
    cause = (f"no dump shows the hang, but the tracebacks do: {ranks_text(main)} timed out at one call site "
             f"({main_site}) while {where}: "
             + ("they were blocked in a send of their own that no receiver took (an extra send, or a receiver that "
                "skipped its recv)" if p2p_only else "they never joined the collective the others wait in")
             + " (a majority rule over the ranks' call sites; stderr only, so not proven)")
    ev = []
    for r in odd + main[:2]:
        ev.extend((c["file"], c["line"], c["text"]) for c in facts.ranks[r].consequences[:1])
    return [HangDiagnosis(kind=kind, process_group="", pg_desc="", seq=None, op=facts.ranks[main[0]].blocked_in,
                          culprit_ranks=odd, waiting_ranks=sorted(main), evidence=ev, confidence=0.5 if p2p_only else 0.6,
                          source="stderr", cause=cause)]


def _timeouts_only(inp: HangInputs, facts: StderrFacts) -> list[HangDiagnosis]:
    """Ranks timed out but nothing says who is to blame: one watchdog_timeout diagnosis with no culprit."""
    e = inp.errors[inp.errors["kind"] == "timeout"] if len(inp.errors) else inp.errors
    timed = sorted(set(int(r) for r in e["rank"])) if len(e) else []
    timed += [r for r, f in sorted(facts.ranks.items()) if f.timed_out and r not in timed]
    if not timed:
        return []
    g = str(e.sort_values("seq").iloc[0]["group"]) if len(e) else ""
    seq = int(e.sort_values("seq").iloc[0]["seq"]) if len(e) else None
    ev = [(str(x.file), int(x.line), str(x.text)) for x in e.head(4).itertuples()] if len(e) else []
    for r in timed[:4]:
        ev.extend(c_ev for c in facts.ranks[r].consequences[:1] if r in facts.ranks
                  for c_ev in [(c["file"], c["line"], c["text"])]) if r in facts.ranks else None
    return [HangDiagnosis(kind="watchdog_timeout", process_group=g, pg_desc=_desc(inp, g), seq=seq, op="",
                          culprit_ranks=[], waiting_ranks=timed, evidence=ev, confidence=0.3,
                          source="watchdog" if len(e) else "stderr",
                          cause=_timeouts_cause(facts))]


def _timeouts_cause(facts: StderrFacts) -> str:
    sites = _sites(facts)
    recv = [r for r, f in sorted(facts.ranks.items()) if f.timed_out and f.blocked_in_p2p and f.p2p_direction == "recv"]
    if len(sites) >= 2 and recv:
        return (f"collectives timed out while {ranks_text(recv)} waited in a recv of {'their' if len(recv) > 1 else 'its'} "
                "own (" + "; ".join(f"{ranks_text(rs)} at {site}" for site, rs in sites.items()) + "): a rank that "
                "should have sent to them went on without sending; stderr does not say which")
    if len(sites) >= 2:
        return ("collectives timed out at different call sites (" + "; ".join(
            f"{ranks_text(rs)} at {site}" for site, rs in sites.items()) + ") with no majority to tell the odd ranks "
            "from the rest: the evidence here cannot name a culprit")
    return ("collectives timed out, but every rank that reported agrees on op, size and sequence and none is seen "
            "behind: the culprit left no trace here")


def _order(d: HangDiagnosis) -> int:
    """Rank of a diagnosis kind; a rank that merely left nothing (no reason known) comes after visible laggards."""
    if d.kind == "crashed_rank" and d.confidence < 0.7:
        return 6
    return KIND_ORDER.get(d.kind, 8)


def _group_waiters(inp: HangInputs, d: HangDiagnosis) -> set[int]:
    """For a mismatch: the other members present at that seq wait in it."""
    if d.kind in KIND_ORDER and KIND_ORDER[d.kind] == 0 and d.process_group in inp.groups:
        c = inp.calls[(inp.calls["group"] == d.process_group) & (inp.calls["seq"] == d.seq)]
        return set(int(r) for r in c["rank"])
    return set()


def _origin_kind(o: dict) -> str:
    """The diagnosis kind an origin failure stands for."""
    k = o.get("kind", "")
    if k in ("gloo_size_mismatch", "gloo_invalid_tensor_size"):
        return "mismatched_size"
    if k == "nccl_error":
        return "nccl_error"
    return "crashed_rank"


def _heads(edges: pd.DataFrame, st: RankStates, claimed: set[int]) -> dict[str, list[int]]:
    """Targets of waits that wait for nobody: absent ranks (crashed) and idle ranks with data (stalled/missing)."""
    if edges.empty:
        return {}
    waiters = set(int(x) for x in edges["waiter"])
    out: dict[str, list[int]] = {}
    for t in sorted(set(int(x) for x in edges["target"]) - waiters - claimed):
        absent = bool(edges.loc[edges["target"] == t, "absent"].any())
        if absent:
            out.setdefault("crashed_rank", []).append(t)
            continue
        if bool(edges.loc[edges["target"] == t, "unknown"].all()):
            out.setdefault("unknown_rank", []).append(t)
            continue
        direct = edges[edges["target"] == t]
        lag = max(max((v for (gg, _), v in st.enqueued.items() if gg == g), default=int(s))
                  - st.enqueued.get((str(g), t), -1) for g, s in zip(direct["group"], direct["seq"]))
        out.setdefault("lagging_rank" if lag >= 2 else "missing_rank", []).append(t)
    return out


def _no_dump_reasons(inp: HangInputs, facts: StderrFacts, world: set[int]) -> dict[int, str]:
    """Every rank of the world without a dump, with why (from stderr) when it can be told."""
    if not inp.dumps:
        return {}
    out = {}
    for r in sorted(world - set(inp.dumps)):
        f = facts.ranks.get(r)
        if f is not None and (f.origin or f.died):
            what = f.origin["text"][:200] if f.origin else ""
            out[r] = f"died ({f.how or 'exit'})" + (f": {what}" if what else "")
        elif r in inp.log_ranks:
            out[r] = "no dump, but its NCCL/watchdog log is present"
        else:
            out[r] = "no dump and no stderr from it among the inputs"
    return out
