"""FROZEN ORACLE: the list-comprehension Kineto parser as of commit fc1cc05 (whole-document decode).

Kept unchanged so tests can check that the streaming parser in parsers/kineto.py yields identical tables, and
so the benchmark can report the speed-up. Original docstring:
PyTorch profiler (Kineto / Chrome trace) JSON → one rank's compact tables.

Only the fields the analysis needs are decoded (a typed msgspec decoder skips the rest without building a
dict per event), then turned into numpy/pandas columns. Every era in the public corpus loads: old
``ncclKernel_*(ncclWorkElem)`` names, ``ncclDevKernel_*``, RCCL's ``ncclDevKernel_Generic`` (op only from
args or the launching CPU op), ``displayTimeUnit: "ns"``, string ``baseTimeNanoseconds``, traces without
``distributedInfo`` (rank from the file name), CPU-only gloo traces and thinned traces without flow events.
"""
from __future__ import annotations

import gc
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import msgspec
import numpy as np
import pandas as pd

from parsers.collective_names import normalise_op
from parsers.comm_kernels import op_from_kernel_name
from parsers.errors import InputError
from parsers.trace_bytes import read_trace_bytes, salvage_json_prefix

KINDS = ("compute", "comm", "memcpy", "memset", "sync")
KIND_CODE = {k: i for i, k in enumerate(KINDS)}

_GPU_CATS = {"kernel": None, "Kernel": None, "gpu_memcpy": "memcpy", "Memcpy": "memcpy",
             "gpu_memset": "memset", "Memset": "memset", "cuda_sync": "sync"}
