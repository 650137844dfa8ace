"""Flight Recorder dumps with hostile sizes: pickle bombs, out-of-range numbers, impossible ranks, deep nesting."""
from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from analyzer.hang.analysis import analyze_hang, load_and_analyze
from parsers.errors import InputError
from parsers.flight_recorder import load_dump, to_int64, valid_rank
from parsers.safe_unpickle import UnsafePickleError, check_plain
from tests.tables import pandas_tables

load_table_dump = load_dump  # as the analysis reads it (tables of parsers/table.py)
load_dump = pandas_tables(load_dump)  # the tables as DataFrames (tests/tables.py)


def entry(seq: int, **k) -> dict:
    """One completed 16-element float all_reduce entry of group 0."""
    e = {"record_id": seq, "pg_id": 0, "process_group": ["0", "default_pg"], "collective_seq_id": seq,
         "p2p_seq_id": 0, "op_id": seq, "profiling_name": "nccl:all_reduce", "time_created_ns": 1000 + seq,
         "input_sizes": [[16]], "output_sizes": [[16]], "input_dtypes": ["Float"], "output_dtypes": ["Float"],
         "state": "completed", "timeout_ms": 600000, "frames": [], "is_p2p": False,
         "time_discovered_started_ns": 2000 + seq, "time_discovered_completed_ns": 3000 + seq}
    e.update(k)
    return e


def dump(rank, entries: list, **top) -> dict:
    """A two-rank dump of group 0 with status 'everything through seq 3 completed'."""
    d = {"version": "2.4", "rank": rank, "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
         "pg_status": {"0": {"last_enqueued_collective": 3, "last_started_collective": 3,
                             "last_completed_collective": 3}}, "entries": entries}
    d.update(top)
    return d


def write(tmp_path: Path, name: str, obj) -> Path:
    """Pickle obj to tmp_path/name."""
    p = tmp_path / name
    p.write_bytes(pickle.dumps(obj))
    return p


def bomb(depth: int = 9) -> list:
    """A list whose 10 members are one shared list, `depth` levels deep: 10**(depth+1) leaves in ~100 bytes."""
    x = [1] * 10
    for _ in range(depth):
        x = [x] * 10
    return x


def test_shared_reference_bomb_is_refused_fast_naming_the_file(tmp_path: Path) -> None:
    """An 800-byte pickle whose input_sizes expand to 10**10 leaves is an InputError (not a hang) naming the file."""
    p = write(tmp_path, "bomb_13", dump(13, [entry(1, input_sizes=bomb())]))
    assert p.stat().st_size < 2000
    with pytest.raises(InputError, match="bomb_13.*expands to more than"):
        load_dump(p)
    rep = load_and_analyze([p])  # the analysis skips it with a warning instead of hanging
    assert any("bomb_13" in w and "pickle refused" in w for w in rep.warnings)


def test_check_plain_counts_shared_nodes_on_every_visit() -> None:
    """Expanded size counts a shared container each time it is reached; cycles and deep nesting are refused."""
    shared = [1, 2]
    assert check_plain({"a": shared, "b": shared}) == 1 + 1 + 3 + 1 + 3  # dict, 'a', [1,2], 'b', [1,2]
    assert check_plain(bomb(3), max_nodes=20_000) == sum(10 ** k for k in range(5))  # 11111 nodes
    with pytest.raises(UnsafePickleError, match="expands"):
        check_plain(bomb(3), max_nodes=11_110)
    cyc: list = []
    cyc.append(cyc)
    with pytest.raises(UnsafePickleError, match="cycle"):
        check_plain(cyc)
    deep: list = []
    for _ in range(150):
        deep = [deep]
    with pytest.raises(UnsafePickleError, match="nesting too deep"):
        check_plain(deep)


def test_truncated_bomb_is_refused_on_the_salvage_path(tmp_path: Path) -> None:
    """A cut-off pickle goes through salvage, whose result is bounded the same way."""
    data = pickle.dumps(dump(13, [entry(1, input_sizes=bomb()), entry(2)]))
    p = tmp_path / "cut_rank_3"
    p.write_bytes(data[:-20])
    with pytest.raises(InputError, match="cut_rank_3.*expands to more than"):
        load_dump(p)


@pytest.mark.slow
def test_large_but_legal_sizes_are_not_serialised(tmp_path: Path) -> None:
    """input_sizes with 10**6 leaves (under the bomb bound) give numel but no megabyte of JSON text, with a warning."""
    sizes = [[1, 1]] * 500_000  # 500k shared shapes: fine for the unpickler, too much text to keep per row
    d = load_dump(write(tmp_path, "big_rank_0", dump(0, [entry(1, input_sizes=sizes)])))
    e = d.entries.iloc[0]
    assert e["input_numel"] == 500_000 and e["input_sizes"] == ""
    assert any("input_sizes x1" in w for w in d.warnings)


@pytest.mark.parametrize("field, value, column", [
    ("time_created_ns", "inf", "time_created_ns"), ("time_created_ns", 10 ** 30, "time_created_ns"),
    ("time_created_ns", float("nan"), "time_created_ns"), ("input_sizes", [[10 ** 30]], "input_numel"),
    ("input_sizes", [[float("inf")]], "input_numel"), ("input_sizes", [[2 ** 40, 2 ** 40]], "input_numel"),
    ("record_id", -(10 ** 25), "record_id"), ("timeout_ms", "9" * 5000, "timeout_ms"),
])
def test_out_of_range_numbers_become_unknown_with_a_warning(tmp_path: Path, field, value, column) -> None:
    """A value beyond int64 is read as -1, the rest of the dump is kept, and the file's warning counts it."""
    p = write(tmp_path, "nccl_trace_rank_0", dump(0, [entry(1, **{field: value}), entry(2)]))
    d = load_dump(p)
    assert list(d.entries[column]) == [-1, 2 if column == "record_id" else d.entries[column].iloc[1]]
    assert d.entries[column].dtype == "int64" and len(d.entries) == 2
    assert list(d.entries["collective_seq_id"]) == [1, 2]
    [w] = [w for w in d.warnings if "out of range" in w]
    assert str(p) in w and f"{field} x" in w


