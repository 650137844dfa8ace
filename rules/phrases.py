"""Plain-language pieces every stage's sentences share: rank lists written for people, not Python reprs."""
from __future__ import annotations

from typing import Iterable


def ranks_text(ranks: Iterable[int]) -> str:
    """[1, 2] → 'ranks 1, 2'; [3] → 'rank 3'; runs compact: [0..7, 9] → 'ranks 0-7, 9'; past 8 pieces the
    count and the first and last rank."""
    r = sorted({int(x) for x in ranks})
    if not r:
        return "no rank"
    pieces, i = [], 0
    while i < len(r):
        j = i
        while j + 1 < len(r) and r[j + 1] == r[j] + 1:
            j += 1
        pieces.append(str(r[i]) if i == j else (f"{r[i]}, {r[j]}" if j == i + 1 else f"{r[i]}-{r[j]}"))
        i = j + 1
    if len(pieces) > 8:
        return f"{len(r)} ranks ({r[0]}…{r[-1]})"
    return ("rank " if len(r) == 1 else "ranks ") + ", ".join(pieces)


def values_text(values: Iterable) -> str:
    """['allreduce'] → 'allreduce'; [16, 8] → '16 or 8' (distinct values in order, no brackets)."""
    seen = []
    for v in values:
        if v not in seen:
            seen.append(v)
    return " or ".join(str(v) for v in seen)


def per_rank_text(values: dict) -> str:
    """{0: 16, 1: 8} → 'rank 0: 16, rank 1: 8'."""
    return ", ".join(f"rank {r}: {v}" for r, v in sorted(values.items()))
