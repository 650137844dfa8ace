"""The same job wrapped in every launcher prefix gives the same tables; launcher tags give ranks."""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from parsers.nccl_log import parse_nccl_lines
from tests.tables import pandas_tables

parse_nccl_lines = pandas_tables(parse_nccl_lines)  # the tables as DataFrames (tests/tables.py)

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "nccl_logs"
BASE = (FIX / "synthetic_2x2_nccl2.21_hang.log").read_text().splitlines()
PID_RANK = {1001: 0, 1002: 1, 2001: 2, 2002: 3}
RANK_HOST = {0: "node-a", 1: "node-a", 2: "node-b", 3: "node-b"}
RANK_PID = {r: p for p, r in PID_RANK.items()}


def owner(line: str) -> int:
    """Rank that wrote a line of the synthetic log (-1 for blank lines)."""
    m = re.match(r"node-[ab]:(\d+):", line)
    if m:
        return PID_RANK[int(m.group(1))]
    m = re.match(r"\[rank(\d+)\]", line)
    if m:
        return int(m.group(1))
    return 0 if line.startswith("NCCL version") else -1


PREFIXES = {
    "none": lambda r: "",
    "mpi": lambda r: f"[1,{r}]<stdout>:",
    "mpi_stderr_ts": lambda r: f"Mon Nov  4 10:00:0{r} 2024[1,{r}]<stderr>:",
    "srun": lambda r: f"{r}: ",
    "rank_tag": lambda r: f"[{r}] ",
    "torchrun": lambda r: f"[default{r % 2}]:",
    "ray": lambda r: f"(RayTrainWorker pid={RANK_PID[r]}) ",
    "ray_ip": lambda r: f"(WorkerDict pid={RANK_PID[r]}, ip=172.26.153.3{r}) ",
    "pdsh": lambda r: f"{RANK_HOST[r]}: ",
    "python_logging": lambda r: "2024-11-04 10:00:00,123 - INFO - ",
    "cloudwatch": lambda r: "  | 2024-11-04T10:00:00.123Z | ",
    "shipper": lambda r: f"2024-11-04 10:00:00.123456 {RANK_HOST[r]} >> ",
    "shipper_minute": lambda r: " 2024-11-04 10:00 ",
    "indent": lambda r: "    ",
}
SUFFIXES = {"k9s": ("│ ", "      │"), "trailing_spaces": ("", "   "), "crlf": ("", "\r"),
            "ray_repeat": ("(RayTrainWorker pid=1) ", " [repeated 3x across cluster]")}


def wrap(prefix_of, suffix=("", "")) -> list[bytes]:
    out = []
    for line in BASE:
        r = owner(line)
        pre = prefix_of(r) if r >= 0 else ""
        out.append((suffix[0] + pre + line + suffix[1] + "\n").encode() if line or pre else b"\n")
    return out


BASE_LOG = parse_nccl_lines(wrap(PREFIXES["none"]))


def _same(a: pd.DataFrame, b: pd.DataFrame, drop=()) -> None:
    pd.testing.assert_frame_equal(a.drop(columns=list(drop)).reset_index(drop=True),
                                  b.drop(columns=list(drop)).reset_index(drop=True), check_dtype=False)


def _check_same(log) -> None:
    _same(log.communicators, BASE_LOG.communicators)
    _same(log.connections, BASE_LOG.connections)
    _same(log.colls, BASE_LOG.colls)
    _same(log.networks, BASE_LOG.networks)
    _same(log.env, BASE_LOG.env)
    _same(log.warns, BASE_LOG.warns, drop=["timestamp"])
    _same(log.watchdog[["rank", "global_rank", "kind", "seq", "op_type", "line"]],
          BASE_LOG.watchdog[["rank", "global_rank", "kind", "seq", "op_type", "line"]])
    _same(log.processes[["host", "pid", "cuda_dev", "rank", "rank_source"]],
          BASE_LOG.processes[["host", "pid", "cuda_dev", "rank", "rank_source"]])


def test_base_is_complete():
    assert len(BASE_LOG.communicators) == 8 and len(BASE_LOG.connections) == 10 and len(BASE_LOG.colls) == 22
    assert BASE_LOG.unrecognised == 0


@pytest.mark.parametrize("name", sorted(PREFIXES))
def test_same_tables_under_every_prefix(name):
    log = parse_nccl_lines(wrap(PREFIXES[name]))
    _check_same(log)
    assert log.unrecognised == 0


@pytest.mark.parametrize("name", sorted(SUFFIXES))
def test_same_tables_under_box_padding_and_crlf(name):
    pre, suf = SUFFIXES[name]
    _check_same(parse_nccl_lines(wrap(PREFIXES["none"], (pre, suf))))


@pytest.mark.parametrize("name,kind,exact", [
    ("mpi", "mpi", True), ("mpi_stderr_ts", "mpi", True), ("srun", "srun", True), ("rank_tag", "rank_tag", True),
    ("torchrun", "torchrun", False), ("ray", "ray", False), ("pdsh", "pdsh", False),
])
def test_launcher_tags(name, kind, exact):
    procs = parse_nccl_lines(wrap(PREFIXES[name])).processes.set_index("pid")
    assert set(procs["launcher"]) == {kind}
    for pid, rank in PID_RANK.items():
        want = rank if exact else (rank % 2 if kind == "torchrun" else -1)
        assert procs.loc[pid, "launcher_rank"] == want


def test_launcher_rank_used_when_no_world_comm():
    lines = [f"[1,{r}]<stdout>:{RANK_HOST[r]}:{RANK_PID[r]}:{RANK_PID[r]} [0] NCCL INFO Using network IB" for r in range(4)]
    procs = parse_nccl_lines(lines).processes.set_index("pid")
    assert [procs.loc[RANK_PID[r], "rank"] for r in range(4)] == [0, 1, 2, 3]
    assert set(procs["rank_source"]) == {"launcher:mpi"}


def test_ray_watchdog_rows_get_pid():
    wd = parse_nccl_lines(wrap(PREFIXES["ray"])).watchdog
    assert sorted(set(wd["pid"])) == [1001, 1002, 2001]


def test_interleaved_fragment_glued_to_next_line():
    lines = ["node-b:2001:2001 [0] NCCL INFO Using network IB",
             "node-a:1001:1051node-b:2001:2051 [0] NCCL INFO Channel 00/0 : 2[0] -> 3[1] via P2P/CUMEM/read"]
    log = parse_nccl_lines(lines)
    c = log.connections.iloc[0]
    assert (c["host"], c["pid"], c["tid"], c["src_rank"]) == ("node-b", 2001, 2051, 2)
    assert list(log.processes["host"]) == ["node-b"]
