"""parsers/torch_stderr on hand-built snippets: exact tables, prefixes, interleaved tracebacks, the failure table."""
from __future__ import annotations

import pytest

from parsers.stderr_events import to_bytes
from parsers.stderr_prefix import peel
from parsers.stderr_structure import is_library
from parsers.torch_stderr import EVENT_COLUMNS, FAILURE_COLUMNS, TRACEBACK_COLUMNS, parse_stderr_lines
from tests.tables import pandas_tables

parse_stderr_lines = pandas_tables(parse_stderr_lines)  # the tables as DataFrames (tests/tables.py)


def rows(df, cols):
    """The named columns of a table as a list of tuples (plain Python values)."""
    return [tuple(r) for r in df[list(cols)].astype(object).itertuples(index=False)]


def kinds(log):
    return [(r.line, r.rank, r.kind) for r in log.events.itertuples()]


# --- prefixes -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("line, expected", [
    ("[rank3]: Traceback (most recent call last):", ("", -1, 3, -1, "Traceback (most recent call last):")),
    ("[rank3]:   File \"a.py\", line 1, in f", ("", -1, 3, -1, "  File \"a.py\", line 1, in f")),
    ("[rank3]:[E1201 07:54:40.5 socket.cpp:469] x", ("", -1, 3, -1, "[E1201 07:54:40.5 socket.cpp:469] x")),
    ("[default1]:[rank1]: KeyError: 'lr'", ("", 1, 1, -1, "KeyError: 'lr'")),
    ("[default2]:plain print", ("", 2, -1, -1, "plain print")),
    ("[trainer0]:x", ("", 0, -1, -1, "x")),
    ("[3]:[rank3]: boom", ("", -1, 3, -1, "boom")),
    ("[0]:", ("", -1, -1, -1, "[0]:")),                                  # a failure-table entry, not a tag
    ("0: [default1]:[rank1]: ValueError: x", ("0", 1, 1, -1, "ValueError: x")),
    (" 11: [rank11]: x", ("11", -1, 11, -1, "x")),
    ("[1,5]<stderr>:Traceback (most recent call last):", ("mpi5", -1, -1, 5, "Traceback (most recent call last):")),
    ("Mon Dec  2 08:15:01 2024[1,2]<stderr>:[rank2]:y", ("mpi2", -1, 2, 2, "y")),
    ("2024-05-01T12:00:00.123Z [rank3]: z", ("", -1, 3, -1, "z")),
    ("[2024-05-01 12:00:00,123] [rank3]: z", ("", -1, 3, -1, "z")),
    ("[ 1843.308145] NVRM: Xid", ("", -1, -1, -1, "NVRM: Xid")),
    ("(RayTrainWorker pid=355353, ip=10.128.0.5) [rank6]: w", ("", -1, 6, -1, "w")),
    ("  File \"x.py\", line 2, in g", ("", -1, -1, -1, "  File \"x.py\", line 2, in g")),
    ("W1201 07:50:57.592000 6362 torch/distributed/x.py:1] y", ("", -1, -1, -1,
                                                             "W1201 07:50:57.592000 6362 torch/distributed/x.py:1] y")),
])
def test_peel(line, expected):
    assert peel(line) == expected


def test_sizes_in_bytes():
    assert to_bytes("20.00", "MiB") == 20 * 2 ** 20
    assert to_bytes("512", "bytes") == 512
    assert to_bytes("1.50", "GiB") == 3 * 2 ** 29
    assert to_bytes("9" * 15, "EiB") == -1  # does not fit an int64


@pytest.mark.parametrize("path, lib", [
    ("/workspace/job/train.py", False), ("/usr/lib/python3.10/site-packages/torch/nn/modules/module.py", True),
    ("/opt/conda/lib/python3.11/threading.py", True), ("/usr/local/lib/python3.10/dist-packages/x.py", True),
    ("<frozen runpy>", True), ("/workspace/venv/bin/torchrun", True), ("C:\\proj\\train.py", False),
    ("<ipython-input-3-abc>", False), ("/home/me/torch/train.py", True),  # a user folder named torch is lost
])
def test_library_frames(path, lib):
    assert is_library(path) is lib


