"""Roots placed where the others wait for them: mismatches from divergences, heads of wait chains, ranks known
only from their stderr, and the group/seq that shows each best.
"""
from __future__ import annotations

from collections import Counter

import numpy as np

from parsers.table import Table, isin

from analyzer.hang.diagnosis import HangDiagnosis
from analyzer.hang.evidence import calls_at, ev_row, failure_evidence, group_desc, op_at, source_at, status_evidence
from analyzer.hang.inputs import HangInputs
from analyzer.hang.matching import Divergence
from analyzer.hang.size_abort import abort_side
from analyzer.hang.stderr_facts import StderrFacts
from analyzer.hang.waits import RankStates
from rules.phrases import ranks_text


def from_divergence(inp: HangInputs, d: Divergence, facts: StderrFacts) -> HangDiagnosis:
    """A mismatch root; a tie is broken only by evidence: a suspect's own error, or ranks gloo aborted."""
    culprits, tie, conf = list(d.culprits), d.tie, 0.9 if len(d.present) >= 3 else 0.8
    cause = d.cause
    side = abort_side(inp, d, facts) if tie else None
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
    x = HangDiagnosis(kind=d.kind, process_group=d.group, pg_desc=group_desc(inp, d.group), seq=d.seq,
                      op=Counter(d.ops.values()).most_common(1)[0][0] if d.ops else "", culprit_ranks=culprits,
                      waiting_ranks=[], ops=d.ops, sizes=d.sizes, dtypes=d.dtypes,
                      evidence=[ev_row(r) for r in sorted(d.rows, key=lambda r: r["rank"] not in culprits)],
                      cause=cause, source="flight_recorder", confidence=conf, tie=tie)
    x.evidence.extend(failure_evidence(facts, culprits))
    return x



def best_group(inp: HangInputs, st: RankStates, edges: Table, culprits: list[int],
                kind: str = "") -> tuple[str, int, str]:
    """(group, seq, op) that shows a root best: for stalled devices the group holding all culprits where their own
    work stopped (largest completion gap); otherwise where most ranks wait directly on the culprits."""
    direct = edges[isin(edges["target"], culprits)] if len(edges) else edges
    if len(direct) and kind != "device_stalled":
        # the wait that began first (earliest-created blocking call) is the first collective the culprits missed;
        # per (group, seq, op): distinct waiters n, distinct targets m, the earliest known creation time t0
        top = []
        for (g, seq, op), x in direct.groups(["group", "seq", "op"]):
            t = [v for v in x["created_ns"].tolist() if v > 0]
            top.append(dict(group=g, seq=seq, op=op, n=len(set(x["waiter"].tolist())),
                            m=len(set(x["target"].tolist())), t0=min(t) if t else float("inf")))
        top.sort(key=lambda r: (-r["m"], r["t0"], -r["n"], r["seq"]))  # most targets, earliest, most waiters
        covering = [r for r in top if r["m"] == len(set(culprits))]
        row = (covering or top)[0]
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
        op = op_at(inp, g, seq)
        return g, seq, op
    return "", -1, ""



def divergence_seq(st: RankStates, kind: str, g: str, culprits: list[int], wait_seq: int) -> int:
    """Where culprits diverged in group g: the first collective a laggard never issued, the first a stalled rank
    never saw complete; for a rank that left nothing, where the others wait."""
    if kind in ("lagging_rank", "missing_rank"):
        enq = [st.enqueued[(g, r)] for r in culprits if (g, r) in st.enqueued]
        return min(enq) + 1 if enq else wait_seq
    if kind == "device_stalled":
        done = [st.completed[(g, r)] for r in culprits if (g, r) in st.completed]
        return min(done) + 1 if done else wait_seq
    return wait_seq



def root_at(inp: HangInputs, st: RankStates, edges: Table, kind: str, culprits: list[int], cause: str,
          conf: float, facts: StderrFacts) -> HangDiagnosis:
    """A diagnosis for ranks at the head of chains, placed at the group/seq where the others wait for them."""
    g, seq, op = best_group(inp, st, edges, culprits, kind)
    seq = divergence_seq(st, kind, g, culprits, seq)
    op = op_at(inp, g, seq) or op if g else op
    d = HangDiagnosis(kind=kind, process_group=g, pg_desc=group_desc(inp, g), seq=seq if seq >= 0 else None, op=op,
                      culprit_ranks=sorted(culprits), waiting_ranks=[], cause=cause, confidence=conf,
                      source=source_at(inp, g, seq, facts))
    at = inp.calls[(inp.calls["group"] == g) & (inp.calls["kind"] == "coll") & (inp.calls["seq"] == seq)] if g else None
    if at is not None and len(at):
        for x in at.itertuples(index=False):
            d.ops[int(x.rank)], d.sizes[int(x.rank)] = str(x.op), int(x.numel_in)
            d.dtypes[int(x.rank)] = str(x.dtype_in)
    d.evidence.extend(failure_evidence(facts, culprits))
    if g:
        waiting = (edges["waiter"][(edges["group"] == g) & isin(edges["target"], culprits)].tolist()
                   if len(edges) else [])
        d.evidence.extend(status_evidence(inp, g, sorted(set(culprits) | set(waiting))))
        d.evidence.extend(calls_at(inp, g, seq, culprits)[:4])
    return d



