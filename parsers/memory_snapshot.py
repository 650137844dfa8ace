"""The CUDA caching allocator's snapshot (``torch.cuda.memory._dump_snapshot``: a pickle of ``{"segments": [...],
"device_traces": [[...]], "allocator_settings": {...}}``) → per-device totals, the largest allocations and the OOMs
its trace recorded.

Read only through the restricted unpickler (parsers/safe_unpickle.py: no global is ever resolved, so nothing in the
file runs). The format is the one torch/cuda/memory.py documents for ``_snapshot()``: a segment (one cudaMalloc) has
``device``, ``total_size``, ``allocated_size``, ``active_size``, ``requested_size`` and ``blocks`` (``size``,
``requested_size``, ``state`` active_allocated / active_awaiting_free / inactive, ``frames``); a trace entry has
``action`` (alloc, free_requested, free_completed, segment_alloc, segment_free, oom, snapshot), ``size``, and for
``oom`` ``device_free``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from parsers.errors import InputError
from parsers.file_names import rank_from_file_name
from parsers.safe_open import read_bounded
from parsers.safe_unpickle import MAX_PICKLE_BYTES, UnsafePickleError, safe_loads

#: the largest allocations kept per device, and the OOM entries kept per file
TOP_ALLOCATIONS = 10
MAX_OOMS = 20


def looks_like_snapshot(head: bytes) -> bool:
    """A pickle whose first bytes name the snapshot's keys (a dict of segments, device traces)."""
    return head[:1] == b"\x80" and b"segments" in head[:4096] and (
        b"total_size" in head or b"device_traces" in head or b"allocated_size" in head)


@dataclass
class MemorySnapshot:
    """One snapshot: ``devices`` (per device: segments, reserved, allocated, active, requested, inactive bytes, the
    largest inactive block, the largest allocations with the frame that made them), ``ooms`` and ``actions`` from
    the recorded trace, the rank its file name gives."""

    path: str
    rank: Optional[int]
    devices: list[dict] = field(default_factory=list)
    ooms: list[dict] = field(default_factory=list)
    actions: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 62 else 0


def _frame(frames: Any) -> Optional[str]:
    """The first frame that is not inside torch (the user's line), as 'file:line name'."""
    if not isinstance(frames, list):
        return None
    pick = None
    for f in frames[:64]:
        if not isinstance(f, dict):
            continue
        fn = f.get("filename") if isinstance(f.get("filename"), str) else ""
        if pick is None:
            pick = f
        if fn and "/torch/" not in fn and not fn.startswith("??"):
            pick = f
            break
    if pick is None:
        return None
    fn = str(pick.get("filename", ""))[-120:]
    return f"{fn}:{_int(pick.get('line'))} {str(pick.get('name', ''))[:80]}".strip()


def load_snapshot(path: str | Path, max_bytes: int = MAX_PICKLE_BYTES) -> MemorySnapshot:
    """Read one allocator snapshot; InputError when it cannot be read or is not one."""
    p = str(path)
    data = read_bounded(p, max_bytes)
    try:
        obj = safe_loads(data)
    except UnsafePickleError as exc:
        raise InputError(p, f"refused: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - cut off or damaged: nothing partial is worth a snapshot's totals
        raise InputError(p, f"not a readable pickle ({type(exc).__name__})") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("segments"), list):
        raise InputError(p, "not an allocator snapshot (no 'segments' list)")
    snap = MemorySnapshot(p, rank_from_file_name(p))
    per: dict[int, dict] = {}
    allocs: dict[int, list] = {}
    for seg in obj["segments"]:
        if not isinstance(seg, dict):
            continue
        dev = _int(seg.get("device"))
        d = per.setdefault(dev, {"device": dev, "segments": 0, "reserved": 0, "allocated": 0, "active": 0,
                                 "requested": 0, "inactive": 0, "largest_inactive_block": 0})
        d["segments"] += 1
        d["reserved"] += _int(seg.get("total_size"))
        d["allocated"] += _int(seg.get("allocated_size"))
        d["active"] += _int(seg.get("active_size"))
        d["requested"] += _int(seg.get("requested_size"))
        for b in seg.get("blocks") or []:
            if not isinstance(b, dict):
                continue
            size = _int(b.get("size"))
            if b.get("state") == "inactive":
                d["inactive"] += size
                d["largest_inactive_block"] = max(d["largest_inactive_block"], size)
            elif b.get("state") == "active_allocated":
                allocs.setdefault(dev, []).append((size, b.get("frames")))
    for dev, d in sorted(per.items()):
        top = sorted(allocs.get(dev, []), key=lambda x: -x[0])[:TOP_ALLOCATIONS]
        d["top_allocations"] = [{"bytes": s, "frame": _frame(f)} for s, f in top]
        snap.devices.append(d)
    traces = obj.get("device_traces")
    for dev, entries in enumerate(traces if isinstance(traces, list) else []):
        for e in entries if isinstance(entries, list) else []:
            if not isinstance(e, dict):
                continue
            a = e.get("action") if isinstance(e.get("action"), str) else "?"
            snap.actions[a[:40]] = snap.actions.get(a[:40], 0) + 1
            if a == "oom" and len(snap.ooms) < MAX_OOMS:
                snap.ooms.append({"device": dev, "bytes": _int(e.get("size")),
                                  "device_free": _int(e.get("device_free")), "frame": _frame(e.get("frames"))})
    if not snap.devices:
        snap.warnings.append(f"{p}: the snapshot holds no segments (taken before any CUDA allocation?)")
    return snap
