"""α–β collective cost by link class (NVLink inside a host, IB or socket across hosts)."""
from __future__ import annotations

DTYPE_BYTES = {"f32": 4, "bf16": 2, "f16": 2, "f64": 8, "i64": 8, "i32": 4, "u8": 1}


def link_for(cfg: dict, hosts: list[int]) -> tuple[str, float, float]:
    """(link class, alpha ns, GB/s) for a set of hosts; a slow host NIC limits the whole ring."""
    net = cfg["network"]
    if len(set(hosts)) <= 1:
        return "nvlink", net["nvlink"]["alpha_us"] * 1000.0, net["nvlink"]["gbps"]
    kind = net["inter"]
    gbps = net[kind]["gbps"]
    for h in set(hosts):
        over = net["host_gbps"].get(str(h))
        if over is not None:
            gbps = min(gbps, float(over))
    return kind, net[kind]["alpha_us"] * 1000.0, gbps


def collective_ns(op: str, nbytes: int, n: int, alpha_ns: float, gbps: float) -> float:
    """Transfer time in ns for one collective of `nbytes` (full message) over `n` ranks."""
    if n <= 1:
        return alpha_ns
    bw = nbytes / gbps  # bytes / (GB/s) = ns with decimal GB
    if op == "allreduce":
        return 2 * (n - 1) * alpha_ns + 2 * (n - 1) / n * bw
    if op in ("allgather", "reducescatter", "alltoall"):
        return (n - 1) * alpha_ns + (n - 1) / n * bw
    return alpha_ns + bw  # send/recv, broadcast
