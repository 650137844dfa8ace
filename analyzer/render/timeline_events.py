"""The merged timeline's events: track ids, names made printable, and the frames and Chrome-trace slices every
part of the writer builds (analyzer/render/timeline.py plans the file, timeline_parts.py makes each rank's and
partition's pieces where they are kept; both build their events with these)."""
from __future__ import annotations

import functools
from typing import Any, Optional

import numpy as np
import pandas as pd

from analyzer.render.common import printable

MAX_NAME = 300

#: thread ids inside a rank's process (names and real ids in thread_name metadata); a track whose slices overlap
#: without nesting continues on tid + k * LANE
TID_CPU, TID_STEPS, TID_STREAM0, TID_HOST0, TID_GROUP0, TID_WAITS = 1, 2, 100, 1_000, 10_000, 20_000
LANE = 1_000_000


def _name(x: Any) -> str:
    return _text(x) if isinstance(x, str) else _text(str(x))


@functools.lru_cache(maxsize=65536)
def _text(x: str) -> str:
    """A name from the input made printable and at most MAX_NAME long (names repeat: computed once each)."""
    t = printable(x)
    return t if len(t) <= MAX_NAME else t[:MAX_NAME - 1] + "…"


def _meta(pid: int, tid: Optional[int], what: str, value: Any) -> dict:
    ev = {"ph": "M", "pid": pid, "name": what, "args": {"name" if what.endswith("_name") else "sort_index": value}}
    if tid is not None:
        ev["tid"] = tid
    return ev


def _us(ns: np.ndarray, t0: int) -> np.ndarray:
    return np.round((np.asarray(ns, dtype=np.int64) - t0) / 1000.0, 3)


def flow_start(lo: np.ndarray, hi: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Where a flow leaves its slice [lo, hi) (ns): ``want`` when inside it, else the slice's middle.

    Perfetto binds a flow's start to the slice enclosing its time, its begin included and its end not: a time
    on the slice's end (a launch call that returns before its kernel starts) may bind to none or to the next
    slice, so such an arrow starts in the middle instead (strictly inside; rounded down to whole ns, inside for
    slices of 2 ns and more). ``want`` on the slice's begin stays (a collective whose next member arrived at
    the same time: the arrow must not start after it ends)."""
    lo, hi, want = (np.asarray(x, dtype=np.int64) for x in (lo, hi, want))
    mid = lo + (hi - lo) // 2
    return np.where((want >= lo) & (want < hi), want, mid)


def _slices(df: pd.DataFrame, t0: int) -> list[dict]:
    """Complete ('X') events from a frame with pid, tid, name, cat, start, end (ns) and optional args."""
    if df.empty:
        return []
    out = pd.DataFrame({"ph": "X", "pid": df["pid"].to_numpy(), "tid": df["tid"].to_numpy(),
                        "name": df["name"].to_numpy(), "cat": df["cat"].to_numpy(),
                        "ts": _us(df["start"].to_numpy(), t0),
                        "dur": np.maximum(np.round((df["end"].to_numpy() - df["start"].to_numpy()) / 1000.0, 3), 0.0)})
    recs = out.to_dict(orient="records")
    if "args" in df:
        for r, a in zip(recs, df["args"].to_numpy()):
            if a:
                r["args"] = a
    return recs


def _sample_ranks(ranks: list[int], keep: int, must: list[int]) -> list[int]:
    """``keep`` ranks: those the findings name first (worst finding first), then evenly spaced ones."""
    have = set(ranks)
    chosen = list(dict.fromkeys(r for r in must if r in have))[:keep]
    rest = [r for r in ranks if r not in set(chosen)]
    need = keep - len(chosen)
    if need > 0 and rest:
        idx = np.unique(np.linspace(0, len(rest) - 1, num=min(need, len(rest))).round().astype(int))
        chosen += [rest[i] for i in idx]
    return sorted(chosen)



def _lanes(keys: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per slice, the lane (0, 1, …) of its track that keeps every lane properly nested: a slice that starts inside
    another and ends after it would be dropped by Perfetto's importer, so it moves to the next free lane."""
    n = len(keys)
    lane = np.zeros(n, dtype=np.int64)
    if n < 2:
        return lane
    order = np.lexsort((-end, start, keys))
    ks, ss, es = keys[order], start[order], end[order]
    stacks: list[list[int]] = []
    cur = None
    out = np.zeros(n, dtype=np.int64)
    for i in range(n):
        k, s_, e_ = ks[i], ss[i], es[i]
        if k != cur:
            cur, stacks = k, []
        for j, st in enumerate(stacks):
            while st and st[-1] <= s_:
                st.pop()
            if not st or e_ <= st[-1]:
                st.append(e_)
                out[i] = j
                break
        else:
            stacks.append([e_])
            out[i] = len(stacks) - 1
    lane[order] = out
    return lane


def _nest(df: pd.DataFrame, threads: dict) -> None:
    """Move slices that overlap without nesting to extra lanes of their track (in place), naming the lanes."""
    if len(df) < 2:
        return
    pid, tid = df["pid"].to_numpy(dtype=np.int64), df["tid"].to_numpy(dtype=np.int64)
    lane = _lanes(pid * (1 << 32) + tid, df["start"].to_numpy(), np.maximum(df["end"].to_numpy(),
                                                                            df["start"].to_numpy()))
    if not lane.any():
        return
    df["tid"] = tid + lane * LANE
    for (p_, t_, k) in {(int(a), int(b), int(c)) for a, b, c in zip(pid, tid, lane) if c}:
        base_name, sort = threads.get((p_, t_), (f"thread {t_}", t_))
        threads[(p_, t_ + k * LANE)] = (f"{base_name} (overlapping, {k + 1})", sort)


def _frame(pid, tid, start, end, name, cat, args=None) -> pd.DataFrame:
    df = pd.DataFrame({"pid": np.asarray(pid, dtype=np.int64) if np.ndim(pid) else pid,
                       "tid": np.asarray(tid, dtype=np.int64) if np.ndim(tid) else tid,
                       "start": np.asarray(start, dtype=np.int64), "end": np.asarray(end, dtype=np.int64),
                       "name": name, "cat": cat})
    if args is not None:
        df["args"] = list(args)
    return df


def _clean_args(a: dict) -> dict:
    """Input-derived argument values made printable (numbers kept; the keys are the readers' own names)."""
    return {k: (v if isinstance(v, (int, float, bool)) else _text(str(v))) for k, v in a.items()}
