"""Cross-rank analysis on real traces: the 8-rank DLRM set (old, no args) and the 4-rank gloo CPU runs."""
from __future__ import annotations

import gzip
import json
from functools import lru_cache
from pathlib import Path

import pytest

from analyzer.cross_rank.section import analyse, cross_rank_section
from analyzer.load.job import load_job
from tests.pipeline_truth import bubbles

pytestmark = pytest.mark.slow  # loads real or 64+ rank folders: outside the everyday loop

FIX = Path(__file__).resolve().parent.parent / "fixtures"
DLRM = FIX / "corpus" / "param-dlrm_kineto"
CPU = FIX / "real-cpu"


@lru_cache(maxsize=None)
def _run(folder: Path):
    job = load_job([folder], jobs=1)
    return job, analyse(job), cross_rank_section(job)


def test_dlrm_all_ranks_matched_by_stream_order():
    job, cr, sec = _run(DLRM)
    inst = cr.instances
    assert sec["collectives"]["match_method"] == "stream_order"
    assert len(inst) == 8 and inst["complete"].all() and (inst["n_members"] == 8).all()
    assert inst.sort_values("seq")["op"].tolist() == ["alltoall"] * 4 + ["allreduce", "alltoall", "allreduce",
                                                                          "allreduce"]
    assert sec["collectives"]["unmatched"] == 0


def test_dlrm_offsets_near_zero_and_waits_reported():
    job, cr, sec = _run(DLRM)
    al = sec["alignment"]
    assert al["status"] == "ok"
    assert al["max_abs_offset_us"] <= 7.0
    assert al["max_residual_us"] <= 7.0
    # independent check of the wait of rank 0 at the first instance: latest start − its own start
    first = {r: t.collectives.sort_values("start").iloc[0] for r, t in job.traces.items()}
    latest = max(int(c["start"]) + cr.alignment.offset_of[r] for r, c in first.items())
    m = cr.members[(cr.members["seq"] == 0) & (cr.members["rank"] == 0)].iloc[0]
    assert int(m["wait_ns"]) == latest - (int(first[0]["start"]) + cr.alignment.offset_of[0])
    waits = {x["rank"]: x for x in sec["collectives"]["per_rank_wait"]}
    assert sorted(waits) == list(range(8))
    total0 = cr.members.loc[cr.members["rank"] == 0, "wait_ns"].sum() / 1e3
    assert waits[0]["total_wait_us"] == pytest.approx(total0)


def _facts(name: str) -> dict:
    return json.loads((CPU / name / "facts.json").read_text())


def test_ddp_straggler_names_the_slow_rank():
    _, _, sec = _run(CPU / "ddp-straggler")
    slow = _facts("ddp-straggler")["slow_rank"]
    st = sec["stragglers"]
    assert st["straggler"] == slow
    assert st["per_rank"][0]["rank"] == slow
    assert st["attribution"] == "compute"
    assert sec["alignment"]["status"] == "ok" and sec["hosts"]["source"] == "trace"


def test_ddp_clean_names_no_straggler():
    _, cr, sec = _run(CPU / "ddp-clean")
    assert sec["stragglers"]["straggler"] is None
    assert len(cr.instances) == 8 and cr.instances["complete"].all()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["pp-gpipe", "pp-1f1b"])
def test_pipeline_p_m_schedule(name):
    _, _, sec = _run(CPU / name)
    f = _facts(name)
    pipe = sec["pipeline"]
    assert (pipe["p"], pipe["m"], pipe["schedule"]) == (f["p"], f["m"], f["schedule"])
    assert pipe["stage_ranks"] == [[0], [1], [2], [3]]
    assert pipe["theoretical_bubble"] == pytest.approx(f["theoretical_bubble"])
    # bubble per rank and step over stage 0's window, against a measurement straight from the JSON
    want = bubbles(CPU / name, [[0, 1, 2, 3]])
    got = {(x["rank"], x["step"]): x["bubble_rate"] for x in pipe["per_stage"]}
    assert set(got) == set(want)
    for k, b in got.items():
        assert b == pytest.approx(want[k], abs=1e-4)
    # gloo send/recv carry their peers: every transfer pairs with one on the neighbour
    assert sec["collectives"]["unmatched"] == 0


def test_gloo_sends_pair_with_recvs_in_order():
    job, cr, _ = _run(CPU / "pp-1f1b")
    p2p = cr.instances[cr.instances["kind"] == "p2p"]
    assert set(zip(p2p["src"], p2p["dst"])) == {(0, 1), (1, 0), (1, 2), (2, 1), (2, 3), (3, 2)}
    assert (p2p["n_members"] == 2).all()
    # 24 transfers each way per neighbour pair: 8 micro-batches × 3 steps
    assert p2p.groupby(["src", "dst"]).size().eq(24).all()


@pytest.mark.slow
def test_inter_node_link_class_comes_from_the_nccl_logs():
    """NCCL logs that select the Socket network make inter-node groups 'socket'; without logs IB is assumed."""
    from analyzer.report.assemble import run_analysis
    from analyzer.load.job import load_job
    root = Path(__file__).resolve().parent.parent / "fixtures/sim"
    sock = run_analysis(load_job([root / "nccl_socket"], jobs=1))["cross_rank"]["collectives"]["by_group_op"]
    traces_only = sorted((root / "nccl_socket").glob("rank*.pt.trace.json.gz"))
    assumed = run_analysis(load_job(traces_only, jobs=1))["cross_rank"]["collectives"]["by_group_op"]
    assert {g["link_class"] for g in sock} == {"socket"}
    assert {g["link_class"] for g in assumed} == {"ib"}
