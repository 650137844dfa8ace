"""Numbers read from a trace's events, bounded where they are read: µs → int64 ns, ints that int64 arithmetic
can hold (else -1), plausible ranks and world sizes. One absurd value costs its field, never the file
(docs/limits.md)."""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

#: Longest plausible span (µs, about 11.6 days): a longer dur is damage and would overflow int64 ns with its ts.
MAX_DUR_US = 1e12
#: Largest magnitude accepted for an integer read from input (int64 arithmetic on it must not overflow).
I64_SAFE = 2**62
#: Plausible ranks and world sizes (a value outside is damage, not a job).
MAX_RANKS = 2**20


def base_time_ns(value: Any) -> Optional[int]:
    """``baseTimeNanoseconds`` as an int that int64 arithmetic on the trace's times can hold (|v| < 2^61 ns,
    before 2043), or None when it is absent, not a number, or out of that range (1e21, 2^63, 1e300: damage)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        v = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return v if -I64_SAFE < v < I64_SAFE // 2 else None


def num(x: Any, default: float = np.nan) -> float:
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return x
    if isinstance(x, str):
        try:
            return float(x)
        except ValueError:
            return default
    return default


def to_ns(ts: np.ndarray) -> np.ndarray:
    """µs floats/ints → int64 ns without losing the integer part to float rounding."""
    whole = np.floor(ts)
    return whole.astype(np.int64) * 1000 + np.rint((ts - whole) * 1000).astype(np.int64)


def i64(v: Any) -> int:
    """An int read from input, or -1 when it is not an int or is too large for int64 arithmetic."""
    return v if v.__class__ is int and -I64_SAFE < v < I64_SAFE else -1


def int_col(values: list[Any]) -> np.ndarray:
    return np.array([i64(v) for v in values], dtype=np.int64)


def arr(values: list, dtype) -> np.ndarray:
    """np.array of collected values; integers out of int64 range (damaged input) become -1."""
    try:
        return np.array(values, dtype=dtype)
    except OverflowError:
        return np.array([i64(v) for v in values], dtype=dtype)


def plausible_rank(v: Any, limit: int = MAX_RANKS) -> bool:
    return v.__class__ is int and 0 <= v < limit
