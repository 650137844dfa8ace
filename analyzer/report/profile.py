"""The report's `profile` section: what ran per step, by name, so a later run can be diffed against this one.

`kernels`: every activity name (GPU kernels and copies; the outermost CPU operators of a CPU-only trace) with its count and time
per step, averaged over the traced ranks (only activity starting inside a step window; the whole trace when there
are no steps). The longest `MAX_NAMES` are kept, names cut at `NAME_CHARS`, so a 10,000-rank job's report stays small.
"""
from __future__ import annotations

from typing import Any

MAX_NAMES = 200
NAME_CHARS = 240


def profile_section(job: Any) -> dict:
    """{kernels: [{name, kind, count_per_step, time_per_step_us}], ranks, steps_per_rank}; {} without traces."""
    frames = []
    n_ranks = 0
    steps_total = 0
    if not job.traces:
        return {}
    from analyzer.rank.profile import profile_of  # the trace path only: pandas
    for t in job.traces.values():
        got = profile_of(t)
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
