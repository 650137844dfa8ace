"""Decoded events → compact columns, slice by slice, file order kept: what an event is to the analysis is
decided once per distinct name (``name_flags``), and events of no interest are dropped as they are seen.
"""
from __future__ import annotations

import re
from typing import Any, Optional

import numpy as np

from parsers.comm_kernels import DEFAULT_TABLE, CommKernelTable
from parsers.kineto_collectives import alltoall_sizes, gloo_size, peer_from_args
from parsers.kineto_events import Event, EventArgs, ShapeArgs
from parsers.kineto_steps import STEP
from parsers.kineto_trace import KIND_CODE
from parsers.kineto_values import I64_SAFE, MAX_DUR_US, arr, num, to_ns

_GPU_CATS = {"kernel": None, "Kernel": None, "gpu_memcpy": "memcpy", "Memcpy": "memcpy",
             "gpu_memset": "memset", "Memset": "memset", "cuda_sync": "sync"}
_RUNTIME_CATS = {"cuda_runtime", "Runtime", "cuda_driver", "hip_runtime"}
# CPU spans that are a collective (gloo work, c10d dispatch, nccl annotations, symmetric-memory collectives).
_COMM_CPU_SPAN = re.compile(r"^(gloo:|nccl:|c10d::|symm_mem::)")
F_COMM_KERNEL, F_COMM_SPAN, F_STEP, F_STEP_PREFIX, F_P2P, F_GLOO, F_RPC = 1, 2, 4, 8, 16, 32, 64
_KEEP_ANY_CAT = F_STEP | F_P2P
_C_GPU, _C_RUNTIME, _C_CPU, _C_UA, _C_GUA = 1, 2, 3, 4, 5
_CAT_CLASS = {**{c: _C_GPU for c in _GPU_CATS}, **{c: _C_RUNTIME for c in _RUNTIME_CATS},
              "cpu_op": _C_CPU, "Operator": _C_CPU, "user_annotation": _C_UA, "gpu_user_annotation": _C_GUA}
_GPU_FIXED = {c: (-1 if k is None else KIND_CODE[k]) for c, k in _GPU_CATS.items()}
_P2P_OPS = ("c10d::send", "c10d::recv_", "c10d::recv_any_source_")


def _name_flags(nm: str, table: CommKernelTable = DEFAULT_TABLE) -> int:
    """What a name means to the analysis, computed once per distinct name."""
    f = 0
    if table.match(nm) is not None:
        f |= F_COMM_KERNEL
    if _COMM_CPU_SPAN.match(nm):
        f |= F_COMM_SPAN
    if STEP.match(nm):
        f |= F_STEP
    if nm.startswith("ProfilerStep#"):
        f |= F_STEP_PREFIX
    if nm in _P2P_OPS:
        f |= F_P2P
    if nm.startswith("gloo:"):
        f |= F_GLOO
    if nm == "record_param_comms":
        f |= F_RPC
    return f


def _int_or(v: Any, default: int) -> int:
    return v if v.__class__ is int and -I64_SAFE < v < I64_SAFE else default


def _memory_row(e: Event, oom: bool) -> tuple:
    """A ``[memory]`` / ``[OutOfMemory]`` instant event → (ts, bytes, allocated, reserved, device type, device id,
    tid, oom); a missing or non-integer value is -1 (bytes: 0; ts: NaN, dropped when the table is built)."""
    a = e.args
    ts = e.ts
    ts = ts if ts.__class__ is float else num(ts, float("nan"))
    if a is None or not hasattr(a, "nbytes"):
        return ts, 0, -1, -1, -1, -1, _int_or(e.tid, -1), oom
    dt, di = _int_or(a.device_type, -1), _int_or(a.device_id, -1)
    return (ts, _int_or(a.nbytes, 0), _int_or(a.total_allocated, -1), _int_or(a.total_reserved, -1),
            dt if -128 <= dt < 128 else -1, di if -(1 << 31) < di < (1 << 31) else -1, _int_or(e.tid, -1), oom)


