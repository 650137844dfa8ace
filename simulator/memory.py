"""Profile_memory's ``[memory]`` events for a simulated rank, with known truth (``trace.memory`` in a scenario).

Per step: the rank's model state (``base_gib``) is allocated already; its activations (``activation_gib``, times
``stage_factor``: 1F1B keeps p − s micro-batches on pipeline stage s) are allocated in four pieces across the first
half of the step's compute and freed in the second half; a leaking rank (``leak_mib_per_step``: {rank: MiB}) then
keeps one more tensor of that size at every step's end. The caching allocator reserves whole 20 MiB blocks and never
gives them back, so reserved is the highest allocation so far rounded up, plus ``reserved_slack_gib``.
"""
from __future__ import annotations

MIB, GIB = 1 << 20, 1 << 30
BLOCK = 20 * MIB


def _stage(job, r: int) -> tuple[int, int]:
    """(stage, p) of rank r in its pipeline, (0, 1) without one."""
    p = job.cfg["parallel"]["pp"]
    return (job.topo.coords[r]["pp"], p) if p > 1 else (0, 1)


def activation_bytes(job, r: int, mem: dict) -> int:
    """A rank's activation memory at its peak: 1F1B and interleaved keep min(p − s, m) micro-batches on stage s,
    GPipe all m (per micro-batch activation_gib / m, so stage 0 of 1F1B with p ≥ m holds activation_gib)."""
    s, p = _stage(job, r)
    sch = job.cfg["schedule"]
    m = max(1, sch.get("microbatches", 1))
    inflight = m if sch["kind"] == "pp_gpipe" or p == 1 else min(p - s, m)
    extra = float(mem.get("extra_gib", {}).get(str(r), 0.0))
    return int(mem["activation_gib"] * GIB * inflight / m + extra * GIB)


def memory_events(job, r: int, steps, rel, pid: int, tid: int, dev: int) -> list[dict]:
    """The rank's [memory] events over its steps (times from ``steps``: (step, start, end) on the true clock)."""
    mem = job.cfg["trace"]["memory"]
    base = int(mem["base_gib"] * GIB)
    act = activation_bytes(job, r, mem)
    leak = int(float(mem.get("leak_mib_per_step", {}).get(str(r), 0.0)) * MIB)
    slack = int(mem.get("reserved_slack_gib", 0.0) * GIB)
    alloc, high, out = base, base, []

    def ev(t: int, nbytes: int) -> None:
        nonlocal alloc, high
        alloc += nbytes
        high = max(high, alloc)
        reserved = -(-high // BLOCK) * BLOCK + slack
        out.append({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": pid, "tid": tid,
                    "ts": rel(t), "args": {"Total Reserved": reserved, "Total Allocated": alloc, "Bytes": nbytes,
                                           "Device Id": dev, "Device Type": 1, "Addr": 0x7F0000000000 + len(out)}})

    for _, ws, we in steps:
        if we is None:
            continue
        d = we - ws
        piece = act // 4
        for i in range(4):
            ev(ws + d * (1 + i) // 10, piece)
        for i in range(4):
            ev(ws + d * (6 + i) // 10 - 1, -piece)
        if leak:
            ev(we - d // 100, leak)
    return out


def truth(job) -> dict:
    """expected.json's memory facts: per rank the leak per step, the activation at the peak, the peak allocated."""
    mem = job.cfg["trace"]["memory"]
    steps = job.cfg["steps"]
    out = {}
    for r in range(job.topo.world):
        leak = int(float(mem.get("leak_mib_per_step", {}).get(str(r), 0.0)) * MIB)
        act = activation_bytes(job, r, mem)
        out[str(r)] = {"leak_bytes_per_step": leak, "activation_bytes": act - act % 4,
                       "peak_allocated": int(mem["base_gib"] * GIB) + leak * (steps - 1) + act - act % 4}
    return out
