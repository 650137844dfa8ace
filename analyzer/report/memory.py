"""The ``memory`` report section: per rank and device, allocated and reserved memory over the traced steps, the
facts the memory rules judge (rules/memory_rules.py) and the OOMs the logs and traces report.

Facts, not verdicts: the growth of allocated memory at the same point of each step (its end) and the rate a least-
squares line gives; reserved minus allocated at the peak; the peak against the device's capacity; each rank's
activation memory (the step's peak minus what the step started with) against its peers', and for a pipeline
against what its schedule keeps in flight (1F1B and interleaved: min(p − s, m) micro-batches on stage s; GPipe: m).
Besides the traces: the training frameworks' own memory lines (Megatron-LM, torchtitan) and the caching
allocator's snapshots, each as read by its parser.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

#: fewer traced steps than this give no growth rate (one step's warm-up allocations are not a trend)
MIN_STEPS_FOR_RATE = 4


def _growth(end: np.ndarray) -> dict:
    """Least-squares growth per step of the allocated bytes at each step's end, the first traced step left out
    (its warm-up allocations: optimizer state, caches) when enough steps remain; the share of step-to-step
    changes that grew."""
    y = end[1:] if len(end) > MIN_STEPS_FOR_RATE else end
    if len(y) < MIN_STEPS_FOR_RATE - 1:
        return {"rate_bytes_per_step": None, "growth_share": None, "steps_fitted": int(len(y))}
    x = np.arange(len(y), dtype=np.float64)
    slope = float(np.polyfit(x, y.astype(np.float64), 1)[0])
    slope = 0.0 if abs(slope) < 0.5 else slope  # a flat series' rounding error, not a byte of growth
    d = np.diff(y)
    return {"rate_bytes_per_step": round(slope, 1), "growth_share": round(float((d > 0).mean()), 3),
            "steps_fitted": int(len(y))}


def _device_rows(rank: int, t: Any) -> list[dict]:
    """One entry per device of one rank's summary."""
    if t.packed("memory") is None:
        return []
    from analyzer.rank.memory import device_name  # pandas: only for traces with memory events
    mem = t.memory
    if mem is None or not len(mem):
        return []
    caps = (t.meta or {}).get("device_memory") or {}
    out = []
    for (dt, di), g in mem.groupby(["device_type", "device_id"], sort=True):
        g = g.sort_values("step")
        k = int(np.argmax(g["peak_allocated"].to_numpy()))
        pk = g.iloc[k]
        cap = caps.get(int(di)) if int(dt) == 1 else None
        act = (g["peak_allocated"] - g["allocated_start"]).to_numpy()
        grow = _growth(g["allocated_end"].to_numpy())
        rate = grow["rate_bytes_per_step"]
        last_peak = int(g["peak_allocated"].iloc[-1])
        steps_left = None
        if cap and rate and rate > 0:
            steps_left = int(max(0, cap - last_peak) // rate)
        out.append({
            "rank": rank, "device": device_name(int(dt), int(di)), "device_type": int(dt), "device_id": int(di),
            "capacity_bytes": cap, "peak_allocated": int(pk["peak_allocated"]), "peak_step": int(pk["step"]),
            "peak_op": pk["peak_op"] if isinstance(pk["peak_op"], str) else None,
            "peak_bytes": int(pk["peak_bytes"]), "reserved_at_peak": int(pk["reserved_at_peak"]),
            "peak_reserved": int(g["peak_reserved"].max()),
            "activation_median": int(np.median(act)), "activation_max": int(act.max()),
            "activation_spread": int(np.std(act, ddof=1)) if len(act) > 1 else 0,
            **grow, "steps_until_capacity": steps_left,
            "steps": [{"step": int(r.step), "allocated_start": int(r.allocated_start),
                       "allocated_end": int(r.allocated_end), "peak_allocated": int(r.peak_allocated),
                       "reserved_at_peak": int(r.reserved_at_peak), "peak_reserved": int(r.peak_reserved),
                       "peak_op": r.peak_op if isinstance(r.peak_op, str) else None, "n_events": int(r.n_events),
                       "start_ns": int(r.start_ns), "peak_ns": int(r.peak_ns), "end_ns": int(r.end_ns)}
                      for r in g.itertuples()],
        })
    return out


def _inflight(schedule: str, p: int, m: Optional[int], stage: int) -> Optional[int]:
    """Micro-batches of activations stage ``stage`` keeps at its peak under the schedule (None: not known)."""
    if not p or stage < 0:
        return None
    mm = m if m else p
    if schedule == "gpipe":
        return mm
    if schedule in ("1f1b", "interleaved"):
        return max(1, min(p - stage, mm))
    return None


def _pipeline_expectation(rows: list[dict], pipeline: dict) -> list[dict]:
    """Per pipeline stage: its activation memory (peak minus the step's start), the micro-batches its schedule keeps
    in flight and the most the layout explains: under 1F1B (and interleaved) stage 0 keeps the most micro-batches,
    so no later stage of a balanced partition should hold more than stage 0 does; under GPipe every stage keeps
    all m, so none should hold more than the stages' median."""
    out = []
    by_rank = {(r["rank"], r["device_type"]): r for r in rows}
    for pl in pipeline.get("pipelines") or []:
        p, m, sched = pl.get("p"), pl.get("m"), pl.get("schedule") or "unknown"
        stages = pl.get("stage_ranks") or []
        items = []
        for s, ranks in enumerate(stages):
            for rk in (ranks if isinstance(ranks, list) else [ranks]):
                for dt in (1, 0):
                    r = by_rank.get((rk, dt))
                    if r is not None:
                        items.append((s, rk, r))
                        break
        if len(items) < 2:
            continue
        n = [_inflight(sched, p or len(stages), m, s) for s, _, _ in items]
        act = [r["activation_max"] for _, _, r in items]
        if sched == "gpipe":
            bound = float(np.median(act))
        elif all(x is not None for x in n):
            first = [a for (s, _, _), a in zip(items, act) if s == 0]
            bound = float(max(first)) if first else None
        else:
            bound = None
        for (s, rk, r), k, a in zip(items, n, act):
            out.append({"rank": rk, "stage": s, "p": p, "m": m, "schedule": sched, "inflight_microbatches": k,
                        "activation_max": a, "expected_at_most": None if bound is None else int(bound),
                        "ratio_to_expected": round(a / bound, 3) if bound else None})
    return out


def _rank_imbalance(rows: list[dict]) -> list[dict]:
    """Per rank: its median activation memory against the median over its peers on the same kind of device, and the
    step-to-step noise (the median over those ranks of each one's standard deviation across steps: variable-length
    batches move a rank's activation memory by more than ranks differ)."""
    out = []
    for dt in sorted({r["device_type"] for r in rows}):
        rs = [r for r in rows if r["device_type"] == dt]
        if len(rs) < 2:
            continue
        med = float(np.median([r["activation_median"] for r in rs]))
        noise = int(np.median([r["activation_spread"] for r in rs]))
        for r in rs:
            out.append({"rank": r["rank"], "device": r["device"], "activation_median": r["activation_median"],
                        "ratio_to_median": round(r["activation_median"] / med, 3) if med > 0 else None,
                        "step_noise": noise})
    return out


def _log_ooms(job: Any, rows: list[dict]) -> list[dict]:
    """OOM lines the stderr parser read (analyzer-independent facts), with the rank's trend from the traces."""
    out = []
    trend: dict = {}  # per rank its accelerator's row when it has one, else its host's
    for r in sorted(rows, key=lambda r: r["device_type"] == 1):
        trend[r["rank"]] = r
    for log in getattr(job, "stderr_logs", []) or []:
        ev = getattr(log, "events", None)
        if ev is None or not len(ev):
            continue
        for e in ev.records():
            if e.get("kind") != "oom":
                continue
            rk = int(e.get("rank", -1))
            t = trend.get(rk)
            out.append({"source": "stderr", "rank": rk if rk >= 0 else None, "line": int(e.get("line", -1)),
                        "path": str(getattr(log, "path", "")),
                        "bytes_requested": _pos(e.get("bytes_requested")), "bytes_total": _pos(e.get("bytes_total")),
                        "bytes_free": _pos(e.get("bytes_free")), "bytes_allocated": _pos(e.get("bytes_allocated")),
                        "device": e.get("device") or None, "reason": e.get("reason") or None,
                        "last_traced_step": t["steps"][-1]["step"] if t else None,
                        "rate_bytes_per_step": t["rate_bytes_per_step"] if t else None})
    return out[:100]


#: log memory lines kept per rank and framework in the report (the first and the last ones)
MAX_LOG_POINTS = 200


def _log_reports(job: Any) -> list[dict]:
    """Per rank and framework: the memory lines the stderr parser read (Megatron-LM's report_memory, torchtitan's
    step line), their growth per step (Megatron: allocated after the iteration; torchtitan: the peak reserved
    since the last line) and the device capacity torchtitan's percentage implies."""
    series: dict = {}
    for log in getattr(job, "stderr_logs", []) or []:
        ev = getattr(log, "events", None)
        if ev is None or not len(ev):
            continue
        for e in ev.records():
            if e.get("kind") != "memory_report" or int(e.get("rank", -1)) < 0:
                continue
            series.setdefault((int(e["rank"]), e.get("where") or ""), {})[int(e.get("seq", -1))] = e
    out = []
    for (rank, src), by_step in sorted(series.items()):
        steps = sorted(by_step)
        pts = [by_step[s] for s in steps]
        key = "bytes_allocated" if src == "megatron" else "bytes_max_reserved"
        y = np.array([_pos(p.get(key)) or 0 for p in pts], dtype=np.float64)
        x = np.array(steps, dtype=np.float64)
        rate = share = None
        if len(y) > MIN_STEPS_FOR_RATE:  # the first line left out: warm-up (optimizer state, the allocator's segments)
            xs, ys = x[1:], y[1:]
            if np.ptp(xs) > 0:
                rate = float(np.polyfit(xs, ys, 1)[0])
                rate = 0.0 if abs(rate) < 0.5 else round(rate, 1)
                share = round(float((np.diff(ys) > 0).mean()), 3)
        caps = [c for c in (_pos(p.get("bytes_total")) for p in pts) if c]
        keep = pts if len(pts) <= MAX_LOG_POINTS else pts[:MAX_LOG_POINTS // 2] + pts[-MAX_LOG_POINTS // 2:]
        out.append({"rank": rank, "source": src, "lines": len(pts), "first_step": steps[0], "last_step": steps[-1],
                    "series": key.removeprefix("bytes_"), "rate_bytes_per_step": rate, "growth_share": share,
                    "capacity_bytes": int(np.median(caps)) if caps else None,
                    "peak_max_reserved": max((_pos(p.get("bytes_max_reserved")) or 0 for p in pts), default=0),
                    "points": [{"step": int(p.get("seq", -1)),
                                **{k: _pos(p.get("bytes_" + k)) for k in ("allocated", "max_allocated", "reserved",
                                                                          "max_reserved")}} for p in keep]})
    return out


def _summaries(job: Any) -> list[dict]:
    """torch.cuda.memory_summary() tables in stderr, per rank and device, the last one printed: current and peak
    allocated, reserved and non-releasable bytes, the OOM and cudaMalloc-retry counts (the rows come line by line
    from the stderr parser; a header line names the device of the rows after it)."""
    last: dict = {}
    for log in getattr(job, "stderr_logs", []) or []:
        ev = getattr(log, "events", None)
        if ev is None or not len(ev):
            continue
        device: dict = {}
        for e in sorted((e for e in ev.records() if e.get("kind") == "memory_summary"), key=lambda e: e["line"]):
            rank, what = int(e.get("rank", -1)), e.get("where")
            if what == "header":
                device[rank] = int(e.get("device") or 0)
                key = (rank, device[rank])
                last[key] = {"rank": rank if rank >= 0 else None, "device": f"cuda:{device[rank]}",
                             "path": str(getattr(log, "path", "")), "line": int(e["line"]),
                             "tables": last.get(key, {}).get("tables", 0) + 1}
                continue
            t = last.get((rank, device.get(rank, 0)))
            if t is None:
                continue
            if what == "counts":
                t["ooms"], t["alloc_retries"] = _pos(e.get("code")), _pos(e.get("seq"))
            else:
                t[what + "_current"], t[what + "_peak"] = _pos(e.get("bytes_a")), _pos(e.get("bytes_b"))
    return [last[k] for k in sorted(last, key=lambda k: (k[0], k[1]))][:1000]


def _pos(v: Any) -> Optional[int]:
    try:
        v = int(v)
    except (TypeError, ValueError):
        return None
    return v if v >= 0 else None


def memory_section(job: Any, report: Optional[dict] = None) -> dict:
    """The ``memory`` section (docs/json-schema.md); empty dict when no trace has memory events and no log an OOM."""
    rows: list[dict] = []
    trace_ooms: list[dict] = []
    for rank in job.ranks:
        t = job.traces[rank]
        rows.extend(_device_rows(rank, t))
        for o in (t.extra or {}).get("memory_ooms", []):
            trace_ooms.append({"source": "trace", "rank": rank, **o})
    ooms = trace_ooms + _log_ooms(job, rows)
    logs = _log_reports(job)
    summaries = _summaries(job)
    snaps = [{"path": s.path, "rank": s.rank, "devices": s.devices, "ooms": s.ooms, "actions": s.actions}
             for s in getattr(job, "memory_snapshots", []) or []]
    for s in snaps:
        for o in s["ooms"]:
            ooms.append({"source": "snapshot", "rank": s["rank"], "path": s["path"], **o})
    if not rows and not ooms and not logs and not snaps and not summaries:
        return {}
    pipeline = ((report or {}).get("cross_rank") or {}).get("pipeline") or {}
    return {
        "per_rank": rows,
        "ranks_with_memory": sorted({r["rank"] for r in rows}),
        "pipeline_stages": _pipeline_expectation(rows, pipeline) if pipeline.get("detected") else [],
        "rank_balance": _rank_imbalance(rows),
        "ooms": ooms,
        "logs": logs,
        "snapshots": snaps,
        "summaries": summaries,
    }


def memory_frame(section: dict) -> Any:
    """One row per rank, device and traced step (the ``Analysis.memory`` DataFrame, docs/api.md)."""
    import pandas as pd
    cols = ["rank", "device", "step", "allocated_start", "allocated_end", "peak_allocated", "reserved_at_peak",
            "peak_reserved", "peak_op", "n_events", "capacity_bytes"]
    recs = [{"rank": r["rank"], "device": r["device"],
             **{k: v for k, v in s.items() if not k.endswith("_ns")}, "capacity_bytes": r["capacity_bytes"]}
            for r in (section or {}).get("per_rank", []) for s in r["steps"]]
    return pd.DataFrame.from_records(recs, columns=cols)
