"""Hang analysis on hand-built dumps and logs: every mismatch kind, from dumps alone, logs alone, and both."""
from __future__ import annotations

from pathlib import Path

import pytest

from analyzer.hang.analysis import analyze_hang, load_and_analyze
from parsers.nccl_log import parse_nccl_log
from tests.test_hang_builders import coll_log, load_all, wd_log, write_dumps


def base(n: int, pg: str = "0", start: int = 1) -> list[tuple]:
    """n matching 16-element float all_reduces on one group."""
    return [(pg, s, "all_reduce", 16, "f32") for s in range(start, n + 1)]


def first(rep) -> tuple:
    """(kind, group, seq, culprits) of the top diagnosis."""
    d = rep.diagnoses[0]
    return d.kind, d.process_group, d.seq, d.culprit_ranks


DUMP_CASES = {
    "mismatched_op": ({0: base(5), 1: base(5), 2: base(4) + [("0", 5, "broadcast", 16, "f32")], 3: base(5)},
                      ("mismatched_op", "0", 5, [2])),
    "mismatched_size": ({0: base(3), 1: base(2) + [("0", 3, "all_reduce", 8, "f32")], 2: base(3), 3: base(3)},
                        ("mismatched_size", "0", 3, [1])),
    "mismatched_dtype": ({0: base(4), 1: base(4), 2: base(4), 3: base(3) + [("0", 4, "all_reduce", 16, "f16")]},
                         ("mismatched_dtype", "0", 4, [3])),
    "extra_collective": ({0: base(4), 1: base(4), 3: base(4),
                          2: base(3) + [("0", 4, "barrier", 1, "f32"), ("0", 5, "all_reduce", 16, "f32")]},
                         ("extra_collective", "0", 4, [2])),
    "skipped_collective": ({r: base(3) + [("0", 4, "all_gather", 16, "f32"), ("0", 5, "all_reduce", 16, "f32")]
                            for r in (0, 1, 3)} | {2: base(3) + [("0", 4, "all_reduce", 16, "f32")]},
                           ("skipped_collective", "0", 4, [2])),
    "order_mismatch": ({r: base(3) + [("0", 4, "all_reduce", 16, "f32"), ("0", 5, "all_gather", 16, "f32")]
                        for r in (0, 2, 3)} | {1: base(3) + [("0", 4, "all_gather", 16, "f32"),
                                                             ("0", 5, "all_reduce", 16, "f32")]},
                       ("order_mismatch", "0", 4, [1])),
    "missing_rank": ({0: base(6), 1: base(6), 2: base(6), 3: base(5)}, ("missing_rank", "0", 6, [3])),
    "stalled_rank": ({0: base(6), 1: base(6), 2: base(6), 3: base(3)}, ("lagging_rank", "0", 4, [3])),
}


def _status(per_rank: dict) -> dict:
    """pg_status where every rank completed all it enqueued except the waiters' last op."""
    top = max(s[1] for seqs in per_rank.values() for s in seqs)
    out = {}
    for r, seqs in per_rank.items():
        enq = max(s[1] for s in seqs)
        out[r] = {"0": {"last_enqueued_collective": enq, "last_started_collective": -1,
                        "last_completed_collective": enq if enq < top else min(enq - 1, top - 1)}}
    return out


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(DUMP_CASES))
@pytest.mark.parametrize("fmt", ["pickle", "json"])
def test_dumps_alone_name_group_seq_culprit(tmp_path: Path, case: str, fmt: str) -> None:
    """From Flight Recorder dumps alone the first diagnosis is the planted fault."""
    per_rank, expected = DUMP_CASES[case]
    dumps = load_all(write_dumps(tmp_path, per_rank, fmt=fmt, status=_status(per_rank)))
    rep = analyze_hang(dumps, world_size=4)
    assert first(rep) == expected
    d = rep.diagnoses[0]
    assert sorted(d.waiting_ranks) == sorted(set(range(4)) - set(expected[3]))
    assert d.evidence and d.fix and d.cause


