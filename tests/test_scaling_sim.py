"""Simulated weak-scaling series (fixtures/sim-scaling): at each size one injected loss; the efficiency and every
factor the simulator's own step decomposition gives are recovered within 2 points, and the dominant factor is the
injected one (docs/scaling.md)."""
from __future__ import annotations

import functools
import json
import statistics
from pathlib import Path

import pytest

import analyzer

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
BED = ROOT / "fixtures/sim-scaling"
SIZES = (8, 16, 32, 64)
INJECTED = {16: "load_balance", 32: "host_idle", 64: "transfer"}


@functools.lru_cache(maxsize=1)
def series(tmp: str) -> dict:
    from simulator.cli import main as sim
    for n in SIZES:
        sim(["run", str(BED / f"ddp_weak_{n}.json"), "--out", f"{tmp}/w{n}"])
    return analyzer.compare([f"{tmp}/w{n}" for n in SIZES], jobs=2).document


def truth(folder: str) -> dict:
    """T, per-rank compute U, exposed communication X and idle I from the simulator's expected.json."""
    m = json.loads(Path(folder, "expected.json").read_text())["rank_step_metrics"]
    ranks, steps = sorted({r["rank"] for r in m}), sorted({r["step"] for r in m})
    T = statistics.mean(statistics.mean(r["step_time_ns"] for r in m if r["step"] == s) for s in steps)

    def per_rank(key: str) -> list[float]:
        return [statistics.mean(r[key] for r in m if r["rank"] == k) for k in ranks]
    return {"T": T, "U": per_rank("compute_ns"), "X": per_rank("exposed_comm_ns"), "I": per_rank("idle_ns")}


@pytest.fixture(scope="module")
def doc(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("simscaling"))
    return tmp, series(tmp)


def test_efficiency_and_factors_within_two_points_of_the_simulator(doc):
    tmp, d = doc
    base = truth(f"{tmp}/w8")

    def host(t):  # the time the step would take without idle, over the step (no wait in these jobs but jitter)
        return max(t["T"] - x - i for x, i in zip(t["X"], t["I"])) / max(t["T"] - x for x in t["X"])

    def transfer(t):
        return max(t["T"] - x for x in t["X"]) / t["T"]

    def lb(t):
        return statistics.median(t["U"]) / max(t["U"])
    assert [r["world_size"] for r in d["runs"]] == list(SIZES) and d["scaling"]["kind"] == "weak"
    for r in d["runs"]:
        t = truth(f"{tmp}/w{r['world_size']}")
        f = r["factors"]
        assert r["efficiency"] == pytest.approx(base["T"] / t["T"], abs=0.02)
        assert f["load_balance"] == pytest.approx(lb(t) / lb(base), abs=0.02)
        assert f["computation_scalability"] == pytest.approx(statistics.median(base["U"]) / statistics.median(t["U"]),
                                                             abs=0.02)
        assert f["host_idle"] == pytest.approx(host(t) / host(base), abs=0.02)
        assert f["transfer"] * f["serialisation"] == pytest.approx(transfer(t) / transfer(base), abs=0.02)
        assert f["bubble"] == 1.0


def test_the_dominant_factor_is_the_injected_one(doc):
    _, d = doc
    for r in d["runs"][1:]:
        assert r["dominant"] == INJECTED[r["world_size"]], (r["world_size"], r["loss_shares"])
    for s in d["steps_up"]:
        assert s["dominant"] == INJECTED.get(s["to_world_size"]) or s["efficiency"] >= 1, s
