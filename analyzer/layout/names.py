"""What a group's description says it is: DeviceMesh's ``mesh_<dim>``, Megatron's ``*_PARALLEL_GROUP`` names,
``default_pg``. Returns the dimension name and its role, or nothing for ``undefined`` / an unknown name."""
from __future__ import annotations

import re
from typing import Optional

#: roles a dimension can have (docs/cross-rank.md, "Job shape")
ROLES = ("dp", "fsdp", "tp", "pp", "ep", "cp", "world", "unknown")
#: a DeviceMesh dimension name → its role (torchtitan's dp_replicate / dp_shard, HSDP's replicate / shard)
DIM_ROLES = {"dp": "dp", "ddp": "dp", "data": "dp", "dp_replicate": "dp", "replicate": "dp", "hsdp_replicate": "dp",
             "dp_shard": "fsdp", "fsdp": "fsdp", "shard": "fsdp", "zero": "fsdp", "hsdp_shard": "fsdp",
             "tp": "tp", "mp": "tp", "tensor": "tp", "sp": "tp", "etp": "tp", "pp": "pp", "pipe": "pp",
             "pipeline": "pp", "ep": "ep", "expert": "ep", "moe": "ep", "cp": "cp", "context": "cp"}
#: Megatron-style names: the words that tell the role, in the order they are tried
_WORDS = (("EXPERT", "ep"), ("PIPELINE", "pp"), ("CONTEXT", "cp"), ("TENSOR", "tp"), ("DATA", "dp"))
_MESH = re.compile(r"^mesh_([A-Za-z0-9_]+)$")


def dimension_of_desc(desc: str) -> Optional[tuple[str, str, bool]]:
    """(dimension name, role, composite) a description names; None when it names none. ``composite``: a
    flattened dimension (torchtitan's ``dp_shard_cp``, Megatron's ``TENSOR_AND_DATA_PARALLEL_GROUP``) that spans
    several others."""
    d = (desc or "").strip()
    if not d or d.lower() in ("undefined", "none"):
        return None
    if d == "default_pg" or d.upper() == "WORLD":
        return ("world", "world", False)
    m = _MESH.match(d)
    if m:
        dim = m.group(1).lower()
        if dim in DIM_ROLES:
            return (dim, DIM_ROLES[dim], False)
        parts = [p for p in dim.split("_") if p in DIM_ROLES]
        if parts:  # dp_shard_cp, dp_cp: flattened
            return (dim, DIM_ROLES["_".join(parts[:2])] if "_".join(parts[:2]) in DIM_ROLES else DIM_ROLES[parts[0]],
                    True)
        return (dim, "unknown", False)
    up = d.upper()
    if "PARALLEL" in up or up.endswith("_GROUP"):
        hits = [role for word, role in _WORDS if word in up]
        if not hits:
            return None
        composite = len(hits) > 1 or "MODEL_PARALLEL_GROUP" == up or "_AND_" in up or "WITH" in up
        role = hits[0]
        name = role if not composite else up.lower().replace("_parallel_group", "").replace("_group", "")
        return (name, role, composite)
    return None
