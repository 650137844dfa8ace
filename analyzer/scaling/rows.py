"""One row per run from its finished report: size, shape, step time, batch, throughput, shares, and the run's own
parallel-efficiency factors from the per-rank step decomposition (docs/scaling.md, "The factors")."""
from __future__ import annotations

import hashlib
import json
from typing import Any, Optional

import numpy as np
import pandas as pd

from analyzer.scaling.factors import parallel_factors
from analyzer.scaling.shape import job_shape
from analyzer.scaling.volume import comm_volume

#: the columns of a run row, in order (the --record file's columns; docs/scaling.md)
ROW_COLUMNS = (
    "run_id", "label", "source", "collected_at", "world_size", "hosts", "device_type", "shape", "steps",
    "step_time_mean_us", "step_time_median_us", "step_time_p90_us", "step_time_max_us",
    "batch_per_rank", "global_batch", "throughput", "throughput_unit",
    "comm_share", "exposed_comm_share", "exposed_wait_share", "idle_share", "bubble_share",
    "useful_median_us", "useful_mean_us", "useful_max_us", "useful_sum_us",
    "load_balance", "transfer", "host_idle", "bubble", "serialisation", "parallel_efficiency",
    "bucket_cap_mb", "comm_bus_bytes_per_step", "comm_transfer_us_per_step", "comm_busbw_gbps",
    "nominal_busbw_gbps",
)


def _per_rank_parts(report: dict) -> pd.DataFrame:
    """Per rank, mean over its steps: step time T, useful compute U, exposed transfer X, exposed wait W (with the
    exposed unsplit time), idle I, and the pipeline bubble B (taken out of the wait first, then the idle)."""
    rows = (report.get("metrics") or {}).get("per_step") or []
    df = pd.DataFrame(rows)
    if df.empty or "step_time_us" not in df:
        return pd.DataFrame(columns=["rank", "T", "U", "X", "W", "I", "B"])
    for col in ("compute_us", "exposed_comm_us", "exposed_wait_us", "exposed_unsplit_us", "idle_us"):
        if col not in df:
            df[col] = 0.0
    df = df.fillna(0.0)
    g = df.groupby("rank")
    parts = pd.DataFrame({
        "T": g["step_time_us"].mean(), "U": g["compute_us"].mean(), "X": g["exposed_comm_us"].mean(),
        "W": g["exposed_wait_us"].mean() + g["exposed_unsplit_us"].mean(), "I": g["idle_us"].mean()})
    bubble_rate = _bubble_rate_by_rank(report)
    parts["B"] = 0.0
    if bubble_rate is not None:
        b = (parts.index.to_series().map(bubble_rate).fillna(0.0) * parts["T"]).to_numpy()
        from_wait = np.minimum(b, parts["W"].to_numpy())
        from_idle = np.minimum(b - from_wait, parts["I"].to_numpy())
        parts["W"] -= from_wait
        parts["I"] -= from_idle
        parts["B"] = from_wait + from_idle
    return parts.reset_index()


def _bubble_rate_by_rank(report: dict) -> Optional[dict]:
    pipe = (report.get("cross_rank") or {}).get("pipeline") or {}
    rows = pipe.get("per_stage") or []
    if not pipe.get("detected", bool(rows)) or not rows:
        return None
    df = pd.DataFrame(rows)
    if "rank" not in df or "bubble_rate" not in df:
        return None
    return df.groupby("rank")["bubble_rate"].mean().to_dict()


def _step_times(report: dict) -> pd.Series:
    """The job's time per step: the mean over ranks of each step's time."""
    df = pd.DataFrame((report.get("metrics") or {}).get("per_step") or [])
    if df.empty or "step_time_us" not in df:
        return pd.Series(dtype=float)
    return df.groupby("step")["step_time_us"].mean()


def run_id(report: dict) -> str:
    """A stable id of the run: the same traces give the same id (what --record deduplicates on)."""
    about = report.get("about") or {}
    files = sorted((str(f.get("path", "")).rsplit("/", 1)[-1], f.get("rank")) for f in
                   (report.get("inputs") or {}).get("files") or [] if isinstance(f, dict))
    key = json.dumps([(about.get("job") or {}).get("collected_at"), (report.get("job") or {}).get("world_size"),
                      files, ((report.get("job") or {}).get("summary") or {}).get("mean_step_time_us")],
                     sort_keys=True, default=str)
    return hashlib.sha1(key.encode()).hexdigest()[:12]


def _num(x: Any) -> Optional[float]:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if np.isfinite(v) else None


def run_row(report: dict, *, label: Optional[str] = None, source: Optional[str] = None,
            batch_per_rank: Optional[float] = None, bucket_cap_mb: Optional[float] = None) -> dict:
    """The comparison row of one analysed run (keys: ROW_COLUMNS). ``batch_per_rank`` (samples per rank and step)
    makes the throughput samples/s; without it, steps/s."""
    about = report.get("about") or {}
    job = report.get("job") or {}
    summary = job.get("summary") or {}
    world = job.get("world_size") or len(job.get("ranks") or []) or None
    steps = _step_times(report)
    parts = _per_rank_parts(report)
    T = float(steps.mean()) if len(steps) else None
    if T and len(parts):
        parts["U"] = parts["U"].clip(upper=T)  # useful time never exceeds the step (as parallel_factors fits it)
    factors = parallel_factors(parts, T) if T else {}
    bubble_share = float((parts["B"] / parts["T"]).mean()) if len(parts) and T else 0.0
    gb = batch_per_rank * world if batch_per_rank and world else None
    if T:
        thr, unit = ((gb / (T / 1e6), "samples/s") if gb else (1.0 / (T / 1e6), "steps/s"))
    else:
        thr, unit = None, None
    row = {
        "run_id": run_id(report),
        "label": label or (about.get("job") or {}).get("label") or source or "",
        "source": source or ", ".join(about.get("inputs") or []),
        "collected_at": (about.get("job") or {}).get("collected_at"),
        "world_size": int(world) if world else None,
        "hosts": (about.get("job") or {}).get("hosts"),
        "device_type": (about.get("hardware") or {}).get("device_type"),
        "shape": job_shape(report),
        "steps": int(len(steps)),
        "step_time_mean_us": T,
        "step_time_median_us": float(steps.median()) if len(steps) else None,
        "step_time_p90_us": float(np.percentile(steps.to_numpy(), 90)) if len(steps) else None,
        "step_time_max_us": float(steps.max()) if len(steps) else None,
        "batch_per_rank": batch_per_rank, "global_batch": gb,
        "throughput": thr, "throughput_unit": unit,
        "comm_share": _num(summary.get("comm_share")),
        "exposed_comm_share": _num(summary.get("exposed_comm_share")),
        "exposed_wait_share": _num(summary.get("exposed_wait_share")),
        "idle_share": _num(summary.get("idle_share")),
        "bubble_share": bubble_share,
        "useful_median_us": float(parts["U"].median()) if len(parts) else None,
        "useful_mean_us": float(parts["U"].mean()) if len(parts) else None,
        "useful_max_us": float(parts["U"].max()) if len(parts) else None,
        "useful_sum_us": float(parts["U"].sum()) if len(parts) else None,
        "bucket_cap_mb": bucket_cap_mb,
    }
    row.update(comm_volume(report))
    row.update({k: factors.get(k) for k in ("load_balance", "transfer", "host_idle", "bubble", "serialisation",
                                              "parallel_efficiency")})
    return {k: row.get(k) for k in ROW_COLUMNS}
