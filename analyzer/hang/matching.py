"""Compare what the members of one process group issued at each collective sequence number.

The rules are PyTorch's own (torch.distributed.flight_recorder): the op must agree; input sizes must agree except
for all_to_all and scatter, output sizes except for all_to_all and gather; dtypes must agree (inputs except for
scatter/broadcast, outputs except for gather). all_to_all splits differ by rank by design (MoE token routing), so
only the group's total elements sent vs received is checked, and only when every member is present. A coalesced
call (several entries sharing one sequence number) is compared as the whole list of its parts.

Who is wrong is decided by majority. When no value is held by more ranks than every other (two ranks that
disagree, 2-vs-2, ...) the divergence is a *tie*: all disagreeing ranks are suspects and the verdict stage may
break the tie only with other evidence (a rank that aborted, a rank with no dump).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from analyzer.hang.inputs import HangInputs
from rules.phrases import per_rank_text, ranks_text, values_text
from analyzer.hang.p2p import period_next
from parsers.table import Table

SIZE_FREE_IN = {"alltoall", "scatter"}
SIZE_FREE_OUT = {"alltoall", "gather"}
DTYPE_FREE_IN = {"scatter", "broadcast"}
DTYPE_FREE_OUT = {"gather"}


@dataclass
class Divergence:
    """The first sequence number of one group where members issued incompatible calls."""

    kind: str                       # mismatched_op | mismatched_size | mismatched_dtype | order_mismatch | ...
    group: str
    seq: int
    culprits: list[int]
    tie: bool
    present: list[int]
    ops: dict[int, str] = field(default_factory=dict)
    sizes: dict[int, int] = field(default_factory=dict)
    dtypes: dict[int, str] = field(default_factory=dict)
    rows: list[dict] = field(default_factory=list)
    cause: str = ""
    majority: Any = None


def _part_sig(op: str, sizes_in: str, sizes_out: str, dt_in: str, dt_out: str) -> tuple:
    """The fields of one call that PyTorch requires to agree across ranks for this op."""
    return (op, "" if op in SIZE_FREE_IN else sizes_in, "" if op in SIZE_FREE_OUT else sizes_out,
            "" if op in DTYPE_FREE_IN else dt_in, "" if op in DTYPE_FREE_OUT else dt_out)


def per_rank_calls(calls: Table) -> dict[int, Table]:
    """A group's collective rows → rank → rows indexed by seq (several rows per seq for a coalesced call)."""
    c = calls[calls["kind"] == "coll"]
    return {int(r): df.sort_values(["seq", "order"]) for r, df in c.groups("rank")}


def signature(rows: Table, coarse: bool = False) -> tuple:
    """Signature of one rank's call at one seq: the tuple of its parts' signatures in call order.

    `coarse` compares element counts instead of shapes and leaves dtypes out: used when the ranks' rows come from
    different sources (a dump's shapes vs a COLL line's count vs a watchdog line's NumelIn).
    """
    if coarse:
        return tuple(_part_sig(op, str(a), str(b), "", "") for op, a, b in
                     zip(rows["op"], rows["numel_in"], rows["numel_out"]))
    return tuple(_part_sig(*t) for t in zip(rows["op"], rows["sizes_in"], rows["sizes_out"], rows["dtype_in"],
                                            rows["dtype_out"]))


def majority(values: dict[int, Any]) -> tuple[Any, list[int], bool]:
    """(majority value, ranks that differ from it, tie). A tie: no value strictly more common than every other."""
    counts = Counter(values.values())
    ranked = counts.most_common()
    if len(ranked) == 1:
        return ranked[0][0], [], False
    best, n = ranked[0]
    tie = ranked[1][1] == n
    if tie:
        return None, sorted(values), True
    return best, sorted(r for r, v in values.items() if v != best), False


