"""Network and topology rules: NCCL WARN lines, TP groups across nodes, sockets instead of IB, bad socket
interfaces, bus bandwidth below what the link class delivers."""
from __future__ import annotations

import re
from typing import Iterator, Optional

from rules.context import Context
from rules.finding import Evidence, Finding, Subject
from rules.registry import Threshold, rule
from rules.util import mb, num, pct, ranks_text

COMM_EFFECTS = ("COMM001", "COMM002", "NET004", "LOAD001", "LOAD002")
BAD_IFACE = re.compile(r"^(lo|docker\d*|virbr\d*|veth\w*|br-\w+|cni\d*|flannel[\w.]*|cali\w*|podman\d*|"
                       r"tailscale\d*|tun\d*|tap\d*|vxlan[\w.]*)$")
BUSBW = {
    "nvlink": Threshold("busbw_nvlink_min_gbps", 0.0, "GB/s",
                        "optional fixed floor for NVLink rows, on top of the link model (0 = off): a row below it "
                        "is reported whatever its expected busbw",
                        source="kept so configurations written for the fixed floors stay valid; the model "
                               "(busbw_min_frac) is the default judgement"),
    "ib": Threshold("busbw_ib_min_gbps", 0.0, "GB/s",
                    "optional fixed floor for inter-node InfiniBand rows, on top of the link model (0 = off)",
                    source="as busbw_nvlink_min_gbps"),
}
BUSBW_FRAC = Threshold("busbw_min_frac", 0.8, "fraction",
                       "report a (group, op) whose busbw is below this fraction of what its link class should reach at "
                       "its mean message size (NCCL's ring model on the class's nominal bandwidth)",
                       source="nccl-tests doc/PERFORMANCE.md defines busbw so that it is comparable with the "
                              "hardware's peak link bandwidth, which large messages should approach; the field's "
                              "rule of thumb (large messages reach ≥ 80 % of the link) sets the fraction, and the "
                              "ring model lowers the target for smaller messages")
BUSBW_COST = Threshold("busbw_cost_min", 0.02, "fraction",
                       "a slow link whose lost transfer time is below this share of the step is reported as info, "
                       "not a warning",
                       source="below the step-to-step spread of clean real CPU runs (2.5-5.9 % of the step, "
                              "step_spread_max): less time lost than that cannot be told from jitter")
BUSBW_MIN_BYTES = Threshold("busbw_min_bytes", 1e6, "bytes",
                            "only collectives at least this large (mean bytes per call) are judged: below it the "
                            "kernel's own launch and synchronisation dominate the measurement",
                            source="NCCL's tuning model: at 1 MB the ring latency (8.4 µs + 5.7-9.6 µs per hop) is "
                                   "already a large part of the time; smaller calls measure latency, not links")


def _hosts(ctx: Context) -> int:
    """Number of hosts the job spans (traces, cross-rank host map, NCCL logs)."""
    return max(ctx.n_hosts(), len(ctx.nccl.get("hosts") or []))


@rule("NCCL001", "NCCL printed WARN lines", "warning",
      confirm="Open the quoted log lines; NCCL prints the failing call chain (file.cc:line -> code) after a WARN.",
      fix="Read the first WARN of each rank: network (NCCL_SOCKET_IFNAME, NCCL_IB_HCA, firewall, NIC down), "
          "library (libibverbs / nv_peer_mem missing), or a peer that died (connection closed by remote peer).")
def nccl_warn(ctx: Context) -> Iterator[Finding]:
    """NCCL logged WARN lines: errors or degraded setups NCCL noticed itself.

    One finding per distinct source location (src_file:src_line) of the WARN, with the ranks that printed it.
    Severity error when the call chain ends in an NCCL error code (1-6: cuda, system, internal, invalid
    argument, invalid usage, remote error), warning otherwise. When a hang rule explains the same ranks, the
    WARNs are listed under the hang.
    """
    groups: dict[tuple, list[dict]] = {}
    for w in ctx.nccl.get("warns") or []:
        if str(w.get("level", "WARN")) not in ("WARN", ""):
            continue
        key = (w.get("src_file") or "", w.get("src_line") if w.get("src_file") else w.get("message", "")[:60])
        groups.setdefault(key, []).append(w)
    for (src, line), rows in groups.items():
        ranks = sorted({int(r["rank"]) for r in rows if r.get("rank") is not None and int(r["rank"]) >= 0})
        codes = {int(r.get("result_code", -1)) for r in rows}
        err = any(1 <= c <= 6 for c in codes)
        msg = str(rows[0].get("message", "")).strip()
        where = f" ({src}:{line})" if src else ""
        ev = [Evidence(f"NCCL WARN{where}: {str(r.get('message', '')).strip()[:300]}", r.get("file"), r.get("line"))
              for r in rows[:6]]
        if len(rows) > 6:
            ev.append(Evidence(f"… {len(rows) - 6} more lines like it"))
        yield Finding(title=f"NCCL WARN on {ranks_text(ranks) if ranks else 'an unknown rank'}: {msg[:100]}",
                      severity="error" if err else "warning", confidence=0.8 if err else 0.6, evidence=ev,
                      subject=Subject(ranks=ranks))


