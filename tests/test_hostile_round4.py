"""Hostile input, round 4 (#34), on the user's path: `analyzer.load(folder)` or the command in-process, on the
seeded folders of tests/fuzz/hostile_cases.py (the fuzz suite runs the same classes in a subprocess under 2 GB /
20 s). Each test states what the unmodified folder gives and checks the damaged one keeps it."""
from __future__ import annotations

import gzip
import json
import random
import re
import warnings

import orjson
import pytest

from analyzer import load
from analyzer.cli import main
from parsers.kineto import load_trace
from parsers.kineto_values import base_time_ns
from tests.fuzz import hostile_cases as hc


def _case(name: str, tmp_path, seed: int = 0):
    return hc.CLASSES[name](tmp_path / name, random.Random(f"{seed}-{name}"))


def _files(a, status: str) -> list[dict]:
    return [f for f in a.report["inputs"]["files"] if f["status"] == status]


# ---------------------------------------------------------------------------- 1. baseTimeNanoseconds out of range
@pytest.mark.parametrize("value", [2**63 + 5, 1e21, 1e300, -1e300, "1e21", True])
def test_a_base_time_out_of_range_is_ignored_by_every_reader(value, tmp_path):
    from analyzer.report.about import _collected
    from parsers.kineto_host import host_events
    from types import SimpleNamespace as NS
    raw = gzip.decompress((hc.STRAGGLER / "rank1.pt.trace.json.gz").read_bytes())
    p = tmp_path / "rank1.pt.trace.json"
    text = json.dumps(value).encode()  # json writes integers beyond int64 and 1e+300 as such
    p.write_bytes(raw.replace(b'"baseTimeNanoseconds":', b'"baseTimeNanoseconds": ' + text + b', "old":', 1))
    t = load_trace(p)
    assert base_time_ns(t.meta["base_time_ns"]) is None and t.rank == 1
    assert any("baseTimeNanoseconds" in w and "ignored" in w for w in t.warnings)
    host, _ = host_events(str(p))
    assert len(host) and host["start"].max() < 10**16 and t.activity["start"].max() < 10**16  # the raw clock
    t.activity_start = 5  # a boot-relative clock: the collection time could only come from the base
    assert _collected(NS(traces={1: t})) == (None, None)


@pytest.mark.slow
@pytest.mark.parametrize("value", [2**63 + 5, 1e21, 1e300])
def test_a_base_time_out_of_range_is_that_files_warning_and_every_output_is_written(value, tmp_path, capsys):
    d = tmp_path / "run"
    d.mkdir()
    for r in (0, 1):
        raw = orjson.loads(gzip.decompress((hc.STRAGGLER / f"rank{r}.pt.trace.json.gz").read_bytes()))
        t0 = min(e["ts"] for e in raw["traceEvents"] if isinstance(e.get("ts"), (int, float)))
        for e in raw["traceEvents"]:
            if isinstance(e.get("ts"), (int, float)):
                e["ts"] -= t0  # boot-relative times: the collection time can only come from the base
        text = orjson.dumps(raw).replace(b'"baseTimeNanoseconds":', b'"baseTimeNanoseconds":' + repr(value).encode()
                                         + b', "old":', 1)
        (d / f"rank{r}.pt.trace.json").write_bytes(text)
    t = load_trace(d / "rank1.pt.trace.json")
    assert base_time_ns(t.meta["base_time_ns"]) is None and t.rank == 1
    assert any("baseTimeNanoseconds" in w and "ignored" in w for w in t.warnings)
    code = main([str(d), "-q", "--jobs", "1", "--format", "json", "-o", str(tmp_path / "r.json"),
                 "--timeline", str(tmp_path / "t.html"), "--html", str(tmp_path / "r.html")])
    err = capsys.readouterr().err
    assert code in (0, 1), err
    doc = orjson.loads((tmp_path / "r.json").read_bytes())
    assert sorted(r["rank"] for r in doc["ranks"]) == [0, 1] and "collected" not in doc["about"]
    assert (tmp_path / "t.html").stat().st_size > 1000 and (tmp_path / "r.html").stat().st_size > 1000


