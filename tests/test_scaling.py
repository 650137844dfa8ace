"""Scaling across runs (docs/scaling.md): the factors multiply exactly to the efficiency, weak/strong from batches
or compute, the waterfall adds up to the loss, --record deduplicates, the CLI and API on hand-built and real runs."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from analyzer.scaling.compare import compare_rows, expected_efficiency
from analyzer.scaling.factors import FACTORS, parallel_factors, waterfall
from analyzer.scaling.record import append_rows, read_rows
from analyzer.scaling.rows import run_row
from analyzer.scaling.shape import job_shape

ROOT = Path(__file__).resolve().parents[1]
BED = ROOT / "fixtures/real-cpu-scaling"


def report(world: int, parts: list[tuple[float, float, float, float]], steps: int = 2, label: str = "",
           stamp: str = "2026-01-01T00:00:00Z") -> dict:
    """A finished report of a `world`-rank job whose every step, on rank i, is U+X+W+I µs with parts[i] = (U, X,
    W, I): useful compute, exposed transfer, exposed wait, idle."""
    per_step = [{"rank": r, "step": s, "step_time_us": sum(p), "compute_us": p[0], "exposed_comm_us": p[1],
                 "exposed_wait_us": p[2], "idle_us": p[3]} for s in range(steps) for r, p in enumerate(parts)]
    return {"job": {"world_size": world, "ranks": list(range(world)), "summary": {"comm_share": 0.1}},
            "metrics": {"per_step": per_step},
            "about": {"job": {"label": label, "collected_at": stamp, "hosts": 1}, "hardware": {"device_type": "cpu"}},
            "cross_rank": {"process_groups": [{"name": "0", "size": world, "judged_role": "dp"}] if world > 1 else []},
            "inputs": {"files": [{"path": f"{label}/rank{r}.json", "rank": r} for r in range(world)]}}


def test_one_run_factors_multiply_to_its_parallel_efficiency():
    import pandas as pd
    parts = pd.DataFrame({"U": [80.0, 60.0], "X": [10.0, 20.0], "W": [5.0, 10.0], "I": [5.0, 10.0], "B": [0.0, 0.0]})
    f = parallel_factors(parts, 100.0)
    assert f["load_balance"] == pytest.approx(70 / 80)
    assert f["transfer"] == pytest.approx(90 / 100)        # max(100-10, 100-20)
    assert f["host_idle"] == pytest.approx(85 / 90)        # max(90-5, 80-10)
    assert f["bubble"] == pytest.approx(1.0)
    assert f["serialisation"] == pytest.approx(80 / 85)
    assert math.prod(f[k] for k in ("load_balance", "transfer", "host_idle", "bubble", "serialisation")) == \
        pytest.approx(f["parallel_efficiency"]) == pytest.approx(0.7)  # median(U)/T


def test_weak_series_efficiency_and_factors_exact():
    base = run_row(report(1, [(90, 0, 0, 10)], label="w1"), batch_per_rank=8)
    # 4 ranks: rank 3 computes 120 (imbalance), everyone else waits for it; 10 µs of exposed transfer each
    big = run_row(report(4, [(90, 10, 30, 0)] * 3 + [(120, 10, 0, 0)], label="w4",
                         stamp="2026-01-02T00:00:00Z"), batch_per_rank=8)
    doc = compare_rows([big, base])
    assert doc["scaling"]["kind"] == "weak" and doc["scaling"]["source"] == "batches"
    w1, w4 = doc["runs"]
    assert w1["label"] == "w1" and w1["efficiency"] == 1.0
    assert w4["efficiency"] == pytest.approx(100 / 130)               # T_N0 / T_N at equal per-rank batch
    assert w4["throughput"] == pytest.approx(32 / 130e-6) and w4["throughput_unit"] == "samples/s"
    assert math.prod(w4["factors"][k] for k in FACTORS) == pytest.approx(w4["efficiency"], rel=1e-12)
    assert w4["factors"]["load_balance"] == pytest.approx(90 / 120)      # the typical (median) rank against the max
    assert w4["factors"]["computation_scalability"] == pytest.approx(1.0)  # the typical rank's work did not grow
    assert w4["factors"]["host_idle"] == pytest.approx((120 / 120) / (90 / 100))  # base lost 10 % to idle
    assert sum(w4["loss_shares"].values()) == pytest.approx(1 - w4["efficiency"])
    assert w4["dominant"] == "load_balance"
    assert w4["judgement"] == "below the guide" and w4["shape"] == "dp=4"


def test_strong_series_inferred_from_compute_and_flagged_pessimistic():
    rows = [run_row(report(n, [(80 / n, 5, 0, 0)] * n, label=f"s{n}", stamp=f"2026-01-0{n}T00:00:00Z"))
            for n in (1, 2, 4)]
    doc = compare_rows(rows)
    assert doc["scaling"]["kind"] == "strong" and doc["scaling"]["source"] == "inferred"
    assert doc["scaling"]["confidence"] == 1.0
    assert any("pessimistic" in n for n in doc["notes"])
    s4 = doc["runs"][-1]
    assert s4["efficiency"] == pytest.approx(85 / (4 * 25))           # N0·T_N0 / (N·T_N)
    assert s4["factors"]["computation_scalability"] == pytest.approx(1.0)  # ΣU constant
    assert math.prod(s4["factors"][k] for k in FACTORS) == pytest.approx(s4["efficiency"])
    assert s4["dominant"] == "transfer"
    assert compare_rows(rows, scaling="weak")["scaling"]["source"] == "option"


def test_each_step_up_has_a_waterfall_that_adds_up():
    rows = [run_row(report(n, [(100, 5 * n, 0, 2 * n)] * n, label=f"w{n}", stamp=f"2026-01-0{n}T00:00:00Z"))
            for n in (1, 2, 4)]
    doc = compare_rows(rows)
    assert [(s["from_world_size"], s["to_world_size"]) for s in doc["steps_up"]] == [(1, 2), (2, 4)]
    for s, prev, cur in zip(doc["steps_up"], doc["runs"], doc["runs"][1:]):
        assert s["efficiency"] == pytest.approx(cur["efficiency"] / prev["efficiency"])
        assert sum(v for v in s["loss_shares"].values()) == pytest.approx(1 - s["efficiency"])
        assert math.prod(s["factors"].values()) == pytest.approx(s["efficiency"])
    assert waterfall({"a": 0.9, "b": 0.8}, 0.72) == pytest.approx(
        {"a": math.log(0.9) / math.log(0.72) * 0.28, "b": math.log(0.8) / math.log(0.72) * 0.28})


def test_volume_against_bandwidth_against_the_best_run():
    rows = []
    for n, (t_us, bw) in ((2, (1000.0, 2.0)), (4, (3000.0, 1.0))):
        rep = report(n, [(100, 5, 0, 0)] * n, label=f"w{n}", stamp=f"2026-01-0{n}T00:00:00Z")
        rep["cross_rank"]["collectives"] = {"by_group_op": [
            {"transfer_us_per_active_step": t_us, "mean_busbw_gbps": bw, "nominal_busbw_gbps": None}]}
        rows.append(run_row(rep))
    w2, w4 = compare_rows(rows)["runs"]
    assert w2["comm_bus_bytes_per_step"] == pytest.approx(2e6) and w4["comm_bus_bytes_per_step"] == pytest.approx(3e6)
    assert w4["reference_busbw_gbps"] == 2.0 and w4["volume_time_us"] == pytest.approx(1500.0)
    assert w4["volume_ratio"] == pytest.approx(2.0) and "contention" in w4["volume_verdict"]
    assert w2["volume_ratio"] == pytest.approx(1.0) and "volume itself" in w2["volume_verdict"]


def test_guide_values_interpolate_in_log_size():
    th = {"efficiency_good_at_8": 0.85, "efficiency_acceptable_at_64": 0.6}
    assert expected_efficiency(4, th) == 0.85 and expected_efficiency(128, th) == 0.6
    assert expected_efficiency(16, th) == pytest.approx(0.85 - 0.25 / 3)


def test_html_escapes_labels_and_plots_every_factor():
    from analyzer.render.compare_html import render_html
    rows = [run_row(report(n, [(100, 5 * n, 2 * n, 1)] * n, label=f"<img src=x onerror=alert(1)>{n}",
                           stamp=f"2026-01-0{n}T00:00:00Z")) for n in (1, 2, 4)]
    page = render_html(compare_rows(rows))
    assert "<img" not in page and "&lt;img" in page
    assert page.count("<polyline") == 1 + len(FACTORS) + 1          # efficiency, each factor, the guide


def test_job_shape_reads_the_process_groups():
    r = {"cross_rank": {"process_groups": [{"size": 2, "judged_role": "tp"}, {"size": 4, "judged_role": "dp"},
                                           {"size": 2, "judged_role": "tp"}]}}
    assert job_shape(r) == "dp=4 tp=2"
    assert job_shape({}) == "-"


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_record_appends_once_and_reads_back(tmp_path, suffix):
    rows = [run_row(report(n, [(100, 5, 0, 0)] * n, label=f"=w{n}", stamp=f"2026-01-0{n}T00:00:00Z"),
                    batch_per_rank=4) for n in (1, 2)]
    path = str(tmp_path / f"table{suffix}")
    assert append_rows(path, rows[:1]) == 1
    assert append_rows(path, rows) == 1                              # the first run is already there
    assert append_rows(path, rows) == 0
    back = read_rows(path)
    assert [r["run_id"] for r in back] == [r["run_id"] for r in rows]
    assert back[0]["label"] == "=w1"                                 # as given, though never a formula in the CSV
    if suffix == ".csv":
        assert ",=w1," not in Path(path).read_text() and ",'=w1," in Path(path).read_text()
    assert back[1]["world_size"] == 2 and back[1]["batch_per_rank"] == 4.0
    assert compare_rows(back)["runs"][1]["efficiency"] == pytest.approx(compare_rows(rows)["runs"][1]["efficiency"])


class _Run:
    def __init__(self, returncode: int, stdout: str, stderr: str) -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def _cli(*args: str) -> _Run:
    """`analyze ARGS` in this process (the CLI's own entry point, exit code, stdout and stderr)."""
    import contextlib
    import io

    from analyzer.cli import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return _Run(code, out.getvalue(), err.getvalue())


def _cli_process(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "analyzer", *args], capture_output=True, text=True, timeout=600,
                          cwd=ROOT)


