"""Which pipeline stage's own extra work makes the other stages wait: the straggler of a pipeline.

Send/recv give no collective hold-ups (a receiver waiting for its sender is the schedule, not a straggler), so a
stage is judged by its own time per step against the other stages' and by the waiting it causes:

- cause: per step, the stage's **off-schedule work** (its busy time beyond its typical micro-batch blocks,
  pipeline_blocks.off_schedule_work: a partition-heavy stage does more in every block and has none) or its **host
  time** before its first compute (``first_activity_gap``), minus the median of the other stages', as a share of
  the step; judged by the consistent-excess test of the collective stragglers (excess.consistency_table: ≥ 80 %
  of ≥ 3 steps above zero, median effect ≥ 5 % of the step, ≥ 2 × its own spread, ≥ 3 standard errors of the
  peers' noise);
- effect: per step, the other stages' median time waiting in their transfers minus its own (``wait_ns`` of the
  per-step metrics, on aligned clocks), as a share of the step: at least ``MATERIAL_SHARE`` in the median and in
  at least half of the steps. A straggling stage waits least; the stages it feeds and drains wait for it.

A stage that passes both is named (the largest delay first); a heavy stage by partition stays PIPE001's.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
import pandas as pd

from analyzer.cross_rank import excess as ex
from analyzer.cross_rank import stragglers as sg
from analyzer.cross_rank.pipeline_blocks import RankBlocks


def _frames(job: Any, ranks: list[int], rbs: dict[int, RankBlocks]) -> tuple[pd.DataFrame, pd.DataFrame,
                                                                               pd.DataFrame, pd.Series]:
    """(off-schedule work, host gap, wait) per (rank, step) of the pipeline's ranks, and step → median step
    time, over the steps every one of them has in its metrics."""
    sm = job.step_metrics
    sm = sm[(sm["step"] >= 0) & sm["rank"].isin(ranks)]
    have = sm.groupby("step")["rank"].nunique()
    steps = set(int(k) for k in have[have == len(ranks)].index)
    sm = sm[sm["step"].isin(steps)]
    off = pd.DataFrame([{"rank": r, "step": k, "off_ns": float(sb.off_schedule_ns)}
                        for r in ranks if r in rbs for k, sb in rbs[r].steps.items() if k in steps],
                       columns=["rank", "step", "off_ns"])
    gap = ex.first_activity_gap(job)
    gap = gap[gap["rank"].isin(ranks) & gap["step"].isin(steps)] if len(gap) else gap
    wait = sm[["rank", "step", "wait_ns"]] if "wait_ns" in sm else pd.DataFrame(columns=["rank", "step", "wait_ns"])
    ref = sm.groupby("step")["step_time_ns"].median()
    return off, gap, wait, ref


def _delays(wait: pd.DataFrame, ref: pd.Series) -> pd.DataFrame:
    """steps × ranks: the other stages' median wait minus the rank's own, over the step's median step time."""
    piv = wait.pivot_table(index="step", columns="rank", values="wait_ns", aggfunc="sum").dropna()
    if piv.shape[1] < 2 or not len(piv):
        return pd.DataFrame()
    vals = piv.to_numpy(float)
    n = vals.shape[1]
    stack = np.repeat(vals[:, None, :], n, axis=1)
    stack[:, np.arange(n), np.arange(n)] = np.nan
    others = np.nanmedian(stack, axis=2)
    r = ref.reindex(piv.index).to_numpy(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = (others - vals) / r[:, None]
    return pd.DataFrame(out, index=piv.index, columns=piv.columns).dropna()


def stage_straggler(job: Any, positions: list[list[int]], rbs: dict[int, RankBlocks]) -> Optional[dict]:
    """The pipeline's straggling stage (see the module docstring), or None: rank, stage, attribution (compute
    for off-schedule work, host for the host gap), delay_share, steps_delaying, steps, the excess columns of
    excess.consistency_table, confidence and evidence."""
    ranks = [r for rk in positions for r in rk if r in rbs]
    sm = getattr(job, "step_metrics", None)
    if len(ranks) < 2 or sm is None or not len(sm) or "wait_ns" not in sm or "step_time_ns" not in sm:
        return None
    off, gap, wait, ref = _frames(job, ranks, rbs)
    if len(ref) < ex.MIN_STEPS:
        return None
    cons = ex.consistency_table((("compute", off, "off_ns"), ("host", gap, "gap_ns")), ref)
    dl = _delays(wait, ref)
    if not len(cons) or not len(dl):
        return None
    stage_of = {r: s for s, rk in enumerate(positions) for r in rk}
    cands = []
    for row in cons[cons["consistent"]].itertuples(index=False):
        r = int(row.rank)
        if r not in dl.columns:
            continue
        d = dl[r].to_numpy(float)
        share = float(np.median(d))
        hit = int((d >= sg.MATERIAL_SHARE).sum())
        if share >= sg.MATERIAL_SHARE and hit >= max(1, int(np.ceil(sg.DELAY_STEPS_FRAC * len(d)))):
            cands.append((share, r, row, hit, len(d)))
    if not cands:
        return None
    share, r, row, hit, n = max(cands, key=lambda c: (c[0], -c[1]))
    conf = sg.excess_confidence(share, float(row.excess_z), int(row.excess_steps_above), int(row.excess_steps))
    what = ("work outside its micro-batch blocks (compute once per step, beyond its typical forward and "
            "backward)" if row.excess_kind == "compute" else "host time before its first compute")
    ev = (f"pipeline stage {stage_of.get(r)} (rank {r}): its {what} exceeds the other stages' median in "
          f"{int(row.excess_steps_above)} of {int(row.excess_steps)} steps by {float(row.excess_share):.1%} of "
          f"the step (median; spread ±{float(row.excess_spread):.1%}; the other stages' noise "
          f"±{float(row.excess_noise):.1%}, so {float(row.excess_z):.1f} standard errors); the other stages "
          f"wait in their transfers {share:.1%} of the step more than it does (median over {n} steps; ≥ "
          f"{sg.MATERIAL_SHARE:.0%} in {hit} of them): they wait for it")
    return {"rank": r, "stage": stage_of.get(r), "attribution": str(row.excess_kind), "delay_share": share,
            "steps_delaying": hit, "steps": n, "excess_share": float(row.excess_share),
            "excess_spread": float(row.excess_spread), "excess_noise": float(row.excess_noise),
            "excess_z": float(row.excess_z), "excess_steps": int(row.excess_steps),
            "excess_steps_above": int(row.excess_steps_above), "confidence": conf, "evidence": ev}
