"""Process-group roles from what identifies them (issue #22 item 5): per-layer reductions in forward and backward
with activation-sized payloads are tensor parallelism (DTensor Colwise/Rowwise on the world group too);
gradient-sized reductions after the backward are DP; all-gathers in forward and backward are FSDP. Hand-built
member rows with exact facts, then the real DTensor / FSDP2 / DDP runs (nothing from truth.json passed in)."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

import analyzer
from analyzer.cross_rank.roles import group_role_facts, judge_role

ROOT = Path(__file__).resolve().parent.parent
BED = ROOT / "fixtures" / "real-cpu-perf-2"


def _coll(rows, group="0"):
    """rows: (rank, step, op, nelems, compute_before) per member row."""
    return {"rank": np.array([r[0] for r in rows]), "step": np.array([r[1] for r in rows]),
            "op": np.array([r[2] for r in rows], dtype=object), "nelems": np.array([r[3] for r in rows]),
            "process_group": np.array([group] * len(rows), dtype=object),
            "compute_before": np.array([r[4] for r in rows], float)}


def _steps(per_step, ranks=(0, 1), steps=(1, 2, 3)):
    return [(r, s, op, n, cb) for r in ranks for s in steps for op, n, cb in per_step]


TP2 = [("allreduce", 16384, 0.02), ("allreduce", 16384, 0.2), ("allreduce", 16384, 0.7), ("allreduce", 16384, 1.0)]
DDP_METRICS = [("allreduce", 4, 0.0), ("allreduce", 131712, 0.9), ("allreduce", 131968, 1.0), ("allreduce", 256, 1.0)]
DDP_EQUAL = [("allreduce", 1 << 20, 0.3), ("allreduce", 1 << 20, 0.6), ("allreduce", 1 << 20, 0.9)]
FSDP = [("allgather", 1000, 0.0), ("allgather", 1000, 0.15), ("allgather", 1000, 0.35), ("allgather", 1000, 0.4),
        ("reducescatter", 1000, 0.7), ("reducescatter", 1000, 1.0)]


def test_tp_facts_exact():
    f = group_role_facts(_coll(_steps(TP2)))["0"]
    assert f == {"rank_steps": 6, "tp_steps": 6, "reductions_per_step": 4.0, "forward_reductions_per_step": 2.0,
                 "recurring_per_step": 2.0, "payload_known": True, "first_reduction_share": 0.02,
                 "activation_nelems": 16384}
    role, judged, ev = judge_role("0", [0, 1], 2, {"allreduce": 24}, 4.0, 0.02, f)
    assert (role, judged) == ("world", "tp")
    assert "2 of them in the forward pass" in ev and "16,384 elements" in ev and "tensor parallelism" in ev


def test_one_layer_tp_is_tp():
    f = group_role_facts(_coll(_steps([("allreduce", 4096, 0.1), ("allreduce", 4096, 0.8)])))["0"]
    assert f["tp_steps"] == 6
    assert judge_role("3", [0, 1], 4, {"allreduce": 12}, 2.0, 0.1, f)[:2] == ("tp", "tp")


def test_metrics_allreduce_before_forward_is_not_tp():
    """A 4-float metrics all-reduce before the forward is early, but nothing later repeats its payload."""
    f = group_role_facts(_coll(_steps(DDP_METRICS)))["0"]
    assert (f["tp_steps"], f["forward_reductions_per_step"], f["first_reduction_share"]) == (0, 1.0, 0.0)
    role, judged, ev = judge_role("0", [0, 1], 2, {"allreduce": 24}, 4.0, 0.0, f)
    assert (role, judged) == ("world", "dp")
    assert "1 in the forward pass whose payload nothing later repeats" in ev
    # on a group smaller than the world the early-first-collective test alone said TP before
    assert judge_role("5", [0, 1], 4, {"allreduce": 24}, 4.0, 0.0, f)[:2] == ("dp", "dp")


def test_equal_buckets_with_an_early_first_one_stay_dp():
    f = group_role_facts(_coll(_steps(DDP_EQUAL)))["0"]
    assert f["tp_steps"] == 0 and f["recurring_per_step"] == 1.0
    assert judge_role("0", [0, 1], 2, {"allreduce": 18}, 3.0, 0.3, f)[1] == "dp"


def test_fsdp_gathers_are_not_tp():
    f = group_role_facts(_coll(_steps(FSDP)))["0"]
    assert f["tp_steps"] == 0 and f["forward_reductions_per_step"] == 0.0
    role, judged, ev = judge_role("0", [0, 1], 2, {"allgather": 24, "reducescatter": 12}, 6.0, 0.0, f)
    assert judged == "fsdp" and "none in the forward pass; the first after 70% of the step's compute" in ev


def test_unknown_payloads_keep_the_old_rules():
    f = group_role_facts(_coll(_steps([("allreduce", -1, 0.05), ("allreduce", -1, 0.1), ("allreduce", -1, 0.2),
                                       ("allreduce", -1, 0.6)])))["0"]
    assert not f["payload_known"] and f["tp_steps"] == 0
    assert judge_role("1", [0, 1], 4, {"allreduce": 24}, 4.0, 0.05, f)[:2] == ("tp", "tp")


@lru_cache(maxsize=None)
def _groups(path: str):
    return analyzer.load(ROOT / path).groups


@pytest.mark.slow
@pytest.mark.parametrize("run", ["tp2-clean", "tp2-compute-15", "tp2-host-25", "tp2-data-40", "fsdp3-clean",
                                 "fsdp3-compute-40", "ddp4-metrics-clean", "ddp4-misplaced-r1", "ddp4-clean"])
def test_real_runs_judged_by_their_shape(run):
    # the shape the job was made with (DTensor parallelize_module, fully_shard, DDP)
    role = {"tp": "tp", "fsdp": "fsdp", "ddp": "dp"}[json.loads((BED / run / "truth.json").read_text())["shape"]]
    g = _groups(f"fixtures/real-cpu-perf-2/{run}")
    assert len(g) == 1 and g.iloc[0]["role"] == "world"
    assert g.iloc[0]["judged_role"] == role, g.iloc[0]["evidence"]
    if role == "tp":
        assert "tensor parallelism" in g.iloc[0]["evidence"]


@pytest.mark.slow
def test_fsdp4_clean_medium_is_fsdp():
    g = _groups("fixtures/real-cpu-perf/fsdp4-clean-medium")
    assert g.iloc[0]["judged_role"] == "fsdp" and "none in the forward pass" in g.iloc[0]["evidence"]
