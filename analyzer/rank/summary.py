"""Everything the analysis needs from one rank's trace, computed where the trace was parsed (docs/scale.md).

``summarise(trace)`` turns a parsed KinetoTrace into a :class:`RankSummary` of compact tables — steps, the
collective rows (string columns categorised, each row's step and the share of the step's compute done before
it), per-step metrics, first-activity gaps, pipeline blocks, the profile rows, kernel and idle breakdowns, each
kept packed (analyzer/rank/packed.py: ~200 B a table instead of a DataFrame's ~5 KB) — plus the rank's interval
sets (:class:`RankLanes`: compute, comm and memcpy unions) that later queries read (the HTML timelines) without
the activity table. The parent process holds only these; a rank's full activity table never leaves its worker.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import pandas as pd

from analyzer.rank import intervals as iv
from analyzer.rank.breakdown import idle_breakdown, kernel_breakdown
from analyzer.rank.memory import memory_ooms, memory_steps
from analyzer.rank.metrics import kind_sets, rank_step_metrics
from analyzer.rank.packed import Packed, StringPool, pack
from analyzer.rank.profile import rank_profile

#: Collective columns kept (the parser's, minus its activity index) and the ones stored as categories.
COLLECTIVE_COLUMNS = ["start", "end", "stream", "op", "in_nelems", "out_nelems", "dtype", "pg_name", "pg_desc",
                      "pg_ranks", "group_size", "peer", "family", "seq", "comms_id", "step", "compute_before"]
CATEGORY_COLUMNS = ("op", "dtype", "pg_name", "pg_desc", "pg_ranks", "family", "comms_id")
#: the send/recv ops (never a group's first collective of a step)
_P2P = ("send", "recv")


@dataclass
class RankLanes:
    """A rank's activity as normalised interval sets on its own clock (what the timeline figures draw)."""

    compute: iv.Intervals
    comm: iv.Intervals
    memcpy: iv.Intervals

    def clipped(self, lo: int, hi: int) -> dict[str, iv.Intervals]:
        """The three sets restricted to [lo, hi)."""
        return {k: iv.clip(getattr(self, k), lo, hi) for k in ("compute", "comm", "memcpy")}


#: the summary's small tables, kept packed (analyzer/rank/packed.py) and rebuilt as DataFrames when read
TABLES = ("steps", "collectives", "step_metrics", "first_gaps", "kernels", "idle", "memory")


def _table(name: str) -> property:
    def get(self: "RankSummary") -> Optional[pd.DataFrame]:
        p = getattr(self, "_" + name)
        return None if p is None else p.frame()

    def set_(self: "RankSummary", df: Optional[pd.DataFrame]) -> None:
        setattr(self, "_" + name, pack(df))
    return property(get, set_, doc=f"The rank's {name} table (a DataFrame rebuilt from its packed form).")


