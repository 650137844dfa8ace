"""What keeps the parent small: questions answered where the ranks are, lean report rows, JSON as bytes."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import analyzer
from analyzer.cross_rank.roles import role_times
from analyzer.cross_rank.stragglers import compute_inside
from analyzer.rank import intervals as iv
from analyzer.rank.metrics import kind_sets
from analyzer.report.base import clean, frame_records

JOB = "fixtures/real-cpu/ddp-straggler"


def test_on_ranks_answers_where_the_ranks_were_parsed_as_the_full_trace_would(monkeypatch):
    monkeypatch.setenv("ANALYZE_POOL_BYTES", "0")  # the pool even for this small job
    a = analyzer.load(JOB, jobs=2)  # pool: the interval sets stay in the workers' scratch files
    job = a.job
    windows, expected = {}, {}
    for r, t in job.traces.items():
        edges = np.linspace(t.activity_start, t.activity_end, 9).astype(np.int64)
        windows[r] = (edges[:-1], edges[1:])
        full = kind_sets(job.full_trace(r))["compute"]  # read again from the file, here
        expected[r] = iv.clipped_lengths(full, edges[:-1], edges[1:])
    got = job.on_ranks(compute_inside, windows)
    assert sorted(got) == sorted(job.traces)
    for r in job.traces:
        assert got[r].tolist() == expected[r].tolist() and got[r].sum() > 0
    # a role's communication and its overlap: the same numbers as intersecting with the full compute set here
    r = job.ranks[0]
    s, e = windows[r][0][:4] + 1000, windows[r][0][:4] + 5_000_000
    lo, hi = windows[r][0], windows[r][1]
    (role, c, o, w, u, eu), = job.on_ranks(role_times, {r: (lo, hi, [("dp", s, e)])})[r]
    assert w == 0.0 and u == 0.0 and eu == 0.0  # no wait or unsplit intervals given: the whole span is transfer
    comm = iv.union(s, e)
    full = kind_sets(job.full_trace(r))["compute"]
    assert role == "dp" and c == float(iv.clipped_lengths(comm, lo, hi).sum())
    assert o == float(iv.clipped_lengths(iv.intersect(comm, full), lo, hi).sum())
    a.close()


def test_frame_records_are_what_clean_made_of_to_dict():
    df = pd.DataFrame({
        "rank": np.array([0, 1, 2], np.int64), "step": [5, 6, 7],
        "step_time_ns": np.array([1500, 2500, 10**12], np.int64),
        "comm_ns": [np.nan, 2.0, np.inf], "ok": [True, False, True],
        "note": ["a", None, "c"], "share": np.array([0.5, -np.inf, 0.25], np.float32),
    })
    got = frame_records(df)
    old = df.copy()
    for c, new in (("step_time_ns", "step_time_us"), ("comm_ns", "comm_us")):
        old[new] = old.pop(c) / 1000.0
    assert got == clean(old.to_dict(orient="records"))
    assert list(got[0]) == ["rank", "step", "ok", "note", "share", "step_time_us", "comm_us"]
    assert got[0]["comm_us"] is None and got[2]["comm_us"] is None and got[1]["share"] is None
    assert got[2]["step_time_us"] == 1e9 and type(got[0]["rank"]) is int and type(got[0]["ok"]) is bool
    assert not any(isinstance(v, float) and math.isnan(v) for row in got for v in row.values())


def test_cli_json_file_is_the_rendered_report(tmp_path):
    from analyzer.cli import main
    out = tmp_path / "r.json"
    code = main([JOB, "--jobs", "1", "--format", "json", "--output", str(out), "--quiet"])
    assert code in (0, 1)
    with analyzer.load(JOB, jobs=1) as a:
        assert out.read_bytes() == a.render("json").encode()
    assert out.read_bytes().endswith(b"}\n")


@pytest.mark.parametrize("doc", [
    {},
    {"a": [], "b": {}, "c": [{}], "d": ()},
    {"x": {"y": {"z": {"deep": [1, 2, {"w": "v"}]}}}, "t": (1, "two", 3.5)},
    {"s": "##[group]owned", "k##[": {"n": [["##[error]x"]], "u": "\ud800 lone"}, "big": 1 << 70},
    {"f": [float("nan"), float("inf"), -0.0, 1e-300], "np": {"i": np.int64(7), "a": np.arange(3), "b": np.bool_(True)}},
    [1, {"a": [2, [3, [4, {"b": "\n"}]]]}],
    "top-level text",
])
def test_streamed_json_is_the_rendered_document(doc):
    """`--output r.json` writes the document piece by piece: the same bytes as the whole, for hostile strings
    (CI commands, lone surrogates, newlines), numpy values, huge integers, empty and nested containers."""
    import io
    from analyzer.render.json_out import render_json_bytes, write_json
    buf = io.BytesIO()
    n = write_json(doc, buf)
    assert buf.getvalue() == render_json_bytes(doc) and n == len(buf.getvalue())
    assert b"##[" not in buf.getvalue()


@pytest.mark.parametrize("doc", [{"a": {1: "x"}}, {True: 1}, {"a": [{np.str_("k"): 1}]}])
def test_streamed_json_refuses_keys_orjson_refuses(doc):
    import io
    from analyzer.render.json_out import render_json_bytes, write_json
    with pytest.raises(TypeError):
        render_json_bytes(doc)
    with pytest.raises(TypeError):
        write_json(doc, io.BytesIO())


def test_cli_json_write_that_fails_leaves_no_partial_document(tmp_path):
    from analyzer.cli import _write_json
    out = tmp_path / "r.json"
    with pytest.raises(TypeError):
        _write_json({"ok": [1, 2, 3], "bad": {1: "x"}}, str(out))
    assert not out.exists()  # a file this run made is removed
    out.write_bytes(b'{"old": 1}')
    with pytest.raises(TypeError):
        _write_json({"ok": [1, 2, 3], "bad": {1: "x"}}, str(out))
    assert out.read_bytes() == b""  # one that was there is emptied: never a partial document
