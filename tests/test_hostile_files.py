"""Special files, pickle bombs and damaged traces: refused without blocking, or read up to the damage."""
from __future__ import annotations

import gzip
import os
import pickle

import orjson
import pytest

import parsers.kineto as kineto
import parsers.kineto_stream as kineto_stream
from analyzer.load.job import load_job
from parsers.errors import InputError
from parsers.flight_recorder import load_dump
from parsers.kineto import load_trace
from parsers.nccl_log import parse_nccl_log
from parsers.safe_unpickle import UnsafePickleError, check_memo_indices, safe_loads, salvage_loads
from parsers.trace_bytes import scan_array
from tests.kineto_builder import kernel, step, trace


# ------------------------------------------------------------------------------------------ special files
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_fifos_named_like_inputs_are_refused_without_blocking(tmp_path):
    for name in ("rank0.json", "nccl_rank0.log", "nccl_trace_rank_0", "rank1.json.gz"):
        os.mkfifo(tmp_path / name)  # no writer: open() for reading would block forever
    (tmp_path / "rank2.json").write_bytes(orjson.dumps(trace([step(1, 0, 10), kernel(1, 2)], rank=2)))
    job = load_job([tmp_path], jobs=1)
    status = {os.path.basename(f.path): (f.status, f.message) for f in job.files}
    assert status["rank2.json"][0] == "read"
    for name in ("rank0.json", "nccl_rank0.log", "nccl_trace_rank_0", "rank1.json.gz"):
        assert status[name] == ("skipped", "not a regular file (FIFO (named pipe)); not read")
    for parse in (load_trace, parse_nccl_log, load_dump):
        with pytest.raises(InputError, match="not a regular file"):
            parse(tmp_path / "rank0.json")


def test_a_fifo_given_by_name_is_refused_too(tmp_path):
    os.mkfifo(tmp_path / "rank0.json")
    job = load_job([tmp_path / "rank0.json"], jobs=1)
    assert [(f.status, "FIFO" in f.message) for f in job.files] == [("skipped", True)]


# ------------------------------------------------------------------------------------------ pickles
DUMP = {"version": "2.4", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
        "pg_status": {"0": {"last_enqueued_collective": 2, "last_started_collective": 2,
                            "last_completed_collective": 1}},
        "entries": [{"record_id": i, "pg_id": 0, "process_group": ["0", "default_pg"], "collective_seq_id": i + 1,
                     "p2p_seq_id": 0, "op_id": i + 1, "profiling_name": "nccl:all_reduce", "time_created_ns": 10 + i,
                     "input_sizes": [[4]], "output_sizes": [[4]], "input_dtypes": ["Float"],
                     "output_dtypes": ["Float"], "state": "completed", "timeout_ms": 600000, "is_p2p": False,
                     "frames": []} for i in range(40)], "rank": 1}


@pytest.mark.parametrize("idx", [2**20, 2**28, 2**32 - 1])
def test_memo_bomb_is_refused_before_any_unpickling(idx, tmp_path, monkeypatch):
    bomb = b"\x80\x02}r" + idx.to_bytes(4, "little") + b"."  # 9 bytes; LONG_BINPUT 2**28 = a 4 GB memo
    import parsers.safe_unpickle as su

    def never(self):
        raise AssertionError("the unpickler ran")
    monkeypatch.setattr(su.RestrictedUnpickler, "load", never)
    with pytest.raises(UnsafePickleError, match=f"memo index {idx}"):
        safe_loads(bomb)
    p = tmp_path / "nccl_trace_rank_0"
    p.write_bytes(bomb)
    with pytest.raises(InputError, match="pickle refused: memo index"):
        load_dump(p)


@pytest.mark.parametrize("proto", range(pickle.HIGHEST_PROTOCOL + 1))
def test_real_pickles_of_every_protocol_pass_the_prescan_and_load(proto, tmp_path):
    data = pickle.dumps(DUMP, protocol=proto)
    check_memo_indices(data)
    p = tmp_path / "nccl_trace_rank_1"
    p.write_bytes(data)
    d = load_dump(p)
    assert (d.rank, len(d.entries), d.format) == (1, 40, "pickle")
    assert d.pg_status["0"]["last_completed"] == 1


