"""profile_memory's instant events → the trace's memory table, and each device's capacity from deviceProperties.

Kineto writes one ``[memory]`` instant event per allocation and free (``Bytes`` negative on free) with the
allocator's running ``Total Allocated`` / ``Total Reserved`` after it, and ``[OutOfMemory]`` when an allocation
fails; ``Device Type`` 0 is the host (``Device Id`` -1), 1 a CUDA device. On the host the totals count only what was
allocated while the profiler ran, and ``Total Reserved`` is 0 (the CPU allocator reserves nothing).
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
import pandas as pd

from parsers.kineto_events import TypedDoc

MEMORY_COLUMNS = ("ts", "bytes", "allocated", "reserved", "device_type", "device_id", "tid", "oom")


def memory_tables(col: Any) -> tuple[Optional[pd.DataFrame], Optional[pd.DataFrame]]:
    """(memory, memory_ops) from a Collector: the memory events in time order (ns on the trace's clock) and the
    CPU operators they may fall in (start, end, tid, name); (None, None) when the trace has no memory event."""
    if not col.mem:
        return None, None
    parts = [np.concatenate([p[i] for p in col.mem]) for i in range(len(MEMORY_COLUMNS))]
    col.mem = []  # the per-slice pieces: let them go before the table is built
    ok = np.isfinite(parts[0]) & (np.abs(parts[0]) < 9e15)
    if not ok.all():
        parts = [p[ok] for p in parts]
    parts[0], _ = col.ns(parts[0], np.zeros(len(parts[0])))
    if len(parts[0]) > 1 and not (np.diff(parts[0]) >= 0).all():  # Kineto writes them in time order already
        order = np.argsort(parts[0], kind="stable")
        parts = [p[order] for p in parts]
    mem = pd.DataFrame(dict(zip(MEMORY_COLUMNS, parts)), copy=False)
    ops = None
    if col.mem_ops:
        o = [np.concatenate([p[i] for p in col.mem_ops]) for i in range(4)]
        start, end = col.ns(o[0], np.where(np.isfinite(o[1]) & (o[1] > 0), o[1], 0.0))
        names = np.asarray(col.name_list, dtype=object)
        ops = pd.DataFrame({"start": start, "end": end, "tid": o[2], "name": names[o[3]]})
    return mem, ops


def device_capacities(doc: TypedDoc) -> dict:
    """{device id: totalGlobalMem bytes} from the trace's deviceProperties (empty on a CPU trace)."""
    props = doc.deviceProperties if isinstance(doc.deviceProperties, list) else []
    out = {}
    for p in props:
        if isinstance(p, dict):
            i, cap = p.get("id"), p.get("totalGlobalMem")
            if isinstance(i, int) and isinstance(cap, int) and 0 < cap < 1 << 60:
                out[i] = cap
    return out
