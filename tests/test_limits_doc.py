"""docs/limits.md states every limit the parsers enforce, with the value the code uses."""
from __future__ import annotations

from pathlib import Path

import parsers.kineto as kineto
import parsers.kineto_values as kv
import parsers.nccl_envelope as env
import parsers.nccl_state as state
import parsers.safe_unpickle as su
import parsers.trace_bytes as tb
from parsers import flight_recorder as fr

DOC = (Path(__file__).resolve().parent.parent / "docs" / "limits.md").read_text(encoding="utf-8")


def _mib(n: int) -> str:
    return f"{n >> 20} MiB" if n < 1 << 30 else f"{n >> 30} GiB"


def test_every_named_limit_is_in_the_doc_with_its_value():
    stated = {
        "MAX_LINE_BYTES": str(env.MAX_LINE_BYTES), "MAX_PROCESSES": str(state.MAX_PROCESSES), "MAX_ENVELOPE_TRIES": str(env.MAX_ENVELOPE_TRIES),
        "CHUNK_BYTES": _mib(kineto.CHUNK_BYTES), "MAX_EVENT_BYTES": _mib(kineto.MAX_EVENT_BYTES),
        "WHOLE_DOCUMENT_BYTES": _mib(kineto.WHOLE_DOCUMENT_BYTES), "SCAN_PIECE_BYTES": _mib(tb.SCAN_PIECE_BYTES),
        "MAX_INFLATE_RATIO": f"{tb.MAX_INFLATE_RATIO}×", "MIN_INFLATE_BOUND": _mib(tb.MIN_INFLATE_BOUND),
        "MAX_INFLATED_BYTES": _mib(tb.MAX_INFLATED_BYTES), "GZIP_RESYNC_WINDOW": _mib(tb.GZIP_RESYNC_WINDOW),
        "MAX_PICKLE_BYTES": _mib(su.MAX_PICKLE_BYTES), "MAX_DEPTH": f"{su.MAX_DEPTH} levels",
        "MAX_SALVAGE_MARKS": f"more than {su.MAX_SALVAGE_MARKS} open marks",
        "MAX_MEMO_INDEX": "2²⁴" if su.MAX_MEMO_INDEX == 1 << 24 else str(su.MAX_MEMO_INDEX),
        "MAX_TEXT_NODES": f"{fr.MAX_TEXT_NODES:,} values", "MAX_RANK": "2²⁰" if fr.MAX_RANK == 1 << 20 else "?",
        "MAX_RANKS": "2²⁰" if kineto.MAX_RANKS == 1 << 20 else "?",
        "MAX_DUR_US": "10¹² µs" if kv.MAX_DUR_US == 1e12 else "?",
    }
    for name, value in stated.items():
        assert name in DOC, f"docs/limits.md does not name {name}"
        line = next(ln for ln in DOC.splitlines() if name in ln)
        assert value in line, f"docs/limits.md: {name} is not stated as {value!r}: {line}"
