"""The memory section's per-rank peak table, one layout for text, Markdown and HTML (values from report.memory)."""
from __future__ import annotations

from typing import Any, Optional

HEADERS = ["rank", "device", "peak alloc MiB", "step", "reserved then MiB", "peak reserved MiB", "capacity MiB",
           "activation MiB", "growth MiB/step", "peak op"]
#: rows shown in text/Markdown (HTML folds a longer table); the JSON has every rank
MAX_ROWS = 64


def _mib(v: Any) -> str:
    if v is None:
        return ""
    t = f"{float(v) / 2**20:.1f}"
    return "0.0" if t == "-0.0" else t


def _op(v: Optional[str]) -> str:
    return "" if not v else (v if len(v) <= 48 else v[:47] + "…")


def peak_rows(report: dict, limit: Optional[int] = MAX_ROWS) -> list[list[str]]:
    """One row per rank and device; the first ``limit`` (None: all)."""
    rows = ((report.get("memory") or {}).get("per_rank") or [])
    if limit is not None:
        rows = rows[:limit]
    return [[str(r.get("rank")), str(r.get("device")), _mib(r.get("peak_allocated")), str(r.get("peak_step")),
             _mib(r.get("reserved_at_peak")), _mib(r.get("peak_reserved")), _mib(r.get("capacity_bytes")),
             _mib(r.get("activation_max")), _mib(r.get("rate_bytes_per_step")), _op(r.get("peak_op"))]
            for r in rows]


def n_rows(report: dict) -> int:
    return len((report.get("memory") or {}).get("per_rank") or [])


def note(report: dict) -> str:
    """What the numbers are (host totals count only what was allocated while the profiler ran)."""
    rows = (report.get("memory") or {}).get("per_rank") or []
    host = any(r.get("device_type") == 0 for r in rows)
    return ("allocated/reserved from profile_memory's events; activation = the step's peak minus what it started "
            "with; growth = allocated at the step's end, per step" +
            ("; host (cpu) totals count only what was allocated while the profiler ran" if host else ""))


def other_lines(report: dict) -> list[str]:
    """One line per framework memory series (Megatron-LM, torchtitan) and per allocator snapshot."""
    mem = report.get("memory") or {}
    out = []
    for g in (mem.get("logs") or [])[:MAX_ROWS]:
        rate = g.get("rate_bytes_per_step")
        cap = g.get("capacity_bytes")
        out.append(f"rank {g.get('rank')} {g.get('source')} log: {g.get('lines')} lines, steps {g.get('first_step')}"
                   f"..{g.get('last_step')}, peak max reserved {_mib(g.get('peak_max_reserved'))} MiB"
                   + (f" of {_mib(cap)}" if cap else "")
                   + (f", {g.get('series', '').replace('_', ' ')} grows {_mib(rate)} MiB/step"
                      if rate is not None else ""))
    for t in (mem.get("summaries") or [])[:MAX_ROWS]:
        out.append(f"memory_summary of rank {t.get('rank')} {t.get('device')}: peak allocated "
                   f"{_mib(t.get('allocated_peak'))} MiB, peak reserved {_mib(t.get('reserved_peak'))} MiB, "
                   f"non-releasable {_mib(t.get('non_releasable_peak'))} MiB, {t.get('alloc_retries')} cudaMalloc "
                   "retries")
    for s in (mem.get("snapshots") or [])[:MAX_ROWS]:
        for d in s.get("devices") or []:
            out.append(f"snapshot{' of rank ' + str(s['rank']) if s.get('rank') is not None else ''} cuda:"
                       f"{d.get('device')}: {d.get('segments')} segments, reserved {_mib(d.get('reserved'))} MiB, "
                       f"allocated {_mib(d.get('allocated'))} MiB, largest free block "
                       f"{_mib(d.get('largest_inactive_block'))} MiB")
    return out