# --- tracebacks ---------------------------------------------------------------------------------------------
INTERLEAVED = [
    "[rank0]: Traceback (most recent call last):",
    "[rank1]: Traceback (most recent call last):",
    '[rank0]:   File "/w/train.py", line 10, in <module>',
    '[rank1]:   File "/w/train.py", line 10, in <module>',
    "[rank0]:     main()",
    "[rank1]:     main()",
    '[rank1]:   File "/w/train.py", line 7, in main',
    "[rank1]:     raise ValueError('bad')",
    '[rank0]:   File "/w/train.py", line 5, in main',
    "[rank1]: ValueError: bad",
    "[rank0]:     dist.all_reduce(x)",
    '[rank0]:   File "/usr/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 3252, '
    "in all_reduce",
    "[rank0]:     work.wait()",
    "[rank0]:            ^^^^^^",
    "[rank0]: RuntimeError: [../gloo/transport/tcp/pair.cc:553] Connection closed by peer [10.0.0.2]:4567",
]


def test_interleaved_tracebacks_are_assembled_per_rank():
    log = parse_stderr_lines(INTERLEAVED)
    assert rows(log.tracebacks, ["rank", "line", "end_line", "exc_type", "message", "user_file", "user_line",
                                 "user_func", "frames", "inner_func", "chained"]) == [
        (1, 2, 10, "ValueError", "bad", "/w/train.py", 7, "main", 2, "main", False),
        (0, 1, 15, "RuntimeError", "[../gloo/transport/tcp/pair.cc:553] Connection closed by peer [10.0.0.2]:4567",
         "/w/train.py", 5, "main", 3, "all_reduce", False),
    ]
    assert rows(log.events, ["line", "rank", "kind", "exc_type", "peer", "where"]) == [
        (10, 1, "exception", "ValueError", "", ""),
        (15, 0, "connection_closed", "RuntimeError", "10.0.0.2:4567", "../gloo/transport/tcp/pair.cc:553"),
        (15, 0, "exception", "RuntimeError", "", ""),
    ]
    assert log.ranks == [0, 1]


def test_chained_tracebacks():
    log = parse_stderr_lines([
        "Traceback (most recent call last):",
        '  File "/w/cfg.py", line 3, in load',
        "KeyError: 'lr'",
        "",
        "The above exception was the direct cause of the following exception:",
        "",
        "Traceback (most recent call last):",
        '  File "/w/cfg.py", line 9, in main',
        "RuntimeError: config broken",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        '  File "/w/cfg.py", line 12, in <module>',
        "ZeroDivisionError: division by zero",
    ], path="/logs/rank4.err")
    assert rows(log.tracebacks, ["rank", "line", "exc_type", "chained", "user_line"]) == [
        (4, 1, "KeyError", False, 3), (4, 7, "RuntimeError", True, 9), (4, 13, "ZeroDivisionError", True, 12)]
    assert log.rank == 4 and log.ranks == [4]


def test_traceback_cut_by_the_end_of_the_file_is_kept_with_a_warning():
    log = parse_stderr_lines(["[rank2]: Traceback (most recent call last):",
                              '[rank2]:   File "/w/t.py", line 3, in f'])
    assert rows(log.tracebacks, ["rank", "exc_type", "frames", "end_line"]) == [(2, "", 1, 2)]
    assert any("without their exception line" in w for w in log.warnings)


def test_exception_without_message_and_keyboard_interrupt():
    log = parse_stderr_lines(["Traceback (most recent call last):", '  File "/w/t.py", line 3, in f',
                              "    time.sleep(1)", "KeyboardInterrupt"])
    assert rows(log.tracebacks, ["exc_type", "message"]) == [("KeyboardInterrupt", "")]


