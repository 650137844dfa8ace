"""The composed-parallelism bed (fixtures/real-cpu-composed, issue #29) is what its truth says: every run has one
trace per rank whose `distributedInfo.pg_config` holds exactly the rank's groups of the truth's mesh (named
`mesh_<dim>`, or `undefined` for `new_group` groups), the mesh's dimensions partition the world, each pipeline is a
pp group, the held-out flags are HELDOUT.md's list (chosen before the runs were made) and at least a third of the
bed. Reads the bed's own files with plain json; the analyzer's verdicts on the bed are score.py's.
"""
from __future__ import annotations

import gzip
import json
import re
from functools import lru_cache
from pathlib import Path

import pytest

BED = Path(__file__).resolve().parent.parent / "fixtures" / "real-cpu-composed"
RUNS = sorted(p.parent.name for p in BED.glob("*/truth.json"))


def _listed(md: str) -> set[str]:
    return set(re.findall(r"^\| `([^`]+)` \|", (BED / md).read_text(), re.M))


@lru_cache(maxsize=None)
def truth(run: str) -> dict:
    return json.loads((BED / run / "truth.json").read_text())


def test_bed_size_and_held_out_third() -> None:
    held = [r for r in RUNS if truth(r)["held_out"]]
    assert len(RUNS) >= 24
    assert 3 * len(held) >= len(RUNS) and len(held) >= 8
    assert sum(truth(r)["kind"] == "none" for r in held) >= 2


def test_held_out_flags_are_the_lists() -> None:
    held, tuning = _listed("HELDOUT.md"), _listed("TUNING.md")
    assert not held & tuning
    assert {r for r in RUNS if truth(r)["held_out"]} == held
    assert set(RUNS) - held == tuning | {"dptp-sp-clean"}


@pytest.mark.parametrize("run", RUNS)
def test_mesh_partitions_the_world(run: str) -> None:
    t = truth(run)
    world = set(range(t["world_size"]))
    size = 1
    for d in t["mesh"]["dims"]:
        size *= d["size"]
        ranks = [r for g in d["groups"] for r in g]
        assert sorted(ranks) == sorted(world) and all(len(g) == d["size"] for g in d["groups"])
    assert size == t["world_size"]
    if t["pipeline"]:
        pp = next(d for d in t["mesh"]["dims"] if d["name"] == "pp")
        assert [g["ranks"] for g in t["pipeline"]["per_group"]] == pp["groups"]
        for g in t["pipeline"]["per_group"]:
            assert sorted(s for v in g["stages_of_rank"].values() for s in v) == list(range(g["p"] * g["v"]))
    assert set(t["target_ranks"]) <= world
    if t["kind"] == "slow_stage":
        pc = t["straggler"]["slow_stage"]
        assert t["target_ranks"] == [r for r in sorted(world) if t["mesh"]["rank_coords"][str(r)]["pp"] == pc]


@pytest.mark.slow  # reads 148 traces (~5 s of CPU)
@pytest.mark.parametrize("run", RUNS)
def test_traces_hold_the_truths_groups(run: str) -> None:
    t = truth(run)
    named = t["groups"] == "named"
    for r in range(t["world_size"]):
        with gzip.open(BED / run / f"rank{r}.pt.trace.json.gz", "rt") as f:
            tr = json.load(f)
        info = tr["distributedInfo"]
        assert info["rank"] == r and info["world_size"] == t["world_size"] and info["backend"] == "gloo"
        got = {(g["pg_desc"], tuple(g["ranks"])) for g in info["pg_config"] if g["pg_desc"] != "default_pg"}
        want = {((f"mesh_{d['name']}" if named else "undefined"), tuple(next(g for g in d["groups"] if r in g)))
                for d in t["mesh"]["dims"]}
        assert got == want
        steps = sorted(e["name"] for e in tr["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#"))
        assert steps == t["per_rank"][str(r)]["trace_profiler_steps"]
