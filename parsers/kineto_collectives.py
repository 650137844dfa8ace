"""The collectives rows of a trace: the op, element counts, dtype, process group, peer and kernel family of each
communication activity, and the op of a kernel whose name and args do not say (from the CPU op that launched it).
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
import pandas as pd

from parsers.collective_names import normalise_op
from parsers.kineto_events import EventArgs, ShapeArgs
from parsers.kineto_values import i64, plausible_rank


def peer_from_args(a: Optional[EventArgs]) -> int:
    """c10d::send/recv_ record ``Concrete Inputs`` = [tensors, pg, peer, tag]: the peer rank, or -1."""
    ci = a.concrete_inputs if a is not None else None
    if isinstance(ci, list) and len(ci) > 2:
        try:
            return int(ci[2])
        except (TypeError, ValueError):
            return -1
    return -1


def nccl_peer(a: Optional[EventArgs], op: str) -> int:
    """PyTorch's NCCL metadata names a send's `Dst Rank` and a recv's `Src Rank` (global ranks); else -1."""
    v = (a.dst_rank if op == "send" else a.src_rank if op == "recv" else None) if a is not None else None
    if isinstance(v, str) and v.isdigit() and len(v) < 8:
        v = int(v)
    return v if plausible_rank(v) else -1


def op_from_launcher(ext_id, launch_pos, r_tid, r_start, comm_by_ext, spans) -> str:
    """The op of a comm kernel whose name and args do not say: ask the CPU op that launched it."""
    if ext_id >= 0 and ext_id in comm_by_ext:
        op = normalise_op(comm_by_ext[ext_id])
        if op != "unknown":
            return op
    if launch_pos >= 0:
        hit = spans.innermost(r_tid[launch_pos], r_start[launch_pos])
        if hit is not None:
            return normalise_op(hit)
    return "unknown"


def sendrecv_is_alltoall(spans: list[tuple]) -> bool:
    """Whether the trace's SendRecv kernels are all_to_all. NCCL runs all_to_all as grouped send/recv
    (ncclKernel_SendRecv): in a trace whose CPU side calls all_to_all and no point-to-point op, a SendRecv kernel
    is the all_to_all the program called. Decided per trace, not per kernel, so a trace whose profiler dropped
    some launches names them all alike. ``spans``: the CPU collective spans (start, end, tid, name)."""
    span_names = {str(x[3]) for x in spans}
    cpu_ops = {normalise_op(n) for n in span_names}
    return ("alltoall" in cpu_ops and not cpu_ops & {"send", "recv", "sendrecv", "coalesced"}
            and not any(k in n.lower() for n in span_names for k in ("isend", "irecv", "batch_p2p")))


class SpanIndex:
    """CPU collective spans per thread, sorted by start: the innermost span holding a time in O(log n)."""

    def __init__(self, spans: list[tuple]) -> None:
        by_tid: dict[Any, list[tuple]] = {}
        for s, e, tid, nm in spans:
            by_tid.setdefault(tid, []).append((s, e, nm))
        self._idx = {}
        for tid, rows in by_tid.items():
            rows.sort(key=lambda r: r[0])
            ends = np.array([r[1] for r in rows], dtype=np.int64)
            self._idx[tid] = (np.array([r[0] for r in rows], dtype=np.int64), ends,
                              np.maximum.accumulate(ends), [r[2] for r in rows])

    def innermost(self, tid: Any, t: int) -> Optional[str]:
        """Name of the latest-starting span on ``tid`` with start <= t < end, None when there is none."""
        hit = self._idx.get(tid)
        if hit is None:
            return None
        starts, ends, reach, names = hit
        k = int(np.searchsorted(starts, t, side="right")) - 1
        while k >= 0 and reach[k] > t:  # some span up to k still runs at t: step outwards to it
            if ends[k] > t:
                return names[k]
            k -= 1
        return None


_COLL_COLUMNS = ["act_index", "op", "in_nelems", "out_nelems", "dtype", "pg_name", "pg_desc", "pg_ranks",
                 "group_size", "peer", "family", "seq", "comms_id"]


def collectives_frame(recs: list[tuple], activity: pd.DataFrame) -> pd.DataFrame:
    """The collectives table from coll_record rows, with each row's start, end and stream from its activity row."""
    coll = pd.DataFrame.from_records(recs, columns=_COLL_COLUMNS)
    for c in ("act_index", "in_nelems", "out_nelems", "group_size", "peer", "seq"):
        coll[c] = coll[c].astype(np.int64)
    idx = coll["act_index"].to_numpy()
    coll.insert(1, "start", activity["start"].to_numpy()[idx])
    coll.insert(2, "end", activity["end"].to_numpy()[idx])
    coll.insert(3, "stream", activity["stream"].to_numpy()[idx])
    return coll


