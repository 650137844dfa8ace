"""Baseline comparison: thresholds, regression findings, and the CLI on a simulated slow-link job."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from analyzer.report.baseline import apply_baseline, compare, parse_threshold, regression_findings
from analyzer.cli import main

ROOT = Path(__file__).resolve().parents[1]
SIM = ROOT / "fixtures/sim"


def _report(step=10000.0, comm=0.30, exposed=0.10, overlap=0.70, busbw=None, bubble=None, comm_us=3000.0):
    r = {"job": {"summary": {"mean_step_time_us": step, "comm_share": comm, "exposed_comm_share": exposed,
                             "overlap_coverage": overlap}},
         "metrics": {"per_step": [{"comm_us": comm_us}, {"comm_us": comm_us}]}, "findings": [], "cross_rank": {}}
    if busbw is not None:
        r["cross_rank"]["collectives"] = {"by_group_op": [{"process_group": "0", "op": "allreduce",
                                                           "mean_busbw_gbps": busbw}]}
    if bubble is not None:
        r["cross_rank"]["pipeline"] = {"detected": True, "mean_bubble_rate": bubble}
    return r


def _rows(section):
    return {m["name"]: m for m in section["metrics"]}


def test_thresholds_relative_and_absolute():
    base = _report(busbw=100.0, bubble=0.20)
    cur = _report(step=10600.0, comm=0.34, exposed=0.16, overlap=0.55, busbw=85.0, bubble=0.24, comm_us=3200.0)
    rows = _rows(compare(cur, base, "b"))
    assert rows["step_time"]["change"] == pytest.approx(0.06) and rows["step_time"]["regressed"]
    assert rows["comm_time"]["change"] == pytest.approx(200 / 3000) and not rows["comm_time"]["regressed"]
    assert rows["comm_share"]["change"] == pytest.approx(0.04) and not rows["comm_share"]["regressed"]
    assert rows["exposed_comm_share"]["regressed"]                      # +6 points > 5
    assert rows["overlap_coverage"]["regressed"]                        # −15 points < −10
    assert rows["overlap_coverage"]["threshold"] == pytest.approx(-0.10)
    assert not rows["bubble_rate"]["regressed"]                         # +4 points
    assert rows["busbw allreduce 0"]["change"] == pytest.approx(-0.15)
    assert rows["busbw allreduce 0"]["regressed"]


def test_improvements_never_regress_and_custom_thresholds_apply():
    base = _report(step=10000.0, busbw=100.0)
    faster = _report(step=8000.0, overlap=0.9, busbw=150.0)
    assert compare(faster, base, "b")["regressions"] == 0
    slower = _report(step=10600.0)
    assert not _rows(compare(slower, base, "b", {"step_time": 0.10}))["step_time"]["regressed"]


def test_findings_one_per_rule_with_error_for_step_time():
    base = _report(busbw=100.0)
    cur = _report(step=12000.0, exposed=0.2, busbw=50.0)
    report = dict(cur, findings=[{"id": "X1", "title": "t", "severity": "warning", "cost": 0.5, "evidence": []}])
    apply_baseline(report, base, "main/")
    ids = [f["id"] for f in report["findings"]]
    assert ids == ["BASE001", "X1", "BASE002", "BASE003"]   # error first; then by cost
    f = report["findings"][0]
    assert f["severity"] == "error" and f["cost"] == pytest.approx(2000 / 12000)
    assert f["evidence"][0]["text"] == "step_time: 10.000 ms → 12.000 ms (+20.0%; threshold +5.0%)"
    assert report["verdict"].startswith("FAIL: 1 error(s), 3 warning(s)")
    assert report["baseline"]["regressions"] == 3
    assert regression_findings(compare(base, base, "b")) == []


def test_parse_threshold():
    assert parse_threshold("step_time=0.1") == ("step_time", 0.1)
    assert parse_threshold("busbw=20%") == ("busbw", pytest.approx(0.2))
    with pytest.raises(ValueError, match="step_time"):
        parse_threshold("steptime=1")


def _json(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.mark.slow
def test_cli_slow_link_against_clean_fails_and_against_itself_passes(tmp_path):
    clean, slow = SIM / "ddp_clean", SIM / "ddp_slow_link"
    out = tmp_path / "r.json"
    assert main([str(slow), "--baseline", str(clean), "--json", str(out), "-q", "--jobs", "1",
                 "--format", "github", "-o", str(tmp_path / "gh.txt")]) == 1
    r = _json(out)
    rows = _rows(r["baseline"])
    assert rows["step_time"]["regressed"] and rows["step_time"]["change"] > 1.0  # ~3× slower
    assert r["findings"][0]["id"] == "BASE001" and r["findings"][0]["severity"] == "error"
    assert "::error" in (tmp_path / "gh.txt").read_text()
    assert main([str(clean), "--baseline", str(clean), "--json", str(out), "-q", "--jobs", "1",
                 "-o", str(tmp_path / "t.txt")]) in (0, 1)
    r = _json(out)
    assert r["baseline"]["regressions"] == 0
    assert all(m["change"] in (0.0, None) for m in r["baseline"]["metrics"])
    assert not any(f["id"].startswith("BASE") for f in r["findings"])


@pytest.mark.slow
def test_cli_baseline_from_saved_json_and_missing_baseline(tmp_path):
    clean = SIM / "ddp_clean"
    saved = tmp_path / "base.json"
    assert main([str(clean), "--format", "json", "-o", str(saved), "-q", "--jobs", "1"]) in (0, 1)
    out = tmp_path / "r.json"
    code = main([str(SIM / "ddp_slow_link"), "--baseline", str(saved), "--json", str(out), "-q", "--jobs", "1",
                 "-o", str(tmp_path / "t.txt")])
    assert code == 1 and _json(out)["baseline"]["source"] == str(saved)
    assert main([str(clean), "--baseline", str(tmp_path / "nope"), "-q", "-o", str(tmp_path / "t.txt")]) == 2
    assert main([str(clean), "--regression-threshold", "bogus=1", "-q"]) == 2