def chain_heads(edges: Table, st: RankStates, claimed: set[int]) -> dict[str, list[int]]:
    """Targets of waits that wait for nobody: absent ranks (crashed) and idle ranks with data (stalled/missing)."""
    if edges.empty:
        return {}
    waiters = set(int(x) for x in edges["waiter"])
    # the edges grouped by target once (a 100,000-rank group has that many targets: no scan of all edges per target)
    tgt = np.asarray(edges["target"], np.int64)
    order = np.argsort(tgt, kind="stable")
    uniq, first = np.unique(tgt[order], return_index=True)
    bounds = dict(zip(uniq.tolist(), zip(first.tolist(), first[1:].tolist() + [len(tgt)])))
    absent, unknown = np.asarray(edges["absent"], bool), np.asarray(edges["unknown"], bool)
    groups, seqs = edges["group"], edges["seq"]
    top: dict[str, int] = {}  # the furthest call enqueued in each group by any rank
    for (gg, _), v in st.enqueued.items():
        top[str(gg)] = max(top.get(str(gg), v), v)
    out: dict[str, list[int]] = {}
    for t in sorted(set(bounds) - waiters - claimed):
        rows = order[bounds[t][0]:bounds[t][1]]
        if bool(absent[rows].any()):
            out.setdefault("crashed_rank", []).append(t)
            continue
        if bool(unknown[rows].all()):
            out.setdefault("unknown_rank", []).append(t)
            continue
        lag = max(top.get(str(groups[i]), int(seqs[i])) - st.enqueued.get((str(groups[i]), t), -1)
                  for i in rows.tolist())
        out.setdefault("lagging_rank" if lag >= 2 else "missing_rank", []).append(t)
    return out


ROOTED_OPS = {"broadcast", "reduce", "gather", "scatter"}



def failed_where_others_passed(inp: HangInputs, st: RankStates, edges: Table, facts: StderrFacts,
                                ranks: list[int]) -> HangDiagnosis | None:
    """Ranks that stopped at one collective which every member issued and the others completed, while their own
    call of it failed (their stderr: a timeout or lost peer inside the collective). They are not lagging: they
    were inside it. The members disagree on an argument Flight Recorder does not record (a rooted op's root, the
    reduce op) or the path between these ranks broke; which of them is wrong the dumps cannot say (a tie)."""
    g, _, _ = best_group(inp, st, edges, ranks)
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
    op = op_at(inp, g, seq)
    hint = (f"{op} is rooted: a different root (src/dst) on some member leaves exactly this pattern, and Flight "
            "Recorder does not record the root" if op in ROOTED_OPS else
            "Flight Recorder records no root or reduce op, so a disagreement there is invisible to it")
    cause = (f"every member of group {g} ({group_desc(inp, g)}) issued {op} #{seq}; {ranks_text(passed)} completed it and "
             f"went on, while on {ranks_text(ranks)} it failed (their stderr: a timeout or a lost peer inside the "
             f"collective) and they issued nothing after it. The members disagree on an argument of that call or "
             f"the path between {ranks_text(ranks)} broke; {hint}. The dumps cannot tell which of "
             f"{ranks_text(ranks)} is wrong")
    d = HangDiagnosis(kind="mismatched_op", process_group=g, pg_desc=group_desc(inp, g), seq=seq, op=op,
                      culprit_ranks=sorted(ranks), waiting_ranks=[], cause=cause, confidence=0.45,
                      source="flight_recorder", tie=True)
    for x in c.itertuples(index=False):
        d.ops[int(x.rank)], d.sizes[int(x.rank)], d.dtypes[int(x.rank)] = str(x.op), int(x.numel_in), str(x.dtype_in)
    d.evidence.extend(status_evidence(inp, g, sorted(members)))
    d.evidence.extend(failure_evidence(facts, sorted(ranks)))
    return d



def refine_by_call_site(inp: HangInputs, st: RankStates, edges: Table, facts: StderrFacts,
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



def origin_kind(o: dict) -> str:
    """The diagnosis kind an origin failure stands for."""
    k = o.get("kind", "")
    if k in ("gloo_size_mismatch", "gloo_invalid_tensor_size"):
        return "mismatched_size"
    if k == "nccl_error":
        return "nccl_error"
    return "crashed_rank"
