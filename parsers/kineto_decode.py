"""Trace bytes → lists of Event: one slice of ``traceEvents``, the members around it, or a whole document.

What can be repaired is repaired and noted (invalid UTF-8, bare NaN/Infinity literals, events of the wrong shape
or nested too deep); what cannot raises msgspec.DecodeError for the streaming reader (parsers/kineto_stream.py)
to cut at, or InputError when nothing of a whole document is readable. ``Fallback``: the members around the event
list are laid out so that only the whole-document decoder reads them exactly.
"""
from __future__ import annotations

import gc
from pathlib import Path
from typing import Optional

import msgspec

from parsers.errors import InputError
from parsers.kineto_events import (GLOO_MARK, MEM_MARK, DocMembers, Event, LenientDoc, TypedDoc, TypedMemDoc,
                                   TypedMemShapeDoc, TypedShapeDoc, event_type)
from parsers.trace_bytes import quote_non_finite, replace_lone_surrogates, salvage_json_prefix, scan_array

#: JSON whitespace, and a UTF-8 byte-order mark (some writers put one before the document)
WS = b" \t\r\n"
BOM = b"\xef\xbb\xbf"


class Fallback(Exception):
    """The streaming path cannot reproduce the whole-document result exactly; re-read the file whole."""


DOC_DECODER = msgspec.json.Decoder(TypedDoc)
#: whole documents by (gloo spans, memory events) present: the struct decodes only the args that are there
_DOC_DECODERS = {(False, False): DOC_DECODER, (True, False): msgspec.json.Decoder(TypedShapeDoc),
                 (False, True): msgspec.json.Decoder(TypedMemDoc), (True, True): msgspec.json.Decoder(TypedMemShapeDoc)}
_LENIENT_DECODER = msgspec.json.Decoder(LenientDoc)
_KINDS = ((False, False), (True, False), (False, True), (True, True))
_CHUNK_DECODERS = {k: msgspec.json.Decoder(list[event_type(*k)]) for k in _KINDS}
_EVENT_DECODERS = {k: msgspec.json.Decoder(event_type(*k)) for k in _KINDS}
_RAW_LIST = msgspec.json.Decoder(list[msgspec.Raw])
#: About how deep the decoder nests before RecursionError (for the messages)
DEPTH_HINT = 1000


class SliceNotes:
    """What the slice decoder repaired or skipped, reported once per file."""

    def __init__(self) -> None:
        self.skipped = 0       # elements that are not event objects
        self.stripped = 0      # events kept without their malformed args
        self.too_deep = 0      # events nested deeper than the decoder's recursion limit
        self.out_of_range = 0  # events holding a number no float can hold (1e400)
        self.utf8_at = -1      # absolute offset of the first invalid UTF-8 byte
        self.non_finite = 0    # bare NaN / Infinity literals (not JSON) read as non-finite numbers
        self.surrogates = 0    # lone escaped UTF-16 surrogates ("\\ud800") replaced with U+FFFD

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
        if self.surrogates:
            out.append(surrogates_line(self.surrogates))
        if self.out_of_range:
            out.append(f"{self.out_of_range} trace events holding a number beyond float range skipped")
        if self.too_deep:
            out.append(f"{self.too_deep} trace events nested too deep to decode (more than about "
                       f"{DEPTH_HINT} levels) skipped")
        return out


def surrogates_line(n: int) -> str:
    return (f"{n} lone UTF-16 surrogate escapes (no character of any text) replaced with U+FFFD; the names "
            "holding them are kept")


def _events_of(part, notes: SliceNotes, base: int, shapes: bool = False, mem: bool = False) -> list[Event]:
    """Decode one slice (a JSON list of events); malformed events and bad UTF-8 are repaired or skipped.

    Raises msgspec.DecodeError only when the slice is not valid JSON text (a wrong boundary guess or damage).
    ``base`` is the absolute offset of the slice's first byte, for the notes; ``shapes``: the slice holds gloo
    spans, decode their input shapes too; ``mem``: it holds memory events, decode their args too.
    """
    try:
        return _CHUNK_DECODERS[shapes, mem].decode(part)
    except (msgspec.ValidationError, RecursionError):
        data = bytes(part)
        fixed = _utf8_repaired(data, notes, base)
        return _lenient_events(data if fixed is None else fixed, notes, shapes, mem)
    except (UnicodeDecodeError, msgspec.DecodeError) as exc:
        if not isinstance(exc, UnicodeDecodeError) and "UTF-8" not in str(exc):
            fixed, n = quote_non_finite(bytes(part))
            fixed, s = replace_lone_surrogates(fixed)
            if not n and not s:
                raise
            events = _events_of(fixed, notes, base, shapes, mem)  # raises (the slice is damaged) when still invalid
            notes.non_finite += n
            notes.surrogates += s
            return events
        fixed = _utf8_repaired(bytes(part), notes, base)
        if fixed is not None:
            return _events_of(fixed, notes, base, shapes, mem)
        raise exc from None


