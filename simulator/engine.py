"""The discrete-event core: runs every rank's program; a collective ends when all members have arrived.

Times here are true (global) ns since the job's time zero. Each rank has a CPU cursor, a compute stream and
one NCCL stream per process group (p2p sends/recvs are not serialised). A collective's arrival on a rank is
max(CPU launch + launch latency, its stream free, the compute stream's tail when the comm stream must wait for
it); its end is the latest arrival + the α–β transfer time, identical on every member. Members that disagree on
(op, size, dtype) or a member that never calls leave the instance unresolved: that is a hang.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Optional

from simulator.cost import DTYPE_BYTES, collective_ns, link_for
from simulator.program import Coll, Program
from simulator.topology import Topology


@dataclass
class Instance:
    """One collective instance (pg, seq) or one send/recv pair."""

    key: tuple
    members: list[int]
    op: str
    arrivals: dict = field(default_factory=dict)   # rank -> arrival ns
    calls: dict = field(default_factory=dict)      # rank -> Coll
    end: Optional[int] = None
    transfer: int = 0
    mismatch: bool = False


@dataclass
class RankState:
    """Everything recorded about one rank while it runs."""

    rank: int
    cpu: int = 0
    cs: int = 0
    pc: int = 0
    tails: dict = field(default_factory=dict)       # stream -> Instance (last launched on that stream)
    kernels: list = field(default_factory=list)     # [kind, start, end|None, stream, name, launch_ts, info]
    cpu_spans: list = field(default_factory=list)   # (cat, name, start, end)
    steps: list = field(default_factory=list)       # [step, start, end]
    step_insts: list = field(default_factory=list)
    enqueued: list = field(default_factory=list)    # dicts: coll call log (FR / NCCL COLL)
    done: bool = False
    halted: Optional[str] = None
    halt_time: int = 0


class Engine:
    """Runs all programs to completion or to a hang."""

    def __init__(self, cfg: dict, topo: Topology, progs: list[Program]):
        self.cfg, self.topo, self.progs = cfg, topo, progs
        self.q = 1000 if cfg["trace"]["format"] == "old" else 1
        c = cfg["cpu"]
        self.launch = self.qt(c["launch_us"] * 1000)
        self.launch_dur = self.qt(c["launch_dur_us"] * 1000)
        self.latency = self.qt(c["launch_latency_us"] * 1000)
        self.comm_op = self.qt(c["comm_op_us"] * 1000)
        self.gap = self.qt(c["step_gap_us"] * 1000)
        rng = random.Random(cfg["seed"] * 31 + 5)
        self.st = [RankState(r, cpu=self.qt(rng.uniform(0, 200_000))) for r in range(topo.world)]
        self.inst: dict = {}
        self.pg_members = {g.name: g.ranks for g in topo.groups}
        self.pg_streams = {g.name: 20 + 4 * i for i, g in enumerate(topo.groups)}

    def qt(self, ns: float) -> int:
        return max(self.q, int(round(ns / self.q)) * self.q) if ns > 0 else 0

    # ---- collectives ---------------------------------------------------------------------------
    def key(self, rank: int, c: Coll) -> tuple:
        if c.is_p2p:
            src, dst = (rank, c.peer) if c.op == "send" else (c.peer, rank)
            return ("p", c.pg, src, dst, c.tag)
        return ("c", c.pg, c.seq)

    def stream(self, rank: int, c: Coll) -> int:
        base = self.pg_streams[c.pg]
        return base + (1 if c.op == "send" else 2 if c.op == "recv" else 0)

    def instance(self, rank: int, c: Coll) -> Instance:
        k = self.key(rank, c)
        if k not in self.inst:
            members = sorted((rank, c.peer)) if c.is_p2p else self.pg_members[c.pg]
            self.inst[k] = Instance(k, list(members), "sendrecv" if c.is_p2p else c.op)
        return self.inst[k]

    def resolve(self, inst: Instance) -> None:
        if inst.end is not None or inst.mismatch or len(inst.arrivals) < len(inst.members):
            return
        calls = list(inst.calls.values())
        if inst.key[0] == "c":
            sig = {(c.op, c.dtype) if c.op == "alltoall" else (c.op, c.in_n, c.out_n, c.dtype) for c in calls}
            if len(sig) > 1:
                inst.mismatch = True
                return
        c0 = calls[0]
        hosts = [self.topo.host(r) for r in inst.members]
        _, alpha, gbps = link_for(self.cfg, hosts)
        es = DTYPE_BYTES[c0.dtype]
        if c0.op == "alltoall":
            nbytes = max(max(c.in_n, c.out_n) for c in calls) * es * len(inst.members)
        elif c0.op == "allgather":
            nbytes = c0.out_n * es
        else:
            nbytes = c0.in_n * es
        cost = 0.0 if self.cfg["network"]["zero_cost"] else collective_ns(
            "send" if c0.is_p2p else c0.op, nbytes, len(inst.members), alpha, gbps)
        inst.transfer = self.qt(cost) if cost else 0
        inst.end = max(inst.arrivals.values()) + inst.transfer

    # ---- running -------------------------------------------------------------------------------
    def run(self) -> None:
        moved = True
        while moved:
            moved = False
            for s in self.st:
                if not s.done and self.advance(s):
                    moved = True
        for s in self.st:
            if not s.done and s.halted is None:
                self.drain(s)

    def advance(self, s: RankState) -> bool:
        prog = self.progs[s.rank].ops
        moved = False
        while s.pc < len(prog):
            if not self.execute(s, prog[s.pc]):
                return moved
            s.pc += 1
            moved = True
        if self.progs[s.rank].halt:
            s.halted = self.progs[s.rank].halt
            s.halt_time = s.cpu + self.qt(3_000_000)
        s.done = True
        return True

    def kernel(self, s: RankState, kind: str, name: str, dur: int, info) -> None:
        start = max(s.cpu + self.latency, s.cs)
        s.kernels.append([kind, start, start + dur, 7, name, s.cpu, info])
        s.cs = start + dur
        s.cpu += self.launch

    def execute(self, s: RankState, op: tuple) -> bool:
        t = op[0]
        if t == "k":
            self.kernel(s, "compute", op[1], op[2], op[3])
        elif t == "h2d":
            self.kernel(s, "memcpy", "Memcpy HtoD (Pinned -> Device)", op[2], op[1])
        elif t == "step":
            s.steps.append([op[1], s.cpu, None])
            s.step_insts = []
        elif t == "load":
            s.cpu_spans.append(("user_annotation", "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",
                                s.cpu, s.cpu + op[1]))
            s.cpu += op[1]
        elif t == "c":
            c: Coll = op[1]
            st = self.stream(s.rank, c)
            prev = s.tails.get(st)
            if not c.is_p2p and prev is not None and prev.end is None:
                return False
            inst = self.instance(s.rank, c)
            launch = s.cpu + self.qt(3000)
            arr = launch + self.latency
            if not c.is_p2p and prev is not None:
                arr = max(arr, prev.end)
            if c.dep:
                arr = max(arr, s.cs)
            inst.arrivals[s.rank] = arr
            inst.calls[s.rank] = c
            if not c.is_p2p:
                s.tails[st] = inst
            s.step_insts.append(inst)
            s.kernels.append(["comm", arr, inst, st, c, launch, None])
            s.enqueued.append({"call": c, "inst": inst, "cpu": s.cpu, "state": None})
            s.cpu_spans.append(("cpu_op", "record_param_comms", s.cpu, s.cpu + self.comm_op))
            s.cpu += self.comm_op
            self.resolve(inst)
        elif t == "w":
            inst = self.instance(s.rank, op[1])
            if inst.end is None:
                return False
            s.cs = max(s.cs, inst.end)
        elif t == "end":
            if any(i.end is None for i in s.step_insts):
                return False
            done = max([s.cs] + [i.end for i in s.step_insts])
            sync_end = max(s.cpu + self.launch_dur, done + self.qt(2000))
            s.cpu_spans.append(("cuda_runtime", "cudaDeviceSynchronize", s.cpu, sync_end))
            s.cpu = sync_end + self.gap
            s.steps[-1][2] = s.cpu
            s.cpu += self.qt(1000)
        return True

    def drain(self, s: RankState) -> None:
        """A hung rank's CPU keeps enqueuing (without blocking) up to the end-of-step sync."""
        prog = self.progs[s.rank].ops
        for op in prog[s.pc:]:
            if op[0] == "end":
                break
            if op[0] == "c":
                c = op[1]
                inst = self.instance(s.rank, c)
                if s.rank not in inst.calls:
                    inst.calls[s.rank] = c
                    s.enqueued.append({"call": c, "inst": inst, "cpu": s.cpu, "state": "scheduled"})
                s.cpu += self.comm_op
            elif op[0] in ("k", "h2d"):
                s.cpu += self.launch

    def hung(self) -> bool:
        return any(not s.done or s.halted for s in self.st)
