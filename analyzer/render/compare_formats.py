"""Which renderer writes a scaling comparison in which format (text, markdown, json, html)."""
from __future__ import annotations

COMPARE_FORMATS = ("text", "markdown", "json", "html")


def render_comparison(fmt: str, doc: dict) -> str:
    if fmt == "json":
        from analyzer.render import sanitize
        return sanitize.dumps(doc) + "\n"
    if fmt == "html":
        from analyzer.render.compare_html import render_html
        return render_html(doc)
    from analyzer.render.compare_text import render_markdown, render_text
    if fmt == "markdown":
        return render_markdown(doc)
    if fmt == "text":
        return render_text(doc)
    raise ValueError(f"the comparison has no {fmt!r} format (known: {', '.join(COMPARE_FORMATS)})")
