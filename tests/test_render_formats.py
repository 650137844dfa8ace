"""Machine formats and escaping: JUnit counts, SARIF 2.1.0 schema validity, GitHub escaping, Markdown, HTML, JSON."""
from __future__ import annotations

import copy
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from analyzer.render.common import failing, fails, finding_location
from analyzer.render.github import escape_data, escape_property, render_github
from analyzer.render.html import pick_steps, render_html
from analyzer.render.junit import render_junit
from analyzer.render.markdown import DETAILS_OVER, render_markdown
from analyzer.render.sarif import sarif_dict
from analyzer.render.text import render_text
from tests.schemas.mini_jsonschema import errors
from tests.test_render_golden import RULES, load_input

ROOT = Path(__file__).resolve().parents[1]
SARIF_SCHEMA = json.loads((ROOT / "tests/schemas/sarif-2.1.0.json").read_text())
REPORT_SCHEMA = json.loads((ROOT / "docs/report.schema.json").read_text())


def _cases(xml: str) -> dict[str, ET.Element]:
    root = ET.fromstring(xml)
    return {c.get("name").split()[0]: c for c in root.iter("testcase")}


@pytest.mark.parametrize("fail_on,failures", [("error", {"STRAG001"}), ("warning", {"STRAG001", "NCCL003"}),
                                              ("never", set())])
def test_junit_one_case_per_rule_and_failures_by_fail_on(fail_on, failures):
    xml = render_junit(load_input(), fail_on, RULES)
    root = ET.fromstring(xml)
    cases = _cases(xml)
    # registry rules (STRAG001, HANG001) plus the finding ids not in the registry (NCCL003, COMM001)
    assert sorted(cases) == ["COMM001", "HANG001", "NCCL003", "STRAG001"]
    assert {k for k, c in cases.items() if c.find("failure") is not None} == failures
    suite = root.find("testsuite")
    assert suite.get("tests") == "4" and suite.get("failures") == str(len(failures))
    assert root.get("failures") == str(len(failures))
    if "STRAG001" in failures:
        f = cases["STRAG001"].find("failure")
        assert f.get("type") == "error" and "fix: Profile rank 2" in f.text


def test_junit_without_registry_uses_finding_ids_and_passing_findings_go_to_output():
    cases = _cases(render_junit(load_input(), "error"))
    assert sorted(cases) == ["COMM001", "NCCL003", "STRAG001"]
    assert "NCCL fell back" in cases["NCCL003"].find("system-out").text


def test_sarif_validates_against_the_official_2_1_0_schema():
    log = sarif_dict(load_input(), RULES)
    assert errors(log, SARIF_SCHEMA) == []
    run = log["runs"][0]
    ids = [r["id"] for r in run["tool"]["driver"]["rules"]]
    assert ids == ["COMM001", "HANG001", "NCCL003", "STRAG001"]
    res = {r["ruleId"]: r for r in run["results"]}
    assert [r["ruleId"] for r in run["results"]] == ["STRAG001", "NCCL003", "COMM001"]
    assert res["STRAG001"]["level"] == "error" and res["NCCL003"]["level"] == "warning"
    assert res["COMM001"]["level"] == "note"
    loc = res["NCCL003"]["locations"][0]["physicalLocation"]
    assert loc == {"artifactLocation": {"uri": "logs/nccl%20rank0.log", "uriBaseId": "SRCROOT"},
                   "region": {"startLine": 42}}
    assert run["originalUriBaseIds"]["SRCROOT"]["uri"].startswith("file:///")
    assert all(ids[r["ruleIndex"]] == r["ruleId"] for r in run["results"])


def test_sarif_validator_rejects_a_broken_log():
    log = sarif_dict(load_input(), RULES)
    bad = copy.deepcopy(log)
    bad["runs"][0]["results"][0]["level"] = "fatal"
    del bad["version"]
    errs = errors(bad, SARIF_SCHEMA)
    assert any("version" in e for e in errs) and any("fatal" in e for e in errs)


def test_github_escaping_as_the_runner_requires():
    assert escape_data("100%\r\nx") == "100%25%0D%0Ax"
    assert escape_property("a:b,c%") == "a%3Ab%2Cc%25"
    lines = render_github(load_input()).splitlines()
    assert [ln.split(" ", 1)[0] for ln in lines] == ["::error", "::warning", "::notice", "::notice"]
    assert lines[1].startswith("::warning file=logs/nccl rank0.log,line=42,title=NCCL003 NCCL fell back to "
                               "sockets%3A 100%25 of inter-node traffic%2C line 1%0Aline 2::")
    assert all("\n" not in ln and "\r" not in ln for ln in lines)
    assert lines[-1] == "::notice title=analyze::FAIL: 1 error(s), 1 warning(s), 1 info"


