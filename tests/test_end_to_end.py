import pytest
"""The installed command on bundled data: the README's demo, JSON output, python -m analyzer."""
import subprocess
import sys

import orjson

from analyzer.cli import main
from tests.conftest import CORPUS, ROOT


@pytest.mark.slow
def test_dlrm_set_reports_eight_ranks_with_step_metrics(capsys):
    assert main([str(CORPUS / "param-dlrm_kineto"), "--format", "json", "--jobs", "2"]) in (0, 1)
    rep = orjson.loads(capsys.readouterr().out)
    assert rep["job"]["ranks"] == list(range(8)) and rep["job"]["missing_ranks"] == []
    rows = rep["metrics"]["per_step"]
    assert len(rows) == 8 and {r["step"] for r in rows} == {10}
    # the catalogue says: ProfilerStep#10 of 12.5–19.9 ms on every rank
    assert all(12_400 < r["step_time_us"] < 20_000 for r in rows)
    assert all(0 < r["comm_share"] < 1 and r["compute_us"] > 0 for r in rows)
    assert rep["inputs"]["read"] == 8


def test_text_output_has_summary_and_table(capsys):
    main([str(CORPUS / "param-dlrm_kineto"), "--jobs", "1"])
    out = capsys.readouterr().out
    assert out.startswith("analyze ") and "8 rank(s) of world size 8" in out
    # one row per rank in the per-rank table: "  <rank>  ..." for ranks 0..7
    rows = [ln for ln in out.splitlines() if ln.strip().split(" ")[0] in {str(r) for r in range(8)}]
    assert len(rows) >= 8


@pytest.mark.slow
def test_python_dash_m_and_version():
    r = subprocess.run([sys.executable, "-m", "analyzer", "--version"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0 and r.stdout.startswith("analyze ")


def test_no_readable_input_exits_2(tmp_path, capsys):
    (tmp_path / "a.txt").write_text("nothing here\n")
    assert main([str(tmp_path)]) == 2
    cap = capsys.readouterr()
    assert "nothing was analysed" in cap.err and cap.out == ""  # no report when none was asked for


@pytest.mark.slow
def test_dash_means_stdout(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    main([str(ROOT / "fixtures/sim/ddp_slow_link"), "--format", "github", "-o", "-", "-q"])
    out = capsys.readouterr().out
    assert out.startswith("::") and "NET004" in out
    assert not (tmp_path / "-").exists()


@pytest.mark.slow
def test_baseline_rules_are_registered_and_ignorable(capsys):
    from rules.catalog import load_all
    assert {"BASE001", "BASE002", "BASE003"} <= set(load_all())
    args = [str(ROOT / "fixtures/sim/ddp_slow_link"), "--baseline", str(ROOT / "fixtures/sim/ddp_clean"), "-q",
            "--format", "json"]
    assert main(args) == 1
    assert main(args + ["--ignore", "BASE001"]) == 0
    capsys.readouterr()


def test_crashed_rank_evidence_quotes_its_own_stderr(capsys):
    """Real gloo hang where rank 1 aborted without a dump: its stderr's last lines lead the evidence."""
    main([str(ROOT / "fixtures/real-cpu-hang/size_mismatch_abort"), "-q"])
    out = capsys.readouterr().out
    assert out.startswith("analyze ") and "no profiler traces; 2 Flight Recorder dump(s)" in out.splitlines()[0]
    lines = out.splitlines()
    first = next(i for i, ln in enumerate(lines) if ln.startswith(" 1. ERROR HANG001 Rank 1 passed a different element count"))
    evidence = "\n".join(lines[first + 1:first + 5])
    assert "Received data size doesn't match" in evidence and "rank1.stderr:2" in evidence


def test_a_failing_analysis_section_is_a_warning_not_a_crash(monkeypatch):
    import analyzer.cross_rank.section
    from analyzer.report.assemble import run_analysis
    from analyzer.load.job import load_job

    def boom(job, gpus_per_node=None):
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(analyzer.cross_rank.section, "cross_rank_section", boom)
    rep = run_analysis(load_job([CORPUS / "param-dlrm_kineto"], jobs=1))
    assert rep["cross_rank"] == {"error": "RuntimeError: simulated bug"}
    assert any("cross-rank analysis failed (RuntimeError: simulated bug)" in w for w in rep["warnings"])
    assert len(rep["metrics"]["per_step"]) == 8 and rep["hang"]["status"] == "no_hang_evidence"
