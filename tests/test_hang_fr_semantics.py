"""Flight Recorder fields read as PyTorch writes them: pg_id-keyed status, counters, per-op match rules, ties.

Hand-built dumps in the shapes real dumps have (docs/hang-analysis.md): pg_status keyed by the rank-local pg_id,
names from the entries' process_group, NCCL P2P numbered apart from collectives, gloo counting every op.
"""
from __future__ import annotations

import pickle
from pathlib import Path

from analyzer.hang import fr_groups
from analyzer.hang.analysis import analyze_hang
from parsers.flight_recorder import load_dump
from parsers.table import Table


def ent(rid: int, pg_id: int, name: str, desc: str, seq: int, op: str = "all_reduce", *, p2p: int = 0,
        op_id: int | None = None, ins=((16,),), outs=None, dt: str = "Float", state: str = "scheduled",
        peer: str = "", backend: str = "nccl", created: int = 0, timeout_ms: int = 600000,
        frame: str = "train.py:10 step") -> dict:
    """One entry as ProcessGroupNCCL / ProcessGroupGloo record it."""
    fn, ln_name = frame.split(" ")
    file, line = fn.rsplit(":", 1)
    return {"record_id": rid, "pg_id": pg_id, "process_group": (name, desc), "collective_seq_id": seq,
            "p2p_seq_id": p2p, "op_id": op_id if op_id is not None else seq + p2p,
            "profiling_name": f"{backend}:{op}{(' ' + peer) if peer else ''}", "time_created_ns": created or 10 ** 18 + rid,
            "input_sizes": [list(x) for x in ins], "output_sizes": [list(x) for x in (outs or ins)],
            "input_dtypes": [dt] * len(ins), "output_dtypes": [dt] * len(outs or ins), "state": state,
            "time_discovered_started_ns": None, "time_discovered_completed_ns": None, "retired": False,
            "timeout_ms": timeout_ms, "is_p2p": op in ("send", "recv"),
            "frames": [{"name": "x", "filename": "/x/site-packages/torch/distributed/distributed_c10d.py", "line": 1},
                       {"name": ln_name, "filename": file, "line": int(line)}]}


def write(tmp: Path, rank: int, entries: list, pg_config: dict, pg_status: dict, version: str = "2.9") -> Path:
    p = tmp / f"_dump_{rank}"
    p.write_bytes(pickle.dumps({"version": version, "pg_config": pg_config, "pg_status": pg_status,
                                "entries": entries}, protocol=2))
    return p


def status(enq: int, done: int) -> dict:
    return {"last_enqueued_collective": enq, "last_started_collective": -1, "last_completed_collective": done}


def cfg(**groups: tuple) -> dict:
    return {name: {"name": name, "desc": desc, "ranks": str(list(ranks))} for name, (desc, ranks) in groups.items()}


def test_pg_id_names_from_entries_and_creation_order() -> None:
    """pg_id 5 → '41' from an entry; pg_ids without entries named by pairing sorted ids with sorted names."""
    entries = Table({"pg_id": [5, 11], "pg_name": ["41", "74"]})
    names = fr_groups.pg_id_names(entries, {"0": {}, "7": {}, "41": {}, "74": {}},
                                  {"0": {}, "1": {}, "5": {}, "11": {}})
    assert names.names == {"0": "0", "1": "7", "5": "41", "11": "74"} and names.inferred == {"0", "1"}
    # an anchor that contradicts the order pairing: the unanchored ids stay unnamed
    bad = fr_groups.pg_id_names(Table({"pg_id": [1], "pg_name": ["74"]}), {"0": {}, "7": {}, "74": {}},
                                {"0": {}, "1": {}, "2": {}})
    assert bad.names == {"1": "74"} and not bad.inferred
    # non-numeric names (hashed groups) are never paired by order
    h = fr_groups.pg_id_names(Table({"pg_id": [], "pg_name": []}), {"a1b2": {}, "c3d4": {}},
                              {"0": {}, "1": {}})
    assert h.names == {}


def _e(rows: list[dict]) -> Table:
    return Table.from_records(rows, list(rows[0]))


