"""Collected columns → the KinetoTrace tables: activity (GPU, or CPU operators of a CPU-only trace),
collectives, steps, annotations and CPU-side collective spans, with the rank, world size, clock and metadata read
from the document's members.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from parsers.collective_names import normalise_op
from parsers.file_names import rank_from_file_name
from parsers.kineto_collect import F_COMM_KERNEL, F_COMM_SPAN, F_GLOO, F_RPC, F_STEP, Collector
from parsers.kineto_collectives import (SpanIndex, coll_record, collectives_frame, nccl_peer, op_from_launcher,
                                        sendrecv_is_alltoall)
from parsers.kineto_events import TypedDoc
from parsers.kineto_steps import annotations_table, steps_table
from parsers.kineto_memory import device_capacities, memory_tables
from parsers.kineto_trace import KIND_CODE, KINDS, KinetoTrace
from parsers.kineto_values import MAX_DUR_US, MAX_RANKS, arr, base_time_ns, int_col, plausible_rank


def build_trace(col: Collector, path: Path, doc: TypedDoc, warnings: list[str]) -> KinetoTrace:
    """Build the KinetoTrace tables from everything collected."""
    dist = doc.distributedInfo if isinstance(doc.distributedInfo, dict) else {}
    rank, rank_source = None, "none"
    world = dist.get("world_size")
    if world is not None and not (plausible_rank(world, MAX_RANKS + 1) and world > 0):
        warnings.append(f"{path}: distributedInfo.world_size {str(world)[:40]!r} is not a plausible world size; "
                        "ignored")
        world = None
    if plausible_rank(dist.get("rank"), world or MAX_RANKS):
        rank, rank_source = dist["rank"], "distributedInfo"
    else:
        if "rank" in dist:
            warnings.append(f"{path}: distributedInfo.rank {str(dist.get('rank'))[:40]!r} is not a plausible rank; "
                            "using the file name")
        rank = rank_from_file_name(path)
        if rank is not None and rank < MAX_RANKS:
            rank_source = "filename"
        else:
            rank = None
    base = base_time_ns(doc.baseTimeNanoseconds)
    base_ns = base or 0
    if doc.baseTimeNanoseconds is not None and base is None:
        warnings.append(f"{path}: baseTimeNanoseconds {str(doc.baseTimeNanoseconds)[:40]!r} is not a usable "
                        "number; ignored")
    warnings.extend(col.notes)
    if col.n_bad:
        warnings.append(f"{path}: {col.n_bad} events with a non-numeric or out-of-range ts ignored")
    if col.n_bad_dur:
        warnings.append(f"{path}: {col.n_bad_dur} events with a dur of {MAX_DUR_US:.0e} µs or more "
                        "(beyond any real span) read as 0")
    col.base_ns = base_ns
    col.name_flags = np.array([col.flags[n] for n in col.name_list], dtype=np.int64)
    col.tid_int = int_col(col.tid_list)
    meta = _meta(doc, dist, path)
    spans = cpu_spans(col)
    if col.has_gpu:
        activity, coll, names = gpu_activity(col, spans)
        meta["device_type"] = "gpu"
    else:
        activity, coll, names = cpu_activity(col, spans)
        meta["device_type"] = "cpu"
    steps = steps_table(col.steps, col.ns)
    annotations = annotations_table(col.ann, col.ns)
    if not len(activity):
        warnings.append(f"{path}: no device activity or CPU operators found")
    trace = KinetoTrace(str(path), rank, rank_source, world, meta, activity, names, coll, steps,
                        annotations, warnings)
    trace.memory, trace.memory_ops = memory_tables(col)
    if trace.memory is not None:
        meta["device_memory"] = device_capacities(doc)
    if spans:
        trace.cpu_comm = pd.DataFrame({
            "start": np.array([x[0] for x in spans], dtype=np.int64),
            "end": np.array([x[1] for x in spans], dtype=np.int64),
            "tid": col.tid_int[np.array([x[2] for x in spans], dtype=np.int64)],
            "name": [x[3] for x in spans]})
    return trace


def cpu_spans(col: Collector) -> list[tuple]:
    """CPU-side collective spans (gloo:*, nccl:*, c10d::*, symm_mem::*): (start, end, tid, name)."""
    if not col.spans:
        return []
    s, e = col.ns([x[0] for x in col.spans], [x[1] for x in col.spans])
    return [(s[i], e[i], x[2], x[3]) for i, x in enumerate(col.spans)]


def comm_ops_by_external_id(col: Collector) -> dict:
    """External id → name of the first CPU collective span carrying it (the op that launched those kernels)."""
    out: dict = {}
    for x in col.spans:
        if x[4] is not None:
            out.setdefault(x[4], x[3])
    return out


def gpu_activity(col: Collector, spans: list[tuple]) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """Kernels, memcpy, memset and syncs with their class and the launching runtime call's start."""
    ts, dur, name, fixed, stream, tid, device, pid, corr, ext, coll = _cat_arrays(col.g, 11, col.G_TYPES)
    start, end = col.ns(ts, dur)
    stream = np.where(stream >= 0, stream, tid)
    device = np.where(device >= 0, device, pid)
    name_comm = (col.name_flags & F_COMM_KERNEL) != 0
    kind = np.where(fixed >= 0, fixed,
                    np.where(name_comm[name] | coll, KIND_CODE["comm"], KIND_CODE["compute"])).astype(np.int8)

    r_ts, r_corr, r_tid = _cat_arrays(col.r, 3, col.R_TYPES)
    r_start = col.ns(r_ts, np.zeros_like(r_ts))[0]
    launch_start = np.full(len(ts), -1, dtype=np.int64)
    launch_tid = np.full(len(ts), -1, dtype=np.int64)
    launch_pos = np.full(len(ts), -1, dtype=np.int64)
    if r_corr.size:
        order = np.argsort(r_corr, kind="stable")
        sc = r_corr[order]
        pos = np.searchsorted(sc, corr)
        pos_c = np.minimum(pos, sc.size - 1)
        hit = (corr >= 0) & (sc[pos_c] == corr)
        launch_pos[hit] = order[pos_c[hit]]
        launch_start[hit] = r_start[launch_pos[hit]]
        launch_tid[hit] = col.tid_int[r_tid[launch_pos[hit]]]

    # Kernels launched by a collective CPU op (symm_mem::*, …) are comm even without an NCCL name.
    comm_by_ext = comm_ops_by_external_id(col)
    symm = [k for k, nm in comm_by_ext.items() if nm.startswith("symm_mem::")]
    symm_set = set(symm)
    if symm:
        hit = (kind == KIND_CODE["compute"]) & np.isin(ext, arr(symm, np.int64))
        kind[hit] = KIND_CODE["comm"]

    name_id, uniq = pd.factorize(name, sort=False)
    names = [col.name_list[u] for u in uniq]
    activity = pd.DataFrame({
        "start": start, "end": end, "device": device, "stream": stream,
        "kind": pd.Categorical.from_codes(kind, KINDS), "name_id": name_id.astype(np.int32),
        "correlation": corr, "launch_start": launch_start, "launch_tid": launch_tid,
    })
    activity = activity.sort_values(["start", "end"], kind="stable")
    order = activity.index.to_numpy()
    activity = activity.reset_index(drop=True)

    recs = []
    span_index = None  # built on first need: only comm kernels whose op nothing else names ask for it
    a2a_only = sendrecv_is_alltoall(spans)
    for row in np.flatnonzero(activity["kind"].to_numpy() == "comm"):
        j = order[row]
        a = col.g_args[j]
        op = ""
        hit = col.table.match(col.name_list[name[j]])
        family = hit[0] if hit is not None else ("symm_mem" if ext[j] in symm_set else "")
        if a is not None and isinstance(a.coll_name, str):
            op = normalise_op(a.coll_name)
        if not op or op == "unknown":
            op = hit[1] if hit is not None else "unknown"
        if op == "unknown":
            if span_index is None:
                span_index = SpanIndex(spans)
            op = op_from_launcher(ext[j], launch_pos[j], r_tid, r_start, comm_by_ext, span_index)
        elif op == "sendrecv" and a2a_only and (a is None or not isinstance(a.coll_name, str)):
            op = "alltoall"
        recs.append(coll_record(row, op, a, nccl_peer(a, op), family))
    return activity, collectives_frame(recs, activity), names


