"""Kernel and idle breakdowns of one rank: exact hand-built cases, HTA's own numbers, an independent recount."""
from __future__ import annotations

import numpy as np
import pytest

from analyzer.rank.breakdown import KERNEL_WAIT_NS, idle_breakdown, kernel_breakdown
from analyzer.rank.hta_compat import hta_kernel_breakdown
from analyzer.rank.metrics import rank_step_metrics
from parsers.kineto import load_trace
from tests.conftest import CORPUS
from tests.kineto_builder import kernel, nccl, runtime, step, trace, write

# Measured with holistictraceanalysis 0.5.0, get_gpu_kernel_breakdown(num_kernels=1000, duration_ratio=1.0,
# include_memory_kernels=True): per rank the number of kernel names, the summed time of all of them (µs), and
# the sum / max of the largest (µs).
HTA_KERNELS = {
    ("hta-trace_filter/sampled_rank-0.json.gz", 0): (199, 302241.0, "ncclKernel_SendRecv", 195327.0, 62783.0),
    ("hta-trace_filter/sampled_rank-1.json.gz", 1): (188, 306242.0, "ncclKernel_SendRecv", 168027.0, 57924.0),
    ("hta-single_rank/nccl_parser_config/nccl_data.json.gz", 0): (72, 100462.0, "ncclKernel_AllReduce", 24204.0,
                                                                    3306.0),
}


@pytest.mark.parametrize("rel,rank", sorted(HTA_KERNELS))
def test_kernel_breakdown_reproduces_hta(rel, rank):
    names, total, top, top_sum, top_max = HTA_KERNELS[(rel, rank)]
    k = hta_kernel_breakdown(load_trace(CORPUS / rel))
    assert len(k) == names
    assert k["total_ns"].sum() / 1000 == pytest.approx(total, abs=1e-6)
    first = k.iloc[0]
    assert first["name"].startswith(top) and first["kind"] == "comm"
    assert first["total_ns"] / 1000 == top_sum and first["max_ns"] / 1000 == top_max
    assert k["share"].sum() == pytest.approx(1.0)


def _hand_trace(tmp_path):
    """One step [0, 1000) µs. Kernels: A [100,200) launched at 50; B [230,300) launched at 220 (queued 30 µs
    gap? no: launched after A ended → host wait 200..220, then launch latency 220..230); C [310,400) launched
    at 150 (queued; gap 10 µs → kernel wait); D [600,700) launched at 120 (queued; gap 200 µs → other);
    E [900,950) launched at 880, with the host inside a c10d collective 750..870 (→ peer wait 750..870, host
    wait 700..750 and 870..880, latency 880..900). Leading gap 0..100: host wait 0..50, latency 50..100.
    Trailing gap 950..1000: nothing follows → other."""
    ev = [step(1, 0, 1000)]
    for i, (ts, dur, launch) in enumerate([(100, 100, 50), (230, 70, 220), (310, 90, 150), (600, 100, 120),
                                           (900, 50, 880)]):
        ev.append(kernel(ts, dur, correlation=i + 1))
        ev.append(runtime(launch, 5, i + 1))
    ev.append({"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": 1, "tid": 100, "ts": 750, "dur": 120,
               "args": {}})
    ev.append({"ph": "X", "cat": "cpu_op", "name": "c10d::broadcast_", "pid": 1, "tid": 999, "ts": 0, "dur": 50,
               "args": {}})  # another thread's collective: not the launching thread, not peer wait
    return load_trace(write(tmp_path / "rank0.json", trace(ev)))


def test_idle_breakdown_exact_on_a_hand_built_step(tmp_path):
    t = _hand_trace(tmp_path)
    row = idle_breakdown(t).iloc[0]
    us = {k: row[f"{k}_ns"] / 1000 for k in ("idle", "host_wait", "peer_wait", "kernel_wait", "other")}
    assert us == {"idle": 590.0, "host_wait": 50 + 20 + 50 + 10, "peer_wait": 120.0,
                  "kernel_wait": 50 + 10 + 10 + 20, "other": 200 + 50}
    assert row["idle_ns"] == rank_step_metrics(t)["idle_ns"].iloc[0]