def coll_record(row: int, op: str, a: Optional[EventArgs], peer: int, family: str = "") -> tuple:
    """One collectives row from an activity row, its op, the event args (None when it had none) and the kernel
    family (parsers/comm_kernels.py; "" when only the args or the launching CPU op said it is communication)."""
    if a is None:
        return (row, op, -1, -1, "", "", "", "", -1, peer, family, -1, "")
    return (
        row, op,
        i64(a.in_nelems),
        i64(a.out_nelems),
        str(a.dtype) if a.dtype is not None else "",
        str(a.pg_name) if a.pg_name is not None else "",
        str(a.pg_desc) if a.pg_desc is not None else "",
        str(a.pg_ranks) if a.pg_ranks is not None else "",
        i64(a.group_size),
        peer,
        family,
        _seq(a.seq),
        str(a.comms_id)[:40] if a.comms_id is not None else "",
    )


def _seq(v: Any) -> int:
    """Kineto's ``Seq`` (an int, or its decimal string): the group's collective sequence number; -1 when absent."""
    if isinstance(v, str) and v.isdigit() and len(v) < 19:
        v = int(v)
    return i64(v) if v.__class__ is int and v >= 0 else -1


def _int_list(v: Any) -> Optional[list[int]]:
    """'[96, 32]' (record_shapes' Concrete Inputs) → [96, 32]; [] for '[]'; None when unreadable."""
    if not isinstance(v, str) or not v.startswith("[") or len(v) > 4096:
        return None
    inner = v.strip("[] ")
    if not inner:
        return []
    try:
        out = [int(x) for x in inner.split(",")]
    except ValueError:
        return None
    return out if all(0 <= x < 1 << 40 for x in out) else None


def alltoall_sizes(a: Any) -> Optional[tuple[int, int]]:
    """(input elements, output elements) of a ``c10d::alltoall_base_`` op from record_shapes' args: its Concrete
    Inputs are [output, input, process group, output_split_sizes, input_split_sizes, async, timeout] and its Input
    Dims the output's and input's shapes; the split sizes count rows (an empty list splits evenly). The rows a rank
    receives are its experts' tokens in an expert-parallel dispatch. None without the shapes."""
    dims = getattr(a, "input_dims", None)
    if not isinstance(dims, list) or len(dims) < 2:
        return None
    out_shape, in_shape = dims[0], dims[1]
    if not (isinstance(out_shape, list) and isinstance(in_shape, list) and out_shape and in_shape
            and all(x.__class__ is int and 0 <= x < 1 << 40 for x in out_shape + in_shape)):
        return None

    def elems(shape: list[int]) -> int:
        n = 1
        for x in shape:
            n *= x
        return n
    ci = a.concrete_inputs if isinstance(a.concrete_inputs, list) and len(a.concrete_inputs) > 4 else None
    out_split = _int_list(ci[3]) if ci else None
    in_split = _int_list(ci[4]) if ci else None
    width_out = elems(out_shape[1:]) if len(out_shape) > 1 else 1
    width_in = elems(in_shape[1:]) if len(in_shape) > 1 else 1
    n_in = sum(in_split) * width_in if in_split else elems(in_shape)
    n_out = sum(out_split) * width_out if out_split else elems(out_shape)
    return (n_in, n_out) if n_in < I64_MAX and n_out < I64_MAX else None


I64_MAX = 1 << 62


#: gloo spans whose first input is the tensor the collective moves (all_gather / scatter put outputs first)
_GLOO_FIRST_INPUT = {"gloo:all_reduce", "gloo:broadcast", "gloo:reduce", "gloo:send", "gloo:recv"}
#: C++ type names the profiler writes for dtypes → the names the rest of the project uses
_CPP_TYPES = {"long int": "int64", "long": "int64", "int": "int32", "short int": "int16", "short": "int16",
              "signed char": "int8", "unsigned char": "uint8", "double": "float64", "float": "float32",
              "c10::half": "float16", "c10::bfloat16": "bfloat16", "bool": "bool"}


def gloo_size(name: str, a: ShapeArgs) -> None:
    """Element count and dtype of a gloo collective span from its record_shapes args (gloo writes no "In msg
    nelems"): the first input's shape, the product of its dims ([] is a 0-dim tensor: one element)."""
    dims, types = a.input_dims, a.input_type
    a.input_dims = a.input_type = None
    if name not in _GLOO_FIRST_INPUT or a.in_nelems is not None or not isinstance(dims, list) or not dims:
        return
    first = dims[0]
    if not isinstance(first, list) or not all(x.__class__ is int and 0 <= x < 1 << 48 for x in first):
        return
    n = 1
    for x in first:
        n *= x
    a.in_nelems = n
    if a.dtype is None and isinstance(types, list) and types and isinstance(types[0], str) and types[0]:
        a.dtype = _CPP_TYPES.get(types[0].lower(), types[0])
