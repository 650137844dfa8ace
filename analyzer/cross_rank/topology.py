"""Rank ↔ host map, process groups (members, hosts spanned, intra/inter node) and their inferred roles."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import pandas as pd

from analyzer.rank.summary import collective_column
from parsers.table import Table  # the NCCL log parser's tables

#: Where the rank → host map came from (docs/report-sections.md `cross_rank.hosts.source`).
HOST_SOURCES = ("trace", "nccl_log", "gpus_per_node", "none")
P2P_OPS = ("send", "recv")


@dataclass
class Hosts:
    """Which host each rank ran on, and how that was learned."""

    source: str
    rank_to_host: dict[int, str]
    gpus_per_node: Optional[int] = None

    @property
    def known(self) -> bool:
        return self.source != "none"

    def host(self, rank: int) -> Optional[str]:
        return self.rank_to_host.get(rank)


def resolve_hosts(job: Any, gpus_per_node: Optional[int] = None) -> Hosts:
    """Hosts from the traces' host_name, else NCCL logs, else rank // gpus_per_node (TraceLens), else none."""
    ranks = sorted(job.traces)
    from_trace = {r: job.traces[r].meta.get("host") for r in ranks}
    if ranks and all(isinstance(h, str) and h for h in from_trace.values()):
        return Hosts("trace", from_trace, gpus_per_node)
    from_logs: dict[int, str] = {}
    for log in getattr(job, "nccl_logs", []) or []:
        procs = getattr(log, "processes", None)
        if isinstance(procs, (pd.DataFrame, Table)) and {"rank", "host"} <= set(procs.columns):
            for r, h in zip(procs["rank"], procs["host"]):
                if pd.notna(r) and isinstance(h, str) and h and int(r) >= 0:
                    from_logs.setdefault(int(r), h)
    if ranks and all(r in from_logs for r in ranks):
        return Hosts("nccl_log", {r: from_logs[r] for r in ranks}, gpus_per_node)
    if gpus_per_node and gpus_per_node > 0:
        return Hosts("gpus_per_node", {r: f"node{r // gpus_per_node}" for r in ranks}, gpus_per_node)
    return Hosts("none", {}, gpus_per_node)


# process groups are gathered by the layout stage, the one place that reads them (analyzer/layout/groups.py)
from analyzer.layout.groups import Group, declared_groups, parse_ranks  # noqa: E402,F401  (names callers import)


def group_span(ranks: list[int], hosts: Hosts) -> tuple[list[str], str]:
    """(hosts spanned, 'intra_node' | 'inter_node' | 'unknown')."""
    if not hosts.known or not ranks:
        return [], "unknown"
    hs = sorted({hosts.rank_to_host[r] for r in ranks if r in hosts.rank_to_host})
    if len(hs) < len({r for r in ranks if r in hosts.rank_to_host}) and len(hs) == 0:
        return [], "unknown"
    return hs, ("intra_node" if len(hs) <= 1 else "inter_node")


def infer_role(name: str, ranks: list[int], world: int, ops: dict[str, int], per_step: float,
               first_pos: Optional[float]) -> tuple[str, str]:
    """Role of one group from what runs on it; returns (role, evidence sentence).

    ``per_step``: collectives per step on one member; ``first_pos``: median fraction of the step's compute
    already done when the group's first collective of the step is issued (TP starts inside the forward pass,
    data-parallel gradient sync only after it).
    """
    total = sum(ops.values())
    desc_ops = ", ".join(f"{k}×{v}" for k, v in sorted(ops.items(), key=lambda kv: -kv[1])) or "no traffic"
    if world and len(ranks) == world and world > 1:
        return "world", f"spans all {world} ranks (default group); carries {desc_ops}"
    if total == 0:
        return "unknown", "no collective seen on this group"
    p2p = sum(ops.get(k, 0) for k in P2P_OPS)
    if p2p / total >= 0.5:
        return "pp", f"send/recv between stages ({p2p} of {total} operations)"
    if ops.get("alltoall", 0) / total >= 0.5:
        return "ep", f"all-to-all dominates ({ops['alltoall']} of {total}): expert dispatch/combine"
    ag, rs, ar = ops.get("allgather", 0), ops.get("reducescatter", 0), ops.get("allreduce", 0)
    if ag and rs:
        if ag >= 1.5 * rs:
            return "fsdp", (f"parameter all-gathers ({ag}) ≈ 2× gradient reduce-scatters ({rs}): "
                            "FSDP/ZeRO-3 gathers each layer in forward and backward")
        return "tp", (f"all-gather ({ag}) and reduce-scatter ({rs}) in equal numbers around every layer: "
                      "sequence-parallel tensor parallelism")
    early = first_pos is not None and first_pos < 0.25
    if (ar or ag or rs) and early and per_step >= 4:
        return "tp", (f"{per_step:.0f} collectives per step starting {first_pos:.0%} into the step's compute "
                      "(inside the forward pass of every layer)")
    if ar or rs:
        where = "" if first_pos is None else f", first one {first_pos:.0%} into the step's compute"
        return "dp", f"gradient reduction: {per_step:.1f} {'all-reduce' if ar else 'reduce-scatter'}s per step{where}"
    if ag:
        return "fsdp", f"parameter all-gathers ({ag})"
    return "unknown", f"carries {desc_ops}"
