"""Communication share, overlap and exposed communication per process-group role (DP, FSDP, TP, EP, PP).

For each rank, the communication of the groups of one role is the union of that rank's collective / send-recv
intervals in those groups (back on the rank's own clock); it is clipped to the rank's step windows and intersected
with the rank's compute exactly as the job-wide metrics are (docs/metrics.md). Sums over ranks and steps give the
role's shares (time-weighted). A group that spans the whole world is judged by the traffic it carries (all-reduce →
DP, all-to-all → EP, …), not as "world".
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from analyzer.cross_rank.member_parts import as_parts
from analyzer.load.job import ask_ranks
from analyzer.rank import intervals as iv
from analyzer.rank.metrics import step_windows

ROLE_ORDER = ("dp", "fsdp", "tp", "ep", "pp", "unknown")


def role_times(lanes: Any, arg: tuple) -> list[tuple[str, float, float]]:
    """Run where a rank's interval sets are kept: per role, the rank's communication time (the union of the
    role's intervals ``(role, start, end[, wait_end])`` on the rank's own clock) inside its step windows
    ``lo``/``hi``, the part of its transfer (the time outside the waits [start, wait_end)) overlapped by the
    rank's compute, and the wait."""
    lo, hi, roles = arg
    compute = lanes.compute if lanes is not None else iv.empty()
    out = []
    for role, s, e, *w in roles:
        comm = iv.union(s, e)
        # the waits for the last member (``w``: each member's wait end) are no transfer (analyzer/report/waits.py)
        wait = iv.intersect(iv.union(s, w[0]), comm) if w else iv.empty()
        transfer = iv.difference(comm, wait)
        ov = iv.intersect(transfer, compute)
        out.append((role, float(iv.clipped_lengths(comm, lo, hi).sum()), float(iv.clipped_lengths(ov, lo, hi).sum()),
                    float(iv.clipped_lengths(wait, lo, hi).sum())))
    return out


def _windows(job: Any, rank: int, trace: Any) -> tuple:
    """The rank's step windows as the job's step metrics keep them (without the steps a cut damaged or that
    other ranks lack: analyzer/report/coverage.py), else the trace's own."""
    sm = getattr(job, "step_metrics", None)
    if sm is not None and len(sm) and "start" in sm:
        rows = sm[sm["rank"] == rank]
        if len(rows):
            return (rows["step"].to_numpy(), rows["start"].to_numpy(np.int64), rows["end"].to_numpy(np.int64),
                    bool(rows["whole_trace"].any()) if "whole_trace" in rows else False)
    return step_windows(trace)


def _role_columns(part: pd.DataFrame, _arg: Any) -> pd.DataFrame:
    """Run where a member partition is: the columns role_metrics reads."""
    return part[[c for c in ("process_group", "rank", "start", "end", "kind", "wait_ns") if c in part]]


def role_metrics(job: Any, members: Any, offset_of: dict, role_of: dict[str, str],
                 n_steps: int, waits: bool = True) -> list[dict]:
    """One row per role: groups, comm/wait/transfer/overlap/exposed time and shares, collectives per step and
    mean bytes. ``waits``: split the members' waits off their transfer (False when the clocks are not aligned).

    The overlap with compute is measured where each rank was parsed (Job.on_ranks): only the rank's member
    intervals go there and two numbers per role come back, never a rank's compute set."""
    if members is None or not len(members):
        return []
    # the five columns this needs, fetched from the member partitions (not the member table)
    members = as_parts(members).frame(_role_columns)
    role = members["process_group"].map(role_of).fillna("unknown").to_numpy(dtype=object)
    rank_of = members["rank"].to_numpy()
    start, end = members["start"].to_numpy(np.int64), members["end"].to_numpy(np.int64)
    wait_end = start + members["wait_ns"].to_numpy(np.int64) if waits and "wait_ns" in members else None
    coll = members["kind"].to_numpy() == "collective" if "kind" in members else np.ones(len(members), bool)
    by_rank = np.argsort(rank_of, kind="stable")  # each rank's rows keep their order
    ranks, first = np.unique(rank_of[by_rank], return_index=True)
    bounds = np.append(first, len(by_rank))
    acc: dict[str, dict] = {}
    args, facts = {}, {}
    for i, rank in enumerate(ranks):
        t = job.traces.get(int(rank))
        if t is None:
            continue
        steps, lo, hi, _ = _windows(job, int(rank), t)
        if not len(steps):
            continue
        rows = by_rank[bounds[i]:bounds[i + 1]]
        shift = int(offset_of.get(int(rank), 0))
        roles, calls = [], {}
        for name in pd.unique(role[rows]):  # in order of first appearance, as groupby(sort=False) gave them
            sel = rows[role[rows] == name]
            roles.append((str(name), start[sel] - shift, end[sel] - shift)
                         + (() if wait_end is None else (wait_end[sel] - shift,)))
            calls[str(name)] = int(coll[sel].sum())
        args[int(rank)] = (lo, hi, roles)
        facts[int(rank)] = (float((hi - lo).sum()), calls)
    times = ask_ranks(job, role_times, args)
    for rank in args:  # in rank order, as the sums were always taken
        step_total, calls = facts[rank]
        for role, c, o, w in times.get(rank) or role_times(None, args[rank]):
            a = acc.setdefault(role, {"comm": 0.0, "overlap": 0.0, "wait": 0.0, "step": 0.0, "ranks": set(),
                                      "calls": 0})
            a["comm"] += c
            a["overlap"] += o
            a["wait"] += w
            a["step"] += step_total
            a["ranks"].add(rank)
            a["calls"] += calls[role]
    out = []
    groups_of: dict[str, list[str]] = {}
    for name, role in role_of.items():
        groups_of.setdefault(role, []).append(str(name))
    for role in sorted(acc, key=lambda r: (ROLE_ORDER.index(r) if r in ROLE_ORDER else len(ROLE_ORDER), r)):
        a = acc[role]
        if a["comm"] <= 0:
            continue
        n_ranks = len(a["ranks"]) or 1
        transfer = a["comm"] - a["wait"]  # exposed communication and overlap are the transfer's, not the waits'
        out.append({
            "role": role, "groups": sorted(groups_of.get(role, [])), "ranks": sorted(a["ranks"]),
            "comm_us": a["comm"] / n_ranks / 1e3, "exposed_comm_us": (transfer - a["overlap"]) / n_ranks / 1e3,
            "wait_us": a["wait"] / n_ranks / 1e3, "transfer_us": transfer / n_ranks / 1e3,
            "comm_share": a["comm"] / a["step"] if a["step"] else None,
            "transfer_share": transfer / a["step"] if a["step"] else None,
            "overlap_coverage": a["overlap"] / transfer if transfer > 0 else None,
            "exposed_comm_share": (transfer - a["overlap"]) / a["step"] if a["step"] else None,
            "collectives_per_step": a["calls"] / n_ranks / max(1, n_steps),
        })
    return out
