"""One entry point for every report format: ``render(fmt, report, job)`` → the document as text."""
from __future__ import annotations

from typing import Any

FORMATS = ("text", "json", "markdown", "html", "junit", "sarif", "github")


def render(fmt: str, report: dict, job: Any = None, fail_on: str = "error", color: bool = False,
           verbose: bool = False) -> str:
    """The report in one format (``job``: the loaded job, for the HTML figures; ``verbose``: text lists every
    skipped file)."""
    if fmt == "json":
        from analyzer.render.json_out import render_json
        return render_json(report)
    if fmt == "markdown":
        from analyzer.render.markdown import render_markdown
        return render_markdown(report)
    if fmt == "html":
        from analyzer.render.html import render_html
        return render_html(report, job)
    if fmt == "junit":
        from analyzer.render.common import registry_rules
        from analyzer.render.junit import render_junit
        return render_junit(report, fail_on, registry_rules())
    if fmt == "sarif":
        from analyzer.render.common import registry_rules
        from analyzer.render.sarif import render_sarif
        return render_sarif(report, registry_rules())
    if fmt == "github":
        from analyzer.render.github import render_github
        return render_github(report)
    if fmt != "text":
        raise ValueError(f"unknown format {fmt!r}; one of {', '.join(FORMATS)}")
    from analyzer.render.text import render_text
    return render_text(report, color=color, verbose=verbose)
