"""The streaming reader of one trace file: the members before ``traceEvents``, the events slice by slice into
the collector, the members after; damage or a cut-off ends the stream at the last complete event, with a salvage
record that says where and why.

A slice ends at a ``}`` ``,`` ``{`` boundary guessed from the bytes (a regex, no Python loop per byte); a wrong
guess does not decode, and the exact scanner (parsers/trace_bytes.scan_array) finds the real cut. Memory stays
near one slice (CHUNK_BYTES) plus the collected columns, and a stretch without any boundary is bounded by
MAX_EVENT_BYTES. The limits are stated in docs/limits.md; they are read here (a test that changes one patches
this module).
"""
from __future__ import annotations

import gc
import re
from pathlib import Path
from typing import Optional

import msgspec

from parsers.comm_kernels import CommKernelTable
from parsers.errors import InputError
from parsers.kineto_collect import Collector
from parsers.kineto_decode import BOM, WS, Fallback, SliceNotes, decode_members, decode_slice
from parsers.kineto_events import TypedDoc
from parsers.trace_bytes import BlockReader, scan_array

#: Decoded size of one slice of ``traceEvents`` (bytes). Bounds the transient event objects per worker.
CHUNK_BYTES = 2 << 20
#: With no `}, {` event boundary in this many bytes the data is damaged (or holds one absurd event): the stream
#: stops there, keeping every event before. It bounds the buffer, so memory is bounded whatever the file.
MAX_EVENT_BYTES = 32 << 20
#: Top-level layouts only the whole-document decoder reads exactly (odd members around the array) are re-read
#: whole, but only from files up to this size; larger ones keep what the stream read.
WHOLE_DOCUMENT_BYTES = 64 << 20
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_BYTE_AT = re.compile(r"\(byte (\d+)\)")


def salvage_info(reason: str, bytes_read: int, kept: int, events: int, damaged: bool = False) -> dict:
    """The salvage record of a cut-off or damaged file (KinetoTrace.salvage; load_trace adds the cut point)."""
    out = {"reason": reason, "bytes_read": bytes_read, "bytes_kept": kept, "events_recovered": events}
    if damaged:
        out["damaged"] = True
    return out