def test_mismatch_details_per_rank(tmp_path: Path) -> None:
    """Per-rank ops, sizes and dtypes at the divergence are reported, and the culprit's stack frame is cited."""
    per_rank, _ = DUMP_CASES["mismatched_size"]
    rep = analyze_hang(load_all(write_dumps(tmp_path, per_rank)), world_size=4)
    d = rep.diagnoses[0]
    assert d.sizes == {0: 16, 1: 8, 2: 16, 3: 16}
    assert d.dtypes == {r: "float32" for r in range(4)}
    assert d.ops == {r: "allreduce" for r in range(4)}
    assert any("train.py:43 step" in e[2] and "rank 1" in e[2] for e in d.evidence)
    assert "drop_last" in d.fix


def test_crashed_rank_without_dump(tmp_path: Path) -> None:
    """A member with no dump at all while the others wait at seq 5 is the crashed culprit."""
    dumps = load_all(write_dumps(tmp_path, {0: base(5), 1: base(5), 3: base(5)}))
    rep = analyze_hang(dumps, world_size=4)
    assert first(rep) == ("crashed_rank", "0", 5, [2])
    assert rep.diagnoses[0].waiting_ranks == [0, 1, 3]


def test_crashed_rank_world_from_pg_config(tmp_path: Path) -> None:
    """Without world_size, pg_config membership '[0, 1, 2, 3]' still reveals the rank with no dump."""
    dumps = load_all(write_dumps(tmp_path, {0: base(2), 2: base(2), 3: base(2)}))
    assert first(analyze_hang(dumps)) == ("crashed_rank", "0", 2, [1])


def test_chain_points_at_root_group(tmp_path: Path) -> None:
    """Rank 3 misses default_pg seq 10 because it waits in TP group 1 seq 7, which rank 2 skipped: root is group 1."""
    cfg = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"},
           "1": {"name": "1", "desc": "tp", "ranks": "[2, 3]"}}
    inter = [x for i in range(1, 7) for x in (("0", i, "all_reduce", 16, "f32"), ("1", i, "all_gather", 16, "f32"))]
    inter += base(9, start=7)
    per_rank = {0: base(10), 1: base(10), 2: inter + [("0", 10, "all_reduce", 16, "f32")],
                3: inter + [("1", 7, "all_gather", 16, "f32")]}
    rep = analyze_hang(load_all(write_dumps(tmp_path, per_rank, pg_config=cfg)), world_size=4)
    # rank 2 entered default_pg seq 10 where its history (tp after default_pg) says tp seq 7 comes next; rank 3
    # waits for it there, and rank 2 waits for rank 3 in default_pg: a cross-group deadlock with rank 2 out of order
    assert first(rep) == ("order_inversion", "1", 7, [2])
    d = rep.diagnoses[0]
    # only tp's members are said to wait in tp; 0 and 1 wait in default_pg, listed under explains
    assert d.pg_desc == "tp" and d.waiting_ranks == [3] and not d.tie and len(rep.diagnoses) == 1
    assert {"process_group": "0", "pg_desc": "default_pg", "seq": 10, "op": "allreduce", "waiting": [0, 1],
            "on": [3]} in d.explains


def test_ring_buffer_wrap_is_not_a_missing_rank(tmp_path: Path) -> None:
    """Ranks whose buffers start at different seqs (wrapped) but agree where they overlap: no false culprit."""
    per_rank = {0: base(60, start=40), 1: base(60, start=45), 2: base(60, start=50), 3: base(59, start=41)}
    dumps = load_all(write_dumps(tmp_path, per_rank))
    assert any("ring buffer wrapped" in w for d in dumps for w in d.warnings)
    assert first(analyze_hang(dumps, world_size=4)) == ("missing_rank", "0", 60, [3])


def test_progress_table(tmp_path: Path) -> None:
    """The tables hold per-group per-rank last seq and pg_status numbers exactly as dumped."""
    per_rank, _ = DUMP_CASES["missing_rank"]
    rep = analyze_hang(load_all(write_dumps(tmp_path, per_rank, status=_status(per_rank))), world_size=4)
    t = rep.tables.sort_values("rank")
    assert list(t["last_seen_seq"]) == [6, 6, 6, 5]
    assert list(t["last_enqueued"]) == [6, 6, 6, 5]
    assert list(t["last_completed"]) == [5, 5, 5, 5]