# --- torchrun -----------------------------------------------------------------------------------------------
TABLE = [
    "W1201 07:59:26.213000 13024 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 13081 "
    "closing signal SIGTERM",
    "E1201 07:59:26.505000 13024 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: -6) "
    "local_rank: 2 (pid: 13080) of binary: /venv/bin/python3",
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    "============================================================",
    "train.py FAILED",
    "------------------------------------------------------------",
    "Failures:",
    "[1]:",
    "  time      : 2026-12-01_07:59:26",
    "  host      : node-3",
    "  rank      : 5 (local_rank: 1)",
    "  exitcode  : -15 (pid: 13081)  (SIGTERM)",
    "  error_file: <N/A>",
    "  traceback : Signal 15 (SIGTERM) received by PID 13081",
    "[2]:",
    "  time      : 2026-12-01_07:59:26",
    "  host      : node-3",
    "  rank      : 4 (local_rank: 0)",
    "  exitcode  : 1 (pid: 13079)",
    "  error_file: /tmp/te/attempt_0/0/error.json",
    "  traceback : Traceback (most recent call last):",
    '    File "/w/train.py", line 54, in train_step',
    "      raise ValueError(f\"loss is NaN\")",
    "  ValueError: loss is NaN",
    "  ",
    "------------------------------------------------------------",
    "Root Cause (first observed failure):",
    "[0]:",
    "  time      : 2026-12-01_07:59:25",
    "  host      : node-3",
    "  rank      : 6 (local_rank: 2)",
    "  exitcode  : -6 (pid: 13080)",
    "  error_file: <N/A>",
    "  traceback : Signal 6 (SIGABRT) received by PID 13080",
    "============================================================",
]


def test_failure_table():
    log = parse_stderr_lines(TABLE)
    assert rows(log.failures, ["rank", "local_rank", "host", "exitcode", "signal", "pid", "time", "error_file",
                               "root_cause", "line", "exc_type", "message"]) == [
        (5, 1, "node-3", -15, "SIGTERM", 13081, "2026-12-01_07:59:26", "", False, 8, "",
         "Signal 15 (SIGTERM) received by PID 13081"),
        (4, 0, "node-3", 1, "", 13079, "2026-12-01_07:59:26", "/tmp/te/attempt_0/0/error.json", False, 15,
         "ValueError", "loss is NaN"),
        (6, 2, "node-3", -6, "SIGABRT", 13080, "2026-12-01_07:59:25", "", True, 28, "",
         "Signal 6 (SIGABRT) received by PID 13080"),
    ]
    # torchrun's own lines: pids mapped to ranks through the table
    assert rows(log.events, ["line", "rank", "local_rank", "pid", "kind", "code", "reason", "source"]) == [
        (1, 5, -1, 13081, "sigterm_sent", -1, "SIGTERM", "stream"),
        (2, 6, 2, 13080, "child_failed", -6, "SIGABRT", "stream"),
        (14, 5, 1, 13081, "signal", 15, "SIGTERM", "failure_table"),
        (34, 6, 2, 13080, "signal", 6, "SIGABRT", "failure_table"),
    ]
    assert rows(log.tracebacks, ["rank", "local_rank", "line", "end_line", "exc_type", "user_line", "source"]) == [
        (4, 0, 21, 24, "ValueError", 54, "failure_table")]
    assert log.ranks == [4, 5, 6] and log.rank is None


def test_tee_local_ranks_map_to_global_ranks_through_the_table():
    lines = ["[default1]:terminate called after throwing an instance of 'gloo::EnforceNotMet'",
             "[default1]:  what():  [enforce fail at ../gloo/transport/tcp/pair.cc:446] op.preamble.length <= "
             "op.nbytes. 12 vs 8. Received data size doesn't match expected size. Is there a distributed "
             "collective mismatch in your code?"] + TABLE
    log = parse_stderr_lines(lines)
    ev = log.events
    assert rows(ev[ev["line"] <= 2], ["line", "rank", "local_rank", "kind", "code", "bytes_a", "bytes_b", "where"]) == [
        (1, 5, 1, "signal", 6, -1, -1, ""),
        (2, 5, 1, "gloo_size_mismatch", -1, 12, 8, "../gloo/transport/tcp/pair.cc:446"),
    ]


