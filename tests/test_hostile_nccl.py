"""NCCL / stderr logs built to defeat the line patterns: each finishes (linear time) with the right reading.

Each input here took the former patterns minutes to forever (exponential NET/IB, quadratic envelope, CONN,
IFACE, NCCL error, sniff); a regression shows as this module never finishing.
"""
from __future__ import annotations

import re

import pytest

from parsers.discover import NCCL_LOG, UNKNOWN, classify
from parsers.nccl_envelope import MAX_LINE_BYTES, match_envelope
from parsers.nccl_log import looks_like_nccl_log, parse_nccl_lines, parse_nccl_log
from tests.tables import pandas_tables

parse_nccl_lines = pandas_tables(parse_nccl_lines)  # the tables as DataFrames (tests/tables.py)
parse_nccl_log = pandas_tables(parse_nccl_log)  # the tables as DataFrames (tests/tables.py)

N = 60_000  # under the line cut: the patterns themselves must be linear

# The former envelope regex (lazy launcher, unbounded groups): the oracle for lines short enough for it.
OLD_NCCL_LINE = re.compile(
    r"^(?P<launcher>.*?)"
    r"(?:\[(?P<ts>\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?)\] )?"
    r"(?P<host>[^\s:]*):(?P<pid>\d+):(?P<tid>\d+) "
    r"(?:\[(?P<dev>-?\d+)\] )?"
    r"(?:(?P<ttime>\d+\.\d+) )?"
    r"(?:(?P<src>[^\s]+):(?P<srcline>\d+)(?: \((?P<func>[^)]*)\))? )?"
    r"NCCL (?P<level>INFO|WARN|TRACE|CALL)(?: (?P<msg>.*))?$"
)

