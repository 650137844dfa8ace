"""parsers/torch_stderr on the GPU-shaped fixtures (fixtures/stderr/gpu-shapes, shapes from real logs, values ours)."""
from __future__ import annotations

from pathlib import Path

from parsers.torch_stderr import parse_stderr
from tests.tables import pandas_tables

parse_stderr = pandas_tables(parse_stderr)  # the tables as DataFrames (tests/tables.py)

GPU = Path(__file__).resolve().parents[1] / "fixtures" / "stderr" / "gpu-shapes"
G, M = 2 ** 30, 2 ** 20


def ev(name: str, kind: str | None = None):
    log = parse_stderr(GPU / name)
    e = log.events
    return (e if kind is None else e[e["kind"] == kind]), log


def cols(df, names):
    return [tuple(r) for r in df[names].astype(object).itertuples(index=False)]


def test_nccl_watchdog_timeout_under_tee():
    wd, log = ev("nccl_watchdog_timeout_tee.log", "watchdog_timeout")
    assert cols(wd, ["rank", "local_rank", "seq", "op", "timeout_ms", "reason"]) == [
        (1, 1, 1207, "ALLREDUCE", 600000, "ran for 600047 ms"),
        (0, 0, 1207, "ALLREDUCE", 600000, "ran for 600041 ms"),
        (2, 2, 1207, "ALLREDUCE", 600000, "ran for 600052 ms"),
    ]
    e = log.events
    assert cols(e[e["kind"] == "fr_dump"], ["rank", "reason"]) == [
        (0, "/tmp/nccl_trace_rank_0"), (0, ""), (1, "/tmp/nccl_trace_rank_1")]
    abort = e[(e["kind"] == "signal") & (e["source"] == "stream")]
    assert cols(abort, ["rank", "code", "reason"]) == [(0, 6, "SIGABRT (std::terminate: c10::DistBackendError)")]
    f = log.failures
    assert cols(f, ["rank", "exitcode", "signal", "root_cause"]) == [
        (1, -15, "SIGTERM", False), (2, -15, "SIGTERM", False), (3, -15, "SIGTERM", False), (0, -6, "SIGABRT", True)]
    assert log.ranks == [0, 1, 2, 3]


def test_nccl_error_reasons_and_versions():
    e, log = ev("nccl_errors.log", "nccl_error")
    assert cols(e, ["line", "rank", "reason", "nccl_version", "code"]) == [
        (10, 2, "remote process exited or there was a network error", "2.20.5", -1),
        (23, 5, "unhandled system error", "2.21.5", -1),
        (27, -1, "unhandled system error", "2.4.8", -1),
        (28, -1, "unhandled cuda error", "2.7.8", -1),
        (29, -1, "internal error", "2.18.1", -1),
        (30, -1, "invalid usage", "2.17.1", -1),
        (31, -1, "unhandled system error", "", 2),
        (32, 1, "remote process exited or there was a network error", "2.21.5", -1),
    ]
    assert e.iloc[0]["where"] == "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970"
    tb = log.tracebacks
    assert cols(tb, ["rank", "exc_type", "user_file", "user_line", "inner_func"]) == [
        (2, "torch.distributed.DistBackendError", "/workspace/train.py", 80, "barrier"),
        (5, "torch.distributed.DistBackendError", "/workspace/train.py", 41, "_verify_param_shape_across_processes"),
    ]
    # torch 1.x launcher lines (python logging format)
    child = log.events[log.events["kind"].isin(["child_failed", "sigterm_sent"])]
    assert cols(child, ["kind", "code", "local_rank", "pid"]) == [("child_failed", 1, 2, 41877),
                                                                  ("sigterm_sent", -1, -1, 41878)]


def test_cuda_oom_bytes():
    e, log = ev("cuda_oom.log", "oom")
    assert cols(e, ["line", "rank", "device", "bytes_requested", "bytes_total", "bytes_free", "bytes_allocated",
                    "bytes_reserved_unallocated", "exc_type"]) == [
        (10, 3, "3", 2 * G, round(79.15 * G), round(1.23 * G), round(60.12 * G), round(16.29 * G),
         "torch.OutOfMemoryError"),
        (11, 6, "6", 512 * M, round(23.56 * G), round(6.75 * M), round(22.87 * G), round(301.94 * M),
         "torch.OutOfMemoryError"),
        (12, -1, "4", 20 * M, round(31.75 * G), round(3.75 * M), round(30.29 * G), round(30.40 * G) - round(30.29 * G),
         "torch.cuda.OutOfMemoryError"),
        (13, -1, "", -1, -1, -1, -1, -1, "RuntimeError"),
    ]
    assert cols(log.tracebacks, ["rank", "user_file", "user_line", "user_func"]) == [
        (3, "/workspace/model/attention.py", 58, "forward")]