def test_two_launchers_in_one_file_keep_their_own_tables_and_local_ranks():
    a = [f"0: {ln}" for ln in TABLE]
    b = [f"1: {ln}".replace("rank      : 5", "rank      : 1").replace("rank      : 4", "rank      : 0")
         .replace("rank      : 6", "rank      : 2") for ln in TABLE]
    mixed = [x for pair in zip(a, b) for x in pair] + ["0: [default2]:[rank6]: boom", "1: [default2]:oops Killed"]
    log = parse_stderr_lines(mixed)
    assert sorted(rows(log.failures, ["label", "rank", "local_rank", "root_cause"])) == [
        ("0", 4, 0, False), ("0", 5, 1, False), ("0", 6, 2, True),
        ("1", 0, 0, False), ("1", 1, 1, False), ("1", 2, 2, True)]
    child = log.events[log.events["kind"] == "child_failed"]
    assert sorted(rows(child, ["label", "rank"])) == [("0", 6), ("1", 2)]


# --- events -------------------------------------------------------------------------------------------------
def test_gloo_timeouts_and_peers():
    log = parse_stderr_lines([
        "[rank2]: RuntimeError: [/p/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 4000ms for recv "
        "operation to complete",
        "[rank0]: RuntimeError: [/p/gloo/transport/tcp/unbound_buffer.cc:129] Timed out waiting 1800000ms for send "
        "operation to complete",
        "[rank1]: RuntimeError: [../gloo/transport/tcp/pair.cc:598] Timed out waiting 30000ms for recv operation "
        "to complete from rank 3 tag 7",
        "[rank4]: RuntimeError: [/p/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:63155: Connection reset "
        "by peer. This is typically caused by a remote worker hanging",
        "[rank5]: RuntimeError: [/p/gloo/transport/tcp/pair.cc:211] Read timeout [10.1.1.1]:22",
    ])
    assert rows(log.events, ["rank", "kind", "timeout_ms", "op", "peer", "peer_rank", "tag", "where"]) == [
        (2, "recv_timeout", 4000, "recv", "", -1, -1, "/p/gloo/transport/tcp/unbound_buffer.cc:78"),
        (0, "send_timeout", 1800000, "send", "", -1, -1, "/p/gloo/transport/tcp/unbound_buffer.cc:129"),
        (1, "recv_timeout", 30000, "recv", "3", 3, 7, "../gloo/transport/tcp/pair.cc:598"),
        (4, "connection_reset", -1, "", "127.0.0.1:63155", -1, -1, "/p/gloo/transport/tcp/pair.cc:537"),
        (5, "gloo_timeout", -1, "", "10.1.1.1:22", -1, -1, "/p/gloo/transport/tcp/pair.cc:211"),
    ]
    assert set(log.events["exc_type"]) == {"RuntimeError"}


def test_collective_mismatch_and_monitored_barrier():
    log = parse_stderr_lines([
        "[rank1]: RuntimeError: Detected mismatch between collectives on ranks. Rank 1 is running collective: "
        "CollectiveFingerPrint(SequenceNumber=9, OpType=ALLGATHER, TensorShape=[8], TensorDtypes=Float, "
        "TensorDeviceTypes=TensorOptions(dtype=float (default), device=cpu)), but Rank 0 is running collective: "
        "CollectiveFingerPrint(SequenceNumber=9, OpType=ALLGATHER, TensorShape=[16]).Collectives differ in the "
        "following aspects: \t Tensor Tensor shapes: 8vs 16",
        "[rank0]:[E1201 08:01:20.090421304 ProcessGroupGloo.cpp:67] [Rank 0]: Rank 3 failed to pass "
        "monitoredBarrier in 2000 ms",
        "[rank2]: RuntimeError: Rank 2 successfully reached monitoredBarrier, but received errors while waiting "
        "for send/recv from rank 0. Please check rank 0 logs for faulty rank.",
    ])
    assert rows(log.events, ["rank", "kind", "seq", "op", "peer_rank", "timeout_ms", "reason"]) == [
        (1, "collective_mismatch", 9, "ALLGATHER", 0, -1, "Tensor Tensor shapes: 8vs 16"),
        (0, "monitored_barrier", -1, "", 3, 2000, "failed to pass"),
        (2, "monitored_barrier", -1, "", 0, -1, "received errors from the peer"),
    ]


