"""Split each rank's communication time into the wait for its peers and the transfer itself (docs/metrics.md).

A collective's span on a rank holds the time from the rank's own arrival until the last member arrived (the
**wait**, on the aligned clock: the member table's ``wait_ns``) and the rest (the **transfer**). A wait is not a
communication cost: it is the time another rank made this one lose, and it goes to whoever arrived last (the
straggler statistics). The per-rank metrics are measured on each rank's own clock before the ranks are aligned,
so the split is made here, after the cross-rank stage:

- the member partitions (member_parts.py) give each rank's wait intervals (the union of [start, start + wait) of
  its members with a wait), where the partitions are kept; only these intervals travel;
- an instance that lacks a member whose rank is traced (its rows lost in a cut, or a rank that recorded fewer
  steps: collectives.mark_wait_known) has waits known only up to its last *present* arrival; the rest of each of
  its spans, [start + wait, end), is the wait for the absent rank and the transfer together: the **unsplit**
  intervals U, which travel the same way;
- where each rank's interval sets are kept (Job.on_ranks), per step window: ``wait`` = |W ∩ comm|,
  ``exposed_wait`` = |W ∩ comm \\ compute| (the part of the wait no compute hides), ``unsplit`` =
  |(U ∩ comm) \\ W| and its exposed part, ``transfer`` = |comm \\ W \\ U| and its ``overlap`` =
  |transfer ∩ compute|; only these numbers come back.

Then comm = wait + transfer + unsplit, the old exposed span comm \\ compute = exposed_wait + exposed_unsplit +
exposed transfer, and the step metrics' ``exposed_comm_ns`` and ``overlap_coverage`` are those of the transfer:
waiting for a late peer is neither exposed communication nor missing overlap, and time that may be either is
reported as unsplit rather than guessed.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from analyzer.load.job import ask_ranks
from analyzer.rank import intervals as iv

if TYPE_CHECKING:
    import pandas as pd

#: Columns the split adds to the step metrics (int64 ns).
SPLIT_COLUMNS = ("wait_ns", "exposed_wait_ns", "transfer_ns", "unsplit_ns", "exposed_unsplit_ns")


def grouped_union(rank: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The union of each rank's intervals, for every rank at once: (rank, start, end) sorted by rank, then start
    (each rank's part normalised as intervals.union makes it; vectorised, no loop over ranks)."""
    import pandas as pd
    rank, start, end = (np.asarray(x, np.int64) for x in (rank, start, end))
    keep = end > start
    rank, start, end = rank[keep], start[keep], end[keep]
    if not len(rank):
        return rank, start, end
    order = np.lexsort((start, rank))
    rank, start, end = rank[order], start[order], end[order]
    run_end = pd.Series(end).groupby(rank).cummax().to_numpy()  # the latest end so far within the rank
    new = np.ones(len(rank), bool)
    new[1:] = (rank[1:] != rank[:-1]) | (start[1:] > run_end[:-1])
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(rank) - 1)
    return rank[first], start[first], run_end[last]


def _empty3() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    e = np.empty(0, np.int64)
    return e, e, e


def _wait_spans_of_part(part: pd.DataFrame, unknown: Any) -> tuple[tuple, tuple]:
    """Run where a member partition is: (rank, start, end) of the union of each rank's waits (aligned ns), and of
    the rest of its spans in the instances ``unknown`` (sorted ids, or None): the time after the last present
    member arrived, which is the wait for an absent member and the transfer together."""
    if not len(part) or "wait_ns" not in part:
        return _empty3(), _empty3()
    wait = part["wait_ns"].to_numpy(np.int64)
    if "duration_ns" in part:
        wait = np.minimum(wait, part["duration_ns"].to_numpy(np.int64))
    start = part["start"].to_numpy(np.int64)
    rank = part["rank"].to_numpy(np.int64)
    waits = grouped_union(rank, start, start + wait)
    if unknown is None or not len(unknown):
        return waits, _empty3()
    sel = np.isin(part["iid"].to_numpy(np.int64), unknown)
    return waits, grouped_union(rank[sel], (start + wait)[sel], part["end"].to_numpy(np.int64)[sel])


def _by_rank(rank: np.ndarray, start: np.ndarray, end: np.ndarray) -> dict[int, iv.Intervals]:
    ranks, first = np.unique(rank, return_index=True)
    bounds = np.append(first, len(rank))
    return {int(r): (start[bounds[i]:bounds[i + 1]], end[bounds[i]:bounds[i + 1]]) for i, r in enumerate(ranks)}


def wait_intervals(cr: Any) -> tuple[dict[int, iv.Intervals], dict[int, iv.Intervals]]:
    """Per rank: the union of its collective waits on the aligned clock, and of the unsplit rest of its spans in
    the instances that lack a traced member (empty when none does), asked of the member partitions."""
    if not len(cr.parts):
        return {}, {}
    got = cr.parts.map(_wait_spans_of_part, cr.parts.slices(cr.unknown_iids))
    if not got:
        return {}, {}
    out = []
    for which in (0, 1):
        out.append(_by_rank(*grouped_union(*(np.concatenate([g[which][k] for g in got]) for k in range(3)))))
    return out[0], out[1]


