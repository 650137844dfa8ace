"""The merged timeline (--timeline): Chrome trace-event structure, aligned clock, flows that join one collective
(process group, seq) across its ranks, waits, findings on the ranks they name, and the size bound."""
from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

import pytest

import analyzer
from analyzer.cli import main
from analyzer.render.timeline import build_timeline

ROOT = Path(__file__).resolve().parents[1]
PHASES = {"X", "M", "s", "f", "i"}
META = {"process_name", "process_sort_index", "thread_name", "thread_sort_index"}


@pytest.fixture(scope="module")
def straggler():
    return analyzer.load(ROOT / "fixtures/sim/tp_pp_dp_1f1b_straggler")


@pytest.fixture(scope="module")
def doc(straggler):
    return build_timeline(straggler.report, straggler.timeline_input())


def _slices_by_track(events):
    by = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            by[(e["pid"], e["tid"])].append(e)
    return by


def _enclosing(by, e):
    hits = [x for x in by[(e["pid"], e["tid"])] if x["cat"] == "collective" and x["ts"] <= e["ts"] <= x["ts"] + x["dur"]]
    return hits


@pytest.mark.slow
def test_every_event_follows_the_chrome_trace_format(doc):
    assert set(doc) == {"traceEvents", "displayTimeUnit", "otherData"}
    assert doc["displayTimeUnit"] in ("ms", "ns")
    for e in doc["traceEvents"]:
        assert e["ph"] in PHASES, e
        assert isinstance(e["pid"], int)
        if e["ph"] == "M":
            assert e["name"] in META and isinstance(e["args"], dict) and e["args"]
            continue
        assert isinstance(e["tid"], int) and isinstance(e["ts"], float) and isinstance(e["name"], str)
        if e["ph"] == "X":
            assert e["dur"] >= 0 and e["ts"] >= 0
        if e["ph"] in ("s", "f"):
            assert isinstance(e["id"], int) and e["cat"] in ("collective", "launch")
            assert e["ph"] == "s" or e["bp"] == "e"  # an end binds to the slice it sits in, not the next one
        if e["ph"] == "i":
            assert e["s"] in ("p", "g", "t")
    json.dumps(doc)  # serialisable as is


@pytest.mark.slow
def test_every_rank_is_a_named_process_with_streams_and_its_cpu_thread(doc, straggler):
    ev = doc["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    assert sorted(procs) == list(range(16)) and procs[0].startswith("rank 0 (trn-node-")
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    assert any(n.startswith("GPU stream") for (p, _), n in threads.items() if p == 9)
    assert threads[(9, 1)].startswith("CPU thread") and "launches" in threads[(9, 1)]
    steps = [e for e in ev if e["ph"] == "X" and e["cat"] == "step" and e["pid"] == 9]
    assert {e["name"] for e in steps} == {"ProfilerStep#5", "ProfilerStep#6"}
    kernels = [e for e in ev if e["ph"] == "X" and e["cat"] in ("compute", "comm", "memcpy", "memset", "sync")
               and e["pid"] == 9]
    assert len(kernels) == len(straggler.job.traces[9].activity)


def test_collectives_sit_on_the_aligned_clock(doc, straggler):
    origin = doc["otherData"]["time_origin_ns"]
    m = straggler.collectives.set_index(["rank", "instance"])
    coll = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "collective"]
    assert len(coll) == len(straggler.collectives)
    for e in coll:
        row = m.loc[(e["pid"], e["args"]["instance"])]
        assert (row["process_group"], row["seq"]) == (e["args"]["process_group"], e["args"]["seq"])
        assert e["ts"] == pytest.approx((row["start_ns"] - origin) / 1000, abs=0.0006)
    # aligned means offsets applied: the traces' own start times differ from the drawn ones by the offset
    offs = {o["rank"]: o["offset_us"] for o in straggler.report["cross_rank"]["alignment"]["offsets"]}
    assert any(abs(v) > 1 for v in offs.values())


def test_each_flow_joins_the_same_collective_and_all_its_ranks(doc, straggler):
    ev = doc["traceEvents"]
    by = _slices_by_track(ev)
    ends = defaultdict(dict)
    for e in ev:
        if e["ph"] in ("s", "f") and e["cat"] == "collective":
            assert e["id"] not in ends or e["ph"] not in ends[e["id"]], "one start and one finish per flow"
            ends[e["id"]][e["ph"]] = e
    assert ends and all(set(v) == {"s", "f"} for v in ends.values())
    linked = defaultdict(set)
    for fid, pair in ends.items():
        keys = []
        for e in pair.values():
            hit = _enclosing(by, e)
            assert len(hit) == 1, (fid, e)
            keys.append((hit[0]["args"]["process_group"], hit[0]["args"]["seq"], hit[0]["args"]["instance"]))
            linked[keys[-1]].add(e["pid"])
        assert keys[0] == keys[1], "a flow joins one collective instance"
        assert pair["s"]["ts"] <= pair["f"]["ts"]  # arrival order
    members = straggler.collectives.groupby(["process_group", "seq", "instance"])["rank"].apply(set)
    multi = {k: v for k, v in members.items() if len(v) > 1}
    assert {k: linked[k] for k in multi} == multi  # every member rank of every instance is on its chain
    assert doc["otherData"]["flows"] == sum(len(v) - 1 for v in multi.values())


def test_waits_are_slices_from_arrival_to_the_last_arrival(doc, straggler):
    waits = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "wait"]
    c = straggler.collectives
    assert len(waits) == int((c["wait_us"].round(3) > 0.0005).sum())
    w = max(waits, key=lambda e: e["dur"])
    assert w["dur"] == pytest.approx(c["wait_us"].max(), abs=0.002)
    assert "last rank" in w["name"]


