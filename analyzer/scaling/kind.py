"""Weak or strong scaling: read from the batches where they are known, else inferred from how each rank's compute
per step changes with the world size (docs/scaling.md, "Weak or strong")."""
from __future__ import annotations

import math
from typing import Optional


def _close(values: list[float], tol: float = 1e-6) -> bool:
    return max(values) - min(values) <= tol * max(1.0, abs(max(values)))


def scaling_kind(rows: list[dict], override: Optional[str] = None) -> dict:
    """``{kind, source, confidence, evidence}``; ``kind`` is weak, strong, mixed (batches known, neither constant)
    or unknown (one run). ``rows`` sorted by world size, the first the base."""
    if override:
        return {"kind": override, "source": "option", "confidence": 1.0,
                "evidence": f"set by the user (--scaling {override})"}
    if len(rows) < 2:
        return {"kind": "unknown", "source": "none", "confidence": 0.0, "evidence": "one run: nothing to compare"}
    per_rank = [r.get("batch_per_rank") for r in rows]
    if all(b for b in per_rank):
        glob = [float(b) * r["world_size"] for b, r in zip(per_rank, rows)]
        if _close([float(b) for b in per_rank]):
            return {"kind": "weak", "source": "batches", "confidence": 1.0,
                    "evidence": f"the per-rank batch is {per_rank[0]:g} in every run"}
        if _close(glob):
            return {"kind": "strong", "source": "batches", "confidence": 1.0,
                    "evidence": f"the global batch is {glob[0]:g} in every run"}
        return {"kind": "mixed", "source": "batches", "confidence": 1.0,
                "evidence": "neither the per-rank nor the global batch is constant: efficiency is per-rank "
                            "throughput against the smallest run's"}
    base = rows[0]
    n0, u0 = base.get("world_size"), base.get("useful_median_us")
    nxt = next((r for r in rows[1:] if r.get("world_size") and n0 and r["world_size"] > n0
                and r.get("useful_median_us")), None)
    if not nxt or not u0:
        return {"kind": "unknown", "source": "none", "confidence": 0.0,
                "evidence": "no two run sizes with compute to compare"}
    x = _exponent(u0, n0, nxt["useful_median_us"], nxt["world_size"])
    later = [_exponent(u0, n0, r["useful_median_us"], r["world_size"]) for r in rows[1:]
             if r is not nxt and r.get("useful_median_us") and r.get("world_size") and r["world_size"] > n0]
    kind = "strong" if x > 0.5 else "weak"
    conf = min(1.0, abs(x - 0.5) * 2)
    disagree = [y for y in later if (y > 0.5) != (x > 0.5)]
    if disagree:
        conf *= 0.5
    ratio = nxt["useful_median_us"] / u0
    evidence = (f"inferred: each rank's compute per step at {nxt['world_size']} ranks is {ratio:.2f}× that at "
                f"{n0} (weak scaling keeps it ~1×, strong shrinks it to ~{n0 / nxt['world_size']:.2f}×)")
    if disagree:
        evidence += f"; {len(disagree)} larger run(s) point the other way (ranks sharing a host's cores inflate compute)"
    return {"kind": kind, "source": "inferred", "confidence": round(conf, 2), "evidence": evidence}


def _exponent(u0: float, n0: int, u: float, n: int) -> float:
    """x in compute ∝ (N0/N)^x: 0 for weak scaling, 1 for strong."""
    return math.log(u / u0) / math.log(n0 / n)
