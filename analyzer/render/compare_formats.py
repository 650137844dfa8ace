"""Which renderer writes a scaling comparison in which format (text, markdown, json)."""
from __future__ import annotations

COMPARE_FORMATS = ("text", "markdown", "json")


def render_comparison(fmt: str, doc: dict) -> str:
    if fmt == "json":
        from analyzer.render import sanitize
        return sanitize.dumps(doc) + "\n"
    from analyzer.render.compare_text import render_markdown, render_text
    if fmt == "markdown":
        return render_markdown(doc)
    if fmt == "text":
        return render_text(doc)
    raise ValueError(f"the comparison has no {fmt!r} format (known: {', '.join(COMPARE_FORMATS)})")