def test_cli_compares_record_files_and_escapes_labels(tmp_path):
    rows = [run_row(report(n, [(100, 5 * n, 0, 0)] * n, label=f"\x1b[31mw{n}", stamp=f"2026-01-0{n}T00:00:00Z"))
            for n in (1, 2)]
    path = tmp_path / "t.jsonl"
    append_rows(str(path), rows)
    out = _cli("--compare", str(path))
    assert out.returncode == 0, out.stderr
    assert "\x1b" not in out.stdout
    assert "1.00" in out.stdout and "dp=2" in out.stdout
    md = _cli("--compare", str(path), "--format", "markdown", "--scaling", "strong")
    assert "| 1 → 2 |" in md.stdout and "pessimistic" in md.stdout and "\x1b" not in md.stdout
    js = json.loads(_cli("--compare", str(path), "--format", "json").stdout)
    assert js["schema"] == "dtrace-analyzer/comparison"
    assert js["runs"][1]["efficiency"] == pytest.approx(105 / 110)
    page = tmp_path / "c.html"
    assert _cli("--compare", str(path), "--html", str(page), "-q").returncode == 0
    html = page.read_text()
    assert "<svg" in html and "<polyline" in html and "Each step up in size" in html
    assert "\x1b" not in html and "<script" not in html
    bad = _cli("--compare", str(path), "--format", "sarif")
    assert bad.returncode == 2 and "--compare writes" in bad.stderr
    notrec = tmp_path / "x.csv"
    notrec.write_text("a,b\n1,2\n")
    bad = _cli("--compare", str(notrec))
    assert bad.returncode == 2 and "x.csv" in bad.stderr and "record file" in bad.stderr


