"""One rank's profile rows: what ran per step, by name (count and time per step), computed where the rank is parsed.

The report's `profile` section (analyzer/report/profile.py) averages these rows over the traced ranks; a
RankSummary carries them (analyzer/rank/summary.py), so the parent never needs a rank's activity table.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
import pandas as pd

from analyzer.rank.metrics import step_windows


def _outermost(a: pd.DataFrame) -> np.ndarray:
    """Rows not inside an earlier-starting row of the same thread (stream): the outermost CPU operators, so a
    wrapper and the op it wraps are not both counted. Vectorised: per thread, a row is nested when it starts before
    the running maximum end of the rows sorted before it."""
    d = pd.DataFrame({"s": a["stream"].to_numpy(), "b": a["start"].to_numpy(), "e": a["end"].to_numpy()})
    d = d.sort_values(["s", "b", "e"], ascending=[True, True, False], kind="stable")
    prev = d.groupby("s", sort=False)["e"].cummax().groupby(d["s"], sort=False).shift()
    top = np.ones(len(a), dtype=bool)
    top[d.index.to_numpy()] = (prev.isna() | (d["b"] >= prev)).to_numpy()
    return top


def rank_profile(trace: Any) -> Optional[tuple[pd.DataFrame, int]]:
    """One rank's (name, kind, per_step_n, per_step_ns) rows and its step count; None without activity or steps."""
    a = trace.activity
    steps, lo, hi, _ = step_windows(trace)
    if not len(a) or not len(steps):
        return None
    start = a["start"].to_numpy()
    order = np.argsort(lo, kind="stable")
    los, his = lo[order], hi[order]
    k = np.searchsorted(los, start, side="right") - 1
    keep = (k >= 0) & (start < his[np.maximum(k, 0)])
    if getattr(trace, "device_type", "gpu") == "cpu":
        keep &= _outermost(a)  # CPU operators nest (a backward node inside autograd's evaluate_function): once each
    names = np.asarray(trace.names, dtype=object)
    df = pd.DataFrame({"name": names[a["name_id"].to_numpy()[keep]], "kind": a["kind"].to_numpy()[keep].astype(str),
                       "dur": (a["end"].to_numpy() - start)[keep]})
    g = df.groupby(["name", "kind"], sort=False)["dur"].agg(["size", "sum"]).reset_index()
    g["per_step_n"] = g["size"] / len(steps)
    g["per_step_ns"] = g["sum"] / len(steps)
    return g[["name", "kind", "per_step_n", "per_step_ns"]], len(steps)


def profile_of(trace: Any) -> Optional[tuple[pd.DataFrame, int]]:
    """A rank's profile rows: those its RankSummary brings (computed where the rank was parsed), else computed
    here from the full trace (the Python API without an engine)."""
    return trace.profile if hasattr(trace, "profile") else rank_profile(trace)