def test_findings_are_instants_on_the_ranks_they_name(doc, straggler):
    inst = [e for e in doc["traceEvents"] if e["ph"] == "i" and e["cat"] == "finding"]
    load = [e for e in inst if e["args"]["id"] == "LOAD001"]
    assert [e["pid"] for e in load] == [9] and load[0]["s"] == "p"
    assert load[0]["args"]["explains"] and load[0]["name"].startswith("WARNING LOAD001")
    step5 = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "step" and e["pid"] == 9]
    assert load[0]["ts"] == min(e["ts"] for e in step5)  # no step or collective named: the rank's first step


def test_size_is_bounded_and_the_file_says_what_was_left_out(straggler):
    full = build_timeline(straggler.report, straggler.timeline_input())
    assert full["otherData"]["thinned"] == "" and full["otherData"]["activity_events_left_out"] == 0
    n = len(full["traceEvents"])
    # room for everything but the host side and a hundred kernels: the host side goes first, then short kernels
    limit = n - full["otherData"]["host_events"] - 2 * full["otherData"]["launch_flows"] - 100
    small = build_timeline(straggler.report, straggler.timeline_input(), max_events=limit)
    o = small["otherData"]
    assert len(small["traceEvents"]) <= limit and o["host_events"] == 0 and o["launch_flows"] == 0
    assert o["activity_events_left_out"] > 0 and o["shortest_activity_kept_us"] > 0 and "left out" in o["thinned"]
    kept = [e["dur"] for e in small["traceEvents"] if e["ph"] == "X" and e["cat"] in ("compute", "comm", "memcpy")]
    assert min(kept) >= o["shortest_activity_kept_us"] - 0.001
    assert any(e["ph"] == "i" and e["name"].startswith("timeline thinned") for e in small["traceEvents"])
    tiny = build_timeline(straggler.report, straggler.timeline_input(), max_events=600)
    t = tiny["otherData"]
    assert t["ranks_left_out"] and 9 in {e["pid"] for e in tiny["traceEvents"]}  # the finding's rank is kept
    assert len(tiny["traceEvents"]) <= 600


@pytest.mark.slow
def test_cli_writes_a_gzipped_timeline(tmp_path, capsys):
    out = tmp_path / "merged.json.gz"
    code = main([str(ROOT / "fixtures/corpus/param-dlrm_kineto"), "-q", "--jobs", "1", "--timeline", str(out),
                 "-o", str(tmp_path / "r.txt")])
    assert code in (0, 1)
    doc = json.loads(gzip.decompress(out.read_bytes()))
    assert doc["otherData"]["ranks_drawn"] == 8 and doc["otherData"]["clock"].startswith("aligned")
    assert {e["pid"] for e in doc["traceEvents"] if e["ph"] == "M"} == set(range(8))


