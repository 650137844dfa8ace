"""Build the report: one plain, JSON-ready dict that every renderer reads (schema: docs/json-schema.md)."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from analyzer import __version__
from analyzer.load.job import Job
from analyzer.report.summary import job_summary, rank_summary

if TYPE_CHECKING:
    import pandas as pd

SCHEMA = "dtrace-analyzer/report"
SCHEMA_VERSION = 1
#: Minor version: keys added within schema_version 1 (docs/json-schema.md, "Changes").
SCHEMA_MINOR = 8  # keys added within version 1: docs/json-schema.md, "Changes"

_NS_TO_US = {c: c[:-3] + "_us" for c in (
    "step_time_ns", "compute_ns", "comm_ns", "overlap_ns", "exposed_comm_ns", "memcpy_ns", "busy_ns", "idle_ns",
    "wait_ns", "exposed_wait_ns", "transfer_ns", "unsplit_ns", "exposed_unsplit_ns", "mean_step_time_ns")}


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
    names, columns = [], []
    rename = _NS_TO_US if ns_to_us else {}
    order = [c for c in df.columns if c not in rename] + [c for c in rename if c in df.columns]
    for c in order:  # column by column into Python values, then one dict per row (no DataFrame copy)
        v = df[c].to_numpy()
        if c in rename:
            v = v / 1000.0
        names.append(str(rename.get(c, c)))
        columns.append(_python_values(v))
    return shared_key_rows(names, zip(*columns))


def shared_key_rows(names: list[str], rows: Any) -> list[dict]:
    """One plain dict per row, all of them sharing one table of the keys ``names``.

    Made as the attribute dicts of one throw-away class's instances: CPython gives those key-sharing dictionaries
    (PEP 412), where each dict holds only its values (~8 bytes a key) and not a hash table of its own (~30 bytes a
    key). The report's rows per rank and step are the one part of the report that grows with ranks × steps (40,960
    rows at 1024 ranks of 40 steps); as key-sharing dicts they take about half the memory. They are ordinary
    ``dict`` objects to every reader (json, orjson, ==, iteration order); one given a key of its own turns into an
    ordinary dict of its own."""
    kind = type("Row", (), {})
    out = []
    for row in rows:
        d = kind().__dict__
        for k, v in zip(names, row):
            d[k] = v
        out.append(d)
    return out


def _python_values(v: np.ndarray) -> list:
    """A column as JSON-ready Python values (what :func:`clean` makes of each cell)."""
    if v.dtype.kind == "f":
        out = v.tolist()
        bad = np.flatnonzero(~np.isfinite(v))
        for i in bad:
            out[i] = None
        return out
    if v.dtype.kind in "iub":
        return v.tolist()
    return [clean(x) for x in v]


def usable(job: Job) -> bool:
    """Whether anything at all was read to analyse: a trace, an NCCL/watchdog log, a stderr log, a saved NCCL RAS
    report, a Flight Recorder dump or an allocator snapshot."""
    return bool(job.traces or job.nccl_logs or job.fr_dumps or getattr(job, "stderr_logs", None)
                or getattr(job, "ras_reports", None) or getattr(job, "memory_snapshots", None))


def nothing_analysed_reason(job: Job) -> str:
    """Why a run analysed nothing, in one line naming what was found instead."""
    n = len(job.files)
    ignored = getattr(job, "ignored", None) or []
    if not n and ignored:
        return (f"only {len(ignored)} file(s) of documentation, scripts or test ground truth (e.g. "
                f"{ignored[0]}), no trace, log or dump")
    if not n:
        return "no files under the given paths"
    failed = [f for f in job.files if f.status == "failed"]
    if failed:
        return (f"{len(failed)} of {n} file(s) could not be read (first: {failed[0].path}: {failed[0].message}); "
                "no trace, NCCL/stderr log, NCCL RAS report or Flight Recorder dump was usable")
    empty = [f for f in job.files if f.status == "skipped" and f.message.startswith("nothing to analyse")]
    if empty:
        return (f"{len(empty)} of {n} file(s) hold nothing to analyse (first: {empty[0].path}: {empty[0].message}); "
                "no other trace, NCCL/stderr log, NCCL RAS report or Flight Recorder dump was usable")
    return (f"none of the {n} file(s) is a profiler trace, NCCL/watchdog or stderr log, NCCL RAS report, or Flight "
            "Recorder dump")


def skipped_by_reason(files: list) -> list[dict]:
    """Skipped files grouped by reason, the most frequent first: reason, count, the first few paths."""
    by: dict[str, list[str]] = {}
    for f in files:
        if f.status == "skipped":
            by.setdefault(f.message or "skipped", []).append(f.path)
    rows = [{"reason": k, "count": len(v), "examples": v[:3]} for k, v in by.items()]
    return sorted(rows, key=lambda r: (-r["count"], r["reason"]))


def _n_collectives(trace: Any) -> int:
    from analyzer.rank.summary import n_collectives  # the trace path's modules: imported with traces only
    return n_collectives(trace)


def hta_overlap_sums(job: Any) -> dict[int, tuple[int, int]]:
    """Per rank with communication kernels: (overlap ns, comm ns) of HTA's overlap of communication kernels
    (analyzer/rank/hta_compat.py), as each rank's summary computed them where the rank was parsed."""
    out = {}
    for r, t in (getattr(job, "traces", None) or {}).items():
        extra = getattr(t, "extra", None) or {}
        if extra.get("hta_comm_ns"):
            out[int(r)] = (int(extra["hta_overlap_ns"]), int(extra["hta_comm_ns"]))
    return out


