"""Which steps every rank recorded: a rank whose trace holds fewer steps than its peers' (its profiler stopped
early, its file was exported before the last step, a cut lost them) is named, and the ranks are compared on the
steps they all have.

Comparing ranks over different steps compares different work: a rank that lacks the job's slowest step looks
fast, and its peers' last step (often longer: a checkpoint, the profiler's own flush) has no partner. So when
the ranks that have step metrics share at least one step, the step metrics keep only the shared steps (every
per-rank mean, share, spread and straggler statistic is then over the same steps) and the report says which
ranks lacked which steps (``job.step_coverage``, rule LOAD005). When they share none (profiler windows that
never met), nothing is dropped and the note says so.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    import pandas as pd



def step_coverage(sm: pd.DataFrame, ranks: Optional[list[int]] = None) -> Optional[dict]:
    """``{"common_steps", "all_steps", "missing": [{"rank", "steps"}], "compared": "common" | "all",
    "left_out": [ranks with no step at all]}`` when
    some rank lacks a step another rank has; None when every rank recorded the same steps (or there are no
    ProfilerStep windows: a whole-trace row is step -1). ``ranks``: the job's ranks; one with no step in the
    metrics at all (a cut lost them all) lacks every step and is left out of the common set."""
    if sm is None or not len(sm):
        return None
    rows = sm[sm["step"] >= 0]
    if not len(rows):
        return None
    have = {int(r): set(int(s) for s in g["step"]) for r, g in rows.groupby("rank", sort=True)}
    every = set().union(*have.values())
    common = set.intersection(*have.values())
    empty = sorted(set(int(r) for r in ranks or []) - set(have))
    if len(have) < 2 and not empty:
        return None
    missing = sorted([{"rank": r, "steps": sorted(every - s)} for r, s in have.items() if every - s] +
                     [{"rank": r, "steps": sorted(every)} for r in empty], key=lambda m: m["rank"])
    if not missing:
        return None
    return {"common_steps": sorted(common), "all_steps": sorted(every), "missing": missing,
            "compared": "common" if common else "all", "left_out": empty}


def common_only(sm: pd.DataFrame, coverage: Optional[dict]) -> pd.DataFrame:
    """The step metrics restricted to the steps every rank has (unchanged when they share none). Whole-trace
    rows (step -1) are kept."""
    if coverage is None or coverage["compared"] != "common":
        return sm
    keep = sm["step"].isin(coverage["common_steps"]) | (sm["step"] < 0)
    return sm[keep].reset_index(drop=True)


def note(coverage: dict) -> str:
    """One line for the report's warnings."""
    parts = [f"rank {m['rank']} lacks step{'s' if len(m['steps']) > 1 else ''} "
             f"{', '.join(str(s) for s in m['steps'][:8])}{' …' if len(m['steps']) > 8 else ''}"
             for m in coverage["missing"][:6]]
    more = f" (and {len(coverage['missing']) - 6} more rank(s))" if len(coverage["missing"]) > 6 else ""
    left = coverage.get("left_out") or []
    if left:  # a rank with no step left (a cut lost them all) is not part of "every rank"
        from rules.phrases import ranks_text
        parts = [f"{ranks_text(left)} {'has' if len(left) == 1 else 'have'} no step left to compare and "
                 f"{'is' if len(left) == 1 else 'are'} left out"] + \
            [p for m, p in zip(coverage["missing"][:6], parts) if m["rank"] not in left]
    if coverage["compared"] == "common":
        tail = (f"the {'other ' if left else ''}ranks are compared on the {len(coverage['common_steps'])} step(s) "
                f"{'they all have' if left else 'every rank has'} ({_steps_text(coverage['common_steps'])})")
    else:
        tail = "the ranks share no step, so each rank's metrics are over its own steps"
    return f"ranks recorded different steps: {'; '.join(parts)}{more}; {tail}"


def _steps_text(steps: list[int]) -> str:
    from rules.phrases import ranks_text
    return ranks_text(steps).replace("ranks ", "").replace("rank ", "")