def test_nccl_errors_and_watchdog():
    log = parse_stderr_lines([
        "[rank2]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
        "ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error, NCCL version 2.20.5",
        "RuntimeError: NCCL error in: /opt/pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:317, unhandled system "
        "error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5",
        "RuntimeError: NCCL error in: x.cpp:1333, internal error - please report this issue to the NCCL developers, "
        "NCCL version 2.18.1",
        "[rank7]:[E602 11:17:52.185053341 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=8, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800086 "
        "milliseconds before timing out.",
        "[E1204 10:21:14.8 ProcessGroupNCCL.cpp:616] [PG ID 0 PG GUID 0(default_pg) Rank 4] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=12, OpType=BROADCAST, NumelIn=4, NumelOut=4, "
        "Timeout(ms)=600000) ran for 600041 milliseconds before timing out.",
    ])
    assert rows(log.events, ["line", "rank", "kind", "reason", "nccl_version", "where", "seq", "op", "timeout_ms",
                             "group"]) == [
        (1, 2, "nccl_error", "remote process exited or there was a network error", "2.20.5",
         "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970", -1, "", -1, ""),
        (1, 2, "dist_backend_error", "", "", "", -1, "", -1, ""),
        (2, -1, "nccl_error", "unhandled system error", "2.21.5",
         "/opt/pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:317", -1, "", -1, ""),
        (3, -1, "nccl_error", "internal error", "2.18.1", "x.cpp:1333", -1, "", -1, ""),
        (4, 7, "watchdog_timeout", "ran for 1800086 ms", "", "", 8, "ALLREDUCE", 1800000, ""),
        (5, 4, "watchdog_timeout", "ran for 600041 ms", "", "", 12, "BROADCAST", 600000, "default_pg"),
    ]


def test_cuda_and_oom():
    log = parse_stderr_lines([
        "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total "
        "capacity of 79.15 GiB of which 1.23 GiB is free. Process 1 has 77.91 GiB memory in use. Of the allocated "
        "memory 60.12 GiB is allocated by PyTorch, and 16.29 GiB is reserved by PyTorch but unallocated. If ...",
        "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 4; 31.75 GiB total capacity; 30.29 GiB "
        "already allocated; 3.75 MiB free; 30.40 GiB reserved in total by PyTorch)",
        "[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered",
        "[rank1]: RuntimeError: CUDA error: device-side assert triggered",
        "/pytorch/aten/src/ATen/native/cuda/Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], "
        "thread: [5,0,0] Assertion `t >= 0 && t < n_classes` failed.",
        "RuntimeError: CUDA error: misaligned address",
    ])
    g = 2 ** 30
    oom = rows(log.events[log.events["kind"] == "oom"], ["rank", "device", "bytes_requested", "bytes_total",
                                                          "bytes_free", "bytes_allocated",
                                                          "bytes_reserved_unallocated"])
    assert oom == [(3, "3", 2 * g, round(79.15 * g), round(1.23 * g), round(60.12 * g), round(16.29 * g)),
                   (-1, "4", 20 * 2 ** 20, round(31.75 * g), round(3.75 * 2 ** 20), round(30.29 * g),
                    round(30.40 * g) - round(30.29 * g))]
    rest = log.events[log.events["kind"] != "oom"]
    assert rows(rest, ["line", "kind", "reason", "where"]) == [
        (3, "cuda_illegal_memory", "an illegal memory access was encountered", ""),
        (4, "cuda_device_assert", "device-side assert triggered", ""),
        (5, "cuda_device_assert", "kernel assertion", "/pytorch/aten/src/ATen/native/cuda/Loss.cu:250"),
        (6, "cuda_error", "misaligned address", ""),
    ]


