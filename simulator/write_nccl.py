"""Per-rank NCCL_DEBUG=INFO logs (INIT,COLL,NET) in the shape of NCCL 2.19.3, 2.21.5 or 2.26.2."""
from __future__ import annotations

import datetime as _dt

from simulator.names import NCCL_DTYPE, NCCL_OP

SUPPORTED = ("2.19.3", "2.21.5", "2.26.2")


def _v(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split("."))


class NcclLogWriter:
    """Builds the lines of one rank's NCCL log (NCCL writes to stdout; one file per rank here)."""

    def __init__(self, job, rank: int):
        self.job, self.rank = job, rank
        self.ver = job.cfg["nccl"]["version"]
        if self.ver not in SUPPORTED:
            raise ValueError(f"nccl.version {self.ver} not simulated; pick one of {SUPPORTED}")
        self.v = _v(self.ver)
        self.lines: list[str] = []
        launcher = job.cfg["nccl"]["launcher"]
        self.prefix = f"[default{job.topo.local(rank)}]:" if launcher == "torchrun" else ""
        self.host = job.hostname(rank)
        self.pid = job.pids[rank]
        self.dev = job.topo.local(rank)

    def info(self, msg: str, tid: int | None = None) -> None:
        t = self.pid if tid is None else tid
        self.lines.append(f"{self.prefix}{self.host}:{self.pid}:{t} [{self.dev}] NCCL INFO {msg}")

    def warn(self, where: str, msg: str, when_ns: int) -> None:
        ts = ""
        if self.v >= (2, 26):
            ts = "[" + _dt.datetime.fromtimestamp(when_ns // 10**9, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S") + "] "
        self.lines.append(self.prefix)
        self.lines.append(f"{self.prefix}{ts}{self.host}:{self.pid}:{self.pid} [{self.dev}] {where} NCCL WARN {msg}")

    def build(self) -> list[str]:
        job, r, cfg = self.job, self.rank, self.job.cfg
        nc = cfg["nccl"]
        ib = cfg["network"]["inter"] == "ib"
        ifname = nc["socket_ifname"]
        addr = "127.0.0.1" if ifname == "lo" else (f"172.17.0.{1 + job.topo.host(r)}" if ifname == "docker0"
                                                     else job.ip(r))
        groups = job.topo.groups_of(r)
        banner = f"NCCL version {self.ver}+cuda{nc['cuda']}"
        if self.v >= (2, 22):
            self.info(banner)
        elif any(g.ranks[0] == r for g in groups):
            self.lines.append(self.prefix + banner)
        self.info(f"NCCL_SOCKET_IFNAME set by environment to {ifname}")
        if self.v >= (2, 24):
            self.info(f"Bootstrap: Using {ifname}:{addr}<0>")
        else:
            self.info(f"Bootstrap : Using {ifname}:{addr}<0>")
        if not ib:
            self.info("NCCL_IB_DISABLE set by environment to 1.")
        if self.v >= (2, 22):
            self.info("NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.")
        elif self.v >= (2, 21):
            self.info("NET/Plugin: Plugin load returned 2 : libnccl-net.so: cannot open shared object file: "
                      "No such file or directory : when loading libnccl-net.so")
            self.info("NET/Plugin: Using internal network plugin.")
        else:
            self.info("NET/Plugin : dlerror=libnccl-net.so: cannot open shared object file: No such file or "
                      "directory No plugin found (libnccl-net.so), using internal implementation")
        if ib:
            devs = " ".join(f"[{i}]mlx5_{i}:1/IB" for i in range(nc["ib_hcas"]))
            self.info(f"NET/IB : Using {devs} [RO]; OOB {ifname}:{addr}<0>")
            self.info("Using network IB")
        else:
            self.info(f"NET/Socket : Using [0]{ifname}:{addr}<0>")
            self.info("Using network Socket")
        if self.v >= (2, 19) and self.v < (2, 22):
            self.info("Using non-device net plugin version 0")
        init_tid = self.pid + 37
        for g in groups:
            self.init_comm(g, init_tid)
            init_tid += 2
        return self.lines

    def init_comm(self, g, tid: int) -> None:
        job, r = self.job, self.rank
        me = g.ranks.index(r)
        n = len(g.ranks)
        comm = job.comm_ptr(r, g.name)
        bus = job.bus_id(r)
        nv = self.dev
        fn = "ncclCommInitRank " if self.v >= (2, 21) else ""
        body = f"{fn}comm {comm} rank {me} nranks {n} cudaDev {self.dev} nvmlDev {nv} busId {bus} commId {job.comm_id(g.name)}"
        self.info(f"{body} - Init START")
        nnodes = len(g.hosts)
        local = [x for x in g.ranks if job.topo.host(x) == job.topo.host(r)]
        if self.v >= (2, 20):
            self.info(f"comm {comm} rank {me} nRanks {n} nNodes {nnodes} localRanks {len(local)} "
                      f"localRank {local.index(r)} MNNVL 0", tid)
        nch = 2
        if me == 0:
            for ch in range(nch):
                if self.v >= (2, 23):
                    w = len(str(n - 1))
                    self.info(f"Channel {ch:02d}/{nch:02d} :" + "".join(f" {i:{w}d}" for i in range(n)), tid)
                else:
                    self.info(f"Channel {ch:02d}/{nch:02d} :" + "".join(f" {i:3d}" for i in range(min(n, 20))), tid)
        up = (me - 1) // 2 if me else -1
        downs = [d for d in (2 * me + 1, 2 * me + 2) if d < n] + [-1, -1, -1]
        tree = f"{downs[0]}/{downs[1]}/{downs[2]}->{me}->{up}"
        self.info(f"Trees [0] {tree} [1] {tree}", tid)
        self.info("P2P Chunksize set to 524288", tid)
        nxt, prv = g.ranks[(me + 1) % n], g.ranks[(me - 1) % n]
        net = "IB" if job.cfg["network"]["inter"] == "ib" else "Socket"
        if n > 1:
            for ch in range(nch):
                for a, b, dirn in ((r, nxt, "send"), (prv, r, "receive")):
                    ga, gb = g.ranks.index(a), g.ranks.index(b)
                    da, db = job.topo.local(a), job.topo.local(b)
                    same = job.topo.host(a) == job.topo.host(b)
                    if same and dirn == "receive":
                        continue
                    if same:
                        self.info(f"Channel {ch:02d}/0 : {ga}[{da}] -> {gb}[{db}] via P2P/CUMEM/read", tid)
                    else:
                        flag = "/GDRDMA" if net == "IB" else ""
                        self.info(f"Channel {ch:02d}/0 : {ga}[{da}] -> {gb}[{db}] [{dirn}] via NET/{net}/{ch % 2}{flag}", tid)
        if self.v >= (2, 24):
            self.info("Connected all rings, use ring PXN 0 GDR 1", tid)
        else:
            self.info("Connected all rings", tid)
        self.info("Connected all trees", tid)
        self.info("threadThresholds 8/8/64 | 64/8/64 | 512 | 512", tid)
        if self.v >= (2, 20):
            self.info(f"{nch} coll channels, 0 collnet channels, 0 nvls channels, {nch} p2p channels, {nch} p2p channels per peer", tid)
        else:
            self.info(f"{nch} coll channels, 0 nvls channels, {nch} p2p channels, {nch} p2p channels per peer", tid)
        if self.v >= (2, 22):
            self.info("CC Off, workFifoBytes 1048576", tid)
        self.info(f"{body} - Init COMPLETE", tid)

    def coll_line(self, call, opcount: int, grank: int) -> list[str]:
        job, r = self.job, self.rank
        g = job.pg[call.pg]
        comm, stream = job.comm_ptr(r, g.name), job.stream_ptr(r, g.name)
        n = len(g.ranks)
        dt = NCCL_DTYPE[call.dtype]
        sb, rb = job.buf_ptr(r, opcount, 0), job.buf_ptr(r, opcount, 1)
        if call.op in ("send", "recv"):
            peer = g.ranks.index(call.peer)
            s_, r_ = (sb, "(nil)") if call.op == "send" else ("(nil)", rb)
            return [f"{NCCL_OP[call.op]}: opCount {opcount:x} sendbuff {s_} recvbuff {r_} count {call.in_n} "
                    f"datatype {dt} op 0 root {peer} comm {comm} [nranks={n}] stream {stream}"]
        if call.op == "alltoall" and self.v < (2, 28):
            per = call.in_n // n
            out = []
            for p in range(n):
                out.append(f"Send: opCount {opcount:x} sendbuff {sb} recvbuff (nil) count {per} datatype {dt} op 0 "
                           f"root {p} comm {comm} [nranks={n}] stream {stream}")
                out.append(f"Recv: opCount {opcount:x} sendbuff (nil) recvbuff {rb} count {call.out_n // n} datatype "
                           f"{dt} op 0 root {p} comm {comm} [nranks={n}] stream {stream}")
            return out
        count = call.out_n if call.op == "reducescatter" else call.in_n
        return [f"{NCCL_OP[call.op]}: opCount {opcount:x} sendbuff {sb} recvbuff {rb} count {count} datatype {dt} "
                f"op 0 root 0 comm {comm} [nranks={n}] stream {stream}"]
