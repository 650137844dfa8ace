"""JSON output: the report dict as it is (documented in docs/json-schema.md)."""
from __future__ import annotations

from typing import Any, BinaryIO, Iterator

import orjson

from analyzer.render import sanitize

_OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE
_PIECE = orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY
#: Containers this deep are written as one piece (a report's per-step and per-rank rows sit at depth 3).
_PIECE_DEPTH = 3


def render_json_bytes(report: dict) -> bytes:
    """The JSON document as UTF-8 bytes. Pretty, key order as built, ending in a newline, strings through
    `sanitize`."""
    return sanitize.dumps_bytes(report, option=_OPTIONS)


def render_json(report: dict) -> str:
    """:func:`render_json_bytes` as text."""
    return render_json_bytes(report).decode()


def write_json(report: dict, fh: BinaryIO) -> int:
    """Write :func:`render_json_bytes`'s document to ``fh`` piece by piece (what ``--output r.json`` does: a
    10,000-rank report's ~300 MB of JSON is never held whole); the same bytes. Returns the bytes written."""
    n = 0
    for piece in json_pieces(report):
        fh.write(piece)
        n += len(piece)
    return n


def json_pieces(obj: Any, depth: int = 0) -> Iterator[bytes]:
    """The pretty JSON of ``obj`` in pieces whose concatenation is :func:`render_json_bytes`'s (orjson's
    two-space layout: a piece at depth d is indented by re-indenting its lines; JSON strings hold no raw
    newline). Each piece goes through `sanitize` on its own, as the whole document would."""
    yield from _pieces(obj, depth)
    if depth == 0:
        yield b"\n"


def _pieces(obj: Any, depth: int) -> Iterator[bytes]:
    if depth < _PIECE_DEPTH and isinstance(obj, dict) and obj:
        pad = b"\n" + b"  " * (depth + 1)
        sep = b"{" + pad
        for k, v in obj.items():
            if type(k) is not str:  # orjson's rule for keys (the whole-document render raises the same)
                raise TypeError(f"Dict key must be str, not {type(k).__name__}")
            yield sep + sanitize.dumps_bytes(k, option=_PIECE) + b": "
            yield from _pieces(v, depth + 1)
            sep = b"," + pad
        yield b"\n" + b"  " * depth + b"}"
    elif depth < _PIECE_DEPTH and isinstance(obj, (list, tuple)) and obj:
        pad = b"\n" + b"  " * (depth + 1)
        sep = b"[" + pad
        for v in obj:
            yield sep
            yield from _pieces(v, depth + 1)
            sep = b"," + pad
        yield b"\n" + b"  " * depth + b"]"
    else:
        s = sanitize.dumps_bytes(obj, option=_PIECE)
        yield s.replace(b"\n", b"\n" + b"  " * depth) if depth and b"\n" in s else s
