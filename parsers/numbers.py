"""Numbers read from input text, bounded where they are read: a field that does not fit is unknown (-1).

A log line may carry any digits (a gloo abort printing `18446744073709551616 vs 8`, a flipped byte in a pid);
Python's `int()` takes them all, and the damage shows later, far from the line, when the tables are built: an
`OverflowError` converting to int64 loses the whole file, and an int64 cast to int32 wraps silently to a wrong
value. Every parser reads a number of input text through :func:`bounded_int`, and every integer column of a
parsed table is cast through :func:`int_column`, so one absurd number costs one field, never the file.
"""
from __future__ import annotations

from typing import Any

import numpy as np

INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)
_LIMITS = {"int64": (INT64_MIN, INT64_MAX), "int32": (-(1 << 31), (1 << 31) - 1),
           "int16": (-(1 << 15), (1 << 15) - 1), "int8": (-128, 127)}
#: More characters than any int64 needs (19 digits, a sign, blanks): refused before int() sees them.
_MAX_CHARS = 24


def bounded_int(text: Any, default: int = -1, lo: int = INT64_MIN, hi: int = INT64_MAX) -> int:
    """The integer `text` spells (str or bytes, a matched regex group), or `default` when absent, not an
    integer, or outside [lo, hi] (an int64 by default). Never raises, and never converts a long digit string."""
    if text is None or text == "" or text == b"":
        return default
    if isinstance(text, int) and not isinstance(text, bool):
        v = text
    else:
        if len(text) > _MAX_CHARS:
            return default
        try:
            v = int(text)
        except (TypeError, ValueError):
            return default
    return v if lo <= v <= hi else default


def int_column(values: Any, dtype: str = "int64", default: int = -1) -> np.ndarray:
    """`values` (a list, Series or array of ints, possibly Python ints of any size) as a `dtype` array, each
    value that does not fit replaced by `default` (numpy would raise OverflowError or silently wrap)."""
    lo, hi = _LIMITS[str(dtype)]
    a = np.asarray(values)
    if a.dtype.kind in "iub":
        if a.size and (a.min() < lo or a.max() > hi):
            a = np.where((a < lo) | (a > hi), default, a)
        return a.astype(dtype)
    if a.dtype.kind == "f":
        return np.where(np.isfinite(a) & (a >= lo) & (a <= hi), a, default).astype(dtype)
    return np.array([v if isinstance(v, (int, np.integer)) and lo <= v <= hi else
                     bounded_int(v, default, lo, hi) if isinstance(v, (str, bytes)) else default
                     for v in a.tolist()], dtype=dtype)