def test_rendezvous_and_store():
    log = parse_stderr_lines([
        "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
        "port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use",
        "[W socket.cpp:426] [c10d] The server socket has failed to bind to [::]:29500 (errno: 98 - Address already "
        "in use).",
        "[W socket.cpp:558] [c10d] The client socket has failed to connect to [node-0]:29500 (errno: 111 - "
        "Connection refused).",
        "[E1201 08:02:38.653380519 socket.cpp:1028] [c10d] The client socket has timed out after 5000ms while "
        "trying to connect to (127.0.0.1, 29827).",
        "torch.distributed.DistStoreError: wait timeout after 2000ms, keys: /default_pg/0//checkpoint_done",
        "torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 7/8 clients joined.",
    ])
    assert rows(log.events, ["line", "kind", "peer", "timeout_ms", "code", "reason"]) == [
        (1, "rendezvous_eaddrinuse", "29500", -1, 98, "address already in use"),
        (2, "rendezvous_eaddrinuse", "[::]:29500", -1, 98, "address already in use"),
        (3, "rendezvous_refused", "node-0:29500", -1, 111, "connection refused"),
        (4, "rendezvous_refused", "127.0.0.1:29827", 5000, -1, "connect timed out"),
        (5, "store_timeout", "", 2000, -1, "keys: /default_pg/0//checkpoint_done"),
        (6, "store_timeout", "", 901000, -1, "7/8 clients joined"),
    ]


def test_host_signals_xid_and_flight_recorder():
    log = parse_stderr_lines([
        "[ 4100.000100] Out of memory: Killed process 48213 (python) total-vm:262144000kB, anon-rss:251658240kB",
        "slurmstepd: error: Detected 1 oom_kill event in StepId=4242.0. Some of the step tasks have been OOM Killed.",
        "Killed",
        "  traceback : Signal 9 (SIGKILL) received by PID 90130",
        "*** SIGSEGV received at time=1700000000 on cpu 3 ***",
        "Fatal Python error: Segmentation fault",
        "NVRM: Xid (PCI:0000:18:00): 48, pid=2201, name=python3, An uncorrectable double bit error (DBE) has been "
        "detected on GPU in the framebuffer at partition 6, subpartition 0.",
        "[PG ID 0 PG GUID 0(default_pg) Rank 3] ProcessGroupNCCL dumping nccl trace to /tmp/nccl_trace_rank_3",
        "[PG ID 0 PG GUID 0(default_pg) Rank 3] Finished flight recorder successfully. Output can be analyzed using "
        "the fr_trace script.",
    ])
    assert rows(log.events, ["line", "rank", "kind", "pid", "code", "device", "reason"]) == [
        (1, -1, "host_oom_kill", 48213, -1, "", "kernel oom killer"),
        (2, -1, "host_oom_kill", -1, -1, "", "cgroup oom kill (1 events)"),
        (3, -1, "host_oom_kill", -1, 9, "", "shell: Killed (SIGKILL)"),
        (4, -1, "signal", 90130, 9, "", "SIGKILL"),
        (5, -1, "signal", -1, 11, "", "SIGSEGV"),
        (6, -1, "signal", -1, 11, "", "Fatal Python error: Segmentation fault"),
        (7, -1, "xid", -1, 48, "0000:18:00", "Xid 48: An uncorrectable double bit error (DBE) has been detected on "
         "GPU in the framebuffer at partition 6, subpartition 0."),
        (7, -1, "ecc", -1, 48, "0000:18:00", "An uncorrectable double bit error (DBE) has been detected on GPU in the "
         "framebuffer at partition 6, subpartition 0."),
        (8, 3, "fr_dump", -1, -1, "", "/tmp/nccl_trace_rank_3"),
        (9, 3, "fr_dump", -1, -1, "", ""),
    ]