def _utf8_repaired(data: bytes, notes: SliceNotes, base: int) -> Optional[bytes]:
    """``data`` with invalid UTF-8 replaced (U+FFFD) and the first bad byte's offset noted; None when it is valid."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as bad:
        if notes.utf8_at < 0:
            notes.utf8_at = base + bad.start
        return data.decode("utf-8", "replace").encode("utf-8")
    return None


def _lenient_events(part, notes: SliceNotes, shapes: bool = False, mem: bool = False) -> list[Event]:
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
    decoder = _EVENT_DECODERS[shapes, mem]
    for r in raws:
        try:
            out.append(decoder.decode(r))
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
            out.append(msgspec.convert({k: v for k, v in e.items() if k != "args"}, Event))
            notes.stripped += 1
        except msgspec.ValidationError:
            notes.skipped += 1
    return out


def decode_slice(buf: bytearray, start: int, end: int, closing_inserted: bool, notes: SliceNotes,
                 base: int) -> list[Event]:
    """Decode the event list ``buf[start:end+1]`` (``buf[start]`` is '['; ``buf[end]`` is made ']' meanwhile).

    With ``closing_inserted``, ``buf[start:end]`` ends just after a complete element and ']' is appended to
    a copy. Raises msgspec.DecodeError when the bytes are not a valid event list (a wrong guess, or damage).
    """
    shapes = buf.find(GLOO_MARK, start, end) >= 0
    mem = buf.find(MEM_MARK, start, end) >= 0
    if closing_inserted:
        return _events_of(bytes(buf[start:end]) + b"]", notes, base, shapes, mem)
    saved = buf[end]
    buf[end] = ord("]")
    try:
        with memoryview(buf) as mv, mv[start:end + 1] as part:
            return _events_of(part, notes, base, shapes, mem)
    finally:
        buf[end] = saved


def decode_members(part: bytes, opening: bool, notes: Optional[SliceNotes] = None) -> TypedDoc:
    """Top-level members before (``opening``) or after the traceEvents array, decoded as one object (lone
    surrogate escapes replaced, counted in ``notes``)."""
    if opening:
        body = part.strip(WS)
        if not body.startswith(b"{"):
            raise Fallback()
        body = body[1:].strip(WS)
        if body:
            if not body.endswith(b","):
                raise Fallback()
            body = body[:-1]
            if not body.strip(WS):
                raise Fallback()
        text = b"{" + body + b"}"
    else:
        body = part.strip(WS)
        if body == b"}":
            text = b"{}"
        elif body.startswith(b","):
            text = b"{" + body[1:]
            if not text[1:].strip(WS).startswith(b'"'):
                raise Fallback()
        else:
            raise Fallback()
    try:
        return DOC_DECODER.decode(text)
    except RecursionError:
        raise Fallback() from None
    except msgspec.DecodeError:
        fixed, n = replace_lone_surrogates(text)
        if not n:
            raise Fallback() from None
    try:
        doc = DOC_DECODER.decode(fixed)
    except (msgspec.DecodeError, RecursionError):
        raise Fallback() from None
    if notes is not None:
        notes.surrogates += n
    return doc


def _typed_or_lenient(data: bytes, notes: list[str]) -> TypedDoc:
    """Typed decode; when some events have the wrong shape (not an object, args not an object), keep the rest.

    Raises msgspec.DecodeError only for JSON that is malformed as text.
    """
    shapes, mem = GLOO_MARK in data, MEM_MARK in data
    try:
        return _DOC_DECODERS[shapes, mem].decode(data)
    except msgspec.ValidationError:
        pass
    raw = _LENIENT_DECODER.decode(data)  # raises when traceEvents itself is not a list
    events, skipped, stripped = [], 0, 0
    for e in raw.traceEvents or []:
        if not isinstance(e, dict):
            skipped += 1
            continue
        try:
            events.append(msgspec.convert(e, event_type(shapes, mem)))
        except msgspec.ValidationError:
            try:
                events.append(msgspec.convert({k: v for k, v in e.items() if k != "args"}, Event))
                stripped += 1
            except msgspec.ValidationError:
                skipped += 1
    if skipped or stripped:
        notes.append(f"{skipped} trace events that are not event objects skipped, {stripped} events with "
                     "malformed args kept without them")
    members = {f: getattr(raw, f) for f in DocMembers.__struct_fields__}
    return TypedDoc(traceEvents=events if raw.traceEvents is not None else None, **members)


def decode_document(path: Path, data: bytes,
                    notes: Optional[list[str]] = None) -> tuple[TypedDoc, Optional[tuple[int, int]]]:
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
        stripped = data[len(BOM):].lstrip() if data.startswith(BOM) else data.lstrip()
        if not stripped.startswith((b"{", b"[")):
            raise InputError(path, f"not JSON ({first_error})")
        if stripped.startswith(b"["):
            # Chrome's bare-array form: [ {...}, {...} ], complete (not a salvage) when it decodes as one
            data = b'{"traceEvents":' + stripped
            try:
                return _typed_or_lenient(data + b"}", notes), None
            except (msgspec.DecodeError, UnicodeDecodeError):
                pass
        elif data.startswith(BOM):
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
        fixed, n = replace_lone_surrogates(data)
        if n:
            try:
                doc = _typed_or_lenient(fixed, notes)
                notes.append(surrogates_line(n))
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
