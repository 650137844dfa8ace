"""How an :class:`analyzer.Analysis` shows itself in a REPL (``__repr__``) and in Jupyter (``_repr_html_``).

A few lines whatever the job's size: the job, the verdict, the headline numbers and the top findings; the
report and the tables stay behind their attributes (``.report``, ``.steps``, ``.collectives``, …).
"""
from __future__ import annotations

import html
from typing import Any

from analyzer.render import sanitize
from analyzer.render.common import ms, pct, ranges, subject_text

TOP_FINDINGS = 5
MAX_LINE = 160


def _short(x: Any, n: int = MAX_LINE) -> str:
    t = sanitize.text(x)
    return t if len(t) <= n else t[:n - 1] + "…"


def headline(report: dict) -> list[tuple[str, str]]:
    """(name, value) of the headline numbers the text report shows first."""
    job = report.get("job") or {}
    s = job.get("summary") or {}
    out = []
    ranks = job.get("ranks") or []
    out.append(("ranks", f"{len(ranks)}" + (f" of world size {job['world_size']}" if job.get("world_size") else "")))
    if job.get("missing_ranks"):
        out.append(("missing ranks", ranges(job["missing_ranks"])))
    steps = s.get("steps") or []
    if steps:
        from analyzer.render.about import steps_label
        label = "steps whole trace" if steps == [-1] else steps_label(steps)
        out.append(tuple(label.split(" ", 1)))
    if s.get("mean_step_time_us") is not None:
        out += [("mean step", f"{ms(s['mean_step_time_us'])} ms"), ("comm share", pct(s.get("comm_share"))),
                ("exposed comm", pct(s.get("exposed_comm_share"))), ("idle", pct(s.get("idle_share")))]
    return out


def top_findings(report: dict, n: int = TOP_FINDINGS) -> list[str]:
    """'WARNING LOAD001 Straggler … [rank 9]' for the first ``n`` findings (worst first)."""
    out = []
    for f in (report.get("findings") or [])[:n]:
        subj = subject_text(f)
        out.append(_short(f"{str(f.get('severity', '?')).upper()} {f.get('id', '')} {f.get('title', '')}"
                          + (f"  [{subj}]" if subj else "")))
    return out


def _name(report: dict) -> str:
    from analyzer.render.about import job_name
    return job_name(report) or ""


def analysis_repr(report: dict) -> str:
    """The plain-text repr: at most about a dozen short lines."""
    name = _name(report)
    lines = [f"<Analysis{' of ' + _short(name, 80) if name else ''}: {_short(report.get('verdict', ''))}>"]
    lines.append("  " + ", ".join(f"{k} {v}" for k, v in headline(report)))
    fs = report.get("findings") or []
    for t in top_findings(report):
        lines.append("  - " + t)
    if len(fs) > TOP_FINDINGS:
        lines.append(f"  - … {len(fs) - TOP_FINDINGS} more (.findings)")
    lines.append("  tables: .steps .collectives .ranks .groups .kernels .idle .findings_table; .report (dict); "
                 ".render('html')")
    return "\n".join(lines)


def analysis_repr_html(report: dict) -> str:
    """The Jupyter view: verdict, headline numbers, top findings, as one small escaped HTML fragment."""
    e = lambda x: html.escape(sanitize.text(x), quote=True)  # noqa: E731
    name = _name(report)
    rows = "".join(f"<tr><th style='text-align:left'>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in headline(report))
    items = "".join(f"<li>{e(t)}</li>" for t in top_findings(report))
    fs = report.get("findings") or []
    more = f"<li>… {len(fs) - TOP_FINDINGS} more (<code>.findings</code>)</li>" if len(fs) > TOP_FINDINGS else ""
    return (f"<div class='analyze-analysis'><b>Analysis{' of ' + e(name) if name else ''}</b>: "
            f"{e(report.get('verdict', ''))}<table>{rows}</table>"
            + (f"<ol>{items}{more}</ol>" if items else "<p>no findings</p>")
            + "<p style='color:#666'>tables: <code>.steps</code> <code>.collectives</code> <code>.ranks</code> "
              "<code>.groups</code> <code>.kernels</code> <code>.idle</code>; <code>.report</code>; "
              "<code>.render('html')</code></p></div>")