@rule("NET001", "Tensor-parallel group spans nodes", "warning", explains=COMM_EFFECTS,
      confirm="List the TP groups' ranks and their hosts (evidence); TP collectives of such groups show "
              "NET/IB or NET/Socket transports and a bus bandwidth far below NVLink's.",
      fix="Keep tensor parallelism inside a node: TP degree ≤ GPUs per node, and a rank order that makes TP "
          "groups consecutive ranks (Megatron's default order tp-cp-ep-dp-pp; in a DeviceMesh put 'tp' as the "
          "innermost (last) dimension) so each TP group lands on one host's NVLink.")
def tp_inter_node(ctx: Context) -> Iterator[Finding]:
    """A tensor-parallel process group whose ranks sit on more than one host.

    TP issues a blocking all-reduce (or all-gather/reduce-scatter) per layer in forward and backward; over
    the inter-node network (~25-50 GB/s per NIC) instead of NVLink (~200-450 GB/s) these dominate the step.
    Reads the cross-rank section's process groups (role 'tp', span 'inter_node').
    """
    bad = [g for g in ctx.groups() if str(g.get("role")) == "tp" and str(g.get("span")) == "inter_node"]
    if not bad:
        return
    ranks = sorted({int(r) for g in bad for r in g.get("ranks") or []})
    ev = [Evidence(f"TP group {g.get('name')}{' (' + str(g['desc']) + ')' if g.get('desc') else ''}: "
                   f"{ranks_text(g.get('ranks') or [])} on {_hosts_text(g.get('hosts') or [])}")
          for g in bad[:8]]
    names = {str(g.get("name")) for g in bad}
    tt = ctx.traced_time_us()
    cost = None
    rows = [r for r in (ctx.cross.get("collectives") or {}).get("by_group_op") or []
            if str(r.get("process_group")) in names]
    for r in rows:
        ev.append(Evidence(f"group {r.get('process_group')} {r.get('op')}: {r.get('count')} calls, mean busbw "
                           f"{num(r.get('mean_busbw_gbps')) or 0:.1f} GB/s over {r.get('link_class')}"))
    if tt and rows:
        per_group = {}
        for r in rows:
            per_group[str(r.get("process_group"))] = per_group.get(str(r.get("process_group")), 0.0) + \
                (num(r.get("count")) or 0) * (num(r.get("mean_transfer_us")) or 0)
        cost = min(1.0, max(per_group.values()) / tt)
    yield Finding(title=f"{len(bad)} tensor-parallel group(s) span nodes ({', '.join(sorted(names))})",
                  confidence=0.9, evidence=ev, cost=cost,
                  subject=Subject(ranks=ranks, process_group=str(bad[0].get("name"))),
                  involved=set(ranks), extra={"process_groups": sorted(names)})


def _iface_rows(ctx: Context) -> list[dict]:
    """Network rows of the nccl section that name an interface."""
    return [n for n in ctx.nccl.get("networks") or [] if n.get("interface")]


def _socket_rows(ctx: Context) -> list[dict]:
    """Rows showing NCCL moves data over TCP sockets: NET/Socket transports or a Socket network device."""
    out = [t for t in ctx.nccl.get("transports") or [] if "socket" in str(t.get("transport", "")).lower()]
    out += [n for n in ctx.nccl.get("networks") or []
            if str(n.get("network")).lower() == "socket" and str(n.get("role")) in ("net_device", "selected")]
    return out


