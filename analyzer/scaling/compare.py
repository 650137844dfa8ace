"""The comparison document: runs sorted by size, scaling efficiency against the smallest, its factors against the
smallest run and per step up in size, the dominant loss and its fix (docs/scaling.md)."""
from __future__ import annotations

import math
from typing import Optional

from analyzer.scaling.factors import FACTORS, FIXES, dominant, waterfall
from analyzer.scaling.kind import scaling_kind
from analyzer.scaling.thresholds import DEFAULT_THRESHOLDS
from analyzer.scaling.volume import volume_against_bandwidth

SCHEMA = "dtrace-analyzer/comparison"
PARALLEL = ("load_balance", "transfer", "host_idle", "bubble", "serialisation")



def expected_efficiency(world_size: int, thresholds: dict) -> float:
    """The guide value at this size: the 8-GPU one up to 8, the 64-GPU one from 64, linear in log2(N) between."""
    good, ok = thresholds["efficiency_good_at_8"], thresholds["efficiency_acceptable_at_64"]
    if world_size <= 8:
        return good
    if world_size >= 64:
        return ok
    return good + (ok - good) * (math.log2(world_size) - 3) / 3


def _ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return a / b if a is not None and b not in (None, 0) else None


def _batch_ratio(row: dict, base: dict, kind: str) -> float:
    """b_N / b_N0: the per-rank batch against the base run's (known, or what the scaling kind implies)."""
    if row.get("batch_per_rank") and base.get("batch_per_rank"):
        return float(row["batch_per_rank"]) / float(base["batch_per_rank"])
    if kind == "strong":
        return base["world_size"] / row["world_size"]
    return 1.0


def _factors_vs(row: dict, ref: dict, b_rel: float) -> dict:
    f = {k: _ratio(row.get(k), ref.get(k)) for k in PARALLEL}
    f["computation_scalability"] = (_ratio(ref.get("useful_median_us"), row.get("useful_median_us")) or 0) * b_rel or None
    return f


def _notes(row: dict, cs: Optional[float], kind: str) -> list[str]:
    notes = []
    if cs is not None and cs < 0.9 and kind != "strong" and row.get("device_type") == "cpu" and \
            (row.get("hosts") or 1) == 1:
        notes.append(f"each rank's compute per sample is {1 / cs:.2f}× the smallest run's: the "
                     f"{row['world_size']} ranks share one host's CPU cores (a CPU job on one host), so the "
                     "computation-scalability factor measures the host, not the parallelism")
    return notes


def compare_rows(rows: list[dict], *, scaling: Optional[str] = None,
                 thresholds: Optional[dict] = None) -> dict:
    """The comparison of runs given as rows (analyzer.scaling.rows.run_row or a --record file's rows)."""
    th = dict(DEFAULT_THRESHOLDS)
    th.update(thresholds or {})
    seen, runs, warnings = set(), [], []
    for r in rows:
        if r.get("run_id") in seen:
            warnings.append(f"run {r.get('label')} ({r.get('run_id')}) given twice: compared once")
            continue
        seen.add(r.get("run_id"))
        if not r.get("world_size") or not r.get("step_time_mean_us"):
            warnings.append(f"run {r.get('label')}: no world size or step time in its report: left out")
            continue
        runs.append(dict(r))
    runs.sort(key=lambda r: (r["world_size"], str(r.get("collected_at") or ""), str(r.get("label") or "")))
    kind = scaling_kind(runs, scaling)
    doc = {"schema": SCHEMA, "schema_version": 1, "scaling": kind, "thresholds": th, "runs": runs,
           "steps_up": [], "warnings": warnings, "notes": []}
    if not runs:
        return doc
    base = runs[0]
    doc["base_run"] = base["run_id"]
    k = kind["kind"]
    if k == "strong":
        doc["notes"].append("strong scaling (global batch constant) is the pessimistic measure: each rank's batch "
                            "shrinks as 1/N while the gradients to reduce do not, so the communication share "
                            "rises by construction")
    if k == "mixed":
        doc["notes"].append("batches neither weak nor strong: efficiency compares per-rank throughput (samples/s "
                            "per rank) with the smallest run's")
    for r in runs:
        b_rel = _batch_ratio(r, base, k)
        r["efficiency"] = b_rel * base["step_time_mean_us"] / r["step_time_mean_us"]
        f = _factors_vs(r, base, b_rel)
        r["factors"] = f
        r["computation_scalability"] = f["computation_scalability"]
        r["loss_shares"] = waterfall(f, r["efficiency"]) if r is not base else {x: 0.0 for x in f}
        r["dominant"] = dominant(r["loss_shares"]) if r is not base else None
        r["fix"] = FIXES.get(r["dominant"] or "")
        r["expected_efficiency"] = expected_efficiency(r["world_size"], th)
        r["judgement"] = ("base" if r is base else
                          "good" if r["efficiency"] >= r["expected_efficiency"] else "below the guide")
        r["notes"] = _notes(r, f["computation_scalability"], k)
        doc["notes"] += [f"{r['label']}: {n}" for n in r["notes"]]
    volume_against_bandwidth(runs)
    for prev, cur in zip(runs, runs[1:]):
        f = {x: _ratio(cur["factors"].get(x), prev["factors"].get(x)) for x in FACTORS}
        e = cur["efficiency"] / prev["efficiency"]
        shares = waterfall(f, e)
        dom = dominant(shares)
        doc["steps_up"].append({"from": prev["run_id"], "to": cur["run_id"], "from_label": prev["label"],
                                "to_label": cur["label"], "from_world_size": prev["world_size"],
                                "to_world_size": cur["world_size"], "efficiency": e, "factors": f,
                                "loss_shares": shares, "dominant": dom, "fix": FIXES.get(dom or "")})
    return doc
