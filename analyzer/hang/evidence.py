"""What a diagnosis cites and where it sits: group descriptions, calls at a seq, per-rank progress, a
rank's own stderr lines, the waits whose chain reaches a culprit.
"""
from __future__ import annotations

from collections import Counter

from analyzer.hang.inputs import HangInputs
from analyzer.hang.stderr_facts import StderrFacts
from analyzer.hang.waits import RankStates, adjacency
from parsers.table import Table, isin


def group_desc(inp: HangInputs, g: str) -> str:
    return inp.groups[g].desc if g in inp.groups else ""



def ev_row(r: dict) -> tuple:
    return (r["file"], r.get("line"), r["text"])



def waiters_of(edges: Table, culprits: set[int]) -> set[int]:
    """Every rank whose chain of waits reaches one of `culprits` (reverse reachability; culprits excluded)."""
    if edges.empty:
        return set()
    prev = adjacency(edges, "target", "waiter")
    seen, stack = set(culprits), list(culprits)
    while stack:
        for w in prev.get(stack.pop(), ()):
            if w not in seen:
                seen.add(w)
                stack.append(w)
    return seen - culprits



def explains_for(edges: Table, culprits: set[int], inp: HangInputs) -> list[dict]:
    """The wait points whose chain leads to `culprits`: (group, seq, waiting ranks, whom they wait for)."""
    if edges.empty:
        return []
    waiters = waiters_of(edges, culprits)
    e = edges[isin(edges["waiter"], waiters)]
    out = []
    for (g, s), df in e.groups(["group", "seq"]):
        out.append(dict(process_group=str(g), pg_desc=group_desc(inp, g), seq=int(s), op=str(df["op"][0]),
                        waiting=sorted(int(x) for x in set(df["waiter"])),
                        on=sorted(int(x) for x in set(df["target"]))))
    out.sort(key=lambda x: (-len(x["waiting"]), x["process_group"], x["seq"]))
    return out



def status_evidence(inp: HangInputs, g: str, ranks: list[int]) -> list[tuple]:
    """One evidence line per rank: how far it got in group g (last enqueued / completed)."""
    p = inp.progress[(inp.progress["group"] == g) & isin(inp.progress["rank"], ranks)]
    return [(str(x.file), None, f"rank {x.rank} group {g}: last enqueued {x.coll_enqueued}, last completed "
                                f"{x.coll_completed}" + (f" (pg_status read as {x.space} numbers)"
                                                         if x.space not in ("collective", "") else ""))
            for x in p.sort_values("rank").itertuples(index=False)]



def failure_evidence(facts: StderrFacts, ranks: list[int]) -> list[tuple]:
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



def failed_itself(facts: StderrFacts, r: int) -> bool:
    """stderr shows the rank's own failure: an origin line, or a death other than the launcher's SIGTERM."""
    f = facts.ranks.get(r)
    return bool(f and (f.origin or (f.died and "SIGTERM" not in f.how and f.how)))



def op_at(inp: HangInputs, g: str, seq: int) -> str:
    c = inp.calls[(inp.calls["group"] == g) & (inp.calls["kind"] == "coll") & (inp.calls["seq"] == seq)]
    if not len(c):
        return ""
    counts = Counter(c["op"].tolist())
    top = max(counts.values())
    return str(min(v for v, n in counts.items() if n == top))  # the most common op (the first in order on a tie)



def calls_at(inp: HangInputs, g: str, seq: int, ranks: list[int]) -> list[tuple]:
    c = inp.calls[(inp.calls["group"] == g) & (inp.calls["seq"] == seq) & isin(inp.calls["rank"], ranks)]
    return [(str(x.file), None if int(x.line) < 0 else int(x.line), str(x.text) + (f" at {x.frame}" if x.frame else ""))
            for x in c.sort_values("rank").itertuples(index=False)]



def source_at(inp: HangInputs, g: str, seq: int, facts: StderrFacts) -> str:
    """The best source that shows the wait at (g, seq): a dump, a COLL line, a watchdog line, else stderr."""
    c = inp.calls[(inp.calls["group"] == g) & (inp.calls["seq"] == seq)] if g else inp.calls[0:0]
    for src in ("flight_recorder", "nccl_log", "watchdog"):
        if (c["source"] == src).any():
            return src
    return "flight_recorder" if inp.dumps else ("stderr" if facts.ranks else "nccl_log")



def wait_text(st: RankStates, edges: Table, targets: list[int]) -> str:
    """'wait after seq 3, at seq 4' (waiters completed everything before) or 'wait at seq 4'."""
    e = edges[isin(edges["target"], targets)]
    if e.empty:
        return "wait"
    s = int(e["seq"].min())
    g = str(e["group"][e["seq"] == s][0])
    done = {st.completed.get((g, int(w)), -1) for w in e["waiter"][e["seq"] == s]}
    return f"wait after seq {s - 1}, at seq {s}" if done == {s - 1} else f"wait at seq {s}"
