"""What a trace cut off mid-write lost: the steps its metrics must leave out, and the collectives still trusted.

Kineto writes a trace thread by thread (each thread's events in time order, the thread names first), so a
file cut mid-write keeps the threads written before the cut whole, the thread at the cut up to its last
complete event, and nothing of the threads written after it. Hence a cut damages:
- the step at the cut (partial) and every later step (its window may survive, e.g. on the CPU track, while
  the GPU events past the cut are gone): excluded;
- every step, when a thread the file names left no event at all (its part of the file came after the cut):
  each step misses that thread's events (a gloo worker's collectives, a stream's kernels), so all are excluded
  and the rank's collectives cannot be put in order.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    import pandas as pd

PARTIAL = "partial: the file was cut inside this step"
PAST = "past the cut: the events after it were lost"


@dataclass
class CutDamage:
    """One cut-off trace: where it stopped, what it lost, and which of its steps the metrics leave out."""

    rank: int
    path: str
    cut_at_ns: int                   # local clock: on the cut thread nothing starting later was kept
    cut_thread: int
    lost_threads: list[int]
    excluded: dict[int, str] = field(default_factory=dict)   # step -> reason
    lost_steps: list[int] = field(default_factory=list)      # steps the other ranks have and this file lost

    def collectives_trusted(self) -> bool:
        """False when a whole thread was lost: the rank's collectives are then an unknown subset."""
        return not self.lost_threads

    def to_dict(self) -> dict:
        """JSON form (report `ranks[].cut`): times in µs on the rank's own clock."""
        return {"cut_at_us": self.cut_at_ns / 1e3, "cut_thread": self.cut_thread, "lost_threads": self.lost_threads,
                "excluded_steps": [{"step": s, "reason": r} for s, r in sorted(self.excluded.items())],
                "lost_steps": self.lost_steps}


def assess(rank: int, trace: Any) -> Optional[CutDamage]:
    """The damage of one trace, or None when it was not cut (or only its tail after the last event was lost)."""
    sv = trace.salvage or {}
    if sv.get("cut_at_ns") is None:
        return None
    cut = int(sv["cut_at_ns"])
    lost = [int(t) for t in sv.get("lost_tids") or []]
    d = CutDamage(rank, trace.path, cut, int(sv.get("cut_tid", -1)), lost)
    st = trace.steps
    for s, a, b in zip(st["step"], st["start"], st["end"]):
        if a >= cut:
            d.excluded[int(s)] = PAST
        elif b > cut:
            d.excluded[int(s)] = PARTIAL
        elif lost:
            d.excluded[int(s)] = (f"every event of thread{'s' if len(lost) > 1 else ''} "
                                  f"{', '.join(str(t) for t in lost)} was lost (written after the cut)")
    return d


def assess_job(traces: dict[int, Any]) -> dict[int, CutDamage]:
    """Damage per cut-off rank, with the steps the other ranks recorded that its file lost."""
    out = {r: d for r, t in traces.items() if (d := assess(r, t)) is not None}
    if out:
        every = set()
        for t in traces.values():
            every |= {int(s) for s in t.steps["step"]}
        for r, d in out.items():
            have = {int(s) for s in traces[r].steps["step"]}
            last = max(have) if have else None
            d.lost_steps = sorted(s for s in every - have if last is None or s > last)
    return out


def drop_excluded(step_metrics: pd.DataFrame, damage: dict[int, CutDamage]) -> pd.DataFrame:
    """The per-step metrics without the steps a cut damaged."""
    if not damage or step_metrics is None or not len(step_metrics):
        return step_metrics
    bad = [(r, s) for r, d in damage.items() for s in d.excluded]
    import pandas as pd
    keys = pd.MultiIndex.from_arrays([step_metrics["rank"], step_metrics["step"]])
    return step_metrics[~keys.isin(bad)].reset_index(drop=True)