def test_guide_values_from_the_config_file_and_the_command_line(tmp_path):
    rows = [run_row(report(n, [(100, 5 * n, 0, 0)] * n, label=f"w{n}", stamp=f"2026-01-0{n}T00:00:00Z"))
            for n in (1, 4)]
    path = tmp_path / "t.jsonl"
    append_rows(str(path), rows)
    cfg = tmp_path / "analyze.toml"
    cfg.write_text("[scaling]\nefficiency_good_at_8 = 0.95\n")
    js = json.loads(_cli("--compare", str(path), "--format", "json", "--config", str(cfg)).stdout)
    assert js["thresholds"]["efficiency_good_at_8"] == 0.95 and js["runs"][1]["expected_efficiency"] == 0.95
    js = json.loads(_cli("--compare", str(path), "--format", "json", "--config", str(cfg),
                         "--scaling-threshold", "efficiency_good_at_8=80%").stdout)
    assert js["runs"][1]["expected_efficiency"] == pytest.approx(0.8)
    assert js["runs"][1]["judgement"] == "good"                      # 105/120 = 0.875 ≥ 0.8
    bad = _cli("--compare", str(path), "--scaling-threshold", "nope=1")
    assert bad.returncode == 2 and "nope" in bad.stderr


@pytest.mark.slow
def test_cli_on_real_runs_records_once(tmp_path):
    runs = [str(BED / "weak" / f"w{n}") for n in (1, 2)]
    table = tmp_path / "t.csv"
    first = _cli_process("--compare", *runs, "--record", str(table), "--batch-per-rank", "32", "--format", "json")
    assert first.returncode == 0, first.stderr
    doc = json.loads(first.stdout)
    assert doc["scaling"]["kind"] == "weak" and doc["scaling"]["source"] == "batches"
    assert [r["world_size"] for r in doc["runs"]] == [1, 2]
    again = _cli("--compare", runs[1], "--record", str(table), "-q")
    assert again.returncode == 0
    assert len(read_rows(str(table))) == 2
    both = json.loads(_cli("--compare", str(table), "--format", "json").stdout)
    assert both["runs"][1]["efficiency"] == pytest.approx(doc["runs"][1]["efficiency"])


@pytest.mark.slow
def test_api_compare_returns_tables():
    import analyzer
    comp = analyzer.compare([BED / "weak/w2", BED / "weak/w1"], batch_per_rank=32)
    t = comp.table
    assert list(t["world_size"]) == [1, 2] and t["throughput_unit"].tolist() == ["samples/s"] * 2
    f = comp.factors
    w2 = f[f["world_size"] == 2].set_index("factor")["value"]
    assert math.prod(w2) == pytest.approx(t["efficiency"].iloc[1])
    assert set(comp.steps_up["factor"]) == set(FACTORS)


@pytest.mark.slow
def test_one_folder_of_sibling_runs_is_compared_run_by_run(tmp_path):
    import shutil

    import analyzer
    for n in (1, 2):
        shutil.copytree(BED / "weak" / f"w{n}", tmp_path / "runs" / f"w{n}")
    comp = analyzer.compare([tmp_path / "runs"], batch_per_rank=32)
    assert list(comp.table["world_size"]) == [1, 2]
    assert [lab.rsplit("/", 1)[-1] for lab in comp.table["label"]] == ["w1", "w2"]
    assert comp.document["scaling"]["kind"] == "weak"
