"""docs/api.md runs: every Python block is executed in order, and each `print(...)  # expected` shows that text."""
from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path

import pytest

import analyzer
from analyzer.api import Analysis

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs/api.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```python\n(.*?)```", DOC, re.S)


def _expected(block: str) -> list[str]:
    """The comments on print lines: text the output must contain (a trailing '...' allows more)."""
    out = []
    for line in block.splitlines():
        m = re.match(r"\s*print\(.*\)\s+#\s*(.+)$", line)
        if m:
            out.append(m.group(1).removesuffix("...").strip())
    return out


def test_the_doc_has_examples():
    assert len(BLOCKS) >= 8
    assert sum(len(_expected(b)) for b in BLOCKS) >= 5


@pytest.mark.slow
def test_every_block_runs_and_prints_what_it_says(monkeypatch):
    monkeypatch.chdir(ROOT)
    ns: dict = {}
    for i, block in enumerate(BLOCKS):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            exec(compile(block, f"docs/api.md block {i + 1}", "exec"), ns)  # noqa: S102 - our own doc
        lines = buf.getvalue().splitlines()
        k = 0
        for want in _expected(block):  # in order, each on a line of its own
            while k < len(lines) and want not in lines[k]:
                k += 1
            assert k < len(lines), f"block {i + 1}: {want!r} not in the output's lines, in order: {lines!r}"
            k += 1


def test_every_public_member_is_documented():
    members = [n for n in dir(Analysis) if not n.startswith("_") and n not in ("job",)]
    missing = [n for n in members if f"a.{n}" not in DOC and f"`{n}`" not in DOC and f".{n}(" not in DOC]
    assert missing == [], missing
    assert "analyzer.load(" in DOC and callable(analyzer.load)


def test_documented_load_options_exist():
    import inspect
    params = set(inspect.signature(analyzer.api.load).parameters)
    section = DOC.split("## `analyzer.load(paths, **options)`")[1].split("\n## ")[0]
    table = re.findall(r"^\| `([a-z_]+)`(?:, `([a-z_]+)`)? \|", section, re.M)
    names = {n for pair in table for n in pair if n}
    assert names and names <= params, names - params
    assert params - {"rule_config"} <= names | {"paths"}, params - names
