"""Where each rank is blocked, and on whom it waits: the edges of the job's wait-for graph.

A rank's *blocking point* is its oldest call that did not complete (NCCL reports completion per entry); where
completion is not reported (gloo, COLL lines) it is the rank's last call. The blocking point is real only if
something keeps that call from completing:
- a collective at seq s waits for the members that never issued s (their last enqueued collective < s) and for
  members that left no record at all;
- when every member issued s and some member saw s complete, the call did complete on the network: this rank's
  own work stopped completing (`device_stalled`: a GPU error or hang, or a stuck progress thread on that rank);
- a send/recv waits for its peer unless the peer posted the matching op and is blocked on exactly that transfer
  (then the pair is stuck together).
A rank whose last call needs nothing from anyone (everyone issued it) is not blocked in collectives at all: it
is busy or stuck in its own code, which makes it a root when others wait for it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from analyzer.hang.inputs import HangInputs
from parsers.table import Table


@dataclass
class Blocked:
    """One rank's blocking point: the call, and whom it waits for there."""

    rank: int
    group: str
    kind: str                 # coll | p2p
    seq: int
    op: str
    peer: int
    targets: list[int]        # ranks it waits for (never issued / absent / peer blocked elsewhere)
    absent: list[int]         # targets that left no record at all
    row: dict
    unknown: list[int] = field(default_factory=list)  # targets with a record, but none of this group
    stuck_pair: int = -1      # a peer blocked on the same transfer


@dataclass
class RankStates:
    """Per-rank blocking points, device stalls and how far each rank got in each group."""

    blocked: dict[int, Blocked] = field(default_factory=dict)
    idle: set[int] = field(default_factory=set)                  # data, but nothing it waits for
    device_stalled: dict[int, list[dict]] = field(default_factory=dict)
    enqueued: dict[tuple[str, int], int] = field(default_factory=dict)
    completed: dict[tuple[str, int], int] = field(default_factory=dict)
    with_data: set[int] = field(default_factory=set)


def _progress_maps(inp: HangInputs) -> tuple[dict, dict]:
    """(group, rank) → last enqueued / last completed collective, from calls and translated status."""
    enq: dict[tuple[str, int], int] = {}
    done: dict[tuple[str, int], int] = {}
    c = inp.calls[inp.calls["kind"] == "coll"]
    if len(c):
        for (g, r), x in c.groups(["group", "rank"]):
            enq[(g, int(r))] = int(x["seq"].max())
        fin = c[c["done"] == 1]
        for (g, r), x in fin.groups(["group", "rank"]):
            done[(g, int(r))] = int(x["seq"].max())
    for x in inp.progress.itertuples(index=False):
        k = (str(x.group), int(x.rank))
        if x.coll_enqueued >= 0:
            enq[k] = max(enq.get(k, -1), int(x.coll_enqueued))
        if x.coll_completed >= 0 and not _gloo(inp, k[0]):
            done[k] = max(done.get(k, -1), int(x.coll_completed))
    for r, f in inp.dumps.items():  # an empty buffer with no status: the rank recorded no collective at all
        if f.entries == 0 and not (inp.progress["rank"] == r).any():
            for g in inp.groups.values():
                if g.members and r in g.members:
                    enq.setdefault((g.key, r), 0)
    return enq, done


def _gloo(inp: HangInputs, g: str) -> bool:
    return g in inp.groups and inp.groups[g].backend == "gloo"


def _has_record(inp: HangInputs, rank: int) -> bool:
    return rank in inp.dumps or rank in inp.log_ranks


def _blocking_row(rows: Table) -> dict | None:
    """The oldest incomplete call; the last call when the source does not report completion."""
    if rows.empty:
        return None
    inc = rows[rows["done"] == 0]
    if len(inc):
        return inc.row(0)
    if (rows["done"] == -1).any():
        return rows.row(-1)
    return None  # everything it issued completed


def rank_states(inp: HangInputs, explained: dict[tuple[str, int], list[int]] | None = None) -> RankStates:
    """Blocking point and wait targets of every rank with data (see the module docstring).

    `explained` maps a (group, seq) where the members' calls diverge (mismatch, late arrival) to its culprits: a
    rank blocked there waits for them, even though everyone issued that seq.
    """
    explained = explained or {}
    st = RankStates()
    st.enqueued, st.completed = _progress_maps(inp)
    calls = inp.calls.sort_values(["rank", "order"], kind="stable")
    st.with_data = set(int(r) for r in np.unique(calls["rank"])) | set(inp.dumps)
    max_done: dict[str, int] = {}
    for (g, _), v in st.completed.items():
        max_done[g] = max(max_done.get(g, -1), v)
    for (g, r), v in st.completed.items():
        e = st.enqueued.get((g, r), -1)
        if 0 <= v < max_done[g] and v < e:  # peers saw collectives complete that this rank never saw complete
            st.device_stalled.setdefault(r, []).append(dict(group=g, seq=v + 1, completed=v,
                                                            peers_completed=max_done[g], enqueued=e))
    by_rank = {int(r): df for r, df in calls.groups("rank")}
    for r in sorted(st.with_data):
        row = _blocking_row(by_rank.get(r, calls[0:0]))
        if row is None:
            st.idle.add(r)
            continue
        key = (str(row["group"]), int(row["seq"]))
        if row["kind"] == "coll" and key in explained:
            b = Blocked(rank=r, group=key[0], kind="coll", seq=key[1], op=str(row["op"]), peer=-1,
                        targets=[c for c in explained[key] if c != r], absent=[], row=dict(row))
            if b.targets:
                st.blocked[r] = b
                continue
        b = _targets(inp, st, r, row, by_rank)
        if b.targets or b.stuck_pair >= 0 or r in st.device_stalled:
            st.blocked[r] = b
        else:
            st.idle.add(r)
    return st


