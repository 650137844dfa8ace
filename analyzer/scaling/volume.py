"""Volume against bandwidth (docs/scaling.md): the bus bytes a run's collectives move per step, the time they
took, and — against a reference bus bandwidth — the communication time the volume alone explains."""
from __future__ import annotations

from typing import Optional


def comm_volume(report: dict) -> dict:
    """``comm_bus_bytes_per_step`` (bytes × the op's bus factor, per active step, summed over process groups and
    ops), ``comm_transfer_us_per_step`` (their measured transfer time), ``comm_busbw_gbps`` (the run's effective
    bus bandwidth: the first over the second) and ``nominal_busbw_gbps`` (the link's, when the report knows it;
    the lowest over the rows)."""
    rows = ((report.get("cross_rank") or {}).get("collectives") or {}).get("by_group_op") or []
    bus_bytes = transfer = 0.0
    nominal: Optional[float] = None
    for r in rows:
        t, bw = r.get("transfer_us_per_active_step"), r.get("mean_busbw_gbps")
        if not t or not bw:
            continue
        bus_bytes += float(t) * float(bw) * 1e3          # GB/s = 1e3 bytes per µs
        transfer += float(t)
        nb = r.get("expected_busbw_gbps") or r.get("nominal_busbw_gbps")
        if nb:
            nominal = float(nb) if nominal is None else min(nominal, float(nb))
    if not transfer:
        return {"comm_bus_bytes_per_step": None, "comm_transfer_us_per_step": None, "comm_busbw_gbps": None,
                "nominal_busbw_gbps": nominal}
    return {"comm_bus_bytes_per_step": bus_bytes, "comm_transfer_us_per_step": transfer,
            "comm_busbw_gbps": bus_bytes / transfer / 1e3, "nominal_busbw_gbps": nominal}


def volume_against_bandwidth(runs: list[dict]) -> None:
    """Add to each run with communication: ``reference_busbw_gbps`` (the link's nominal one, else the best
    effective bus bandwidth among the compared runs), ``volume_time_us`` (the bus bytes at that bandwidth),
    ``volume_ratio`` (measured transfer / volume time) and ``volume_verdict``: about 1 (≤ 1.5) means the volume
    itself is what costs (change the parallel plan or the volume); far above means contention or a bad
    algorithm/protocol for this size."""
    best = max((r.get("comm_busbw_gbps") or 0.0 for r in runs), default=0.0)
    for r in runs:
        if not r.get("comm_transfer_us_per_step") or not r.get("comm_bus_bytes_per_step"):
            r.update(reference_busbw_gbps=None, volume_time_us=None, volume_ratio=None, volume_verdict=None)
            continue
        ref = r.get("nominal_busbw_gbps") or best
        vt = r["comm_bus_bytes_per_step"] / (ref * 1e3)
        ratio = r["comm_transfer_us_per_step"] / vt if vt else None
        verdict = None if ratio is None else (
            "the volume itself: at this bandwidth the bytes take this long (change the parallel plan or the volume)"
            if ratio <= 1.5 else
            "slower than the volume explains: contention, or an algorithm/protocol that does not suit this size")
        r.update(reference_busbw_gbps=ref, volume_time_us=vt, volume_ratio=ratio, volume_verdict=verdict)
