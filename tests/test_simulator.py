"""The simulator's truth is right by construction: bubbles, overlap, collective ends, hangs, determinism."""
from __future__ import annotations

import gzip
import json
import pickle
import pickletools
from fractions import Fraction
from pathlib import Path

import pytest

from simulator.cli import run_scenario
from simulator.config import FAULT_KINDS, load_scenario

SIM = Path(__file__).resolve().parent.parent / "fixtures" / "sim"
SCENARIOS = sorted(p.name for p in SIM.iterdir() if (p / "scenario.json").is_file())


def exp(name: str) -> dict:
    return json.loads((SIM / name / "expected.json").read_text())


def test_library_covers_every_fault_kind_and_stays_small():
    kinds = {f["kind"] for n in SCENARIOS for f in exp(n)["faults"]}
    assert kinds == set(FAULT_KINDS)
    total = sum(p.stat().st_size for p in SIM.rglob("*") if p.is_file())
    assert total < 10 * 1024 * 1024
    for n in SCENARIOS:
        assert 8 <= exp(n)["world_size"] <= 64


@pytest.mark.parametrize("name", ["pp_uniform_1f1b", "pp_uniform_gpipe"])
def test_uniform_pipeline_bubble_is_exactly_theory(name):
    e = exp(name)
    cfg = load_scenario(SIM / name / "scenario.json")
    p, m = cfg["parallel"]["pp"], cfg["schedule"]["microbatches"]
    theory = Fraction(p - 1, m + p - 1)
    rows = e["pipeline"]
    assert rows and {r["p"] for r in rows} == {p} and {r["m"] for r in rows} == {m}
    for r in rows:
        assert r["theoretical_bubble"] == pytest.approx(float(theory), abs=1e-12)
        # every stage idles exactly (p-1)/(m+p-1) of the whole pipeline's window ...
        for v in r["bubble_rate_pipeline_window_by_rank"].values():
            assert v == pytest.approx(float(theory), abs=1e-12)
        # ... and stage 0's own first-to-last-compute window is the whole pipeline window
        if r["stage"] == 0:
            assert r["bubble_rate"] == pytest.approx(float(theory), abs=1e-12)
        if r["stage"] == p - 1:
            assert r["bubble_rate"] == 0.0  # the last stage runs its F and B back to back
    assert {r["schedule"] for r in rows} == {"1f1b" if "1f1b" in name else "gpipe"}


def test_fully_overlapped_ddp_has_full_coverage():
    rows = exp("ddp_fully_overlapped")["rank_step_metrics"]
    assert len(rows) == 16
    assert all(r["overlap_coverage"] == 1.0 and r["exposed_comm_ns"] == 0 for r in rows)
    assert exp("no_overlap")["rank_step_metrics"][0]["overlap_coverage"] == 0.0


@pytest.mark.parametrize("name", SCENARIOS)
def test_metric_identities(name):
    for r in exp(name)["rank_step_metrics"]:
        st = r["step_time_ns"]
        assert st == r["end_ns"] - r["start_ns"] > 0
        assert r["exposed_comm_ns"] <= r["comm_ns"] <= st and r["compute_ns"] <= st
        assert 0 <= r["idle_ns"] <= st
        # idle = step − |compute ∪ comm ∪ memcpy| ≥ step − (compute + exposed comm + memcpy)
        assert r["idle_ns"] >= st - r["compute_ns"] - r["exposed_comm_ns"] - r["memcpy_ns"]


@pytest.mark.parametrize("name", SCENARIOS)
def test_collective_ends_identical_on_every_member_in_true_time(name):
    e = exp(name)
    off = {int(k): v for k, v in e["clock_offsets_ns"].items()}
    for c in e["collectives"] + e["p2p"]:
        if not c["completed"]:
            continue
        ends = {int(r) + 0: t + off[int(r)] for r, t in c["end_ns"].items()}
        assert len(set(ends.values())) == 1, c
        assert min(c["wait_ns"].values()) == 0
        assert set(ends) == set(c["ranks"])


def _kernels(path: Path) -> tuple[dict, list[dict]]:
    d = json.loads(gzip.decompress(path.read_bytes()))
    return d, [ev for ev in d["traceEvents"] if ev.get("cat") == "kernel" and "Process Group Name" in ev["args"]]


