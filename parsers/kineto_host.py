"""The host side of a Kineto trace for the merged timeline: CPU ops, user annotations and runtime calls, with
their correlation ids, and a few arguments of each GPU kernel.

The analysis tables (parsers/kineto.py) keep only what the metrics need; the merged timeline (analyze
--timeline) redraws the host work too, so that "the host does not keep the GPU busy" can be followed in it. Read
only when a timeline is written. Times in ns on the trace's own clock (``baseTimeNanoseconds`` applied, as the
activity table's). A file that cannot be decoded whole yields empty tables (the timeline then draws the GPU side
only); this reader never raises for bad input.
"""
from __future__ import annotations

from typing import Any, Optional

import msgspec
import numpy as np
import pandas as pd

from parsers.kineto_values import base_time_ns, to_ns
from parsers.trace_bytes import read_trace_bytes, replace_lone_surrogates

#: Host categories drawn (lower-case); python_function (with_stack) is left out: one slice per Python call.
HOST_CATS = {"cpu_op": "cpu_op", "user_annotation": "user_annotation", "cuda_runtime": "runtime",
             "cuda_driver": "runtime", "hip_runtime": "runtime", "xpu_runtime": "runtime", "runtime": "runtime",
             "mtia_runtime": "runtime"}
#: GPU categories whose arguments are kept (the keys below)
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
KERNEL_ARGS = ("grid", "block", "registers per thread", "shared memory", "blocks per SM", "warps per SM",
               "est. achieved occupancy %", "device", "stream", "correlation", "External id", "bytes",
               "memory bandwidth (GB/s)")
HOST_ARGS = ("External id", "Record function id", "Sequence number", "Input Dims", "Input type", "correlation",
             "cbid", "Fwd thread id")
MAX_ARG_TEXT = 200
#: the most bytes read (inflated): a larger trace is drawn without its host side
MAX_BYTES = 2 << 30
#: |ts| (µs) read: the activity table's bound (parsers/kineto_collect.py), so both sides keep the same events
MAX_TS_US = 9e15
HOST_COLUMNS = ("start", "end", "tid", "cat", "name", "correlation", "args")


class _Ev(msgspec.Struct, gc=False):
    ph: Any = None
    cat: Any = None
    name: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    args: msgspec.Raw = msgspec.Raw(b"null")


class _Doc(msgspec.Struct, gc=False):
    traceEvents: Optional[list[_Ev]] = None
    baseTimeNanoseconds: Any = None


_DECODER = msgspec.json.Decoder(_Doc)


def _decode(data: bytes) -> _Doc:
    """The document, lone surrogate escapes (a name that is not valid Unicode) replaced when the fast decode fails."""
    try:
        return _DECODER.decode(data)
    except msgspec.DecodeError:
        fixed, n = replace_lone_surrogates(data)
        if not n:
            raise
        return _DECODER.decode(fixed)


def _small(args: msgspec.Raw, keys: tuple) -> dict:
    try:
        d = msgspec.json.decode(args)
    except (msgspec.DecodeError, RecursionError):
        return {}
    if not isinstance(d, dict):
        return {}
    out = {}
    for k in keys:
        v = d.get(k)
        if v is None:
            continue
        if isinstance(v, (int, float, bool)) and not (isinstance(v, int) and abs(v) > 2**62):
            out[k] = v
        else:
            out[k] = str(v)[:MAX_ARG_TEXT]
    return out


def _empty() -> tuple[pd.DataFrame, dict]:
    return pd.DataFrame({c: [] for c in HOST_COLUMNS}), {}


def host_events(path: str) -> tuple[pd.DataFrame, dict[int, dict]]:
    """(host events: start, end (ns), tid, cat, name, correlation (-1 when none), args; {correlation: kernel
    args}) of one trace file."""
    try:
        data = read_trace_bytes(path, max_bytes=MAX_BYTES).data
        doc = _decode(data)
    except Exception:  # noqa: BLE001 - damaged or odd files: the timeline draws the GPU side only
        return _empty()
    events = doc.traceEvents or []
    base = base_time_ns(doc.baseTimeNanoseconds) or 0  # as the activity table's (parsers/kineto_tables.py)
    rows, kargs = [], {}
    for e in events:
        if e.ph != "X" or not isinstance(e.cat, str) or not isinstance(e.ts, (int, float)) \
                or isinstance(e.ts, bool):
            continue
        cat = e.cat.lower()
        if cat in GPU_CATS:
            a = _small(e.args, KERNEL_ARGS)
            c = a.get("correlation")
            if isinstance(c, int):
                kargs[c] = a
            continue
        kind = HOST_CATS.get(cat)
        if kind is None:
            continue
        name = e.name if isinstance(e.name, str) else str(e.name)
        if name.startswith("ProfilerStep#"):  # drawn as the step windows already
            continue
        dur = e.dur if isinstance(e.dur, (int, float)) and not isinstance(e.dur, bool) and 0 <= e.dur < 1e12 else 0
        a = _small(e.args, HOST_ARGS)
        corr = a.get("correlation")
        tid = e.tid if isinstance(e.tid, int) and not isinstance(e.tid, bool) else -1
        if not -MAX_TS_US < e.ts < MAX_TS_US:  # NaN or beyond int64 ns: the analysis tables drop it too
            continue
        rows.append((float(e.ts), float(dur), tid, kind, name, corr if isinstance(corr, int) else -1, a))
    if not rows:
        return _empty()[0], kargs
    ts = np.array([r[0] for r in rows])
    dur = np.array([r[1] for r in rows])
    start = to_ns(ts) + base
    out = pd.DataFrame({"start": start, "end": start + to_ns(dur), "tid": np.array([r[2] for r in rows], np.int64),
                        "cat": [r[3] for r in rows], "name": [r[4] for r in rows],
                        "correlation": np.array([r[5] for r in rows], np.int64), "args": [r[6] for r in rows]})
    return out, kargs
