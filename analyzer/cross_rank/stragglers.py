"""Who the job waits for: arrived-last counts, wait imposed, step-time spread, and why the straggler is slow.

A rank is named the straggler only when both hold (so a clean job names none):
- it arrives last (later than the second-latest member by more than ``TIE_NS``) in a clear majority of the
  collectives it joins that have a clear last arrival (at least 3 of them): ``pct_last >= 0.5 + 0.5 / n`` (n = mean group size; 0.75 for pairs, 0.625 for 4 ranks);
- the delay it alone causes (its start − the second-latest start, summed) is material: at least
  ``MATERIAL_SHARE`` of the median step time per step.
Send/recv are left out: in a pipeline the receiver waiting for the sender is the schedule, not a straggler.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
import pandas as pd

TIE_NS = 1_000
MATERIAL_SHARE = 0.02
#: Attribution needs the rank's excess (compute or pre-kernel host gap) to explain this share of its delay.
EXPLAINS = 0.25


def _rank_networks(nccl_logs: list) -> dict[int, set[str]]:
    """Per global rank, what NCCL says it moves inter-node data over: selected network and NET/* transports."""
    out: dict[int, set[str]] = {}
    for log in nccl_logs:
        procs = getattr(log, "processes", None)
        if procs is None or not len(procs):
            continue
        rank_of = {(h, p): int(r) for h, p, r in zip(procs["host"], procs["pid"], procs["rank"]) if int(r) >= 0}
        net = getattr(log, "networks", None)
        if net is not None and len(net):
            sel = net[net["role"] == "selected"]
            for h, p, n in zip(sel["host"], sel["pid"], sel["network"]):
                if (h, p) in rank_of and str(n):
                    out.setdefault(rank_of[(h, p)], set()).add(f"network {n}")
        conn = getattr(log, "connections", None)
        if conn is not None and len(conn):
            nets = conn[conn["transport"].astype(str).str.startswith("NET/")]
            for h, p, t in zip(nets["host"], nets["pid"], nets["transport"]):
                if (h, p) in rank_of:
                    out.setdefault(rank_of[(h, p)], set()).add(str(t))
    return out


def link_difference(nccl_logs: list, rank: int) -> Optional[str]:
    """Evidence that ``rank`` talks over a different (slower) path than most ranks, from the NCCL logs; else None.

    A slow link cannot be seen in collective timings (every member of a ring ends together), but NCCL says which
    network and transports each rank set up: a rank on sockets among ranks on InfiniBand is a link straggler.
    """
    nets = _rank_networks(nccl_logs)
    mine = nets.get(rank)
    others = [v for r, v in nets.items() if r != rank]
    if not mine or not others:
        return None
    common = max(others.count(v) for v in others)
    majority = next(v for v in others if others.count(v) == common)
    if mine == majority or common * 2 <= len(others):
        return None
    return (f"NCCL on rank {rank} uses {', '.join(sorted(mine))} while most ranks ({common} of {len(others)}) use "
            f"{', '.join(sorted(majority))}")


def per_rank_stats(inst: pd.DataFrame, members: pd.DataFrame) -> pd.DataFrame:
    """rank, n_instances, times_last, pct_last, wait_imposed_ns, wait_suffered_ns, delay_caused_ns, mean_group."""
    ci = inst[(inst["kind"] == "collective") & (inst["n_members"] >= 2)]
    cm = members[members["iid"].isin(ci["instance"])]
    counted = ci[ci["last_delay_ns"] > TIE_NS]
    ranks = np.sort(members["rank"].unique()) if len(members) else np.empty(0, np.int64)
    out = pd.DataFrame({"rank": ranks})
    out["n_instances"] = out["rank"].map(cm.groupby("rank").size()).fillna(0).astype(np.int64)
    out["times_last"] = out["rank"].map(counted.groupby("last_rank").size()).fillna(0).astype(np.int64)
    # instances with a clear last arrival (ties — members queued behind one earlier transfer — tell nothing)
    decided = cm[cm["iid"].isin(counted["instance"])]
    out["n_decided"] = out["rank"].map(decided.groupby("rank").size()).fillna(0).astype(np.int64)
    out["pct_last"] = np.where(out["n_decided"] > 0, out["times_last"] / out["n_decided"].clip(lower=1), 0.0)
    out["wait_imposed_ns"] = out["rank"].map(counted.groupby("last_rank")["total_wait_ns"].sum()).fillna(0)
    out["delay_caused_ns"] = out["rank"].map(counted.groupby("last_rank")["last_delay_ns"].sum()).fillna(0)
    out["wait_suffered_ns"] = out["rank"].map(cm.groupby("rank")["wait_ns"].sum()).fillna(0)
    gs = cm.merge(ci[["instance", "group_size"]], left_on="iid", right_on="instance")
    out["mean_group"] = out["rank"].map(gs.groupby("rank")["group_size"].mean()).fillna(0)
    return out.sort_values(["wait_imposed_ns", "times_last", "rank"], ascending=[False, False, True],
                           kind="stable").reset_index(drop=True)


def step_spread(step_metrics: pd.DataFrame) -> list[dict]:
    """Per step across ranks: min/median/max step time, (max−min)/median, slowest and fastest rank."""
    sm = step_metrics
    if sm is None or not len(sm):
        return []
    out = []
    for step, g in sm.groupby("step", sort=True):
        t = g["step_time_ns"].to_numpy()
        med = float(np.median(t))
        out.append({"step": int(step), "min_us": float(t.min()) / 1e3, "median_us": med / 1e3,
                    "max_us": float(t.max()) / 1e3, "spread": (float(t.max() - t.min()) / med) if med > 0 else None,
                    "slowest_rank": int(g["rank"].iloc[int(np.argmax(t))]),
                    "fastest_rank": int(g["rank"].iloc[int(np.argmin(t))])})
    return out


def first_activity_gap(job: Any) -> pd.DataFrame:
    """Per rank and step: time from the step's start to its first device activity (host-side/data-loading gap)."""
    rows = []
    for r, t in job.traces.items():
        st, a = t.steps, t.activity
        if not len(st) or not len(a):
            continue
        s = np.sort(a["start"].to_numpy())
        k = np.searchsorted(s, st["start"].to_numpy())
        ok = k < len(s)
        first = np.where(ok, s[np.minimum(k, len(s) - 1)], st["end"].to_numpy())
        first = np.minimum(first, st["end"].to_numpy())
        rows.append(pd.DataFrame({"rank": r, "step": st["step"].to_numpy(),
                                  "gap_ns": first - st["start"].to_numpy()}))
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame({"rank": [], "step": [], "gap_ns": []})


def _excess(df: pd.DataFrame, col: str, rank: int) -> float:
    """Median over steps of (rank's value − median of the other ranks' values)."""
    if df is None or not len(df) or col not in df:
        return 0.0
    piv = df.pivot_table(index="step", columns="rank", values=col, aggfunc="sum")
    if rank not in piv.columns or piv.shape[1] < 2:
        return 0.0
    others = piv.drop(columns=[rank]).median(axis=1)
    return float(np.nanmedian((piv[rank] - others).to_numpy()))


def analyse(job: Any, inst: pd.DataFrame, members: pd.DataFrame) -> dict:
    """The `stragglers` section (docs/report-sections.md) plus internal numbers for the summary."""
    stats = per_rank_stats(inst, members)
    sm = job.step_metrics
    steps = sorted(sm["step"].unique()) if sm is not None and len(sm) else []
    med_step = float(sm.groupby("step")["step_time_ns"].median().median()) if len(steps) else float("nan")
    if not len(steps) and len(members):
        med_step = float(members["end"].max() - members["start"].min())
    n_steps = max(1, len([s for s in steps if s >= 0]) or 1)
    stats["delay_share"] = stats["delay_caused_ns"] / n_steps / med_step if med_step and med_step > 0 else 0.0
    need = 0.5 + 0.5 / stats["mean_group"].clip(lower=1)
    stats["qualifies"] = (stats["pct_last"] >= need) & (stats["delay_share"] >= MATERIAL_SHARE) & \
        (stats["n_decided"] >= 3)
    straggler: Optional[int] = None
    attribution, evidence, confidence = "unknown", "no rank arrives last in a clear majority with material delay", 0.0
    cand = stats[stats["qualifies"]]
    if len(cand):
        row = cand.iloc[0]
        straggler = int(row["rank"])
        delay_per_step = float(row["delay_caused_ns"]) / n_steps
        comp = _excess(sm, "compute_ns", straggler)
        gap = _excess(first_activity_gap(job), "gap_ns", straggler)
        parts = [f"rank {straggler} arrived last in {int(row['times_last'])} of the {int(row['n_decided'])} "
                 f"collectives it joined that had a clear last arrival ({row['pct_last']:.0%}), delaying them by {delay_per_step / 1e3:.1f} µs per step "
                 f"({row['delay_share']:.1%} of the median step) and imposing "
                 f"{row['wait_imposed_ns'] / 1e3:.1f} µs of waiting on the others"]
        if comp >= gap and comp >= EXPLAINS * delay_per_step and comp > 0:
            attribution = "compute"
            parts.append(f"its compute per step is {comp / 1e3:.1f} µs above the other ranks' median")
        elif gap > comp and gap >= EXPLAINS * delay_per_step:
            attribution = "host"
            parts.append(f"its first kernel of a step starts {gap / 1e3:.1f} µs later than the other ranks' "
                         "(data loading / host-side work before the step's GPU work)")
        else:
            parts.append(f"neither its compute (+{comp / 1e3:.1f} µs) nor its host gap (+{gap / 1e3:.1f} µs) "
                         "explains the delay")
            link = link_difference(getattr(job, "nccl_logs", []), straggler)
            if link:
                attribution = "link"
                parts.append(link)
        evidence = "; ".join(parts)
        confidence = round(float(min(1.0, row["pct_last"]) * min(1.0, row["delay_share"] / (2 * MATERIAL_SHARE))), 3)

    ci = inst[(inst["kind"] == "collective") & (inst["last_delay_ns"] > TIE_NS)]
    per_step = []
    for step, g in ci.groupby("step", sort=True):
        by = g.groupby("last_rank")["last_delay_ns"].sum()
        per_step.append({"step": int(step), "slowest_rank": int(by.idxmax()),
                         "last_arrivals": {str(int(k)): int(v) for k, v in g["last_rank"].value_counts().items()}})
    return {
        "per_rank": [{"rank": int(r.rank), "times_last": int(r.times_last), "pct_last": float(r.pct_last),
                      "wait_imposed_us": float(r.wait_imposed_ns) / 1e3,
                      "wait_suffered_us": float(r.wait_suffered_ns) / 1e3,
                      "delay_caused_us": float(r.delay_caused_ns) / 1e3, "delay_share": float(r.delay_share),
                      "n_instances": int(r.n_instances), "n_decided": int(r.n_decided)} for r in stats.itertuples()],
        "straggler": straggler, "confidence": confidence, "attribution": attribution, "evidence": evidence,
        "per_step": per_step,
        "thresholds": {"tie_us": TIE_NS / 1e3, "pct_last": "0.5 + 0.5/n (n = mean group size)",
                       "material_delay_share": MATERIAL_SHARE},
    }
