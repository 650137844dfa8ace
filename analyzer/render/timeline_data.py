"""Per-rank data for the HTML figures, taken from a loaded Job: step windows, aligned intervals, collective instances."""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
import pandas as pd

from analyzer.rank import intervals as iv


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
        lo, hi = trace.activity_start, trace.activity_end
        return (int(lo), int(hi)) if lo is not None and hi is not None else None
    row = st[st["step"] == step]
    return (int(row["start"].iloc[0]), int(row["end"].iloc[0])) if len(row) else None


def rank_lanes(job: Any, windows: dict[int, tuple[int, int]]) -> dict[int, dict[str, iv.Intervals]]:
    """Per rank: unions of its compute, comm and memcpy activity clipped to its window [lo, hi) (own clock),
    read from where the rank was parsed (analyzer/load/job.py Job.lanes)."""
    return job.lanes(windows)


def _cross_rank(job: Any, report: dict) -> Any:
    """The job's cross-rank analysis, the very one the report was built from (its member table stays in
    partitions where they were built: the figures fetch only the rows they draw)."""
    from analyzer.report.views import cross_rank_of
    return cross_rank_of(job, report)


def _collective_rows(part: pd.DataFrame, arg: tuple) -> pd.DataFrame:
    """Run where a member partition is: its collective members (of the ``steps``; of the ``ranks``), the
    ``columns`` only."""
    columns, steps, ranks = arg
    keep = part["kind"].to_numpy() == "collective"
    if steps is not None:
        keep &= part["step"].isin(steps).to_numpy()
    if ranks is not None:
        keep &= part["rank"].isin(ranks).to_numpy()
    return part.loc[keep, columns]


def instances(job: Any, report: dict, steps: Optional[list[int]] = None) -> pd.DataFrame:
    """Members of matched group collectives (send/recv pairs left out): rank, step, iid, op, start, end (ns).

    Times are on the aligned clock; when the clocks could not be aligned, each rank's times are measured from
    its own step start instead, as the timelines draw them.
    """
    cols = ["rank", "step", "iid", "op", "start", "end"]
    parts = _cross_rank(job, report).parts
    if not len(parts):
        return pd.DataFrame(columns=cols)
    m = parts.frame(_collective_rows, [(cols, steps, None)] * len(parts.parts)).copy()
    _, aligned = offsets_ns(report)
    if not aligned and len(m):
        starts = {(r, s): (w[0] if w else 0) for r, s in set(zip(m["rank"], m["step"]))
                  for w in [step_window(job.traces[r], s)] if r in job.traces}
        shift = np.array([starts.get((r, s), 0) for r, s in zip(m["rank"], m["step"])], dtype=np.int64)
        m["start"] = m["start"].to_numpy() - shift
        m["end"] = m["end"].to_numpy() - shift
    return m


def wait_matrix(job: Any, report: dict, ranks: list[int]) -> np.ndarray:
    """W[i, j] = µs rank i spent waiting in collectives whose last arriver was rank j (from the matched instances)."""
    n = len(ranks)
    w = np.zeros((n, n))
    cr = _cross_rank(job, report)
    parts, inst = cr.parts, cr.instances
    if not len(parts) or inst is None or inst.empty:
        return w
    pos = {r: i for i, r in enumerate(ranks)}
    m = parts.frame(_collective_rows, [(["iid", "rank", "wait_ns"], None, list(pos))] * len(parts.parts))
    m = m.merge(inst[["instance", "last_rank"]], left_on="iid", right_on="instance")
    m = m[m["rank"].isin(pos) & m["last_rank"].isin(pos)]
    np.add.at(w, (m["rank"].map(pos).to_numpy(), m["last_rank"].map(pos).to_numpy()), m["wait_ns"].to_numpy() / 1000.0)
    np.fill_diagonal(w, 0.0)
    return w


def bandwidth_points(job: Any, report: dict) -> pd.DataFrame:
    """Per matched instance with a known size: op, bytes, transfer µs, busbw GB/s (as the report computes them)."""
    inst = _cross_rank(job, report).instances
    cols = ["op", "bytes", "transfer_us", "busbw_gbps"]
    if inst is None or inst.empty:
        return pd.DataFrame(columns=cols)
    ok = (inst["bytes"] > 0) & inst["busbw_gbps"].notna() & (inst["n_members"] > 1) & (inst["transfer_ns"] > 0)
    pts = inst.loc[ok, ["op", "bytes", "transfer_ns", "busbw_gbps"]].copy()
    if "kind" in inst:  # a send/recv pair is one transfer: one point, not a send hidden under its recv
        pts.loc[inst.loc[ok, "kind"].to_numpy() == "p2p", "op"] = "send/recv"
    pts["transfer_us"] = pts.pop("transfer_ns") / 1000.0
    return pts[cols].reset_index(drop=True)
