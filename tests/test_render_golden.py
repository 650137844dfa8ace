"""Golden-file tests: a hand-built report rendered as text, Markdown, JUnit, SARIF and GitHub annotations.

Regenerate after an intended change with `UPDATE_GOLDEN=1 python -m pytest tests/test_render_golden.py`.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from analyzer.render.github import render_github
from analyzer.render.json_out import render_json
from analyzer.render.junit import render_junit
from analyzer.render.markdown import render_markdown
from analyzer.render.sarif import render_sarif
from analyzer.render.text import render_text

GOLDEN = Path(__file__).parent / "golden"
#: paths are written relative to this folder (the repository root, where the golden input's paths start);
#: the SARIF's originalUriBaseIds names it, so the goldens hold a placeholder for this machine's path
BASE = str(Path(__file__).resolve().parents[1])
RULES = [{"id": "STRAG001", "title": "Straggler rank", "severity": "error", "doc": "A rank that arrives last."},
         {"id": "HANG001", "title": "Rank never joined a collective", "severity": "error", "doc": ""}]
RENDERERS = {
    "report.txt": lambda r: render_text(r),
    "report.md": render_markdown,
    "report.junit.xml": lambda r: render_junit(r, "error", RULES),
    "report.sarif": lambda r: render_sarif(r, RULES, base=BASE),
    "report.github.txt": lambda r: render_github(r, base=BASE),
    "report.json": render_json,
}


def load_input() -> dict:
    """The hand-built report every golden file is rendered from (real DLRM metrics + made-up cross-rank facts)."""
    return json.loads((GOLDEN / "report_input.json").read_text())


@pytest.mark.parametrize("name", sorted(RENDERERS))
def test_golden(name, monkeypatch):
    monkeypatch.chdir(BASE)  # relative input paths are taken from the working directory
    got = RENDERERS[name](load_input()).replace(Path(BASE).as_uri(), "file:///REPOSITORY")
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(got, encoding="utf-8")
    assert got == path.read_text(encoding="utf-8"), f"{name} changed; UPDATE_GOLDEN=1 to accept"


def test_rendering_is_deterministic():
    assert all(fn(load_input()) == fn(load_input()) for fn in RENDERERS.values())
