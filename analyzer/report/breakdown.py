"""The report's ``breakdown`` section: per rank, where its step time went and what its idle time waited for.

What HTA's temporal and idle-time breakdowns show, per rank and summed over the steps the metrics use: the
temporal split of the step (``compute``: |∪ compute|; ``non_compute``: device busy with communication or memory
work and no compute; ``idle``: nothing on any stream — the three add up to the step time), the idle split
(``host``: waiting for the host to launch work, ``peer``: the host inside a collective call, waiting on other
ranks; ``kernel_wait``: launch latency between queued kernels; ``other`` — they add up to ``idle``;
analyzer/rank/breakdown.py), and the summed kernel time per class (compute, comm, memcpy, memset: sums of
durations, so streams that overlap count twice; the class shares are of that sum). Definitions: docs/metrics.md.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:  # a run without traces (a hang folder) never imports pandas
    import pandas as pd


#: the kernel classes in the order the reports show them (any other kind the parser gives comes after)
KERNEL_CLASSES = ("compute", "comm", "memcpy", "memset")
IDLE_PARTS = (("host", "host_wait_ns"), ("peer", "peer_wait_ns"), ("kernel_wait", "kernel_wait_ns"),
              ("other", "other_ns"))


def _us(ns: Any) -> float:
    return round(float(ns) / 1e3, 3)


def _idle_parts(idle: Optional[pd.DataFrame], steps: set) -> Optional[dict]:
    """The rank's idle split summed over ``steps`` (µs), or None without an idle table."""
    if idle is None or not len(idle):
        return None
    rows = idle[idle["step"].isin(list(steps))] if steps else idle.iloc[0:0]
    if not len(rows):
        return None
    return {name: _us(rows[col].sum()) for name, col in IDLE_PARTS}


def _kernel_classes(kernels: Optional[pd.DataFrame]) -> dict:
    """{class: summed kernel µs} inside the step windows, in KERNEL_CLASSES order then the rest."""
    if kernels is None or not len(kernels):
        return {}
    by = kernels.groupby(kernels["kind"].astype(str))["total_ns"].sum()
    order = [k for k in KERNEL_CLASSES if k in by.index] + sorted(k for k in by.index if k not in KERNEL_CLASSES)
    return {k: _us(by[k]) for k in order if by[k] > 0}


def breakdown_section(job: Any, sm: Any) -> dict:
    """``{per_rank: [{rank, steps, step_us, compute_us, non_compute_us, idle_us, idle_split{host, peer,
    kernel_wait, other} | null, kernel_us{class: µs}, shares{…}}], device}`` from the step metrics ``sm`` (ns, per rank and
    step) and each rank's idle and kernel tables (computed where the rank was parsed)."""
    if not getattr(job, "traces", None) or sm is None or not len(sm) or "busy_ns" not in getattr(sm, "columns", ()):
        return {"per_rank": [], "device": None}
    sm = sm[sm["step"] >= 0] if (sm["step"] >= 0).any() else sm
    sums = sm.groupby("rank")[["step_time_ns", "compute_ns", "busy_ns", "idle_ns"]].sum()
    steps = sm.groupby("rank")["step"].agg(lambda s: set(int(x) for x in s))
    out = []
    devices = set()
    for rank, r in sums.iterrows():
        t = job.traces.get(int(rank))
        if t is None:
            continue
        devices.add(str(t.meta.get("device_type") or "gpu"))
        compute, busy, step = float(r["compute_ns"]), float(r["busy_ns"]), float(r["step_time_ns"])
        row = {"rank": int(rank), "steps": len(steps[rank]), "step_us": _us(step),
               "compute_us": _us(compute), "non_compute_us": _us(max(0.0, busy - compute)),
               "idle_us": _us(r["idle_ns"]), "idle_split": _idle_parts(t.idle, steps[rank]),
               "kernel_us": _kernel_classes(t.kernels)}
        row["shares"] = _shares(row, step / 1e3)
        out.append(row)
    return {"per_rank": out, "device": "cpu" if devices == {"cpu"} else "gpu" if out else None}


def _shares(row: dict, step_us: float) -> dict:
    """The row's parts as fractions: of its step time (``compute``, ``non_compute``, ``idle``, ``idle_<part>``)
    and of its summed kernel time (``kernel_<class>``); null where the whole is 0."""
    def f(x: float, whole: float) -> Optional[float]:
        return round(x / whole, 6) if whole > 0 else None
    out = {k: f(float(row[f"{k}_us"]), step_us) for k in ("compute", "non_compute", "idle")}
    out.update({f"idle_{k}": f(float(v), step_us) for k, v in (row["idle_split"] or {}).items()})
    total = float(sum(row["kernel_us"].values()))
    out.update({f"kernel_{k}": f(float(v), total) for k, v in row["kernel_us"].items()})
    return out
