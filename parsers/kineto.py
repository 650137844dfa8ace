"""PyTorch profiler (Kineto / Chrome trace) JSON → one rank's compact tables.

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
from parsers.comm_kernels import DEFAULT_TABLE, CommKernelTable
from parsers.errors import InputError
from parsers.trace_bytes import BlockReader, quote_non_finite, read_trace_bytes, salvage_json_prefix, scan_array

KINDS = ("compute", "comm", "memcpy", "memset", "sync")
KIND_CODE = {k: i for i, k in enumerate(KINDS)}

_GPU_CATS = {"kernel": None, "Kernel": None, "gpu_memcpy": "memcpy", "Memcpy": "memcpy",
             "gpu_memset": "memset", "Memset": "memset", "cuda_sync": "sync"}
_RUNTIME_CATS = {"cuda_runtime", "Runtime", "cuda_driver", "hip_runtime"}
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_RANK_IN_NAME = re.compile(r"(?:^|[^a-z])(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)
# CPU spans that are a collective (gloo work, c10d dispatch, nccl annotations, symmetric-memory collectives).
_COMM_CPU_SPAN = re.compile(r"^(gloo:|nccl:|c10d::|symm_mem::)")


class _Args(msgspec.Struct, gc=False):
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
    src_rank: Any = msgspec.field(default=None, name="Src Rank")  # NCCL recv metadata: the global peer rank
    dst_rank: Any = msgspec.field(default=None, name="Dst Rank")  # NCCL send metadata


class _Event(msgspec.Struct, gc=False):
    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    args: Optional[_Args] = None


class _ShapeArgs(_Args, gc=False):
    """_Args plus record_shapes' input shapes and dtypes: decoded only for slices that hold gloo collective spans
    (gloo writes no "In msg nelems"; see _gloo_size), so GPU traces never build these lists."""

    input_dims: Any = msgspec.field(default=None, name="Input Dims")
    input_type: Any = msgspec.field(default=None, name="Input type")


class _ShapeEvent(_Event, gc=False):
    args: Optional[_ShapeArgs] = None


_GLOO_MARK = b'"gloo:'


class _DocMembers(msgspec.Struct):
    """The top-level members of a trace the analysis reads besides its events."""

    distributedInfo: Any = None
    deviceProperties: Any = None
    displayTimeUnit: Any = None
    baseTimeNanoseconds: Any = None
    host_name: Any = None
    traceName: Any = None


class _TypedDoc(_DocMembers):
    traceEvents: Optional[list[_Event]] = None


class _LenientDoc(_DocMembers):
    """Events left undecoded, for documents where some of them have the wrong shape."""

    traceEvents: Optional[list[Any]] = None


_DECODER = msgspec.json.Decoder(_TypedDoc)


class _TypedShapeDoc(_DocMembers):
    traceEvents: Optional[list[_ShapeEvent]] = None


_SHAPE_DECODER = msgspec.json.Decoder(_TypedShapeDoc)


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

    @property
    def device_type(self) -> str:
        return self.meta.get("device_type", "gpu")


#: Decoded size of one slice of ``traceEvents`` (bytes). Bounds the transient event objects per worker.
CHUNK_BYTES = 2 << 20

_CHUNK_DECODER = msgspec.json.Decoder(list[_Event])
_CHUNK_SHAPES = msgspec.json.Decoder(list[_ShapeEvent])
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_WS = b" \t\r\n"


class _Fallback(Exception):
    """The streaming path cannot reproduce the whole-document result exactly; re-read the file whole."""


#: With no `}, {` event boundary in this many bytes the data is damaged (or holds one absurd event): the stream
#: stops there, keeping every event before. It bounds the buffer, so memory is bounded whatever the file.
MAX_EVENT_BYTES = 32 << 20
#: Top-level layouts only the whole-document decoder reads exactly (odd members around the array) are re-read
#: whole, but only from files up to this size; larger ones keep what the stream read.
WHOLE_DOCUMENT_BYTES = 64 << 20
_BOM = b"\xef\xbb\xbf"


def load_trace(path: str | Path, chunk_bytes: int = CHUNK_BYTES,
               comm_kernels: Optional[CommKernelTable] = None) -> KinetoTrace:
    """Parse one Kineto/Chrome trace file (optionally gzip); salvage cut-off or damaged input with a warning.

    The file is inflated and decoded slice by slice (``chunk_bytes`` of ``traceEvents`` at a time) and each
    slice is reduced to compact columns at once, so memory stays near one slice plus the kept columns, whatever
    the file. Damage (a bad token, flipped bytes, a corrupt gzip member) keeps every event before it. Small files
    with an odd top-level layout go through the whole-document path, which gives the same tables. ``comm_kernels``: the table that says which kernels are
    communication (parsers/comm_kernels.py; the built-in one when None, or one with the user's patterns).
    """
    path = Path(path)
    warnings: list[str] = []
    try:
        col, doc, salvage = _stream(path, chunk_bytes, comm_kernels)
    except _Fallback:
        col, doc, salvage = _whole(path, comm_kernels)
    if salvage is not None and salvage["events_recovered"] == 0:
        what = "damaged" if salvage.get("damaged") else "truncated"
        raise InputError(path, f"{what} before the first complete event ({salvage['reason']})")
    if salvage is not None:
        what = "damaged" if salvage.get("damaged") else "truncated"
        warnings.append(
            f"{path}: {what} trace salvaged: kept {salvage['events_recovered']} complete events "
            f"({salvage['bytes_kept']} of {salvage['bytes_read']} bytes; {salvage['reason']})")
    trace = col.finish(path, doc, warnings)
    if salvage is not None:
        salvage.update(col.cut_point())
    trace.salvage = salvage
    return trace


def _salvage_info(reason: str, bytes_read: int, kept: int, events: int, damaged: bool = False) -> dict:
    out = {"reason": reason, "bytes_read": bytes_read, "bytes_kept": kept, "events_recovered": events}
    if damaged:
        out["damaged"] = True
    return out


def _whole(path: Path, table: Optional[CommKernelTable] = None) -> tuple["_Collector", _TypedDoc, Optional[dict]]:
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
        doc, cut_info = _decode(path, raw.data, notes)
    except RecursionError:
        raise InputError(path, f"JSON nested too deep to decode (more than about {_DEPTH_HINT} levels) outside "
                               "the event list") from None
    if doc.traceEvents is None:
        raise InputError(path, "JSON without a traceEvents array: not a profiler trace")
    salvage = None
    if raw.gzip_truncated or cut_info is not None:
        kept = cut_info[1] if cut_info else len(raw.data)
        salvage = _salvage_info(raw.gzip_error or "JSON ends mid-document (file cut off while being written)",
                                len(raw.data), kept, len(doc.traceEvents))
    col = _Collector(table)
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


class _SliceNotes:
    """What the slice decoder repaired or skipped, reported once per file."""

    def __init__(self) -> None:
        self.skipped = 0       # elements that are not event objects
        self.stripped = 0      # events kept without their malformed args
        self.too_deep = 0      # events nested deeper than the decoder's recursion limit
        self.out_of_range = 0  # events holding a number no float can hold (1e400)
        self.utf8_at = -1      # absolute offset of the first invalid UTF-8 byte
        self.non_finite = 0    # bare NaN / Infinity literals (not JSON) read as non-finite numbers

    def lines(self) -> list[str]:
        out = []
        if self.utf8_at >= 0:
            out.append(f"invalid UTF-8 replaced (first at byte {self.utf8_at})")
        if self.skipped or self.stripped:
            out.append(f"{self.skipped} trace events that are not event objects skipped, {self.stripped} events "
                       "with malformed args kept without them")
        if self.non_finite:
            out.append(f"{self.non_finite} NaN/Infinity literals (not JSON) read as non-finite numbers: an event "
                       "with such a ts is ignored, such a dur counts as 0")
        if self.out_of_range:
            out.append(f"{self.out_of_range} trace events holding a number beyond float range skipped")
        if self.too_deep:
            out.append(f"{self.too_deep} trace events nested too deep to decode (more than about "
                       f"{_DEPTH_HINT} levels) skipped")
        return out


_DEPTH_HINT = 1000
_EVENT_DECODER = msgspec.json.Decoder(_Event)
_EVENT_SHAPES = msgspec.json.Decoder(_ShapeEvent)
_RAW_LIST = msgspec.json.Decoder(list[msgspec.Raw])
_BYTE_AT = re.compile(r"\(byte (\d+)\)")


def _events_of(part, notes: _SliceNotes, base: int, shapes: bool = False) -> list[_Event]:
    """Decode one slice (a JSON list of events); malformed events and bad UTF-8 are repaired or skipped.

    Raises msgspec.DecodeError only when the slice is not valid JSON text (a wrong boundary guess or damage).
    ``base`` is the absolute offset of the slice's first byte, for the notes; ``shapes``: the slice holds gloo
    spans, decode their input shapes too.
    """
    try:
        return (_CHUNK_SHAPES if shapes else _CHUNK_DECODER).decode(part)
    except (msgspec.ValidationError, RecursionError):
        data = bytes(part)
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as bad:
            if notes.utf8_at < 0:
                notes.utf8_at = base + bad.start
            data = data.decode("utf-8", "replace").encode("utf-8")
        return _lenient_events(data, notes, shapes)
    except (UnicodeDecodeError, msgspec.DecodeError) as exc:
        if not isinstance(exc, UnicodeDecodeError) and "UTF-8" not in str(exc):
            fixed, n = quote_non_finite(bytes(part))
            if not n:
                raise
            events = _events_of(fixed, notes, base, shapes)  # raises (the slice is damaged) when still invalid
            notes.non_finite += n
            return events
        data = bytes(part)
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as bad:
            if notes.utf8_at < 0:
                notes.utf8_at = base + bad.start
            return _events_of(data.decode("utf-8", "replace").encode("utf-8"), notes, base, shapes)
        raise exc from None


def _lenient_events(part, notes: _SliceNotes, shapes: bool = False) -> list[_Event]:
    """Event by event: an element of the wrong shape is skipped (or kept without bad args), a too-deep one skipped."""
    try:
        raws = _RAW_LIST.decode(part)
    except RecursionError:
        data = bytes(part)
        ends, _ = scan_array(data, 0, all_ends=True)
        raws, prev = [], 1
        for e in ends.tolist():
            s0 = data.find(b"{", prev, e)
            if s0 >= 0:
                raws.append(data[s0:e])
            prev = e
    out = []
    for r in raws:
        try:
            out.append((_EVENT_SHAPES if shapes else _EVENT_DECODER).decode(r))
            continue
        except RecursionError:
            notes.too_deep += 1
            continue
        except msgspec.DecodeError:
            pass
        try:
            e = msgspec.json.decode(r)
        except RecursionError:
            notes.too_deep += 1
            continue
        except msgspec.ValidationError:
            notes.out_of_range += 1
            continue
        except msgspec.DecodeError:
            notes.skipped += 1
            continue
        if not isinstance(e, dict):
            notes.skipped += 1
            continue
        try:
            out.append(msgspec.convert({k: v for k, v in e.items() if k != "args"}, _Event))
            notes.stripped += 1
        except msgspec.ValidationError:
            notes.skipped += 1
    return out


def _stream(path: Path, chunk_bytes: int,
            table: Optional[CommKernelTable] = None) -> tuple["_Collector", _TypedDoc, Optional[dict]]:
    """Streaming path: header, then ``traceEvents`` in slices cut at event boundaries, then the trailer.

    A slice ends at a ``}`` followed by ``,`` and ``{`` (found by looking only at bytes not yet searched); if
    that guess falls inside a string or a nested object, the slice is not valid JSON and the decoder says so,
    and the exact scanner (strings and nesting respected, in bounded pieces) finds the real cut. Bad tokens
    and flipped bytes end the stream at the last complete event before them (a salvage that says where).
    Raises _Fallback only for odd top-level layouts of files up to WHOLE_DOCUMENT_BYTES.
    """
    reader = BlockReader(path, block_bytes=max(chunk_bytes, 1 << 16))
    blocks = reader.blocks()
    st = _Stream(reader, blocks, chunk_bytes, table)
    gc_was = gc.isenabled()
    gc.disable()  # millions of small objects: the cyclic GC only costs time here
    try:
        return st.run()
    finally:
        if gc_was:
            gc.enable()
        blocks.close()


class _Stream:
    """State of one streaming parse: the buffer (``buf[0]`` is inflated byte ``offset``) and the collector."""

    def __init__(self, reader: BlockReader, blocks, chunk_bytes: int,
                 table: Optional[CommKernelTable] = None) -> None:
        self.reader, self.blocks, self.chunk = reader, blocks, chunk_bytes
        self.buf = bytearray()
        self.offset = 0
        self.eof = False
        self.col = _Collector(table)
        self.notes = _SliceNotes()
        self.bare = False  # Chrome's bare-array form: nothing may follow the array

    def more(self) -> bool:
        """Append the next block; False at the end of the input."""
        if self.eof:
            return False
        b = next(self.blocks, None)
        if b is None:
            self.eof = True
            return False
        self.buf += b
        return True

    def fallback_allowed(self) -> bool:
        return self.reader.total <= WHOLE_DOCUMENT_BYTES and (self.eof or self.reader.compressed_bytes
                                                             <= WHOLE_DOCUMENT_BYTES)

    def fallback(self, why: str):
        """Re-read small files whole; a large one with this layout is refused with ``why``."""
        if self.fallback_allowed():
            raise _Fallback()
        raise InputError(self.reader.path, why)

    def run(self) -> tuple["_Collector", _TypedDoc, Optional[dict]]:
        head, start = self.header()
        result = self.events(start)
        col = self.col
        col.notes = [f"{self.reader.path}: {n}" for n in self.notes.lines()]
        if isinstance(result, dict):  # salvage: the events ended at a cut or damage
            self.note_gzip()
            return col, head, result
        tail = self.trailer(result)
        if tail is not None:
            for f in head.__struct_fields__:
                v = getattr(tail, f)
                if v is not None:
                    setattr(head, f, v)
        self.note_gzip()
        salvage = None
        if self.reader.gzip_truncated:
            r = self.reader
            salvage = _salvage_info(r.gzip_error, r.total, r.total, col.n_events)
        return col, head, salvage

    def note_gzip(self) -> None:
        if self.reader.gzip_note:
            self.col.notes.append(f"{self.reader.path}: {self.reader.gzip_note}")

    # --- header ----------------------------------------------------------------------------------------
    def header(self) -> tuple[_TypedDoc, int]:
        """Decode the members before the array; returns them and the index of the array's '[' in buf."""
        buf = self.buf
        m = None
        while True:
            k = buf.find(b'"traceEvents"')
            if k >= 0:
                m = _EVENTS_KEY.match(buf, k)
                if m is not None or len(buf) - k > 4096:
                    break
            lead = _lead(buf)
            if lead < len(buf) and buf[lead] == ord("[") and k < 0:
                if _bare_array_start(buf, lead):
                    self.bare = True
                    return _TypedDoc(), lead
            if len(buf) > WHOLE_DOCUMENT_BYTES or not self.more():
                break
        if m is None:
            lead = _lead(buf)
            if lead < len(buf) and buf[lead] == ord("[") and _bare_array_start(buf, lead):
                self.bare = True
                return _TypedDoc(), lead
            self.fallback(f"no traceEvents array in the first {WHOLE_DOCUMENT_BYTES} bytes: not a profiler trace")
        lead = len(_BOM) if buf.startswith(_BOM) else 0
        try:
            head = _decode_members(bytes(buf[lead:k]), opening=True)
        except _Fallback:
            self.fallback("the members before traceEvents are not valid JSON")
        return head, m.end() - 1

    # --- events ----------------------------------------------------------------------------------------
    def events(self, start: int):
        """Decode the array's elements; returns the buf index of its closing ']' or a salvage dict."""
        buf = self.buf
        want = self.chunk
        scanned = start + 1
        self.last_end = self.offset + start + 1
        while True:
            while not self.eof and len(buf) - start < want:
                if start > (1 << 20):
                    del buf[:start]
                    self.offset += start
                    scanned -= start
                    start = 0
                self.more()
            if self.eof:
                return self.finish_events(start)
            c = _last_boundary(buf, max(start + 1, scanned - 8))
            scanned = len(buf)
            if c < 0:
                if len(buf) - start <= MAX_EVENT_BYTES:
                    want = len(buf) - start + self.chunk
                    continue
                r = self.settle(start, len(buf), final=True)
            elif self.decode(start, c):
                self.last_end = self.offset + _end_before(buf, c)
                buf[c] = ord("[")
                start = c
                want = self.chunk
                continue
            else:
                r = self.settle(start, c + 1, final=len(buf) - start > MAX_EVENT_BYTES)
            if isinstance(r, tuple):
                start = r[0]
                want = self.chunk
                continue
            if r == "more":
                want = len(buf) - start + self.chunk
                continue
            return r  # close index or salvage

    def finish_events(self, start: int):
        """End of input: find the array's end, or salvage the complete events of a cut-off or damaged file."""
        buf = self.buf
        close = _find_close(buf, start)
        if close is not None and self.decode(start, close):
            return close
        while True:
            r = self.settle(start, len(buf), final=True)
            if isinstance(r, tuple):
                start = r[0]
                continue
            return r

    def decode(self, start: int, end: int, closing_inserted: bool = False) -> bool:
        """Decode ``buf[start:end+1]`` as a list of events (see _decode_slice) into the collector."""
        try:
            events = _decode_slice(self.buf, start, end, closing_inserted, self.notes, self.offset + start)
        except msgspec.DecodeError:
            return False
        self.col.add(events)
        return True

    def settle(self, start: int, stop: int, final: bool):
        """After a failed boundary guess in ``buf[start:stop]``: exact cut, close, "more", or a salvage at damage.

        Returns (next start,) after decoding complete elements, the index of the closing ']' when the array
        ends inside, "more" when the first element is longer than the region, or a salvage dict.
        """
        buf = self.buf
        cut, close = scan_array(buf, start, stop)
        if close >= 0 and buf[close] != ord("]"):
            if cut > start + 1 and self.decode(start, cut, closing_inserted=True):
                self.last_end = self.offset + cut
            return self.damage_at(close, "a '}' where the event list should go on or end")
        if close >= 0:
            if self.decode(start, close):
                return close
            return self.damage(start, close)
        if cut > start + 1:
            i, n = cut, len(buf)
            while i < n and buf[i] in _WS:
                i += 1
            if i == n and not self.eof:
                return "more"  # what follows the element is not read yet
            if i < n and buf[i] == ord("]"):
                return i if self.decode(start, i) else self.damage(start, i)
            if not self.decode(start, cut, closing_inserted=True):
                return self.damage(start, cut)
            self.last_end = self.offset + cut
            if i < n and buf[i] == ord(","):
                buf[i] = ord("[")
                return (i,)
            if i == n:
                reason = self.reader.gzip_error or "JSON ends mid-document (file cut off while being written)"
                return _salvage_info(reason, self.reader.total, self.last_end, self.col.n_events)
            return self.damage_at(i, "an event is followed by something other than ',' or ']'")
        if not final:
            return "more"
        if self.eof and len(buf) - start <= MAX_EVENT_BYTES:
            reason = self.reader.gzip_error or "JSON ends mid-document (file cut off while being written)"
            return _salvage_info(reason, self.reader.total, self.last_end, self.col.n_events)
        return self.damage_at(start, f"no complete event in the {len(buf) - start} bytes after it")

    def damage(self, start: int, end: int) -> dict:
        """Keep the longest prefix of complete events of ``buf[start:end]`` that decodes; salvage there."""
        buf = self.buf
        ends, _ = scan_array(buf, start, end + 1, all_ends=True)
        ends = ends.tolist()
        lo, hi, why = 0, len(ends), ""
        while lo < hi:
            mid = (lo + hi + 1) // 2
            try:
                _decode_slice(buf, start, ends[mid - 1], True, _SliceNotes(), 0)
                lo = mid
            except msgspec.DecodeError as exc:
                why = str(exc)
                hi = mid - 1
        if lo:
            self.decode(start, ends[lo - 1], closing_inserted=True)
            self.last_end = self.offset + ends[lo - 1]
        if not why:
            try:
                _decode_slice(buf, start, end, False, _SliceNotes(), 0)
            except msgspec.DecodeError as exc:
                why = str(exc)
        at = _BYTE_AT.search(why)
        where = self.offset + start + int(at.group(1)) if at else self.last_end
        why = _BYTE_AT.sub("", why).strip().rstrip(":")
        return _salvage_info(f"invalid JSON at byte {where} ({why or 'malformed'}); the rest of the file is "
                             "not read", self.reader.total, self.last_end, self.col.n_events, damaged=True)

    def damage_at(self, pos: int, why: str) -> dict:
        return _salvage_info(f"damaged data at byte {self.offset + pos}: {why}; the rest of the file is not read",
                             self.reader.total, self.last_end, self.col.n_events, damaged=True)

    # --- trailer ---------------------------------------------------------------------------------------
    def trailer(self, close: int) -> Optional[_TypedDoc]:
        """The members after the array (normally a few hundred bytes); None when they are unreadable."""
        buf = self.buf
        while len(buf) - close <= (64 << 20) and self.more():
            pass
        if len(buf) - close > (64 << 20):
            self.col.notes.append(f"{self.reader.path}: more than 64 MB after the traceEvents array; "
                                  "members there ignored")
            return None
        if self.bare and not bytes(buf[close + 1:]).strip(_WS):
            return None
        try:
            tail = _decode_members(bytes(buf[close + 1:]), opening=False)
            if tail.traceEvents is not None:
                raise _Fallback()
            return tail
        except _Fallback:
            if self.fallback_allowed():
                raise
            self.col.notes.append(f"{self.reader.path}: the members after the traceEvents array are not valid "
                                  "JSON; ignored (the events are kept)")
            return None


def _lead(buf: bytearray) -> int:
    """Index of the first byte after a UTF-8 BOM and whitespace."""
    i = len(_BOM) if buf.startswith(_BOM) else 0
    n = len(buf)
    while i < n and buf[i] in _WS:
        i += 1
    return i


def _bare_array_start(buf: bytearray, lead: int) -> bool:
    """Chrome's bare-array form `[ {...}, ... ]` (or an empty `[]`) starts at ``lead``."""
    i = lead + 1
    n = len(buf)
    while i < n and buf[i] in _WS:
        i += 1
    return i < n and buf[i] in (ord("{"), ord("]"))


def _next_separator(buf: bytearray, cut: int) -> Optional[int]:
    """After an element ending at ``cut``: the offset of the ',' before the next element, else None."""
    i, n = cut, len(buf)
    while i < n and buf[i] in _WS:
        i += 1
    return i if i < n and buf[i] == ord(",") else None


def _end_before(buf: bytearray, c: int) -> int:
    """Offset just past the '}' that precedes the separator at ``c`` (whitespace may lie between)."""
    i = c - 1
    while buf[i] in _WS:
        i -= 1
    return i + 1


_BOUNDARY = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")
_BOUNDARY_WINDOW = 1 << 16


def _last_boundary(buf: bytearray, lo: int) -> int:
    """Offset of the ',' in the last ``}`` ws ``,`` ws ``{`` of ``buf[lo:]``, or -1.

    Searched in windows from the end, each by the regex engine (no Python loop per byte or per brace), and
    callers pass a ``lo`` just before the bytes not yet searched, so no byte is searched twice.
    """
    hi = len(buf)
    while hi > lo:
        w = max(lo, hi - _BOUNDARY_WINDOW)
        last = None
        for m in _BOUNDARY.finditer(buf, w, min(len(buf), hi + 256)):
            if m.start() >= hi:
                break
            last = m
        if last is not None:
            return last.start() + last.group().index(b",")
        hi = w
    return -1


def _find_close(buf: bytearray, start: int) -> Optional[int]:
    """Offset of the ']' closing traceEvents when only the trailer follows it (common layout), else None."""
    q = len(buf)
    for _ in range(4):
        q = buf.rfind(b"]", start, q)
        if q < 0:
            return None
        tail = bytes(buf[q + 1:q + 4096]).strip(_WS)
        if tail == b"}" or tail.startswith(b",") or (not tail and q + 4096 >= len(buf)):
            return q
    return None


def _decode_slice(buf: bytearray, start: int, end: int, closing_inserted: bool, notes: _SliceNotes,
                  base: int) -> list[_Event]:
    """Decode the event list ``buf[start:end+1]`` (``buf[start]`` is '['; ``buf[end]`` is made ']' meanwhile).

    With ``closing_inserted``, ``buf[start:end]`` ends just after a complete element and ']' is appended to
    a copy. Raises msgspec.DecodeError when the bytes are not a valid event list (a wrong guess, or damage).
    """
    shapes = buf.find(_GLOO_MARK, start, end) >= 0
    if closing_inserted:
        return _events_of(bytes(buf[start:end]) + b"]", notes, base, shapes)
    saved = buf[end]
    buf[end] = ord("]")
    try:
        with memoryview(buf) as mv, mv[start:end + 1] as part:
            return _events_of(part, notes, base, shapes)
    finally:
        buf[end] = saved


def _decode_members(part: bytes, opening: bool) -> _TypedDoc:
    """Top-level members before (``opening``) or after the traceEvents array, decoded as one object."""
    if opening:
        body = part.strip(_WS)
        if not body.startswith(b"{"):
            raise _Fallback()
        body = body[1:].strip(_WS)
        if body:
            if not body.endswith(b","):
                raise _Fallback()
            body = body[:-1]
            if not body.strip(_WS):
                raise _Fallback()
        text = b"{" + body + b"}"
    else:
        body = part.strip(_WS)
        if body == b"}":
            text = b"{}"
        elif body.startswith(b","):
            text = b"{" + body[1:]
            if not text[1:].strip(_WS).startswith(b'"'):
                raise _Fallback()
        else:
            raise _Fallback()
    try:
        return _DECODER.decode(text)
    except (msgspec.DecodeError, RecursionError):
        raise _Fallback() from None


_LENIENT_DECODER = msgspec.json.Decoder(_LenientDoc)


def _typed_or_lenient(data: bytes, notes: list[str]) -> _TypedDoc:
    """Typed decode; when some events have the wrong shape (not an object, args not an object), keep the rest.

    Raises msgspec.DecodeError only for JSON that is malformed as text.
    """
    shapes = _GLOO_MARK in data
    try:
        return (_SHAPE_DECODER if shapes else _DECODER).decode(data)
    except msgspec.ValidationError:
        pass
    raw = _LENIENT_DECODER.decode(data)  # raises when traceEvents itself is not a list
    events, skipped, stripped = [], 0, 0
    for e in raw.traceEvents or []:
        if not isinstance(e, dict):
            skipped += 1
            continue
        try:
            events.append(msgspec.convert(e, _ShapeEvent if shapes else _Event))
        except msgspec.ValidationError:
            try:
                events.append(msgspec.convert({k: v for k, v in e.items() if k != "args"}, _Event))
                stripped += 1
            except msgspec.ValidationError:
                skipped += 1
    if skipped or stripped:
        notes.append(f"{skipped} trace events that are not event objects skipped, {stripped} events with "
                     "malformed args kept without them")
    members = {f: getattr(raw, f) for f in _DocMembers.__struct_fields__}
    return _TypedDoc(traceEvents=events if raw.traceEvents is not None else None, **members)


def _decode(path: Path, data: bytes, notes: Optional[list[str]] = None) -> tuple[_TypedDoc, Optional[tuple[int, int]]]:
    """Typed decode; on malformed JSON fall back to the longest valid prefix of complete events.

    Invalid UTF-8 is replaced (U+FFFD) and events of the wrong shape are skipped; both are noted in ``notes``.
    """
    notes = [] if notes is None else notes
    gc_was = gc.isenabled()
    gc.disable()  # millions of small objects: the cyclic GC only costs time here
    try:
        try:
            try:
                return _typed_or_lenient(data, notes), None
            except (UnicodeDecodeError, msgspec.DecodeError) as exc:
                # msgspec reports invalid UTF-8 as UnicodeDecodeError or as a DecodeError, by version
                if not isinstance(exc, UnicodeDecodeError) and "UTF-8" not in str(exc):
                    raise
                try:
                    data.decode("utf-8")
                    raise exc
                except UnicodeDecodeError as bad:
                    data = data.decode("utf-8", "replace").encode("utf-8")
                    notes.append(f"invalid UTF-8 replaced (first at byte {bad.start})")
                return _typed_or_lenient(data, notes), None
        except msgspec.DecodeError as exc:
            first_error = str(exc)
        stripped = data[len(_BOM):].lstrip() if data.startswith(_BOM) else data.lstrip()
        if not stripped.startswith((b"{", b"[")):
            raise InputError(path, f"not JSON ({first_error})")
        if stripped.startswith(b"["):
            # Chrome's bare-array form: [ {...}, {...} ], complete (not a salvage) when it decodes as one
            data = b'{"traceEvents":' + stripped
            try:
                return _typed_or_lenient(data + b"}", notes), None
            except (msgspec.DecodeError, UnicodeDecodeError):
                pass
        elif data.startswith(_BOM):
            try:
                return _typed_or_lenient(stripped, notes), None
            except (msgspec.DecodeError, UnicodeDecodeError):
                data = stripped
        fixed, n = quote_non_finite(data)
        if n:
            try:
                doc = _typed_or_lenient(fixed, notes)
                notes.append(f"{n} NaN/Infinity literals (not JSON) read as non-finite numbers: an event with "
                             "such a ts is ignored, such a dur counts as 0")
                return doc, None
            except (msgspec.DecodeError, UnicodeDecodeError):
                data = fixed
        try:
            fixed, kept = salvage_json_prefix(data)
            return _typed_or_lenient(fixed, notes), (0, kept)
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


def rank_from_file_name(path: str | Path) -> Optional[int]:
    """The rank a file name carries (`rank-3`, `rank3`, `worker3`, `_rank3`), the last one if several; else None."""
    path = Path(path)
    m = _RANK_IN_NAME.findall(path.name)
    return int(m[-1]) if m else None


# --- compact columns, slice by slice ---------------------------------------------------------------------
_F_COMM_KERNEL, _F_COMM_SPAN, _F_STEP, _F_STEP_PREFIX, _F_P2P, _F_GLOO, _F_RPC = 1, 2, 4, 8, 16, 32, 64
_KEEP_ANY_CAT = _F_STEP | _F_P2P
_C_GPU, _C_RUNTIME, _C_CPU, _C_UA, _C_GUA = 1, 2, 3, 4, 5
_CAT_CLASS = {**{c: _C_GPU for c in _GPU_CATS}, **{c: _C_RUNTIME for c in _RUNTIME_CATS},
              "cpu_op": _C_CPU, "Operator": _C_CPU, "user_annotation": _C_UA, "gpu_user_annotation": _C_GUA}
_GPU_FIXED = {c: (-1 if k is None else KIND_CODE[k]) for c, k in _GPU_CATS.items()}
_P2P_OPS = ("c10d::send", "c10d::recv_", "c10d::recv_any_source_")


def _name_flags(nm: str, table: CommKernelTable = DEFAULT_TABLE) -> int:
    """What a name means to the analysis, computed once per distinct name."""
    f = 0
    if table.match(nm) is not None:
        f |= _F_COMM_KERNEL
    if _COMM_CPU_SPAN.match(nm):
        f |= _F_COMM_SPAN
    if _STEP.match(nm):
        f |= _F_STEP
    if nm.startswith("ProfilerStep#"):
        f |= _F_STEP_PREFIX
    if nm in _P2P_OPS:
        f |= _F_P2P
    if nm.startswith("gloo:"):
        f |= _F_GLOO
    if nm == "record_param_comms":
        f |= _F_RPC
    return f


def _peer_from_args(a: Optional[_Args]) -> int:
    """c10d::send/recv_ record ``Concrete Inputs`` = [tensors, pg, peer, tag]: the peer rank, or -1."""
    ci = a.concrete_inputs if a is not None else None
    if isinstance(ci, list) and len(ci) > 2:
        try:
            return int(ci[2])
        except (TypeError, ValueError):
            return -1
    return -1


def _nccl_peer(a: Optional[_Args], op: str) -> int:
    """PyTorch's NCCL metadata names a send's `Dst Rank` and a recv's `Src Rank` (global ranks); else -1."""
    v = (a.dst_rank if op == "send" else a.src_rank if op == "recv" else None) if a is not None else None
    if isinstance(v, str) and v.isdigit() and len(v) < 8:
        v = int(v)
    return v if _plausible_rank(v) else -1


def _cat_arrays(parts: list[tuple], n_fields: int, dtypes: tuple) -> list[np.ndarray]:
    if not parts:
        return [np.empty(0, dt) for dt in dtypes]
    return [np.concatenate([p[i] for p in parts]) for i in range(n_fields)]


class _Collector:
    """Reduces decoded events, slice by slice, to the columns the tables are built from (file order kept).

    Events of no interest (python_function, flows, most CPU ops once the trace is known to have GPU
    activity) are dropped as they are seen; everything kept is numpy columns or a few small lists.
    """

    _G_TYPES = (np.float64, np.float64, np.int32, np.int8, np.int64, np.int64, np.int64, np.int64, np.int64,
                np.int64, np.bool_)
    _R_TYPES = (np.float64, np.int64, np.int32)
    _C_TYPES = (np.float64, np.float64, np.int32, np.int32, np.bool_, np.int32)

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
        self.g_args: list[Optional[_Args]] = []
        self.r: list[tuple] = []       # ts, corr, tid
        self.c: Optional[list[tuple]] = []  # ts, dur, tid, name, is user_annotation, span index
        self.spans: list[tuple] = []   # ts, dur, tid, name, External id (int or None), args
        self.steps: list[tuple] = []   # step, ts, dur, on the GPU track
        self.step_tids: set[int] = set()
        self.ann: list[tuple] = []     # name, ts, dur, on the GPU track
        self.p2p: list[tuple] = []     # tid, ts, peer
        self.notes: list[str] = []     # what the decoder had to repair, for the warnings
        self.has_gpu = False
        self.last_x: Optional[tuple] = None    # (ts, tid, cat) of the last X event in file order
        self.thread_order: list[Any] = []      # tids in the order the thread_name metadata lists them

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

    def add(self, events: list[_Event]) -> None:
        """Take one slice of decoded events (the objects can be freed afterwards)."""
        self.n_events += len(events)
        gts, gdur, gname, gkind, gstream, gtid, gdev, gpid, gcorr, gext, gcoll = ([] for _ in range(11))
        rts, rcorr, rtid = [], [], []
        cts, cdur, ctid, cname, cua, cspan = ([] for _ in range(6))
        g_args = self.g_args
        flags, name_code, tid_code = self.flags, self.name_code, self.tid_code
        cat_class, gpu_fixed = _CAT_CLASS, _GPU_FIXED
        keep_cpu = self.c is not None
        n_bad = 0
        has_gpu = self.has_gpu
        for e in events:
            if e.ph != "X":
                if e.ph == "M" and e.name == "thread_name" and e.tid not in self.thread_order:
                    self.thread_order.append(e.tid)
                continue
            ts = e.ts
            if ts is None:
                continue
            if ts.__class__ is not float:
                ts = _num(ts)
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
            if not fl:
                if not cls or (cls == _C_CPU and not keep_cpu):
                    continue  # python_function, flows, ...; CPU ops of a GPU trace
            elif not cls and not fl & _KEEP_ANY_CAT:
                continue
            d = e.dur
            if d.__class__ is not float:
                d = _num(d, 0.0)
            if not (0 < d < _MAX_DUR_US):
                if d >= _MAX_DUR_US:  # negatives and NaN stay a silent 0 as before; huge ones are counted
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
                    if fl & _F_COMM_SPAN:
                        a = e.args
                        if a is not None and a.__class__ is _ShapeArgs:
                            _gloo_size(nm, a)
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
                if cls != _C_CPU and not bad and not fl & _F_STEP_PREFIX:
                    self.ann.append((nm, ts, d, cls == _C_GUA))
            if fl & _F_STEP:
                if not bad:
                    n_step = int(_STEP.match(nm).group(1))
                    if n_step < _I64_SAFE:
                        self.steps.append((n_step, ts, d, cat == "gpu_user_annotation"))
                self.step_tids.add(self._tid(e.tid))
            if fl & _F_P2P:
                self.p2p.append((self._tid(e.tid), ts, _peer_from_args(e.args)))
        self.n_bad += n_bad
        for e in reversed(events):  # where a cut-off file stops: its last complete event (file order)
            if e.ph == "X" and e.ts is not None:
                self.last_x = (_num(e.ts), e.tid, e.cat)
                break
        self.has_gpu = has_gpu
        if gts:
            self.g.append(tuple(_arr(v, t) for v, t in zip(
                (gts, gdur, gname, gkind, gstream, gtid, gdev, gpid, gcorr, gext, gcoll), self._G_TYPES)))
        if rts:
            self.r.append(tuple(_arr(v, t) for v, t in zip((rts, rcorr, rtid), self._R_TYPES)))
        if has_gpu:
            self.c = None  # a GPU trace: CPU operators are not activity
        elif cts:
            self.c.append(tuple(_arr(v, t) for v, t in zip(
                (cts, cdur, ctid, cname, cua, cspan), self._C_TYPES)))

    # --- tables ------------------------------------------------------------------------------------------
    def finish(self, path: Path, doc: _TypedDoc, warnings: list[str]) -> KinetoTrace:
        """Build the KinetoTrace tables from everything collected."""
        dist = doc.distributedInfo if isinstance(doc.distributedInfo, dict) else {}
        rank, rank_source = None, "none"
        world = dist.get("world_size")
        if world is not None and not (_plausible_rank(world, MAX_RANKS + 1) and world > 0):
            warnings.append(f"{path}: distributedInfo.world_size {str(world)[:40]!r} is not a plausible world size; "
                            "ignored")
            world = None
        if _plausible_rank(dist.get("rank"), world or MAX_RANKS):
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
        base_ns = 0
        if doc.baseTimeNanoseconds is not None:
            try:
                base_ns = int(doc.baseTimeNanoseconds)
                if not -_I64_SAFE < base_ns < _I64_SAFE // 2:
                    raise ValueError
            except (TypeError, ValueError, OverflowError):
                base_ns = 0
                warnings.append(f"{path}: baseTimeNanoseconds {str(doc.baseTimeNanoseconds)[:40]!r} is not a usable "
                                "number; ignored")
        warnings.extend(self.notes)
        if self.n_bad:
            warnings.append(f"{path}: {self.n_bad} events with a non-numeric or out-of-range ts ignored")
        if self.n_bad_dur:
            warnings.append(f"{path}: {self.n_bad_dur} events with a dur of {_MAX_DUR_US:.0e} µs or more "
                            "(beyond any real span) read as 0")
        self.base_ns = base_ns
        self.name_flags = np.array([self.flags[n] for n in self.name_list], dtype=np.int64)
        self.tid_int = _int_col(self.tid_list)
        meta = _meta(doc, dist, path)
        spans = self._spans()
        if self.has_gpu:
            activity, coll, names = self._gpu_activity(spans)
            meta["device_type"] = "gpu"
        else:
            activity, coll, names = self._cpu_activity(spans)
            meta["device_type"] = "cpu"
        steps = self._steps()
        annotations = self._annotations()
        if not len(activity):
            warnings.append(f"{path}: no device activity or CPU operators found")
        trace = KinetoTrace(str(path), rank, rank_source, world, meta, activity, names, coll, steps,
                            annotations, warnings)
        if spans:
            trace.cpu_comm = pd.DataFrame({
                "start": np.array([x[0] for x in spans], dtype=np.int64),
                "end": np.array([x[1] for x in spans], dtype=np.int64),
                "tid": self.tid_int[np.array([x[2] for x in spans], dtype=np.int64)],
                "name": [x[3] for x in spans]})
        return trace

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
        return {"cut_at_ns": int(self._ns(np.array([ts]), np.zeros(1))[0][0]),
                "cut_tid": tid if tid.__class__ is int else -1, "lost_tids": lost}

    def _ns(self, ts: np.ndarray, dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        start = _to_ns(np.asarray(ts, dtype=np.float64)) + self.base_ns
        return start, start + _to_ns(np.asarray(dur, dtype=np.float64))

    def _spans(self) -> list[tuple]:
        """CPU-side collective spans (gloo:*, nccl:*, c10d::*, symm_mem::*): (start, end, tid, name)."""
        if not self.spans:
            return []
        s, e = self._ns([x[0] for x in self.spans], [x[1] for x in self.spans])
        return [(s[i], e[i], x[2], x[3]) for i, x in enumerate(self.spans)]

    def _comm_by_ext(self) -> dict:
        out: dict = {}
        for x in self.spans:
            if x[4] is not None:
                out.setdefault(x[4], x[3])
        return out

    def _gpu_activity(self, spans: list[tuple]):
        """Kernels, memcpy, memset and syncs with their class and the launching runtime call's start."""
        ts, dur, name, fixed, stream, tid, device, pid, corr, ext, coll = _cat_arrays(self.g, 11, self._G_TYPES)
        start, end = self._ns(ts, dur)
        stream = np.where(stream >= 0, stream, tid)
        device = np.where(device >= 0, device, pid)
        name_comm = (self.name_flags & _F_COMM_KERNEL) != 0
        kind = np.where(fixed >= 0, fixed,
                        np.where(name_comm[name] | coll, KIND_CODE["comm"], KIND_CODE["compute"])).astype(np.int8)

        r_ts, r_corr, r_tid = _cat_arrays(self.r, 3, self._R_TYPES)
        r_start = self._ns(r_ts, np.zeros_like(r_ts))[0]
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
            launch_tid[hit] = self.tid_int[r_tid[launch_pos[hit]]]

        # Kernels launched by a collective CPU op (symm_mem::*, …) are comm even without an NCCL name.
        comm_by_ext = self._comm_by_ext()
        symm = [k for k, nm in comm_by_ext.items() if nm.startswith("symm_mem::")]
        symm_set = set(symm)
        if symm:
            hit = (kind == KIND_CODE["compute"]) & np.isin(ext, _arr(symm, np.int64))
            kind[hit] = KIND_CODE["comm"]

        name_id, uniq = pd.factorize(name, sort=False)
        names = [self.name_list[u] for u in uniq]
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
        # NCCL runs all_to_all as grouped send/recv (ncclKernel_SendRecv): in a trace whose CPU side calls
        # all_to_all and no point-to-point op, a SendRecv kernel is the all_to_all the program called. Decided
        # per trace, not per kernel, so a trace whose profiler dropped some launches names them all alike.
        span_names = {str(x[3]) for x in spans}
        cpu_ops = {normalise_op(n) for n in span_names}
        a2a_only = ("alltoall" in cpu_ops and not cpu_ops & {"send", "recv", "sendrecv", "coalesced"}
                    and not any(k in n.lower() for n in span_names for k in ("isend", "irecv", "batch_p2p")))
        for row in np.flatnonzero(activity["kind"].to_numpy() == "comm"):
            j = order[row]
            a = self.g_args[j]
            op = ""
            hit = self.table.match(self.name_list[name[j]])
            family = hit[0] if hit is not None else ("symm_mem" if ext[j] in symm_set else "")
            if a is not None and isinstance(a.coll_name, str):
                op = normalise_op(a.coll_name)
            if not op or op == "unknown":
                op = hit[1] if hit is not None else "unknown"
            if op == "unknown":
                if span_index is None:
                    span_index = _SpanIndex(spans)
                op = _op_from_launcher(ext[j], launch_pos[j], r_tid, r_start, comm_by_ext, span_index)
            elif op == "sendrecv" and a2a_only and (a is None or not isinstance(a.coll_name, str)):
                op = "alltoall"
            recs.append(_coll_record(row, op, a, _nccl_peer(a, op), family))
        return activity, _collectives_frame(recs, activity), names

    def _cpu_activity(self, spans: list[tuple]):
        """CPU-only (gloo) traces: training-thread CPU ops are compute, gloo/c10d collective spans are comm."""
        ts, dur, tid, name, ua, span = _cat_arrays(self.c or [], 6, self._C_TYPES)
        start, end = self._ns(ts, dur)
        fl = self.name_flags[name] if name.size else np.empty(0, np.int64)
        if self.step_tids:
            main = np.array(sorted(self.step_tids), dtype=np.int32)
        elif tid.size:
            codes, first = np.unique(tid, return_index=True)
            busy = np.zeros(codes.size, dtype=np.int64)
            np.add.at(busy, np.searchsorted(codes, tid), end - start)
            by_first = np.argsort(first, kind="stable")
            main = np.array([codes[by_first[np.argmax(busy[by_first])]]], dtype=np.int32)
        else:
            main = np.empty(0, np.int32)
        not_step = (fl & _F_STEP) == 0
        comm = not_step & ((fl & _F_GLOO) != 0)
        compute = (not_step & ~comm & np.isin(tid, main) & ~ua & ((fl & _F_COMM_SPAN) == 0)
                   & ((fl & _F_RPC) == 0))
        rows = np.flatnonzero(comm | compute)
        kind = np.where(comm[rows], KIND_CODE["comm"], KIND_CODE["compute"]).astype(np.int8)
        name_id, uniq = pd.factorize(name[rows], sort=False)
        names = [self.name_list[u] for u in uniq]
        activity = pd.DataFrame({
            "start": start[rows], "end": end[rows],
            "device": np.full(len(rows), -1, np.int64),
            "stream": self.tid_int[tid[rows]] if rows.size else np.empty(0, np.int64),
            "kind": pd.Categorical.from_codes(kind, KINDS),
            "name_id": name_id.astype(np.int32),
            "correlation": np.full(len(rows), -1, np.int64),
            "launch_start": np.full(len(rows), -1, np.int64),
            "launch_tid": np.full(len(rows), -1, np.int64),
        })
        activity = activity.sort_values(["start", "end"], kind="stable")
        order = activity.index.to_numpy()
        activity = activity.reset_index(drop=True)
        peer_of = self._p2p_peers()
        recs = []
        name_ids = activity["name_id"].to_numpy()
        for row in np.flatnonzero(activity["kind"].to_numpy() == "comm"):
            i = rows[order[row]]
            a = self.spans[span[i]][5] if span[i] >= 0 else None
            nm = names[name_ids[row]]
            op = normalise_op(a.coll_name if a is not None and isinstance(a.coll_name, str) else nm)
            peer = peer_of(tid[i], start[i]) if nm in ("gloo:send", "gloo:recv") else -1
            recs.append(_coll_record(row, op, a, peer, "gloo" if nm.startswith("gloo:") else ""))
        return activity, _collectives_frame(recs, activity), names

    def _p2p_peers(self):
        """Peer of a gloo:send/recv span: from the c10d::send/recv_ op just before it on the same thread."""
        by_tid: dict[int, tuple[list, list]] = {}
        if self.p2p:
            s, _ = self._ns([x[1] for x in self.p2p], np.zeros(len(self.p2p)))
            for (t, _, peer), st in zip(self.p2p, s):
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

    def _steps(self) -> pd.DataFrame:
        """ProfilerStep#N windows, preferring the CPU track; a step seen twice spans both."""
        cpu, gpu = {}, {}
        if self.steps:
            s, e = self._ns([x[1] for x in self.steps], [x[2] for x in self.steps])
            for (n, _, _, on_gpu), si, ei in zip(self.steps, s, e):
                target = gpu if on_gpu else cpu
                a, b = target.get(n, (si, ei))
                target[n] = (min(a, si), max(b, ei))
        chosen = cpu or gpu
        rows = sorted((n, s_, e_) for n, (s_, e_) in chosen.items())
        df = pd.DataFrame(rows, columns=["step", "start", "end"])
        return df.astype({"step": np.int64, "start": np.int64, "end": np.int64})

    def _annotations(self) -> pd.DataFrame:
        """User annotations (CPU and GPU tracks), ProfilerStep windows excluded."""
        ann = self.ann
        if ann:
            s, e = self._ns([x[1] for x in ann], [x[2] for x in ann])
            rows = [(x[0], si, ei, "gpu" if x[3] else "cpu") for x, si, ei in zip(ann, s, e)]
        else:
            rows = []
        df = pd.DataFrame(rows, columns=["name", "start", "end", "track"])
        return df.astype({"start": np.int64, "end": np.int64})


def _op_from_launcher(ext_id, launch_pos, r_tid, r_start, comm_by_ext, spans) -> str:
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


class _SpanIndex:
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


#: Longest plausible span (µs, about 11.6 days): a longer dur is damage and would overflow int64 ns with its ts.
_MAX_DUR_US = 1e12
#: Largest magnitude accepted for an integer read from input (int64 arithmetic on it must not overflow).
_I64_SAFE = 2**62
#: Plausible ranks and world sizes (a value outside is damage, not a job).
MAX_RANKS = 2**20


def _i64(v: Any) -> int:
    """An int read from input, or -1 when it is not an int or is too large for int64 arithmetic."""
    return v if v.__class__ is int and -_I64_SAFE < v < _I64_SAFE else -1


def _int_col(values: list[Any]) -> np.ndarray:
    return np.array([_i64(v) for v in values], dtype=np.int64)


def _arr(values: list, dtype) -> np.ndarray:
    """np.array of collected values; integers out of int64 range (damaged input) become -1."""
    try:
        return np.array(values, dtype=dtype)
    except OverflowError:
        return np.array([_i64(v) for v in values], dtype=dtype)


def _plausible_rank(v: Any, limit: int = MAX_RANKS) -> bool:
    return v.__class__ is int and 0 <= v < limit


_COLL_COLUMNS = ["act_index", "op", "in_nelems", "out_nelems", "dtype", "pg_name", "pg_desc", "pg_ranks",
                 "group_size", "peer", "family"]


def _collectives_frame(recs: list[tuple], activity: pd.DataFrame) -> pd.DataFrame:
    coll = pd.DataFrame.from_records(recs, columns=_COLL_COLUMNS)
    for c in ("act_index", "in_nelems", "out_nelems", "group_size", "peer"):
        coll[c] = coll[c].astype(np.int64)
    idx = coll["act_index"].to_numpy()
    coll.insert(1, "start", activity["start"].to_numpy()[idx])
    coll.insert(2, "end", activity["end"].to_numpy()[idx])
    coll.insert(3, "stream", activity["stream"].to_numpy()[idx])
    return coll


#: gloo spans whose first input is the tensor the collective moves (all_gather / scatter put outputs first)
_GLOO_FIRST_INPUT = {"gloo:all_reduce", "gloo:broadcast", "gloo:reduce", "gloo:send", "gloo:recv"}
#: C++ type names the profiler writes for dtypes → the names the rest of the project uses
_CPP_TYPES = {"long int": "int64", "long": "int64", "int": "int32", "short int": "int16", "short": "int16",
              "signed char": "int8", "unsigned char": "uint8", "double": "float64", "float": "float32",
              "c10::half": "float16", "c10::bfloat16": "bfloat16", "bool": "bool"}


def _gloo_size(name: str, a: _ShapeArgs) -> None:
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


def _coll_record(row: int, op: str, a: Optional[_Args], peer: int, family: str = "") -> tuple:
    """One collectives row from an activity row, its op, the event args (None when it had none) and the kernel
    family (parsers/comm_kernels.py; "" when only the args or the launching CPU op said it is communication)."""
    if a is None:
        return (row, op, -1, -1, "", "", "", "", -1, peer, family)
    return (
        row, op,
        _i64(a.in_nelems),
        _i64(a.out_nelems),
        str(a.dtype) if a.dtype is not None else "",
        str(a.pg_name) if a.pg_name is not None else "",
        str(a.pg_desc) if a.pg_desc is not None else "",
        str(a.pg_ranks) if a.pg_ranks is not None else "",
        _i64(a.group_size),
        peer,
        family,
    )