def test_only_an_option_error_is_a_usage_error(tmp_path, monkeypatch, capsys):
    import analyzer.api as api
    (tmp_path / "rank0.json").write_bytes(orjson.dumps({"traceEvents": []}))
    assert main([str(tmp_path), "-q", "--jobs", "1", "--job", "nope"]) == 2  # an option: usage

    def year(*a, **k):
        raise ValueError("year 33658 is out of range")
    monkeypatch.setattr(api, "load", year)
    capsys.readouterr()
    assert main([str(tmp_path), "-q", "--jobs", "1"]) == 3  # a ValueError inside the analysis is a crash
    assert "internal error (ValueError" in capsys.readouterr().err


# ---------------------------------------------------------------------------- 2. a rank with no complete step
def test_clock_residuals_without_an_instance_seen_by_two_ranks_are_none():
    import pandas as pd
    from analyzer.cross_rank.align import estimate
    obs = pd.DataFrame({"obs": [0, 1], "rank": [0, 0], "t": [10, 20]})  # rank 1 saw none of them
    al = estimate(obs, [0, 1], {0: "h", 1: "h"})
    assert al.status == "ok" and al.offsets["n_matched"].tolist() == [0, 0]
    assert al.offsets["residual_ns"].isna().all()


@pytest.mark.slow
def test_a_rank_cut_before_its_first_step_ends_keeps_html_and_timeline(tmp_path, capsys):
    d = _case("no_complete_step", tmp_path)
    code = main([str(d), "-q", "--jobs", "1", "--format", "html", "-o", str(tmp_path / "r.html"),
                 "--timeline", str(tmp_path / "t.html"), "--json", str(tmp_path / "r.json")])
    assert code in (0, 1), capsys.readouterr().err
    doc = orjson.loads((tmp_path / "r.json").read_bytes())
    al = doc["cross_rank"]["alignment"]
    assert "error" not in doc["cross_rank"] and al["status"] == "ok"
    assert [o["n_matched"] for o in al["offsets"]] == [0, 0] and al["max_residual_us"] is None
    assert [f["status"] for f in doc["inputs"]["files"]] == ["read", "salvaged"]


# ---------------------------------------------------------------------------- 3. huge groups
def test_a_16384_rank_group_reads_as_the_real_folder_in_one_pass_per_call(tmp_path, monkeypatch):
    """Asking for every member of a 16,384-rank group scans the calls once per (group, seq), not per member."""
    import analyzer.hang.size_abort as sa
    calls = []
    real = sa._signatures
    monkeypatch.setattr(sa, "_signatures", lambda *a: calls.append(a[1:]) or real(*a))
    d = hc._copy(hc.HANG, tmp_path / "big")
    for p in sorted(d.glob("nccl_trace_rank_*")):
        p.write_bytes(hc.big_group_dump(p, 16384))
    a = load(d, jobs=1)
    top = a.report["findings"][0]
    assert top["id"] == "HANG001" and top["subject"]["ranks"] == [1]  # as tests/test_hang_real_cpu.py reads it
    assert 0 < len(calls) < 20


# ---------------------------------------------------------------------------- 4. many tiny files
def test_empty_traces_are_skipped_and_the_real_ranks_kept(tmp_path):
    d = hc._copy(hc.STRAGGLER, tmp_path / "run")
    for i, body in enumerate(hc.EMPTY_TRACES):
        (d / f"rank{10 + i}.pt.trace.json").write_bytes(body)
    a = load(d, jobs=1)
    assert sorted(a.job.traces) == [0, 1, 2, 3]
    skipped = _files(a, "skipped")
    assert len(skipped) == len(hc.EMPTY_TRACES) and not _files(a, "failed")
    assert all(f["message"].startswith("nothing to analyse") for f in skipped)


