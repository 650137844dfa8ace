"""Build the report: one plain, JSON-ready dict that every renderer reads (schema: docs/json-schema.md)."""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from analyzer import __version__
from analyzer.load.job import Job
from analyzer.report.summary import job_summary, rank_summary

SCHEMA = "dtrace-analyzer/report"
SCHEMA_VERSION = 1

_NS_TO_US = {c: c[:-3] + "_us" for c in (
    "step_time_ns", "compute_ns", "comm_ns", "overlap_ns", "exposed_comm_ns", "memcpy_ns", "busy_ns", "idle_ns",
    "mean_step_time_ns")}


def clean(value: Any) -> Any:
    """Make a value JSON-ready: numpy scalars → Python, NaN/inf → None, recursively."""
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        f = float(value)
        return None if math.isnan(f) or math.isinf(f) else f
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.ndarray):
        return clean(value.tolist())
    return value


def frame_records(df: pd.DataFrame, ns_to_us: bool = True) -> list[dict]:
    """DataFrame → list of dicts, with *_ns durations reported as *_us floats."""
    if df is None or df.empty:
        return []
    out = df.copy()
    if ns_to_us:
        for c, new in _NS_TO_US.items():
            if c in out.columns:
                out[new] = out.pop(c) / 1000.0
    return clean(out.to_dict(orient="records"))


def build_report(job: Job) -> dict:
    """The base report: inputs, ranks, per-step and per-rank metrics, job summary, warnings."""
    sm = job.step_metrics
    per_step = sm.drop(columns=["start", "end"]) if not sm.empty else sm
    files = [clean(vars(f)) for f in job.files]
    summary = clean(job_summary(sm))
    if "mean_step_time_ns" in summary:
        summary["mean_step_time_us"] = summary.pop("mean_step_time_ns") / 1000.0 if summary[
            "mean_step_time_ns"] is not None else None
    ranks = []
    for r, t in job.traces.items():
        ranks.append(clean({
            "rank": r, "file": t.path, "rank_source": t.rank_source, "world_size": t.world_size,
            "host": t.meta.get("host"), "gpu": t.meta.get("gpu_name"), "device_type": t.meta.get("device_type"),
            "backend": t.meta.get("backend"), "nccl_version": t.meta.get("nccl_version"),
            "activities": int(len(t.activity)), "collectives": int(len(t.collectives)),
            "steps": [int(s) for s in t.steps["step"]] if len(t.steps) else [],
            "salvaged": t.salvage is not None,
        }))
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "analyze", "version": __version__},
        "inputs": {
            "files": files,
            "read": job.count("read"), "salvaged": job.count("salvaged"),
            "skipped": job.count("skipped"), "failed": job.count("failed"),
        },
        "job": {
            "world_size": job.world_size, "ranks": job.ranks, "missing_ranks": job.missing_ranks,
            "summary": summary,
        },
        "ranks": ranks,
        "metrics": {
            "per_step": frame_records(per_step),
            "per_rank": frame_records(rank_summary(sm)),
        },
        "findings": [],
        "warnings": list(job.warnings),
    }
