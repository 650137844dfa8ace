"""JSON output: the report dict as it is (documented in docs/json-schema.md)."""
from __future__ import annotations

import orjson

from analyzer.render import sanitize

_OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE


def render_json_bytes(report: dict) -> bytes:
    """The JSON document as UTF-8 bytes (what ``--output r.json`` writes: a 10,000-rank report is not held
    once more as text). Pretty, key order as built, ending in a newline, strings through `sanitize`."""
    return sanitize.dumps_bytes(report, option=_OPTIONS)


def render_json(report: dict) -> str:
    """:func:`render_json_bytes` as text."""
    return render_json_bytes(report).decode()
