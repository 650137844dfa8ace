"""Rank ↔ (tp, dp, pp, ep) coordinates, hosts, and the job's process groups."""
from __future__ import annotations

from dataclasses import dataclass, field

DESCS = {"world": "default_pg", "tp": "TENSOR_MODEL_PARALLEL_GROUP", "dp": "DATA_PARALLEL_GROUP",
         "fsdp": "DATA_PARALLEL_GROUP", "pp": "PIPELINE_MODEL_PARALLEL_GROUP",
         "ep": "EXPERT_MODEL_PARALLEL_GROUP"}


@dataclass
class ProcessGroup:
    """One process group: PyTorch name ("0" is the default group), description, role and members."""

    name: str
    desc: str
    role: str
    ranks: list[int]
    hosts: list[int] = field(default_factory=list)


@dataclass
class Topology:
    """Where every rank lives and which groups it belongs to."""

    world: int
    gpus_per_host: int
    sizes: dict
    coords: list[dict]
    groups: list[ProcessGroup]
    by_role: dict  # role -> {rank: ProcessGroup}

    def host(self, rank: int) -> int:
        return rank // self.gpus_per_host

    def local(self, rank: int) -> int:
        return rank % self.gpus_per_host

    def group_of(self, role: str, rank: int) -> ProcessGroup:
        return self.by_role[role][rank]

    def groups_of(self, rank: int) -> list[ProcessGroup]:
        return [g for g in self.groups if rank in g.ranks]


def build_topology(cfg: dict) -> Topology:
    """Megatron-style mapping: the first dim in parallel.order varies fastest."""
    par = cfg["parallel"]
    sizes = {"tp": par["tp"], "dp": par["dp"], "pp": par["pp"]}
    world, gph = cfg["world_size"], cfg["gpus_per_host"]
    strides, s = {}, 1
    for d in par["order"]:
        strides[d] = s
        s *= sizes[d]
    coords = []
    for r in range(world):
        c = {d: (r // strides[d]) % sizes[d] for d in sizes}
        c["ep"] = c["dp"] // par["ep"]
        coords.append(c)
    groups = [ProcessGroup("0", DESCS["world"], "world", list(range(world)))]
    by_role: dict = {"world": {r: groups[0] for r in range(world)}}
    fsdp = cfg["schedule"]["kind"] == "fsdp"

    def add(role: str, key) -> None:
        buckets: dict = {}
        for r in range(world):
            buckets.setdefault(key(r), []).append(r)
        by_role[role] = {}
        for members in buckets.values():
            if len(members) == world:
                g = groups[0]
            else:
                g = ProcessGroup(str(len(groups)), DESCS[role], role, members)
                groups.append(g)
            for r in members:
                by_role[role][r] = g

    if sizes["tp"] > 1:
        add("tp", lambda r: (coords[r]["dp"], coords[r]["pp"]))
    if sizes["dp"] > 1:
        add("fsdp" if fsdp else "dp", lambda r: (coords[r]["tp"], coords[r]["pp"]))
        if fsdp:
            by_role["dp"] = by_role["fsdp"]
    if sizes["pp"] > 1:
        add("pp", lambda r: (coords[r]["tp"], coords[r]["dp"]))
    if par["ep"] > 1:
        add("ep", lambda r: (coords[r]["tp"], coords[r]["pp"], coords[r]["ep"]))
    for g in groups:
        g.hosts = sorted({r // gph for r in g.ranks})
    return Topology(world, gph, sizes, coords, groups, by_role)