def test_clean_job_has_no_diagnosis(tmp_path: Path) -> None:
    """Every rank at the same seq with the same ops: nothing to blame (no false alarm)."""
    rep = analyze_hang(load_all(write_dumps(tmp_path, {r: base(5) for r in range(4)})), world_size=4)
    assert rep.diagnoses == []


# ---- logs alone (stand-in NcclLog objects with the parser's columns) ----

def _timeouts(tmp: Path, ops: dict[int, str], seq: int = 12, status: dict | None = None, numel: dict | None = None):
    logs = []
    for r, op in ops.items():
        rows = [dict(kind="timeout", seq=seq, op=op, numel=(numel or {}).get(r, 1024), pg=-1)]
        enq, comp = (status or {}).get(r, (seq, seq - 1))
        rows += [dict(kind="last_enqueued", seq=enq), dict(kind="last_completed", seq=comp)]
        logs.append(wd_log(tmp / f"rank{r}.log", r, rows))
    return logs


def test_logs_watchdog_missing_rank(tmp_path: Path) -> None:
    """Ranks 0-2 time out at SeqNum 12; rank 3's status says it last enqueued 11: rank 3 never joined 12."""
    logs = _timeouts(tmp_path, {0: "ALLREDUCE", 1: "ALLREDUCE", 2: "ALLREDUCE"})
    logs.append(wd_log(tmp_path / "rank3.log", 3, [dict(kind="last_enqueued", seq=11),
                                                   dict(kind="last_completed", seq=11)]))
    rep = analyze_hang(logs=logs, world_size=4)
    assert first(rep) == ("missing_rank", "0", 12, [3])
    assert rep.diagnoses[0].source == "watchdog"


def test_logs_watchdog_stalled_rank(tmp_path: Path) -> None:
    """A rank whose last enqueued is 3 behind the group is a stalled (lagging) rank; the others wait in seq 10."""
    logs = _timeouts(tmp_path, {0: "ALLREDUCE", 1: "ALLREDUCE", 2: "ALLREDUCE"}, seq=10,
                     status={r: (12, 9) for r in range(3)})
    logs.append(wd_log(tmp_path / "rank3.log", 3, [dict(kind="last_enqueued", seq=9),
                                                   dict(kind="last_completed", seq=9)]))
    assert first(analyze_hang(logs=logs, world_size=4)) == ("lagging_rank", "0", 10, [3])


def test_logs_watchdog_mismatched_op_and_size(tmp_path: Path) -> None:
    """Timed-out work with a different OpType / NumelIn on one rank names that rank."""
    logs = _timeouts(tmp_path, {0: "ALLREDUCE", 1: "ALLREDUCE", 2: "BROADCAST", 3: "ALLREDUCE"})
    assert first(analyze_hang(logs=logs, world_size=4)) == ("mismatched_op", "0", 12, [2])
    sub = tmp_path / "size"
    sub.mkdir()
    logs = _timeouts(sub, {r: "ALLREDUCE" for r in range(4)}, numel={1: 512})
    assert first(analyze_hang(logs=logs, world_size=4)) == ("mismatched_size", "0", 12, [1])


def test_logs_crashed_rank_with_error_and_without_log(tmp_path: Path) -> None:
    """A rank whose log ends in an NCCL error (or has no log at all) while the others time out is the culprit."""
    logs = _timeouts(tmp_path, {0: "ALLREDUCE", 1: "ALLREDUCE", 3: "ALLREDUCE"}, seq=7)
    no_log = analyze_hang(logs=logs, world_size=4)
    assert first(no_log) == ("crashed_rank", "0", 7, [2])
    logs.append(wd_log(tmp_path / "rank2.log", 2, [dict(kind="nccl_error", seq=-1,
                                                        message="NCCL error: unhandled system error, NCCL version 2.21.5")]))
    rep = analyze_hang(logs=logs, world_size=4)
    assert first(rep) == ("nccl_error", "0", 7, [2])  # its own log says why it failed
    assert any(e[0].endswith("rank2.log") and "NCCL error" in e[2] for e in rep.diagnoses[0].evidence)
    assert rep.diagnoses[0].waiting_ranks == [0, 1, 3] and len(rep.diagnoses) == 1


