"""The layout stage on the composed-parallelism bed's TUNING runs (fixtures/real-cpu-composed, TUNING.md; the
held-out runs of HELDOUT.md are never read here): the mesh (dimensions, sizes, order, groups, coordinates) and
each pipeline's p, m, v and schedule are the truth the jobs measured; the expert imbalance and a TP pair's compute
straggler are named. Skipped where the bed is not in the tree."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import analyzer

BED = Path(__file__).resolve().parent.parent / "fixtures" / "real-cpu-composed"
pytestmark = pytest.mark.skipif(not (BED / "TUNING.md").exists(), reason="the composed bed is not in this tree")


def _tuning() -> list[str]:
    if not (BED / "TUNING.md").exists():
        return []
    held = set(re.findall(r"^\| `([^`]+)` \|", (BED / "HELDOUT.md").read_text(), re.M))
    runs = re.findall(r"^\| `([^`]+)` \|", (BED / "TUNING.md").read_text(), re.M)
    return [r for r in runs if r not in held and (BED / r / "truth.json").exists()]


def _truth(run: str) -> dict:
    t = json.loads((BED / run / "truth.json").read_text())
    assert not t.get("held_out")
    return t


@pytest.mark.slow
@pytest.mark.parametrize("run", _tuning())
def test_mesh_and_pipelines_exact(run):
    truth = _truth(run)
    with analyzer.load(BED / run) as a:
        m = a.mesh
        assert m.exact
        assert [d.name for d in m.dims] == truth["mesh"]["order"]
        assert {d.name: (d.size, sorted(d.groups)) for d in m.dims} == \
            {d["name"]: (d["size"], sorted(map(sorted, d["groups"]))) for d in truth["mesh"]["dims"]}
        assert {str(r): c for r, c in m.coords.items()} == truth["mesh"]["rank_coords"]
        assert all(d.role in (d.name, "fsdp") for d in m.dims)  # a dp dimension that shards reads fsdp
        if truth.get("pipeline"):
            got = sorted((x["stages"], x["p"], x["m"], x["v"], x["schedule"])
                         for x in a.report["cross_rank"]["pipeline"]["pipelines"])
            want = sorted((list(dict.fromkeys(g["stage_order"])), g["p"], g["m"], g["v"],
                           "interleaved" if g["schedule"].startswith("interleaved") else g["schedule"])
                          for g in truth["pipeline"]["per_group"])
            assert got == want
        # no group's collectives are left to one order across the world (gloo rows booked to their groups)
        assert not any(f["id"] == "SYNC001" for f in a.findings)


@pytest.mark.slow
def test_expert_imbalance_named_with_its_factor():
    truth = _truth("epdp-imbalance-r1")
    with analyzer.load(BED / "epdp-imbalance-r1") as a:
        first = next(f for f in a.findings if f["severity"] in ("error", "warning"))
        assert first["id"] == "MOE001" and first["subject"]["ranks"] == truth["target_ranks"]
        assert "3.0×" in first["title"]


@pytest.mark.slow
@pytest.mark.parametrize("run", ["epdp-clean", "epdp-clean-manual"])
def test_balanced_experts_raise_no_moe_finding(run):
    with analyzer.load(BED / run) as a:
        assert all(g["balanced"] for g in a.report["cross_rank"]["expert_load"])
        assert not [f for f in a.findings if f["id"] == "MOE001"]


@pytest.mark.slow
def test_a_tp_partner_waiting_for_the_straggler_is_not_misplaced():
    # rank 3 computes extra after its forward; its TP partner 2 enters their next all-reduce 30 ms of compute
    # earlier: that is rank 3's extra work (LOAD001), not a collective rank 2 calls elsewhere (SYNC002)
    truth = _truth("dptp-manual-compute-r3")
    with analyzer.load(BED / "dptp-manual-compute-r3") as a:
        assert not [f for f in a.findings if f["id"] == "SYNC002"]
        first = next(f for f in a.findings if f["severity"] in ("error", "warning"))
        assert first["id"] == "LOAD001" and first["subject"]["ranks"] == truth["target_ranks"]


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="merged with the host/idle decomposition (issue #29 items 6-8), the other "
                   "TP pair's rank 3 is named by its consistent host/idle excess on 4 ranks sharing 2 cores ahead of "
                   "rank 1's extra work (docs/performance-diagnoses.md, composed parallelism): open")
def test_the_tp_pair_straggler_with_more_work_is_named():
    # rank 1 runs extra matmuls; its TP partner waits for it; the other TP pair's rank 3 is as slow from the shared
    # host's contention alone (the same operators): the one with work of its own is the straggler
    truth = _truth("dptp-fsdp-compute-r1")
    with analyzer.load(BED / "dptp-fsdp-compute-r1") as a:
        first = next(f for f in a.findings if f["severity"] in ("error", "warning"))
        assert first["id"] == "LOAD001" and first["subject"]["ranks"] == truth["target_ranks"]
