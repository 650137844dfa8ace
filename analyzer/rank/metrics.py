"""Per-rank, per-step metrics exactly as docs/metrics.md defines them (vectorised over steps)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from analyzer.rank import intervals as iv
from parsers.collective_names import WAIT_OP, comm_op_mask
from parsers.kineto import KinetoTrace

#: Columns of the per-step table; durations are int64 nanoseconds, shares are fractions (NaN when undefined).
STEP_COLUMNS = [
    "rank", "step", "start", "end", "step_time_ns", "compute_ns", "comm_ns", "overlap_ns", "exposed_comm_ns",
    "overlap_coverage", "comm_share", "exposed_comm_share", "memcpy_ns", "busy_ns", "idle_ns", "whole_trace",
]


def kind_sets(trace: KinetoTrace) -> dict[str, iv.Intervals]:
    """Normalised interval sets of the trace's activity: compute, comm, memcpy (memcpy ∪ memset), all."""
    a = trace.activity
    kind = a["kind"].to_numpy()
    s = a["start"].to_numpy()
    e = a["end"].to_numpy()

    def u(mask: np.ndarray) -> iv.Intervals:
        return iv.union(s[mask], e[mask])

    compute, comm = u(kind == "compute"), u(kind == "comm")
    if getattr(trace, "device_type", None) == "cpu" and len(a):  # nested CPU ops: comm inside compute is comm
        cmask = kind == "compute"
        names = getattr(trace, "names", None)
        ids = a["name_id"].to_numpy()[cmask]
        is_comm = comm_op_mask(names if names is not None else [])  # per distinct name, not per event
        op = is_comm[ids] if len(is_comm) and len(ids) and ids.max() < len(is_comm) else np.zeros(len(ids), bool)
        thread = a["stream"].to_numpy()[cmask]
        cc = getattr(trace, "cpu_comm", None)  # c10d waits the parser keeps apart, on the compute threads only
        own = cc[np.isin(cc["tid"].to_numpy(), np.unique(thread)) & cc["name"].astype(str).str.match(WAIT_OP)
                 .to_numpy(bool)] if cc is not None and len(cc) else None
        waits = iv.union(own["start"].to_numpy(), own["end"].to_numpy()) if own is not None and len(own) else None
        compute, ops = iv.exclusive_compute(s[cmask], e[cmask], thread, op, comm, waits)
        comm = iv.union(np.concatenate([comm[0], ops[0]]), np.concatenate([comm[1], ops[1]]))
    return {
        "compute": compute,
        "comm": comm,
        "memcpy": u((kind == "memcpy") | (kind == "memset")),
        "all": iv.union(s, e),
    }


def step_windows(trace: KinetoTrace) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """(step numbers, window starts, window ends, whole_trace?) — the whole trace when there is no ProfilerStep."""
    st = trace.steps
    if len(st):
        return st["step"].to_numpy(), st["start"].to_numpy(), st["end"].to_numpy(), False
    if hasattr(trace, "n_activities"):  # a RankSummary (analyzer/rank/summary.py): its span, no activity table
        if not trace.n_activities or trace.activity_start is None:
            return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int64), True
        return (np.array([-1]), np.array([trace.activity_start], np.int64), np.array([trace.activity_end], np.int64),
                True)
    a = trace.activity
    if not len(a):
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int64), True
    return np.array([-1]), np.array([a["start"].min()]), np.array([a["end"].max()]), True


def rank_step_metrics(trace: KinetoTrace) -> pd.DataFrame:
    """One row per step (or one whole-trace row) with the metrics of docs/metrics.md."""
    steps, lo, hi, whole = step_windows(trace)
    sets = kind_sets(trace)
    overlap_set = iv.intersect(sets["comm"], sets["compute"])
    compute = iv.clipped_lengths(sets["compute"], lo, hi)
    comm = iv.clipped_lengths(sets["comm"], lo, hi)
    overlap = iv.clipped_lengths(overlap_set, lo, hi)
    memcpy = iv.clipped_lengths(sets["memcpy"], lo, hi)
    busy = iv.clipped_lengths(sets["all"], lo, hi)
    step_time = hi - lo
    exposed = comm - overlap
    with np.errstate(invalid="ignore", divide="ignore"):
        coverage = np.where(comm > 0, overlap / np.maximum(comm, 1), np.nan)
        share = np.where(step_time > 0, comm / np.maximum(step_time, 1), np.nan)
        exposed_share = np.where(step_time > 0, exposed / np.maximum(step_time, 1), np.nan)
    df = pd.DataFrame({
        "rank": np.full(len(steps), -1 if trace.rank is None else trace.rank, dtype=np.int64),
        "step": steps.astype(np.int64), "start": lo, "end": hi, "step_time_ns": step_time,
        "compute_ns": compute, "comm_ns": comm, "overlap_ns": overlap, "exposed_comm_ns": exposed,
        "overlap_coverage": coverage, "comm_share": share, "exposed_comm_share": exposed_share,
        "memcpy_ns": memcpy, "busy_ns": busy, "idle_ns": step_time - busy,
        "whole_trace": np.full(len(steps), whole),
    })
    return df[STEP_COLUMNS]