_RUNTIME_CATS = {"cuda_runtime", "Runtime", "cuda_driver", "hip_runtime"}
_COMM_KERNEL = re.compile(r"^(nccl|rccl)|ncclKernel|ncclDevKernel", re.IGNORECASE)
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_RANK_IN_NAME = re.compile(r"(?:^|[^a-z])(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)
# CPU spans that are a collective (gloo work, c10d dispatch, nccl annotations, symmetric-memory collectives).
_COMM_CPU_SPAN = re.compile(r"^(gloo:|nccl:|c10d::|symm_mem::)")


class _Args(msgspec.Struct):
    """The handful of event args the analysis reads; everything else is skipped by the decoder."""

    stream: Any = None
    device: Any = None
    correlation: Any = None
    external_id: Any = msgspec.field(default=None, name="External id")
    coll_name: Any = msgspec.field(default=None, name="Collective name")
    in_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    out_nelems: Any = msgspec.field(default=None, name="Out msg nelems")
    group_size: Any = msgspec.field(default=None, name="Group size")
    dtype: Any = None
    pg_name: Any = msgspec.field(default=None, name="Process Group Name")
    pg_desc: Any = msgspec.field(default=None, name="Process Group Description")
    pg_ranks: Any = msgspec.field(default=None, name="Process Group Ranks")
    name: Any = None  # metadata events: process/thread names
    concrete_inputs: Any = msgspec.field(default=None, name="Concrete Inputs")  # c10d::send/recv_: peer rank


class _Event(msgspec.Struct):
    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    args: Optional[_Args] = None


class _TypedDoc(msgspec.Struct):
    traceEvents: Optional[list[_Event]] = None
    distributedInfo: Any = None
    deviceProperties: Any = None
    displayTimeUnit: Any = None
    baseTimeNanoseconds: Any = None
    host_name: Any = None
    traceName: Any = None


_DECODER = msgspec.json.Decoder(_TypedDoc)


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

    @property
    def device_type(self) -> str:
        return self.meta.get("device_type", "gpu")


def load_trace(path: str | Path) -> KinetoTrace:
    """Parse one Kineto/Chrome trace file (optionally gzip); salvage truncated input with a warning."""
    path = Path(path)
    raw = read_trace_bytes(path)
    warnings: list[str] = []
    salvage = None
    doc, cut_info = _decode(path, raw.data)
    if raw.gzip_truncated or cut_info is not None:
        kept = cut_info[1] if cut_info else len(raw.data)
        salvage = {
            "reason": raw.gzip_error or "JSON ends mid-document (file cut off while being written)",
            "bytes_read": len(raw.data),
            "bytes_kept": kept,
            "events_recovered": len(doc.traceEvents or []),
        }
        warnings.append(
            f"{path}: truncated trace salvaged: kept {salvage['events_recovered']} complete events "
            f"({kept} of {len(raw.data)} bytes; {salvage['reason']})")
    trace = _build(path, doc, warnings)
    trace.salvage = salvage
    return trace


def _decode(path: Path, data: bytes) -> tuple[_TypedDoc, Optional[tuple[int, int]]]:
    """Typed decode; on malformed JSON fall back to the longest valid prefix of complete events."""
    gc_was = gc.isenabled()
    gc.disable()  # millions of small objects: the cyclic GC only costs time here
    try:
        try:
            return _DECODER.decode(data), None
        except msgspec.DecodeError as exc:
            first_error = str(exc)
        stripped = data.lstrip()
        if not stripped.startswith((b"{", b"[")):
            raise InputError(path, f"not JSON ({first_error})")
        if stripped.startswith(b"["):
            # Chrome's bare-array form: [ {...}, {...} ]
            data = b'{"traceEvents":' + stripped
        try:
            fixed, kept = salvage_json_prefix(data)
            return _DECODER.decode(fixed), (0, kept)
        except (ValueError, msgspec.DecodeError):
            raise InputError(path, f"not a readable trace: {first_error}") from None
    finally:
        if gc_was:
            gc.enable()


def _num(x: Any, default: float = np.nan) -> float:
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return x
    if isinstance(x, str):
        try:
            return float(x)
        except ValueError:
            return default
    return default


def _to_ns(ts: np.ndarray) -> np.ndarray:
    """µs floats/ints → int64 ns without losing the integer part to float rounding."""
    whole = np.floor(ts)
    return whole.astype(np.int64) * 1000 + np.rint((ts - whole) * 1000).astype(np.int64)


def _rank_from_name(path: Path) -> Optional[int]:
    m = _RANK_IN_NAME.findall(path.name)
    return int(m[-1]) if m else None


def _build(path: Path, doc: _TypedDoc, warnings: list[str]) -> KinetoTrace:
    events = [e for e in (doc.traceEvents or []) if isinstance(e, _Event)]
    if doc.traceEvents is None:
        raise InputError(path, "JSON without a traceEvents array: not a profiler trace")
    dist = doc.distributedInfo if isinstance(doc.distributedInfo, dict) else {}
    rank, rank_source = None, "none"
    if isinstance(dist.get("rank"), int):
        rank, rank_source = dist["rank"], "distributedInfo"
    else:
        rank = _rank_from_name(path)
        if rank is not None:
            rank_source = "filename"
    world = dist.get("world_size") if isinstance(dist.get("world_size"), int) else None

    base_ns = 0
    if doc.baseTimeNanoseconds is not None:
        try:
            base_ns = int(doc.baseTimeNanoseconds)
        except (TypeError, ValueError):
            warnings.append(f"{path}: baseTimeNanoseconds {doc.baseTimeNanoseconds!r} is not a number; ignored")

    x = [e for e in events if e.ph == "X" and e.ts is not None]
    ts = np.array([_num(e.ts) for e in x], dtype=np.float64)
    dur = np.array([_num(e.dur, 0.0) for e in x], dtype=np.float64)
    bad = ~np.isfinite(ts)
    if bad.any():
        warnings.append(f"{path}: {int(bad.sum())} events with a non-numeric ts ignored")
    dur = np.where(np.isfinite(dur) & (dur > 0), dur, 0.0)
    start = _to_ns(np.where(bad, 0, ts)) + base_ns
    end = start + _to_ns(dur)
    cats = [e.cat if isinstance(e.cat, str) else "" for e in x]
    names_raw = [e.name if isinstance(e.name, str) else "" for e in x]

    # --- device activity --------------------------------------------------------------------------
    gpu_idx = [i for i, c in enumerate(cats) if c in _GPU_CATS and not bad[i]]
    runtime_idx = [i for i, c in enumerate(cats) if c in _RUNTIME_CATS and not bad[i]]
    meta = _meta(doc, dist, path)
    if gpu_idx:
        activity, coll, names = _gpu_activity(x, gpu_idx, runtime_idx, start, end, cats, names_raw)
        meta["device_type"] = "gpu"
    else:
        activity, coll, names = _cpu_activity(x, start, end, cats, names_raw, events)
        meta["device_type"] = "cpu"

    steps = _steps(x, start, end, cats, names_raw, bad)
    annotations = _annotations(start, end, cats, names_raw, bad)
    if not len(activity):
        warnings.append(f"{path}: no device activity or CPU operators found")
    return KinetoTrace(str(path), rank, rank_source, world, meta, activity, names, coll, steps,
                       annotations, warnings)


def _meta(doc: _TypedDoc, dist: dict, path: Path) -> dict:
    props = doc.deviceProperties if isinstance(doc.deviceProperties, list) else []
    gpu_names = [p.get("name") for p in props if isinstance(p, dict) and p.get("name")]
    return {
        "host": doc.host_name if isinstance(doc.host_name, str) else None,
        "backend": dist.get("backend"),
        "pg_config": dist.get("pg_config") if isinstance(dist.get("pg_config"), list) else [],
        "nccl_version": dist.get("nccl_version"),
        "gpu_name": gpu_names[0] if gpu_names else None,
        "display_time_unit": doc.displayTimeUnit,
        "base_time_ns": doc.baseTimeNanoseconds,
        "distributed_info": bool(dist),
    }


def _intern(names: list[str]) -> tuple[np.ndarray, list[str]]:
    codes, uniques = pd.factorize(pd.Series(names, dtype=object), sort=False)
    return codes.astype(np.int32), [str(u) for u in uniques]


def _int_col(values: list[Any]) -> np.ndarray:
    return np.array([v if isinstance(v, int) and not isinstance(v, bool) else -1 for v in values], dtype=np.int64)


def _gpu_activity(x, gpu_idx, runtime_idx, start, end, cats, names_raw):
    """Kernels, memcpy, memset and syncs with their class and the launching runtime call's start."""
    gi = np.array(gpu_idx, dtype=np.int64)
    args = [x[i].args for i in gpu_idx]
    stream = _int_col([a.stream if a else None for a in args])
    tid = [x[i].tid for i in gpu_idx]
    stream = np.where(stream >= 0, stream, _int_col(tid))
    device = _int_col([a.device if a else None for a in args])
    device = np.where(device >= 0, device, _int_col([x[i].pid for i in gpu_idx]))
    corr = _int_col([a.correlation if a else None for a in args])
    ext = _int_col([a.external_id if a else None for a in args])
    gnames = [names_raw[i] for i in gpu_idx]
    kind = np.empty(len(gpu_idx), dtype=np.int8)
    for j, i in enumerate(gpu_idx):
        fixed = _GPU_CATS[cats[i]]
        if fixed is not None:
            kind[j] = KIND_CODE[fixed]
        elif _COMM_KERNEL.search(gnames[j]) or (args[j] is not None and args[j].coll_name is not None):
            kind[j] = KIND_CODE["comm"]
        else:
            kind[j] = KIND_CODE["compute"]

    # Launch time and launching thread of each GPU activity via its runtime call's correlation id.
    r_corr = _int_col([x[i].args.correlation if x[i].args else None for i in runtime_idx])
    r_start = start[np.array(runtime_idx, dtype=np.int64)] if runtime_idx else np.empty(0, np.int64)
    r_tid = [x[i].tid for i in runtime_idx]
    launch_start = np.full(len(gpu_idx), -1, dtype=np.int64)
    launch_pos = np.full(len(gpu_idx), -1, dtype=np.int64)
    if r_corr.size:
        order = np.argsort(r_corr, kind="stable")
        sc = r_corr[order]
        pos = np.searchsorted(sc, corr)
        pos_c = np.minimum(pos, sc.size - 1)
        hit = (corr >= 0) & (sc[pos_c] == corr)
        launch_pos[hit] = order[pos_c[hit]]
        launch_start[hit] = r_start[launch_pos[hit]]

    # Kernels launched by a collective CPU op (symm_mem::*, …) are comm even without an NCCL name.
    cpu_comm = _cpu_comm_spans(x, start, end, cats, names_raw)
    comm_by_ext = {}
    for (ext_id, nm) in cpu_comm["by_ext"]:
        comm_by_ext.setdefault(ext_id, nm)
    for j in range(len(gpu_idx)):
        if kind[j] == KIND_CODE["compute"] and ext[j] in comm_by_ext:
            if comm_by_ext[ext[j]].startswith("symm_mem::"):
                kind[j] = KIND_CODE["comm"]

    name_id, names = _intern(gnames)
    activity = pd.DataFrame({
        "start": start[gi], "end": end[gi], "device": device, "stream": stream,
        "kind": pd.Categorical.from_codes(kind, KINDS), "name_id": name_id,
        "correlation": corr, "launch_start": launch_start,
    })
    activity = activity.sort_values(["start", "end"], kind="stable")
    order = activity.index.to_numpy()
    activity = activity.reset_index(drop=True)

    # Collective metadata per comm activity.
    comm_rows = np.flatnonzero(activity["kind"].to_numpy() == "comm")
    recs = []
    for row in comm_rows:
        j = order[row]
        a = args[j]
        op = ""
        if a is not None and isinstance(a.coll_name, str):
            op = normalise_op(a.coll_name)
        if not op or op == "unknown":
            op = op_from_kernel_name(gnames[j])
        if op == "unknown":
            op = _op_from_launcher(ext[j], launch_pos[j], r_tid, r_start, comm_by_ext, cpu_comm)
        recs.append((
            row, op,
            a.in_nelems if a is not None and isinstance(a.in_nelems, int) else -1,
            a.out_nelems if a is not None and isinstance(a.out_nelems, int) else -1,
            str(a.dtype) if a is not None and a.dtype is not None else "",
            str(a.pg_name) if a is not None and a.pg_name is not None else "",
            str(a.pg_desc) if a is not None and a.pg_desc is not None else "",
            str(a.pg_ranks) if a is not None and a.pg_ranks is not None else "",
            a.group_size if a is not None and isinstance(a.group_size, int) else -1,
            -1,
        ))
    coll = _collectives_frame(recs, activity)
    return activity, coll, names


def _op_from_launcher(ext_id, launch_pos, r_tid, r_start, comm_by_ext, cpu_comm) -> str:
    """The op of a comm kernel whose name and args do not say: ask the CPU op that launched it."""
    if ext_id >= 0 and ext_id in comm_by_ext:
        op = normalise_op(comm_by_ext[ext_id])
        if op != "unknown":
            return op
    if launch_pos >= 0:
        tid, t = r_tid[launch_pos], r_start[launch_pos]
        best = None
        for s, e, tt, nm in cpu_comm["spans"]:
            if tt == tid and s <= t < e and (best is None or s >= best[0]):
                best = (s, nm)
        if best is not None:
            return normalise_op(best[1])
    return "unknown"


def _cpu_comm_spans(x, start, end, cats, names_raw) -> dict:
    """CPU-side collective spans (gloo:*, nccl:*, c10d::*, symm_mem::*) with their External ids."""
    spans, by_ext = [], []
    for i, nm in enumerate(names_raw):
        if cats[i] in ("cpu_op", "user_annotation", "Operator") and _COMM_CPU_SPAN.match(nm):
            spans.append((start[i], end[i], x[i].tid, nm))
            a = x[i].args
            if a is not None and isinstance(a.external_id, int):
                by_ext.append((a.external_id, nm))
    return {"spans": spans, "by_ext": by_ext}


_COLL_COLUMNS = ["act_index", "op", "in_nelems", "out_nelems", "dtype", "pg_name", "pg_desc", "pg_ranks",
                 "group_size", "peer"]


def _collectives_frame(recs: list[tuple], activity: pd.DataFrame) -> pd.DataFrame:
    coll = pd.DataFrame.from_records(recs, columns=_COLL_COLUMNS)
    for c in ("act_index", "in_nelems", "out_nelems", "group_size", "peer"):
        coll[c] = coll[c].astype(np.int64)
    idx = coll["act_index"].to_numpy()
    coll.insert(1, "start", activity["start"].to_numpy()[idx])
    coll.insert(2, "end", activity["end"].to_numpy()[idx])
    coll.insert(3, "stream", activity["stream"].to_numpy()[idx])
    return coll


def _cpu_activity(x, start, end, cats, names_raw, events):
    """CPU-only (gloo) traces: training-thread CPU ops are compute, gloo/c10d collective spans are comm."""
    tids = [e.tid for e in x]
    step_tids = {tids[i] for i, nm in enumerate(names_raw) if _STEP.match(nm)}
    op_rows = [i for i, c in enumerate(cats) if c in ("cpu_op", "Operator", "user_annotation")]
    if step_tids:
        main = step_tids
    else:
        busy: dict[Any, float] = {}
        for i in op_rows:
            busy[tids[i]] = busy.get(tids[i], 0) + (end[i] - start[i])
        main = {max(busy, key=busy.get)} if busy else set()
    rows, kind = [], []
    for i in op_rows:
        nm = names_raw[i]
        if _STEP.match(nm):
            continue
        if nm.startswith("gloo:"):
            rows.append(i)
            kind.append(KIND_CODE["comm"])
        elif tids[i] in main and cats[i] != "user_annotation" and not _COMM_CPU_SPAN.match(nm) \
                and nm != "record_param_comms":
            rows.append(i)
            kind.append(KIND_CODE["compute"])
    ri = np.array(rows, dtype=np.int64)
    name_id, names = _intern([names_raw[i] for i in rows])
    activity = pd.DataFrame({
        "start": start[ri] if rows else np.empty(0, np.int64),
        "end": end[ri] if rows else np.empty(0, np.int64),
        "device": np.full(len(rows), -1, np.int64),
        "stream": _int_col([tids[i] for i in rows]),
        "kind": pd.Categorical.from_codes(np.array(kind, dtype=np.int8), KINDS),
        "name_id": name_id,
        "correlation": np.full(len(rows), -1, np.int64),
        "launch_start": np.full(len(rows), -1, np.int64),
    })
    activity = activity.sort_values(["start", "end"], kind="stable")
    order = activity.index.to_numpy()
    activity = activity.reset_index(drop=True)
    peers = _p2p_peers(x, start, names_raw, tids)
    recs = []
    for row in np.flatnonzero(activity["kind"].to_numpy() == "comm"):
        i = rows[order[row]]
        a = x[i].args
        nm = names[activity["name_id"].iat[row]]
        recs.append((
            row, normalise_op(a.coll_name if a is not None and isinstance(a.coll_name, str) else nm),
            a.in_nelems if a is not None and isinstance(a.in_nelems, int) else -1,
            a.out_nelems if a is not None and isinstance(a.out_nelems, int) else -1,
            str(a.dtype) if a is not None and a.dtype is not None else "",
            str(a.pg_name) if a is not None and a.pg_name is not None else "",
            str(a.pg_desc) if a is not None and a.pg_desc is not None else "",
            str(a.pg_ranks) if a is not None and a.pg_ranks is not None else "",
            a.group_size if a is not None and isinstance(a.group_size, int) else -1,
            peers(i) if nm in ("gloo:send", "gloo:recv") else -1,
        ))
    return activity, _collectives_frame(recs, activity), names


def _p2p_peers(x, start, names_raw, tids):
    """Peer rank of a gloo:send/recv span: from the c10d::send/recv_ op just before it on the same thread.

    c10d's dispatch op records its arguments (``Concrete Inputs`` = [tensors, pg, peer, tag]); the gloo span
    that does the transfer follows it on the same thread.
    """
    by_tid: dict[Any, tuple[list[int], list[int]]] = {}
    for i, nm in enumerate(names_raw):
        if nm in ("c10d::send", "c10d::recv_", "c10d::recv_any_source_"):
            a = x[i].args
            ci = a.concrete_inputs if a is not None else None
            peer = -1
            if isinstance(ci, list) and len(ci) > 2:
                try:
                    peer = int(ci[2])
                except (TypeError, ValueError):
                    peer = -1
            ts_list, peer_list = by_tid.setdefault(tids[i], ([], []))
            ts_list.append(int(start[i]))
            peer_list.append(peer)
    sorted_by_tid = {}
    for tid, (ts_list, peer_list) in by_tid.items():
        order = np.argsort(ts_list, kind="stable")
        sorted_by_tid[tid] = (np.array(ts_list)[order], np.array(peer_list)[order])

    def peer_of(i: int) -> int:
        hit = sorted_by_tid.get(tids[i])
        if hit is None:
            return -1
        k = np.searchsorted(hit[0], start[i], side="right") - 1
        return int(hit[1][k]) if k >= 0 else -1

    return peer_of


def _steps(x, start, end, cats, names_raw, bad) -> pd.DataFrame:
    """ProfilerStep#N windows, preferring the CPU track; a step seen twice spans both."""
    cpu, gpu = {}, {}
    for i, nm in enumerate(names_raw):
        if bad[i] or not nm.startswith("ProfilerStep#"):
            continue
        m = _STEP.match(nm)
        if not m:
            continue
        target = gpu if cats[i] == "gpu_user_annotation" else cpu
        n = int(m.group(1))
        s, e = target.get(n, (start[i], end[i]))
        target[n] = (min(s, start[i]), max(e, end[i]))
    chosen = cpu or gpu
    rows = sorted((n, s, e) for n, (s, e) in chosen.items())
    df = pd.DataFrame(rows, columns=["step", "start", "end"])
    return df.astype({"step": np.int64, "start": np.int64, "end": np.int64})


def _annotations(start, end, cats, names_raw, bad) -> pd.DataFrame:
    rows = [(names_raw[i], start[i], end[i], "gpu" if cats[i] == "gpu_user_annotation" else "cpu")
            for i, c in enumerate(cats)
            if c in ("user_annotation", "gpu_user_annotation") and not bad[i]
            and not names_raw[i].startswith("ProfilerStep#")]
    df = pd.DataFrame(rows, columns=["name", "start", "end", "track"])
    return df.astype({"start": np.int64, "end": np.int64})
