"""Human text about the rules: --list-rules, --explain ID, and the README's Markdown table."""
from __future__ import annotations

import re
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


_INTERNAL = re.compile(r"\s*\([^()]*\bfixtures/[^()]*\)")
_CODE = re.compile(r";?\s*\b(?:analyzer|parsers|rules)/[\w/]+\.py")  # a module path says nothing to a user


def public(text: str) -> str:
    """``text`` without what only the project's own developers can follow: parenthesised references to its
    test fixtures, and clauses (``;``-separated) that cite them."""
    text = re.sub(r"\s+([:;,)])", r"\1", _CODE.sub("", _INTERNAL.sub("", text)).replace("()", ""))
    return "; ".join(c for c in text.split("; ") if "fixtures/" not in c and not c.startswith("real ")).strip()


def _sentences(text: str, n: int) -> str:
    """The first ``n`` sentences of a paragraph (a sentence ends at '. ' followed by a capital)."""
    parts = re.split(r"(?<=[.!?])\s+(?=[A-Z])", " ".join(text.split()))
    return " ".join(parts[:n])


def explain(rule_id: str, thresholds: Optional[dict[str, float]] = None) -> str:
    """What the rule checks, why it matters, its thresholds (current values), an example, the fix and how to
    confirm, in what a user can act on; the full rationale and where each number comes from are in
    docs/rules.md."""
    from rules.examples import EXAMPLES
    r = get_rule(rule_id)
    if r is None:
        raise KeyError(rule_id)
    thresholds = thresholds or {}
    paras = [p for p in r.doc.strip().split("\n\n") if p.strip()]
    out = [f"{r.id}: {r.title} ({r.severity} by default)", ""]

    def block(label: str, text: str) -> None:
        text = public(text)
        if text:
            out.extend(textwrap.wrap(text, 100, initial_indent=f"{label:<9}", subsequent_indent=" " * 9))

    block("checks:", _sentences(paras[0], 2) if paras else r.title)
    if len(paras) > 1:
        block("why:", _sentences(paras[1], 1))
    if r.thresholds:
        out.append("thresholds (change with --threshold NAME=VALUE or [tool.analyze.thresholds]):")
        for t in r.thresholds:
            cur = thresholds.get(t.name, t.default)
            note = "" if cur == t.default else f", default {_fmt(t.default)}"
            out.extend(textwrap.wrap(f"{t.name} = {_fmt(cur)} ({t.unit}{note}): {public(_sentences(t.doc, 1))}",
                                     100, initial_indent="  ", subsequent_indent="      "))
    if r.id in EXAMPLES:
        block("example:", EXAMPLES[r.id])
    if r.fix:
        block("fix:", r.fix)
    if r.confirm:
        block("confirm:", r.confirm)
    if r.explains:
        out.append(f"lists {', '.join(r.explains)} under it when they concern the same ranks or group")
    out += [f"more: the full rationale and where each threshold comes from in docs/rules.md ({r.id})", ""]
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