@pytest.mark.parametrize("proto", [0, 1, 2, 4])
def test_cut_off_pickles_keep_their_complete_entries(proto, tmp_path):
    data = pickle.dumps(DUMP, protocol=proto)
    p = tmp_path / "nccl_trace_rank_1"
    p.write_bytes(data[: int(len(data) * 0.6)])
    d = load_dump(p)
    assert 10 < len(d.entries) < 40 and d.entries["collective_seq_id"][0] == 1
    assert any("salvaged what was complete" in w for w in d.warnings)


def test_salvage_of_many_marks_is_linear_and_bounded():
    obj, reason = salvage_loads(b"\x80\x02" + b"(" * 200_000 + b"]")  # quadratic before: minutes
    assert "more than 1000 nested marks" in reason
    obj, reason = salvage_loads(b"\x80\x02]" + b"(K\x01e" * 100_000 + b"(" * 900)  # many marks, each closed
    assert obj == [1] * 100_000 and "truncated" in reason


def test_huge_integer_keys_and_lone_surrogates_are_clear_messages(tmp_path):
    dump = dict(DUMP, pg_config={10**5000: {"name": "x", "ranks": [0, 1]}, "1": ["not", "a", "dict"]})
    dump["entries"] = [dict(e, profiling_name="nccl:all_reduce \ud800") for e in DUMP["entries"]]
    p = tmp_path / "nccl_trace_rank_1"
    p.write_bytes(pickle.dumps(dump, protocol=4))
    d = load_dump(p)
    assert len(d.entries) == 40
    assert any("pg_config['1'] is not a dict" in w for w in d.warnings)
    assert any("values out of range or too large" in w for w in d.warnings)


# ------------------------------------------------------------------------------------------ traces
def _events(n: int) -> list[dict]:
    return [step(1, 0, 10 * n)] + [kernel(1 + 10 * i, 5, name=f"k{i % 3}", correlation=i) for i in range(n)]


def _doc(n: int) -> bytes:
    return orjson.dumps(trace(_events(n), rank=0))


