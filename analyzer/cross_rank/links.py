"""Link class of each process group from the evidence, its nominal bandwidth, and the busbw a transfer should reach.

Evidence, strongest first: the NCCL debug logs (connection transports P2P/IPC, P2P/CUMEM, SHM, NET/IB with or
without /GDRDMA, NET/Socket, NET/OFI; the channel summary lines; NCCL_* variables set by environment), the GPU
model in the traces' `deviceProperties`, and whether the group spans hosts. The expected bus bandwidth of one
collective follows NCCL's own ring cost model (latency α = base + steps × per-hop latency, then bytes at the
nominal rate), so small messages are not held to a large message's bandwidth. Numbers and their sources:
`NOMINAL` / `GPUS` below and docs/cross-rank.md ("Link classes").
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import pandas as pd

from parsers.table import Table  # the NCCL log parser's tables

#: Link classes a group can get (docs/json-schema.md `link_class`).
CLASSES = ("nvlink", "xgmi", "pcie", "shm", "ib", "efa", "socket", "unknown")


@dataclass(frozen=True)
class Gpu:
    """What a GPU model brings: NVLink (or Infinity Fabric) bandwidth per GPU and direction, PCIe generation."""

    pattern: str
    model: str
    fabric_gbps: Optional[float]   # NVLink / xGMI, GB/s per GPU per direction (all links); None: PCIe only
    pcie_gen: int
    nic_gbps: float                # the slowest NIC commonly paired with it (one port, GB/s), when logs do not say
    source: str
    fabric: str = "nvlink"


#: GPU models by deviceProperties name (first match wins; PCIe boards before their SXM siblings). Fabric bandwidths
#: are the vendors' datasheet NVLink / Infinity Fabric totals halved (the totals count both directions).
GPUS: tuple[Gpu, ...] = (
    Gpu(r"V100.*PCIE|V100S", "V100 PCIe", None, 3, 12.5, "NVIDIA V100 datasheet (PCIe board: no NVLink)"),
    Gpu(r"V100", "V100 SXM2", 150.0, 3, 12.5, "NVIDIA V100 datasheet: NVLink2 300 GB/s"),
    Gpu(r"A100.*PCIE|A100 80GB PCIe|A100-PCIE", "A100 PCIe", None, 4, 25.0,
        "NVIDIA A100 datasheet (PCIe board; an NVLink bridge joins pairs only)"),
    Gpu(r"A100", "A100 SXM4", 300.0, 4, 25.0, "NVIDIA A100 datasheet: NVLink3 600 GB/s"),
    Gpu(r"A800.*PCIe", "A800 PCIe", None, 4, 25.0, "NVIDIA A800 datasheet (PCIe board)"),
    Gpu(r"A800", "A800 SXM4", 200.0, 4, 25.0, "NVIDIA A800 datasheet: NVLink 400 GB/s"),
    Gpu(r"H100 NVL|H100.*PCIe|H200 NVL", "H100/H200 PCIe / NVL", None, 5, 25.0,
        "NVIDIA H100 / H200 NVL datasheets (PCIe boards; NVLink bridges join 2-4 boards only)"),
    Gpu(r"H800.*PCIe", "H800 PCIe", None, 5, 25.0, "NVIDIA H800 PCIe datasheet"),
    Gpu(r"H800", "H800 SXM5", 200.0, 5, 25.0, "NVIDIA H800 datasheet: NVLink 400 GB/s"),
    Gpu(r"H100|H200|GH200|H20\b", "H100/H200/H20 SXM", 450.0, 5, 25.0,
        "NVIDIA H100 / H200 / H20 datasheets: NVLink4 900 GB/s"),
    Gpu(r"B200|B100|GB200|B300|GB300", "B200 / GB200", 900.0, 5, 50.0, "NVIDIA DGX B200 / GB200 NVL72: NVLink5 1.8 TB/s"),
    Gpu(r"MI300X|MI325X", "MI300X / MI325X", 448.0, 5, 50.0,
        "AMD Instinct MI300X datasheet: 7 Infinity Fabric links, 896 GB/s peer-to-peer", fabric="xgmi"),
    Gpu(r"T4\b|Tesla T4", "T4", None, 3, 12.5, "NVIDIA T4 datasheet (PCIe only)"),
    Gpu(r"L40S|L40\b|L4\b|A10G?\b|A30\b|A40\b|A6000|6000 Ada|RTX|GeForce", "PCIe workstation / inference GPU",
        None, 4, 12.5, "NVIDIA datasheets (no NVLink on these boards, or a 2-board bridge only)"),
)

#: PCIe x16, GB/s per direction (PCI-SIG: 8 / 16 / 32 GT/s per lane, 128b/130b encoding).
PCIE_GBPS = {3: 15.75, 4: 31.5, 5: 63.0}

#: NCCL's ring cost model (src/graph/tuning.cc, Simple protocol): base latency and per-hop latency, µs. Each is the
#: larger of the values NCCL 2.x releases have used (NVLink 3.4 / 5.7, PCI 5.7, network 9.6 / 6.6), so the model
#: never expects more than NCCL itself plans for.
NCCL_BASE_LAT_US = 8.4
NCCL_HW_LAT_US = {"nvlink": 5.7, "xgmi": 5.7, "pcie": 5.7, "shm": 5.7, "ib": 9.6, "efa": 9.6, "socket": 9.6}
#: Bandwidth one NCCL channel carries at most on NVLink-class links (ring per-channel bandwidth of NCCL's topology
#: search, ~20-25 GB/s on NVLink3/4): fewer channels than nominal / this cannot fill the link.
CHANNEL_GBPS = 25.0

_NOMINAL_DOC = {
    "nvlink": "the GPU's NVLink bandwidth per direction (datasheet total / 2)",
    "xgmi": "the GPU's Infinity Fabric peer bandwidth per direction (datasheet total / 2)",
    "pcie": "PCIe x16 per direction for the GPU's generation (PCI-SIG)",
    "shm": "half the PCIe x16 rate: every byte crosses PCIe twice through host memory",
    "ib": "one InfiniBand / RoCE port (EDR 12.5, HDR 25, NDR 50 GB/s; the slowest port commonly paired with this "
          "GPU when the log does not say): a lower bound, more rails can carry more",
    "efa": "one EFA interface of 100 Gb/s (12.5 GB/s): a lower bound, instances have 4-32",
}


@dataclass
class LinkEvidence:
    """What the NCCL logs of a job say about its links (job-wide; one row of evidence per fact, with file:line)."""

    intra: set = field(default_factory=set)        # P2P, SHM
    p2p_kinds: set = field(default_factory=set)    # IPC, CUMEM, direct
    nets: set = field(default_factory=set)         # IB, Socket, OFI, IBext
    gdr: Optional[bool] = None                     # NET connections with /GDRDMA (True), without (False)
    coll_channels: Optional[int] = None            # smallest `N coll channels` seen
    nvls: bool = False
    env: dict = field(default_factory=dict)        # NCCL_* name → (value, file, line)
    facts: list = field(default_factory=list)      # (text, file, line)

    @property
    def any(self) -> bool:
        return bool(self.intra or self.nets or self.env or self.coll_channels is not None)


def gpu_of(name: Optional[str]) -> Optional[Gpu]:
    """The GPU row for a deviceProperties name, None when unknown."""
    if not name:
        return None
    for g in GPUS:
        if re.search(g.pattern, name, flags=re.IGNORECASE):
            return g
    return None


def log_evidence(logs: list[Any]) -> LinkEvidence:
    """Transports, GPUDirect RDMA, channels and NCCL_* environment from every NCCL log of the job."""
    ev = LinkEvidence()
    first: dict[str, tuple] = {}
    for log in logs or []:
        path = str(getattr(log, "path", ""))
        conns = getattr(log, "connections", None)
        if isinstance(conns, (pd.DataFrame, Table)) and len(conns) and "transport" in conns:
            for tr, detail, line in zip(conns["transport"].astype(str), conns["detail"].astype(str), conns["line"]):
                head = tr.split("/")[0]
                if head == "NET":
                    net = tr.split("/", 1)[1] if "/" in tr else ""
                    ev.nets.add(net)
                    gdr = "GDRDMA" in detail
                    if net in ("IB", "IBext", "OFI"):  # GPUDirect RDMA is a question for RDMA networks only
                        ev.gdr = gdr if ev.gdr is None else (ev.gdr and gdr)
                    first.setdefault(tr + ("/GDRDMA" if gdr else ""), (path, int(line)))
                elif head in ("P2P", "SHM"):
                    ev.intra.add(head)
                    if head == "P2P":
                        ev.p2p_kinds.add(tr.split("/", 1)[1] if "/" in tr else "")
                    first.setdefault(tr, (path, int(line)))
        nets = getattr(log, "networks", None)
        if isinstance(nets, (pd.DataFrame, Table)) and len(nets) and "role" in nets:
            for n, role, line in zip(nets["network"].astype(str), nets["role"].astype(str), nets["line"]):
                if role == "selected" and n:
                    key = {"socket": "Socket", "ib": "IB"}.get(n.lower(), "OFI" if "fabric" in n.lower() or
                                                                "ofi" in n.lower() else n)
                    first.setdefault(f"Using network {n}", (path, int(line)))
                    if key in ("Socket", "OFI"):
                        ev.nets.add(key)
        ch = getattr(log, "channels", None)
        if isinstance(ch, (pd.DataFrame, Table)) and len(ch):
            c = int(ch["coll"].min())
            if ev.coll_channels is None or c < ev.coll_channels:
                ev.coll_channels = c
                first["channels"] = (path, int(np.asarray(ch["line"])[int(np.argmin(np.asarray(ch["coll"])))]))
            if (ch["nvls"] > 0).any():
                ev.nvls = True
        env = getattr(log, "env", None)
        if isinstance(env, (pd.DataFrame, Table)) and len(env):
            for name, value, line in zip(env["name"].astype(str), env["value"].astype(str), env["line"]):
                if name.startswith("NCCL_") and name not in ev.env:
                    ev.env[name] = (value.strip(), path, int(line))
    for text, (path, line) in first.items():
        ev.facts.append((f"via {text}" if text not in ("channels",) else f"{ev.coll_channels} coll channels",
                         path, line))
    return ev


@dataclass
class Link:
    """The link class of one group and what it should deliver."""

    link_class: str
    nominal_gbps: Optional[float]
    evidence: list[str]
    nominal_source: str = ""
    gpu: Optional[str] = None

    def to_dict(self) -> dict:
        return {"link_class": self.link_class, "nominal_gbps": self.nominal_gbps, "evidence": self.evidence,
                "nominal_source": self.nominal_source, "gpu": self.gpu}


def classify(span: str, cpu: bool, gpu: Optional[Gpu], ev: LinkEvidence, ranks_per_host: int = 1) -> Link:
    """Link class and nominal busbw (GB/s) of a group from its span, the GPU model and the NCCL log evidence."""
    model = gpu.model if gpu else None
    if cpu:
        return Link("socket", None, ["CPU-only trace (gloo over TCP)"], gpu=model)
    if span == "inter_node":
        return _inter(gpu, ev, model)
    if span != "intra_node":
        return Link("unknown", None, ["hosts of the group's ranks unknown"], gpu=model)
    says = []
    if ev.intra:
        says.append("NCCL connections inside a host: " + ", ".join(sorted(
            (f"P2P/{k}" for k in ev.p2p_kinds), key=str) + (["SHM"] if "SHM" in ev.intra else [])))
    if "SHM" in ev.intra and "P2P" not in ev.intra:
        gen = gpu.pcie_gen if gpu else 4
        return Link("shm", PCIE_GBPS[gen] / 2, says + ["no P2P connection: GPUs exchange through host memory"],
                    _NOMINAL_DOC["shm"] + f" (PCIe gen{gen})", model)
    if gpu is None:
        return Link("unknown", None, says + ["GPU model not in the traces: NVLink or PCIe unknown"], gpu=model)
    if gpu.fabric_gbps:
        extra = ["NVLS (NVLink SHARP) channels in use"] if ev.nvls else []
        return Link(gpu.fabric, gpu.fabric_gbps, says + [f"GPU {model} has {gpu.fabric}"] + extra,
                    _NOMINAL_DOC[gpu.fabric] + f": {gpu.source}", model)
    return Link("pcie", PCIE_GBPS[gpu.pcie_gen], says + [f"GPU {model} has no NVLink: P2P goes over PCIe"],
                _NOMINAL_DOC["pcie"] + f" (gen{gpu.pcie_gen}); {gpu.source}", model)


def _inter(gpu: Optional[Gpu], ev: LinkEvidence, model: Optional[str]) -> Link:
    nets = ev.nets
    if "Socket" in nets and not (nets - {"Socket"}):
        return Link("socket", None, ["NCCL moves inter-node data over TCP sockets (NET/Socket)"], gpu=model)
    if "OFI" in nets:
        return Link("efa", 12.5, ["NCCL's network plugin is OFI / libfabric (AWS EFA)"], _NOMINAL_DOC["efa"], model)
    rate = gpu.nic_gbps if gpu else 25.0
    says = [f"NCCL network {'/'.join(sorted(nets))}" if nets else "no NCCL log: InfiniBand assumed between hosts"]
    if ev.gdr is False:
        says.append("NET connections without /GDRDMA: no GPUDirect RDMA")
    src = _NOMINAL_DOC["ib"] + (f"; {gpu.model} systems ship with ≥ {rate:g} GB/s ports" if gpu else
                                "; GPU unknown: HDR assumed")
    return Link("ib", rate, says, src, model)


def expected_busbw(link: Link, op: str, n: int, nbytes: float, factor: float) -> Optional[float]:
    """The busbw (GB/s) NCCL's ring model gives for one collective of ``nbytes`` over ``n`` ranks on this link.

    time = α + bytes × factor / nominal, α = base + steps × hop latency (steps: 2(n−1) for all-reduce, n−1 for
    all-gather / reduce-scatter / all-to-all, 1 otherwise); busbw = bytes × factor / time.
    """
    if link.nominal_gbps is None or not nbytes or nbytes <= 0 or n < 2 or factor != factor:
        return None
    steps = 2 * (n - 1) if op == "allreduce" else (n - 1 if op in ("allgather", "reducescatter", "alltoall") else 1)
    alpha_ns = (NCCL_BASE_LAT_US + steps * NCCL_HW_LAT_US.get(link.link_class, 9.6)) * 1e3
    bus = nbytes * factor
    return bus / (alpha_ns + bus / link.nominal_gbps)


def low_busbw_causes(link: Link, ev: LinkEvidence) -> list[tuple]:
    """What the logs show that slows this link class down: (text, file, line[, cap GB/s]) per cause; a channel
    cause carries the busbw its channels can carry at most, so a faster measurement rules it out."""
    out = []
    env = ev.env

    def on(name: str) -> Optional[tuple]:
        v = env.get(name)
        return v if v is not None and v[0] not in ("0", "", "false", "False") else None

    intra = link.link_class in ("nvlink", "xgmi", "pcie", "shm")
    if intra:
        v = on("NCCL_P2P_DISABLE")
        if v:
            out.append((f"NCCL_P2P_DISABLE={v[0]}: GPUs of a host cannot write to each other, traffic goes through "
                        "host memory (SHM) or the network", v[1], v[2]))
        v = env.get("NCCL_P2P_LEVEL")
        if v and v[0].upper() in ("LOC", "0", "PIX", "1"):
            out.append((f"NCCL_P2P_LEVEL={v[0]} restricts P2P to the closest GPU pairs", v[1], v[2]))
        if link.link_class == "shm" or ("SHM" in ev.intra and "P2P" not in ev.intra):
            out.append(("NCCL uses SHM (host memory) between GPUs of a host instead of P2P", *_fact(ev, "SHM")))
        v = on("NCCL_SHM_DISABLE")
        if v and "P2P" not in ev.intra:
            out.append((f"NCCL_SHM_DISABLE={v[0]} with no P2P: intra-node traffic goes over the network", v[1], v[2]))
    else:
        v = on("NCCL_IB_DISABLE")
        if v:
            out.append((f"NCCL_IB_DISABLE={v[0]}: InfiniBand / RoCE disabled, NCCL falls back to TCP sockets",
                        v[1], v[2]))
        v = env.get("NCCL_NET_GDR_LEVEL")
        if v and v[0].upper() in ("LOC", "0"):
            out.append((f"NCCL_NET_GDR_LEVEL={v[0]}: GPUDirect RDMA disabled, every transfer is staged through "
                        "host memory", v[1], v[2]))
        elif ev.gdr is False and link.link_class == "ib":
            out.append(("NET/IB connections without /GDRDMA: no GPUDirect RDMA (nvidia-peermem / DMA-BUF not "
                        "available), transfers are staged through host memory", *_fact(ev, "NET/")))
    for name in ("NCCL_MAX_NCHANNELS", "NCCL_MAX_CTAS", "NCCL_MIN_NCHANNELS", "NCCL_NCHANNELS_PER_NET_PEER"):
        v = env.get(name)
        if v and v[0].isdigit() and link.nominal_gbps and int(v[0]) * CHANNEL_GBPS < link.nominal_gbps and \
                name in ("NCCL_MAX_NCHANNELS", "NCCL_MAX_CTAS"):
            out.append((f"{name}={v[0]} caps the channels: at ~{CHANNEL_GBPS:g} GB/s each they cannot fill "
                        f"{link.nominal_gbps:g} GB/s", v[1], v[2], int(v[0]) * CHANNEL_GBPS))
    if ev.coll_channels is not None and link.nominal_gbps and intra and \
            ev.coll_channels * CHANNEL_GBPS < 0.8 * link.nominal_gbps:
        out.append((f"only {ev.coll_channels} coll channels: at ~{CHANNEL_GBPS:g} GB/s each about "
                    f"{ev.coll_channels * CHANNEL_GBPS:g} of {link.nominal_gbps:g} GB/s", *_fact(ev, "coll channels"),
                    ev.coll_channels * CHANNEL_GBPS))
    for name in ("NCCL_ALGO", "NCCL_PROTO"):
        v = env.get(name)
        if v:
            why = ""
            if name == "NCCL_PROTO":
                allowed = _protocols(v[0])
                if allowed == {"ll"}:
                    why = " (LL alone carries about half the link's bandwidth on large messages)"
                elif "simple" not in allowed:
                    why = " (without Simple, large messages lose some of the link's bandwidth)"
            out.append((f"{name}={v[0]} set by environment: NCCL's tuner does not choose the algorithm / protocol"
                        f"{why}", v[1], v[2]))
    return out


def _protocols(value: str) -> set[str]:
    """The protocols an NCCL_PROTO value allows: a list ('LL,LL128'), or '^' and the ones excluded ('^LL')."""
    every = {"ll", "ll128", "simple"}
    names = {x.strip().lower() for x in value.lstrip("^").split(",") if x.strip()}
    return every - names if value.startswith("^") else names & every


def _fact(ev: LinkEvidence, needle: str) -> tuple[Optional[str], Optional[int]]:
    for text, path, line in ev.facts:
        if needle in text:
            return path, line
    return None, None
