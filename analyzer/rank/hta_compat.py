"""Holistic Trace Analysis's comm/comp overlap, reproduced on HTA's own window, to cross-check our algebra.

HTA (0.5.0) drops the last ProfilerStep, keeps only GPU events launched by runtime calls that start before
that step, rounds kernel starts up and ends down to whole microseconds, and classifies kernels by name
only. Used by tests and by `analyze --hta-compat`; our own metrics follow docs/metrics.md instead.
"""
from __future__ import annotations

import re

import numpy as np

from analyzer.rank import intervals as iv
from parsers.kineto import KinetoTrace

_HTA_COMM = re.compile(r"(^nccl.*)|(^hip)|(^hccl)|(.*ncclKernel.*)")
_HTA_MEMORY = re.compile(r"^(hip)?Memcpy|^(hip)?Memset|^dma")
_HTA_NOT_COMPUTE = re.compile(r"^nccl|Memcpy|Memset|dma|^.*Sync|^Stream Wait Event|cuda.*LaunchKernel|^hip")


def hta_overlap_parts(trace: KinetoTrace) -> tuple[int, int]:
    """(overlap ns, comm ns) of HTA's `get_comm_comp_overlap` for one rank: the time its communication kernels
    (HTA's name regexes) run under compute kernels, and their whole time, on HTA's window. (0, 0) without comm
    kernels — a CPU-only (gloo) trace has none: HTA reads GPU kernels only."""
    a = trace.activity
    if not len(a):
        return 0, 0
    keep = np.ones(len(a), dtype=bool)
    if len(trace.steps) > 1:
        last_start = trace.steps["start"].max()
        launch = a["launch_start"].to_numpy()
        keep = (launch >= 0) & (launch < last_start)
    names = [str(n) for n in trace.names]  # classified once per distinct name, then indexed per event
    by_name = np.array([(bool(_HTA_COMM.search(n)), bool(_HTA_MEMORY.search(n)), not _HTA_NOT_COMPUTE.search(n))
                        for n in names], dtype=bool).reshape(-1, 3)
    cls = by_name[a["name_id"].to_numpy()]
    is_comm, is_mem = cls[:, 0], cls[:, 1]
    is_compute = cls[:, 2] & ~is_comm & ~is_mem
    start = -((-a["start"].to_numpy()) // 1000) * 1000   # ceil to µs
    end = (a["end"].to_numpy() // 1000) * 1000            # floor to µs
    comm = iv.union(start[keep & is_comm], end[keep & is_comm])
    comp = iv.union(start[keep & is_compute], end[keep & is_compute])
    return int(iv.total(iv.intersect(comm, comp))), int(iv.total(comm))


def hta_overlap_pct(trace: KinetoTrace) -> float:
    """HTA's `get_comm_comp_overlap` percentage for one rank (NaN without comm kernels)."""
    overlap, comm = hta_overlap_parts(trace)
    return 100.0 * overlap / comm if comm else float("nan")


def hta_window(trace: KinetoTrace) -> KinetoTrace:
    """The trace as HTA 0.5.0 sees it: activity launched before the last ProfilerStep, starts rounded up and
    ends rounded down to whole microseconds (a copy; the original is untouched)."""
    import dataclasses

    a = trace.activity
    keep = np.ones(len(a), dtype=bool)
    if len(trace.steps) > 1:
        launch = a["launch_start"].to_numpy()
        keep = (launch >= 0) & (launch < trace.steps["start"].max())
    a = a[keep].copy()
    a["start"] = -((-a["start"].to_numpy()) // 1000) * 1000
    a["end"] = np.maximum((a["end"].to_numpy() // 1000) * 1000, a["start"].to_numpy())
    return dataclasses.replace(trace, activity=a.reset_index(drop=True))


def hta_kernel_breakdown(trace: KinetoTrace):
    """Our kernel breakdown on HTA's window: per name the sum/max/min/mean HTA's get_gpu_kernel_breakdown reports."""
    from analyzer.rank.breakdown import kernel_breakdown
    return kernel_breakdown(hta_window(trace), within_steps=False)