def test_kernel_breakdown_exact_and_limited_to_steps(tmp_path):
    ev = [step(1, 0, 100), kernel(10, 20, "gemm"), kernel(40, 10, "gemm"), nccl(60, 30),
          kernel(150, 40, "gemm")]  # the last one starts after the step
    t = load_trace(write(tmp_path / "rank3.json", trace(ev, rank=3)))
    k = kernel_breakdown(t)
    gemm = k[k["name"] == "gemm"].iloc[0]
    assert (gemm["count"], gemm["total_ns"], gemm["min_ns"], gemm["max_ns"], gemm["mean_ns"]) == (
        2, 30_000, 10_000, 20_000, 15_000)
    assert gemm["std_ns"] == pytest.approx(np.std([10_000, 20_000], ddof=1))
    comm = k[k["kind"] == "comm"].iloc[0]
    assert comm["name"].startswith("ncclDevKernel") and comm["total_ns"] == 30_000 and list(k["rank"]) == [3, 3]
    assert k["name"].iloc[0] == "gemm"  # equal totals: by name
    assert k["share"].tolist() == [0.5, 0.5]
    whole = kernel_breakdown(t, within_steps=False)
    assert whole[whole["name"] == "gemm"]["count"].iloc[0] == 3


def _recount(t) -> dict:
    """An independent recount of the idle split on a 1 µs grid (integer-µs traces only), in plain Python."""
    a = t.activity
    o = min(int(a["start"].min()), int(t.steps["start"].iloc[0]))  # grid origin
    s = ((a["start"].to_numpy() - o) // 1000).astype(int)
    e = ((a["end"].to_numpy() - o) // 1000).astype(int)
    launch = np.where(a["launch_start"].to_numpy() >= 0, a["launch_start"].to_numpy() - o, -1)
    lo, hi = int(t.steps["start"].iloc[0] - o) // 1000, int(t.steps["end"].iloc[0] - o) // 1000
    horizon = max(hi, int(e.max())) + 1
    busy = np.zeros(horizon + 1, dtype=bool)
    for a_, b_ in zip(s, e):
        busy[a_:b_] = True
    cc = t.cpu_comm
    tids = set(a["launch_tid"][launch >= 0])
    cc = cc[(cc["end"] > o) & (cc["start"] - o < horizon * 1000)]
    in_comm = np.zeros(horizon + 1, dtype=bool)
    for a_, b_, tid in zip((cc["start"] - o) // 1000, (cc["end"] - o) // 1000, cc["tid"]):
        if tid in tids:
            in_comm[int(a_):int(b_)] = True
    out = dict.fromkeys(("host_wait", "peer_wait", "kernel_wait", "other"), 0)
    us = lo
    while us < hi:
        if busy[us]:
            us += 1
            continue
        g0 = us
        while g0 > 0 and not busy[g0 - 1] and g0 > min(lo, int(s.min())):
            g0 -= 1
        g1 = us
        while g1 < horizon and not busy[g1]:
            g1 += 1
        starters = [L for st, L in zip(s, launch) if st == g1 and L >= 0]
        seg_end = min(g1, hi)
        if g1 >= horizon or not starters:
            out["other"] += seg_end - us
        else:
            first_launch = min(starters) / 1000
            for x in range(us, seg_end):
                if first_launch > g0 and x < first_launch:
                    out["peer_wait" if in_comm[x] else "host_wait"] += 1
                elif first_launch > g0:
                    out["kernel_wait"] += 1
                elif g1 - g0 <= KERNEL_WAIT_NS // 1000:
                    out["kernel_wait"] += 1
                else:
                    out["other"] += 1
        us = seg_end
    return out


@pytest.mark.parametrize("rel", ["param-dlrm_kineto/worker3_step_12.1694128201557.pt.trace.json.gz",
                                 "hta-trace_filter/sampled_rank-1.json.gz"])
def test_idle_breakdown_agrees_with_an_independent_recount(rel):
    t = load_trace(CORPUS / rel)
    t.steps = t.steps.iloc[:1]
    got = idle_breakdown(t).iloc[0]
    want = _recount(t)
    assert sum(want.values()) * 1000 == got["idle_ns"]
    for k, v in want.items():
        assert got[f"{k}_ns"] == v * 1000, k