def test_only_empty_traces_is_nothing_analysed_exit_2(tmp_path, capsys):
    for i in range(50):
        (tmp_path / f"rank{i}.pt.trace.json").write_bytes(hc.EMPTY_TRACES[i % len(hc.EMPTY_TRACES)])
    assert main([str(tmp_path), "-q", "--jobs", "1"]) == 2
    assert "50 of 50 file(s) hold nothing to analyse" in capsys.readouterr().err


def test_the_parser_still_reads_an_empty_trace_when_not_asked_to_refuse(tmp_path):
    p = tmp_path / "rank3.json"
    p.write_bytes(b'{"traceEvents": []}')
    assert load_trace(p).rank == 3
    from parsers.errors import EmptyInput
    with pytest.raises(EmptyInput):
        load_trace(p, refuse_empty=True)


# ---------------------------------------------------------------------------- 5. two dumps claiming one rank
def test_two_dumps_claiming_one_rank_warn_and_the_hang_reads_as_the_real_folder(tmp_path):
    for seed in (0, 1):  # the relabelled dump as a pickle, then as JSON
        d = hc.case_duplicate_dump_ranks(tmp_path / str(seed), random.Random(seed))
        a = load(d, jobs=1)
        top = a.report["findings"][0]
        assert top["id"] == "HANG001" and top["subject"]["ranks"] == [1], top["title"]
        assert not [f for f in a.report["findings"] if "crashed" in f["title"] or "never joined" in f["title"]]
        dup = [f for f in a.report["findings"] if f["id"] == "INPUT004"]
        assert len(dup) == 1
        texts = [e["text"] for e in dup[0]["evidence"]]
        assert len(texts) == 2 and all(str(d / "nccl_trace_rank_0") in t for t in texts)  # each names the kept one
        skipped = _files(a, "skipped")
        assert [f["path"] for f in skipped] == [str(d / "nccl_trace_rank_0.json")]
        assert sorted(x.rank for x in a.job.fr_dumps) == [0, 2]


def test_one_dump_per_rank_keeps_the_dump_its_file_name_agrees_with():
    from types import SimpleNamespace as NS
    from analyzer.load.dump_ranks import one_dump_per_rank
    a, b, c = NS(path="x/fr_5", rank=3, rank_source="dump"), NS(path="x/fr_3", rank=3, rank_source="dump"), \
        NS(path="x/fr_3.json", rank=3, rank_source="dump")
    kept, renumbered, skipped = one_dump_per_rank([a, b, c])
    assert kept == [a, b] and a.rank == 5 and b.rank == 3  # a's name gives a free rank: read as rank 5
    assert [x for x, _ in skipped] == [c] and "already read from x/fr_3" in skipped[0][1]
    assert renumbered[0][0] is a


# ---------------------------------------------------------------------------- 6. salvage inside a gzip stream
def test_one_flipped_bit_in_a_gzip_stream_keeps_the_events_before_it(tmp_path):
    src = hc.STRAGGLER / "rank1.pt.trace.json.gz"
    full = len(load_trace(src).activity)
    z = src.read_bytes()
    z = z[:int(len(z) * 0.78)] + bytes([z[int(len(z) * 0.78)] ^ 0x10]) + z[int(len(z) * 0.78) + 1:]
    d = hc._copy(hc.STRAGGLER, tmp_path / "run")
    (d / "rank1.pt.trace.json.gz").write_bytes(z)
    a = load(d, jobs=1)
    assert sorted(a.job.traces) == [0, 1, 2, 3]
    rec = [f for f in a.report["inputs"]["files"] if f["path"].endswith("rank1.pt.trace.json.gz")][0]
    assert rec["status"] == "salvaged" and re.search(r"kept \d+ complete events \(\d+ of \d+ bytes", rec["message"])
    kept = len(load_trace(d / "rank1.pt.trace.json.gz").activity)
    assert full // 3 < kept < full  # most of what precedes the damage, nothing after it


