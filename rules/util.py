"""Small helpers shared by rule families (formatting, group choice, ratios)."""
from __future__ import annotations

from typing import Any, Iterable, Optional

from rules.phrases import ranks_text  # noqa: F401  (re-exported: rules write rank lists the same way)

ROLE_PREFERENCE = ("dp", "fsdp", "ep", "tp", "pp", "world", "unknown")


def pct(x: Optional[float]) -> str:
    """0.1234 → '12.3%'."""
    return "n/a" if x is None else f"{100.0 * float(x):.1f}%"


def num(x: Any) -> Optional[float]:
    """A finite float or None."""
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if f == f and f not in (float("inf"), float("-inf")) else None


def frac(x: Any) -> Optional[float]:
    """A fraction from a value that may be a percent (0–100) or a fraction (0–1)."""
    f = num(x)
    if f is None:
        return None
    return f / 100.0 if f > 1.0 else f


def group_for_rank(groups: list[dict], rank: int, prefer: tuple[str, ...] = ROLE_PREFERENCE) -> Optional[dict]:
    """The process group holding `rank`, preferring roles in `prefer` order, then the smaller group."""
    holding = [g for g in groups if rank in [int(r) for r in g.get("ranks") or []]]
    if not holding:
        return None
    order = {r: i for i, r in enumerate(prefer)}
    return min(holding, key=lambda g: (order.get(str(g.get("role")), 99), len(g.get("ranks") or []),
                                       str(g.get("name"))))


def median(xs: list[float]) -> Optional[float]:
    """Median of a list (None when empty)."""
    v = sorted(xs)
    if not v:
        return None
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2.0


def mb(nbytes: Optional[float]) -> str:
    """Bytes → 'x.y MB' (decimal)."""
    return "n/a" if nbytes is None else f"{nbytes / 1e6:.2f} MB"


_WHY_ABSENT = {"collectives_lost": "its collectives were lost in the cut of its trace",
               "cut": "its trace was cut off before them",
               "not_recorded": "its trace does not record them"}


def unsplit_text(cross: dict, share: Optional[float], whose: str = "the other ranks",
                 groups: Optional[Iterable[str]] = None) -> Optional[str]:
    """One line on the collective time that has no known wait/transfer split (cross_rank.collectives
    .wait_unknown: instances lacking a traced rank; ``groups``: count those of these groups only), or None when
    there is none worth saying (under 0.05 %)."""
    wu = (cross.get("collectives") or {}).get("wait_unknown") or {}
    if not wu or share is None or share < 0.0005:
        return None
    by_group = wu.get("instances_by_group") or {}
    n = sum(int(by_group.get(str(g), 0)) for g in groups) if groups is not None and by_group else wu.get("instances")
    ranks = [int(r) for r in wu.get("ranks_missing") or []]
    why = wu.get("why") or {}
    reasons = sorted({_WHY_ABSENT.get(str(why.get(str(r))), "") for r in ranks} - {""})
    who = ranks_text(ranks) if ranks else "a traced rank"
    verb = "are" if len(ranks) > 1 else "is"
    if len(ranks) > 1:
        reasons = [x.replace("its ", "their ") for x in reasons]
    return (f"unsplit: {whose} spend {pct(share)} of their step time in {n} collective(s) {who} {verb} missing from "
            f"({'; '.join(reasons) or 'absent'}): that time is the wait for {who} and the transfer together, which no "
            "timing here tells apart, so it is counted neither as waiting nor as exposed communication")
