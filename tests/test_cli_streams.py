"""What reaches stdout and stderr: one document per stream, a closed pipe, no input, a mistyped path, noise."""
from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from analyzer.cli import main
from tests.schemas.mini_jsonschema import errors

ROOT = Path(__file__).resolve().parents[1]
CLEAN = str(ROOT / "fixtures/sim/ddp_clean")
SARIF_SCHEMA = json.loads((ROOT / "tests/schemas/sarif-2.1.0.json").read_text())


def _run(args, capsys):
    code = main(args)
    cap = capsys.readouterr()
    return code, cap.out, cap.err


@pytest.mark.parametrize("args,kind", [(["--html", "-"], "html"), (["--json", "-"], "json"),
                                       (["--format", "json", "-o", "-", "--json", "-"], "json"),
                                       (["--markdown", "-", "--html", "h.html"], "markdown")])
@pytest.mark.slow
def test_exactly_one_document_on_stdout(args, kind, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, _ = _run([CLEAN, "-q", "--jobs", "1", *args], capsys)
    assert code in (0, 1)
    assert not out.startswith("analyze 0")  # the text report stepped aside
    if kind == "html":
        assert out.startswith("<!DOCTYPE html>") and out.count("<!DOCTYPE html>") == 1
    elif kind == "json":
        json.loads(out)  # one document: a second would be "Extra data"
    else:
        assert out.startswith("## Trace analysis: ") and out.count("## Trace analysis: ") == 1


def test_two_documents_for_stdout_are_a_usage_error(capsys):
    code, out, err = _run([CLEAN, "-q", "--json", "-", "--html", "-"], capsys)
    assert code == 2 and out == "" and "would both go to stdout" in err


@pytest.mark.slow
def test_a_closed_pipe_ends_quietly():
    cmd = [sys.executable, "-m", "analyzer", CLEAN, "-q", "--jobs", "1", "--format", "json"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.readline()
    proc.stdout.close()  # like `| head -1`
    err = proc.stderr.read().decode()
    code = proc.wait(timeout=120)
    assert first.strip() == b"{"
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert code in (0, 1)


def test_a_mistyped_path_is_a_usage_error_without_a_report(capsys):
    code, out, err = _run([CLEAN + "-typo", "-q"], capsys)
    assert code == 2 and out == ""
    assert "no such file or folder" in err and "ddp_clean-typo" in err


def test_nothing_read_without_reports_asked_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "notes.md").write_text("# notes, nothing to analyse here at all\n")
    code, out, err = _run([str(tmp_path), "-q"], capsys)
    assert code == 2 and out == "" and "nothing was analysed" in err


def test_nothing_read_is_never_green_in_any_report(tmp_path, capsys):
    (tmp_path / "in").mkdir()
    outs = {f: tmp_path / f"r.{f}" for f in ("junit", "sarif", "json", "github", "text")}
    args = [str(tmp_path / "in"), "-q"]
    for f, p in outs.items():
        args += [f"--{f}", str(p)]
    code, _, err = _run(args, capsys)
    assert code == 2 and "nothing was analysed" in err
    root = ET.parse(outs["junit"]).getroot()
    assert root.get("errors") == "1"
    errs = list(root.iter("error"))
    assert len(errs) == 1 and "nothing was analysed" in errs[0].get("message")
    sarif = json.loads(outs["sarif"].read_text())
    assert errors(sarif, SARIF_SCHEMA) == []
    inv = sarif["runs"][0]["invocations"][0]
    assert inv["executionSuccessful"] is False
    assert "nothing was analysed" in inv["toolExecutionNotifications"][0]["message"]["text"]
    rep = json.loads(outs["json"].read_text())
    assert rep["analysed"] is False and rep["verdict"].startswith("FAIL: nothing was analysed")
    assert "::error title=analyze::nothing was analysed" in outs["github"].read_text()
    assert "verdict: FAIL: nothing was analysed" in outs["text"].read_text()


def test_a_good_run_is_marked_analysed_and_sarif_successful(tmp_path, capsys):
    code, out, _ = _run([CLEAN, "-q", "--jobs", "1", "--sarif", "-"], capsys)
    sarif = json.loads(out)
    assert sarif["runs"][0]["invocations"] == [{"executionSuccessful": True}]


@pytest.mark.slow
def test_skipped_files_are_summarised_by_reason_and_listed_with_v(tmp_path, capsys):
    import shutil
    d = tmp_path / "run"
    shutil.copytree(CLEAN, d)
    for i in range(40):
        (d / f"notes{i:02d}.dat").write_text(f"this is file {i}, long enough to be text\n")
    (d / "blob.bin").write_bytes(bytes(range(1, 30)) * 40)
    code, out, _ = _run([str(d), "-q", "--jobs", "1"], capsys)
    lines = out.splitlines()
    assert "skipped 41 file(s) (-v lists them all):" in lines  # the fixture's expected/scenario.json are ignored
    summary = [ln for ln in lines if ln.startswith("  40 × ")]
    assert len(summary) == 1 and summary[0].count("notes") == 3 and summary[0].endswith(", …")
    assert "  1 × binary: " in out and "not a trace: not a trace" not in out
    assert sum("notes" in ln for ln in lines) == 1
    code, out, _ = _run([str(d), "-q", "--jobs", "1", "-v"], capsys)
    assert sum(ln.startswith("skipped: ") and "notes" in ln for ln in out.splitlines()) == 40