def test_fail_on_levels():
    r = load_input()
    assert [f["id"] for f in failing(r, "error")] == ["STRAG001"]
    assert [f["id"] for f in failing(r, "warning")] == ["STRAG001", "NCCL003"]
    assert failing(r, "never") == []
    assert not fails({"severity": "info"}, "warning")


def test_finding_location_falls_back_to_the_ranks_trace():
    r = load_input()
    f = {"id": "X", "severity": "info", "subject": {"ranks": [1]}, "evidence": [{"text": "t"}]}
    assert finding_location(r, f) == (r["ranks"][1]["file"], None)
    assert finding_location(r, r["findings"][1]) == ("logs/nccl rank0.log", 42)


def test_markdown_folds_long_tables_and_escapes_input():
    r = load_input()
    md = render_markdown(r)
    assert "<details>" not in md.split("### Per-rank step table")[1].split("###")[0]
    r["metrics"]["per_step"] = r["metrics"]["per_step"] * 4  # 16 rows > DETAILS_OVER
    assert len(r["metrics"]["per_step"]) > DETAILS_OVER
    md = render_markdown(r)
    assert "<details><summary>per rank and step (16 rows)</summary>" in md
    assert "<b>not</b>" not in md and "&lt;b&gt;not&lt;/b&gt;" in md
    assert "for it \\| step 10" in md  # a pipe from input cannot break a table


def test_text_colour_only_when_asked():
    r = load_input()
    assert "\033[" not in render_text(r)
    coloured = render_text(r, color=True)
    assert "\033[1;31mERROR\033[0m" in coloured and "\033[1;31mFAIL" in coloured


@pytest.mark.slow
def test_html_escapes_every_input_string_and_is_self_contained():
    r = load_input()
    r["findings"][0]["title"] = "<script>alert(1)</script>"
    r["inputs"]["files"][-1]["path"] = "x\"><img src=x onerror=alert(1)>.log"
    html = render_html(r)
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<img src=x" not in html
    assert "http://" not in html and "https://" not in html  # nothing to fetch
    assert "data:image/png;base64," in html  # heatmap and bars need no job


def test_pick_steps_representative_and_worst():
    r = {"metrics": {"per_step": [
        {"rank": 0, "step": 1, "step_time_us": 10.0}, {"rank": 1, "step": 1, "step_time_us": 12.0},
        {"rank": 0, "step": 2, "step_time_us": 11.0}, {"rank": 1, "step": 2, "step_time_us": 30.0},
        {"rank": 0, "step": 3, "step_time_us": 16.0}, {"rank": 1, "step": 3, "step_time_us": 16.0}]}}
    assert pick_steps(r) == (3, 2)  # means 11, 20.5, 16 → median 16 is step 3; max 30 on step 2
    assert pick_steps({"metrics": {"per_step": []}}) == (None, None)


def test_report_schema_accepts_the_hand_built_report_and_rejects_breakage():
    r = load_input()
    assert errors(r, REPORT_SCHEMA) == []
    bad = copy.deepcopy(r)
    bad["findings"][0]["severity"] = "critical"
    del bad["verdict"]
    bad["metrics"]["per_step"][0]["comm_share"] = 1.7
    errs = errors(bad, REPORT_SCHEMA)
    assert len(errs) == 3, errs


def test_control_characters_from_input_never_reach_any_format():
    """ANSI colours and stray control bytes from a log line: JUnit stays well-formed XML, nothing leaks."""
    import xml.dom.minidom

    from analyzer.render.github import render_github
    from analyzer.render.html import render_html
    from analyzer.render.junit import render_junit
    from analyzer.render.markdown import render_markdown
    from analyzer.render.text import render_text
    nasty = "\x1b[31mtrn-node-00:1:1 [0] NCCL WARN ctrl \x01\x02 char\x1b[0m"
    report = {"schema_version": 1, "tool": {"version": "0"}, "inputs": {"files": [], "read": 1},
              "job": {"ranks": [0], "summary": {}}, "metrics": {"per_step": [], "per_rank": []},
              "verdict": "FAIL", "warnings": [nasty],
              "findings": [{"id": "NCCL001", "title": nasty, "severity": "error", "confidence": 1.0,
                            "subject": {"ranks": [0]}, "evidence": [{"text": nasty, "file": "x.log", "line": 3}],
                            "fix": nasty}]}
    junit = render_junit(report, "error")
    xml.dom.minidom.parseString(junit.encode())
    for out in (junit, render_markdown(report), render_html(report), render_github(report), render_text(report)):
        assert "\x01" not in out and "\x1b[31m" not in out and "NCCL WARN ctrl" in out