def _targets(inp: HangInputs, st: RankStates, r: int, row: dict, by_rank: dict) -> Blocked:
    """Whom rank r waits for at its blocking call."""
    g, s = str(row["group"]), int(row["seq"])
    members = sorted(inp.groups[g].members or []) if g in inp.groups else []
    b = Blocked(rank=r, group=g, kind=str(row["kind"]), seq=s, op=str(row["op"]), peer=int(row["peer"]),
                targets=[], absent=[], row=dict(row))
    if row["kind"] == "coll":
        for m in members:
            if m == r:
                continue
            if not _has_record(inp, m):
                b.targets.append(m)
                b.absent.append(m)
            elif (g, m) in st.enqueued and st.enqueued[(g, m)] < s:
                b.targets.append(m)
        if not b.targets:  # everyone known issued s: then the members we know nothing of are the suspects
            b.unknown = [m for m in members if m != r and _has_record(inp, m) and (g, m) not in st.enqueued]
            b.targets = list(b.unknown)
        return b
    peer = b.peer
    if peer < 0 or peer == r:
        return b
    if not _has_record(inp, peer):
        b.targets, b.absent = [peer], [peer]
        return b
    want = "recv" if b.op == "send" else "send"
    prow = by_rank.get(peer)
    match = prow[(prow["group"] == g) & (prow["kind"] == "p2p") & (prow["op"] == want) & (prow["peer"] == r)
                 & (prow["done"] != 1)] if prow is not None else None
    if match is None or match.empty:
        b.targets = [peer]  # the peer never posted the matching send/recv
        return b
    pb = _blocking_row(prow)
    if pb is not None and int(pb["order"]) == int(match["order"][0]):
        b.stuck_pair = peer  # both posted, both blocked on exactly this transfer
    else:
        b.targets = [peer]   # the peer posted it, but its own work is blocked earlier
    return b


def wait_edges(st: RankStates) -> Table:
    """waiter → target rows (group, seq, kind) from the blocking points."""
    rows = []
    for b in st.blocked.values():  # sets: a waiter in a 100,000-rank group has that many targets
        absent, unknown = set(b.absent), set(b.unknown)
        created = int(b.row.get("created_ns", -1) or -1)
        rows += [dict(waiter=b.rank, target=t, group=b.group, seq=b.seq, kind=b.kind, op=b.op, absent=t in absent,
                      unknown=t in unknown, created_ns=created) for t in b.targets]
    return Table.from_records(rows, EDGE_COLUMNS, EDGE_DTYPES)


EDGE_COLUMNS = ["waiter", "target", "group", "seq", "kind", "op", "absent", "unknown", "created_ns"]
EDGE_DTYPES = {"waiter": np.int64, "target": np.int64, "seq": np.int64, "absent": bool, "unknown": bool,
               "created_ns": np.int64}


def adjacency(edges: Table, frm: str = "waiter", to: str = "target") -> dict[int, list[int]]:
    """{rank in column `frm`: sorted distinct ranks of column `to` on its edges}, from one sort of the edges (a
    100,000-rank group has that many keys: no sub-table per key)."""
    if not len(edges):
        return {}
    a, b = np.asarray(edges[frm], np.int64), np.asarray(edges[to], np.int64)
    order = np.argsort(a, kind="stable")
    keys, first = np.unique(a[order], return_index=True)
    ends = first[1:].tolist() + [len(a)]
    dst = b[order].tolist()
    return {k: sorted(set(dst[i:j])) for k, i, j in zip(keys.tolist(), first.tolist(), ends)}


def reachable_roots(edges: Table, start: int) -> set[int]:
    """Sinks reachable from `start` along wait edges (the ranks at the head of its chain)."""
    nxt = adjacency(edges)
    seen, stack, out = {start}, [start], set()
    while stack:
        u = stack.pop()
        succ = nxt.get(u, [])
        if not succ and u != start:
            out.add(u)
        for v in succ:
            if v not in seen:
                seen.add(v)
                stack.append(v)
    return out


def cycles(edges: Table) -> list[list[int]]:
    """Strongly connected components of ≥ 2 ranks (Tarjan, iterative): ranks that wait for each other."""
    if edges.empty:
        return []
    nxt = adjacency(edges)
    nodes = sorted(set(nxt) | {int(t) for t in edges["target"]})
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    for root in nodes:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = counter[0]
                counter[0] += 1
                stack.append(v)
                on.add(v)
            succ = nxt.get(v, [])
            if i < len(succ):
                work.append((v, i + 1))
                w = succ[i]
                if w not in index:
                    work.append((w, 0))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            for w in succ:
                if w in on:
                    low[v] = min(low[v], low[w])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out