def _first_field(sig_by_rank: dict[int, tuple]) -> str:
    """Which field the disagreement is in: op, then size, then dtype (first part that differs)."""
    sigs = list(sig_by_rank.values())
    lens = {len(s) for s in sigs}
    if len(lens) > 1:
        return "op"
    for i in range(min(lens)):
        for j, name in ((0, "op"), (1, "size"), (2, "size"), (3, "dtype"), (4, "dtype")):
            if len({s[i][j] for s in sigs}) > 1:
                return name
    return "op"


def _alltoall_totals(rows_at: dict[int, Table]) -> tuple[int, int]:
    """Σ input elements vs Σ output elements over the group's members at one all_to_all."""
    ins = sum(int(np.maximum(r["numel_in"], 0).sum()) for r in rows_at.values())
    outs = sum(int(np.maximum(r["numel_out"], 0).sum()) for r in rows_at.values())
    return ins, outs


def _detail(rows_at: dict[int, Table]) -> tuple[dict, dict, dict, list[dict]]:
    """Per-rank op / element count / dtype and the evidence rows at one seq."""
    ops, sizes, dts, ev = {}, {}, {}, []
    for r, rows in sorted(rows_at.items()):
        ops[r] = "+".join(rows["op"])
        sizes[r] = int(np.maximum(rows["numel_in"], -1).sum()) if (rows["numel_in"] >= 0).all() else -1
        dts[r] = ",".join(sorted(set(",".join(rows["dtype_in"]).split(",")) - {""}))
        for x in rows.itertuples(index=False):
            ev.append(dict(file=x.file, line=None if x.line is None or int(x.line) < 0 else int(x.line),
                           text=str(x.text) + (f" at {x.frame}" if x.frame else ""), rank=r))
    return ops, sizes, dts, ev


def group_divergence(inp: HangInputs, key: str) -> Divergence | None:
    """The first seq of group `key` where the present members' calls are incompatible; None if they all agree."""
    g = inp.groups[key]
    calls = inp.calls[inp.calls["group"] == key]
    by_rank = per_rank_calls(calls)
    if len(by_rank) < 2:
        return None
    n_members = len(g.members or by_rank)
    seqs = sorted(set().union(*[set(df["seq"].tolist()) for df in by_rank.values()]))
    for s in seqs:
        rows_at = {r: df[df["seq"] == s] for r, df in by_rank.items() if (df["seq"] == s).any()}
        if len(rows_at) < 2:
            continue
        coarse = len({src for x in rows_at.values() for src in x["source"]}) > 1
        sigs = {r: signature(x, coarse) for r, x in rows_at.items()}
        ops, sizes, dts, ev = _detail(rows_at)
        if len(set(sigs.values())) > 1:
            best, odd, tie = majority(sigs)
            what = _first_field(sigs)
            kind = {"op": "mismatched_op", "size": "mismatched_size", "dtype": "mismatched_dtype"}[what]
            d = Divergence(kind=kind, group=key, seq=int(s), culprits=odd, tie=tie, present=sorted(rows_at),
                           ops=ops, sizes=sizes, dtypes=dts, rows=ev, majority=best)
            d.cause = _cause(d, what, tie)
            if tie and _break_by_siblings(inp, d, sigs, coarse):
                d.cause = _cause(d, what, False) + d.cause
            _refine_by_alignment(by_rank, s, d)
            _left_the_loop(by_rank, s, d)
            return d
        first_op = next(iter(rows_at.values()))["op"][0]
        known = g.member_source in ("pg_config", "world", "nccl_init")  # observed members may be only some of them
        if first_op == "alltoall" and known and len(rows_at) == n_members:
            ins, outs = _alltoall_totals(rows_at)
            if ins != outs and ins > 0 and outs > 0:
                d = Divergence(kind="mismatched_size", group=key, seq=int(s), culprits=sorted(rows_at), tie=True,
                               present=sorted(rows_at), ops=ops, sizes=sizes, dtypes=dts, rows=ev)
                d.cause = (f"all_to_all: the group sends {ins} elements in all but receives {outs}: the per-rank "
                           "splits do not add up (which rank's split is wrong cannot be told from the dumps)")
                return d
    return None


