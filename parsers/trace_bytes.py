"""Read a trace file's bytes: gunzip with a size bound, and salvage JSON cut off mid-write.

A killed job leaves a trace that stops mid-event, or a `.gz` without its trailer. Both are common in
post-mortems, so instead of failing we keep every complete event before the cut and say how much survived.
"""
from __future__ import annotations

import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import numpy as np

from parsers.errors import InputError
from parsers.safe_open import open_input

#: Refuse to inflate a single file beyond this many bytes (a zip bomb or a mistake, not a trace).
MAX_INFLATED_BYTES = 16 * 1024**3
#: ... and beyond this many times its compressed size (real traces inflate 5-25x; a bomb inflates 1000x) ...
MAX_INFLATE_RATIO = 200
#: ... except that anything may inflate to this much.
MIN_INFLATE_BOUND = 256 * 1024**2


def inflate_bound(compressed_bytes: int, max_bytes: int = MAX_INFLATED_BYTES) -> int:
    """How far a gzip file of this size may inflate before it is refused as a decompression bomb."""
    return min(max_bytes, max(MIN_INFLATE_BOUND, MAX_INFLATE_RATIO * compressed_bytes))

GZIP_MAGIC = b"\x1f\x8b"


@dataclass
class RawTrace:
    """The bytes of one trace and what went wrong reading them."""

    data: bytes
    compressed_bytes: int
    gzip_truncated: bool = False
    gzip_error: str = ""
    gzip_note: str = ""  # damage that lost no data before it (e.g. non-gzip bytes after the last member)


def read_trace_bytes(path: str | Path, max_bytes: int = MAX_INFLATED_BYTES) -> RawTrace:
    """Return the (inflated) bytes of a file; damaged gzip yields what inflated before the damage.

    The same bytes, in one piece, as :class:`BlockReader` yields in blocks (it is built on it).
    """
    reader = BlockReader(path, max_bytes=max_bytes)
    data = b"".join(reader.blocks())
    if not data and reader.is_gzip:
        raise InputError(path, reader.gzip_error or "gzip file holds no data")
    return RawTrace(data, reader.compressed_bytes, reader.gzip_truncated, reader.gzip_error, reader.gzip_note)


def last_complete_event_end(data: bytes, array_key: bytes = b'"traceEvents"') -> tuple[int, int]:
    """Locate the end of the last complete element of the ``traceEvents`` array.

    Returns ``(array_open, cut)``: the offset of the array's ``[`` and the offset just past the last complete
    element's closing ``}`` (or ``array_open + 1`` when no element is complete). Raises ValueError when the
    array is not there. Vectorised: string state and nesting depth come from cumulative sums over bytes.
    """
    key = data.find(array_key)
    if key < 0:
        raise ValueError("no traceEvents array")
    open_at = data.find(b"[", key + len(array_key))
    if open_at < 0:
        raise ValueError("traceEvents array never opens")
    cut, _ = scan_array(data, open_at)
    return open_at, cut


def salvage_json_prefix(data: bytes) -> tuple[bytes, int]:
    """Close a cut-off trace after its last complete event; returns (valid JSON bytes, bytes kept)."""
    open_at, cut = last_complete_event_end(data)
    return data[:cut] + b"]}", cut


class StreamUnsupported(Exception):
    """Kept for compatibility: the block reader no longer raises it (damaged gzip is truncation, see BlockReader)."""


#: Compressed bytes fed to zlib per call: corrupt deflate data loses at most this much input's output.
GZIP_INPUT_STEP = 64 * 1024
#: How far past a gzip member's end non-gzip bytes are searched for the next member's header.
GZIP_RESYNC_WINDOW = 1 << 20