def cpu_activity(col: Collector, spans: list[tuple]) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """CPU-only (gloo) traces: training-thread CPU ops are compute, gloo/c10d collective spans are comm."""
    ts, dur, tid, name, ua, span = _cat_arrays(col.c or [], 6, col.C_TYPES)
    start, end = col.ns(ts, dur)
    fl = col.name_flags[name] if name.size else np.empty(0, np.int64)
    if col.step_tids:
        main = np.array(sorted(col.step_tids), dtype=np.int32)
    elif tid.size:
        codes, first = np.unique(tid, return_index=True)
        busy = np.zeros(codes.size, dtype=np.int64)
        np.add.at(busy, np.searchsorted(codes, tid), end - start)
        by_first = np.argsort(first, kind="stable")
        main = np.array([codes[by_first[np.argmax(busy[by_first])]]], dtype=np.int32)
    else:
        main = np.empty(0, np.int32)
    not_step = (fl & F_STEP) == 0
    comm = not_step & ((fl & F_GLOO) != 0)
    compute = (not_step & ~comm & np.isin(tid, main) & ~ua & ((fl & F_COMM_SPAN) == 0)
               & ((fl & F_RPC) == 0))
    rows = np.flatnonzero(comm | compute)
    kind = np.where(comm[rows], KIND_CODE["comm"], KIND_CODE["compute"]).astype(np.int8)
    name_id, uniq = pd.factorize(name[rows], sort=False)
    names = [col.name_list[u] for u in uniq]
    activity = pd.DataFrame({
        "start": start[rows], "end": end[rows],
        "device": np.full(len(rows), -1, np.int64),
        "stream": col.tid_int[tid[rows]] if rows.size else np.empty(0, np.int64),
        "kind": pd.Categorical.from_codes(kind, KINDS),
        "name_id": name_id.astype(np.int32),
        "correlation": np.full(len(rows), -1, np.int64),
        "launch_start": np.full(len(rows), -1, np.int64),
        "launch_tid": np.full(len(rows), -1, np.int64),
    })
    activity = activity.sort_values(["start", "end"], kind="stable")
    order = activity.index.to_numpy()
    activity = activity.reset_index(drop=True)
    peer_of = p2p_peers(col)
    recs = []
    name_ids = activity["name_id"].to_numpy()
    for row in np.flatnonzero(activity["kind"].to_numpy() == "comm"):
        i = rows[order[row]]
        a = col.spans[span[i]][5] if span[i] >= 0 else None
        nm = names[name_ids[row]]
        op = normalise_op(a.coll_name if a is not None and isinstance(a.coll_name, str) else nm)
        peer = peer_of(tid[i], start[i]) if nm in ("gloo:send", "gloo:recv") else -1
        recs.append(coll_record(row, op, a, peer, "gloo" if nm.startswith("gloo:") else ""))
    _alltoall_sizes(col, recs)
    return activity, collectives_frame(recs, activity), names


