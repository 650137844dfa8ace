"""Kernel and idle-time breakdowns of ONE rank's trace (pure functions: no other rank is needed).

``kernel_breakdown``: time per activity name (kernel, memcpy, CPU op of a gloo trace) — count, total, mean, min,
max, spread and share of the rank's activity time, like HTA's kernel breakdown but per step window.
``idle_breakdown``: the step's GPU idle time (``idle`` of docs/metrics.md: no activity on any stream) split by what
the device was waiting for: the host to launch work (``host_wait``), the host being inside a collective call
(``peer_wait``: waiting on other ranks, or enqueuing), launch latency of already-queued work (``kernel_wait``),
and the rest (``other``). The four parts add up to ``idle`` exactly. Definitions: docs/api.md.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analyzer.rank import intervals as iv
from analyzer.rank.metrics import step_windows
from parsers.kineto import KinetoTrace

#: A gap of at most this length before work that was already queued is launch latency between kernels (HTA's
#: "kernel wait" uses 30 µs on its data); a longer one waits on something the trace does not show.
KERNEL_WAIT_NS = 30_000

KERNEL_COLUMNS = ["rank", "name", "kind", "count", "total_ns", "mean_ns", "min_ns", "max_ns", "std_ns", "share"]
IDLE_COLUMNS = ["rank", "step", "idle_ns", "host_wait_ns", "peer_wait_ns", "kernel_wait_ns", "other_ns"]
_I64_MAX = np.iinfo(np.int64).max


def _rank(trace: KinetoTrace) -> int:
    return -1 if trace.rank is None else int(trace.rank)


def kernel_breakdown(trace: KinetoTrace, within_steps: bool = True) -> pd.DataFrame:
    """One row per activity name: count, summed / mean / min / max / std duration (ns) and share of the rank's
    summed activity time; the longest first. ``within_steps``: only activity starting inside a step window
    (the windows of the step metrics); False: the whole trace."""
    a = trace.activity
    if not len(a):
        return pd.DataFrame({c: [] for c in KERNEL_COLUMNS})
    start = a["start"].to_numpy()
    dur = (a["end"].to_numpy() - start).astype(np.int64)
    keep = np.ones(len(a), dtype=bool)
    if within_steps and len(trace.steps):
        st = trace.steps.sort_values("start")
        lo, hi = st["start"].to_numpy(), st["end"].to_numpy()
        k = np.searchsorted(lo, start, side="right") - 1
        keep = (k >= 0) & (start < hi[np.maximum(k, 0)])
    names = np.asarray(trace.names, dtype=object)
    df = pd.DataFrame({"name_id": a["name_id"].to_numpy()[keep], "kind": a["kind"].to_numpy()[keep].astype(str),
                       "dur": dur[keep]})
    if df.empty:
        return pd.DataFrame({c: [] for c in KERNEL_COLUMNS})
    g = df.groupby(["name_id", "kind"], sort=False)["dur"]
    out = g.agg(count="size", total_ns="sum", mean_ns="mean", min_ns="min", max_ns="max", std_ns="std").reset_index()
    out["std_ns"] = out["std_ns"].fillna(0.0)
    out["name"] = names[out["name_id"].to_numpy()]
    all_time = float(out["total_ns"].sum())
    out["share"] = out["total_ns"] / all_time if all_time > 0 else np.nan
    out["rank"] = _rank(trace)
    out = out.sort_values(["total_ns", "name"], ascending=[False, True], kind="stable").reset_index(drop=True)
    return out[KERNEL_COLUMNS]


def _gap_categories(trace: KinetoTrace, lo: int, hi: int) -> dict[str, iv.Intervals]:
    """The device's idle gaps inside [lo, hi), as four disjoint interval sets (host, peer, kernel, other)."""
    a = trace.activity
    s_all = a["start"].to_numpy()
    busy = iv.union(s_all, a["end"].to_numpy())
    bs, be = busy
    # gap k lies between busy block k-1 and block k; the first starts at lo, the last (after every block) ends at hi
    gs = np.concatenate([[min(lo, bs[0]) if bs.size else lo], be])
    ge = np.concatenate([bs, [max(hi, be[-1]) if be.size else hi]])
    n = gs.size
    # earliest launch among the events that start the block after each gap (-1: unknown)
    launch = a["launch_start"].to_numpy() if "launch_start" in a else np.full(len(a), -1, np.int64)
    order = np.argsort(s_all, kind="stable")
    s_sorted = s_all[order]
    l_sorted = np.where(launch[order] >= 0, launch[order], _I64_MAX)
    next_launch = np.full(n, _I64_MAX, dtype=np.int64)
    if bs.size:
        starts, idx = np.unique(s_sorted, return_index=True)
        per_start = np.minimum.reduceat(l_sorted, idx)
        next_launch[:-1] = per_start[np.searchsorted(starts, bs)]
    known = next_launch != _I64_MAX
    late = known & (next_launch > gs)            # the host launched the next work only after the GPU went idle
    host_end = np.where(late, np.minimum(next_launch, ge), gs)
    host = iv.union(gs[late], host_end[late])
    latency = iv.union(host_end[late], ge[late])  # launched during the gap: launch-to-start latency
    queued = known & ~late
    short = queued & (ge - gs <= KERNEL_WAIT_NS)
    kernel = iv.union(np.concatenate([latency[0], gs[short]]), np.concatenate([latency[1], ge[short]]))
    other = iv.union(gs[~known | (queued & ~short)], ge[~known | (queued & ~short)])
    cc = trace.cpu_comm
    peer = iv.empty()
    if len(cc) and host[0].size:
        tids = set(a["launch_tid"].to_numpy()[launch >= 0].tolist()) if "launch_tid" in a else set()
        mine = cc[cc["tid"].isin(tids)] if tids else cc
        peer = iv.intersect(host, iv.union(mine["start"].to_numpy(), mine["end"].to_numpy()))
        host = iv.difference(host, peer)
    return {"host_wait": host, "peer_wait": peer, "kernel_wait": kernel, "other": other}


def idle_breakdown(trace: KinetoTrace) -> pd.DataFrame:
    """Per step (the step metrics' windows): idle time and its four parts, int64 ns (see the module docstring)."""
    steps, lo, hi, _ = step_windows(trace)
    if not len(steps):
        return pd.DataFrame({c: [] for c in IDLE_COLUMNS})
    a = trace.activity
    busy = iv.union(a["start"].to_numpy(), a["end"].to_numpy())
    idle = (hi - lo) - iv.clipped_lengths(busy, lo, hi)
    out = {"rank": np.full(len(steps), _rank(trace), dtype=np.int64), "step": steps.astype(np.int64),
           "idle_ns": idle.astype(np.int64)}
    if len(a):
        cats = _gap_categories(trace, int(lo.min()), int(hi.max()))
        for name, ivs in cats.items():
            out[f"{name}_ns"] = iv.clipped_lengths(ivs, lo, hi).astype(np.int64)
    else:
        for name in ("host_wait", "peer_wait", "kernel_wait"):
            out[f"{name}_ns"] = np.zeros(len(steps), np.int64)
        out["other_ns"] = out["idle_ns"].copy()
    return pd.DataFrame(out)[IDLE_COLUMNS]