def test_status_space_collective_p2p_and_op_counters() -> None:
    """last_enqueued is the work's own counter: a collective number, a P2P number (NCCL) or an op count (gloo)."""
    coll = _e([dict(collective_seq_id=7, p2p_seq_id=0, op_id=7, is_p2p=False, profiling_name="nccl:all_reduce")])
    s = fr_groups.status_space(coll, {"last_enqueued": 7, "last_completed": 6}, "nccl")
    assert (s.space, s.coll_enqueued, s.coll_completed) == ("collective", 7, 6)
    # NCCL pipeline group: the last work was a send, numbered 11980 among P2P ops, after collective 26
    p2p = _e([dict(collective_seq_id=26, p2p_seq_id=11979, op_id=12005, is_p2p=True, profiling_name="nccl:recv 3<-2"),
              dict(collective_seq_id=26, p2p_seq_id=11980, op_id=12006, is_p2p=True, profiling_name="nccl:send 3->0")])
    s = fr_groups.status_space(p2p, {"last_enqueued": 11980, "last_completed": 11979}, "nccl")
    assert (s.space, s.coll_enqueued, s.p2p_enqueued, s.p2p_completed, s.coll_completed) == ("p2p", 26, 11980,
                                                                                           11979, 26)
    # gloo: op_id counts a send/recv too (gloo records no P2P entry): status 6 means collective 5 here
    gloo = _e([dict(collective_seq_id=5, p2p_seq_id=0, op_id=6, is_p2p=False, profiling_name="gloo:all_reduce")])
    s = fr_groups.status_space(gloo, {"last_enqueued": 6, "last_completed": 6}, "gloo")
    assert (s.space, s.coll_enqueued) == ("op", 5)


def test_nvrx_shape_pg_status_never_becomes_a_phantom_group(tmp_path: Path) -> None:
    """Rank-local pg_ids (1, 5) differ from names ('7', '41'): no group named '1' or '5' appears, members come
    from pg_config, and the stalled TP member is named at its TP group."""
    c = cfg(**{"0": ("default_pg", range(4)), "7": ("DATA_PARALLEL_GROUP", [0, 2]),
               "41": ("TENSOR_MODEL_PARALLEL_GROUP", [0, 1])})
    paths = []
    for r, done in ((0, 40), (1, 30)):
        e = [ent(i, 5, "41", "TENSOR_MODEL_PARALLEL_GROUP", s) for i, s in enumerate(range(31, 45))]
        paths.append(write(tmp_path, r, e, c, {"0": status(9, 9), "1": status(286, 286), "5": status(44, done)}))
    rep = analyze_hang([load_dump(p) for p in paths], world_size=2)
    assert set(rep.groups["process_group"]) == {"0", "7", "41"}
    d = rep.diagnoses[0]
    assert (d.kind, d.process_group, d.seq, d.culprit_ranks) == ("device_stalled", "41", 31, [1])
    assert all(x.confidence < 0.5 or x.culprit_ranks == [1] for x in rep.diagnoses)


def _alltoall(tmp: Path, splits: dict[int, tuple[int, int]]) -> list:
    """A 3-rank all_to_all at seq 2 (after a matching all_reduce) with per-rank input / output element counts."""
    c = cfg(**{"0": ("default_pg", range(3))})
    out = []
    for r, (i, o) in splits.items():
        e = [ent(0, 0, "0", "default_pg", 1), ent(1, 0, "0", "default_pg", 2, "all_to_all", ins=((i, 4),),
                                                   outs=((o, 4),))]
        out.append(load_dump(write(tmp, r, e, c, {"0": status(2, 1)})))
    return out


def test_alltoall_with_rank_dependent_splits_is_not_a_size_mismatch(tmp_path: Path) -> None:
    """MoE token routing: every rank sends and receives a different number of rows; the totals agree."""
    rep = analyze_hang(_alltoall(tmp_path, {0: (5, 7), 1: (9, 4), 2: (6, 9)}), world_size=3)
    assert not [d for d in rep.diagnoses if d.kind.startswith("mismatched")]


def test_alltoall_whose_totals_differ_is_a_mismatch_without_a_culprit(tmp_path: Path) -> None:
    """Σ sent ≠ Σ received: a size mismatch of the group, every member a suspect, confidence below 0.5."""
    rep = analyze_hang(_alltoall(tmp_path, {0: (5, 7), 1: (9, 4), 2: (6, 8)}), world_size=3)
    d = rep.diagnoses[0]
    assert (d.kind, d.seq, d.culprit_ranks, d.tie) == ("mismatched_size", 2, [0, 1, 2], True)
    assert d.confidence < 0.5 and "80 elements in all but receives 76" in d.cause