def test_out_of_range_status_and_peer(tmp_path: Path) -> None:
    """pg_status 'inf' and a peer beyond any rank are unknown (-1), counted once each in the file's warning."""
    p = write(tmp_path, "nccl_trace_rank_1", dump(1, [entry(1), entry(
        2, profiling_name="nccl:send 1->9999999999999999999999", is_p2p=True)],
        pg_status={"0": {"last_enqueued_collective": "inf", "last_completed_collective": 2}}))
    d = load_dump(p)
    assert d.pg_status["0"] == {"last_enqueued": -1, "last_started": -1, "last_completed": 2}
    assert list(d.entries["peer"]) == [-1, -1] and list(d.entries["op"]) == ["allreduce", "send"]
    assert any("2 values out of range" in w and "peer x1" in w and "pg_status x1" in w for w in d.warnings)


def test_to_int64_and_valid_rank() -> None:
    """The one range-checked conversion: in-range ints/strings/floats pass; inf, nan, 10**19 are rejected."""
    assert to_int64("12") == (12, False) and to_int64(3.0) == (3, False) and to_int64(None) == (-1, False)
    assert to_int64("abc") == (-1, False)
    assert to_int64(2 ** 63 - 1) == (2 ** 63 - 1, False) and to_int64(2 ** 63) == (-1, True)
    assert to_int64(float("inf")) == (-1, True) and to_int64("1e400") == (-1, True)
    assert [valid_rank(v) for v in (0, 5, "7", 2.0, 2 ** 20 - 1)] == [0, 5, 7, 2, 2 ** 20 - 1]
    assert [valid_rank(v) for v in (True, False, -1, 2 ** 20, 1e30, 2.5, "six", None, [1])] == [None] * 9


@pytest.mark.parametrize("rank", [10 ** 9, 1e30, True, -3, "six", float("inf")])
def test_impossible_rank_falls_back_to_file_name(tmp_path: Path, rank) -> None:
    """A dump rank that is not 0 <= rank < 2**20 (or is a bool) is refused with a warning; the file name decides."""
    p = write(tmp_path, "nccl_trace_rank_1", dump(rank, [entry(1), entry(2), entry(3)]))
    d = load_dump(p)
    assert d.rank == 1 and d.rank_source == "filename"
    assert any(str(p) in w and "is not a rank" in w for w in d.warnings)
    q = write(tmp_path, "dump_without_suffix.pkl", dump(rank, [entry(1)]))
    assert load_dump(q).rank is None


def test_huge_ranks_do_not_reach_the_analysis(tmp_path: Path) -> None:
    """Dumps claiming rank 10**9 / 1e30 are analysed as their file-name ranks; no range over 10**9 is built."""
    a = write(tmp_path, "nccl_trace_rank_0", dump(10 ** 9, [entry(1), entry(2), entry(3, state="scheduled")],
                                                  pg_status={"0": {"last_enqueued_collective": 3,
                                                                   "last_completed_collective": 2}}))
    b = write(tmp_path, "nccl_trace_rank_1", dump(1e30, [entry(1), entry(2)],
                                                   pg_status={"0": {"last_enqueued_collective": 2,
                                                                    "last_completed_collective": 2}}))
    rep = load_and_analyze([a, b])
    assert sorted(set(rep.seqs["rank"].tolist())) == [0, 1]
    d = rep.diagnoses[0]
    assert (d.kind, d.seq, d.culprit_ranks) == ("missing_rank", 3, [1])


def test_pg_config_with_impossible_ranks_is_ignored(tmp_path: Path) -> None:
    """pg_config ranks beyond 2**20 (or unconvertible) make the membership unknown, with a warning."""
    p = write(tmp_path, "nccl_trace_rank_0", dump(0, [entry(1)], pg_config={
        "0": {"name": "0", "desc": "default_pg", "ranks": [0, 10 ** 12]},
        "1": {"name": "1", "desc": "x", "ranks": [0, float("inf")]},
        "2": {"name": "2", "desc": "y", "ranks": "[0, " + "9" * 5000 + "]"}}))
    d = load_dump(p)
    assert [d.pg_config[k]["ranks"] for k in "012"] == [None, None, None]
    assert sum("pg_config" in w for w in d.warnings) == 3
    rep = analyze_hang([load_table_dump(p)])
    groups = rep.groups.records()
    assert next(g["members"] for g in groups if g["process_group"] == "0") == [0]


def test_deep_json_is_a_clear_input_error(tmp_path: Path) -> None:
    """JSON nested 5000 deep (whole or cut off) is an InputError saying 'nesting too deep', not a RecursionError."""
    deep = "[" * 5000 + "]" * 5000
    whole = '{"version": "2.4", "rank": 0, "entries": [{"collective_seq_id": 1, "input_sizes": %s}]}' % deep
    for name, text in (("fr_deep_0.json", whole), ("fr_cut_0.json", whole[:-3])):
        p = tmp_path / name
        p.write_text(text)
        with pytest.raises(InputError, match=f"{name}.*nesting too deep"):
            load_dump(p)
    ok = tmp_path / "fr_ok_0.json"
    ok.write_text(json.dumps(dump(0, [entry(1, input_sizes=[[[[2]]]])])))
    assert load_dump(ok).entries["input_sizes"].tolist() == ["[[[[2]]]]"]
