"""Hang analysis on inputs that claim too much: completed groups with a missing dump, impossible ranks, COLL rows."""
from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path


from analyzer.hang.analysis import analyze_hang
from analyzer.hang.inputs import gather
from parsers.flight_recorder import load_dump
from tests.test_hang_builders import coll_log, dump_dict, wd_log


def one_rank_dump(tmp_path: Path, last_state: str = "completed", enq: int = 3, done: int = 3) -> Path:
    """Rank 0's dump of group [0, 1]: all_reduces 1..enq, the last in `last_state`, status enq/done."""
    d = dump_dict(0, [("0", s, "all_reduce", 16, "f32") for s in range(1, enq + 1)], world=2,
                  status={"0": {"last_enqueued_collective": enq, "last_started_collective": enq,
                                "last_completed_collective": done}})
    for e in d["entries"]:
        e["state"] = "completed"
    d["entries"][-1]["state"] = last_state
    p = tmp_path / "nccl_trace_rank_0"
    p.write_bytes(pickle.dumps(d))
    return p


def test_lone_completed_dump_is_no_crash(tmp_path: Path) -> None:
    """Only rank 0's dump, everything completed, nothing timed out: no diagnosis, a warning that rank 1 left none."""
    rep = analyze_hang([load_dump(one_rank_dump(tmp_path))])
    assert rep.diagnoses == []
    [w] = [w for w in rep.warnings if "left no Flight Recorder dump" in w]
    assert "rank 1 left" in w and "rank 0 through seq 3" in w and "no sign of a hang" in w


def test_crash_seq_is_the_first_uncompleted_one(tmp_path: Path) -> None:
    """Rank 0 completed 3 and waits in 4 (status and entry agree): rank 1 crashed, reported at seq 4, not 3."""
    rep = analyze_hang([load_dump(one_rank_dump(tmp_path, last_state="started", enq=4, done=3))])
    d = rep.diagnoses[0]
    assert (d.kind, d.process_group, d.seq, d.culprit_ranks, d.waiting_ranks) == ("crashed_rank", "0", 4, [1], [0])
    assert "wait after seq 3, at seq 4" in d.cause
    assert any("last enqueued 4, last completed 3" in e[2] for e in d.evidence)


def test_completed_group_with_a_timeout_waits_in_the_next_seq(tmp_path: Path) -> None:
    """Group 0 completed through seq 3 but rank 0's watchdog fired: rank 1 crashed, the others wait at seq 4."""
    for pg, expected in ((0, "after seq 3, at seq 4"), (1, "wait at seq 4")):
        log = wd_log(tmp_path / f"rank0_{pg}.log", 0, [dict(kind="timeout", seq=4, op="ALLREDUCE", numel=16, pg=pg)])
        rep = analyze_hang([load_dump(one_rank_dump(tmp_path))], [log])
        [d] = [d for d in rep.diagnoses if d.process_group == str(pg)]  # PG 1: members unknown, the world's used
        assert (d.kind, d.seq, d.culprit_ranks, d.waiting_ranks) == ("crashed_rank", 4, [1], [0])
        assert expected in d.cause


def _dump_with_rank(tmp_path: Path, rank, name: str):
    """A loaded dump whose rank attribute is then overwritten (as another producer might hand it over)."""
    p = tmp_path / name
    p.write_bytes(pickle.dumps(dump_dict(0, [("0", 1, "all_reduce", 16, "f32")], world=2)))
    return dataclasses.replace(load_dump(p), rank=rank)


def test_gather_skips_impossible_ranks(tmp_path: Path) -> None:
    """Dump objects with rank 10**9, 1e30, True or -2 are skipped with a warning; no range over them is built."""
    good = _dump_with_rank(tmp_path, 1, "good_1")
    bad = [_dump_with_rank(tmp_path, r, f"bad_{i}") for i, r in enumerate([10 ** 9, 1e30, True, -2])]
    inp = gather([good] + bad, [], None)
    assert inp.world == {0, 1} and set(inp.calls["rank"]) == {1}
    for i in range(4):
        assert any(f"bad_{i}" in w and "is not a rank" in w for w in inp.warnings)


def test_sparse_huge_ranks_are_not_filled_in(tmp_path: Path) -> None:
    """pg_config members {0, 500000} without a world size: the world is those two ranks, with a warning."""
    p = tmp_path / "nccl_trace_rank_0"
    p.write_bytes(pickle.dumps(dump_dict(0, [("0", 1, "all_reduce", 16, "f32")],
                                         pg_config={"0": {"name": "0", "desc": "default_pg",
                                                          "ranks": "[0, 500000]"}})))
    inp = gather([load_dump(p)], [], None)
    assert inp.world == {0, 500000}
    assert any("highest rank seen is 500000" in w for w in inp.warnings)
    dense = gather([load_dump(p)], [], 4)
    assert dense.world == {0, 1, 2, 3, 500000}


def test_coll_rows_from_columns(tmp_path: Path) -> None:
    """COLL rows: rank from the process table, seq from opCount (int or hex text), dtype names, text, line order."""
    log = coll_log(tmp_path / "r3.log", 3, "c1", [("AllReduce", 0, 16, 7), ("AllGather", 1, 8, 9),
                                                  ("Broadcast", 2, 4, 42)])
    hexed = dataclasses.replace(log, colls=log.colls.with_columns(op_count=["0", "1", "1f"],
                                                                   comm_id=["c1", "c1", None]))
    for lg, seqs in ((log, [0, 1, 2]), (hexed, [0, 1])):
        s = gather([], [lg], None).calls
        s = s[s["source"] == "nccl_log"].sort_values("line")
        assert list(s["seq"]) == seqs and set(s["rank"]) == {3} and set(s["group"]) == {"nccl:c1"}
        assert list(s["dtype_in"]) == ["float32", "bfloat16", "42"][:len(seqs)]
        assert list(s["op"]) == ["allreduce", "allgather", "broadcast"][:len(seqs)]
        assert list(s["numel_in"]) == [16, 8, 4][:len(seqs)] and list(s["line"]) == [2, 3, 4][:len(seqs)]
        assert s["text"][1] == "rank 3 AllGather: opCount 1 count 8 datatype 9"
    t = gather([], [dataclasses.replace(log, colls=log.colls.with_columns(op_count=["a", "1f", "2"]))], None).calls
    assert list(t.sort_values("line")["seq"]) == [10, 31, 2]
    bad = gather([], [dataclasses.replace(log, colls=log.colls.with_columns(op_count=["zz", "1", "2"]))], None).calls
    assert list(bad.sort_values("line")["seq"]) == [1, 2]