@rule("NET002", "NCCL uses TCP sockets between nodes (InfiniBand / RoCE unused)", "warning",
      explains=COMM_EFFECTS,
      confirm="NCCL_DEBUG=INFO prints 'Using network Socket' / 'NET/Socket : Using [0]ethX' and connections "
              "'via NET/Socket'; with IB it prints 'NET/IB : Using [0]mlx5_0:1/IB'. `ibstat` shows the HCAs.",
      fix="Unset NCCL_IB_DISABLE (or set it to 0), point NCCL_IB_HCA at the HCAs (e.g. NCCL_IB_HCA=mlx5), "
          "make sure the IB/RoCE drivers and libibverbs are visible inside the container (--device "
          "/dev/infiniband, --ulimit memlock=-1); for RoCE set NCCL_IB_GID_INDEX. Without RDMA hardware, "
          "expect inter-node collectives to be slow.")
def socket_transport(ctx: Context) -> Iterator[Finding]:
    """Inter-node NCCL traffic goes over TCP sockets, or IB was disabled with NCCL_IB_DISABLE=1.

    Sockets deliver a few GB/s at best and cost CPU; InfiniBand/RoCE deliver 25-50 GB/s per NIC with
    GPUDirect RDMA. Evidence comes from the NCCL logs (env, network selection, connection transports).
    CPU-only gloo jobs always use TCP and are not judged.
    """
    if ctx.cpu_only():
        return
    disabled = [e for e in ctx.nccl.get("env") or [] if e.get("name") == "NCCL_IB_DISABLE"
                and str(e.get("value")).strip() not in ("0", "", "false", "False")]
    sock = _socket_rows(ctx)
    link_sock = [r for r in (ctx.cross.get("collectives") or {}).get("by_group_op") or []
                 if r.get("link_class") == "socket" and r.get("crossed_hosts")]
    if not (disabled or sock or link_sock):
        return
    if _hosts(ctx) < 2 and not any("socket" in str(t.get("transport", "")).lower()
                                   for t in ctx.nccl.get("transports") or []):
        return
    ib_seen = any(str(n.get("network")).upper().startswith("IB") and n.get("role") == "net_device"
                  for n in ctx.nccl.get("networks") or [])
    ev = [Evidence(f"{e['name']}={e['value']} on {e.get('host')}", e.get("file"), e.get("line"))
          for e in disabled[:3]]
    for r in sock[:4]:
        what = r.get("transport") or f"{r.get('network')} device {r.get('interface')}"
        ev.append(Evidence(f"rank {r.get('rank')}: {what}", r.get("file"), r.get("line")))
    for r in link_sock[:3]:
        ev.append(Evidence(f"group {r.get('process_group')} {r.get('op')}: mean busbw "
                           f"{num(r.get('mean_busbw_gbps')) or 0:.2f} GB/s over sockets"))
    ranks = sorted({int(r["rank"]) for r in disabled + sock if r.get("rank") is not None and int(r["rank"]) >= 0})
    if ib_seen:
        ev.append(Evidence("IB devices are listed in the NCCL log but not used for data"))
    yield Finding(title="NCCL moves inter-node data over TCP sockets"
                        + (" (NCCL_IB_DISABLE=1)" if disabled else ""),
                  confidence=0.9 if (disabled or ib_seen) else 0.6, evidence=ev,
                  cost=num(ctx.summary.get("exposed_comm_share")), subject=Subject(ranks=ranks),
                  involved=set(ranks) or set(ctx.report.get("job", {}).get("ranks") or []))


@rule("NET003", "NCCL socket interface is loopback, a container bridge or a virtual NIC", "warning",
      explains=("NET002",) + COMM_EFFECTS,
      confirm="The NCCL log lines 'NET/Socket : Using [0]docker0:…' / 'Bootstrap : Using lo:…' and the "
              "NCCL_SOCKET_IFNAME value (evidence).",
      fix="Set NCCL_SOCKET_IFNAME to the data-network interface (e.g. NCCL_SOCKET_IFNAME=ib0 or =eth0, or "
          "exclude bad ones with NCCL_SOCKET_IFNAME=^lo,docker0) and GLOO_SOCKET_IFNAME likewise; with IB also "
          "set NCCL_IB_HCA.")