class BlockReader:
    """Inflated bytes of a trace as a series of blocks, so a parser never holds the whole file.

    gzip is inflated as a stream, multi-member files included, under a size bound (a bomb is refused). Damage
    never discards what inflated before it: corrupt deflate data or a file cut short ends the stream there with
    ``gzip_truncated`` and a ``gzip_error`` saying where; non-gzip bytes between members are skipped up to the
    next member header (``gzip_note`` says how many and where), or end the stream when none follows. Both are
    known once the blocks are exhausted. Only regular files are opened (a FIFO would block forever).
    """

    def __init__(self, path: str | Path, block_bytes: int = 8 << 20, max_bytes: int = MAX_INFLATED_BYTES):
        self.path = Path(path)
        self.block_bytes = max(1, int(block_bytes))
        self.max_bytes = max_bytes
        self._fh = open_input(self.path)
        try:
            self.compressed_bytes = os.fstat(self._fh.fileno()).st_size
            head = self._fh.read(2)
        except OSError as exc:
            self._fh.close()
            raise InputError(self.path, f"cannot read file ({exc.strerror or exc})") from exc
        if not head:
            self._fh.close()
            raise InputError(self.path, "empty file")
        self._fh.seek(0)
        self.is_gzip = head == GZIP_MAGIC
        if self.is_gzip:
            self.max_bytes = inflate_bound(self.compressed_bytes, max_bytes)
        self.total = 0
        self.gzip_truncated = False
        self.gzip_error = ""
        self.gzip_note = ""

    def close(self) -> None:
        self._fh.close()

    def blocks(self) -> Iterator[bytes]:
        """Yield the inflated content in blocks of about ``block_bytes``."""
        try:
            yield from (self._gzip_blocks() if self.is_gzip else self._plain_blocks())
        finally:
            self._fh.close()

    def _count(self, n: int) -> None:
        self.total += n
        if self.total > self.max_bytes:
            raise InputError(self.path, f"inflates to more than {self.max_bytes} bytes; refusing")

    def _read(self, n: int) -> bytes:
        try:
            return self._fh.read(n)
        except OSError as exc:
            raise InputError(self.path, f"cannot read file ({exc.strerror or exc})") from exc

    def _plain_blocks(self) -> Iterator[bytes]:
        while True:
            b = self._read(self.block_bytes)
            if not b:
                return
            self._count(len(b))
            yield b

    def _damage(self, why: str, at: int) -> None:
        self.gzip_truncated = True
        self.gzip_error = (f"{why} at compressed byte {at}; the {self.total} bytes inflated before it are kept")

    def _gzip_blocks(self) -> Iterator[bytes]:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        pending = b""      # compressed bytes not yet given to zlib
        consumed = 0       # compressed offset of pending[0]
        member_start = 0
        while True:
            if not pending:
                pending = self._read(GZIP_INPUT_STEP)
                if not pending:  # end of file
                    if not d.eof:
                        self.gzip_truncated = True
                        self.gzip_error = "gzip stream ends before its end marker (file truncated)"
                        try:
                            tail = d.flush()
                        except zlib.error:
                            tail = b""
                        if tail:
                            self._count(len(tail))
                            yield tail
                    return
            saved = d.copy()
            try:
                out = d.decompress(pending, self.block_bytes)
            except zlib.error as exc:
                # keep what this call would have given before the damage: replay it from the saved state in
                # small steps, yielding each step's output until the error comes back
                at = yield from self._replay(saved, pending)
                self._damage(f"gzip data corrupt ({exc})", consumed + at)
                return
            rest = d.unused_data if d.eof else d.unconsumed_tail
            consumed += len(pending) - len(rest)
            pending = rest
            if out:
                self._count(len(out))
                yield out
            if d.eof:
                while len(pending) < 2:
                    more = self._read(GZIP_INPUT_STEP)
                    if not more:
                        break
                    pending += more
                if not pending:
                    return
                if not pending.startswith(GZIP_MAGIC):
                    skipped = self._resync(pending)
                    if skipped is None:
                        self.gzip_note = (f"bytes from compressed byte {consumed} on are not gzip data (after the "
                                          f"member that starts at byte {member_start}); ignored")
                        return
                    n, pending = skipped
                    self.gzip_note = (f"{n} bytes that are not gzip data at compressed byte {consumed} skipped; "
                                      "reading went on at the next gzip member")
                    consumed += n
                member_start = consumed
                d = zlib.decompressobj(16 + zlib.MAX_WBITS)

    def _replay(self, d, pending: bytes):
        """Inflate ``pending`` from decompressor state ``d`` in 256-byte steps up to the one that fails (its
        offset in ``pending`` is the generator's return value)."""
        for i in range(0, len(pending), 256):
            try:
                out = d.decompress(pending[i:i + 256])
            except zlib.error:
                return i
            if out:
                self._count(len(out))
                yield out
        return len(pending)

    def _resync(self, pending: bytes) -> Optional[tuple[int, bytes]]:
        """(bytes skipped, data from the next gzip member header) within GZIP_RESYNC_WINDOW, or None."""
        buf = pending
        while True:
            k = buf.find(GZIP_MAGIC + b"\x08")
            if k >= 0:
                return k, buf[k:]
            if len(buf) >= GZIP_RESYNC_WINDOW:
                return None
            more = self._read(GZIP_INPUT_STEP)
            if not more:
                return None
            buf += more


#: Bytes the exact scanner looks at per vectorised step (its memory is about 30 bytes per byte of a piece).
SCAN_PIECE_BYTES = 1 << 20


