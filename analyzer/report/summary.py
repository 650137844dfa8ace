"""Aggregate per-step metrics into per-rank and job-level figures (time-weighted, not averages of ratios)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

_SUMS = ["step_time_ns", "compute_ns", "comm_ns", "overlap_ns", "exposed_comm_ns", "memcpy_ns", "busy_ns",
         "idle_ns"]
#: Summed too when the step metrics carry the wait/transfer split (analyzer/report/waits.py).
_SPLIT = ["wait_ns", "exposed_wait_ns", "transfer_ns", "unsplit_ns", "exposed_unsplit_ns"]


def _sums(step_metrics: pd.DataFrame) -> list[str]:
    return _SUMS + [c for c in _SPLIT if c in step_metrics]


def _ratios(t: pd.DataFrame | pd.Series) -> dict:
    """Shares from summed durations: coverage = Σoverlap/Σcomm, shares = Σx/Σstep time."""
    def div(a, b):
        return float(a) / float(b) if b else float("nan")
    # the transfer is the communication once the waits are split off (all of it when they are not)
    transfer = t["transfer_ns"] if "transfer_ns" in t else t["comm_ns"]
    out = {
        "overlap_coverage": div(t["overlap_ns"], transfer),
        "comm_share": div(t["comm_ns"], t["step_time_ns"]),
        "exposed_comm_share": div(t["exposed_comm_ns"], t["step_time_ns"]),
        "idle_share": div(t["idle_ns"], t["step_time_ns"]),
    }
    if "wait_ns" in t:
        out["wait_share"] = div(t["wait_ns"], t["step_time_ns"])
        out["exposed_wait_share"] = div(t["exposed_wait_ns"], t["step_time_ns"])
        out["transfer_share"] = div(transfer, t["step_time_ns"])
    if "unsplit_ns" in t:
        out["unsplit_share"] = div(t["unsplit_ns"], t["step_time_ns"])
        out["exposed_unsplit_share"] = div(t["exposed_unsplit_ns"], t["step_time_ns"])
    return out


def rank_summary(step_metrics: pd.DataFrame) -> pd.DataFrame:
    """One row per rank: steps, mean step time, summed durations and time-weighted shares."""
    if step_metrics.empty:
        return step_metrics  # no traces: an empty table, and no pandas
    import pandas as pd
    g = step_metrics.groupby("rank", sort=True)
    sums = g[_sums(step_metrics)].sum()
    out = pd.DataFrame({"steps": g.size(), "mean_step_time_ns": g["step_time_ns"].mean()})
    out = out.join(sums)
    ratios = pd.DataFrame([_ratios(row) for _, row in sums.iterrows()], index=sums.index)
    return out.join(ratios).reset_index()


def job_summary(step_metrics: pd.DataFrame) -> dict:
    """Whole-job figures over every rank and step, plus the per-step spread of step time across ranks."""
    if step_metrics.empty:
        return {}
    t = step_metrics[_sums(step_metrics)].sum()
    per_step = step_metrics.groupby("step")["step_time_ns"]
    spread = ((per_step.max() - per_step.min()) / per_step.median()).replace([np.inf], np.nan)
    out = {
        "ranks": int(step_metrics["rank"].nunique()),
        "steps": sorted(int(s) for s in step_metrics["step"].unique()),
        "mean_step_time_ns": float(step_metrics["step_time_ns"].mean()),
        "max_step_time_spread": float(spread.max()) if spread.notna().any() else float("nan"),
    }
    out.update(_ratios(t))
    return out
