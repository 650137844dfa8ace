"""PyTorch profiler (Kineto / Chrome trace) JSON → one rank's compact tables: ``load_trace(path) -> KinetoTrace``.

Only the fields the analysis needs are decoded (a typed msgspec decoder skips the rest without building a
dict per event), then turned into numpy/pandas columns. Every era in the public corpus loads: old
``ncclKernel_*(ncclWorkElem)`` names, ``ncclDevKernel_*``, RCCL's ``ncclDevKernel_Generic`` (op only from
args or the launching CPU op), ``displayTimeUnit: "ns"``, string ``baseTimeNanoseconds``, traces without
``distributedInfo`` (rank from the file name), CPU-only gloo traces and thinned traces without flow events.

The reader is in pieces with one job each, in the order the bytes flow through them:
``kineto_events`` (the structs events decode into), ``kineto_decode`` (bytes → events, repairing what can be
repaired), ``kineto_stream`` (the streaming reader: slices of traceEvents, salvage at damage, the size limits),
``kineto_collect`` (events → compact columns, slice by slice), ``kineto_tables`` (columns → the tables, with
``kineto_collectives`` for the collectives rows and ``kineto_steps`` for steps and annotations),
``kineto_values`` (bounded numbers) and ``kineto_trace`` (KinetoTrace). This module chooses the path (streaming,
or the whole document for small files of an odd layout) and hands on the names callers import from here.
"""
from __future__ import annotations

import gc
from pathlib import Path
from typing import Optional

from parsers.comm_kernels import CommKernelTable
from parsers.errors import EmptyInput, InputError
from parsers.file_names import rank_from_file_name
from parsers.kineto_collect import Collector
from parsers.kineto_decode import DEPTH_HINT, Fallback, decode_document
from parsers.kineto_events import TypedDoc
from parsers.kineto_stream import CHUNK_BYTES, MAX_EVENT_BYTES, WHOLE_DOCUMENT_BYTES, salvage_info, stream_trace
from parsers.kineto_tables import build_trace
from parsers.kineto_trace import KIND_CODE, KINDS, KinetoTrace
from parsers.kineto_values import MAX_RANKS
from parsers.trace_bytes import read_trace_bytes

__all__ = ["CHUNK_BYTES", "KINDS", "KIND_CODE", "MAX_EVENT_BYTES", "MAX_RANKS", "WHOLE_DOCUMENT_BYTES", "KinetoTrace",
           "load_trace", "rank_from_file_name"]


def load_trace(path: str | Path, chunk_bytes: int = CHUNK_BYTES,
               comm_kernels: Optional[CommKernelTable] = None, refuse_empty: bool = False) -> KinetoTrace:
    """Parse one Kineto/Chrome trace file (optionally gzip); salvage cut-off or damaged input with a warning.

    The file is inflated and decoded slice by slice (``chunk_bytes`` of ``traceEvents`` at a time) and each
    slice is reduced to compact columns at once, so memory stays near one slice plus the kept columns, whatever
    the file. Damage (a bad token, flipped bytes, a corrupt gzip member) keeps every event before it. Small files
    with an odd top-level layout go through the whole-document path, which gives the same tables. ``comm_kernels``: the table that says which kernels are
    communication (parsers/comm_kernels.py; the built-in one when None, or one with the user's patterns).
    ``refuse_empty``: raise EmptyInput, before any table is built, for a file that kept no event of interest (an
    empty profile costs its decode only: thousands of them must not cost an analysis each).
    """
    path = Path(path)
    warnings: list[str] = []
    try:
        col, doc, salvage = stream_trace(path, chunk_bytes, comm_kernels)
    except Fallback:
        col, doc, salvage = _whole(path, comm_kernels)
    if refuse_empty and salvage is None and col.kept_nothing():
        raise EmptyInput(path, "nothing to analyse: no operator, kernel, step or collective among its trace events "
                               "(an empty profile)")  # one wording, so thousands group as one skip reason
    if salvage is not None and salvage["events_recovered"] == 0:
        what = "damaged" if salvage.get("damaged") else "truncated"
        raise InputError(path, f"{what} before the first complete event ({salvage['reason']})")
    if salvage is not None:
        what = "damaged" if salvage.get("damaged") else "truncated"
        warnings.append(
            f"{path}: {what} trace salvaged: kept {salvage['events_recovered']} complete events "
            f"({salvage['bytes_kept']} of {salvage['bytes_read']} bytes; {salvage['reason']})")
    trace = build_trace(col, path, doc, warnings)
    if salvage is not None:
        salvage.update(col.cut_point())
    trace.salvage = salvage
    return trace


def _whole(path: Path, table: Optional[CommKernelTable] = None) -> tuple[Collector, TypedDoc, Optional[dict]]:
    """Whole-document path (small files with an odd layout): read all bytes, decode once, collect."""
    try:
        raw = read_trace_bytes(path, max_bytes=WHOLE_DOCUMENT_BYTES)
    except InputError as exc:
        if "inflates to more than" not in exc.reason:
            raise
        raise InputError(path, f"the JSON around traceEvents is not laid out as a trace and the file is larger "
                               f"than {WHOLE_DOCUMENT_BYTES} bytes; not read") from None
    notes: list[str] = []
    try:
        doc, cut_info = decode_document(path, raw.data, notes)
    except RecursionError:
        raise InputError(path, f"JSON nested too deep to decode (more than about {DEPTH_HINT} levels) outside "
                               "the event list") from None
    if doc.traceEvents is None:
        raise InputError(path, "JSON without a traceEvents array: not a profiler trace")
    salvage = None
    if raw.gzip_truncated or cut_info is not None:
        kept = cut_info[1] if cut_info else len(raw.data)
        salvage = salvage_info(raw.gzip_error or "JSON ends mid-document (file cut off while being written)",
                               len(raw.data), kept, len(doc.traceEvents))
    col = Collector(table)
    col.notes = [f"{path}: {n}" for n in notes]
    if raw.gzip_note:
        col.notes.append(f"{path}: {raw.gzip_note}")
    gc_was = gc.isenabled()
    gc.disable()
    try:
        col.add(doc.traceEvents)
    finally:
        if gc_was:
            gc.enable()
    doc.traceEvents = None
    return col, doc, salvage
