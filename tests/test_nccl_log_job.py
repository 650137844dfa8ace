"""A whole (synthetic, interleaved) 4-rank job: rank mapping, comm joins, COLL → commId, hang evidence, watchdog eras."""
from __future__ import annotations

from pathlib import Path

import pytest

from parsers.nccl_log import parse_nccl_lines, parse_nccl_log
from tests.tables import pandas_tables

parse_nccl_lines = pandas_tables(parse_nccl_lines)  # the tables as DataFrames (tests/tables.py)
parse_nccl_log = pandas_tables(parse_nccl_log)  # the tables as DataFrames (tests/tables.py)

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "nccl_logs"
WORLD_ID = "0x9f3c2a1b4d5e6f70"


@pytest.fixture(scope="module")
def log():
    return parse_nccl_log(FIX / "synthetic_2x2_nccl2.21_hang.log")


def test_fixture_is_what_the_generator_writes():
    import importlib.util
    spec = importlib.util.spec_from_file_location("mk", FIX / "make_synthetic.py")
    mk = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mk)
    assert (FIX / "synthetic_2x2_nccl2.21_hang.log").read_text() == "\n".join(mk.lines()) + "\n"


def test_processes(log):
    p = log.processes.sort_values("rank")
    assert list(p["pid"]) == [1001, 1002, 2001, 2002]
    assert list(p["host"]) == ["node-a", "node-a", "node-b", "node-b"]
    assert list(p["cuda_dev"]) == [0, 1, 0, 1]
    assert set(p["rank_source"]) == {"world_comm"}
    assert set(p["nccl_version"]) == {"2.21.5"} and set(p["version_source"]) == {"file"}


def test_communicators_and_splits(log):
    c = log.communicators
    world = c[c["comm_id"] == WORLD_ID]
    assert sorted(world["rank"]) == [0, 1, 2, 3] and set(world["nranks"]) == {4} and set(world["nnodes"]) == {2}
    assert bool(world["complete"].all())
    splits = c[c["init_fn"] == "ncclCommSplit"]
    assert len(splits) == 4 and set(splits["nranks"]) == {2}
    by_color = splits.groupby("split_color")["global_rank"].apply(sorted).to_dict()
    assert by_color == {0: [0, 1], 1: [2, 3]}
    # each split's parent is that process's world pointer
    wp = world.set_index("pid")["comm"]
    assert all(wp[r.pid] == r.parent for r in splits.itertuples())


def test_connections_assigned_to_their_communicator(log):
    c = log.connections
    comms = log.communicators.set_index(["pid", "comm"])
    assert (c["comm"] != "").all()
    nranks = [comms.loc[(r.pid, r.comm), "nranks"] for r in c.itertuples()]
    assert nranks == [4] * 6 + [2] * 4
    net = c[c["transport"] == "NET/IB"]
    assert sorted(zip(net["src_rank"], net["dst_rank"], net["direction"])) == [
        (1, 2, "receive"), (1, 2, "send"), (3, 0, "receive"), (3, 0, "send")]


def test_colls_carry_comm_id_and_rank_and_show_the_laggard(log):
    world = log.colls[log.colls["comm_id"] == WORLD_ID]
    last = world.groupby("rank")["op_count"].max().to_dict()
    assert last == {0: 2, 1: 2, 2: 2, 3: 1}
    assert (log.colls["rank"] >= 0).all()
    assert set(log.colls[log.colls["op"] == "AllGather"]["datatype"]) == {9}


def test_warn_chain(log):
    w = log.warns.iloc[0]
    assert (w["host"], w["pid"], w["result_code"]) == ("node-b", 2001, 6)
    assert w["chain"].splitlines() == ["misc/socket.cc:752 -> 6", "transport/net_ib.cc:1120 -> 6 [Proxy Thread]"]


def test_watchdog_status(log):
    wd = log.watchdog
    t = wd[wd["kind"] == "timeout"]
    assert sorted(t["rank"]) == [0, 1, 2] and set(t["seq"]) == {3} and set(t["timeout_ms"]) == {600000}
    done = wd[wd["kind"] == "last_completed"]
    assert set(done["seq"]) == {2} and set(done["pg_desc"]) == {"default_pg"} and set(done["failed_seq"]) == {3}
    assert set(wd[wd["kind"] == "last_enqueued"]["seq"]) == {3}


def test_env_and_networks(log):
    env = log.env.groupby("name")["value"].agg(set).to_dict()
    assert env == {"NCCL_SOCKET_IFNAME": {"eth0"}, "NCCL_IB_DISABLE": {"0"}}
    sel = log.networks[log.networks["role"] == "selected"]
    assert len(sel) == 4 and set(sel["network"]) == {"IB"}


# ---- PyTorch line eras (shapes from ProcessGroupNCCL.cpp, reference §4) -------------------------------

