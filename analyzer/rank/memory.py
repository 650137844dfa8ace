"""One rank's memory events reduced per device and step, where the trace was parsed (the parent never holds them).

Per (device, step) row: the allocator's allocated bytes at the step's start and end, its peak allocated and the
reserved bytes then, the step's peak reserved, the allocation that made the peak (its size, and the innermost CPU
operator around it on the same thread when the trace kept them) and the event count. A trace with 10^6 memory
events comes back as a few rows per step, whatever its size. ``[OutOfMemory]`` events come back as they are (few).
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
import pandas as pd


#: the per-step memory table's columns (docs/json-schema.md `memory.per_rank[].steps`)
MEMORY_STEP_COLUMNS = ("device_type", "device_id", "step", "start_ns", "end_ns", "peak_ns", "allocated_start",
                       "allocated_end", "peak_allocated", "reserved_at_peak", "peak_reserved", "peak_bytes",
                       "peak_op", "n_events")
DEVICE_NAMES = {0: "cpu", 1: "cuda"}


def device_name(device_type: int, device_id: int) -> str:
    """'cuda:1', 'cpu' (Kineto's c10 DeviceType codes; other codes by number)."""
    name = DEVICE_NAMES.get(int(device_type), f"device{int(device_type)}")
    return name if device_id < 0 else f"{name}:{int(device_id)}"


def _empty() -> pd.DataFrame:
    return pd.DataFrame({k: pd.Series([], dtype=object if k == "peak_op" else np.int64)
                         for k in MEMORY_STEP_COLUMNS})


#: allocation primitives: the operator named for a peak is the innermost one that is not one of these
_PRIMITIVES = {"aten::empty", "aten::empty_strided", "aten::empty_like", "aten::new_empty", "aten::new_empty_strided",
               "aten::resize_", "aten::zeros", "aten::zeros_like", "aten::ones", "aten::ones_like", "aten::full",
               "aten::new_zeros", "aten::new_full", "aten::zero_", "aten::fill_"}


def _peak_ops(ops: Optional[pd.DataFrame], ts: np.ndarray, tid: np.ndarray) -> list:
    """The innermost CPU operator around each time on its thread (None where none, or no operators kept)."""
    out: list = [None] * len(ts)
    if ops is None or not len(ops):
        return out
    o_tid, o_s, o_e, o_n = (ops[k].to_numpy() for k in ("tid", "start", "end", "name"))
    prim = ops["name"].isin(_PRIMITIVES).to_numpy()
    for i, (t, th) in enumerate(zip(ts.tolist(), tid.tolist())):
        m = (o_tid == th) & (o_s <= t) & (o_e >= t) & ~prim
        if m.any():
            k = np.flatnonzero(m)
            out[i] = str(o_n[k[np.argmax(o_s[k])]])  # latest start: the innermost
    return out


def _step_of(steps: pd.DataFrame, t: np.ndarray) -> np.ndarray:
    """ProfilerStep number containing each time (−1 outside every step)."""
    st = steps.sort_values("start")
    s, e, n = st["start"].to_numpy(), st["end"].to_numpy(), st["step"].to_numpy()
    k = np.searchsorted(s, t, side="right") - 1
    ok = (k >= 0) & (t < e[np.maximum(k, 0)])
    return np.where(ok, n[np.maximum(k, 0)], -1).astype(np.int64)


def memory_steps(trace: Any) -> Optional[pd.DataFrame]:
    """MEMORY_STEP_COLUMNS per (device, step) of one trace; None when it has no memory events."""
    mem = getattr(trace, "memory", None)
    if mem is None or not len(mem):
        return None
    mem = mem[~mem["oom"].to_numpy() & (mem["allocated"].to_numpy() >= 0)]
    steps = trace.steps
    if not len(mem) or steps is None or not len(steps):
        return _empty()
    step = _step_of(steps, mem["ts"].to_numpy())
    inside = step >= 0
    if not inside.any():
        return _empty()
    m = mem[inside].assign(step=step[inside])
    g = m.groupby(["device_type", "device_id", "step"], sort=True)
    first = g.head(1).set_index(["device_type", "device_id", "step"])
    last = g.tail(1).set_index(["device_type", "device_id", "step"])
    peak_i = g["allocated"].idxmax()
    peak = m.loc[peak_i.to_numpy()].set_index(["device_type", "device_id", "step"])
    out = pd.DataFrame({
        "allocated_start": first["allocated"] - first["bytes"],
        "allocated_end": last["allocated"],
        "peak_allocated": peak["allocated"],
        "reserved_at_peak": peak["reserved"],
        "peak_reserved": g["reserved"].max(),
        "peak_bytes": peak["bytes"],
        "peak_ns": peak["ts"],
        "n_events": g.size(),
    }).reset_index()
    st = steps.drop_duplicates("step").set_index("step")
    out["start_ns"] = st.loc[out["step"], "start"].to_numpy()
    out["end_ns"] = st.loc[out["step"], "end"].to_numpy()
    out["peak_op"] = _peak_ops(getattr(trace, "memory_ops", None), peak["ts"].to_numpy(), peak["tid"].to_numpy())
    return out[list(MEMORY_STEP_COLUMNS)].astype({k: np.int64 for k in MEMORY_STEP_COLUMNS if k != "peak_op"})


def memory_ooms(trace: Any) -> list[dict]:
    """The trace's ``[OutOfMemory]`` events: ts (ns), the step they fall in (None outside steps), device, bytes
    asked, allocated and reserved then (at most 100)."""
    mem = getattr(trace, "memory", None)
    if mem is None or not mem["oom"].any():
        return []
    o = mem[mem["oom"].to_numpy()].head(100)
    steps = trace.steps
    st = _step_of(steps, o["ts"].to_numpy()) if steps is not None and len(steps) else [-1] * len(o)
    return [{"ts_ns": int(r.ts), "step": int(k) if k >= 0 else None, "device": device_name(r.device_type, r.device_id),
             "bytes": int(r.bytes), "allocated": int(r.allocated), "reserved": int(r.reserved)}
            for r, k in zip(o.itertuples(), st)]
