"""KinetoTrace: one rank's trace reduced to the tables the analysis reads (docs/architecture.md), and the kinds
of activity."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import pandas as pd

KINDS = ("compute", "comm", "memcpy", "memset", "sync")
KIND_CODE = {k: i for i, k in enumerate(KINDS)}


@dataclass
class KinetoTrace:
    """One rank's trace reduced to the tables the analysis needs (see docs/architecture.md)."""

    path: str
    rank: Optional[int]
    rank_source: str
    world_size: Optional[int]
    meta: dict
    activity: pd.DataFrame
    names: list[str]
    collectives: pd.DataFrame
    steps: pd.DataFrame
    annotations: pd.DataFrame
    warnings: list[str] = field(default_factory=list)
    salvage: Optional[dict] = None
    #: CPU-side collective spans (gloo:*, nccl:*, c10d::*, symm_mem::*): start, end (ns), tid, name
    cpu_comm: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(
        {"start": np.empty(0, np.int64), "end": np.empty(0, np.int64), "tid": np.empty(0, np.int64), "name": []}))

    #: profile_memory's events (parsers/kineto_memory.py): ts (ns), bytes, allocated, reserved, device_type,
    #: device_id, tid, oom; None when the trace has none
    memory: Optional[pd.DataFrame] = None
    #: the CPU operators a memory event can fall in: start, end (ns), tid, name; None when not kept
    memory_ops: Optional[pd.DataFrame] = None

    @property
    def process_groups(self) -> pd.DataFrame:
        """``distributedInfo.pg_config`` as a typed table (parsers/kineto_groups.py): the groups this rank is in."""
        from parsers.kineto_groups import process_groups
        return process_groups(self.meta.get("pg_config"))

    @property
    def device_type(self) -> str:
        return self.meta.get("device_type", "gpu")
