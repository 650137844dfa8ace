"""Normalise collective names from every source (args, CPU ops, FR, NCCL COLL lines; kernel names through
parsers/comm_kernels.op_from_kernel_name, which builds on this vocabulary)."""
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


#: CPU ops that are communication, or a wait on it, wherever they sit (a compute span may hold them): functional
#: collectives (DTensor, torch.compile, funcol: ``_c10d_functional::all_reduce`` issues, ``…::wait_tensor``
#: blocks until the peers are done), their autograd forms, the eager c10d ops and waits (``c10d::allreduce_``,
#: ``c10d::wait``), ``record_param_comms``, and the backends' own spans (``gloo:all_reduce``, ``nccl:…``).
_COMM_OP = re.compile(r"^(?:_?c10d_functional(?:_autograd)?::|c10d::|record_param_comms$|gloo:|nccl:|symm_mem::)")


def is_comm_op(name: str) -> bool:
    """True for a CPU op that communicates or waits on communication (see ``_COMM_OP``)."""
    return bool(_COMM_OP.match(str(name)))


def comm_op_mask(names) -> "np.ndarray":
    """Per distinct name (a trace's name table), whether it is a communication op: index it with name ids."""
    import numpy as np
    return np.fromiter((is_comm_op(n) for n in names), dtype=bool, count=len(names))


#: CPU calls that only wait on communication already issued (or on the peers): their whole span is a wait. The
#: issuing calls (``c10d::allreduce_`` …) are not in this list: their time is the host's enqueue, mostly.
WAIT_OP = re.compile(r"^(?:_?c10d_functional::wait_tensor|c10d::wait|c10d::barrier|c10d::monitored_barrier_?)$")