def _alltoall_sizes(col: Collector, recs: list[tuple]) -> None:
    """gloo writes no sizes on its all_to_all spans: the k-th ``c10d::alltoall_base_`` op of the trace (in start
    order) gives the k-th all-to-all row its input and output element counts, when their numbers agree."""
    if not col.a2a:
        return
    rows = [i for i, r in enumerate(recs) if r[1] == "alltoall"]
    ops = sorted(col.a2a, key=lambda x: x[0])
    if len(rows) != len(ops):
        return
    for i, (_, sizes) in zip(rows, ops):
        if sizes is not None and recs[i][2] < 0 and recs[i][3] < 0:
            recs[i] = recs[i][:2] + (int(sizes[0]), int(sizes[1])) + recs[i][4:]


def p2p_peers(col: Collector) -> Callable[[int, int], int]:
    """Peer of a gloo:send/recv span: from the c10d::send/recv_ op just before it on the same thread."""
    by_tid: dict[int, tuple[list, list]] = {}
    if col.p2p:
        s, _ = col.ns([x[1] for x in col.p2p], np.zeros(len(col.p2p)))
        for (t, _, peer), st in zip(col.p2p, s):
            ts_list, peer_list = by_tid.setdefault(t, ([], []))
            ts_list.append(int(st))
            peer_list.append(peer)
    sorted_by_tid = {}
    for t, (ts_list, peer_list) in by_tid.items():
        order = np.argsort(ts_list, kind="stable")
        sorted_by_tid[t] = (np.array(ts_list)[order], np.array(peer_list)[order])

    def peer_of(t: int, st: int) -> int:
        hit = sorted_by_tid.get(int(t))
        if hit is None:
            return -1
        k = np.searchsorted(hit[0], st, side="right") - 1
        return int(hit[1][k]) if k >= 0 else -1

    return peer_of


def _meta(doc: TypedDoc, dist: dict, path: Path) -> dict:
    """KinetoTrace.meta from the document's members and distributedInfo (device_type is added by build_trace)."""
    props = doc.deviceProperties if isinstance(doc.deviceProperties, list) else []
    gpu_names = [p.get("name") for p in props if isinstance(p, dict) and p.get("name")]
    return {
        "host": doc.host_name if isinstance(doc.host_name, str) else None,
        "backend": dist.get("backend"),
        "pg_config": dist.get("pg_config") if isinstance(dist.get("pg_config"), list) else [],
        "pg_count": dist.get("pg_count") if dist.get("pg_count").__class__ is int else None,
        "nccl_version": dist.get("nccl_version"),
        "gpu_name": gpu_names[0] if gpu_names else None,
        "display_time_unit": doc.displayTimeUnit,
        "base_time_ns": doc.baseTimeNanoseconds,  # as written: readers validate it (kineto_values.base_time_ns)
        "distributed_info": bool(dist),
    }


def _cat_arrays(parts: list[tuple], n_fields: int, dtypes: tuple) -> list[np.ndarray]:
    """The collector's per-slice column tuples joined into one array per field (empty arrays of the dtypes)."""
    if not parts:
        return [np.empty(0, dt) for dt in dtypes]
    return [np.concatenate([p[i] for p in parts]) for i in range(n_fields)]