def test_logs_nccl_coll_size_and_missing(tmp_path: Path) -> None:
    """From NCCL COLL lines alone: a different count at opCount 3, or a rank whose opCount stops one short."""
    ops = {r: [("AllReduce", i, 512 if (r == 1 and i == 3) else 1024, 7) for i in range(5)] for r in range(4)}
    logs = [coll_log(tmp_path / f"r{r}.log", r, "0xabc", o) for r, o in ops.items()]
    assert first(analyze_hang(logs=logs)) == ("mismatched_size", "nccl:0xabc", 3, [1])
    ops = {r: [("AllReduce", i, 1024, 7) for i in range(4 if r == 2 else 5)] for r in range(4)}
    logs = [coll_log(tmp_path / f"m{r}.log", r, "0xabc", o) for r, o in ops.items()]
    rep = analyze_hang(logs=logs)
    assert first(rep) == ("missing_rank", "nccl:0xabc", 4, [2])
    assert rep.diagnoses[0].dtypes == {0: "float32", 1: "float32", 3: "float32"}


def test_logs_timeout_without_divergence(tmp_path: Path) -> None:
    """All ranks time out at the same op and size and agree on status: a generic watchdog_timeout, no culprit."""
    logs = _timeouts(tmp_path, {r: "ALLREDUCE" for r in range(4)})
    rep = analyze_hang(logs=logs, world_size=4)
    assert [(d.kind, d.seq, d.culprit_ranks) for d in rep.diagnoses] == [("watchdog_timeout", 12, [])]


# ---- both sources ----

def test_dumps_and_logs_together(tmp_path: Path) -> None:
    """Dumps of ranks 0-2 and rank 3's watchdog status only: rank 3 (last enqueued 5) missed seq 6."""
    dumps = load_all(write_dumps(tmp_path, {0: base(6), 1: base(6), 2: base(6)}))
    logs = [wd_log(tmp_path / "rank3.log", 3, [dict(kind="last_enqueued", seq=5), dict(kind="last_completed", seq=5)])]
    rep = analyze_hang(dumps, logs, world_size=4)
    assert first(rep) == ("missing_rank", "0", 6, [3])
    files = {Path(e[0]).name for e in rep.diagnoses[0].evidence}
    assert {"nccl_trace_rank_0", "rank3.log"} <= files


def test_end_to_end_through_nccl_log_parser(tmp_path: Path) -> None:
    """Real watchdog text through parsers.nccl_log: rank 2 timed out in BROADCAST where others ALLREDUCE."""
    paths = []
    for r in range(3):
        op = "BROADCAST" if r == 2 else "ALLREDUCE"
        p = tmp_path / f"rank{r}.err"
        p.write_text(
            f"[rank{r}]:[E1129 08:00:00.000000000 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) Rank {r}] "
            f"Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType={op}, NumelIn=64, NumelOut=64, "
            "Timeout(ms)=600000) ran for 600012 milliseconds before timing out.\n"
            f"[rank{r}]:[E1129 08:00:00.000000001 ProcessGroupNCCL.cpp:2168] [PG ID 0 PG GUID 0(default_pg) Rank {r}]"
            "  failure detected by watchdog at work sequence id: 9 PG status: last enqueued work: 9, "
            "last completed work: 8\n")
        paths.append(p)
    rep = analyze_hang(logs=[parse_nccl_log(p) for p in paths], world_size=3)
    assert first(rep) == ("mismatched_op", "0", 9, [2])
    assert rep.diagnoses[0].evidence[0][:2] == (str(paths[2]), 1)  # the culprit's own line first
    rep2 = load_and_analyze(paths, world_size=3)
    assert first(rep2) == ("mismatched_op", "0", 9, [2])