def test_cuda_errors():
    e, _ = ev("cuda_illegal_memory.log")
    e = e[e["kind"] != "exception"]
    assert cols(e, ["line", "rank", "kind", "reason"]) == [
        (1, 0, "cuda_illegal_memory", "an illegal memory access was encountered"),
        (11, -1, "signal", "SIGABRT (std::terminate: c10::DistBackendError)"),
        (12, 0, "cuda_illegal_memory", "an illegal memory access was encountered"),  # default_pg rank = global
        (22, 1, "cuda_illegal_memory", "an illegal memory access was encountered"),
        (26, 2, "cuda_error", "unspecified launch failure"),
        (27, 2, "ecc", "uncorrectable ecc error encountered"),
        (28, 3, "cuda_error", e.iloc[-1]["reason"]),
    ]
    assert e.iloc[-1]["reason"].startswith("cublas_status_execution_failed")


def test_device_side_asserts():
    e, log = ev("cuda_device_assert.log", "cuda_device_assert")
    assert cols(e, ["line", "rank", "local_rank", "where", "reason"]) == [
        (1, 1, 1, "../aten/src/ATen/native/cuda/Indexing.cu:1308", "kernel assertion"),
        (2, 1, 1, "../aten/src/ATen/native/cuda/Indexing.cu:1308", "kernel assertion"),
        (3, 1, 1, "../aten/src/ATen/native/cuda/Indexing.cu:1308", "kernel assertion"),  # garbled, same start
        (4, 1, 1, "/opt/conda/conda-bld/pytorch_1720538643151/work/aten/src/ATen/native/cuda/Loss.cu:250",
         "kernel assertion"),
        (12, 1, 1, "", "device-side assert triggered"),
    ]
    assert cols(log.tracebacks, ["rank", "user_func", "user_line"]) == [(1, "train", 77)]


def test_xid_ecc_and_kernel_oom_killer():
    e, log = ev("dmesg_xid.txt")
    xid = e[e["kind"] == "xid"]
    assert cols(xid, ["line", "device", "code"]) == [
        (1, "0000:b3:00", 79), (2, "0000:b3:00.0", 79), (5, "", 79), (6, "0000:18:00", 48), (7, "0000:18:00", 63),
        (8, "0000:3b:00", 94), (9, "0000:01:00", 13), (10, "0000:01:00", 31), (11, "0000:00:00.0", 11001)]
    assert cols(e[e["kind"] == "ecc"], ["line", "code"]) == [(6, 48), (7, 63), (8, 94)]
    assert cols(e[e["kind"] == "host_oom_kill"], ["line", "pid", "message"]) == [(12, 48213, "python"),
                                                                               (13, 48214, "pt_data_worker")]
    assert log.ranks == []


def test_host_oom_kill_in_a_slurm_log():
    e, log = ev("host_oom_kill.log")
    kill = e[e["kind"] == "host_oom_kill"]
    assert cols(kill, ["line", "pid", "code", "reason"]) == [
        (25, -1, -1, "cgroup oom kill (1 events)"),
        (26, -1, -1, "srun: task 0 on gpu-node-03: Out Of Memory"),
        (27, -1, -1, "cgroup oom kill (2 events)"),
        (28, 90130, 9, "shell: Killed (SIGKILL)"),
        (29, -1, 9, "shell: Killed (SIGKILL)"),
    ]
    root = log.failures[log.failures["root_cause"]]
    assert cols(root, ["label", "rank", "exitcode", "signal", "pid"]) == [("0", 1, -9, "SIGKILL", 90130)]
    child = e[e["kind"] == "child_failed"]
    assert cols(child, ["rank", "code", "reason"]) == [(1, -9, "SIGKILL")]
    assert cols(e[e["reason"].str.startswith("DataLoader")], ["kind", "pid", "code"]) == [("signal", 12847, 9)]


def test_every_launcher_prefix_in_one_crlf_file():
    e, log = ev("launchers_crlf.log")
    assert log.warnings == []
    assert log.ranks == [0, 1, 2, 3, 4, 5, 6, 11]
    assert cols(e[e["kind"] != "exception"], ["line", "rank", "kind"]) == [
        (11, 0, "cuda_illegal_memory"), (12, 1, "nccl_error"), (12, 1, "dist_backend_error"),
        (13, 2, "watchdog_timeout"), (17, 6, "oom"), (18, 5, "watchdog_timeout"), (19, 3, "connection_closed"),
        (20, 11, "connection_reset"), (21, 4, "cuda_error")]
    tb = log.tracebacks
    assert cols(tb, ["rank", "line", "end_line", "user_line", "exc_type"]) == [
        (0, 1, 11, 33, "RuntimeError"), (1, 2, 12, 35, "torch.distributed.DistBackendError"),
        (6, 14, 17, 19, "torch.OutOfMemoryError")]
    assert not e["text"].str.contains("\r").any()
