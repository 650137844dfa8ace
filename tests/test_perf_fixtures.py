"""Integrity of the real-CPU performance test bed (fixtures/real-cpu-perf): every run has its facts.json with the
ground truth, its rank files exist and parse (except the intentionally cut ones, which are cut exactly where the
facts say), and the derived runs differ from their source exactly as documented. Stdlib + pytest only: no torch,
no project code."""
from __future__ import annotations

import gzip
import json
import re
import zlib
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # loads real or 64+ rank folders: outside the everyday loop

BED = Path(__file__).resolve().parent.parent / "fixtures" / "real-cpu-perf"
RUNS = sorted(p.parent.name for p in BED.glob("*/facts.json"))
EXPECTED = {
    "pp4-m8-gpipe-medium", "pp4-m8-1f1b-large", "pp2-m4-1f1b-small", "pp2-m16-gpipe-medium2", "pp4-m16-1f1b-small",
    "pp2-m8-interleaved-medium", "pp4-m8-interleaved-large", "pp2-m8-loopedbfs-small", "pp2-m8-1f1b-cpu-medium",
    "ddp4-clean-small", "ddp4-clean-medium", "ddp4-clean-cpu-small", "ddp8-clean-small",
    "ddp4-host-5", "ddp4-host-20", "ddp4-host-100", "ddp4-compute-5", "ddp4-compute-20", "ddp4-compute-100",
    "ddp8-host-20", "fsdp4-clean-medium", "ddp8-drop-allreduce", "cut-ddp4-last-step", "cut-ddp4-early-step",
    "cut-ddp4-gzip", "cut-pp4-last-step", "gpuless-ddp4",
}
COMMON_KEYS = {"run", "description", "world_size", "mode", "backend", "torch_version", "model", "batch_size",
               "steps_profiled", "profiler_schedule", "held_out", "command", "files", "measured_per_rank",
               "median_step_ms"}
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver", "gpu_user_annotation"}


def _facts(run: str) -> dict:
    return json.loads((BED / run / "facts.json").read_text())


def _doc(run: str, rank: int) -> dict:
    return json.loads(gzip.decompress((BED / run / f"rank{rank}.pt.trace.json.gz").read_bytes()))


def _cut_rank(f: dict) -> int | None:
    return f["cut"]["rank"] if "cut" in f else None


def _x(doc: dict, prefix: str, tid_is_train: bool | None = None) -> list[dict]:
    ev = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    train = next(e["tid"] for e in ev if e["name"].startswith("ProfilerStep#"))
    out = [e for e in ev if e["name"].startswith(prefix)]
    if tid_is_train is not None:
        out = [e for e in out if (e["tid"] == train) == tid_is_train]
    return sorted(out, key=lambda e: e["ts"])


def test_every_expected_run_is_present():
    assert set(RUNS) == EXPECTED


@pytest.mark.parametrize("run", RUNS)
def test_facts_have_the_ground_truth_keys(run):
    f = _facts(run)
    assert COMMON_KEYS <= set(f), COMMON_KEYS - set(f)
    assert f["run"] == run and f["backend"] == "gloo" and f["mode"] in ("ddp", "fsdp", "pp")
    assert f["model"]["params"] > 0 and f["model"]["name"].split("-")[0] in ("small", "medium", "large")
    assert f["files"] == [f"rank{r}.pt.trace.json.gz" for r in range(f["world_size"])]
    assert sorted(p.name for p in (BED / run).glob("rank*")) == f["files"]
    if f["mode"] == "pp":
        p = f["pipeline"]
        assert {"p", "m", "v", "schedule", "theoretical_bubble", "theoretical_bubble_formula",
                "measured_bubble"} <= set(p)
        assert p["p"] == f["world_size"]
        per_rank = p["measured_bubble"]["step_window"]
        assert sorted(per_rank) == [str(r) for r in range(f["world_size"])]
        assert all(len(v) == f["steps_profiled"] for v in per_rank.values())
    else:
        s = f["straggler"]
        assert s["kind"] in ("none", "host", "compute")
        assert (s["straggler_rank"] is None) == (s["kind"] == "none")


@pytest.mark.parametrize("run", RUNS)
def test_rank_files_parse_except_the_cut_one(run):
    f = _facts(run)
    for r in range(f["world_size"]):
        if r == _cut_rank(f):
            continue
        doc = _doc(run, r)
        assert doc["distributedInfo"]["rank"] == r
        assert doc["distributedInfo"]["world_size"] == f["world_size"]
        assert doc["traceName"] == f"rank{r}.pt.trace.json"  # no absolute path of the machine that made it
        steps = _x(doc, "ProfilerStep#")
        assert len(steps) == f["steps_profiled"]
        if "derived_from" not in f:  # the numbers in facts were read back from these very files
            assert [round(e["dur"] / 1e3, 3) for e in steps] == f["measured_per_rank"][str(r)]["step_ms"]


def test_pipeline_theory_and_measurement_agree_with_facts():
    for run in RUNS:
        f = _facts(run)
        if f["mode"] != "pp" or "derived_from" in f:
            continue
        p = f["pipeline"]
        pp, m, v = p["p"], p["m"], p["v"]
        expect = (pp - 1) / (m + pp - 1) if p["schedule"] in ("gpipe", "1f1b") else (pp - 1) / (v * m + pp - 1)
        assert p["theoretical_bubble"] == pytest.approx(expect, abs=1e-4), run
        # the schedule order, simulated with F=1, B=2 and free comm, reproduces the closed formula
        assert p["simulated_bubble_of_schedule_order"]["mean"] == pytest.approx(expect, abs=1e-3), run
        if f.get("emulated_accelerator_gflops"):
            assert p["compute_order_matches_simulated_order"] is True, run
            # a clean schedule measured over each rank's step (or stage 0's window) lands within 5 points of theory
            assert abs(p["measured_bubble"]["step_window_median"] - expect) <= 0.05, run
            assert abs(p["measured_bubble"]["stage0_window_median"] - expect) <= 0.05, run
        # every rank sends and receives once per micro-batch per stage boundary it touches
        for r, c in p["p2p_per_rank"].items():
            assert c["sends_per_step"] == c["recvs_per_step"], run