def bad_interface(ctx: Context) -> Iterator[Finding]:
    """NCCL picked (or was told to use) lo, docker0, a bridge or another virtual interface.

    Data over a docker bridge or veth pair is slow and does not leave the host correctly; bootstrap over
    `lo` breaks multi-node jobs. Flagged when the interface carries NCCL data (NET/Socket device), when
    NCCL_SOCKET_IFNAME names it, or when it is the bootstrap/OOB interface of a multi-host job. A
    management NIC cannot be recognised by name; NET002/NET004 catch its slowness.
    """
    multi = _hosts(ctx) >= 2
    hits = []
    for n in _iface_rows(ctx):
        iface = str(n["interface"]).split(":")[0]
        if not BAD_IFACE.match(iface):
            continue
        data = str(n.get("network")).lower() == "socket" and n.get("role") in ("net_device", "selected")
        if data or (multi and n.get("role") in ("bootstrap", "oob")):
            hits.append((iface, n, "carries NCCL data" if data else f"is the {n.get('role')} interface"))
    for e in ctx.nccl.get("env") or []:
        if e.get("name") in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
            value = str(e.get("value")).strip()
            if value.startswith("^"):  # an exclusion list (^lo,docker0) is the cure, not the problem
                continue
            for v in value.lstrip("=").split(","):
                if v and BAD_IFACE.match(v.strip()):
                    hits.append((v.strip(), e, f"is named by {e['name']}"))
    if not hits:
        return
    ifaces = sorted({h[0] for h in hits})
    ranks = sorted({int(h[1]["rank"]) for h in hits if h[1].get("rank") is not None and int(h[1]["rank"]) >= 0})
    ev = [Evidence(f"{iface} {why} (rank {n.get('rank')}, host {n.get('host')})", n.get("file"), n.get("line"))
          for iface, n, why in hits[:6]]
    yield Finding(title=f"NCCL socket interface {', '.join(ifaces)} is not a data-network NIC",
                  confidence=0.85, evidence=ev, cost=num(ctx.summary.get("exposed_comm_share")),
                  subject=Subject(ranks=ranks),
                  involved=set(ranks) or set(ctx.report.get("job", {}).get("ranks") or []),
                  extra={"interfaces": ifaces})


_LINK_FIX = {
    "nvlink": "NVLink: check `nvidia-smi topo -m` (NV# between the GPUs) and `nvidia-smi nvlink -s` (links up, no "
              "errors), that NCCL_P2P_DISABLE / NCCL_P2P_LEVEL / NCCL_ALGO / NCCL_PROTO / NCCL_MAX_NCHANNELS are not "
              "set, and the fabric manager is running on NVSwitch systems (NVLS needs it).",
    "xgmi": "Infinity Fabric: check `rocm-smi --showtopo` (XGMI links between the GPUs), NCCL_P2P_DISABLE / "
            "HSA_FORCE_FINE_GRAIN_PCIE, and NCCL_ALGO / NCCL_PROTO / NCCL_MAX_NCHANNELS left unset.",
    "pcie": "PCIe-only GPUs: place the group's GPUs under one PCIe switch (`nvidia-smi topo -m`: PIX/PXB, not SYS), "
            "enable ACS-off / P2P in the BIOS, keep NCCL_P2P_DISABLE unset; or move tensor parallelism to NVLink "
            "machines.",
    "shm": "NCCL goes through host memory: allow P2P (unset NCCL_P2P_DISABLE / NCCL_P2P_LEVEL, enable P2P and disable "
           "ACS in the BIOS, give the container --ipc=host) so GPUs write to each other directly.",
    "ib": "InfiniBand / RoCE: `ibstat` (port rate and state), NIC counters, GPU↔NIC affinity (NCCL_IB_HCA per GPU), "
          "GPUDirect RDMA (nvidia-peermem loaded, NCCL_NET_GDR_LEVEL unset), NCCL_IB_DISABLE unset, and NCCL_ALGO / "
          "NCCL_PROTO / NCCL_MAX_NCHANNELS left to NCCL.",
    "efa": "EFA: aws-ofi-nccl plugin loaded (`NET/OFI` in the log), FI_EFA_USE_DEVICE_RDMA=1, all EFA interfaces "
           "attached (`fi_info -p efa`), and NCCL_PROTO / NCCL_ALGO left to NCCL.",
}


@rule("NET004", "Bus bandwidth below what the link class delivers", "warning",
      thresholds=(BUSBW_FRAC, BUSBW_MIN_BYTES, BUSBW_COST, BUSBW["nvlink"], BUSBW["ib"]),
      explains=("COMM001", "COMM002"),
      confirm="Run nccl-tests (all_reduce_perf -b 8M -e 1G -f 2 -g 1 under the same launcher) on the same "
              "hosts and compare its busbw column with the expected value in the evidence; check the link evidence "
              "(cross_rank.links: transports, channels, NCCL_* variables with their log lines).",
      fix="See the fix for the group's link class in the evidence; in general leave NCCL_P2P_DISABLE, "
          "NCCL_IB_DISABLE, NCCL_NET_GDR_LEVEL, NCCL_ALGO, NCCL_PROTO and NCCL_MAX_NCHANNELS unset unless a test "
          "shows they help.")
