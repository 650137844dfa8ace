"""Exit codes for each --fail-on, usage errors, unreadable input; several outputs at once."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from analyzer.cli import build_parser, main, progress_printer, use_color

ROOT = Path(__file__).resolve().parents[1]
CLEAN = ROOT / "fixtures/sim/ddp_clean"


@pytest.fixture(scope="module")
def baselines(tmp_path_factory):
    """Saved reports of the clean job with step time scaled: ×0.8 (current looks +25 %: an error finding) and
    its communication time ×0.8 (current comm looks +25 %: a warning only)."""
    d = tmp_path_factory.mktemp("base")
    ref = d / "ref.json"
    assert main([str(CLEAN), "--format", "json", "-o", str(ref), "-q", "--jobs", "1"]) in (0, 1)
    rep = json.loads(ref.read_text())
    err = json.loads(ref.read_text())
    err["job"]["summary"]["mean_step_time_us"] *= 0.8
    (d / "error.json").write_text(json.dumps(err))
    warn = json.loads(ref.read_text())
    for row in warn["metrics"]["per_step"]:  # (the clean job hides its comm: there is no exposed share to lower)
        row["comm_us"] *= 0.8
    (d / "warning.json").write_text(json.dumps(warn))
    return d, rep


def _own_findings(rep):
    return {f["severity"] for f in rep["findings"]}


@pytest.mark.parametrize("base,fail_on,expected", [
    ("error", "error", 1), ("error", "warning", 1), ("error", "never", 0),
    ("warning", "error", None), ("warning", "warning", 1), ("warning", "never", 0)])
@pytest.mark.slow
def test_exit_code_per_fail_on(baselines, tmp_path, base, fail_on, expected):
    d, rep = baselines
    if expected is None:  # a warning alone fails only if the job's own findings include an error
        expected = 1 if "error" in _own_findings(rep) else 0
    out = tmp_path / "r.json"
    code = main([str(CLEAN), "--baseline", str(d / f"{base}.json"), "--fail-on", fail_on, "--json", str(out),
                 "-q", "--jobs", "1", "-o", str(tmp_path / "r.txt")])
    assert code == expected
    got = json.loads(out.read_text())
    assert any(f["id"] == ("BASE001" if base == "error" else "BASE002") for f in got["findings"])


@pytest.mark.slow
def test_default_fail_on_is_error(baselines, tmp_path):
    d, _ = baselines
    assert main([str(CLEAN), "--baseline", str(d / "error.json"), "-q", "-o", str(tmp_path / "t")]) == 1


@pytest.mark.slow
def test_usage_errors_exit_2(tmp_path, capsys):
    assert main([]) == 2
    with pytest.raises(SystemExit) as exc:
        main([str(CLEAN), "--format", "pdf"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        main([str(CLEAN), "--fail-on", "sometimes"])
    assert exc.value.code == 2
    assert main([str(CLEAN), "-q", "-o", str(tmp_path / "no-such-dir" / "r.txt")]) == 2


def test_no_readable_input_exits_2(tmp_path):
    (tmp_path / "notes.txt").write_text("not a trace\n")
    assert main([str(tmp_path), "-q", "-o", str(tmp_path / "r.txt")]) == 2


@pytest.mark.slow
def test_every_format_at_once(tmp_path):
    outs = {fmt: tmp_path / f"r.{fmt}" for fmt in ("text", "json", "markdown", "html", "junit", "sarif", "github")}
    args = [str(CLEAN), "-q", "--jobs", "1", "-o", str(tmp_path / "stdout.txt")]
    for fmt, p in outs.items():
        args += [f"--{fmt}", str(p)]
    assert main(args) in (0, 1)
    assert json.loads(outs["json"].read_text())["schema"] == "dtrace-analyzer/report"
    assert json.loads(outs["sarif"].read_text())["version"] == "2.1.0"
    assert ET.parse(outs["junit"]).getroot().tag == "testsuites"
    assert outs["html"].read_text().startswith("<!DOCTYPE html>")
    assert outs["markdown"].read_text().startswith("## Trace analysis: ")
    assert outs["text"].read_text() == (tmp_path / "stdout.txt").read_text()
    assert outs["github"].read_text().rstrip().splitlines()[-1].startswith("::notice title=analyze::")


def test_help_documents_exit_codes(capsys):
    text = build_parser().format_help()
    assert "exit codes" in text and "--fail-on" in text and "--baseline" in text


class _Tty:
    def __init__(self, tty):
        self.tty, self.buf = tty, []

    def isatty(self):
        return self.tty

    def write(self, s):
        self.buf.append(s)

    def flush(self):
        pass


def test_colour_and_progress_only_on_a_terminal(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("CI", raising=False)
    assert use_color("auto", _Tty(True)) and not use_color("auto", _Tty(False))
    monkeypatch.setenv("NO_COLOR", "1")
    assert not use_color("auto", _Tty(True)) and use_color("always", _Tty(False))
    tty = _Tty(True)
    prog = progress_printer(False, tty)
    prog(1, 2, "/x/rank0.json")
    prog(2, 2, "/x/rank1.json")
    assert "reading 1/2 rank0.json" in "".join(tty.buf) and tty.buf[-1].endswith("\n")
    assert progress_printer(True, _Tty(True)) is None
    assert progress_printer(False, _Tty(False)) is None
    monkeypatch.setenv("CI", "true")
    assert progress_printer(False, _Tty(True)) is None


@pytest.mark.parametrize("args,message", [
    (["--jobs", "0"], "--jobs: must be at least 1"),
    (["--gpus-per-node", "-2"], "--gpus-per-node: must be at least 1"),
    (["--baseline", "fixtures/sim/ddp_clean", "--regression-threshold", "step_time=nan"], "finite number"),
    (["--threshold", "dp_overlap_min=inf"], "must be a finite number"),
    (["--threshold", "dp_overlap_min=1.5"], "fraction between 0 and 1"),
    (["--threshold", "idle_share_max=-0.1"], "must not be negative"),
])
def test_bad_numeric_options_exit_2(args, message, capsys):
    root = Path(__file__).resolve().parent.parent
    args = [str(root / a) if a.startswith("fixtures/") else a for a in args]
    try:
        code = main([str(root / "fixtures/sim/ddp_clean"), "-q", *args])
    except SystemExit as exc:  # argparse's own errors exit from inside main
        code = exc.code
    assert code == 2
    assert message in capsys.readouterr().err


def test_empty_folder_with_a_report_file_prints_no_text_report(tmp_path, capsys):
    """docs/exit-codes.md: nothing analysed — the message goes to stderr, the default text report is not printed,
    the report asked for (--junit) is written and says so."""
    empty = tmp_path / "empty"
    empty.mkdir()
    junit = tmp_path / "r.xml"
    assert main([str(empty), "--junit", str(junit), "-q"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "nothing was analysed" in err
    root = ET.parse(junit).getroot()
    assert root.get("errors") == "1"
    # the text report asked for explicitly is still written
    assert main([str(empty), "--format", "text", "-q"]) == 2
    assert "FAIL: nothing was analysed" in capsys.readouterr().out
