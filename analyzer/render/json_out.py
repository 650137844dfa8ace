"""JSON output: the report dict as it is (documented in docs/json-schema.md)."""
from __future__ import annotations

import orjson

from analyzer.render import sanitize


def render_json(report: dict) -> str:
    """Pretty, key-sorted-by-construction JSON text ending in a newline (strings through `sanitize.dumps`)."""
    return sanitize.dumps(report, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY) + "\n"