def _break_by_siblings(inp: HangInputs, d: Divergence, sigs: dict[int, tuple], coarse: bool) -> bool:
    """Break a tie with the group's siblings: other groups of the same role (same description and size, other
    members) run the same program, so the call they agree on at this seq is what this group should have issued.
    """
    g = inp.groups[d.group]
    if not g.desc or g.desc == "undefined" or not g.members:  # 'undefined': new_group without a description
        return False
    votes: Counter = Counter()
    for key, o in inp.groups.items():
        if key == d.group or o.desc != g.desc or not o.members or len(o.members) != len(g.members) \
                or o.members & g.members:
            continue
        c = inp.calls[(inp.calls["group"] == key) & (inp.calls["kind"] == "coll") & (inp.calls["seq"] == d.seq)]
        theirs = {signature(x, coarse) for _, x in c.groups("rank")}
        if len(theirs) == 1 and len(set(c["rank"].tolist())) == len(o.members):
            votes[theirs.pop()] += 1
    if not votes:
        return False
    sig, n = votes.most_common(1)[0]
    agree = [r for r, s in sigs.items() if s == sig]
    if agree and len(agree) < len(sigs) and (len(votes) == 1 or votes.most_common(2)[1][1] < n):
        d.culprits = sorted(r for r in sigs if r not in agree)
        d.tie = False
        d.majority = sig
        d.cause = (f" (decided by {n} sibling group(s) of the same role, {g.desc}, that issued at this seq what "
                   f"{ranks_text(sorted(agree))} issued)")
        return True
    return False


def _cause(d: Divergence, what: str, tie: bool) -> str:
    """One sentence saying what disagrees, and that it is a tie when it is one."""
    vals = {"op": d.ops, "size": d.sizes, "dtype": d.dtypes}[what]
    shown = ", ".join(f"rank {r}: {v}" for r, v in sorted(vals.items()))
    if tie:
        return (f"ranks disagree on the {what} with no majority ({shown}): the dumps alone cannot tell which rank "
                "is wrong")
    odd = values_text(sorted({vals[r] for r in d.culprits}))
    ref = values_text(sorted({v for r, v in vals.items() if r not in d.culprits}))
    text = {"op": "called {odd} where the others called {ref}: likely a collective inside a rank-dependent branch",
            "size": "passed {odd} elements where the others passed {ref}: typically an uneven last batch or a "
                    "rank-dependent shape",
            "dtype": "passed dtype {odd} where the others passed {ref}"}[what]
    return f"{ranks_text(d.culprits)} " + text.format(odd=odd, ref=ref)


def _sigs_from(df: Table, s: int, n: int = 6) -> list[tuple]:
    """Signatures of a rank's calls from seq s on (at most n)."""
    out = []
    for _, rows in df[df["seq"] >= s].groups("seq"):
        out.append(signature(rows))
        if len(out) >= n:
            break
    return out


def _aligned(a: list, b: list) -> bool:
    """True when two signature sequences agree on their common, non-empty prefix."""
    k = min(len(a), len(b))
    return k > 0 and a[:k] == b[:k]


def user_stack(s: str) -> tuple[tuple[str, int], ...]:
    """A ';'-joined user stack ('function:line', outermost first) as (function, line) pairs, module level dropped."""
    out = []
    for f in str(s).split(";"):
        name, _, line = f.rpartition(":")
        if not f or not name:
            name, line = f, "-1"
        if name and name not in ("<module>", "main"):
            out.append((name, int(line) if line.lstrip("-").isdigit() else -1))
    return tuple(out)