def _scan_piece(buf: np.ndarray, in_string: bool, backslashes: int, depth: int):
    """One piece of the array scan, vectorised.

    ``in_string``, ``backslashes`` (the backslash run ending just before the piece) and ``depth`` are the state
    carried from the previous piece. Returns (close-bracket mask, depth after each byte, and the state at the
    piece's end).
    """
    bs = buf == ord("\\")
    quote = buf == ord('"')
    q = np.flatnonzero(quote)
    if q.size and (backslashes or bs.any()):
        # a quote is escaped when an odd number of backslashes precede it (the run may reach into earlier pieces)
        idx = np.arange(buf.size, dtype=np.int64)
        last_plain = np.maximum.accumulate(np.where(bs, -1, idx))
        prev = np.maximum(q - 1, 0)
        lp = last_plain[prev]
        run = np.where(q == 0, backslashes, (q - 1) - lp + np.where(lp < 0, backslashes, 0))
        quote[q[(run & 1) == 1]] = False
    parity = np.cumsum(quote, dtype=np.uint8)  # parity survives uint8 wrap-around
    in_str = ((parity + np.uint8(in_string)) & 1) == 1  # inside a string after each byte
    opens = ((buf == ord("{")) | (buf == ord("["))) & ~in_str
    closes = ((buf == ord("}")) | (buf == ord("]"))) & ~in_str
    d = depth + np.cumsum(opens.astype(np.int32) - closes.astype(np.int32), dtype=np.int64)
    plain = np.flatnonzero(~bs)
    tail_bs = buf.size - 1 - int(plain[-1]) if plain.size else buf.size + backslashes
    return closes, d, bool(in_str[-1]), tail_bs, int(d[-1])


def scan_array(data, open_at: int, stop: Optional[int] = None, all_ends: bool = False):
    """Exact layout of a JSON array that opens at ``data[open_at] == '['`` (strings and nesting respected).

    Looks at ``data[open_at:stop]`` in pieces of SCAN_PIECE_BYTES, carrying the string, escape and depth state
    from piece to piece, so its memory is bounded whatever the region. Returns ``(cut, close)``: the offset just
    past the last complete element that is an object (``open_at + 1`` when none), and the offset of the ``]``
    closing the array (-1 when it is not in the region). With ``all_ends`` it returns ``(ends, close)``, the
    offsets just past every complete object element, in order.
    """
    view = np.frombuffer(data, dtype=np.uint8)
    stop = len(view) if stop is None else min(stop, len(view))
    in_string, backslashes, depth = False, 0, 0
    ends: list[np.ndarray] = []
    last_end = -1
    close = -1
    pos = open_at
    while pos < stop:
        hi = min(stop, pos + SCAN_PIECE_BYTES)
        buf = view[pos:hi]
        closes, d, in_string, backslashes, depth_next = _scan_piece(buf, in_string, backslashes, depth)
        closed = np.flatnonzero(closes & (d == 0))
        lim = int(closed[0]) if closed.size else buf.size
        e = np.flatnonzero(closes[:lim] & (d[:lim] == 1) & (buf[:lim] == ord("}")))
        if e.size:
            last_end = pos + int(e[-1]) + 1
            if all_ends:
                ends.append(e + pos + 1)
        if closed.size:
            close = pos + int(closed[0])
            break
        depth = depth_next
        pos = hi
    if all_ends:
        return (np.concatenate(ends) if ends else np.empty(0, np.int64)), close
    return (last_end if last_end >= 0 else open_at + 1), close


# A JSON string (skipped whole, so nothing inside one is touched) or a bare non-finite number literal, as
# Python's json writes them (NaN, Infinity) and as C++ formatters do (nan, inf): not JSON, so orjson and msgspec
# refuse the whole slice, but a profiler has written them into `dur`, `ts` and args.
_NON_FINITE = re.compile(rb'"(?:[^"\\]|\\.)*"|(?<![\w.])-?(?:NaN|nan|Infinity|inf)(?![\w.])', re.S)


def quote_non_finite(data: bytes) -> tuple[bytes, int]:
    """``data`` with each bare NaN / Infinity / nan / inf literal outside strings made the JSON string of it
    ("NaN" …), and how many there were. The numeric readers turn those strings into non-finite floats, which
    the collector already treats as unusable values; only called after a fast decode failed (costs one regex
    pass over the slice, so the normal path pays nothing)."""
    if b"NaN" not in data and b"nan" not in data and b"Infinity" not in data and b"inf" not in data:
        return data, 0
    n = 0

    def quote(m: re.Match) -> bytes:
        nonlocal n
        t = m.group()
        if t[:1] == b'"':
            return t
        n += 1
        return b'"' + t + b'"'
    out = _NON_FINITE.sub(quote, data)
    return out, n


#: an escaped backslash (skipped, so that "\\ud800" stays text), a valid escaped surrogate pair (kept), or a lone
#: escaped surrogate: JSON allows the escape, but no UTF-8 text holds the code point, so decoders refuse it
_SURROGATE = re.compile(rb"\\\\|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_LONE_HINT = re.compile(rb"\\u[dD][89a-fA-F]")


def replace_lone_surrogates(data: bytes) -> tuple[bytes, int]:
    """``data`` with each lone escaped UTF-16 surrogate (``"\\ud800"`` with no partner) made ``\\ufffd``, and how
    many there were. Python's json writes such escapes for a name that is not valid Unicode (a thread or host
    name); one must cost its character, not the file. Only called after a fast decode failed."""
    if _LONE_HINT.search(data) is None:
        return data, 0
    n = 0

    def fix(m: re.Match) -> bytes:
        nonlocal n
        t = m.group()
        if len(t) != 6:  # an escaped backslash or a valid pair
            return t
        n += 1
        return b"\\ufffd"
    out = _SURROGATE.sub(fix, data)
    return out, n
