"""Bad input: no NCCL lines, binary, non-UTF-8, cut-off lines, missing files — clear messages, no exceptions."""
from __future__ import annotations

import pytest

from parsers.errors import InputError
from parsers.nccl_log import looks_like_nccl_log, parse_nccl_lines, parse_nccl_log
from parsers.nccl_state import (COLL_COLUMNS, COMM_COLUMNS, CONN_COLUMNS, ENV_COLUMNS, NET_COLUMNS,
                                PROCESS_COLUMNS, WARN_COLUMNS)
from parsers.watchdog_log import COLUMNS as WATCHDOG_COLUMNS
from tests.tables import pandas_tables

parse_nccl_lines = pandas_tables(parse_nccl_lines)  # the tables as DataFrames (tests/tables.py)
parse_nccl_log = pandas_tables(parse_nccl_log)  # the tables as DataFrames (tests/tables.py)

COLL = ("h:7:7 [0] NCCL INFO AllReduce: opCount 2 sendbuff 0x1 recvbuff 0x2 count 8 datatype 7 op 0 root 0 "
        "comm 0x9 [nranks=4] stream 0x3")
TABLES = {"processes": PROCESS_COLUMNS, "communicators": COMM_COLUMNS, "connections": CONN_COLUMNS,
          "networks": NET_COLUMNS, "env": ENV_COLUMNS, "colls": COLL_COLUMNS, "warns": WARN_COLUMNS,
          "watchdog": WATCHDOG_COLUMNS}


def _all_empty_with_columns(log):
    for name, cols in TABLES.items():
        df = getattr(log, name)
        assert len(df) == 0 and list(df.columns) == list(cols), name


def test_required_columns_present():
    # the names downstream code relies on (flight recorder / hang analysis)
    assert {"host", "pid", "cuda_dev", "nccl_version", "launcher_rank", "rank", "rank_source"} <= set(PROCESS_COLUMNS)
    assert {"host", "pid", "comm", "op", "op_count", "count", "datatype", "red_op", "root", "nranks", "line"} <= set(COLL_COLUMNS)
    assert {"rank", "pg_id", "pg_guid", "pg_desc", "kind", "seq", "op_type", "numel_in", "numel_out", "timeout_ms",
            "ran_for_ms", "message", "line"} <= set(WATCHDOG_COLUMNS)


def test_no_nccl_lines(tmp_path):
    f = tmp_path / "train.log"
    f.write_text("epoch 1 loss 0.5\nepoch 2 loss 0.4\n")
    log = parse_nccl_log(f)
    _all_empty_with_columns(log)
    assert (log.n_lines, log.unrecognised) == (2, 2)
    assert len(log.warnings) == 1
    assert str(f) in log.warnings[0] and "no NCCL debug lines" in log.warnings[0] and "line 1" in log.warnings[0]


def test_binary_file(tmp_path):
    f = tmp_path / "core.bin"
    f.write_bytes(bytes(range(256)) * 400)
    log = parse_nccl_log(f)
    _all_empty_with_columns(log)
    assert "binary" in log.warnings[0] and str(f) in log.warnings[0]


def test_non_utf8_bytes_are_replaced_and_reported(tmp_path):
    f = tmp_path / "n.log"
    f.write_bytes(b"h:7:7 [0] NCCL INFO Using network IB\xff\xfe\n" + COLL.encode() + b"\n"
                  + b"\xc3\x28 garbage\n")
    log = parse_nccl_log(f)
    assert len(log.colls) == 1 and log.colls["op_count"].iloc[0] == 2
    assert log.networks["network"].iloc[0] == "IB\ufffd\ufffd"
    assert any("2 lines hold bytes that are not UTF-8" in w for w in log.warnings)


def test_last_line_cut_mid_write(tmp_path):
    f = tmp_path / "cut.log"
    f.write_bytes((COLL + "\n" + COLL[:70]).encode())
    log = parse_nccl_log(f)
    assert len(log.colls) == 1
    assert any("1 lines look cut off" in w and "line 2" in w for w in log.warnings)


def test_envelope_cut_at_eof_is_reported(tmp_path):
    f = tmp_path / "cut2.log"
    f.write_bytes((COLL + "\nh:7:7 [0] NCC").encode())
    log = parse_nccl_log(f)
    assert log.unrecognised == 1 and any("cut off" in w and "line 2" in w for w in log.warnings)


def test_cut_init_line_mid_file():
    log = parse_nccl_lines(["h:7:9 [0] NCCL INFO comm 0x5e rank 0 nranks 2 cudaDev 0 nvmlDev 4 busId 9b0", COLL])
    assert len(log.communicators) == 0 and len(log.colls) == 1
    assert any("cut off" in w and "line 1" in w for w in log.warnings)


def test_hard_wrapped_coll_line_is_joined():
    log = parse_nccl_lines([COLL[:60], COLL[60:]])
    assert len(log.colls) == 1 and log.colls["line"].iloc[0] == 1 and log.unrecognised == 0


def test_wrap_at_space_is_joined():
    i = COLL.index(" count ")
    log = parse_nccl_lines([COLL[:i] + " ", COLL[i + 1:]])
    assert log.colls["count"].tolist() == [8]


def test_missing_file_raises_input_error(tmp_path):
    with pytest.raises(InputError) as e:
        parse_nccl_log(tmp_path / "nope.log")
    assert str(tmp_path / "nope.log") in str(e.value) and "cannot read" in str(e.value)


def test_directory_raises_input_error(tmp_path):
    with pytest.raises(InputError):
        parse_nccl_log(tmp_path)


def test_empty_file(tmp_path):
    f = tmp_path / "e.log"
    f.write_bytes(b"")
    log = parse_nccl_log(f)
    _all_empty_with_columns(log)
    assert log.n_lines == 0 and "empty file" in log.warnings[0]


def test_elision_and_gdb_noise_do_not_break_parsing():
    lines = ["...", "[...]", "[Thread 0x7fff (LWP 123) exited]", "# nccl-tests header", COLL, "[Rank 0] nothing"]
    log = parse_nccl_lines(lines)
    assert len(log.colls) == 1 and log.unrecognised == 5


@pytest.mark.parametrize("head,expected", [
    (b"foo\nh:7:7 [0] NCCL INFO Using network IB\n", True),
    (b"[1,0]<stdout>:h:7:7 [0] misc/socket.cc:1 NCCL WARN x\n", True),
    (b"[rank0]:[E809 14:59:33.656957424 ProcessGroupNCCL.cpp:629] [Rank 0] x\n", True),
    (b"NCCL version 2.4.7+cuda10.0\n", True),
    (b'{"traceEvents": [{"name": "ncclKernel_AllReduce"}]}', False),
    (b"epoch 1 loss 0.5\n", False),
    (bytes(range(256)) * 10, False),
])
def test_looks_like_nccl_log(head, expected):
    assert looks_like_nccl_log(head) is expected