def low_busbw(ctx: Context) -> Iterator[Finding]:
    """Collectives of a process group reach a bus bandwidth well below what their link class delivers.

    The link class of each group comes from the evidence (cross_rank.links; analyzer/cross_rank/links.py): NCCL's
    connection lines (P2P/IPC, P2P/CUMEM → NVLink or PCIe by GPU model, SHM, NET/IB with or without GDRDMA,
    NET/Socket, NET/OFI = EFA), the GPU model in deviceProperties, and whether the group spans hosts. Its
    nominal busbw is the class's line rate (NVLink / Infinity Fabric per GPU, PCIe x16 by generation, half of
    that through host memory, one IB / EFA port between hosts). The expected busbw at the row's mean message
    size follows NCCL's ring model (latency 8.4 µs + 5.7-9.6 µs per hop, then the bytes at the nominal rate),
    so small messages are held to less; a row below busbw_min_frac of it is reported with the causes the NCCL
    logs show (P2P disabled, SHM instead of P2P, IB disabled, GPUDirect RDMA off, few channels, a forced
    algorithm or protocol; a channel cap below the measured busbw is not offered as a cause). Rows of one link
    class and op make one finding, whatever the number of groups. Socket links are NET002's business; classes
    without a nominal (unknown GPU or hosts) are not judged. Cost: the transfer time the expected bandwidth
    would have saved, as a fraction of step time (the worst group), at most the job's exposed communication
    share (time hidden under compute costs nothing); below busbw_cost_min the finding is info.
    """
    if ctx.cpu_only():
        return
    tt = ctx.traced_time_us()
    links = ctx.cross.get("links") or {}
    causes_by_class: dict[str, list[dict]] = {}
    for c in links.get("causes") or []:
        causes_by_class.setdefault(str(c.get("link_class")), []).append(c)
    classes = {str(c.get("link_class")): c for c in links.get("classes") or []}
    low: dict[tuple[str, str], list[tuple[dict, float, float, Optional[float], bool]]] = {}
    for r in (ctx.cross.get("collectives") or {}).get("by_group_op") or []:
        link = str(r.get("link_class"))
        bw, count, nbytes = num(r.get("mean_busbw_gbps")), num(r.get("count")), num(r.get("bytes"))
        if link == "socket" or bw is None or not count or not nbytes:
            continue
        if nbytes / count < ctx.t("busbw_min_bytes"):
            continue
        expected = num(r.get("expected_busbw_gbps"))
        floor = ctx.t(BUSBW[link].name) if link in BUSBW else 0.0
        low_model = expected is not None and bw < ctx.t("busbw_min_frac") * expected
        low_floor = floor > 0 and bw < floor
        if low_model or low_floor:
            low.setdefault((link, str(r.get("op"))), []).append((r, bw, max(expected or 0.0, floor), expected,
                                                                 low_floor))
    # one finding per (link class, op): a job with a thousand DP groups on the same slow link is one problem
    for (link, op), rows in sorted(low.items()):
        worst = min(x[1] for x in rows)
        # a cause that caps busbw (few channels) below what was measured cannot be why it is slow
        causes = [c for c in causes_by_class.get(link) or []
                  if num(c.get("cap_gbps")) is None or worst <= 1.2 * (num(c.get("cap_gbps")) or 0.0)]
        yield _busbw_finding(ctx, link, op, rows, classes.get(link, {}), causes, tt)