HOSTILE_LINES = {
    "net_ib_without_oob": "h:1:1 [0] NCCL INFO NET/IB : Using " + "[1]x" * (N // 4),
    "host_without_colon": "a" * N + " NCCL INFO x",
    "conn_with_spaces": "h:1:1 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via P2P" + " " * N + "x",
    "iface_run": "h:1:1 [0] NCCL INFO Bootstrap : Using " + "a" * N,
    "bracket_run": "h:1:1 [0] NCCL INFO " + "[" * N,
    "pid_tid_candidates": ":1:1 " * (N // 5) + "NCCL INFO x",
    "digit_run": "h:1:1 [0] NCCL INFO " + "1" * N,
    "coll_letters": "h:1:1 [0] NCCL INFO " + "a" * N + " x: opCount 1",
    "nccl_error_without_comma": "NCCL error: " * (N // 12),
    "pg_desc_unclosed": "[PG 1 (" * (N // 7) + "NCCL error",
    "init_fn_run": "h:1:1 [0] NCCL INFO " + "nccl" * (N // 4) + " comm 0x1 Init ",
    "timestamps": "[2024-01-01 00:00:00] " * (N // 22) + "NCCL INFO",
    "func_unclosed": "h:1:1 [0] a.cc:1 (" + "x" * N + " NCCL WARN x",
}


@pytest.mark.parametrize("name", sorted(HOSTILE_LINES))
def test_pathological_lines_finish_and_stay_one_line(name):
    log = parse_nccl_lines([HOSTILE_LINES[name]])
    assert log.n_lines == 1 and log.unrecognised + sum(log.family_counts.values()) >= 1


def test_net_ib_line_of_220_bytes_that_never_finished_is_read():
    line = "h:1:1 [0] NCCL INFO NET/IB : Using " + "[1]x" * 46
    log = parse_nccl_lines([line, "h:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.0.1<0>"])
    nets = log.networks
    assert list(nets["interface"]) == ["mlx5_0:1", "mlx5_1:1", "eth0"]
    assert list(nets["detail"]) == ["IB/RO", "RoCE/RO", ""]


def test_a_line_longer_than_the_limit_is_cut_with_a_count(tmp_path):
    p = tmp_path / "nccl.log"
    good = b"h:7:7 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1\n"
    p.write_bytes(good + b"x" * (3 * MAX_LINE_BYTES) + b"\n" + good + b":" * (MAX_LINE_BYTES + 5))
    log = parse_nccl_log(p)
    assert log.n_lines == 4 and len(log.env) == 2 and list(log.env["line"]) == [1, 3]
    msg = [w for w in log.warnings if "longer than" in w]
    assert msg == [f"{p}: 2 lines longer than {MAX_LINE_BYTES} bytes were cut to their first {MAX_LINE_BYTES} "
                   "bytes (first at line 2)"]


@pytest.mark.parametrize("head", [b"\0" * 65536, b"QUJD" * 16384, b":" * 65536, b"[" * 65536,
                                  b"a" * 65535 + b" NCCL INFO x"])
def test_sniffing_a_head_without_whitespace_or_colons_is_quick_and_says_no(head, tmp_path):
    assert not looks_like_nccl_log(head)
    p = tmp_path / "blob.log"
    p.write_bytes(head)
    assert classify(p).kind == UNKNOWN


def test_gzipped_log_is_parsed_inflated(tmp_path):
    import gzip
    p = tmp_path / "nccl_rank0.log.gz"
    p.write_bytes(gzip.compress(b"host1:11:11 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n"
                                b"host1:11:11 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0\n"))
    assert classify(p).kind == NCCL_LOG
    log = parse_nccl_log(p)
    assert list(log.env["value"]) == ["eth0"] and log.processes["nccl_version"].iloc[0] == "2.21.5"


def test_gzipped_log_cut_short_keeps_its_lines_and_says_so(tmp_path):
    import gzip
    body = b"".join(b"host1:11:11 [0] NCCL INFO NCCL_X%d set by environment to 1\n" % i for i in range(2000))
    p = tmp_path / "nccl_rank0.log.gz"
    p.write_bytes(gzip.compress(body)[:-2000])
    log = parse_nccl_log(p)
    assert 0 < len(log.env) < 2000
    assert any("gzip stream ends before its end marker" in w for w in log.warnings)


def _real_lines() -> list[str]:
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent / "fixtures"
    out = []
    for p in sorted(root.rglob("*.log")) + sorted(root.rglob("*.stderr")):
        out += [ln for ln in p.read_text(errors="replace").splitlines() if "NCCL " in ln]
    return out


def test_envelope_matches_the_former_regex_on_real_and_generated_lines():
    import random
    lines = _real_lines()
    assert len(lines) > 100
    rng = random.Random(3)
    parts = ["h", "host-1", ":", "12", ":34", " ", "[0]", "[2024-01-02 03:04:05] ", "[1,0]<stdout>:", "0: ",
             "1.5 ", "a.cc:12 ", "(fn) ", "NCCL INFO", "NCCL WARN", " msg", "x", "::", "]", "["]
    lines += ["".join(rng.choice(parts) for _ in range(rng.randrange(1, 14))) for _ in range(5000)]
    for ln in lines:
        old, new = OLD_NCCL_LINE.match(ln), match_envelope(ln)
        assert (old is None) == (new is None), ln
        if old:
            assert old.groups() == new.groups(), ln


def test_processes_beyond_the_limit_are_skipped_and_counted(monkeypatch):
    import parsers.nccl_state as state
    monkeypatch.setattr(state, "MAX_PROCESSES", 100)
    lines = [f"h{i}:{i}:1 [0] NCCL INFO comm 0x{i:x} rank 0 nranks 2 cudaDev 0 - Init START" for i in range(150)]
    log = parse_nccl_lines(lines)
    assert len(log.processes) == 100 and len(log.communicators) == 100
    assert any("more than 100 processes" in w and "50 lines of further processes skipped (first at line 101)" in w
               for w in log.warnings)