@pytest.mark.slow
def test_timeline_to_stdout_is_the_only_document_there(capsys):
    code = main([str(ROOT / "fixtures/sim/ddp_clean"), "-q", "--jobs", "1", "--timeline", "-"])
    out = capsys.readouterr().out
    assert code in (0, 1)
    doc = json.loads(out)
    assert doc["otherData"]["ranks_drawn"] == 8
    assert main([str(ROOT / "fixtures/sim/ddp_clean"), "-q", "--timeline", "-", "--json", "-"]) == 2
    assert "would both go to stdout" in capsys.readouterr().err


# ---- the file as Perfetto reads it: flows keyed by (cat, name, id), ends bound to enclosing slices, slices nested,
# one named process per rank, a hard event limit (tests/trace_event_rules.py)

from tests.trace_event_rules import violations  # noqa: E402


@pytest.fixture(scope="module")
def dlrm():
    """A real 8-GPU trace set (PARAM DLRM, fixtures/corpus): CPU ops, runtime calls and kernels with args."""
    return analyzer.load(ROOT / "fixtures/corpus/param-dlrm_kineto")


def test_the_16_rank_timeline_joins_in_perfetto(doc, straggler):
    assert violations(doc) == []
    procs = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
    assert {p: n.split(" (")[0] for p, n in procs.items()} == {r: f"rank {r}" for r in range(16)}
    p2p = [e for e in doc["traceEvents"] if e["ph"] in ("s", "f") and e["name"].startswith("send/recv")]
    assert p2p and len(p2p) % 2 == 0  # send/recv flows carry one name at both ends
    assert doc["otherData"]["clock"].startswith("aligned")


@pytest.mark.slow  # loads an 8-rank real trace set (or a real run) and re-reads every rank
def test_a_real_trace_keeps_cpu_ops_runtime_calls_kernel_args_and_launch_arrows(dlrm):
    d = build_timeline(dlrm.report, dlrm.timeline_input())
    assert violations(d) == []
    ev = d["traceEvents"]
    from parsers.kineto_host import host_events
    want = sum(len(host_events(t.path)[0]) for t in dlrm.job.traces.values())
    host = [e for e in ev if e["ph"] == "X" and e["cat"] in ("cpu_op", "user_annotation", "runtime")]
    assert len(host) == want == d["otherData"]["host_events"] and {e["cat"] for e in host} >= {"cpu_op", "runtime"}
    kernels = [e for e in ev if e["ph"] == "X" and e["cat"] in ("compute", "comm") and e.get("args")]
    assert kernels and all("correlation" in e["args"] for e in kernels)
    assert any("grid" in e["args"] for e in kernels)
    launch = [e for e in ev if e["ph"] in ("s", "f") and e["cat"] == "launch"]
    assert len(launch) == 2 * d["otherData"]["launch_flows"] > 0
    streams = {(e["pid"], e["tid"]) for e in ev if e["ph"] == "M" and e["name"] == "thread_name"
               and e["args"]["name"].startswith("GPU stream")}
    assert all((e["pid"], e["tid"] % 1_000_000) in streams for e in launch if e["ph"] == "f")


@pytest.mark.slow  # loads an 8-rank real trace set (or a real run) and re-reads every rank
@pytest.mark.parametrize("limit", [1, 7, 600, 5000])
def test_max_events_is_a_hard_limit_and_the_file_still_joins(dlrm, limit):
    d = build_timeline(dlrm.report, dlrm.timeline_input(), max_events=limit)
    assert len(d["traceEvents"]) <= limit and d["otherData"]["events"] == len(d["traceEvents"])
    assert violations(d) == []
    assert d["otherData"]["thinned"]


def test_help_states_the_default_event_limit(capsys):
    from analyzer.render.timeline import DEFAULT_MAX_EVENTS
    with pytest.raises(SystemExit):
        main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert f"default {DEFAULT_MAX_EVENTS:,}" in out