def test_one_vs_one_is_a_tie_not_lowest_rank_wins(tmp_path: Path) -> None:
    """Two ranks, two sizes: both are suspects at below 0.5, the finding says it is a tie."""
    c = cfg(**{"0": ("default_pg", range(2))})
    dumps = [load_dump(write(tmp_path, r, [ent(0, 0, "0", "default_pg", 1, ins=((n,),))], c, {"0": status(1, 0)}))
             for r, n in ((0, 16), (1, 8))]
    d = analyze_hang(dumps, world_size=2).diagnoses[0]
    assert (d.kind, d.culprit_ranks, d.tie) == ("mismatched_size", [0, 1], True) and d.confidence < 0.5
    assert "no majority" in d.cause


def test_tie_broken_by_sibling_groups_of_the_same_role(tmp_path: Path) -> None:
    """TP groups {0,1} and {2,3}: in {2,3} the sizes differ 1:1; {0,1} issued what rank 2 issued → rank 3."""
    c = cfg(**{"0": ("default_pg", range(4)), "1": ("tp", [0, 1]), "2": ("tp", [2, 3])})
    dumps = []
    for r in range(4):
        g = "1" if r < 2 else "2"
        n = 8 if r == 3 else 16
        e = [ent(0, 1, g, "tp", 1), ent(1, 1, g, "tp", 2, ins=((n,),))]
        dumps.append(load_dump(write(tmp_path, r, e, c, {"0": status(0, 0), "1": status(2, 1 if r >= 2 else 2)})))
    d = analyze_hang(dumps, world_size=4).diagnoses[0]
    assert (d.kind, d.process_group, d.seq, d.culprit_ranks, d.tie) == ("mismatched_size", "2", 2, [3], False)
    assert "sibling group" in d.cause


def test_coalesced_call_compared_as_a_whole(tmp_path: Path) -> None:
    """Entries sharing one seq (plus the 'coalesced' marker) are one call: a different part size is a mismatch
    at that seq, equal parts are no mismatch."""
    c = cfg(**{"0": ("default_pg", range(3))})
    dumps = []
    for r in range(3):
        last = 4 if r == 1 else 8
        e = [ent(0, 0, "0", "default_pg", 1), ent(1, 0, "0", "default_pg", 2, ins=((8,),)),
             ent(2, 0, "0", "default_pg", 2, ins=((last,),)), ent(3, 0, "0", "default_pg", 2, "coalesced")]
        dumps.append(load_dump(write(tmp_path, r, e, c, {"0": status(2, 1)})))
    d = analyze_hang(dumps, world_size=3).diagnoses[0]
    assert (d.kind, d.seq, d.culprit_ranks) == ("mismatched_size", 2, [1]) and d.sizes == {0: 16, 1: 12, 2: 16}


def test_device_stalled_rank_is_the_head_of_a_pipeline_chain(tmp_path: Path) -> None:
    """Stage 0 (rank 0) waits in a send to stage 1 (rank 1), which waits in a recv from rank 2 (its DP peer's
    group is fine); rank 2's own TP work stopped completing while its TP peer completed it: rank 2 is the root
    and the pipeline waits are its consequences."""
    c = cfg(**{"0": ("default_pg", range(4)), "5": ("pp", [0, 1]), "6": ("pp", [1, 2]), "9": ("tp", [2, 3])})
    d0 = [ent(0, 1, "5", "pp", 0, "send", p2p=1, peer="0->1")]
    d1 = [ent(0, 1, "5", "pp", 0, "recv", p2p=1, peer="1<-0"), ent(1, 2, "6", "pp", 0, "recv", p2p=1, peer="0<-1")]
    d2 = [ent(i, 1, "9", "tp", s) for i, s in enumerate(range(10, 14))]
    d3 = [ent(i, 1, "9", "tp", s) for i, s in enumerate(range(10, 14))]
    dumps = [load_dump(write(tmp_path, 0, d0, c, {"0": status(0, 0), "1": {"last_enqueued_collective": 1,
                                                                           "last_completed_collective": 0}})),
             load_dump(write(tmp_path, 1, d1, c, {"0": status(0, 0), "1": {"last_enqueued_collective": 1,
                                                                           "last_completed_collective": 1},
                                                  "2": {"last_enqueued_collective": 1,
                                                        "last_completed_collective": 0}})),
             load_dump(write(tmp_path, 2, d2, c, {"0": status(0, 0), "1": status(13, 9)})),
             load_dump(write(tmp_path, 3, d3, c, {"0": status(0, 0), "1": status(13, 12)}))]
    rep = analyze_hang(dumps, world_size=4)
    top = rep.diagnoses[0]
    assert (top.kind, top.process_group, top.seq, top.culprit_ranks) == ("device_stalled", "9", 10, [2])
    # 0 and 1 are not members of tp (group 9 is {2, 3}): they wait in the pipeline groups, listed under explains
    assert top.waiting_ranks == [] and len(rep.diagnoses) == 1
    assert {r for x in top.explains for r in x["waiting"]} == {0, 1}
    assert {(x["process_group"], tuple(x["waiting"]), tuple(x["on"])) for x in top.explains} >= {("6", (1,), (2,))}