@pytest.mark.parametrize("name", ["ddp_clean", "tp_pp_dp_1f1b_clean", "fsdp_clean", "moe_clean"])
def test_trace_kernels_end_together_after_removing_offsets(name):
    e = exp(name)
    ends: dict = {}
    for r in range(e["world_size"]):
        d, ks = _kernels(SIM / name / f"rank{r}.pt.trace.json.gz")
        base = int(d["baseTimeNanoseconds"])
        seq: dict = {}
        for k in sorted(ks, key=lambda k: k["ts"]):
            a = k["args"]
            if a["Collective name"] in ("send", "recv"):
                continue
            pg = a["Process Group Name"]
            seq[pg] = seq.get(pg, 0) + 1
            end = base + round((k["ts"] + k["dur"]) * 1000) + e["clock_offsets_ns"][str(r)]
            ends.setdefault((pg, seq[pg]), set()).add(end)
    assert ends and all(len(v) == 1 for v in ends.values())
    assert len(ends) == len(e["collectives"])


HANGS = [n for n in SCENARIOS if n.startswith("hang_")]


@pytest.mark.slow
@pytest.mark.parametrize("name", HANGS)
def test_hang_leaves_every_other_member_waiting_at_the_same_seq(name):
    e = exp(name)
    h = e["hang"]
    assert h is not None and e["rank_step_metrics"] == [] and e["files"]["traces"] == []
    culprits = set(h["culprit_ranks"])
    fault = e["faults"][0]
    assert culprits == set(fault["ranks"]) and h["process_group"] == fault["process_group"]
    members = next(g["ranks"] for g in e["process_groups"] if g["name"] == h["process_group"])
    waiting = set(members) - culprits
    assert set(h["waiting_ranks"]) == waiting
    wd = e["watchdog"]
    for r in waiting:
        assert wd[str(r)]["process_group"] == h["process_group"] and wd[str(r)]["seq"] == h["seq"]
        assert wd[str(r)]["last_completed"] == h["seq"] - 1
    for f in e["files"]["flight_recorder"]:
        if f.endswith(".json"):
            d = json.loads((SIM / name / f).read_text())
        else:
            d = _plain_pickle(SIM / name / f)
        r = int(f.split("_")[-1].split(".")[0])
        if r in waiting:  # pg_status is keyed by the rank-local pg_id the entries carry, as PyTorch keys it
            pid = next(x["pg_id"] for x in d["entries"] if x["process_group"][0] == h["process_group"])
            st = d["pg_status"][str(pid)]
            assert st["last_started_collective"] == h["seq"]
            assert st["last_completed_collective"] == h["seq"] - 1
            ent = [x for x in d["entries"] if x["process_group"][0] == h["process_group"]
                   and x["collective_seq_id"] == h["seq"] and not x["is_p2p"]]
            assert [x["state"] for x in ent] == ["started"]
    if fault["kind"] == "crashed_rank":
        assert f"nccl_trace_rank_{fault['ranks'][0]}.json" not in e["files"]["flight_recorder"]
        assert "NCCL WARN" in (SIM / name / f"nccl_rank{fault['ranks'][0]}.log").read_text().splitlines()[-2]
    if fault["kind"] in ("crashed_rank", "stalled_rank"):
        assert h["missing_ranks"] == fault["ranks"]
    else:
        assert h["mismatched_ranks"] == fault["ranks"] and h["missing_ranks"] == []


SAFE_OPS = {"PROTO", "EMPTY_DICT", "EMPTY_LIST", "MARK", "BINUNICODE", "SHORT_BINUNICODE", "BININT", "BININT1",
            "BININT2", "LONG1", "SETITEMS", "SETITEM", "APPENDS", "APPEND", "BINPUT", "LONG_BINPUT", "BINGET",
            "LONG_BINGET", "NEWTRUE", "NEWFALSE", "NONE", "STOP", "BINFLOAT", "MEMOIZE", "FRAME", "TUPLE", "TUPLE1",
            "TUPLE2", "TUPLE3", "EMPTY_TUPLE", "BINSTRING", "SHORT_BINSTRING"}


def _plain_pickle(path: Path) -> dict:
    data = path.read_bytes()
    ops = {op.name for op, _, _ in pickletools.genops(data)}
    assert ops <= SAFE_OPS, ops - SAFE_OPS  # plain containers and scalars only: nothing to import or call
    return pickle.loads(data)  # our own generated fixture, checked above to hold no globals