def call_site_kind(mine: tuple, history: set[tuple]) -> str:
    """Where a culprit's odd call came from, judged against the call sites of the group's recorded collectives.

    With two or more distinct call sites, the functions all of them pass through are the training loop; the
    innermost of those holds the loop, and its lines that lead to recorded collectives bound the loop body. A call
    whose stack lacks a loop function, or leaves the loop function from a line past every recorded call's line,
    was made after the loop ('left_loop': the rank ran out of batches or exited early); one from inside the body
    through functions no recorded collective went through is an 'extra' collective; a known site gives ''.
    """
    history = {h for h in history if h}
    names = {tuple(f for f, _ in h) for h in history}
    if not mine or len(names) < 2:
        return ""
    loop = list(next(iter(names)))
    for h in names:
        k = 0
        while k < min(len(loop), len(h)) and loop[k] == h[k]:
            k += 1
        loop = loop[:k]
    mine_names = [f for f, _ in mine]
    if not loop:
        return ""
    if mine_names[:len(loop)] != loop:
        return "left_loop"
    depth = len(loop) - 1
    lines = [h[depth][1] for h in history if len(h) > depth and h[depth][1] >= 0]
    at = mine[depth][1]
    if lines and at > max(lines):
        return "left_loop"
    return "" if tuple(mine_names) in names else "extra"


def _left_the_loop(by_rank: dict[int, Table], s: int, d: Divergence) -> None:
    """A culprit whose odd call at seq s came from outside the loop the group's other calls come from never joined
    the collective the others wait in (fewer batches, an early exit); one from a new site inside it issued an
    extra collective."""
    if d.kind != "mismatched_op" or d.tie or len(d.culprits) != 1:
        return
    r = d.culprits[0]
    hist = {user_stack(x) for df in by_rank.values() for x in df["stack"][df["seq"] < s]}
    at = by_rank[r][by_rank[r]["seq"] == s]
    if at.empty:
        return
    kind = call_site_kind(user_stack(at["stack"][0]), hist)
    frame = str(at["frame"][0])
    theirs = values_text(sorted(set(d.ops[x] for x in d.present if x not in d.culprits)))
    if kind == "left_loop":
        d.kind = "missing_rank"
        d.cause = (f"rank {r} never joined the {theirs} the others wait in at seq {s}: it called {d.ops[r]} from "
                   f"{frame}, outside the loop every earlier collective of the group came from (it ran out of "
                   "batches or left the loop early)")
    elif kind == "extra":
        d.kind = "extra_collective"
        d.cause = (f"rank {r} issued an extra {d.ops[r]} at seq {s} from {frame}, a call site none of the group's "
                   f"earlier collectives used, while the others issued {theirs} (a collective in a rank-dependent "
                   "branch, e.g. a checkpoint barrier or logging on one rank)")


def _history(df: Table, s: int) -> list:
    """Signatures of a rank's calls before seq s, in order."""
    return [signature(rows) for _, rows in df[df["seq"] < s].groups("seq")]