def test_a_damaged_scan_bisects_to_the_last_good_event(tmp_path):
    """The streaming reader's '}'-where-the-list-goes-on path: the events before the damage are kept."""
    data = gzip.decompress((hc.STRAGGLER / "rank1.pt.trace.json.gz").read_bytes())
    i = data.index(b'"name"', len(data) // 2)
    bad = data[:i] + b'"na"me"' + data[i + 6:]  # one stray quote: the scan reads the rest as inverted strings
    p = tmp_path / "rank1.pt.trace.json"
    p.write_bytes(bad)
    t = load_trace(p)
    assert t.salvage is not None and t.salvage["events_recovered"] > 0 and len(t.activity) > 100


# ---------------------------------------------------------------------------- 7. lone surrogates
def test_a_lone_surrogate_in_host_and_thread_names_costs_only_the_character(tmp_path):
    clean = load_trace(hc.STRAGGLER / "rank1.pt.trace.json.gz")
    d = hc._copy(hc.STRAGGLER, tmp_path / "run")
    p = d / "rank1.pt.trace.json.gz"
    data = gzip.decompress(p.read_bytes())
    data = data.replace(b'"host_name": "', b'"host_name": "\\ud800', 1).replace(b'"name": "thread ',
                                                                                b'"name": "\\udc00thread ', 1)
    p.write_bytes(gzip.compress(data))
    t = load_trace(p)
    assert t.salvage is None and len(t.activity) == len(clean.activity) and t.meta["host"] == "\ufffdvm"
    assert any("2 lone UTF-16 surrogate escapes" in w for w in t.warnings)
    a = load(d, jobs=1)
    assert sorted(a.job.traces) == [0, 1, 2, 3] and not _files(a, "failed") and not _files(a, "salvaged")


def test_surrogate_repair_leaves_pairs_and_escaped_backslashes():
    from parsers.trace_bytes import replace_lone_surrogates as fix
    assert fix(b'"\\ud83d\\ude00"') == (b'"\\ud83d\\ude00"', 0)
    assert fix(b'"\\\\ud800"') == (b'"\\\\ud800"', 0)  # an escaped backslash, then text
    assert fix(b'"\\\\\\ud800"') == (b'"\\\\\\ufffd"', 1)
    assert fix(b'"\\ud800\\ud83d\\ude00\\udc00"') == (b'"\\ufffd\\ud83d\\ude00\\ufffd"', 2)


# ---------------------------------------------------------------------------- 8. library warnings
@pytest.mark.slow
def test_no_library_warning_when_the_stragglers_steps_share_nothing(tmp_path):
    d = _case("all_nan_slice", tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a RuntimeWarning (All-NaN slice) would raise here
        a = load(d, jobs=1)
        a.render("html")
    assert sorted(a.job.traces) == [0, 1, 2, 3]


def test_the_excess_of_a_rank_with_no_step_in_common_is_nan_without_warning():
    import math
    import pandas as pd
    from analyzer.cross_rank.stragglers import _excess
    df = pd.DataFrame({"rank": [0, 1, 2], "step": [1, 1, 7], "compute_ns": [5.0, 6.0, 9.0]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert math.isnan(_excess(df, "compute_ns", 2))
        assert _excess(df, "compute_ns", 1) == 1.0


# ---------------------------------------------------------------------------- the campaign over fresh real inputs
def test_the_fresh_bed_reads_as_its_planted_fault():
    a = load(hc.mu.FIXTURES / "real-cpu-hostile4", jobs=1)
    top = a.report["findings"][0]
    assert top["id"] == "HANG002" and top["subject"]["ranks"] == [2]  # rank 2 skipped the last all-reduce
    assert sorted(a.job.traces) == [0, 1, 2] and sorted(d.rank for d in a.job.fr_dumps) == [0, 1, 2]
    dup = [f for f in a.report["findings"] if f["id"] == "INPUT004"]  # fr_json/ holds the same dumps as JSON
    assert len(dup) == 1 and len(dup[0]["evidence"]) == 3


@pytest.mark.slow
@pytest.mark.parametrize("i", range(6))
def test_campaign_cases_over_the_fresh_bed(i, tmp_path):
    from tests.fuzz import campaign34
    ok, what, _ = campaign34.run_case(tmp_path, 0, i)
    assert ok, what