def metrics_section(sm: pd.DataFrame, hta: Optional[dict] = None) -> dict:
    """report.metrics: the per-step rows (one per rank and step) and the per-rank sums, from the step metrics;
    ``hta`` (:func:`hta_overlap_sums`) adds each rank's ``hta_overlap_coverage`` (None where it has no comm
    kernels)."""
    per_step = sm.drop(columns=["start", "end"]) if not sm.empty else sm
    unsplit = [c for c in ("unsplit_ns", "exposed_unsplit_ns") if c in per_step]
    if unsplit and not per_step[unsplit].to_numpy().any():  # no instance lacked a traced rank: two keys fewer in
        per_step = per_step.drop(columns=unsplit)          # each of the rank × step rows (docs/json-schema.md)
    per_rank = rank_summary(sm)
    if hta and not per_rank.empty:
        per_rank = per_rank.assign(hta_overlap_coverage=[
            hta[int(r)][0] / hta[int(r)][1] if int(r) in hta else None for r in per_rank["rank"]])
    return {"per_step": frame_records(per_step), "per_rank": frame_records(per_rank)}


def hta_job_coverage(hta: dict) -> Optional[float]:
    """The job's HTA overlap of communication kernels: Σ overlap / Σ comm over the ranks that have them."""
    comm = sum(c for _, c in hta.values())
    return sum(o for o, _ in hta.values()) / comm if comm else None


def build_report(job: Job, metrics: bool = True) -> dict:
    """The base report: inputs, ranks, per-step and per-rank metrics, job summary, warnings. ``metrics=False``
    leaves report.metrics' rows empty, for the caller to fill in with :func:`metrics_section` when it needs
    them (run_analysis: after the cross-rank stage, so that the stage's working memory is not held on top of
    a dict per rank and step)."""
    sm = job.step_metrics
    files = [clean(vars(f)) for f in job.files]
    summary = clean(job_summary(sm))
    hta = hta_overlap_sums(job)
    if summary:
        summary["hta_overlap_coverage"] = hta_job_coverage(hta)
    if "mean_step_time_ns" in summary:
        summary["mean_step_time_us"] = summary.pop("mean_step_time_ns") / 1000.0 if summary[
            "mean_step_time_ns"] is not None else None
    ranks = []
    for r, t in job.traces.items():
        ranks.append(clean({
            "rank": r, "file": t.path, "rank_source": t.rank_source, "world_size": t.world_size,
            "host": t.meta.get("host"), "gpu": t.meta.get("gpu_name"), "device_type": t.meta.get("device_type"),
            "backend": t.meta.get("backend"), "nccl_version": t.meta.get("nccl_version"),
            "activities": int(t.n_activities), "collectives": _n_collectives(t),
            "steps": [int(s) for s in t.steps["step"]] if len(t.steps) else [],
            "salvaged": t.salvage is not None,
            "cut": job.damage[r].to_dict() if r in getattr(job, "damage", {}) else None,
        }))
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "schema_minor": SCHEMA_MINOR,
        "tool": {"name": "analyze", "version": __version__},
        "inputs": {
            "files": files,
            "read": job.count("read"), "salvaged": job.count("salvaged"),
            "skipped": job.count("skipped"), "failed": job.count("failed"),
            "skipped_by_reason": skipped_by_reason(job.files),
            # documentation, scripts, a fixture's ground truth: counted, not listed (parsers/discover.py)
            **({"ignored": len(job.ignored)} if getattr(job, "ignored", None) else {}),
            **({"jobs": clean(job.jobs)} if job.jobs else {}),
        },
        "analysed": usable(job),
        "job": {
            "world_size": job.world_size, "world_size_source": getattr(job, "world_size_source", ""),
            "ranks": job.ranks, "missing_ranks": job.missing_ranks,
            "summary": summary,
        },
        "ranks": ranks,
        "metrics": metrics_section(sm, hta) if metrics else {"per_step": [], "per_rank": []},
        "findings": [],
        "warnings": list(job.warnings),
    }
