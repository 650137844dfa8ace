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
    """MEMORY_STEP_COLUMNS per (device, step) of one trace; None when it has no memory events.

    Numpy only, a few int64 temporaries per event (two sorts), so 10^6 events cost tens of MB here, not a grouped
    DataFrame's copies.
    """
    mem = getattr(trace, "memory", None)
    if mem is None or not len(mem):
        return None
    steps = trace.steps
    if steps is None or not len(steps):
        return _empty()
    ts, alloc = mem["ts"].to_numpy(), mem["allocated"].to_numpy()
    st = steps.drop_duplicates("step").sort_values("start")
    s0, e0, n0 = st["start"].to_numpy(), st["end"].to_numpy(), st["step"].to_numpy()
    k = np.searchsorted(s0, ts, side="right") - 1
    sel = (k >= 0) & ~mem["oom"].to_numpy() & (alloc >= 0)
    sel &= ts < e0[np.maximum(k, 0)]
    idx = np.flatnonzero(sel)
    if not len(idx):
        return _empty()
    del sel
    dt = mem["device_type"].to_numpy()[idx].astype(np.int64)
    di = mem["device_id"].to_numpy()[idx].astype(np.int64)
    dev = (dt << 32) + (di + 1)
    devs, dev_code = np.unique(dev, return_inverse=True)
    key = dev_code.astype(np.int64) * len(s0) + k[idx]
    del dt, di, dev, dev_code
    a = alloc[idx]
    order = np.lexsort((-a, key))  # by (device, step), the most allocated first (ties: the earliest)
    ks = key[order]
    starts = np.flatnonzero(np.r_[True, ks[1:] != ks[:-1]])
    counts = np.diff(np.r_[starts, len(ks)])
    peak = idx[order[starts]]
    del order, ks
    by_time = np.argsort(key, kind="stable")  # by (device, step), in time order
    first, last = idx[by_time[starts]], idx[by_time[starts + counts - 1]]
    res_all = mem["reserved"].to_numpy()
    peak_res = np.maximum.reduceat(res_all[idx[by_time]], starts)
    del by_time
    g_key = np.unique(key)  # the groups in the same (device, step) order as starts
    dev_of, step_i = g_key // len(s0), g_key % len(s0)
    b = mem["bytes"].to_numpy()
    out = pd.DataFrame({
        "device_type": (devs[dev_of] >> 32).astype(np.int64),
        "device_id": ((devs[dev_of] & 0xFFFFFFFF) - 1).astype(np.int64),
        "step": n0[step_i].astype(np.int64),
        "start_ns": s0[step_i], "end_ns": e0[step_i], "peak_ns": ts[peak],
        "allocated_start": alloc[first] - b[first], "allocated_end": alloc[last],
        "peak_allocated": alloc[peak], "reserved_at_peak": res_all[peak], "peak_reserved": peak_res,
        "peak_bytes": b[peak], "n_events": counts})
    out["peak_op"] = _peak_ops(getattr(trace, "memory_ops", None), ts[peak], mem["tid"].to_numpy()[peak])
    out = out.sort_values(["device_type", "device_id", "step"], kind="stable").reset_index(drop=True)
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