class RankSummary:
    """One rank as the parent holds it: the trace's header and compact per-rank results (no activity table).

    Tables (rebuilt as DataFrames on each read; the ``_name`` attributes hold them packed): ``steps`` (step,
    start, end: own clock, ns), ``collectives`` (COLLECTIVE_COLUMNS; string columns categorical),
    ``step_metrics`` (analyzer.rank.metrics.STEP_COLUMNS; None once the job-wide table holds it),
    ``first_gaps`` (step, gap_ns: step start to its first device activity), ``kernels`` / ``idle``
    (analyzer.rank.breakdown), ``memory`` (analyzer.rank.memory: per device and step; None without memory
    events), ``profile`` (analyzer.rank.profile.rank_profile: (rows, steps) or None).
    ``blocks``: the pipeline blocks (analyzer.cross_rank.pipeline_blocks.RankBlocks) of a rank with
    send/recv, else None. ``comm_kernels``: the [tool.analyze] comm-kernels patterns the trace was parsed with
    (re-reads use the same).
    """

    __slots__ = ("path", "rank", "rank_source", "world_size", "meta", "warnings", "salvage", "n_activities",
                 "activity_start", "activity_end", "blocks", "extra", "comm_kernels", "_profile", "profile_steps",
                 *("_" + t for t in TABLES))

    steps = _table("steps")
    collectives = _table("collectives")
    step_metrics = _table("step_metrics")
    first_gaps = _table("first_gaps")
    kernels = _table("kernels")
    idle = _table("idle")
    memory = _table("memory")

    def __init__(self, path: str, rank: Optional[int], rank_source: str, world_size: Optional[int], meta: dict,
                 steps: pd.DataFrame, collectives: pd.DataFrame, warnings: list[str], salvage: Optional[dict],
                 n_activities: int, activity_start: Optional[int], activity_end: Optional[int],
                 step_metrics: Optional[pd.DataFrame], first_gaps: pd.DataFrame, blocks: Any, profile: Any,
                 kernels: Optional[pd.DataFrame], idle: Optional[pd.DataFrame], extra: Optional[dict] = None,
                 comm_kernels: tuple = (), memory: Optional[pd.DataFrame] = None):
        self.path, self.rank, self.rank_source, self.world_size = path, rank, rank_source, world_size
        self.meta, self.warnings, self.salvage, self.n_activities = meta, warnings, salvage, n_activities
        self.activity_start, self.activity_end, self.blocks = activity_start, activity_end, blocks
        self.extra, self.comm_kernels = extra or {}, comm_kernels
        self.steps, self.collectives, self.step_metrics = steps, collectives, step_metrics
        self.first_gaps, self.kernels, self.idle = first_gaps, kernels, idle
        self.memory = memory
        self.profile = profile

    def __getstate__(self) -> dict:
        return {k: getattr(self, k) for k in self.__slots__}

    def __setstate__(self, state: dict) -> None:
        for k, v in state.items():
            setattr(self, k, v)

    @property
    def profile(self) -> Any:
        """(rows, steps) of analyzer.rank.profile.rank_profile, or None."""
        return None if self._profile is None else (self._profile.frame(), self.profile_steps)

    @profile.setter
    def profile(self, value: Any) -> None:
        self._profile, self.profile_steps = (None, 0) if value is None else (pack(value[0]), int(value[1]))

    def packed(self, name: str) -> Optional[Packed]:
        """One table in its packed form (for job-wide joins: analyzer.rank.packed.concat); name as in TABLES
        or "profile"."""
        return getattr(self, "_" + name)

    def collective_column(self, name: str) -> np.ndarray:
        """One column of the collective rows, without rebuilding the table (job-wide loops over ranks)."""
        return self._collectives.column(name) if self._collectives is not None else np.empty(0, dtype=object)

    @property
    def n_collectives(self) -> int:
        return len(self._collectives) if self._collectives is not None else 0

    def share(self, pool: StringPool) -> None:
        """Re-point every table's strings into the job's pool (see analyzer.rank.packed)."""
        for name in (*TABLES, "profile"):
            pool.adopt(getattr(self, "_" + name))

    @property
    def process_groups(self) -> pd.DataFrame:
        """``distributedInfo.pg_config`` as a typed table (parsers/kineto_groups.py): the groups this rank is in."""
        from parsers.kineto_groups import process_groups
        return process_groups(self.meta.get("pg_config"))

    @property
    def device_type(self) -> str:
        return self.meta.get("device_type", "gpu")

    def renumber(self, rank: int) -> None:
        """Give a trace that names no rank the number ``rank`` (its derived tables too)."""
        self.rank, self.rank_source = rank, "assigned"
        if self.blocks is not None:
            self.blocks.rank = rank
        for name in ("step_metrics", "kernels", "idle"):
            p = getattr(self, "_" + name)
            if p is not None and "rank" in p.columns:
                setattr(self, "_" + name, p.with_column("rank", rank))

    def full(self) -> Any:
        """The rank's whole KinetoTrace, parsed again from its file (the analysis itself never needs it)."""
        from parsers.comm_kernels import table_for
        from parsers.kineto import load_trace
        return load_trace(self.path, comm_kernels=table_for(self.comm_kernels))

    @property
    def activity(self) -> pd.DataFrame:
        """Every device activity row, read again from the file (see :meth:`full`)."""
        return self.full().activity


