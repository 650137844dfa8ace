"""The report's "what this describes" lines (the ``about`` block, analyzer/report/about.py), shared by the text,
Markdown and HTML headers and the HTML ``<title>``: job, collection date, versions, hardware, inputs, and when
and with which analyzer version it was analysed. Only what the block holds is shown; the text is raw
(each renderer escapes it for its format).
"""
from __future__ import annotations

from typing import Optional

from analyzer.render.common import printable

MAX_INPUTS_SHOWN = 3


def steps_label(steps: list[int]) -> str:
    """'steps 5-6 (2 profiled)', 'step 10 (1 profiled)': ProfilerStep numbers are labels, not counts."""
    from analyzer.render.common import ranges
    n = len(steps)
    return f"{'step' if n == 1 else 'steps'} {ranges(steps)} ({n} profiled)"


def job_name(report: dict) -> Optional[str]:
    """The job's name for a title: its label (folder or job label), with the torchrun run id when known."""
    job = (report.get("about") or {}).get("job") or {}
    label, run = job.get("label"), job.get("run_id")
    if label and run and run != label:
        return f"{label} (run {run})"
    return label or (f"run {run}" if run else None)


def about_lines(report: dict) -> list[tuple[str, str]]:
    """(label, text) pairs for the header, in reading order; empty when the report has no ``about`` block."""
    about = report.get("about") or {}
    if not about:
        return []
    job = about.get("job") or {}
    out: list[tuple[str, str]] = []
    bits = []
    name = job_name(report)
    if job.get("backend"):
        bits.append(str(job["backend"]))
    if job.get("world_size"):
        bits.append(f"world size {job['world_size']}")
    if job.get("hosts"):
        names = job.get("host_names") or []
        shown = ", ".join(str(h) for h in names[:4]) + (", …" if job["hosts"] > min(4, len(names)) else "")
        bits.append(f"{job['hosts']} host(s)" + (f": {shown}" if shown else ""))
    if job.get("process_groups"):
        bits.append(f"{job['process_groups']} process group(s) in the Flight Recorder dumps")
    if name or bits:
        out.append(("job", (name or "") + (f" ({'; '.join(bits)})" if bits and name else "; ".join(bits))))
    if job.get("collected_at"):
        out.append(("collected", str(job["collected_at"]) + (f" (from {job['collected_from']})"
                                                             if job.get("collected_from") else "")))
    sw = about.get("software") or {}
    hw = about.get("hardware") or {}
    env = []
    if sw.get("torch"):
        env.append(f"PyTorch {sw['torch']}")
    if sw.get("nccl"):
        env.append(f"NCCL {sw['nccl']}")
    if sw.get("flight_recorder"):
        env.append(f"Flight Recorder format {sw['flight_recorder']}")
    if hw.get("gpu"):
        env.append(f"GPU {hw['gpu']}")
    elif hw.get("device_type") == "cpu":
        env.append("CPU only (no GPU in the traces)")
    if env:
        out.append(("environment", ", ".join(env)))
    inputs = [str(p) for p in about.get("inputs") or []]
    if inputs:
        more = len(inputs) - MAX_INPUTS_SHOWN
        out.append(("paths", ", ".join(inputs[:MAX_INPUTS_SHOWN]) + (f" and {more} more" if more > 0 else "")))
    tool = about.get("analyzer") or report.get("tool") or {}
    when = about.get("analysed_at")
    out.append(("analysed", (f"{when} " if when else "") + f"by {tool.get('name', 'analyze')} "
                f"{tool.get('version', '?')}"))
    return [(k, printable(v)) for k, v in out]


def title(report: dict) -> str:
    """'<job>: <verdict>' for a document title; the verdict alone when the job has no name."""
    name = job_name(report)
    verdict = str(report.get("verdict") or "")
    return f"{name}: {verdict}" if name else verdict
