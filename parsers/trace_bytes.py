"""Read a trace file's bytes: gunzip with a size bound, and salvage JSON cut off mid-write.

A killed job leaves a trace that stops mid-event, or a `.gz` without its trailer. Both are common in
post-mortems, so instead of failing we keep every complete event before the cut and say how much survived.
"""
from __future__ import annotations

import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import numpy as np

from parsers.errors import InputError

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


def read_trace_bytes(path: str | Path, max_bytes: int = MAX_INFLATED_BYTES) -> RawTrace:
    """Return the (inflated) bytes of a file; a truncated gzip yields what inflated before the cut."""
    path = Path(path)
    try:
        blob = path.read_bytes()
    except OSError as exc:
        raise InputError(path, f"cannot read file ({exc.strerror or exc})") from exc
    if not blob:
        raise InputError(path, "empty file")
    if not blob.startswith(GZIP_MAGIC):
        return RawTrace(blob, len(blob))
    return _gunzip(path, blob, inflate_bound(len(blob), max_bytes))


def _gunzip(path: Path, blob: bytes, max_bytes: int) -> RawTrace:
    """Inflate gzip members one by one, stopping at the first damage instead of failing."""
    out: list[bytes] = []
    size = 0
    pos = 0
    truncated = False
    error = ""
    while pos < len(blob):
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            chunk = d.decompress(blob[pos:], max_bytes - size + 1)
        except zlib.error as exc:
            truncated, error = True, f"gzip data corrupt ({exc})"
            chunk = b""
        size += len(chunk)
        out.append(chunk)
        if size > max_bytes:
            raise InputError(path, f"inflates to more than {max_bytes} bytes; refusing")
        if truncated:
            break
        if not d.eof:
            truncated, error = True, "gzip stream ends before its end marker (file truncated)"
            try:
                out.append(d.flush())
            except zlib.error:
                pass
            break
        consumed = len(blob) - pos - len(d.unused_data)
        pos += consumed
        if not d.unused_data.startswith(GZIP_MAGIC):
            break
    data = b"".join(out)
    if not data:
        raise InputError(path, error or "gzip file holds no data")
    return RawTrace(data, len(blob), truncated, error)


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
    """The streaming reader met something only the whole-file path reproduces exactly (e.g. corrupt gzip)."""


class BlockReader:
    """Inflated bytes of a trace as a series of blocks, so a parser never holds the whole file.

    Mirrors :func:`read_trace_bytes`: multi-member gzip, a size bound, and a missing gzip end marker recorded
    in ``gzip_truncated`` / ``gzip_error`` (known once the blocks are exhausted). Corrupt deflate data raises
    :class:`StreamUnsupported`, because the whole-file reader discards that member's output and a stream
    cannot take back what it already handed out.
    """

    def __init__(self, path: str | Path, block_bytes: int = 8 << 20, max_bytes: int = MAX_INFLATED_BYTES):
        self.path = Path(path)
        self.block_bytes = max(1, int(block_bytes))
        self.max_bytes = max_bytes
        try:
            self._fh = open(self.path, "rb")
            self.compressed_bytes = os.fstat(self._fh.fileno()).st_size
            head = self._fh.read(2)
        except OSError as exc:
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

    def _plain_blocks(self) -> Iterator[bytes]:
        while True:
            try:
                b = self._fh.read(self.block_bytes)
            except OSError as exc:
                raise InputError(self.path, f"cannot read file ({exc.strerror or exc})") from exc
            if not b:
                return
            self._count(len(b))
            yield b

    def _gzip_blocks(self) -> Iterator[bytes]:
        fh, step = self._fh, 1 << 20
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        data = b""
        while True:
            if not data:
                data = fh.read(step)
                if not data:  # end of file
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
            try:
                out = d.decompress(data, self.block_bytes)
            except zlib.error as exc:
                raise StreamUnsupported(f"gzip data corrupt ({exc})") from None
            data = d.unconsumed_tail
            if out:
                self._count(len(out))
                yield out
            if d.eof:
                rest = d.unused_data + data
                while len(rest) < 2:
                    more = fh.read(step)
                    if not more:
                        break
                    rest += more
                if not rest.startswith(GZIP_MAGIC):
                    return  # trailing bytes that are not another member are ignored, as read_trace_bytes does
                d = zlib.decompressobj(16 + zlib.MAX_WBITS)
                data = rest


def scan_array(data, open_at: int, stop: Optional[int] = None) -> tuple[int, int]:
    """Exact layout of a JSON array that opens at ``data[open_at] == '['`` (strings and nesting respected).

    Looks at ``data[open_at:stop]``. Returns ``(cut, close)``: the offset just past the last complete
    element that is an object (``open_at + 1`` when none), and the offset of the ``]`` closing the array
    (-1 when it is not in the region). Vectorised: string state and nesting depth come from cumulative sums.
    """
    buf = np.frombuffer(data, dtype=np.uint8)[open_at:stop]
    quote = buf == ord('"')
    if quote.any():
        q_idx = np.flatnonzero(quote)
        maybe = q_idx[(q_idx > 0) & (buf[np.maximum(q_idx - 1, 0)] == ord("\\"))]
        for i in maybe:
            j = i - 1
            while j >= 0 and buf[j] == ord("\\"):
                j -= 1
            if (i - 1 - j) % 2 == 1:
                quote[i] = False
    in_string = (np.cumsum(quote, dtype=np.uint8) & 1) == 1  # parity survives uint8 wrap-around
    opens = ((buf == ord("{")) | (buf == ord("["))) & ~in_string
    closes = ((buf == ord("}")) | (buf == ord("]"))) & ~in_string
    depth = np.cumsum(opens.astype(np.int32) - closes.astype(np.int32))
    closed = np.flatnonzero(closes & (depth == 0))
    close = int(closed[0]) if closed.size else -1
    ends = np.flatnonzero(closes & (depth == 1) & (buf == ord("}")))
    if close >= 0:
        ends = ends[ends < close]
    cut = open_at + int(ends[-1]) + 1 if ends.size else open_at + 1
    return cut, (open_at + close if close >= 0 else -1)