class Collector:
    """Reduces decoded events, slice by slice, to the columns the tables are built from (file order kept).

    Events of no interest (python_function, flows, most CPU ops once the trace is known to have GPU
    activity) are dropped as they are seen; everything kept is numpy columns or a few small lists.
    """

    G_TYPES = (np.float64, np.float64, np.int32, np.int8, np.int64, np.int64, np.int64, np.int64, np.int64,
               np.int64, np.bool_)
    R_TYPES = (np.float64, np.int64, np.int32)
    C_TYPES = (np.float64, np.float64, np.int32, np.int32, np.bool_, np.int32)
    M_TYPES = (np.float64, np.int64, np.int64, np.int64, np.int8, np.int32, np.int64, np.bool_)
    O_TYPES = (np.float64, np.float64, np.int64, np.int32)

    def __init__(self, table: Optional[CommKernelTable] = None) -> None:
        self.table = table or DEFAULT_TABLE  # which kernel names are communication (parsers/comm_kernels.py)
        self.n_events = 0
        self.n_bad = 0
        self.n_bad_dur = 0
        self.flags: dict[str, int] = {}
        self.name_code: dict[str, int] = {}
        self.name_list: list[str] = []
        self.tid_code: dict[Any, int] = {}
        self.tid_list: list[Any] = []
        self.g: list[tuple] = []       # ts, dur, name, fixed kind, stream, tid, device, pid, corr, ext, coll
        self.g_args: list[Optional[EventArgs]] = []
        self.r: list[tuple] = []       # ts, corr, tid
        self.c: Optional[list[tuple]] = []  # ts, dur, tid, name, is user_annotation, span index
        self.spans: list[tuple] = []   # ts, dur, tid, name, External id (int or None), args
        self.a2a: list[tuple] = []     # ts, (in elements, out elements) of each c10d::alltoall_base_ (or None)
        self.steps: list[tuple] = []   # step, ts, dur, on the GPU track
        self.step_tids: set[int] = set()
        self.ann: list[tuple] = []     # name, ts, dur, on the GPU track
        self.p2p: list[tuple] = []     # tid, ts, peer
        self.notes: list[str] = []     # what the decoder had to repair, for the warnings
        self.mem: list[tuple] = []     # per slice: ts, bytes, allocated, reserved, device type, device id, tid, oom
        #: keep CPU operators (ts, dur, tid, name) of a GPU trace too: the trace says it was profiled with
        #: profile_memory, so each memory peak can be given the operator that allocated it
        self.keep_mem_ops = False
        self.mem_ops: list[tuple] = []
        self.has_gpu = False
        self.last_x: Optional[tuple] = None    # (ts, tid, cat) of the last X event in file order
        self.thread_order: list[Any] = []      # tids in the order the thread_name metadata lists them
        # set when the tables are built (parsers/kineto_tables.build_trace): the clock's base, per-name flags,
        # the tids as int64 (-1 where not an int)
        self.base_ns = 0
        self.name_flags = np.empty(0, np.int64)
        self.tid_int = np.empty(0, np.int64)

    def kept_nothing(self) -> bool:
        """True when no event of interest was kept (no kernel, operator, step, annotation or collective span)."""
        return not (self.g or self.c or self.steps or self.spans or self.ann or self.p2p)

    def _tid(self, t: Any) -> int:
        try:
            c = self.tid_code.get(t)
        except TypeError:  # unhashable (a list): compare by value
            for i, v in enumerate(self.tid_list):
                if v == t:
                    return i
            self.tid_list.append(t)
            return len(self.tid_list) - 1
        if c is None:
            c = self.tid_code[t] = len(self.tid_list)
            self.tid_list.append(t)
        return c

    def _name(self, nm: str) -> int:
        c = self.name_code.get(nm)
        if c is None:
            c = self.name_code[nm] = len(self.name_list)
            self.name_list.append(nm)
        return c

    def add(self, events: list[Event]) -> None:
        """Take one slice of decoded events (the objects can be freed afterwards)."""
        self.n_events += len(events)
        gts, gdur, gname, gkind, gstream, gtid, gdev, gpid, gcorr, gext, gcoll = ([] for _ in range(11))
        rts, rcorr, rtid = [], [], []
        cts, cdur, ctid, cname, cua, cspan = ([] for _ in range(6))
        mem: list[tuple] = []
        ots, odur, otid, oname = [], [], [], []
        keep_ops = self.keep_mem_ops
        g_args = self.g_args
        flags, name_code, tid_code = self.flags, self.name_code, self.tid_code
        cat_class, gpu_fixed = _CAT_CLASS, _GPU_FIXED
        keep_cpu = self.c is not None
        n_bad = 0
        has_gpu = self.has_gpu
        for e in events:
            ph = e.ph
            if ph != "X":
                if ph == "i":
                    nm = e.name
                    if nm == "[memory]" or nm == "[OutOfMemory]":
                        mem.append(_memory_row(e, nm == "[OutOfMemory]"))
                elif ph == "M" and e.name == "thread_name" and e.tid not in self.thread_order:
                    self.thread_order.append(e.tid)
                continue
            ts = e.ts
            if ts is None:
                continue
            if ts.__class__ is not float:
                ts = num(ts)
            bad = not (-9e15 < ts < 9e15)  # NaN, ±inf, or beyond what int64 ns can hold
            if bad:
                n_bad += 1
                ts = 0.0
            cat = e.cat
            cls = cat_class.get(cat, 0) if cat.__class__ is str else 0
            nm = e.name
            if nm.__class__ is not str:
                nm = ""
            fl = flags.get(nm)
            if fl is None:
                fl = flags[nm] = _name_flags(nm, self.table)
            if keep_ops and cls == _C_CPU and not bad:
                c = name_code.get(nm)
                if c is None:
                    c = self._name(nm)
                d = e.dur
                ots.append(ts)
                odur.append(d if d.__class__ is float else num(d, 0.0))
                v = e.tid
                otid.append(v if v.__class__ is int else -1)
                oname.append(c)
            if not fl:
                if not cls or (cls == _C_CPU and not keep_cpu):
                    continue  # python_function, flows, ...; CPU ops of a GPU trace
            elif not cls and not fl & _KEEP_ANY_CAT:
                continue
            d = e.dur
            if d.__class__ is not float:
                d = num(d, 0.0)
            if not (0 < d < MAX_DUR_US):
                if d >= MAX_DUR_US:  # negatives and NaN stay a silent 0 as before; huge ones are counted
                    self.n_bad_dur += 1
                d = 0.0
            if cls == _C_GPU:
                if not bad:
                    has_gpu = True
                    keep_cpu = False  # a GPU trace: CPU operators are not activity (dropped below)
                    c = name_code.get(nm)
                    if c is None:
                        c = self._name(nm)
                    gts.append(ts)
                    gdur.append(d)
                    gname.append(c)
                    gkind.append(gpu_fixed[cat])
                    v = e.tid
                    gtid.append(v if v.__class__ is int else -1)
                    v = e.pid
                    gpid.append(v if v.__class__ is int else -1)
                    a = e.args
                    if a is None:
                        gstream.append(-1)
                        gdev.append(-1)
                        gcorr.append(-1)
                        gext.append(-1)
                        gcoll.append(False)
                        g_args.append(None)
                    else:
                        v = a.stream
                        gstream.append(v if v.__class__ is int else -1)
                        v = a.device
                        gdev.append(v if v.__class__ is int else -1)
                        v = a.correlation
                        gcorr.append(v if v.__class__ is int else -1)
                        v = a.external_id
                        gext.append(v if v.__class__ is int else -1)
                        coll = a.coll_name is not None
                        gcoll.append(coll)
                        g_args.append(a if coll or a.in_nelems is not None or a.out_nelems is not None
                                      or a.dtype is not None or a.pg_name is not None or a.pg_desc is not None
                                      or a.pg_ranks is not None or a.group_size is not None else None)
            elif cls == _C_RUNTIME:
                if not bad:
                    a = e.args
                    v = a.correlation if a is not None else None
                    rcorr.append(v if v.__class__ is int else -1)
                    rts.append(ts)
                    t = e.tid
                    c = tid_code.get(t) if t.__class__ is int else None
                    rtid.append(self._tid(t) if c is None else c)
            elif cls:
                if cls != _C_GUA:
                    span = -1
                    t = e.tid
                    tc = tid_code.get(t) if t.__class__ is int else None
                    if tc is None:
                        tc = self._tid(t)
                    if fl & F_COMM_SPAN:
                        a = e.args
                        if nm == "c10d::alltoall_base_" and a is not None:
                            self.a2a.append((ts, alltoall_sizes(a)))
                        if a is not None and isinstance(a, ShapeArgs):
                            gloo_size(nm, a)
                        x = a.external_id if a is not None else None
                        span = len(self.spans)
                        self.spans.append((ts, d, tc, nm, x if isinstance(x, int) else None, a))
                    if keep_cpu:
                        c = name_code.get(nm)
                        if c is None:
                            c = self._name(nm)
                        cts.append(ts)
                        cdur.append(d)
                        ctid.append(tc)
                        cname.append(c)
                        cua.append(cls == _C_UA)
                        cspan.append(span)
                if cls != _C_CPU and not bad and not fl & F_STEP_PREFIX:
                    self.ann.append((nm, ts, d, cls == _C_GUA))
            if fl & F_STEP:
                if not bad:
                    n_step = int(STEP.match(nm).group(1))
                    if n_step < I64_SAFE:
                        self.steps.append((n_step, ts, d, cat == "gpu_user_annotation"))
                self.step_tids.add(self._tid(e.tid))
            if fl & F_P2P:
                self.p2p.append((self._tid(e.tid), ts, peer_from_args(e.args)))
        self.n_bad += n_bad
        for e in reversed(events):  # where a cut-off file stops: its last complete event (file order)
            if e.ph == "X" and e.ts is not None:
                self.last_x = (num(e.ts), e.tid, e.cat)
                break
        self.has_gpu = has_gpu
        if gts:
            self.g.append(tuple(arr(v, t) for v, t in zip(
                (gts, gdur, gname, gkind, gstream, gtid, gdev, gpid, gcorr, gext, gcoll), self.G_TYPES)))
        if mem:
            self.mem.append(tuple(arr(list(v), t) for v, t in zip(zip(*mem), self.M_TYPES)))
        if ots:
            self.mem_ops.append(tuple(arr(v, t) for v, t in zip((ots, odur, otid, oname), self.O_TYPES)))
        if rts:
            self.r.append(tuple(arr(v, t) for v, t in zip((rts, rcorr, rtid), self.R_TYPES)))
        if has_gpu:
            self.c = None  # a GPU trace: CPU operators are not activity
        elif cts:
            self.c.append(tuple(arr(v, t) for v, t in zip(
                (cts, cdur, ctid, cname, cua, cspan), self.C_TYPES)))

    def cut_point(self) -> dict:
        """Where a cut-off file stopped: the start (local ns) and thread of its last complete event, and the
        threads its metadata names that left no event (their part of the file came after the cut: lost whole).

        Kineto writes events thread by thread, each in time order (the metadata first), so on the cut thread
        nothing after that start was kept. Empty when the last event is the profiler's own span (only the
        file's tail was lost).
        """
        if self.last_x is None or self.last_x[2] == "Trace" or not -9e15 < self.last_x[0] < 9e15:
            return {}
        ts, tid, _ = self.last_x
        seen = set(self.tid_code)
        for part in self.g:
            seen.update(int(x) for x in np.unique(part[5]))
        lost = [t for t in self.thread_order if t.__class__ is int and t not in seen]
        return {"cut_at_ns": int(self.ns(np.array([ts]), np.zeros(1))[0][0]),
                "cut_tid": tid if tid.__class__ is int else -1, "lost_tids": lost}

    def ns(self, ts: np.ndarray, dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """µs starts and durations → int64 ns starts and ends on the trace's clock (its base time added)."""
        start = to_ns(np.asarray(ts, dtype=np.float64)) + self.base_ns
        return start, start + to_ns(np.asarray(dur, dtype=np.float64))