@pytest.mark.parametrize("line,pg,guid,desc,rank", [
    ("[PG 3 Rank 1] Timeout at NCCL work: 9, last enqueued NCCL work: 9, last completed NCCL work: 8.", 3, "", "", 1),
    ("[PG 0 (default_pg) Rank 2] Exception (either an error or timeout) detected by watchdog at work: 9, "
     "last enqueued NCCL work: 9, last completed NCCL work: 8.", 0, "", "default_pg", 2),
    ("[PG ID 1 PG GUID 1 Rank 2]  failure detected by watchdog at work sequence id: 9 PG status: "
     "last enqueued work: 9, last completed work: 8", 1, "1", "", 2),
    ("[rank4]:[E1104 10:10:00.1 ProcessGroupNCCL.cpp:1664] [PG ID 0 PG GUID 0(default_pg) Rank 4]  failure detected "
     "by watchdog at work sequence id: 9 PG status: last enqueued work: 9, last completed work: 8", 0, "0", "default_pg", 4),
])
def test_pg_status_eras(line, pg, guid, desc, rank):
    wd = parse_nccl_lines([line]).watchdog
    assert list(wd["kind"]) == ["last_enqueued", "last_completed"] and list(wd["seq"]) == [9, 8]
    r = wd.iloc[0]
    assert (r["pg_id"], r["pg_guid"], r["pg_desc"], r["rank"], r["failed_seq"]) == (pg, guid, desc, rank, 9)


def test_teardown_and_async_error_lines():
    lines = [
        "[E ProcessGroupNCCL.cpp:455] Some NCCL operations have failed or timed out. Due to the asynchronous nature "
        "of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
        "[Rank 1] To avoid data inconsistency, we are taking the entire process down.",
        "terminate called after throwing an instance of 'c10::DistBackendError'",
        "  what():  [PG ID 0 PG GUID 0(default_pg) Rank 1] Process group watchdog thread terminated with exception: "
        "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, OpType=_ALLGATHER_BASE, "
        "NumelIn=64, NumelOut=256, Timeout(ms)=1800000) ran for 1800044 milliseconds before timing out.",
        "[Rank 0] Collective WorkNCCL(SeqNum=7, OpType=BROADCAST, NumelIn=10, NumelOut=10, Timeout(ms)=600000) raised "
        "the following async exception: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details), "
        "NCCL version 2.18.1",
        "Last error:",
        "socketProgress: Connection closed by remote peer node-b<52312>",
    ]
    wd = parse_nccl_lines(lines).watchdog
    assert list(wd["kind"]) == ["teardown", "teardown", "teardown", "teardown", "nccl_error", "last_error"]
    t = wd.iloc[3]
    assert (t["seq"], t["op_type"], t["numel_in"], t["numel_out"], t["ran_for_ms"], t["pg_id"]) == (
        12, "_ALLGATHER_BASE", 64, 256, 1800044, 0)
    e = wd.iloc[4]
    assert (e["rank"], e["seq"], e["op_type"], e["nccl_version"]) == (0, 7, "BROADCAST", "2.18.1")
    assert wd.iloc[5]["message"].endswith("Connection closed by remote peer node-b<52312>")


def test_flattened_cascade_on_one_line():
    line = ("[rank1]:[E ProcessGroupNCCL.cpp:1] [Rank 1] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=3, OpType=ALLREDUCE, NumelIn=4, NumelOut=4, Timeout(ms)=10) ran for 11 milliseconds "
            "before timing out. [Rank 1] Timeout at NCCL work: 3, last enqueued NCCL work: 3, last completed NCCL work: 2.")
    wd = parse_nccl_lines([line]).watchdog
    assert dict(zip(wd["kind"], wd["seq"])) == {"timeout": 3, "last_enqueued": 3, "last_completed": 2}


def test_pg_init_options_single_line():
    line = ("[PG ID 0 PG GUID 0 Rank 0] ProcessGroupNCCL initialization options: size: 4, global rank: 0, "
            "TIMEOUT(ms): 600000, USE_HIGH_PRIORITY_STREAM: 0")
    r = parse_nccl_lines([line]).watchdog.iloc[0]
    assert (r["kind"], r["timeout_ms"], r["pg_id"]) == ("pg_init", 600000, 0)


def test_python_exception_of_a_crashed_rank():
    lines = ["[default3]:Traceback (most recent call last):",
             "[default3]:RuntimeError: CUDA error: an illegal memory access was encountered",
             "[rank5]:[E ProcessGroupNCCL.cpp:1] [Rank 5] NCCL watchdog thread started!"]
    wd = parse_nccl_lines(lines).watchdog
    assert list(wd["kind"]) == ["exception", "watchdog_started"]
    e = wd.iloc[0]
    assert (e["launcher_rank"], e["line"]) == (3, 2)
    assert e["message"] == "RuntimeError: CUDA error: an illegal memory access was encountered"
