"""The whole analysis of one job: base metrics, cross-rank timeline, hang post-mortem, rules → report dict."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from analyzer.load.job import Job
from analyzer.report.base import build_report, clean, hta_overlap_sums, metrics_section, nothing_analysed_reason


@dataclass
class Options:
    """Knobs of one analysis run (set from the command line or the Python API)."""

    gpus_per_node: Optional[int] = None
    rule_config: Any = None          # rules.config.RuleConfig; None → defaults
    extra: dict = field(default_factory=dict)


def run_analysis(job: Job, options: Optional[Options] = None) -> dict:
    """Build the full report dict (docs/json-schema.md) for a loaded job."""
    from analyzer.hang.section import hang_section
    from analyzer.report.nccl_section import nccl_section
    from rules.engine import run_rules
    from analyzer.layout import mesh_of

    from analyzer.report import coverage as cov
    options = options or Options()
    notes = getattr(job.engine, "notes", None)
    notes = [] if notes is None else notes  # the engine's own list: what it notes during this run is read below
    n_notes = len(notes)
    # ranks with fewer steps than their peers: compare the ranks on the steps they all have (before anything,
    # the cross-rank stage included, reads the step metrics)
    steps = cov.step_coverage(job.step_metrics, job.ranks)
    if steps is not None and "step_coverage" not in job.cache:
        job.cache["step_coverage"] = steps
        job.step_metrics = cov.common_only(job.step_metrics, steps)
    steps = job.cache.get("step_coverage")
    split_note = split_waits(job, options)
    sm = job.step_metrics  # the rows report.metrics is made of (below, once the sections' working memory is gone)
    report = build_report(job, metrics=False)
    if steps is not None:
        report["job"]["step_coverage"] = clean(steps)
        report["warnings"].append(cov.note(steps))
    if split_note:
        report["warnings"].append(split_note)
    report["mesh"] = _section(report, "layout", lambda: mesh_of(job).to_dict())
    report["cross_rank"] = _section(report, "cross-rank", lambda: _cross_rank(job, options.gpus_per_node))
    report["hang"] = _section(report, "hang", lambda: hang_section(job),
                              {"status": "error", "diagnoses": [], "groups": []})
    report["nccl"] = _section(report, "NCCL log", lambda: nccl_section(job))
    from analyzer.report.profile import profile_section
    report["profile"] = _section(report, "profile", lambda: profile_section(job))
    from analyzer.report.breakdown import breakdown_section
    report["breakdown"] = _section(report, "breakdown", lambda: breakdown_section(job, sm))
    from analyzer.report.memory import memory_section
    report["memory"] = _section(report, "memory", lambda: memory_section(job, report))
    report["metrics"] = metrics_section(sm, hta_overlap_sums(job))  # in its place in the report's key order
    findings = run_rules(job, report, options.rule_config)
    report["warnings"] += notes[n_notes:]  # what happened on the engine meanwhile (a lost Dask worker's results rebuilt)
    report["findings"] = clean([f if isinstance(f, dict) else f.to_dict() for f in findings])
    if not report["analysed"]:
        report["nothing_analysed"] = nothing_analysed_reason(job)
    report["verdict"] = verdict(report["findings"], report.get("nothing_analysed"))
    return report


def _cross_rank(job: Job, gpus_per_node: Optional[int]) -> dict:
    """The cross-rank section; it reads traces only, so without them it is empty and its modules (pandas) are
    not imported."""
    if not job.traces:
        return {}
    from analyzer.cross_rank.section import cross_rank_section
    return cross_rank_section(job, gpus_per_node)


def split_waits(job: Job, options: Options) -> Optional[str]:
    """Give the job's step metrics their wait / transfer split (analyzer/report/waits.py) before the report is
    built from them, so that every figure made of exposed communication is that of the transfer. A failure
    leaves the whole span as transfer and comes back as a report warning."""
    from analyzer.report.waits import apply_split, split_frame
    sm = job.step_metrics
    if sm is None or not len(sm) or "wait_ns" in sm:
        return None
    split, note = None, None
    if len(job.traces) > 1:
        try:
            from analyzer.cross_rank.section import analyse
            split = split_frame(job, analyse(job, options.gpus_per_node))
        except Exception as exc:  # noqa: BLE001 - the cross-rank section reports its own failure
            note = (f"the wait/transfer split failed ({type(exc).__name__}: {exc}); communication time is "
                    "counted whole as transfer")
    job.step_metrics = apply_split(sm, split)
    return note


def _section(report: dict, name: str, build, empty: Optional[dict] = None) -> dict:
    """Build one section; a failure there becomes a warning and an empty section, never a lost report."""
    try:
        return clean(build())
    except Exception as exc:  # noqa: BLE001 - one analysis failing must not hide the others' results
        report["warnings"].append(f"the {name} analysis failed ({type(exc).__name__}: {exc}); its section is empty "
                                  "- please report this with the input that caused it")
        return {**(empty or {}), "error": f"{type(exc).__name__}: {exc}"}


def verdict(findings: list[dict], nothing_analysed: Optional[str] = None) -> str:
    """One line: the worst severity found and how many findings of each; FAIL when nothing was analysed."""
    if nothing_analysed:
        return f"FAIL: nothing was analysed: {nothing_analysed}"
    counts = {s: sum(1 for f in findings if f.get("severity") == s) for s in ("error", "warning", "info")}
    if counts["error"]:
        head = "FAIL"
    elif counts["warning"]:
        head = "WARN"
    else:
        head = "OK"
    return f"{head}: {counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} info"
