"""Out-of-range integers in log lines cost that value only (stored as -1, counted once per file), never the file."""
from __future__ import annotations

import pytest

import parsers.nccl_state as nccl_state
from parsers.nccl_envelope import collect_rejected_ints, int64, stop_collecting_rejected_ints
from parsers.nccl_log import parse_nccl_lines, parse_nccl_log
from parsers.nccl_state import COLL_COLUMNS
from tests.tables import pandas_tables

parse_nccl_lines = pandas_tables(parse_nccl_lines)  # the tables as DataFrames (tests/tables.py)
parse_nccl_log = pandas_tables(parse_nccl_log)  # the tables as DataFrames (tests/tables.py)

BIG = "99999999999999999999999"  # 23 digits, > 2**63
I64_MAX, I64_MIN = 2**63 - 1, -(2**63)
INIT = ("h:7:7 [0] NCCL INFO ncclCommInitRank comm 0x9 rank {rank} nranks {nranks} cudaDev 0 nvmlDev 0 busId 18000 "
        "commId 0x409af3b41abf8426 - Init COMPLETE")
SHAPE = "h:7:8 [0] NCCL INFO comm 0x9 rank {rank} nRanks 4 nNodes 2 localRanks 2 localRank 0 MNNVL 0"
COLL = ("h:7:7 [0] NCCL INFO AllReduce: opCount {op} sendbuff 0x1 recvbuff 0x2 count {count} datatype 7 op 0 root 0 "
        "comm 0x9 [nranks=4] stream 0x3")
WORK = ("[rank{grank}]:[E ProcessGroupNCCL.cpp:1] [PG 0 Rank {rank}] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn={nin}, NumelOut=5, Timeout(ms)=600000) ran for 600013 "
        "milliseconds before timing out.")


def _range_warnings(log) -> list[str]:
    return [w for w in log.warnings if "out of range" in w]


def test_int64_boundaries_and_absent_fields():
    got: list[str] = []
    token = collect_rejected_ints(got)
    try:
        assert int64(str(I64_MAX)) == I64_MAX and int64(str(I64_MIN)) == I64_MIN
        assert int64("7fffffffffffffff", 16) == I64_MAX
        assert int64(str(I64_MAX + 1)) == -1 and int64(str(I64_MIN - 1)) == -1
        assert int64("ffffffffffffffff", 16) == -1  # a full unsigned 64-bit opCount does not fit int64
        assert int64("9" * 5000) == -1  # beyond Python's int-from-str digit limit: ValueError, not a crash
        assert int64("12x") == -1
        assert len(got) == 5
        assert int64(None) == -1 and int64("") == -1  # absent field: unknown, but not a reject
        assert int64("-3") == -3 and int64("0") == 0
        assert len(got) == 5
    finally:
        stop_collecting_rejected_ints(token)
    assert int64(BIG) == -1 and len(got) == 5  # outside a parse nothing is collected


def test_huge_coll_count_keeps_row_and_file():
    lines = [INIT.format(rank=0, nranks=4), COLL.format(op=0, count=8), COLL.format(op=1, count=BIG),
             COLL.format(op=2, count=16)]
    log = parse_nccl_lines(lines, path="x.log")
    assert list(log.colls.columns) == list(COLL_COLUMNS)
    assert log.colls["count"].tolist() == [8, -1, 16]
    assert log.colls["op_count"].tolist() == [0, 1, 2]
    assert log.colls["datatype"].tolist() == [7, 7, 7] and log.colls["line"].tolist() == [2, 3, 4]
    assert str(log.colls["count"].dtype) == "int64"
    assert log.unrecognised == 0
    assert _range_warnings(log) == ["x.log: 1 values out of range ignored, first at line 3 "
                                    "(integers that do not fit 64 bits are stored as -1)"]


def test_op_count_hex_range():
    lines = [COLL.format(op="f" * 22, count=8), COLL.format(op="7fffffffffffffff", count=8),
             COLL.format(op="8000000000000000", count=8), COLL.format(op="a", count=8)]
    log = parse_nccl_lines(lines, path="x.log")
    assert log.colls["op_count"].tolist() == [-1, I64_MAX, -1, 10]
    assert len(_range_warnings(log)) == 1
    assert "x.log: 2 values out of range ignored, first at line 1 " in _range_warnings(log)[0]


def test_huge_rank_and_nranks_in_init_and_shape():
    lines = [INIT.format(rank=BIG, nranks=BIG), "", INIT.format(rank=0, nranks=4).replace("0x9", "0xa"),
             SHAPE.format(rank=BIG).replace("0x9", "0xa")]
    log = parse_nccl_lines(lines, path="x.log")
    c = log.communicators.sort_values("line")
    assert c["comm"].tolist() == ["0x9", "0xa"]
    assert c["rank"].tolist() == [-1, 0] and c["nranks"].tolist() == [-1, 4]
    # an unreadable rank on the shape line still fills the one communicator it names, not a new bogus one
    assert c["nnodes"].tolist() == [-1, 2] and c["local_ranks"].tolist() == [-1, 2]
    assert len(_range_warnings(log)) == 1
    assert "3 values out of range ignored, first at line 1" in _range_warnings(log)[0]