def test_a_bad_token_mid_file_keeps_every_event_before_it_and_says_where(tmp_path):
    data = _doc(3000)
    i = data.index(b'"ts":', len(data) // 2)
    j = data.index(b",", i)
    bad = data[:i] + b'"ts":Nope' + data[j:]  # not a number (NaN and Infinity are read: see below)
    p = tmp_path / "rank0.json"
    p.write_bytes(bad)
    cut = tmp_path / "cut" / "rank0.json"
    cut.parent.mkdir()
    cut.write_bytes(data[:i])
    for cb in (4096, kineto.CHUNK_BYTES):
        t = load_trace(p, chunk_bytes=cb)
        want = load_trace(cut, chunk_bytes=cb)  # the same file cut at the bad token
        assert len(t.activity) == len(want.activity) > 1000
        assert t.salvage["damaged"] and f"invalid JSON at byte {i + 5}" in t.salvage["reason"]
        assert "damaged trace salvaged" in t.warnings[0]


def test_a_flipped_byte_in_gzip_keeps_what_inflates_before_it(tmp_path):
    data = _doc(20000)
    z = bytearray(gzip.compress(data))
    z[len(z) // 2] ^= 0xFF
    p = tmp_path / "rank0.json.gz"
    p.write_bytes(bytes(z))
    t = load_trace(p)
    assert 2000 < len(t.activity) < 20000 and t.salvage is not None


def test_garbage_between_gzip_members_is_skipped_and_named(tmp_path):
    data = _doc(3000)
    k = len(data) // 2
    p = tmp_path / "rank0.json.gz"
    p.write_bytes(gzip.compress(data[:k]) + b"\x00garbage\x00" * 5 + gzip.compress(data[k:]))
    t = load_trace(p)
    assert len(t.activity) == 3000 and t.salvage is None
    assert any("45 bytes that are not gzip data" in w for w in t.warnings)


def test_bom_and_bare_array_are_whole_traces(tmp_path):
    p = tmp_path / "rank0.json"
    p.write_bytes(b"\xef\xbb\xbf" + _doc(10))
    assert len(load_trace(p).activity) == 10
    q = tmp_path / "rank1.json"
    q.write_bytes(orjson.dumps(_events(10)))
    t = load_trace(q)
    assert len(t.activity) == 10 and t.salvage is None and not t.warnings


def test_absurd_numbers_and_nesting_lose_only_their_event(tmp_path):
    evs = _events(10)
    evs[3]["dur"] = 1e20
    doc = orjson.dumps(trace(evs, rank=0))
    deep = b'{"a":' * 3000 + b"1" + b"}" * 3000
    doc = doc[:-2] + b',{"ph":"X","cat":"kernel","ts":1,"dur":1,"args":{"name":' + deep + b'}},' \
        + b'{"ph":"X","cat":"kernel","name":"x","ts":1e400,"dur":1}]}'
    p = tmp_path / "rank0.json"
    p.write_bytes(doc)
    t = load_trace(p)
    assert len(t.activity) == 10
    a = t.activity.sort_values("start")
    assert (a["end"] - a["start"]).min() == 0 and (a["end"] >= a["start"]).all()
    assert any("dur of 1e+12" in w for w in t.warnings)
    assert any("nested too deep" in w for w in t.warnings)
    assert any("beyond float range" in w for w in t.warnings)


def test_garbage_after_the_array_start_stops_within_a_bounded_buffer(tmp_path, monkeypatch):
    monkeypatch.setattr(kineto_stream, "MAX_EVENT_BYTES", 1 << 20)  # read there, not in the face
    p = tmp_path / "rank0.json"
    with open(p, "wb") as fh:
        fh.write(orjson.dumps({"traceEvents": _events(50)})[:-2] + b",")
        fh.write(b"\x00" * (8 << 20))
    t = load_trace(p, chunk_bytes=1 << 16)
    assert len(t.activity) == 50 and t.salvage["damaged"]
    assert t.salvage["bytes_read"] < (3 << 20)  # stopped after the bound, not at the end of the file
    assert "no complete event in the" in t.salvage["reason"]


def _slow_scan(data: bytes, open_at: int):
    """Byte-by-byte reference of scan_array: a quote after an odd run of backslashes does not open or close a
    string (the JSON rule inside strings; outside them a backslash is invalid JSON anyway)."""
    depth, in_str, run, last, close = 0, False, 0, open_at + 1, -1
    for i in range(open_at, len(data)):
        c = data[i:i + 1]
        if c == b"\\":
            run += 1
            continue
        escaped, run = run % 2 == 1, 0
        if c == b'"':
            if not escaped:
                in_str = not in_str
            continue
        if in_str:
            continue
        if c in b"{[":
            depth += 1
        elif c in b"}]":
            depth -= 1
            if depth == 0:
                close = i
                break
            if depth == 1 and c == b"}":
                last = i + 1
    return last, close


@pytest.mark.slow
def test_scan_array_in_tiny_pieces_matches_a_byte_by_byte_scan(monkeypatch):
    import random
    import parsers.trace_bytes as tb
    rng = random.Random(5)
    alphabet = [b"{", b"}", b"[", b"]", b'"', b"\\", b"\\\\", b'\\"', b",", b"a", b" "]
    for _ in range(400):
        body = b"".join(rng.choice(alphabet) for _ in range(rng.randrange(60)))
        data = b"[" + body
        want = _slow_scan(data, 0)
        for piece in (1, 3, 7, 1 << 20):
            monkeypatch.setattr(tb, "SCAN_PIECE_BYTES", piece)
            assert scan_array(data, 0) == want, (body, piece)


# ------------------------------------------------------------------------------------------ issue #24 classes
from tests.fuzz import hostile_cases as hc  # noqa: E402


@pytest.mark.parametrize("name", sorted(hc.LENGTH_OPCODES))
def test_a_length_prefix_beyond_the_data_is_refused_before_allocating(name, monkeypatch, tmp_path):
    import random
    import parsers.safe_unpickle as su
    data = hc.huge_length_pickle(name, random.Random(3))
    if hc.LENGTH_OPCODES[name][1] > 1:  # a 1-byte length allocates nothing worth refusing; the unpickler says cut
        with pytest.raises(su.PickleLengthError, match="announces .* bytes but only 3 remain"):
            su.check_memo_indices(data)

    ran = []
    real = su.RestrictedUnpickler.load

    def load(self):
        ran.append(1)
        return real(self)
    monkeypatch.setattr(su.RestrictedUnpickler, "load", load)
    p = tmp_path / "nccl_trace_rank_0"
    p.write_bytes(data)
    try:
        d = load_dump(p)
    except InputError as exc:  # cut before the entries: nothing to salvage, a clear message
        assert "Flight Recorder pickle" in exc.reason or "pickle" in exc.reason
    else:
        assert any("salvaged what was complete" in w for w in d.warnings)
    assert ran == ([] if hc.LENGTH_OPCODES[name][1] > 1 else [1])  # refused before the unpickler allocated


def test_bounded_int_and_int_column():
    import numpy as np
    from parsers.numbers import bounded_int, int_column
    assert bounded_int("18446744073709551616") == -1 and bounded_int("9223372036854775807") == 2**63 - 1
    assert bounded_int("9" * 5000) == -1 and bounded_int(None) == -1 and bounded_int("x", 7) == 7
    assert bounded_int(b"42") == 42 and bounded_int("-3", lo=0) == -1
    assert int_column([1, 2**64, -5], "int64").tolist() == [1, -1, -5]
    assert int_column(np.array([1, 2**40]), "int32").tolist() == [1, -1]  # not a silent wrap to 0
    assert int_column(np.array([1.0, np.nan, 1e30]), "int64").tolist() == [1, -1, -1]


def test_a_huge_number_in_a_torchrun_log_costs_only_its_field(tmp_path):
    import random
    from parsers.torch_stderr import parse_stderr
    d = hc.case_huge_number_in_log(tmp_path / "case", random.Random(0))
    log = parse_stderr(d / "torchrun.log")
    ev = log.events
    g = ev[ev["kind"] == "gloo_size_mismatch"]
    assert len(g) == 1 and int(g["bytes_a"][0]) == -1 and int(g["bytes_b"][0]) == 8
    assert len(log.failures) == 2  # the file's other lines are kept: both ranks' failure records


def test_zero_duration_operators_on_a_pipeline_rank_keep_the_rank(tmp_path):
    import random
    from analyzer.rank.summary import summarise
    d = hc.case_zero_duration_pipeline_rank(tmp_path / "case", random.Random(0))
    s, _ = summarise(load_trace(d / "rank1.pt.trace.json.gz"))
    assert s.rank == 1


@pytest.mark.parametrize("sep", hc.SEPARATORS)
def test_every_line_separator_is_escaped_in_github_and_json(sep):
    from analyzer.render import sanitize
    forged = f"x{sep}::error file=a.py::forged{sep}##[error]y"
    gh = "::error title=t::" + sanitize.github_data(forged)
    assert gh.splitlines() == [gh] and "##[" not in gh
    js = sanitize.dumps({"m": forged})
    assert js.splitlines() == [js]
    assert orjson.loads(js)["m"].replace(sanitize.BREAK, "") == forged.replace("\r", "\r")
    t = sanitize.text(forged)
    assert t.splitlines() == [t] and not t.lstrip().startswith("::")
    doc = sanitize.guard_ci_lines(f"a{sep}::error::forged\n")
    assert not any(line.lstrip().startswith("::") for line in doc.splitlines())


def test_nan_and_infinity_literals_keep_the_rank(tmp_path):
    import random
    d = hc.case_non_finite_trace(tmp_path / "case", random.Random(0))
    clean = load_trace(mu_fixture("real-cpu/ddp-straggler/rank1.pt.trace.json.gz"))
    t = load_trace(d / "rank1.pt.trace.json.gz")
    assert t.salvage is None and t.rank == 1
    assert len(clean.activity) - 2 <= len(t.activity) <= len(clean.activity)  # at most the two bad-ts events lost
    assert any("4 NaN/Infinity literals" in w for w in t.warnings)


def mu_fixture(rel: str):
    return hc.mu.FIXTURES / rel


def _cli_case(name: str, tmp_path, seed: int = 0) -> dict:
    import random
    d = hc.CLASSES[name](tmp_path / "case", random.Random(f"{seed}-{name}"))
    code, err, took, docs = hc.run_cli(d, tmp_path / "out", extra=hc.CLASS_OUTPUTS.get(name, ()))
    hc.judge(f"{name} (seed {seed})", code, err, took, docs)
    for opt in hc.CLASS_OUTPUTS.get(name, ()):  # the renderers that crashed on this class wrote their file
        assert (tmp_path / "out" / f"{opt.strip('-')}.html").stat().st_size > 1000, opt
    doc = orjson.loads(docs["json"])
    doc["_exit"] = code
    return doc


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(hc.CLASSES))
def test_each_hostile_class_through_the_command_in_2gb_and_20s(name, tmp_path):
    doc = _cli_case(name, tmp_path)
    failed = [f for f in doc["inputs"]["files"] if f["status"] == "failed"]
    if name != "mixed":
        assert not failed, failed
    if name not in ("mixed", "huge_pickle_lengths", "no_complete_step", "gzip_flip"):
        assert not [f for f in doc["inputs"]["files"] if f["status"] == "salvaged"]
    ranks = sorted(r["rank"] for r in doc["ranks"])
    if name in ("base_time_out_of_range", "gzip_flip", "lone_surrogate", "all_nan_slice"):
        assert ranks == [0, 1, 2, 3]  # every rank kept
    if name == "no_complete_step":
        assert ranks == [0, 1] and "error" not in doc["cross_rank"]
    if name == "many_empty_traces":
        assert doc["_exit"] == 2 and doc["inputs"]["skipped"] == 4000 and not doc["analysed"]
        assert [g["count"] for g in doc["inputs"]["skipped_by_reason"]] == [4000]  # one reason, one entry
    if name in ("huge_group", "duplicate_dump_ranks"):  # the reading of the real folder, whatever the damage
        top = doc["findings"][0]
        assert top["id"] == "HANG001" and top["subject"]["ranks"] == [1], top["title"]
    if name == "duplicate_dump_ranks":
        dup = [f for f in doc["findings"] if f["id"] == "INPUT004"]
        assert len(dup) == 1 and len(dup[0]["evidence"]) == 2
    if name == "huge_number_in_log":
        assert [f["id"] for f in doc["findings"]][:1] == ["HANG001"]
        # the same reading as the unmodified folder: a tie of the 2-rank group below 0.5, the aborted rank 0 the
        # receiver, with the huge size quoted as it was printed (bounded, not lost)
        top = doc["findings"][0]
        assert top["subject"]["ranks"] == [0, 1] and top["confidence"] < 0.5
        assert "18446744073709551616" in " ".join(e["text"] for e in top["evidence"])
    if name == "zero_duration_pipeline_rank":
        assert sorted(r["rank"] for r in doc["ranks"]) == [0, 1, 2, 3]
    if name == "non_finite_trace":
        assert sorted(r["rank"] for r in doc["ranks"]) == [0, 1, 2, 3]
    if name == "line_separators":
        assert all(line.startswith(("::error ", "::warning ", "::notice "))
                   for line in (tmp_path / "out" / "r.gh").read_text(encoding="utf-8").splitlines())


@pytest.mark.slow
def test_a_campaign_of_mixed_cases_through_the_command(tmp_path):
    for i in range(8):
        _cli_case("mixed", tmp_path / str(i), seed=i)
