"""Terminal output: summary, findings, the per-rank × step table, then what could not be read."""
from __future__ import annotations

from typing import Any, Optional


def ranges(values: list[int]) -> str:
    """[0,1,2,5,7,8] → '0-2,5,7-8' (long rank lists stay readable)."""
    vals = sorted(set(values))
    out, i = [], 0
    while i < len(vals):
        j = i
        while j + 1 < len(vals) and vals[j + 1] == vals[j] + 1:
            j += 1
        out.append(str(vals[i]) if i == j else f"{vals[i]}-{vals[j]}")
        i = j + 1
    return ",".join(out)


def _pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{100 * x:5.1f}%"


def _ms(us: Optional[float]) -> str:
    return "-" if us is None else f"{us / 1000:9.3f}"


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.rjust(w) for h, w in zip(headers, widths))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
    return out


def render_text(report: dict[str, Any], color: bool = False) -> str:
    """Human-readable report for a terminal or a CI log."""
    out: list[str] = []
    job = report["job"]
    s = job.get("summary") or {}
    inputs = report["inputs"]
    world = job.get("world_size")
    ranks = job.get("ranks") or []
    head = f"analyze {report['tool']['version']}: {len(ranks)} rank(s)"
    if world:
        head += f" of world size {world}"
    if s.get("steps"):
        head += f", steps {ranges(s['steps'])}" if s["steps"] != [-1] else ", whole trace (no ProfilerStep)"
    out.append(head)
    out.append(f"inputs: {inputs['read']} read, {inputs['salvaged']} salvaged, {inputs['skipped']} skipped, "
               f"{inputs['failed']} failed")
    if job.get("missing_ranks"):
        out.append(f"missing ranks: {ranges(job['missing_ranks'])}")
    if s:
        out.append(
            f"job: mean step {_ms(s.get('mean_step_time_us')).strip()} ms, comm share {_pct(s.get('comm_share')).strip()}, "
            f"overlap coverage {_pct(s.get('overlap_coverage')).strip()}, exposed comm "
            f"{_pct(s.get('exposed_comm_share')).strip()}, idle {_pct(s.get('idle_share')).strip()}")
    verdict = report.get("verdict")
    if verdict:
        out.append(f"verdict: {verdict}")
    findings = report.get("findings") or []
    if findings:
        out.append("")
        out.append("findings:")
        for i, f in enumerate(findings, 1):
            out.append(f"  {i}. [{f.get('severity', '?')}] {f.get('id', '')} {f.get('title', '')}")
    rows = report["metrics"]["per_step"]
    if rows:
        out.append("")
        out.append("per rank and step (times in ms):")
        headers = ["rank", "step", "step", "compute", "comm", "exposed", "overlap", "comm%", "idle", "memcpy"]
        body = [[str(r["rank"]), "all" if r["step"] == -1 else str(r["step"]), _ms(r["step_time_us"]),
                 _ms(r["compute_us"]), _ms(r["comm_us"]), _ms(r["exposed_comm_us"]),
                 _pct(r["overlap_coverage"]), _pct(r["comm_share"]), _ms(r["idle_us"]), _ms(r["memcpy_us"])]
                for r in rows]
        out += ["  " + line for line in _table(headers, body)]
    problems = [f for f in inputs["files"] if f["status"] != "read"]
    if problems:
        out.append("")
        for f in problems:
            out.append(f"{f['status']}: {f['path']}: {f['message']}")
    for w in report.get("warnings") or []:
        if not any(w == f.get("message") for f in problems):
            out.append(f"warning: {w}")
    return "\n".join(out) + "\n"
