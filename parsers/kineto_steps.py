"""Step windows (``ProfilerStep#N``) and user annotations of one trace, as tables on the trace's clock.

The collector (parsers/kineto_collect.py) gathers their rows as it reads, in µs; ``ns`` (Collector.ns) turns µs
starts and durations into ns starts and ends with the trace's base time.
"""
from __future__ import annotations

import re
from typing import Callable

import numpy as np
import pandas as pd

#: (ts µs, dur µs) sequences → (start ns, end ns) arrays on the trace's clock
ToNs = Callable[..., tuple[np.ndarray, np.ndarray]]

STEP = re.compile(r"^ProfilerStep#(\d+)$")


def steps_table(rows: list[tuple], ns: ToNs) -> pd.DataFrame:
    """ProfilerStep#N windows, preferring the CPU track; a step seen twice spans both. ``rows``: (step, ts µs,
    dur µs, on the GPU track)."""
    cpu, gpu = {}, {}
    if rows:
        s, e = ns([x[1] for x in rows], [x[2] for x in rows])
        for (n, _, _, on_gpu), si, ei in zip(rows, s, e):
            target = gpu if on_gpu else cpu
            a, b = target.get(n, (si, ei))
            target[n] = (min(a, si), max(b, ei))
    chosen = cpu or gpu
    out = sorted((n, s_, e_) for n, (s_, e_) in chosen.items())
    df = pd.DataFrame(out, columns=["step", "start", "end"])
    return df.astype({"step": np.int64, "start": np.int64, "end": np.int64})


def annotations_table(rows: list[tuple], ns: ToNs) -> pd.DataFrame:
    """User annotations (CPU and GPU tracks), ProfilerStep windows excluded (the collector leaves them out).
    ``rows``: (name, ts µs, dur µs, on the GPU track)."""
    if rows:
        s, e = ns([x[1] for x in rows], [x[2] for x in rows])
        out = [(x[0], si, ei, "gpu" if x[3] else "cpu") for x, si, ei in zip(rows, s, e)]
    else:
        out = []
    df = pd.DataFrame(out, columns=["name", "start", "end", "track"])
    return df.astype({"start": np.int64, "end": np.int64})
