"""The report's `profile` section: what ran per step, by name, so a later run can be diffed against this one.

`kernels`: every activity name (GPU kernels and copies; the outermost CPU operators of a CPU-only trace) with its count and time
per step, averaged over the traced ranks (only activity starting inside a step window; the whole trace when there
are no steps). The longest `MAX_NAMES` are kept, names cut at `NAME_CHARS`, so a 10,000-rank job's report stays small.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import numpy as np


if TYPE_CHECKING:
    import pandas as pd

MAX_NAMES = 200
NAME_CHARS = 240


def _outermost(a: pd.DataFrame) -> np.ndarray:
    """Rows not inside an earlier-starting row of the same thread (stream): the outermost CPU operators, so a
    wrapper and the op it wraps are not both counted. Vectorised: per thread, a row is nested when it starts before
    the running maximum end of the rows sorted before it."""
    import pandas as pd
    d = pd.DataFrame({"s": a["stream"].to_numpy(), "b": a["start"].to_numpy(), "e": a["end"].to_numpy()})
    d = d.sort_values(["s", "b", "e"], ascending=[True, True, False], kind="stable")
    prev = d.groupby("s", sort=False)["e"].cummax().groupby(d["s"], sort=False).shift()
    top = np.ones(len(a), dtype=bool)
    top[d.index.to_numpy()] = (prev.isna() | (d["b"] >= prev)).to_numpy()
    return top


def rank_profile(trace: Any) -> Optional[tuple[pd.DataFrame, int]]:
    """One rank's (name, kind, per_step_n, per_step_ns) rows and its step count; None without activity or steps."""
    import pandas as pd
    a = trace.activity
    from analyzer.rank.metrics import step_windows
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


def profile_section(job: Any) -> dict:
    """{kernels: [{name, kind, count_per_step, time_per_step_us}], ranks, steps_per_rank}; {} without traces."""
    frames = []
    n_ranks = 0
    steps_total = 0
    for t in job.traces.values():
        # a RankSummary brings its rows, computed where the rank was parsed (analyzer/rank/summary.py)
        got = t.profile if hasattr(t, "profile") else rank_profile(t)
        if got is None:
            continue
        n_ranks += 1
        steps_total += got[1]
        frames.append(got[0])
    if not frames:
        return {}
    import pandas as pd
    allk = pd.concat(frames, ignore_index=True)
    allk["name"] = allk["name"].astype(str).str.slice(0, NAME_CHARS)
    agg = allk.groupby(["name", "kind"], sort=False)[["per_step_n", "per_step_ns"]].sum() / n_ranks
    agg = agg.sort_values("per_step_ns", ascending=False, kind="stable").head(MAX_NAMES).reset_index()
    return {"ranks": n_ranks, "steps_per_rank": steps_total / n_ranks,
            "kernels": [{"name": n, "kind": k, "count_per_step": float(c), "time_per_step_us": float(ns) / 1e3}
                        for n, k, c, ns in zip(agg["name"], agg["kind"], agg["per_step_n"], agg["per_step_ns"])]}