#: What split_times measures per step window, in its order (ns).
_MEASURES = ("wait_ns", "exposed_wait_ns", "transfer_ns", "transfer_overlap_ns", "unsplit_ns", "exposed_unsplit_ns")


def split_times(lanes: Any, arg: tuple) -> tuple[np.ndarray, ...]:
    """Run where a rank's interval sets are kept: per step window ``lo``/``hi`` (own clock), the wait, exposed
    wait, transfer, the transfer's overlap with compute, the unsplit time and its exposed part (ns) for the
    rank's wait intervals ``ws``/``we`` and unsplit intervals ``us``/``ue``."""
    lo, hi, ws, we, us, ue = arg
    comm = lanes.comm if lanes is not None else iv.empty()
    compute = lanes.compute if lanes is not None else iv.empty()
    w = iv.intersect(iv.as_intervals(ws, we), comm)
    u = iv.difference(iv.intersect(iv.as_intervals(us, ue), comm), w)
    transfer = iv.difference(iv.difference(comm, w), u)
    return (iv.clipped_lengths(w, lo, hi), iv.clipped_lengths(iv.difference(w, compute), lo, hi),
            iv.clipped_lengths(transfer, lo, hi), iv.clipped_lengths(iv.intersect(transfer, compute), lo, hi),
            iv.clipped_lengths(u, lo, hi), iv.clipped_lengths(iv.difference(u, compute), lo, hi))


def split_frame(job: Any, cr: Any) -> Optional[pd.DataFrame]:
    """Per (rank, step) of the step metrics: the columns of _MEASURES; None when the ranks' clocks are not
    aligned (a wait on unaligned clocks means nothing) or nothing waited."""
    import pandas as pd
    sm = job.step_metrics
    if sm is None or not len(sm) or cr is None or cr.alignment.status != "ok" or not len(cr.parts):
        return None
    waits, unsplit = wait_intervals(cr)
    if not waits and not unsplit:
        return None
    offset_of = cr.alignment.offset_of
    args, rows = {}, {}
    for rank, g in sm.groupby("rank", sort=True):
        r = int(rank)
        ws, we = waits.get(r, iv.empty())
        us, ue = unsplit.get(r, iv.empty())
        shift = int(offset_of.get(r, 0))
        args[r] = (g["start"].to_numpy(np.int64), g["end"].to_numpy(np.int64), ws - shift, we - shift,
                   us - shift, ue - shift)
        rows[r] = g.index.to_numpy()
    got = ask_ranks(job, split_times, args)
    n = len(sm)
    out = {k: np.zeros(n, np.int64) for k in _MEASURES}
    pos = pd.Series(np.arange(n), index=sm.index)
    for r, idx in rows.items():
        at = pos.loc[idx].to_numpy()
        res = got.get(r)
        if res is None:  # a rank whose interval sets are not kept anywhere: no split, its span stays transfer
            out["transfer_ns"][at] = sm.loc[idx, "comm_ns"].to_numpy(np.int64)
            out["transfer_overlap_ns"][at] = sm.loc[idx, "overlap_ns"].to_numpy(np.int64)
            continue
        for k, v in zip(_MEASURES, res):
            out[k][at] = np.asarray(v, np.int64)
    return pd.DataFrame(out, index=sm.index)


def apply_split(sm: pd.DataFrame, split: Optional[pd.DataFrame]) -> pd.DataFrame:
    """The step metrics with the wait/transfer/unsplit columns; exposed comm, overlap and coverage those of the
    transfer (the unsplit time, in instances lacking a traced member, is neither: see the module docstring).

    Without a split (clocks not aligned, no waits) the whole span is transfer (wait 0), as before the split.
    Idempotent: a table that already has the columns is returned as it is."""
    if sm is None or not len(sm) or "wait_ns" in sm:
        return sm
    out = sm.copy()
    if split is None:
        out["wait_ns"] = np.zeros(len(out), np.int64)
        out["exposed_wait_ns"] = np.zeros(len(out), np.int64)
        out["transfer_ns"] = out["comm_ns"].to_numpy(np.int64)
        out["unsplit_ns"] = np.zeros(len(out), np.int64)
        out["exposed_unsplit_ns"] = np.zeros(len(out), np.int64)
        return out
    for k in ("wait_ns", "exposed_wait_ns", "transfer_ns", "unsplit_ns", "exposed_unsplit_ns"):
        out[k] = split[k].to_numpy()
    overlap = split["transfer_overlap_ns"].to_numpy()
    out["overlap_ns"] = overlap
    out["exposed_comm_ns"] = out["transfer_ns"].to_numpy() - overlap
    t = out["transfer_ns"].to_numpy()
    st = out["step_time_ns"].to_numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        out["overlap_coverage"] = np.where(t > 0, overlap / np.maximum(t, 1), np.nan)
        out["exposed_comm_share"] = np.where(st > 0, out["exposed_comm_ns"].to_numpy() / np.maximum(st, 1), np.nan)
    return out
