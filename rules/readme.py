"""`python -m rules.readme`: print the Markdown rule table that README.md holds between its rules markers.

`python -m rules.readme --write` rewrites that table in README.md and the generated sections of docs/rules.md
(the table, the thresholds and the catalog) from the registry, so both stay in step with the rules, and the
communication-kernel table of docs/metrics.md from parsers/comm_kernels.py.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

from parsers.comm_kernels import markdown_table as comm_markdown_table
from rules.describe import markdown_table, rules_doc_sections

START, END = "<!-- rules:start -->", "<!-- rules:end -->"
COMM_START, COMM_END = "<!-- comm-kernels:start -->", "<!-- comm-kernels:end -->"


def write(root: Path) -> None:
    """Regenerate README.md's rule table and docs/rules.md's generated sections in place."""
    readme = root / "README.md"
    text = readme.read_text(encoding="utf-8")
    a, b = text.index(START) + len(START), text.index(END)
    readme.write_text(text[:a] + "\n" + markdown_table() + text[b:], encoding="utf-8")
    doc = root / "docs" / "rules.md"
    text = doc.read_text(encoding="utf-8")
    for heading, body in rules_doc_sections().items():
        text = _replace_section(text, heading, body.strip("\n"))
    doc.write_text(text, encoding="utf-8")
    metrics = root / "docs" / "metrics.md"
    text = metrics.read_text(encoding="utf-8")
    a, b = text.index(COMM_START) + len(COMM_START), text.index(COMM_END)
    metrics.write_text(text[:a] + "\n" + comm_markdown_table() + text[b:], encoding="utf-8")


def _replace_section(text: str, heading: str, body: str) -> str:
    """Swap the generated block under `heading`: a table (its consecutive '|' lines), or up to the next '## '."""
    m = re.search(r"^" + re.escape(heading) + r"\n", text, flags=re.M)
    start = m.end()
    nxt = re.search(r"^## ", text[start:], flags=re.M)
    end = start + nxt.start() if nxt else len(text)
    if body.startswith("|"):
        lines = text[start:end].split("\n")
        first = next(i for i, ln in enumerate(lines) if ln.startswith("|"))
        last = first
        while last + 1 < len(lines) and lines[last + 1].startswith("|"):
            last += 1
        block = "\n".join(lines[:first] + body.split("\n") + lines[last + 1:])
        return text[:start] + block + text[end:]
    return text[:start] + "\n" + body + "\n\n" + text[end:]


def main() -> int:
    """Write the table to stdout (or, with --write, regenerate the files)."""
    if "--write" in sys.argv[1:]:
        write(Path(__file__).resolve().parent.parent)
        return 0
    sys.stdout.write(markdown_table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