def test_late_arrival_past_the_timeout_is_the_lagging_rank(tmp_path: Path) -> None:
    """gloo: every rank issued seq 3, rank 1 eight seconds after the others (timeout 5 s): rank 1 stalled."""
    c = {"": {"name": "", "desc": "", "ranks": "[0, 1, 2]"}}
    t0 = 1_700_000_000_000_000_000
    dumps = []
    for r in range(3):
        late = 8_000_000_000 if r == 1 else r * 1_000_000
        e = [ent(i, 0, "0", "default_pg", s, backend="gloo", created=t0 + s * 10 ** 8 + (late if s == 3 else 0),
                 timeout_ms=5000) for i, s in enumerate((1, 2, 3))]
        dumps.append(load_dump(write(tmp_path, r, e, c, {"0": status(3, 3)}, version="2.10")))
    d = analyze_hang(dumps, world_size=3).diagnoses[0]
    assert (d.kind, d.seq, d.culprit_ranks, d.waiting_ranks) == ("lagging_rank", 3, [1], [0, 2])
    assert "8.0 s after the others" in d.cause


def test_empty_json_dump_means_nothing_recorded(tmp_path: Path) -> None:
    """A JSON dump of an empty buffer has no 'entries' key: it is a dump (not unknown content) and its rank is
    one that never issued the collective the others wait in."""
    import json

    from parsers.flight_recorder import looks_like_fr_dump
    empty = {"version": "2.10", "comm_lib_version": "", "pg_config": {"": {"name": "", "desc": "", "ranks": "[0, 1]"}},
             "pg_status": {}}
    p = tmp_path / "nccl_trace_rank_1.json"
    p.write_text(json.dumps(empty))
    assert looks_like_fr_dump(p.read_bytes())
    d1 = load_dump(p)
    assert d1.has_entries is False and d1.entries.empty and any("buffer was empty" in w for w in d1.warnings)
    c = {"": {"name": "", "desc": "", "ranks": "[0, 1]"}}
    d0 = load_dump(write(tmp_path, 0, [ent(0, 0, "0", "default_pg", 1, backend="gloo")], c, {"0": status(1, 1)}))
    rep = analyze_hang([d0, d1], world_size=2)
    d = rep.diagnoses[0]
    assert (d.kind, d.seq, d.culprit_ranks) == ("missing_rank", 1, [1])
    assert any("holds no entries" in w for w in rep.warnings)


def test_dumps_of_other_versions_unknown_keys_or_cut_are_read_with_a_message(tmp_path: Path) -> None:
    """A newer version, keys this reader does not know, a cut-off pickle: each gets a message naming the file and
    the rest of the analysis goes on (the other ranks' dumps still give the verdict)."""
    c = cfg(**{"0": ("default_pg", range(3))})
    ok = [load_dump(write(tmp_path, r, [ent(i, 0, "0", "default_pg", s) for i, s in enumerate((1, 2))], c,
                          {"0": status(2, 1)})) for r in (0, 1)]
    newer = tmp_path / "_dump_2"
    body = {"version": "3.1", "pg_config": c, "pg_status": {"0": status(1, 1)}, "flux_capacitor": {"x": 1},
            "entries": [ent(0, 0, "0", "default_pg", 1)]}
    newer.write_bytes(pickle.dumps(body, protocol=2)[:-40])  # cut before its end
    d2 = load_dump(newer)
    assert any("3.1 is not 2.x" in w for w in d2.warnings)
    assert any("flux_capacitor" in w and "do not know" in w for w in d2.warnings) or \
        any("salvaged" in w for w in d2.warnings)
    rep = analyze_hang(ok + [d2], world_size=3)
    d = rep.diagnoses[0]
    assert d.culprit_ranks == [2] and d.seq == 2 and d.kind in ("missing_rank", "lagging_rank")