def collective_column(t: Any, name: str) -> np.ndarray:
    """One column of a rank's collective rows (a RankSummary's without rebuilding its table; a full trace's
    as it is); empty when there are none or the column is absent."""
    if isinstance(t, RankSummary):
        try:
            return t.collective_column(name)
        except KeyError:
            return np.empty(0, dtype=object)
    c = getattr(t, "collectives", None)
    return c[name].to_numpy() if c is not None and name in c else np.empty(0, dtype=object)


def n_collectives(t: Any) -> int:
    """How many collective rows a rank has."""
    if isinstance(t, RankSummary):
        return t.n_collectives
    c = getattr(t, "collectives", None)
    return 0 if c is None else len(c)


def step_of(steps: pd.DataFrame, t: np.ndarray) -> np.ndarray:
    """ProfilerStep number containing each time (−1 outside every step / no steps)."""
    if steps is None or not len(steps):
        return np.full(len(t), -1, np.int64)
    st = steps.sort_values("start")
    s, e, n = st["start"].to_numpy(), st["end"].to_numpy(), st["step"].to_numpy()
    k = np.searchsorted(s, t, side="right") - 1
    ok = (k >= 0) & (t < e[np.maximum(k, 0)])
    return np.where(ok, n[np.maximum(k, 0)], -1).astype(np.int64)


def first_activity_gaps(trace: Any) -> pd.DataFrame:
    """Per step: time from the step's start to its first device activity (host-side / data-loading gap)."""
    st, a = trace.steps, trace.activity
    if not len(st) or not len(a):
        return pd.DataFrame({"step": np.empty(0, np.int64), "gap_ns": np.empty(0, np.int64)})
    s = np.sort(a["start"].to_numpy())
    k = np.searchsorted(s, st["start"].to_numpy())
    ok = k < len(s)
    first = np.where(ok, s[np.minimum(k, len(s) - 1)], st["end"].to_numpy())
    first = np.minimum(first, st["end"].to_numpy())
    return pd.DataFrame({"step": st["step"].to_numpy(), "gap_ns": first - st["start"].to_numpy()})


def compute_before(trace: Any, compute: iv.Intervals, start: np.ndarray, step: np.ndarray) -> np.ndarray:
    """Per collective row: share of its step's compute done before the row starts (NaN outside steps or when the
    step has no compute). Monotone in the start, so a group's first collective of a step has the least."""
    out = np.full(len(start), np.nan)
    inside = step >= 0
    if not inside.any():
        return out
    st = trace.steps.drop_duplicates("step").set_index("step")
    ws = st.loc[step[inside], "start"].to_numpy()
    we = st.loc[step[inside], "end"].to_numpy()
    before = iv.clipped_lengths(compute, ws, np.minimum(start[inside], we))
    total = iv.clipped_lengths(compute, ws, we)
    with np.errstate(divide="ignore", invalid="ignore"):
        out[inside] = np.where(total > 0, before / np.maximum(total, 1), np.nan)
    return out


def compact_collectives(trace: Any, compute: iv.Intervals) -> pd.DataFrame:
    """The trace's collective rows with their step and compute-before share; string columns as categories."""
    c = trace.collectives
    if c is None or not len(c):
        return pd.DataFrame({k: pd.Series([], dtype="category" if k in CATEGORY_COLUMNS else np.int64)
                             for k in COLLECTIVE_COLUMNS})
    df = c.reindex(columns=[k for k in COLLECTIVE_COLUMNS if k not in ("step", "compute_before")]).copy()
    start = df["start"].to_numpy()
    df["step"] = step_of(trace.steps, start)
    grp = (~df["op"].isin(_P2P)).to_numpy()
    cb = np.full(len(df), np.nan)
    cb[grp] = compute_before(trace, compute, start[grp], df["step"].to_numpy()[grp])
    df["compute_before"] = cb
    for k in CATEGORY_COLUMNS:
        df[k] = df[k].fillna("").astype(str).astype("category")
    return df.reset_index(drop=True)