def _refine_by_alignment(by_rank: dict[int, Table], s: int, d: Divergence) -> None:
    """Tell a substitution from an order swap, an extra or a skipped collective by aligning later calls.

    Ranks blocked at the divergence often issued nothing after it; then the group's own history decides: when
    the calls repeat with a period (one step's collectives), the call the culprit issued at seq s is the one the
    period predicts for seq s+1 on the others: it skipped the call they wait in.
    """
    if d.tie or not d.culprits:
        return
    good = [r for r in d.present if r not in d.culprits]
    ref = _sigs_from(by_rank[good[0]], s) if good else []
    bad = [_sigs_from(by_rank[r], s) for r in d.culprits]
    if not ref or not all(bad):
        return
    if len(ref) == 1 and all(len(b) == 1 for b in bad):
        hist = _history(by_rank[good[0]], s)
        nxt = period_next(hist + [ref[0]])
        here = period_next(hist)  # what the pattern alone puts at seq s: an occasional call (a periodic barrier
        # beyond the window) is no part of it, and the culprit issuing exactly that skipped the occasional call
        if (nxt is not None and all(b[0] == nxt for b in bad) and nxt != ref[0]) or \
                (here is not None and here != ref[0] and all(b[0] == here for b in bad)):
            d.kind = "skipped_collective"
            d.cause = (f"{ranks_text(d.culprits)} skipped the {ref[0][0][0]} the others wait in: the call they issued "
                       "is the one the job's repeating pattern puts next (a conditional collective, or an uneven "
                       "number of buckets/batches)")
        return
    if all(_aligned(b[1:], ref[1:]) for b in bad):
        return  # one call replaced by another, the rest lines up: a plain mismatch
    if all(len(b) >= 2 and len(ref) >= 2 and b[0] == ref[1] and b[1] == ref[0] for b in bad):
        d.kind = "order_mismatch"
        d.cause = f"{ranks_text(d.culprits)} issue the same collectives in a different order than the others"
    elif all(_aligned(b[1:], ref) for b in bad):
        d.kind = "extra_collective"
        d.cause = (f"{ranks_text(d.culprits)} issued an extra {bad[0][0][0][0]} that the others did not (a collective "
                   "in a rank-only branch, e.g. logging on rank 0); everything after it is shifted by one")
    elif all(_aligned(b, ref[1:]) or ref[0] in b[1:] for b in bad):
        d.kind = "skipped_collective"
        d.cause = (f"{ranks_text(d.culprits)} skipped the {ref[0][0][0]} the others issued and moved on to the next "
                   "ones (a conditional collective, or an uneven number of buckets/batches)")


LATE_FRACTION = 0.5  # arriving this share of the collective's timeout after the others is a stall, not noise


def late_arrivals(inp: HangInputs, skip: set[str] = frozenset()) -> list[Divergence]:
    """Groups whose members all issued their last collective, one of them long after the others.

    Entries carry `time_created_ns` (wall clock) and `timeout_ms`. At the last seq a group's members all reached,
    a member created more than half the timeout after the median of the others arrived after they had given up:
    it stalled before the collective (a rank of two members is late against the other one).
    """
    out = []
    c = inp.calls[(inp.calls["kind"] == "coll") & (inp.calls["created_ns"] > 0)
                  & (inp.calls["source"] == "flight_recorder")]
    if c.empty:
        return out
    timeouts = {str(g): float(np.median(x["timeout_ms"])) * 1e6 for g, x in c[c["timeout_ms"] > 0].groups("group")}
    for g, df in c.groups("group"):
        members = inp.groups[g].members if g in inp.groups else None
        last = {r: int(x["seq"].max()) for r, x in df.groups("rank")}
        if g in skip or not members or len(last) < 2 or set(last) != set(members) or len(set(last.values())) != 1:
            continue
        s = next(iter(last.values()))
        at = {r: int(x["created_ns"].min()) for r, x in df[df["seq"] == s].groups("rank")}
        limit = LATE_FRACTION * timeouts.get(g, 0)
        if limit <= 0:
            continue

        def others(r: int) -> float:
            return float(np.median([t for q, t in at.items() if q != r]))
        late = [int(r) for r, t in at.items() if t - others(r) > limit]
        if not late or len(late) * 2 > len(at) or (len(late) * 2 == len(at) and len(at) > 2):
            continue
        delay = {r: (int(at[r]) - int(others(r))) / 1e9 for r in late}
        rows = df[df["seq"] == s]
        ev = [dict(file=x.file, line=None, text=str(x.text), rank=int(x.rank)) for x in rows.itertuples(index=False)]
        cause = "; ".join(f"rank {r} issued seq {s} {delay[r]:.1f} s after the others (their timeout: "
                          f"{timeouts[g] / 1e9:.1f} s): it stalled before the collective and arrived after they had "
                          "given up" for r in late)
        out.append(Divergence(kind="lagging_rank", group=str(g), seq=s, culprits=sorted(late), tie=False,
                              present=sorted(int(r) for r in at), rows=ev, cause=cause))
    return out
