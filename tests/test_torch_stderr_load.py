"""Discovery of stderr files (and what it must not claim), loading into job.stderr_logs, the input report."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from analyzer.load.job import load_job
from parsers.discover import FR_DUMP, KINETO, NCCL_LOG, STDERR, UNKNOWN, classify, discover
from parsers.torch_stderr import looks_like_stderr, parse_stderr
from tests.tables import pandas_tables

parse_stderr = pandas_tables(parse_stderr)  # the tables as DataFrames (tests/tables.py)

FIX = Path(__file__).resolve().parents[1] / "fixtures"
STD = FIX / "stderr"


def kind(path: Path) -> str:
    return classify(path).kind


def test_real_captures_are_stderr():
    logs = sorted((STD / "real-cpu").glob("*/torchrun.log"))
    assert len(logs) == 21 and {kind(p) for p in logs} == {STDERR}
    workers = sorted((STD / "real-cpu").rglob("stderr.log"))
    assert len(workers) == 7 and {kind(p) for p in workers} == {STDERR}
    # what torchrun writes next to them is not stderr: empty stdout files, the children's error.json
    assert {kind(p) for p in (STD / "real-cpu").rglob("stdout.log")} == {UNKNOWN}
    assert {kind(p) for p in (STD / "real-cpu").rglob("error.json")} == {UNKNOWN}
    assert kind(STD / "real-cpu" / "workload.py") == UNKNOWN  # source code holding the word Traceback


@pytest.mark.parametrize("name, expected", [
    # a combined log with ProcessGroupNCCL lines is an NCCL log; its stderr tables come through load_job
    ("nccl_watchdog_timeout_tee.log", NCCL_LOG), ("nccl_errors.log", NCCL_LOG),
    ("cuda_illegal_memory.log", NCCL_LOG), ("launchers_crlf.log", NCCL_LOG),
    ("cuda_oom.log", STDERR), ("cuda_device_assert.log", STDERR), ("dmesg_xid.txt", STDERR),
    ("host_oom_kill.log", STDERR), ("README.md", UNKNOWN),
])
def test_gpu_shapes(name, expected):
    assert kind(STD / "gpu-shapes" / name) == expected


@pytest.mark.parametrize("name, expected", [
    ("interleaved_3ranks.log", STDERR), ("crlf.log", STDERR), ("truncated_midline.log", STDERR),
    ("huge_lines.log", STDERR), ("non_utf8.log", STDERR), ("nul_tail.log", STDERR),
    ("gloo_size_mismatch.log.gz", STDERR), ("binary.bin", UNKNOWN), ("empty.log", UNKNOWN),
])
def test_damaged(name, expected):
    assert kind(STD / "damaged" / name) == expected


@pytest.mark.slow
def test_traces_logs_and_dumps_are_not_claimed():
    found, _ = discover([FIX])
    by_kind = {}
    for f in found:
        by_kind.setdefault(f.kind, []).append(Path(f.path))
    assert len(by_kind[KINETO]) > 100 and len(by_kind[FR_DUMP]) > 50 and len(by_kind[NCCL_LOG]) > 100
    outside = sorted(str(p.relative_to(FIX)) for p in by_kind[STDERR] if STD not in p.parents)
    # the failure test beds (their own integrity test: test_failure_fixtures.py) holds real torchrun logs, torchrun's
    # per-rank stderr files and fr_trace's saved output, whose crash tracebacks are claimed as stderr too
    bed = [p for p in outside if p.startswith(("real-cpu-failures/", "real-cpu-failures-2/", "real-cpu-failures-3/",
                                               "real-cpu-failures-4/",
                                               "world-size/"))]
    assert all(p.endswith(("/torchrun.log", "/stderr.log", "/fr_trace_output.md",
                           "/fr_trace_output_with_pg_config.md")) for p in bed), bed
    outside = [p for p in outside if p not in bed]
    # the only other stderr outside fixtures/stderr: the per-rank stderr and torchrun logs of the real hangs and the
    # simulator's crashed-rank log, which earlier were skipped as "text without NCCL or watchdog lines"; the hostile
    # round-4 bed's per-rank stderr (a real hang) and the memory bed's OOM run's stderr
    assert all(p.startswith("real-cpu-hang/") and p.endswith((".stderr", "torchrun.log")) or
               p.startswith("real-cpu-hostile4/rank") and p.endswith(".stderr") or
               p == "real-cpu-memory/dp3-leak256k-r0-oom/stderr.log" or
               p == "sim/hang_crashed_rank/stderr_rank7.log" for p in outside), outside
    assert len(outside) == 15


def test_late_failure_is_found_in_the_tail(tmp_path):
    p = tmp_path / "train.log"
    body = b"".join(b"step %d loss 2.3 lr 0.0001\n" % i for i in range(40000))  # > the 256 KiB head
    p.write_bytes(body + b"[rank3]: RuntimeError: CUDA error: an illegal memory access was encountered\n")
    assert len(body) > 512 * 1024
    assert kind(p) == STDERR
    assert not looks_like_stderr(body[:4096])  # the head alone says nothing


def test_a_folder_with_only_torchruns_log(tmp_path):
    shutil.copy(STD / "real-cpu" / "exception_rank1" / "torchrun.log", tmp_path / "torchrun.log")
    job = load_job([tmp_path], jobs=1)
    assert not job.traces and not job.nccl_logs and not job.fr_dumps
    assert len(job.stderr_logs) == 1
    log = job.stderr_logs[0]
    assert log.ranks == [0, 1, 2]
    assert [(f.kind, f.status, f.rank) for f in job.files] == [(STDERR, "read", None)]
    from analyzer.render.text import render_text
    from analyzer.report.assemble import run_analysis
    report = run_analysis(job)
    assert "0 Flight Recorder dump(s), 0 NCCL/watchdog log(s), 1 stderr log(s)" in render_text(report)


def test_the_cli_reads_a_stderr_only_folder(tmp_path, capsys):
    from analyzer.cli import EXIT_USAGE, main
    shutil.copy(STD / "real-cpu" / "gloo_size_mismatch" / "torchrun.log", tmp_path / "torchrun.log")
    assert main([str(tmp_path), "--quiet"]) != EXIT_USAGE
    assert "no input could be read" not in capsys.readouterr().err


def test_nccl_logs_also_give_their_stderr_tables():
    job = load_job([STD / "gpu-shapes"], jobs=2)
    kinds = {Path(f.path).name: f.kind for f in job.files}
    assert kinds["nccl_watchdog_timeout_tee.log"] == NCCL_LOG and kinds["cuda_oom.log"] == STDERR
    by_name = {Path(lg.path).name: lg for lg in job.stderr_logs}
    assert set(by_name) == {"nccl_watchdog_timeout_tee.log", "nccl_errors.log", "cuda_illegal_memory.log",
                            "launchers_crlf.log", "cuda_oom.log", "cuda_device_assert.log", "dmesg_xid.txt",
                            "host_oom_kill.log"}
    wd = by_name["nccl_watchdog_timeout_tee.log"]
    assert sorted(wd.events[wd.events["kind"] == "watchdog_timeout"]["rank"]) == [0, 1, 2]
    assert len(job.nccl_logs) == 4


def test_workers_give_the_same_tables_as_one_process():
    one = load_job([STD / "real-cpu" / "two_nodes_srun_label", STD / "damaged"], jobs=1)
    two = load_job([STD / "real-cpu" / "two_nodes_srun_label", STD / "damaged"], jobs=2)
    assert [lg.path for lg in one.stderr_logs] == [lg.path for lg in two.stderr_logs]
    for a, b in zip(one.stderr_logs, two.stderr_logs):
        assert a.events.equals(b.events) and a.tracebacks.equals(b.tracebacks) and a.failures.equals(b.failures)
    assert [(f.path, f.kind, f.status) for f in one.files] == [(f.path, f.kind, f.status) for f in two.files]


def test_damaged_files_are_salvaged_not_failed():
    job = load_job([STD / "damaged"], jobs=1)
    status = {Path(f.path).name: f.status for f in job.files}
    assert status["huge_lines.log"] == status["non_utf8.log"] == status["nul_tail.log"] == "salvaged"
    assert status["crlf.log"] == status["interleaved_3ranks.log"] == "read"
    assert status["truncated_midline.log"] == "read"  # a missing last newline loses nothing
    assert status["binary.bin"] == status["empty.log"] == "skipped"


def test_unreadable_file_is_an_input_error(tmp_path):
    from parsers.errors import InputError
    with pytest.raises(InputError) as exc:
        parse_stderr(tmp_path / "nope.log")
    assert "nope.log" in str(exc.value) and "cannot read" in exc.value.reason