class SharedValues:
    """Equal values of different ranks as one object in the parent: each string of the summaries' tables, in
    one StringPool (a 10,000-rank "Process Group Ranks" string is ~60 KB, the same on every member) and each
    ``distributedInfo.pg_config`` (every rank lists every group). Without it the parent holds one copy per rank."""

    def __init__(self) -> None:
        self.pool = StringPool()
        self._configs: dict[bytes, Any] = {}

    def config(self, value: Any) -> Any:
        import msgspec
        try:
            key = msgspec.json.encode(value)
        except (TypeError, ValueError, OverflowError):  # not JSON-like: keep this rank's own copy
            return value
        return self._configs.setdefault(key, value)

    def share(self, summary: Optional["RankSummary"]) -> Optional["RankSummary"]:
        """``summary`` with its tables' strings in the job's pool and its pg_config the shared object (in place)."""
        if summary is None:
            return None
        summary.share(self.pool)
        if isinstance(summary.meta, dict) and summary.meta.get("pg_config") is not None:
            summary.meta = {**summary.meta, "pg_config": self.config(summary.meta["pg_config"])}
        return summary


def lanes_of(sets: dict[str, iv.Intervals]) -> RankLanes:
    return RankLanes(sets["compute"], sets["comm"], sets["memcpy"])


def summarise(trace: Any) -> tuple[RankSummary, RankLanes]:
    """The compact per-rank results of one parsed trace, and its interval sets (kept apart: see the module)."""
    from analyzer.cross_rank.pipeline_blocks import rank_blocks  # rank-local: only this trace's activity
    a = trace.activity
    c = trace.collectives
    blocks = None
    if c is not None and len(c) and c["op"].isin(list(_P2P)).any():  # a pipeline rank (cross_rank/pipeline.py)
        blocks = rank_blocks(trace.rank if trace.rank is not None else -1, trace)
    sets = kind_sets(trace)
    summary = RankSummary(
        path=trace.path, rank=trace.rank, rank_source=trace.rank_source, world_size=trace.world_size,
        meta=trace.meta, steps=trace.steps[["step", "start", "end"]].reset_index(drop=True),
        collectives=compact_collectives(trace, sets["compute"]), warnings=list(trace.warnings),
        salvage=trace.salvage, n_activities=int(len(a)),
        activity_start=int(a["start"].min()) if len(a) else None,
        activity_end=int(a["end"].max()) if len(a) else None,
        step_metrics=rank_step_metrics(trace), first_gaps=first_activity_gaps(trace), blocks=blocks,
        profile=rank_profile(trace),
        kernels=kernel_breakdown(trace), idle=idle_breakdown(trace), memory=memory_steps(trace), extra=_hta_extra(trace))
    ooms = memory_ooms(trace)
    if ooms:
        summary.extra["memory_ooms"] = ooms
    return summary, lanes_of(sets)


def _hta_extra(trace: Any) -> dict:
    """HTA's overlap of communication kernels (analyzer/rank/hta_compat.py) as its two sums, so that ranks and the
    job add up time-weighted: ``hta_overlap_ns`` and ``hta_comm_ns`` (0 on traces without comm kernels)."""
    from analyzer.rank.hta_compat import hta_overlap_parts
    try:
        overlap, comm = hta_overlap_parts(trace)
    except (KeyError, AttributeError):  # a stand-in trace without launch or name columns
        return {}
    return {"hta_overlap_ns": overlap, "hta_comm_ns": comm}
