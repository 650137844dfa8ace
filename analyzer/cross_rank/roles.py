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

from analyzer.rank import intervals as iv
from analyzer.rank.metrics import kind_sets, step_windows

ROLE_ORDER = ("dp", "fsdp", "tp", "ep", "pp", "unknown")


def compute_sets(job: Any, ranks: list[int]) -> dict[int, iv.Intervals]:
    """Each rank's compute interval set (own clock): read where a RankSummary's rank was parsed (one query for
    all of them, not kept), or from a full trace's activity."""
    out, windows = {}, {}
    for r in ranks:
        t = job.traces.get(r)
        if t is None:
            continue
        if hasattr(t, "n_activities"):
            if t.activity_start is not None:
                windows[r] = (int(t.activity_start), int(t.activity_end) + 1)
        else:
            out[r] = kind_sets(t)["compute"]
    if windows:
        out.update({r: v["compute"] for r, v in job.lanes(windows).items() if v})
    return out


def role_metrics(job: Any, members: pd.DataFrame, offset_of: dict, role_of: dict[str, str],
                 n_steps: int) -> list[dict]:
    """One row per role: groups, comm/overlap/exposed time and shares, collectives per step and mean bytes."""
    if members is None or not len(members):
        return []
    m = members.assign(role=members["process_group"].map(role_of).fillna("unknown"))
    acc: dict[str, dict] = {}
    computes = compute_sets(job, sorted({int(r) for r in m["rank"].unique()}))
    for rank, g in m.groupby("rank", sort=True):
        t = job.traces.get(int(rank))
        if t is None:
            continue
        steps, lo, hi, _ = step_windows(t)
        if not len(steps):
            continue
        compute = computes.get(int(rank), iv.empty())
        step_total = float((hi - lo).sum())
        shift = int(offset_of.get(int(rank), 0))
        for role, rg in g.groupby("role", sort=False):
            s = rg["start"].to_numpy(np.int64) - shift
            e = rg["end"].to_numpy(np.int64) - shift
            comm = iv.union(s, e)
            ov = iv.intersect(comm, compute)
            c = float(iv.clipped_lengths(comm, lo, hi).sum())
            o = float(iv.clipped_lengths(ov, lo, hi).sum())
            a = acc.setdefault(str(role), {"comm": 0.0, "overlap": 0.0, "step": 0.0, "ranks": set(), "calls": 0})
            a["comm"] += c
            a["overlap"] += o
            a["step"] += step_total
            a["ranks"].add(int(rank))
            a["calls"] += int((rg["kind"] == "collective").sum()) if "kind" in rg else len(rg)
    out = []
    groups_of: dict[str, list[str]] = {}
    for name, role in role_of.items():
        groups_of.setdefault(role, []).append(str(name))
    for role in sorted(acc, key=lambda r: (ROLE_ORDER.index(r) if r in ROLE_ORDER else len(ROLE_ORDER), r)):
        a = acc[role]
        if a["comm"] <= 0:
            continue
        n_ranks = len(a["ranks"]) or 1
        out.append({
            "role": role, "groups": sorted(groups_of.get(role, [])), "ranks": sorted(a["ranks"]),
            "comm_us": a["comm"] / n_ranks / 1e3, "exposed_comm_us": (a["comm"] - a["overlap"]) / n_ranks / 1e3,
            "comm_share": a["comm"] / a["step"] if a["step"] else None,
            "overlap_coverage": a["overlap"] / a["comm"] if a["comm"] else None,
            "exposed_comm_share": (a["comm"] - a["overlap"]) / a["step"] if a["step"] else None,
            "collectives_per_step": a["calls"] / n_ranks / max(1, n_steps),
        })
    return out
