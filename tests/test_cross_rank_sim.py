"""Cross-rank analysis against the simulator's truth (fixtures/sim/*/expected.json), one test set per scenario."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analyzer.cross_rank.section import analyse, cross_rank_section
from analyzer.load.job import load_job
from tests.pipeline_truth import bubbles

pytestmark = pytest.mark.slow  # loads real or 64+ rank folders: outside the everyday loop

SIM = Path(__file__).resolve().parent.parent / "fixtures" / "sim"
SCENARIOS = sorted(p.name for p in SIM.glob("*/expected.json") for p in [p.parent]
                   if list(p.glob("rank*.pt.trace.json*")))
#: Faults that make a named straggler the right answer, and those after which none may be named.
PERF_FAULTS_WITH_STRAGGLER = {"straggler"}


@lru_cache(maxsize=None)
def _run(name: str):
    job = load_job([SIM / name], jobs=1)
    truth = json.loads((SIM / name / "expected.json").read_text())
    return job, truth, analyse(job), cross_rank_section(job)


@pytest.mark.parametrize("name", SCENARIOS)
def test_clock_offsets_within_5us(name):
    job, truth, cr, _ = _run(name)
    true = {int(r): v for r, v in truth["clock_offsets_ns"].items()}
    ref = cr.alignment.reference_rank
    assert cr.alignment.status == "ok", cr.alignment.message
    for r in job.ranks:
        want = true[r] - true[ref]  # simulator: true = local + offset; ours: aligned = local + offset
        assert abs(cr.alignment.offset_of[r] - want) <= 5_000, (r, cr.alignment.offset_of[r], want)


def _truth_members(truth: dict) -> pd.DataFrame:
    rows = []
    for kind, items in (("collective", truth["collectives"]), ("p2p", truth["p2p"])):
        for x in items:
            if not x.get("completed"):
                continue
            src, dst = (x["src"], x["dst"]) if kind == "p2p" else (-1, -1)
            for r, w in x["wait_ns"].items():
                rows.append({"kind": kind, "rank": int(r), "src": src, "dst": dst, "local_start": x["start_ns"][r],
                             "process_group": str(x["process_group"]), "wait_ns": w, "transfer_ns": x["transfer_ns"]})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("name", SCENARIOS)
def test_waits_and_transfer_times_exact(name):
    job, truth, cr, _ = _run(name)
    want = _truth_members(truth)
    m = cr.members.merge(cr.instances[["instance", "transfer_ns"]], left_on="iid", right_on="instance")
    m = m.assign(local_start=m["start"] - cr.alignment.shift(m["rank"].to_numpy()))
    # (a rank can start collectives of two groups at one instant: TP chunks and a DP bucket behind one kernel;
    # old traces name no group, the analysis keys them by stream)
    on = ["kind", "rank", "src", "dst", "local_start"] + (["process_group"] if truth["trace_format"] == "modern" else [])
    got = m.merge(want, on=on, how="inner", suffixes=("", "_true"))
    # every true (instance, rank) is found, once
    assert len(got) == len(want), (len(got), len(want))
    assert (got["wait_ns"] == got["wait_ns_true"]).all(), got[got["wait_ns"] != got["wait_ns_true"]].head()
    assert (got["transfer_ns"] == got["transfer_ns_true"]).all()
    assert int(cr.instances["complete"].sum()) == len(truth["collectives"]) + len(truth["p2p"])


@pytest.mark.parametrize("name", SCENARIOS)
def test_process_group_roles_and_hosts(name):
    job, truth, _, sec = _run(name)
    got = {g["name"]: g for g in sec["process_groups"]}
    by_ranks = {tuple(g["ranks"]): g for g in sec["process_groups"]}
    for g in truth["process_groups"]:
        # old traces name no process group: their groups are known by members (stream order)
        mine = got[g["name"]] if truth["trace_format"] == "modern" else by_ranks[tuple(g["ranks"])]
        assert mine["ranks"] == g["ranks"]
        assert mine["hosts"] == g["hosts"]
        assert mine["span"] == ("inter_node" if g["hosts_spanned"] > 1 else "intra_node")
        # a group that carries nothing cannot be told apart from its members (e.g. unused world group)
        if mine["ops"] or g["role"] == "world":
            assert mine["role"] == g["role"], (g["name"], mine["role"], g["role"], mine["evidence"])
    assert sec["hosts"]["source"] == "trace"


@pytest.mark.parametrize("name", [n for n in SCENARIOS if n.startswith(("pp", "gpipe", "tp_pp"))])
def test_pipeline_shape_and_bubble(name):
    job, truth, _, sec = _run(name)
    pipe = sec["pipeline"]
    tp = truth["pipeline"]
    assert pipe["detected"]
    assert (pipe["p"], pipe["m"], pipe["v"], pipe["schedule"]) == (tp[0]["p"], tp[0]["m"], tp[0]["v"], tp[0]["schedule"])
    assert pipe["theoretical_bubble"] == pytest.approx(tp[0]["theoretical_bubble"])
    rows = pd.DataFrame(pipe["per_stage"])
    # the same window for every stage: stage 0's span (docs/metrics.md); cross-checked on the raw JSON
    pipes = [g["ranks"] for g in truth["process_groups"] if g["role"] == "pp"]
    want = bubbles(SIM / name, pipes)
    got = {(int(r), int(k)): b for r, k, b in zip(rows["rank"], rows["step"], rows["bubble_rate"])}
    assert set(got) == set(want)
    for k, b in got.items():
        assert b == pytest.approx(want[k], abs=1e-4), k
    mine = rows.groupby(["stage", "step"])["bubble_rate"].mean()
    for t in tp:
        # the simulator's own pipeline window counts only compute as work; collectives inside a stage's work
        # (TP all-reduce, DP reduction) count as work here, so the bubble can only be lower, and is the
        # simulator's where nothing but P2P communicates inside the window
        assert mine.loc[(t["stage"], t["step"])] <= t["bubble_rate_pipeline_window"] + 1e-6, t
        if name.startswith("pp_uniform"):
            assert mine.loc[(t["stage"], t["step"])] == pytest.approx(t["bubble_rate_pipeline_window"], abs=1e-4)
            assert mine.loc[(t["stage"], t["step"])] == pytest.approx(tp[0]["theoretical_bubble"], abs=1e-4)


@pytest.mark.parametrize("name", SCENARIOS)
def test_straggler_named_only_when_injected(name):
    job, truth, _, sec = _run(name)
    kinds = {f["kind"] for f in truth["faults"]}
    st = sec["stragglers"]
    if "straggler" in kinds:
        ranks = next(f["ranks"] for f in truth["faults"] if f["kind"] == "straggler")
        assert st["straggler"] in ranks, st["evidence"]
        assert st["per_rank"][0]["rank"] in ranks
        assert st["attribution"] == "compute", st["evidence"]
    elif not kinds:
        assert st["straggler"] is None, st["evidence"]
