"""The whole analysis of one job: base metrics, cross-rank timeline, hang post-mortem, rules → report dict."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from analyzer.load.job import Job
from analyzer.report.base import build_report, clean, nothing_analysed_reason


@dataclass
class Options:
    """Knobs of one analysis run (set from the command line or the Python API)."""

    gpus_per_node: Optional[int] = None
    rule_config: Any = None          # rules.config.RuleConfig; None → defaults
    extra: dict = field(default_factory=dict)


def run_analysis(job: Job, options: Optional[Options] = None) -> dict:
    """Build the full report dict (docs/json-schema.md) for a loaded job."""
    from analyzer.cross_rank.section import cross_rank_section
    from analyzer.hang.section import hang_section
    from analyzer.report.nccl_section import nccl_section
    from rules.engine import run_rules

    options = options or Options()
    notes = getattr(job.engine, "notes", None)
    notes = [] if notes is None else notes  # the engine's own list: what it notes during this run is read below
    n_notes = len(notes)
    report = build_report(job)
    report["cross_rank"] = _section(report, "cross-rank", lambda: cross_rank_section(job, options.gpus_per_node))
    report["hang"] = _section(report, "hang", lambda: hang_section(job),
                              {"status": "error", "diagnoses": [], "groups": []})
    report["nccl"] = _section(report, "NCCL log", lambda: nccl_section(job))
    from analyzer.report.profile import profile_section
    report["profile"] = _section(report, "profile", lambda: profile_section(job))
    findings = run_rules(job, report, options.rule_config)
    report["warnings"] += notes[n_notes:]  # what happened on the engine meanwhile (a lost Dask worker's results rebuilt)
    report["findings"] = clean([f if isinstance(f, dict) else f.to_dict() for f in findings])
    if not report["analysed"]:
        report["nothing_analysed"] = nothing_analysed_reason(job)
    report["verdict"] = verdict(report["findings"], report.get("nothing_analysed"))
    return report


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
