"""The JSON and HTML reports written a piece at a time are the documents rendered whole, character for character."""
from __future__ import annotations

import io
import json
import random
from functools import lru_cache
from pathlib import Path

import pytest

from analyzer.render import sanitize
from analyzer.render.html import guarded_pieces, html_pieces, render_html, write_html
from analyzer.render.json_out import render_json_bytes, write_json

ROOT = Path(__file__).resolve().parents[1]

# what guard_ci_lines reacts to: ':' and '#[' runs, blanks before them, every line end splitlines knows
ALPHABET = [":", "::", "#", "##", "[", " ", "\t", "\x1f", "\n", "\r", "\r\n", "\x0b", "\x85", "\u2028", "a", "b"]


def _cases(n: int, seed: int = 5):
    rng = random.Random(seed)
    for _ in range(n):
        doc = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 40)))
        cuts = sorted(rng.sample(range(len(doc) + 1), rng.randint(0, min(8, len(doc) + 1))))
        yield doc, [doc[a:b] for a, b in zip([0] + cuts, cuts + [len(doc)])]


def test_guarded_pieces_are_the_guarded_document_however_it_is_cut():
    changed = 0
    for doc, pieces in _cases(4000):
        want = sanitize.guard_ci_lines(doc)
        assert "".join(guarded_pieces(pieces)) == want, (doc, pieces)
        changed += want != doc
    assert changed > 1000  # the cases do exercise the guard


def test_guarded_pieces_break_commands_split_across_pieces():
    assert "".join(guarded_pieces(["x\n  :", ":error::x ##", "[group]\n"])) == (
        "x\n  " + sanitize.BREAK + "::error::x #" + sanitize.BREAK + "#[group]\n")


@lru_cache(maxsize=None)
def _loaded(folder: str):
    import analyzer
    return analyzer.load(ROOT / folder, jobs=1)


@pytest.mark.slow
@pytest.mark.parametrize("folder", ["fixtures/real-cpu/pp-1f1b"])  # a pipeline: every figure and table
def test_written_reports_are_the_rendered_ones(folder, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    a = _loaded(folder)
    fh = io.StringIO()
    n = write_html(a.report, a.job, fh)
    page = render_html(a.report, a.job)
    assert fh.getvalue() == page and n == len(page)
    assert "".join(html_pieces(a.report, a.job)).count("<tr") == page.count("<tr") > len(a.report["metrics"]["per_step"])
    out = io.BytesIO()
    write_json(a.report, out)
    assert out.getvalue() == render_json_bytes(a.report)
    assert json.loads(out.getvalue())["metrics"]["per_step"] == a.report["metrics"]["per_step"]
