"""The member table in partitions of whole instances, each kept where it was built (docs/scale.md).

Once a job's member rows (one per collective instance and member rank) outgrow one partition, each partition
is built by a task on the job's engine and stays there: a pickle in the pool's scratch folder, a future on a
Dask cluster. The process that assembles the report then never holds the member table: the section asks the
partitions questions (:meth:`MemberParts.map`, only the answers travel) or fetches the few rows and columns a
step needs (:meth:`MemberParts.frame`). ``CrossRank.members`` joins every partition on request (the API).
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import numpy as np
import pandas as pd


def _whole(part: pd.DataFrame, _arg: Any) -> pd.DataFrame:
    return part


class MemberParts:
    """Partitions of the member table, sorted by (iid, rank), in iid order; ``bounds[i]`` is partition i's
    [first iid, last iid + 1). With an ``engine`` the parts are handles of kept sides (Engine.map_keep),
    else the DataFrames themselves."""

    def __init__(self, parts: Sequence[Any], bounds: Sequence[tuple[int, int]], n_rows: int,
                 engine: Any = None, empty: Optional[pd.DataFrame] = None):
        self.parts = list(parts)
        self.bounds = [(int(a), int(b)) for a, b in bounds]
        self.n_rows = int(n_rows)
        self.engine = engine
        self._empty = empty

    @classmethod
    def of(cls, frame: pd.DataFrame) -> "MemberParts":
        """One partition held here: a member table built in this process (small jobs, tests, notebooks)."""
        if frame is None or not len(frame):
            return cls([], [], 0, empty=frame if frame is not None else pd.DataFrame())
        iid = frame["iid"].to_numpy()
        return cls([frame], [(int(iid.min()), int(iid.max()) + 1)], len(frame))

    @property
    def remote(self) -> bool:
        """Whether the partitions are kept by the engine (not in this process)."""
        return self.engine is not None

    def __len__(self) -> int:
        return self.n_rows

    def map(self, fn: Callable[[pd.DataFrame, Any], Any], args: Optional[Sequence[Any]] = None) -> list:
        """``fn(partition, args[i])`` for every partition, run where the partition is; results in order.
        ``fn`` must be a module-level function (it is pickled for the engine)."""
        args = [None] * len(self.parts) if args is None else list(args)
        if not self.parts:
            return []
        if self.engine is None:
            return [fn(p, a) for p, a in zip(self.parts, args)]
        return self.engine.query(fn, self.parts, args)

    def frame(self, fn: Optional[Callable[[pd.DataFrame, Any], pd.DataFrame]] = None,
              args: Optional[Sequence[Any]] = None) -> pd.DataFrame:
        """The rows ``fn`` keeps of each partition (default: all of them), joined in partition order."""
        got = [g for g in self.map(fn or _whole, args)]
        if not got:
            return self._empty if self._empty is not None else pd.DataFrame()
        if len(got) == 1:
            return got[0]
        return pd.concat(got, ignore_index=True)

    def in_range(self, iids: np.ndarray) -> list[tuple[int, int]]:
        """Per partition: the slice [i, j) of the sorted ``iids`` that falls in its iid range."""
        lo = np.searchsorted(iids, [b[0] for b in self.bounds], "left")
        hi = np.searchsorted(iids, [b[1] for b in self.bounds], "left")
        return [(int(a), int(b)) for a, b in zip(lo, hi)]


    def slices(self, iids: np.ndarray) -> Optional[list[np.ndarray]]:
        """Per partition: the part of the sorted ``iids`` in its iid range (a map's ``args``); None when
        ``iids`` is empty, so that each partition gets None and skips the question."""
        return [iids[a:b] for a, b in self.in_range(iids)] if len(iids) else None


def as_parts(members: Any) -> MemberParts:
    """``members`` as MemberParts (a DataFrame is one partition held here)."""
    return members if isinstance(members, MemberParts) else MemberParts.of(members)


def partition_cuts(iid: np.ndarray, partition_rows: int) -> list[int]:
    """Row cuts of rows sorted by iid into parts of whole instances of about ``partition_rows`` rows (an
    instance larger than that is a part alone); [0, n] when one part holds them all."""
    n = len(iid)
    cuts = [0]
    while cuts[-1] + partition_rows < n:
        at = iid[cuts[-1] + partition_rows]
        c = int(np.searchsorted(iid, at, "left"))
        cuts.append(c if c > cuts[-1] else int(np.searchsorted(iid, at, "right")))
    if cuts[-1] < n:  # (the last cut is n already when the last instance alone outgrew a partition)
        cuts.append(n)
    return cuts
