"""The POP efficiency factors of one run and across runs, built so that they multiply exactly
(docs/scaling.md, "The factors").

One run: parallel efficiency PE = median(U)/T = load balance × transfer × host idle × bubble × serialisation, with
LB = median(U)/max(U) (the typical rank's useful work: one straggler's own extra work is imbalance, not growth of
the job's computation) and the rest ratios of successive ideal runtimes (T → no exposed transfer → no idle → no
bubble → max(U)). Across runs: E_N = Π (factor_N / factor_N0) × computation scalability.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import pandas as pd

#: the factors in the order an engineer should check them (docs/scaling.md, "What to check first")
FACTORS = ("host_idle", "load_balance", "bubble", "serialisation", "transfer", "computation_scalability")

FIXES = {
    "host_idle": "the host or the data loader keeps the ranks idle: more DataLoader workers, pinned memory, "
                 "prefetching, fewer host syncs (.item(), logging) per step",
    "load_balance": "the ranks do unequal work: balance the data (sequence lengths, shards) or the pipeline "
                    "stages; look at the straggler (LOAD001 in its report)",
    "bubble": "the pipeline bubble: more micro-batches per step, an interleaved or zero-bubble schedule",
    "serialisation": "ranks wait for each other inside collectives: a late rank (its report's stragglers), or "
                     "the parallel layout against the topology (keep tensor parallel inside a node)",
    "transfer": "communication no computation hides: overlap it (DDP bucket size, FSDP prefetch), then the "
                "volume itself (gradient compression, a larger per-rank batch, another parallel plan)",
    "computation_scalability": "each rank's compute per sample grew with the world size: ranks sharing cores "
                               "or memory bandwidth on a host, or smaller per-rank batches running less "
                               "efficiently (strong scaling)",
}


def parallel_factors(parts: pd.DataFrame, T: float) -> dict:
    """The factors of one run from per-rank means (columns U, X, I, B, W; T the job's mean step time, µs).

    Every rank's parts are fitted into T (useful first), so each ideal runtime is at most the previous one and
    the product is exactly median(U)/T."""
    if parts is None or len(parts) == 0 or not T or T <= 0:
        return {}
    U = np.minimum(parts["U"].to_numpy(float), T)
    rest = T - U
    X, I, B = (np.clip(parts[c].to_numpy(float), 0, None) for c in ("X", "I", "B"))
    total = X + I + B
    scale = np.where(total > rest, rest / np.where(total > 0, total, 1), 1.0)
    X, I, B = X * scale, I * scale, B * scale
    t1 = float(np.max(T - X))
    t2 = float(np.max(T - X - I))
    t3 = float(np.max(T - X - I - B))
    umax, utyp = float(U.max()), float(np.median(U))
    if umax <= 0:
        return {}
    out = {"load_balance": utyp / umax, "transfer": t1 / T, "host_idle": t2 / t1, "bubble": t3 / t2,
           "serialisation": umax / t3}
    out["parallel_efficiency"] = utyp / T
    return out


def waterfall(factors: dict, efficiency: float) -> dict:
    """Each factor's share of the loss 1 − E (ln f / ln E × (1 − E)); they add up to the loss. A factor above 1
    (a gain) gets a negative share."""
    loss = 1.0 - efficiency
    if efficiency <= 0 or abs(math.log(efficiency)) < 1e-12:
        return {k: 0.0 for k in factors}
    le = math.log(efficiency)
    return {k: (math.log(f) / le * loss if f and f > 0 else None) for k, f in factors.items()}


def dominant(shares: dict) -> Optional[str]:
    """The factor that lost most; ties go to the one checked first (FACTORS order)."""
    best, best_v = None, 0.0
    for k in FACTORS:
        v = shares.get(k)
        if v is not None and v > best_v + 1e-12:
            best, best_v = k, v
    return best