def test_ordinary_lines_are_not_events():
    log = parse_stderr_lines([
        "[default0]:step 100 loss 2.31 lr 3e-4 error_rate 0.12",   # 'rror' is a guard, not an event
        "host-1:1234:5678 [0] NCCL INFO Channel 00/24 : 0 1 2 3",
        "iteration 5 | elapsed time per iteration (ms): 512.3 | memory (MB): 1234",
        "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default",
    ])
    assert log.events.empty and log.tracebacks.empty and log.failures.empty
    assert log.ranks == [] and log.warnings == []


def test_tables_keep_their_columns_and_dtypes_when_empty():
    log = parse_stderr_lines([])
    assert list(log.events.columns) == list(EVENT_COLUMNS)
    assert list(log.tracebacks.columns) == list(TRACEBACK_COLUMNS)
    assert list(log.failures.columns) == list(FAILURE_COLUMNS)
    assert str(log.events["bytes_total"].dtype) == "int64" and str(log.events["rank"].dtype) == "int32"
    assert log.warnings == ["<memory>: empty file"]


def test_text_column_is_bounded_and_clean():
    log = parse_stderr_lines(["\x1b[31m[rank4]:\x1b[0m RuntimeError: CUDA error: misaligned address\x07 " + "y" * 5000])
    row = log.events.iloc[0]
    assert row["rank"] == 4 and row["kind"] == "cuda_error"
    assert "\x1b" not in row["text"] and "\x07" not in row["text"] and len(row["text"]) == 1000


def test_many_identical_lines_are_counted_not_tabled():
    line = "../aten/src/ATen/native/cuda/Indexing.cu:1308: k: block: [1,0,0], thread: [2,0,0] Assertion `x` failed."
    log = parse_stderr_lines([line] * 1500)
    assert len(log.events) == 1000
    assert any("500 more 'cuda_device_assert'" in w for w in log.warnings)


def test_the_vectorised_prefilter_keeps_every_guard_literal():
    from parsers.stderr_events import GUARD, GUARD_TRIGRAMS, candidate_mask
    assert all(t in lit and len(t) == 3 for lit, t in GUARD_TRIGRAMS.items())
    lines = [b"x" * (i % 7) + lit + b" tail" for i, lit in enumerate(GUARD_TRIGRAMS)] + [b"plain text", b""]
    data = b"\n".join(lines)
    mask = candidate_mask(data, len(lines))
    assert mask[:-2] == [True] * len(GUARD_TRIGRAMS) and mask[-2:] == [False, False]
    assert all(GUARD.search(ln) for ln in lines[:-2])
    # non-ASCII bytes fold onto ASCII: more candidates, never fewer
    assert candidate_mask("é".encode() + b"Traceback", 1) == [True]
    assert candidate_mask(b"nothing to see here\nnor here", 2) is None


def test_a_per_rank_file_of_a_tee_run_gives_its_tagged_lines_the_file_rank(tmp_path):
    """`stderr_rank7.log` holding only `[default3]:` lines (rank 7 is local rank 3 on its node) is rank 7's; a file
    that holds two workers' tags keeps its tagged lines unassigned (they may be anyone's)."""
    from parsers.torch_stderr import parse_stderr
    one = tmp_path / "stderr_rank7.log"
    one.write_text("[default3]:Traceback (most recent call last):\n"
                   '[default3]:  File "/w/train.py", line 9, in <module>\n'
                   "[default3]:RuntimeError: CUDA error: an illegal memory access was encountered\n")
    log = parse_stderr(one)
    assert log.rank == 7 and set(log.events["rank"]) == {7} and set(log.tracebacks["rank"]) == {7}
    two = tmp_path / "stderr_rank5.log"
    two.write_text(one.read_text() + "[default1]:RuntimeError: CUDA error: an illegal memory access was encountered\n")
    assert set(parse_stderr(two).events["rank"]) == {-1}