def test_stragglers_are_calibrated_on_their_clean_run():
    for run in RUNS:
        f = _facts(run)
        s = f.get("straggler")
        if not s or s["kind"] == "none" or "derived_from" in f:
            continue
        cal = s["calibration"]
        clean = _facts(cal["clean_run"])
        assert clean["straggler"]["kind"] == "none" and clean["world_size"] == f["world_size"]
        assert cal["clean_median_step_ms"] == clean["median_step_ms"]
        assert s["intended_extra_ms_per_step"] == pytest.approx(
            cal["intended_fraction_of_clean_step"] * clean["median_step_ms"], abs=0.06)
        # the injected work is really there, at its intended size (within 25 % or 3 ms)
        assert abs(s["measured_extra_ms_median"] - s["intended_extra_ms_per_step"]) <= max(
            3.0, 0.25 * s["intended_extra_ms_per_step"]), run


def test_held_out_runs_are_about_a_third_and_spread_over_kinds():
    held = [r for r in RUNS if _facts(r)["held_out"]]
    assert 0.25 <= len(held) / len(RUNS) <= 0.45
    kinds = {("cut" if r.startswith("cut-") else _facts(r)["mode"] if _facts(r)["mode"] == "pp"
              else _facts(r)["straggler"]["kind"]) for r in held}
    assert {"pp", "cut", "host", "compute", "none"} <= kinds


def test_dropped_collective_is_missing_exactly_there():
    f = _facts("ddp8-drop-allreduce")
    d = f["dropped_collective"]
    src = f["derived_from"]

    def seq(run: str, r: int) -> list[tuple]:
        return [(e["name"], json.dumps(e["args"]["Input Dims"][0])) for e in _x(_doc(run, r), "c10d::", True)]

    def gloo(run: str, r: int) -> list[str]:
        return [json.dumps(e["args"]["Input Dims"][0]) for e in _x(_doc(run, r), "gloo:", False)]

    full = seq(src, d["rank"])
    assert seq("ddp8-drop-allreduce", d["rank"]) == full[:d["position"]] + full[d["position"] + 1:]
    assert len(full) == d["collectives_on_rank_before"]
    assert full[d["position"]][0] == d["op"] == "c10d::allreduce_"
    g = gloo(src, d["rank"])
    assert gloo("ddp8-drop-allreduce", d["rank"]) == g[:d["position"]] + g[d["position"] + 1:]
    for r in range(f["world_size"]):
        if r != d["rank"]:
            assert (BED / src / f"rank{r}.pt.trace.json.gz").read_bytes() == \
                   (BED / "ddp8-drop-allreduce" / f"rank{r}.pt.trace.json.gz").read_bytes()
    assert seq("ddp8-drop-allreduce", (d["rank"] + 1) % f["world_size"]) == full  # the others have it


@pytest.mark.parametrize("run", [r for r in RUNS if r.startswith("cut-")])
def test_cut_files_are_cut_where_facts_say(run):
    f = _facts(run)
    c = f["cut"]
    data = (BED / run / c["file"]).read_bytes()
    if c["kind"] == "gzip_stream_truncated":
        assert len(data) == c["cut_offset_gzip"] < c["original_gzip_bytes"]
        with pytest.raises(EOFError):
            gzip.decompress(data)
        raw = zlib.decompressobj(wbits=31).decompress(data)
        assert len(raw) == c["decompressible_uncompressed_bytes"]
    else:
        raw = gzip.decompress(data)  # a valid gzip of an unfinished JSON
        assert len(raw) == c["cut_offset_uncompressed"] < c["original_uncompressed_bytes"]
    with pytest.raises(ValueError):
        json.loads(raw)
    full = gzip.decompress((BED / f["derived_from"] / c["file"]).read_bytes())
    assert full[:len(raw)] == raw  # a prefix of the source rank's file, nothing else changed
    # a ProfilerStep survives for the complete steps and the partial one, not for the lost ones
    kept = re.findall(rb'"name": "(ProfilerStep#\d+)"', raw)
    assert [k.decode() for k in kept] == c["steps_complete_training_thread"] + c["steps_partial_training_thread"]
    assert len(c["steps_partial_training_thread"]) == 1
    assert c["steps_complete_training_thread"] + c["steps_partial_training_thread"] + \
        c["steps_lost_training_thread"] == [f"ProfilerStep#{i}" for i in range(2, 2 + f["steps_profiled"])]


def test_gpuless_run_claims_a_gpu_job_and_has_no_gpu_events():
    f = _facts("gpuless-ddp4")
    for r in range(f["world_size"]):
        doc = _doc("gpuless-ddp4", r)
        info = doc["distributedInfo"]
        assert info["backend"] == "nccl" and all(pg["backend_config"] == "cuda:nccl" for pg in info["pg_config"])
        assert [d["id"] for d in doc["deviceProperties"]] == list(range(f["world_size"]))
        assert all(d["name"].startswith("NVIDIA") for d in doc["deviceProperties"])
        assert not [e for e in doc["traceEvents"] if e.get("cat") in GPU_CATS]
        src = _doc(f["derived_from"], r)
        assert src["traceEvents"] == doc["traceEvents"]  # only the header differs
