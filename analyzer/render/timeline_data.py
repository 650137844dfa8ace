"""Per-rank data for the HTML figures, taken from a loaded Job: step windows, aligned intervals, collective instances."""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
import pandas as pd

from analyzer import intervals as iv

#: ops whose instance is joined by every member of the group (send/recv pair up with one peer instead)
GROUP_OPS = {"allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "reduce", "barrier", "gather",
             "scatter", "sendrecv"}
DTYPE_BYTES = {"float": 4, "float32": 4, "half": 2, "float16": 2, "bfloat16": 2, "double": 8, "float64": 8,
               "long": 8, "int64": 8, "int": 4, "int32": 4, "byte": 1, "uint8": 1, "char": 1, "int8": 1,
               "bool": 1, "short": 2, "int16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1}
BUS_FACTOR = {"allreduce": lambda n: 2 * (n - 1) / n, "allgather": lambda n: (n - 1) / n,
              "reducescatter": lambda n: (n - 1) / n, "alltoall": lambda n: (n - 1) / n}


def offsets_ns(report: dict) -> tuple[dict[int, int], bool]:
    """Per-rank clock offsets (ns to add) from report.cross_rank.alignment; (offsets, aligned?)."""
    al = (report.get("cross_rank") or {}).get("alignment") or {}
    rows = al.get("offsets") or []
    if al.get("status") not in ("ok", "single_rank") or not rows:
        return {}, False
    return {int(r["rank"]): int(round((r.get("offset_us") or 0.0) * 1000)) for r in rows}, True


def step_window(trace: Any, step: int) -> Optional[tuple[int, int]]:
    """(start, end) ns of ProfilerStep ``step`` on this rank; the whole trace for step −1; None when absent."""
    st = trace.steps
    if step == -1 or not len(st):
        a = trace.activity
        return (int(a["start"].min()), int(a["end"].max())) if len(a) else None
    row = st[st["step"] == step]
    return (int(row["start"].iloc[0]), int(row["end"].iloc[0])) if len(row) else None


def rank_lanes(trace: Any, lo: int, hi: int) -> dict[str, iv.Intervals]:
    """Unions of compute, comm and memcpy activity clipped to [lo, hi) (own clock)."""
    a = trace.activity
    m = (a["end"].to_numpy() > lo) & (a["start"].to_numpy() < hi)
    a = a[m]
    kind = a["kind"].to_numpy()
    s, e = a["start"].to_numpy(), a["end"].to_numpy()
    out = {}
    for name, mask in (("compute", kind == "compute"), ("comm", kind == "comm"),
                       ("memcpy", (kind == "memcpy") | (kind == "memset"))):
        out[name] = iv.clip(iv.union(s[mask], e[mask]), lo, hi)
    return out


def collective_key(df: pd.DataFrame) -> pd.Series:
    """A group identity shared by every member of one process group: name + member list, else the op alone."""
    pg = df["pg_name"].astype(str) if "pg_name" in df else pd.Series("", index=df.index)
    pr = df["pg_ranks"].astype(str) if "pg_ranks" in df else pd.Series("", index=df.index)
    return pg + "|" + pr + "|" + df["op"].astype(str)


def instances(job: Any, report: dict, steps: Optional[list[int]] = None) -> pd.DataFrame:
    """Collective instances matched by (step, group key, ordinal): rank, step, key, k, start, end (aligned ns), bytes."""
    offs, aligned = offsets_ns(report)
    frames = []
    for r, t in job.traces.items():
        c = t.collectives
        if not len(c):
            continue
        c = c[c["op"].isin(GROUP_OPS)]
        wins = [(s, step_window(t, s)) for s in (steps if steps is not None else
                                                  (list(t.steps["step"]) if len(t.steps) else [-1]))]
        for s, w in wins:
            if w is None:
                continue
            sub = c[(c["start"] >= w[0]) & (c["start"] < w[1])]
            if not len(sub):
                continue
            # unaligned clocks: measure from the rank's own step start so ranks stay comparable
            shift = offs.get(r, 0) if aligned else -w[0]
            key = collective_key(sub)
            dsize = sub["dtype"].astype(str).str.lower().map(DTYPE_BYTES) if "dtype" in sub else np.nan
            nbytes = np.where(sub["in_nelems"].to_numpy() > 0, sub["in_nelems"].to_numpy() * dsize, np.nan)
            frames.append(pd.DataFrame({
                "rank": r, "step": s, "key": key.to_numpy(), "op": sub["op"].to_numpy(),
                "k": key.groupby(key.to_numpy()).cumcount().to_numpy(),
                "start": sub["start"].to_numpy() + shift, "end": sub["end"].to_numpy() + shift,
                "bytes": nbytes.astype(float)}))
    if not frames:
        return pd.DataFrame(columns=["rank", "step", "key", "op", "k", "start", "end", "bytes"])
    return pd.concat(frames, ignore_index=True)


def wait_matrix(inst: pd.DataFrame, ranks: list[int]) -> np.ndarray:
    """W[i, j] = µs rank i spent waiting in collectives whose last arriver was rank j."""
    n = len(ranks)
    w = np.zeros((n, n))
    if inst.empty:
        return w
    g = inst.groupby(["step", "key", "k"])
    inst = inst.assign(size=g["rank"].transform("size"))
    inst = inst[inst["size"] > 1]
    if inst.empty:
        return w
    g = inst.groupby(["step", "key", "k"])
    last_start = g["start"].transform("max")
    idx_last = g["start"].idxmax()
    last_rank = inst.loc[idx_last, ["step", "key", "k", "rank"]].rename(columns={"rank": "last"})
    inst = inst.assign(wait=(last_start - inst["start"]) / 1000.0).merge(last_rank, on=["step", "key", "k"])
    pos = {r: i for i, r in enumerate(ranks)}
    ii = inst["rank"].map(pos).to_numpy()
    jj = inst["last"].map(pos).to_numpy()
    np.add.at(w, (ii, jj), inst["wait"].to_numpy())
    np.fill_diagonal(w, 0.0)
    return w


def bandwidth_points(inst: pd.DataFrame) -> pd.DataFrame:
    """Per instance with a known size: op, bytes, transfer µs (shortest duration), busbw GB/s (nccl-tests factors)."""
    if inst.empty or inst["bytes"].isna().all():
        return pd.DataFrame(columns=["op", "bytes", "transfer_us", "busbw_gbps"])
    g = inst.dropna(subset=["bytes"]).groupby(["step", "key", "k"])
    agg = g.agg(op=("op", "first"), bytes=("bytes", "max"), n=("rank", "size"))
    dur = (inst["end"] - inst["start"]).groupby([inst["step"], inst["key"], inst["k"]]).min()
    agg["transfer_us"] = dur.reindex(agg.index).to_numpy() / 1000.0
    agg = agg[(agg["transfer_us"] > 0) & (agg["n"] > 1)]
    factor = np.array([BUS_FACTOR.get(op, lambda n: 1.0)(n) for op, n in zip(agg["op"], agg["n"])])
    agg["busbw_gbps"] = agg["bytes"] / (agg["transfer_us"] * 1e3) * factor
    return agg.reset_index()[["op", "bytes", "transfer_us", "busbw_gbps"]]