def test_fr_pickle_and_json_hold_the_same_dump():
    d = SIM / "hang_mismatched_dtype"
    for r in range(8):
        assert _plain_pickle(d / f"nccl_trace_rank_{r}") == json.loads((d / f"nccl_trace_rank_{r}.json").read_text())
    j = json.loads((d / "nccl_trace_rank_0.json").read_text())
    assert j["version"] == "2.5" and j["pg_config"]["0"] == {"name": "0", "desc": "default_pg",
                                                               "ranks": "[0, 1, 2, 3, 4, 5, 6, 7]"}
    keys = {"frames", "record_id", "pg_id", "process_group", "collective_seq_id", "p2p_seq_id", "op_id",
            "profiling_name", "time_created_ns", "input_sizes", "input_dtypes", "output_sizes", "output_dtypes",
            "state", "time_discovered_started_ns", "time_discovered_completed_ns", "retired", "timeout_ms", "is_p2p"}
    assert all(set(x) == keys for x in j["entries"])
    assert {x["profiling_name"] for x in j["entries"]} == {"nccl:all_reduce"}


@pytest.mark.parametrize("name", ["ddp_clean", "hang_skipped_collective", "tp_pp_dp_1f1b_straggler",
                                  "ddp_clean_old_format", "hang_mismatched_dtype"])
@pytest.mark.slow
def test_deterministic_same_seed_same_bytes(name, tmp_path):
    run_scenario(SIM / name / "scenario.json", tmp_path / "a")
    run_scenario(SIM / name / "scenario.json", tmp_path / "b")
    committed = sorted(p.name for p in (SIM / name).iterdir() if p.name != "scenario.json")
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == committed
    for f in committed:
        a = (tmp_path / "a" / f).read_bytes()
        assert a == (tmp_path / "b" / f).read_bytes() == (SIM / name / f).read_bytes(), f


def test_other_seed_changes_timing(tmp_path):
    cfg = json.loads((SIM / "ddp_clean" / "scenario.json").read_text())
    cfg["seed"] = 99
    (tmp_path / "s.json").write_text(json.dumps(cfg))
    e = run_scenario(tmp_path / "s.json", tmp_path / "o")
    assert e["rank_step_metrics"] != exp("ddp_clean")["rank_step_metrics"]


def test_old_format_has_int_us_and_no_comm_args():
    d = json.loads(gzip.decompress((SIM / "ddp_clean_old_format" / "rank0.pt.trace.json.gz").read_bytes()))
    assert "pg_config" not in d["distributedInfo"] and "baseTimeNanoseconds" not in d
    ks = [e for e in d["traceEvents"] if e.get("cat") == "kernel"]
    assert all(isinstance(e["ts"], int) and isinstance(e["dur"], int) for e in ks)
    nccl = [e for e in ks if e["name"].startswith("ncclKernel_")]
    assert nccl and all("Collective name" not in e["args"] for e in nccl)
    assert nccl[0]["name"].endswith("(ncclWorkElem)")


def test_modern_trace_shape():
    d = json.loads(gzip.decompress((SIM / "tp_pp_dp_1f1b_clean" / "rank5.pt.trace.json.gz").read_bytes()))
    assert isinstance(d["baseTimeNanoseconds"], str) and d["host_name"] == "trn-node-01"
    di = d["distributedInfo"]
    assert di["rank"] == 5 and di["world_size"] == 16 and di["pg_count"] == len(di["pg_config"])
    ev = d["traceEvents"]
    kern = {e["args"]["correlation"]: e for e in ev if e.get("cat") == "kernel"}
    launches = {e["args"]["correlation"] for e in ev if e.get("cat") == "cuda_runtime" and "Launch" in e["name"]}
    assert set(kern) <= launches
    flows = {(e["ph"], e["id"]) for e in ev if e.get("cat") == "ac2g"}
    assert all(("s", c) in flows and ("f", c) in flows for c in kern)
    names = {e["args"]["Collective name"] for e in kern.values() if "Collective name" in e["args"]}
    assert names == {"allreduce", "send", "recv"}
    sr = [e for e in kern.values() if e["args"].get("Collective name") in ("send", "recv")]
    assert all(e["name"] == "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)" for e in sr)
    steps = [e for e in ev if e.get("name", "").startswith("ProfilerStep#")]
    assert [s["name"] for s in steps] == ["ProfilerStep#5", "ProfilerStep#6"]
    assert any(e.get("name") == "record_param_comms" for e in ev)
    assert all(e["tid"] == 7 for e in kern.values() if "Collective name" not in e["args"])


def test_bad_scenario_is_named(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text(json.dumps({"hosts": 1, "gpus_per_host": 8, "parallel": {"tp": 3}}))
    with pytest.raises(ValueError, match="bad.json"):
        load_scenario(p)