@pytest.mark.slow  # loads an 8-rank real trace set (or a real run) and re-reads every rank
def test_cli_timeline_of_a_real_run_joins(tmp_path):
    out = tmp_path / "t.json"
    assert main([str(ROOT / "fixtures/real-cpu/ddp-clean"), "-q", "--jobs", "1", "--timeline", str(out),
                 "--timeline-max-events", "2000", "-o", str(tmp_path / "r.txt")]) in (0, 1)
    doc = json.loads(out.read_text())
    assert len(doc["traceEvents"]) <= 2000 and violations(doc) == []


def test_post_mortem_timeline_draws_every_ranks_flight_recorder_entries(tmp_path):
    """A hang folder (dumps, no traces): each rank's entries as slices on its own track, where it stopped visible
    (rank 2 of hang_stalled_rank never enqueued allreduce #5; the others' #5 never completed), and the finding on
    the culprit's last entry; the file follows the pairing and nesting rules of the trace timeline."""
    from tests.trace_event_rules import violations
    out = tmp_path / "pm.json"
    assert main([str(ROOT / "fixtures/sim/hang_stalled_rank"), "--timeline", str(out), "-q"]) == 1
    doc = json.loads(out.read_text())
    assert violations(doc) == []
    ev = doc["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    assert procs == {r: f"rank {r} (Flight Recorder)" for r in range(8)}
    last = {}
    for e in ev:
        if e["ph"] == "X" and e["cat"] == "flight_recorder":
            last[e["pid"]] = max(last.get(e["pid"], 0), e["args"]["seq"])
    assert last[2] == 4 and all(last[r] >= 5 for r in range(8) if r != 2)
    open5 = [e for e in ev if e["ph"] == "X" and e["args"].get("seq") == 5]
    assert open5 and all(e["name"].endswith("(not completed)") for e in open5)
    (point,) = [e for e in ev if e.get("cat") == "finding"]
    r2 = [e for e in ev if e["ph"] == "X" and e["pid"] == 2]
    assert point["pid"] == 2 and point["ts"] == max(e["ts"] for e in r2)
    assert doc["otherData"]["flight_recorder_entries"] == sum(1 for e in ev if e["ph"] == "X")


def test_post_mortem_timeline_keeps_the_latest_entries_under_the_limit(tmp_path):
    out = tmp_path / "pm.json"
    main([str(ROOT / "fixtures/sim/hang_stalled_rank"), "--timeline", str(out), "--timeline-max-events", "60", "-q"])
    doc = json.loads(out.read_text())
    assert len(doc["traceEvents"]) <= 60 and doc["otherData"]["flight_recorder_entries_left_out"] > 0
    assert "left out" in doc["otherData"]["thinned"]


def _strictly_inside(by_track: dict, e: dict) -> bool:
    """Some slice on the flow start's track holds its time strictly inside (a launch), or from its begin on (a
    collective whose next member arrived at the same time): never on its end, where Perfetto may bind none."""
    lo_ok = (lambda x: x["ts"] <= e["ts"]) if e["cat"] == "collective" else (lambda x: x["ts"] < e["ts"])
    return any(lo_ok(x) and e["ts"] < x["ts"] + x["dur"] for x in by_track[(e["pid"], e["tid"])])


def test_every_flow_starts_strictly_inside_its_slice(tmp_path):
    """Perfetto binds a flow start to the slice enclosing its time: an arrow leaving a launch call exactly at the
    call's end may bind to none. The 16-rank simulated job's launch and collective arrows all start inside."""
    out = tmp_path / "t.json"
    assert main([str(ROOT / "fixtures/sim/tp_pp_dp_1f1b_straggler"), "-q", "--jobs", "1", "--timeline", str(out),
                 "-o", str(tmp_path / "r.txt")]) in (0, 1)
    d = json.loads(out.read_text())
    ev = d["traceEvents"]
    assert len({e["pid"] for e in ev if e["ph"] == "X"}) == 16
    by = defaultdict(list)
    for e in ev:
        if e["ph"] == "X" and e.get("dur", 0) > 0:
            by[(e["pid"], e["tid"])].append(e)
    starts = [e for e in ev if e["ph"] == "s"]
    launches = [e for e in starts if e["cat"] == "launch"]
    assert len(launches) == d["otherData"]["launch_flows"] > 1000
    outside = [e for e in starts if not _strictly_inside(by, e)]
    assert outside == [], f"{len(outside)} of {len(starts)} flow starts on a slice edge, e.g. {outside[:2]}"
