"""Normalise collective names from every source (kernel names, args, CPU ops, FR, NCCL COLL lines)."""
from __future__ import annotations

import re

#: Canonical op names used throughout the tool.
OPS = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "reduce", "sendrecv", "send",
       "recv", "barrier", "gather", "scatter", "coalesced", "unknown")

_ALIASES = {
    "allreduce": "allreduce", "allreducecoalesced": "allreduce",
    "allgather": "allgather", "allgatherbase": "allgather", "allgatherintotensor": "allgather",
    "allgatherintotensorcoalesced": "allgather", "allgathercoalesced": "allgather",
    "reducescatter": "reducescatter", "reducescatterbase": "reducescatter",
    "reducescattertensor": "reducescatter", "reducescattertensorcoalesced": "reducescatter",
    "alltoall": "alltoall", "alltoallbase": "alltoall", "alltoallv": "alltoall", "alltoallsingle": "alltoall",
    "broadcast": "broadcast", "reduce": "reduce", "sendrecv": "sendrecv", "send": "send", "recv": "recv",
    "barrier": "barrier", "gather": "gather", "scatter": "scatter", "coalesced": "coalesced",
}

_PREFIX = re.compile(r"^(?:gloo|nccl|c10d|symm_mem|record_param_comms)(?:::|:)?\s*", re.IGNORECASE)


def normalise_op(name: str) -> str:
    """Map ``all_reduce``, ``AllReduce``, ``nccl:all_reduce``, ``c10d::allreduce_``, ``_allgather_base`` … to one name."""
    if not name:
        return "unknown"
    s = _PREFIX.sub("", name.strip())
    s = s.split("(")[0].split(" ")[0]
    key = re.sub(r"[^a-z]", "", s.lower())
    if key in _ALIASES:
        return _ALIASES[key]
    for k in sorted(_ALIASES, key=len, reverse=True):
        if key.startswith(k):
            return _ALIASES[k]
    if "multimemallreduce" in key or key.endswith("allreduce"):
        return "allreduce"
    return "unknown"


def op_from_kernel_name(kernel: str) -> str:
    """The op a communication kernel's name spells (``ncclKernel_AllReduce_RING_LL_Sum_float`` → allreduce,
    ``userbuffers_fp16_sum_inplace_gpu_rr_rs<2>`` → reducescatter); 'unknown' for other kernels or when the name
    does not say (RCCL's ``ncclDevKernel_Generic``). The families: parsers/comm_kernels.py."""
    from parsers.comm_kernels import DEFAULT_TABLE
    hit = DEFAULT_TABLE.match(kernel)
    return hit[1] if hit is not None else "unknown"
