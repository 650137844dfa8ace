"""The job shape of one run as its report states it: the one place that reads it, so it can move to a mesh key."""
from __future__ import annotations

from typing import Any


def job_shape(report: dict) -> str:
    """``"dp=4"``, ``"tp=2 dp=2"``…: the largest process group per judged role, from the report's
    ``cross_rank.process_groups`` (``"-"`` when the report names none, e.g. a single-rank run)."""
    mesh = report.get("mesh")
    if isinstance(mesh, dict) and isinstance(mesh.get("dims"), dict):  # the layout stage's key, when present
        return " ".join(f"{k}={v}" for k, v in mesh["dims"].items()) or "-"
    groups: list[Any] = ((report.get("cross_rank") or {}).get("process_groups") or [])
    degrees: dict[str, int] = {}
    for g in groups:
        if not isinstance(g, dict):
            continue
        role = str(g.get("judged_role") or g.get("role") or "group")
        size = int(g.get("size") or 0)
        if size > 1:
            degrees[role] = max(degrees.get(role, 0), size)
    return " ".join(f"{k}={v}" for k, v in sorted(degrees.items(), key=lambda kv: -kv[1])) or "-"