def test_huge_watchdog_numbers_are_unknown_not_cut():
    lines = ["h:1:1 [0] NCCL INFO hello", WORK.format(grank=BIG, rank=BIG, seq=BIG, nin=BIG),
             WORK.format(grank=3, rank=3, seq=42, nin=7)]
    log = parse_nccl_lines(lines, path="x.log")
    wd = log.watchdog
    assert wd["kind"].tolist() == ["timeout", "timeout"]
    assert wd["seq"].tolist() == [-1, 42] and wd["numel_in"].tolist() == [-1, 7]
    assert wd["rank"].tolist() == [-1, 3] and wd["global_rank"].tolist() == [-1, 3]
    assert wd["numel_out"].tolist() == [5, 5] and wd["timeout_ms"].tolist() == [600000, 600000]
    assert wd["ran_for_ms"].tolist() == [600013, 600013]
    assert "4 values out of range ignored, first at line 2" in _range_warnings(log)[0]
    assert not [w for w in log.warnings if "cut off" in w]  # a too-big SeqNum is not a cut line


def test_huge_launcher_rank_counted_on_every_line():
    line = f"[rank{BIG}]:" + COLL.format(op=0, count=8)
    log = parse_nccl_lines([line, line], path="x.log")
    assert len(log.colls) == 2
    assert log.processes["launcher_rank"].tolist() == [-1]
    assert "2 values out of range ignored, first at line 1" in _range_warnings(log)[0]


def test_clean_log_has_no_range_warning():
    log = parse_nccl_lines([INIT.format(rank=0, nranks=4), COLL.format(op=0, count=8)], path="x.log")
    assert _range_warnings(log) == [] and log.warnings == []


def test_file_with_every_kind_of_huge_value(tmp_path):
    f = tmp_path / "big.log"
    f.write_text("\n".join([
        INIT.format(rank=0, nranks=BIG), COLL.format(op="f" * 22, count=BIG),
        WORK.format(grank=1, rank=1, seq=BIG, nin=2), f"h:{BIG}:{BIG} [{BIG}] NCCL INFO NCCL version 2.21.5+cuda12.4",
    ]) + "\n")
    log = parse_nccl_log(f)
    assert (len(log.communicators), len(log.colls), len(log.watchdog)) == (1, 1, 1)
    assert log.communicators["nranks"].tolist() == [-1]
    assert log.colls[["op_count", "count"]].values.tolist() == [[-1, -1]]
    assert sorted(log.processes["pid"].tolist()) == [-1, 7]
    assert _range_warnings(log) == [f"{f}: 7 values out of range ignored, first at line 1 "
                                    "(integers that do not fit 64 bits are stored as -1)"]


def test_unexpected_failure_on_one_line_is_salvaged(monkeypatch):
    real = nccl_state.LogState._coll

    def flaky(self, lineno, host, pid, tid, p, m):
        if m.group("count") == "13":
            raise KeyError("boom")
        return real(self, lineno, host, pid, tid, p, m)

    monkeypatch.setattr(nccl_state.LogState, "_coll", flaky)
    lines = [COLL.format(op=0, count=8), COLL.format(op=1, count=13), COLL.format(op=2, count=13),
             COLL.format(op=3, count=16)]
    log = parse_nccl_lines(lines, path="x.log")
    assert log.colls["count"].tolist() == [8, 16]
    assert log.unrecognised == 2
    bad = [w for w in log.warnings if "could not be handled" in w]
    assert len(bad) == 1
    assert bad[0].startswith("x.log: 2 lines could not be handled and were skipped (first at line 2: KeyError: 'boom';")


def test_unexpected_failure_in_held_line_at_eof_is_salvaged(monkeypatch):
    # a cut NCCL line is held back for a possible continuation and only recorded at end of input
    def broken(self, *a, **k):
        raise RuntimeError("late")

    monkeypatch.setattr(nccl_state.LogState, "add_nccl", broken)
    log = parse_nccl_lines(["plain text", "h:7:7 [0] NCCL INFO Channel 00/0 :"], path="x.log")
    assert log.unrecognised == 2
    assert any("1 lines could not be handled" in w and "line 2: RuntimeError: late" in w for w in log.warnings)


@pytest.mark.parametrize("value", [2**63, "x", float("nan"), None])
def test_table_builder_safety_net(value):
    row = ("h", 7, "0x9", "AllReduce", 1, value, 7, 0, 0, 4, 3, 7, "0x3", "", -1)
    df = nccl_state._frame([row, row[:5] + (9,) + row[6:]], COLL_COLUMNS)
    assert df["count"].tolist() == [-1, 9] and str(df["count"].dtype) == "int64"
