"""Fault injection: config-level faults change the job; program-level faults edit one rank's calls."""
from __future__ import annotations

from simulator.program import Coll, Program, number
from simulator.topology import Topology

OTHER_OP = {"allreduce": "allgather", "allgather": "allreduce", "reducescatter": "allreduce",
            "alltoall": "allreduce"}
OTHER_DTYPE = {"f32": "bf16", "bf16": "f32", "f16": "f32"}


def apply_config_faults(cfg: dict) -> None:
    """Faults that are a property of the job's configuration (network, rank order, buckets, overlap)."""
    for f in cfg["faults"]:
        k = f["kind"]
        if k == "tp_cross_host":
            cfg["parallel"]["order"] = f.get("order", ["dp", "tp", "pp"])
        elif k == "nccl_socket":
            cfg["network"]["inter"] = "socket"
        elif k == "nccl_wrong_interface":
            cfg["network"]["inter"] = "socket"
            cfg["nccl"]["socket_ifname"] = f.get("ifname", "docker0")
            cfg["network"]["socket"] = {"alpha_us": f.get("alpha_us", 90.0), "gbps": f.get("gbps", 0.4)}
        elif k == "small_buckets":
            cfg["schedule"]["bucket_mb"] = f.get("bucket_mb", 0.25)
        elif k == "no_overlap":
            cfg["schedule"]["overlap"] = False
        elif k == "slow_link":
            for h in f.get("hosts", [1]):
                cfg["network"]["host_gbps"][str(h)] = f.get("gbps", 5.0)


def _find(prog: Program, pg: str, seq: int) -> int:
    for i, op in enumerate(prog.ops):
        if op[0] == "c" and not op[1].is_p2p and op[1].pg == pg and op[1].seq == seq:
            return i
    raise ValueError(f"fault: rank {prog.rank} has no collective seq {seq} on process group {pg}")


def apply_program_faults(cfg: dict, topo: Topology, progs: list[Program]) -> None:
    """Edit programs for mismatches, extra/skipped collectives, stalls and crashes; fills f['process_group']."""
    number(progs)
    for f in cfg["faults"]:
        k = f["kind"]
        if k not in ("mismatched_op", "mismatched_size", "mismatched_dtype", "extra_collective",
                     "skipped_collective", "stalled_rank", "crashed_rank"):
            continue
        role, seq = f.get("role", "dp"), int(f["seq"])
        for r in f["ranks"]:
            prog = progs[r]
            pg = topo.group_of(role, r).name
            f["process_group"] = pg
            i = _find(prog, pg, seq)
            c: Coll = prog.ops[i][1]
            if k == "mismatched_op":
                c.op = f.get("op", OTHER_OP[c.op])
                if c.op == "allgather":
                    c.out_n = c.in_n * len(topo.group_of(role, r).ranks)
            elif k == "mismatched_size":
                c.in_n = int(c.in_n * f.get("scale", 0.5))
                c.out_n = int(c.out_n * f.get("scale", 0.5))
            elif k == "mismatched_dtype":
                c.dtype = f.get("dtype", OTHER_DTYPE[c.dtype])
            elif k == "extra_collective":
                extra = Coll(pg, f.get("op", "allreduce"), f.get("nelems", 1), f.get("nelems", 1),
                             f.get("dtype", "f32"), True, extra=True)
                prog.ops[i:i] = [("c", extra), ("w", extra)]
            elif k == "skipped_collective":
                del prog.ops[i]
                prog.ops[:] = [op for op in prog.ops if not (op[0] == "w" and op[1] is c)]
            elif k in ("stalled_rank", "crashed_rank"):
                del prog.ops[i:]
                prog.halt = "stalled" if k == "stalled_rank" else "crashed"
    number(progs)
