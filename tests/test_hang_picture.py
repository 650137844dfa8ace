"""The HTML post-mortem's wait-for picture (analyzer/render/wait_picture.py) and the `hang.waits` rows it draws,
through analyzer.load on real and simulated hang folders."""
from __future__ import annotations

import re

import analyzer
from analyzer.render.wait_picture import wait_picture
from tests.conftest import FIXTURES


def _boxes(svg: str) -> list[str]:
    return re.findall(r'font-weight="600" fill="#222">([^<]*)</text>', svg)


def test_one_stalled_rank_is_one_row_whatever_the_world_size():
    a = analyzer.load(FIXTURES / "sim" / "hang_stalled_rank")
    assert a.report["hang"]["waits"] == [{"process_group": "0", "seq": 5, "op": "allreduce",
                                          "waiting": [0, 1, 3, 4, 5, 6, 7], "waits_for": [2], "absent": []}]
    fig = wait_picture(a.report)
    assert _boxes(fig) == ["ranks 0-1, 3-7 (7)", "rank 2 — culprit"]
    assert "entered #6, completed #4" in fig and "entered #4, completed #4" in fig
    assert 'stroke="#c62828"' in fig  # the culprit's box is red
    assert fig in a.render("html")


def test_chains_over_several_groups_draw_each_rank_where_it_is_blocked():
    """Real gloo failure: rank 1 crashed; the others are blocked in six groups, some waiting for ranks that wait."""
    a = analyzer.load(FIXTURES / "real-cpu-failures-2" / "two_culprits_crash_and_hang")
    rows = a.report["hang"]["waits"]
    waiters = sorted(r for row in rows for r in row["waiting"])
    assert waiters == [0, 2, 3, 4, 5, 6, 7]  # every live rank once, at its own blocking point
    assert {tuple(row["waits_for"]) for row in rows if 1 in row["waits_for"]} == {(1,)}
    fig = wait_picture(a.report)
    assert fig.count("rank 1 — culprit") == 2 and "never entered it" in fig


def test_input_text_cannot_break_out_of_the_svg():
    rep = {"hang": {"status": "hang", "groups": [],
                    "waits": [{"process_group": '"/><script>alert(1)</script>', "seq": 3, "op": "<b>x</b>",
                               "waiting": [0], "waits_for": [1], "absent": []}],
                    "diagnoses": [{"culprit_ranks": [1], "confidence": 0.9, "tie": False}]}}
    fig = wait_picture(rep)
    assert "<script>" not in fig and "<b>x</b>" not in fig and "&lt;script&gt;" in fig


def test_without_dumps_the_diagnosis_gives_the_row():
    rep = {"hang": {"status": "hang", "groups": [], "waits": [],
                    "diagnoses": [{"process_group": "", "seq": None, "op": "allreduce", "culprit_ranks": [3],
                                   "waiting_ranks": [0, 1, 2], "confidence": 0.8, "tie": False}]}}
    assert _boxes(wait_picture(rep)) == ["ranks 0-2 (3)", "rank 3 — culprit"]
    rep["hang"]["diagnoses"][0].update(tie=True, confidence=0.4, culprit_ranks=[2, 3], waiting_ranks=[0, 1])
    assert _boxes(wait_picture(rep)) == ["ranks 0-1 (2)", "ranks 2-3 (2) — suspect (tie)"]


def test_no_picture_without_a_hang():
    assert wait_picture({"hang": {"status": "no_hang_evidence"}}) == ""
    assert 'class="waitfor"' not in analyzer.load(FIXTURES / "sim" / "ddp_clean").render("html")
