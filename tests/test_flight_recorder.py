"""Flight Recorder parser: formats, odd pg_config, wrap, and hostile / broken input (never executed)."""
from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest

from analyzer.hang.analysis import load_and_analyze
from parsers.errors import InputError
from parsers.flight_recorder import load_dump, looks_like_fr_dump, normalise_op, parse_ranks, rank_from_name
from parsers.safe_unpickle import salvage_loads
from tests.test_hang_builders import dump_dict, write_dumps
from tests.tables import pandas_tables

load_dump = pandas_tables(load_dump)  # the tables as DataFrames (tests/tables.py)

REAL = Path(__file__).resolve().parent.parent / "fixtures" / "real-cpu-hang"
MARKER_HIT: list[str] = []


def _plant_marker(path: str) -> None:
    """What a hostile pickle would run: create a marker file and set a global."""
    Path(path).write_text("ran")
    MARKER_HIT.append(path)


class _Evil:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (_plant_marker, (self.path,))


class _EvilSystem:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


@pytest.mark.parametrize("payload", [_Evil, _EvilSystem])
def test_pickle_that_builds_objects_is_refused_and_nothing_runs(tmp_path: Path, payload) -> None:
    """A dump whose pickle calls a function (here: writes a marker) is refused; the function never runs."""
    marker = tmp_path / "marker"
    d = dump_dict(0, [("0", 1, "all_reduce", 16, "f32")])
    d["entries"].append(payload(str(marker)))
    p = tmp_path / "nccl_trace_rank_0"
    p.write_bytes(pickle.dumps(d, protocol=2))
    MARKER_HIT.clear()
    with pytest.raises(InputError, match="refused"):
        load_dump(p)
    for cut in (len(p.read_bytes()) - 3, len(p.read_bytes()) // 2 + 40):  # truncated hostile pickle: salvage path
        q = tmp_path / f"cut_{cut}_rank_1"
        q.write_bytes(p.read_bytes()[:cut])
        try:
            load_dump(q)
        except InputError:
            pass
    assert not marker.exists() and MARKER_HIT == []


def test_pickle_with_a_plain_class_is_refused(tmp_path: Path) -> None:
    """Even a harmless class instance is refused: only containers and scalars load."""
    p = tmp_path / "nccl_trace_rank_0"
    p.write_bytes(pickle.dumps({"version": "2.5", "entries": [], "x": Path("/tmp")}))
    with pytest.raises(InputError, match=r"nccl_trace_rank_0: pickle refused: refused to load global"):
        load_dump(p)


def test_truncated_pickle_is_salvaged_with_warning(tmp_path: Path) -> None:
    """A dump cut mid-write keeps its complete entries and says it was salvaged."""
    [p] = write_dumps(tmp_path, {1: [("0", s, "all_reduce", 16, "f32") for s in range(1, 41)]})
    data = p.read_bytes()
    cut = tmp_path / "nccl_trace_rank_1_cut"
    cut.write_bytes(data[: int(len(data) * 0.6)])
    d = load_dump(cut)
    assert any("salvaged" in w for w in d.warnings)
    n = len(d.entries)
    assert 10 < n < 40
    assert list(d.entries["collective_seq_id"]) == list(range(1, n + 1))
    assert d.version == "2.5" and d.pg_config["0"]["ranks"] == [0, 1, 2, 3]


def test_truncated_real_dump_salvage_and_header_only(tmp_path: Path) -> None:
    """A real gloo dump cut after 70% still yields entries; cut inside the header it is an InputError."""
    data = (REAL / "missing_rank" / "nccl_trace_rank_0").read_bytes()
    p = tmp_path / "nccl_trace_rank_0"
    p.write_bytes(data[: int(len(data) * 0.7)])
    d = load_dump(p)
    assert d.rank == 0 and len(d.entries) >= 1 and d.warnings
    q = tmp_path / "nccl_trace_rank_5"
    q.write_bytes(data[:6])
    with pytest.raises(InputError, match="nccl_trace_rank_5"):
        load_dump(q)


def test_binary_and_empty_and_text_files(tmp_path: Path) -> None:
    """Random bytes, an empty file and plain text each get a clear InputError naming the file."""
    b = tmp_path / "nccl_trace_rank_0"
    b.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(InputError, match="nccl_trace_rank_0: neither a pickle nor a JSON"):
        load_dump(b)
    e = tmp_path / "empty_1"
    e.write_bytes(b"")
    with pytest.raises(InputError, match="empty file"):
        load_dump(e)
    z = tmp_path / "junk.pkl"
    z.write_bytes(b"\x80\x04\x95garbage")
    with pytest.raises(InputError, match="junk.pkl"):
        load_dump(z)


def test_bad_inputs_do_not_stop_the_analysis(tmp_path: Path) -> None:
    """With one hostile, one binary and one truncated file among good dumps, the hang is still diagnosed."""
    paths = write_dumps(tmp_path, {0: [("0", s, "all_reduce", 16, "f32") for s in range(1, 6)],
                                   1: [("0", s, "all_reduce", 16, "f32") for s in range(1, 6)],
                                   2: [("0", s, "all_reduce", 16, "f32") for s in range(1, 5)]}, world=3)
    evil = dump_dict(3, [("0", 1, "all_reduce", 16, "f32")], world=3)
    evil["entries"].append(_Evil(str(tmp_path / "marker")))
    (tmp_path / "nccl_trace_rank_3").write_bytes(pickle.dumps(evil, protocol=2))
    (tmp_path / "blob.bin").write_bytes(b"\x00\x01\x02" * 100)
    rep = load_and_analyze(paths + [tmp_path / "nccl_trace_rank_3", tmp_path / "blob.bin"], world_size=3)
    assert (rep.diagnoses[0].kind, rep.diagnoses[0].seq, rep.diagnoses[0].culprit_ranks) == ("missing_rank", 5, [2])
    assert any("nccl_trace_rank_3: pickle refused" in w for w in rep.warnings)
    assert any("blob.bin" in w and "binary" in w for w in rep.warnings)
    assert not (tmp_path / "marker").exists()


def test_json_dump_and_truncated_json(tmp_path: Path) -> None:
    """JSON dumps (string numbers in pg_status, 0 for unknown times) read like pickles; a cut one is salvaged."""
    d = dump_dict(2, [("0", s, "all_gather", 4, "bf16") for s in range(1, 9)])
    d["pg_status"] = {"0": {"last_enqueued_collective": "8", "last_started_collective": "-1",
                            "last_completed_collective": "7"}}
    for e in d["entries"]:
        e["time_discovered_started_ns"] = 0
    text = json.dumps(d)
    p = tmp_path / "fr_2.json"
    p.write_text(text)
    x = load_dump(p)
    assert x.format == "json" and x.rank == 2
    assert x.pg_status == {"0": {"last_enqueued": 8, "last_started": -1, "last_completed": 7}}
    assert list(x.entries["output_numel"]) == [16] * 8 and set(x.entries["time_started_ns"]) == {-1}
    assert set(x.entries["input_dtypes"]) == {"BFloat16"}
    cut = tmp_path / "fr_3.json"
    cut.write_text(text[: text.index('"record_id": 5')])
    y = load_dump(cut)
    assert len(y.entries) == 5 and any("salvaged 5" in w for w in y.warnings)


@pytest.mark.parametrize("ranks,expected", [("[0, 1]", [0, 1]), ([3, 1], [1, 3]), ("2,3", [2, 3]), ("[]", []),
                                            (None, None), ("abc", None), ({"a": 1}, None)])
def test_parse_ranks_forms(ranks, expected) -> None:
    """pg_config ranks as string, list, comma text, empty, missing, garbage."""
    assert parse_ranks(ranks) == expected


def test_odd_pg_config_is_read_with_warnings(tmp_path: Path) -> None:
    """pg_config missing, a list, or with unreadable ranks: the dump still loads, with a warning each."""
    for i, cfg in enumerate([None, ["x"], {"0": {"desc": "default_pg", "ranks": "n/a"}}, {"0": "bad"}]):
        d = dump_dict(i, [("0", 1, "all_reduce", 16, "f32")])
        if cfg is None:
            del d["pg_config"]
        else:
            d["pg_config"] = cfg
        p = tmp_path / f"nccl_trace_rank_{i}"
        p.write_bytes(pickle.dumps(d, protocol=2))
        x = load_dump(p)
        assert len(x.entries) == 1 and any("pg_config" in w for w in x.warnings), (cfg, x.warnings)


def test_rank_from_file_name_when_dump_has_none(tmp_path: Path) -> None:
    """No 'rank' key: the numeric suffix of the file name is the rank."""
    d = dump_dict(0, [("0", 1, "all_reduce", 16, "f32")])
    del d["rank"]
    p = tmp_path / "nccl_trace_rank_7"
    p.write_bytes(pickle.dumps(d, protocol=2))
    x = load_dump(p)
    assert (x.rank, x.rank_source) == (7, "filename")
    assert rank_from_name("dumps/fr_trace_12.json") == 12 and rank_from_name("trace.json") is None


@pytest.mark.parametrize("name,op,peer", [
    ("nccl:all_reduce", "allreduce", -1), ("gloo:broadcast", "broadcast", -1), ("nccl:_allgather_base", "allgather", -1),
    ("nccl:_reduce_scatter_base", "reducescatter", -1), ("nccl:send 1->2", "send", 2), ("nccl:recv 3<-0", "recv", 0),
    ("nccl:coalesced", "coalesced", -1), ("nccl:all_to_all", "alltoall", -1), ("nccl:barrier", "barrier", -1),
    ("nccl:all_gather_into_tensor_coalesced", "allgather", -1)])
def test_normalise_op(name: str, op: str, peer: int) -> None:
    """profiling_name → normalised op and p2p peer."""
    assert normalise_op(name) == (op, peer)


def test_real_gloo_dump_fields() -> None:
    """A real torch 2.x gloo dump: version 2.10, empty-named pg_config entry, user frame from the stack."""
    d = load_dump(REAL / "mismatched_op" / "nccl_trace_rank_2")
    assert d.version == "2.10" and d.rank == 2 and d.rank_source == "filename" and d.warnings == []
    assert d.pg_config == {"": {"desc": "", "ranks": [0, 1, 2]}}
    st = d.pg_status["0"]  # gloo counts a failed collective as completed on some runs: 3 or 4
    assert (st["last_enqueued"], st["last_started"]) == (4, -1) and st["last_completed"] in (3, 4)
    e = d.entries
    assert list(e["op"]) == ["allreduce"] * 3 + ["broadcast"]
    assert list(e["collective_seq_id"]) == [1, 2, 3, 4] and set(e["pg_desc"]) == {"default_pg"}
    assert set(e["input_numel"]) == {16} and set(e["timeout_ms"]) == {5000}
    assert e["top_frame"].iloc[3].endswith("make_hangs.py:55 rank_main")


def test_looks_like_fr_dump() -> None:
    """Discovery sniff: real pickle head, JSON head, not a text log or a Chrome trace."""
    head = (REAL / "missing_rank" / "nccl_trace_rank_1").read_bytes()[:256]
    assert looks_like_fr_dump(head)
    assert looks_like_fr_dump(b'{"version": "2.5", "pg_config": {}, "entries": [')
    assert not looks_like_fr_dump(b'{"traceEvents": [], "schemaVersion": 1}')
    assert not looks_like_fr_dump(b"node0:1:1 [0] NCCL INFO Bootstrap")
    assert not looks_like_fr_dump(pickle.dumps([1, 2, 3]))


def test_salvage_interpreter_plain_roundtrip() -> None:
    """The salvage interpreter rebuilds a complete plain pickle exactly (protocols 2-5)."""
    obj = {"a": [1, 2.5, None, True, ("x", "y")], "b": {"c": -7, "d": 2 ** 70}, "e": "é" * 300, "f": [[2, 3]] * 3}
    for proto in (2, 3, 4, 5):
        got, reason = salvage_loads(pickle.dumps(obj, protocol=proto))
        assert got == obj and reason == "complete"
    got, _ = salvage_loads(pickle.dumps({"b": b"y"}, protocol=3))
    assert got == {"b": b"y"}
    got, reason = salvage_loads(pickle.dumps({"a": 1, "b": b"y"}, protocol=2))  # protocol 2 bytes need a global
    assert "unsupported opcode GLOBAL" in reason