def stream_trace(path: Path, chunk_bytes: int,
                 table: Optional[CommKernelTable] = None) -> tuple[Collector, TypedDoc, Optional[dict]]:
    """Streaming path: header, then ``traceEvents`` in slices cut at event boundaries, then the trailer.

    A slice ends at a ``}`` followed by ``,`` and ``{`` (found by looking only at bytes not yet searched); if
    that guess falls inside a string or a nested object, the slice is not valid JSON and the decoder says so,
    and the exact scanner (strings and nesting respected, in bounded pieces) finds the real cut. Bad tokens
    and flipped bytes end the stream at the last complete event before them (a salvage that says where).
    Raises Fallback only for odd top-level layouts of files up to WHOLE_DOCUMENT_BYTES.
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
        self.col = Collector(table)
        self.notes = SliceNotes()
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
            raise Fallback()
        raise InputError(self.reader.path, why)

    def run(self) -> tuple[Collector, TypedDoc, Optional[dict]]:
        head, start = self.header()
        self.col.keep_mem_ops = bool(head.profile_memory)
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
            salvage = salvage_info(r.gzip_error, r.total, r.total, col.n_events)
        return col, head, salvage

    def note_gzip(self) -> None:
        if self.reader.gzip_note:
            self.col.notes.append(f"{self.reader.path}: {self.reader.gzip_note}")

    # --- header ----------------------------------------------------------------------------------------
    def header(self) -> tuple[TypedDoc, int]:
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
                    return TypedDoc(), lead
            if len(buf) > WHOLE_DOCUMENT_BYTES or not self.more():
                break
        if m is None:
            lead = _lead(buf)
            if lead < len(buf) and buf[lead] == ord("[") and _bare_array_start(buf, lead):
                self.bare = True
                return TypedDoc(), lead
            self.fallback(f"no traceEvents array in the first {WHOLE_DOCUMENT_BYTES} bytes: not a profiler trace")
        lead = len(BOM) if buf.startswith(BOM) else 0
        try:
            head = decode_members(bytes(buf[lead:k]), opening=True, notes=self.notes)
        except Fallback:
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
        """Decode ``buf[start:end+1]`` as a list of events (see decode_slice) into the collector."""
        try:
            events = decode_slice(self.buf, start, end, closing_inserted, self.notes, self.offset + start)
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
            if cut > start + 1:
                if not self.decode(start, cut, closing_inserted=True):
                    # the damage lies before the cut (a flipped byte the scan read as text): keep what decodes
                    return self.damage(start, cut)
                self.last_end = self.offset + cut
            return self.damage_at(close, "a '}' where the event list should go on or end")
        if close >= 0:
            if self.decode(start, close):
                return close
            return self.damage(start, close)
        if cut > start + 1:
            i, n = cut, len(buf)
            while i < n and buf[i] in WS:
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
                return salvage_info(reason, self.reader.total, self.last_end, self.col.n_events)
            return self.damage_at(i, "an event is followed by something other than ',' or ']'")
        if not final:
            return "more"
        if self.eof and len(buf) - start <= MAX_EVENT_BYTES:
            reason = self.reader.gzip_error or "JSON ends mid-document (file cut off while being written)"
            return salvage_info(reason, self.reader.total, self.last_end, self.col.n_events)
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
                decode_slice(buf, start, ends[mid - 1], True, SliceNotes(), 0)
                lo = mid
            except msgspec.DecodeError as exc:
                why = str(exc)
                hi = mid - 1
        if lo:
            self.decode(start, ends[lo - 1], closing_inserted=True)
            self.last_end = self.offset + ends[lo - 1]
        if not why:
            try:
                decode_slice(buf, start, end, False, SliceNotes(), 0)
            except msgspec.DecodeError as exc:
                why = str(exc)
        at = _BYTE_AT.search(why)
        where = self.offset + start + int(at.group(1)) if at else self.last_end
        why = _BYTE_AT.sub("", why).strip().rstrip(":")
        return salvage_info(f"invalid JSON at byte {where} ({why or 'malformed'}); the rest of the file is "
                            "not read", self.reader.total, self.last_end, self.col.n_events, damaged=True)

    def damage_at(self, pos: int, why: str) -> dict:
        return salvage_info(f"damaged data at byte {self.offset + pos}: {why}; the rest of the file is not read",
                            self.reader.total, self.last_end, self.col.n_events, damaged=True)

    # --- trailer ---------------------------------------------------------------------------------------
    def trailer(self, close: int) -> Optional[TypedDoc]:
        """The members after the array (normally a few hundred bytes); None when they are unreadable."""
        buf = self.buf
        while len(buf) - close <= (64 << 20) and self.more():
            pass
        if len(buf) - close > (64 << 20):
            self.col.notes.append(f"{self.reader.path}: more than 64 MB after the traceEvents array; "
                                  "members there ignored")
            return None
        if self.bare and not bytes(buf[close + 1:]).strip(WS):
            return None
        try:
            late = SliceNotes()  # the notes of the events are written already
            tail = decode_members(bytes(buf[close + 1:]), opening=False, notes=late)
            self.col.notes += [f"{self.reader.path}: {n}" for n in late.lines()]
            if tail.traceEvents is not None:
                raise Fallback()
            return tail
        except Fallback:
            if self.fallback_allowed():
                raise
            self.col.notes.append(f"{self.reader.path}: the members after the traceEvents array are not valid "
                                  "JSON; ignored (the events are kept)")
            return None


def _lead(buf: bytearray) -> int:
    """Index of the first byte after a UTF-8 BOM and whitespace."""
    i = len(BOM) if buf.startswith(BOM) else 0
    n = len(buf)
    while i < n and buf[i] in WS:
        i += 1
    return i


def _bare_array_start(buf: bytearray, lead: int) -> bool:
    """Chrome's bare-array form `[ {...}, ... ]` (or an empty `[]`) starts at ``lead``."""
    i = lead + 1
    n = len(buf)
    while i < n and buf[i] in WS:
        i += 1
    return i < n and buf[i] in (ord("{"), ord("]"))


def _end_before(buf: bytearray, c: int) -> int:
    """Offset just past the '}' that precedes the separator at ``c`` (whitespace may lie between)."""
    i = c - 1
    while buf[i] in WS:
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
        tail = bytes(buf[q + 1:q + 4096]).strip(WS)
        if tail == b"}" or tail.startswith(b",") or (not tail and q + 4096 >= len(buf)):
            return q
    return None
