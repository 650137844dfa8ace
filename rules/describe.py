"""Human text about the rules: --list-rules, --explain ID, and the README's Markdown table."""
from __future__ import annotations

import textwrap
from typing import Optional

from rules.catalog import get_rule, sorted_rules
from rules.registry import THRESHOLDS
from rules.threshold_sources import source_of


def _fmt(v: float) -> str:
    """A threshold value without a trailing .0."""
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


def list_rules() -> str:
    """One line per rule: id, severity, title."""
    rules = sorted_rules()
    w = max(len(r.id) for r in rules)
    lines = [f"{r.id:<{w}}  {r.severity:<7}  {r.title}" for r in rules]
    return "\n".join(lines) + "\n"


def explain(rule_id: str, thresholds: Optional[dict[str, float]] = None) -> str:
    """Rationale (docstring), thresholds with current values, how to confirm, fix, and what it explains."""
    r = get_rule(rule_id)
    if r is None:
        raise KeyError(rule_id)
    thresholds = thresholds or {}
    out = [f"{r.id}: {r.title}", f"severity: {r.severity} (default)", "", r.doc, ""]
    if r.thresholds:
        out.append("thresholds (--threshold NAME=VALUE, or [tool.analyze.thresholds]):")
        for t in r.thresholds:
            cur = thresholds.get(t.name, t.default)
            note = "" if cur == t.default else f" (default {_fmt(t.default)})"
            out.append(f"  {t.name} = {_fmt(cur)} {t.unit}{note}")
            out.extend("      " + s for s in textwrap.wrap(t.doc, 100))
            if source_of(t):
                out.extend("      " + s for s in textwrap.wrap("source: " + source_of(t), 100))
        out.append("")
    if r.confirm:
        out += ["how to confirm:"] + ["  " + s for s in textwrap.wrap(r.confirm, 100)] + [""]
    if r.fix:
        out += ["fix:"] + ["  " + s for s in textwrap.wrap(r.fix, 100)] + [""]
    if r.explains:
        out += [f"reports findings of {', '.join(r.explains)} on the same ranks/group as its consequences", ""]
    return "\n".join(out)


def markdown_table() -> str:
    """The README's rule table (generated; tests compare the README against it)."""
    lines = ["| id | severity | title |", "|---|---|---|"]
    for r in sorted_rules():
        lines.append(f"| `{r.id}` | {r.severity} | {r.title.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def threshold_table() -> str:
    """Markdown table of every threshold (docs/rules.md)."""
    sorted_rules()  # registers every rule (and its thresholds)
    lines = ["| threshold | default | unit | meaning | where the number comes from |", "|---|---|---|---|---|"]
    for name in sorted(THRESHOLDS):
        t = THRESHOLDS[name]
        lines.append(f"| `{t.name}` | {_fmt(t.default)} | {t.unit} | {t.doc} | {source_of(t) or '(not stated)'} |")
    return "\n".join(lines) + "\n"


def markdown_catalog() -> str:
    """docs/rules.md's per-rule sections: rationale, thresholds, how to confirm, fix, consequences (generated)."""
    out = []
    for r in sorted_rules():
        out += [f"### {r.id} — {r.title} ({r.severity})", "", r.doc, ""]
        if r.thresholds:
            out += ["Thresholds: " + ", ".join(f"`{t.name}` = {_fmt(t.default)} {t.unit}" for t in r.thresholds)
                    + ".", ""]
        if r.confirm:
            out += [f"*Confirm:* {r.confirm}", ""]
        if r.fix:
            out += [f"*Fix:* {r.fix}", ""]
        if r.explains:
            out += [f"*Lists as consequences:* {', '.join(r.explains)}.", ""]
    return "\n".join(out)


def rules_doc_sections() -> dict[str, str]:
    """The generated parts of docs/rules.md, by the heading they follow."""
    return {"## Rules": markdown_table(), "## Thresholds": threshold_table(), "## Catalog": markdown_catalog()}