def _busbw_finding(ctx: Context, link: str, op: str, rows: list, cls: dict, causes: list[dict],
                   tt: Optional[float]) -> Finding:
    frac = ctx.t("busbw_min_frac")
    rows = sorted(rows, key=lambda x: x[1] / x[2] if x[2] else 1.0)  # worst efficiency first
    r, bw, target, expected, low_floor = rows[0]
    count, nbytes = num(r.get("count")) or 0.0, num(r.get("bytes")) or 0.0
    mean_bytes = nbytes / count if count else 0.0
    groups = [str(x[0].get("process_group")) for x in rows]
    costs = []
    ranks: set[int] = set()
    for x in rows:
        g = ctx.group(x[0].get("process_group")) or {}
        ranks |= {int(k) for k in g.get("ranks") or []}
        transfer = (num(x[0].get("count")) or 0.0) * (num(x[0].get("mean_transfer_us")) or 0.0)
        if tt and x[2]:
            costs.append(min(1.0, transfer * (1.0 - x[1] / x[2]) / tt))
    exposed = num(ctx.summary.get("exposed_comm_share"))
    if exposed is not None:  # time a faster link saves is at most the communication no compute hides
        costs = [min(c, exposed) for c in costs]
    nominal = num(r.get("nominal_busbw_gbps"))
    where = f"process group {groups[0]}" if len(groups) == 1 else f"{len(groups)} process groups"
    ev = [Evidence(f"group {x[0].get('process_group')}: {int(num(x[0].get('count')) or 0)} calls, mean "
                   f"{mb((num(x[0].get('bytes')) or 0) / max(1.0, num(x[0].get('count')) or 1))}, mean transfer "
                   f"{num(x[0].get('mean_transfer_us')) or 0:.0f} µs, busbw {x[1]:.1f} GB/s") for x in rows[:4]]
    if len(rows) > 4:
        ev.append(Evidence(f"… {len(rows) - 4} more group(s): {', '.join(groups[4:12])}"
                           f"{' …' if len(groups) > 12 else ''}"))
    # the figures the decision used come first (the per-group lines may be cut in a short listing)
    head = []
    if expected is not None:
        head.append(Evidence(f"measured busbw {bw:.1f} GB/s; expected busbw ~{expected:.0f} GB/s over {link} at "
                             f"{mb(mean_bytes)} (nominal {nominal:g} GB/s: "
                             f"{cls.get('nominal_source') or 'link class'}); busbw efficiency {bw / expected:.0%}, "
                             f"threshold busbw_min_frac {frac:.0%}"))
    if low_floor:
        head.append(Evidence(f"measured busbw {bw:.1f} GB/s, below the configured floor {BUSBW[link].name} = "
                             f"{ctx.t(BUSBW[link].name):g} GB/s"))
    ev = head + ev
    for e in (cls.get("evidence") or [])[:3]:
        ev.append(Evidence(f"link evidence: {e}"))
    for c in causes[:5]:
        ev.append(Evidence(f"cause in the NCCL logs: {c.get('text')}", c.get("file"), c.get("line")))
    g0 = ctx.group(r.get("process_group")) or {}
    if g0.get("hosts"):
        ev.append(Evidence(_hosts_text(g0["hosts"])))
    # a class no log showed (hosts without an NCCL log: InfiniBand assumed) is a guess: say so, do not warn
    assumed = any("assumed" in str(e) for e in cls.get("evidence") or [])
    if assumed:
        ev.append(Evidence(f"the link class is assumed ({'; '.join(str(e) for e in cls.get('evidence') or [])}): "
                           "NCCL logs (NCCL_DEBUG=INFO) would say which transport ran"))
    decided = (f"busbw efficiency {bw / expected:.0%} of the expected {expected:.0f} GB/s at {mb(mean_bytes)}, "
               f"threshold {frac:.0%}" if expected and not low_floor else
               f"below the floor {target:.0f} GB/s at {mb(mean_bytes)}")
    return Finding(title=f"{op} on {where} reaches {bw:.1f} GB/s busbw over {link} ({decided})"[:200],
                   severity="info" if assumed or (costs and max(costs) < ctx.t("busbw_cost_min")) else "warning",
                   confidence=0.5 if assumed else 0.8 if causes else 0.7, cost=max(costs) if costs else None, evidence=ev,
                   fix=_LINK_FIX.get(link, "") + (f" First: {causes[0].get('text')}." if causes else ""),
                   subject=Subject(ranks=sorted(ranks), process_group=groups[0] if len(groups) == 1 else None,
                                   collective={"op": op, "seq": None}),
                   involved=ranks, extra={"link_class": link, "process_groups": groups,
                                          "cause": causes[0].get("text") if causes else None})


def _hosts_text(hosts: list) -> str:
    """'hosts a, b' — past 8 hosts the count and the first and last ('64 hosts (node-00 … node-63)')."""
    hs = [str(h) for h in hosts]
    if len(hs) > 8:
        return f"{len(hs)} hosts ({hs[0]} … {hs[-1]})"
    return ("host " if len(hs) == 1 else "hosts ") + ", ".join(hs)
