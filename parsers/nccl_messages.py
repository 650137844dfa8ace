"""Regexes and classification for the text after `NCCL INFO|WARN` (one message, no envelope).

Every pattern is quoted from the shared reference nccl-log-formats.md §2 (NCCL 2.3 → 2.30 format strings).
`classify_message` is pure: it returns (family, match-or-None) and never touches parser state.
"""
from __future__ import annotations

import re

VERSION = re.compile(r"NCCL version (?P<ver>\d+\.\d+\.\d+)(?P<suffix>[^+\s]*)\+cuda(?P<cuda>[\w.]+)")
INIT = re.compile(
    r"(?:\[Rank (?P<jobrank>\d+)\] )?(?:(?P<fn>nccl\w{0,64}) )?"
    r"comm (?P<comm>0x[0-9a-f]+) rank (?P<rank>\d+) nranks (?P<nranks>\d+) cudaDev (?P<cudaDev>-?\d+)"
    r"(?: nvmlDev (?P<nvmlDev>-?\d+))?(?: busId (?P<busId>[0-9a-f]+))?"
    r"(?: parent (?P<parent>0x[0-9a-f]+|\(nil\)))?(?: (?:splitCount|childCount) (?P<splitCount>\d+))?"
    r"(?: color (?P<color>-?\d+) key (?P<key>-?\d+))?(?: commId (?P<commId>0x[0-9a-f]+))?"
    r" ?- Init (?P<phase>START|COMPLETE)"
)
INIT_OLD = re.compile(
    r"^comm (?P<comm>0x[0-9a-f]+) rank (?P<rank>\d+) nranks (?P<nranks>\d+)"
    r"(?: cudaDev (?P<cudaDev>-?\d+) nvmlDev (?P<nvmlDev>-?\d+))?(?P<done> - COMPLETE)?$"
)
COMM_SHAPE = re.compile(
    r"comm (?P<comm>0x[0-9a-f]+) rank (?P<rank>\d+) nRanks (?P<nranks>\d+) nNodes (?P<nNodes>\d+)"
    r" localRanks (?P<localRanks>\d+) localRank (?P<localRank>\d+)(?: MNNVL (?P<mnnvl>\d+))?"
)
CONN = re.compile(
    r"^(?P<kind>Channel|Ring|CollNet|Coll) (?P<ch>\d+)(?:/(?P<conn>\d+))? : (?P<src>\d+)(?:\[(?P<srcdev>[0-9a-f]+)\])?"
    r"(?: -> (?P<dst>\d+)(?:\[(?P<dstdev>[0-9a-f]+)\])?)?(?: \[(?P<dir>send|receive)\])? via (?P<via>.*\S)\s*$"
)
RING_LIST = re.compile(
    r"^(?:Channel (?P<ch>\d+)/(?P<nch>\d+)|Channel (?P<ch_old>\d+)|Ring (?P<ring_old>\d+)) :(?P<ranks>(?: +\d+)*)(?: *\.\.\.)? *$"
)
GRAPH_RING = re.compile(r"^(?:Ring|Tree) \d+ : -?\d+ -> -?\d+ -> [-\d/]+\s*$")
TREES = re.compile(r"^(?:NVLS )?Trees ?:?(?P<trees>(?: \[\d+\] [-\d/|>]+)*)\s*$")
BOOTSTRAP = re.compile(r"^Bootstrap ?: Using (?P<ifs>.+)$")
NET_SOCKET = re.compile(r"^NET/Socket ?: Using (?P<ifs>\[.+)$")
# Each device is `[n]` then a run without `[`, so the repetition is unambiguous (linear, not exponential).
NET_IB = re.compile(
    r"^NET/(?P<net>IB|IBext\w*|\w+) ?: Using (?P<devs>(?:\[\d+\][^ ;\[]+ ?)+)(?P<ro>\[RO\])?\s*; OOB (?P<oob>.+)$"
)
IB_DEV = re.compile(r"\[(?P<idx>\d+)\](?P<dev>[^:\s\[]+):(?P<port>\d+)/(?P<link>[A-Za-z]+)(?:/(?P<extra>\w+))?")
# One interface per whitespace-separated token (`iface_matches`): a search over the whole text is quadratic.
IFACE = re.compile(r"(?:\[(?P<idx>\d+)\])?(?P<if>[^\s:\[]+):(?P<addr>\S+?)(?:<(?P<port>\d+)>)?")
_MAX_IFACE_TOKEN = 1024
USING_NET = re.compile(r"^Using network (?P<net>\S+(?: \S+)*?)(?:\s{2,}.*)?\s*$")  # k9s pads with spaces
ENV = re.compile(r"^(?P<var>[A-Z][A-Z0-9_]*) set by environment to (?P<val>.*)$")
ENV_SET = re.compile(r"^(?P<var>NCCL_[A-Z0-9_]+) set to (?P<val>.*)$")
COLL = re.compile(
    r"(?<![A-Za-z])(?P<op>[A-Za-z]+): opCount (?P<opcount>[0-9a-f]+) sendbuff (?P<sendbuff>0x[0-9a-f]+|\(nil\))"
    r" recvbuff (?P<recvbuff>0x[0-9a-f]+|\(nil\)) count (?P<count>\d+) datatype (?P<datatype>\d+)"
    r" op (?P<redop>\d+) root (?P<root>-?\d+) comm (?P<comm>0x[0-9a-f]+|\(nil\))"
    r"(?: \[nranks=(?P<nranks>\d+)\])?(?: stream (?P<stream>0x[0-9a-f]+|\(nil\)))?"
    r"(?: task (?P<task>\d+) globalrank (?P<globalrank>\d+))?"
)
ERRCHAIN = re.compile(
    r"^(?P<file>[\w/.\-]+\.(?:cc|cu|cpp|h|c)):(?P<line>\d+) -> (?P<code>\d+)(?: \((?P<why>[^)]*)\))?(?: \[(?P<thread>[^\]]+)\])?\s*$"
)
NCCL_TESTS_RANK = re.compile(
    r"^#\s+Rank\s+(?P<rank>\d+) Group\s+(?P<group>\d+) Pid\s+(?P<pid>\d+) on\s+(?P<host>\S+) device\s+(?P<dev>\d+)"
)
NCCL_TESTS_FAIL = re.compile(r"Test NCCL failure (?P<file>[\w/.\-]+):(?P<line>\d+) '(?P<why>[^']*)'")
# `%d coll channels, [%d collnet channels, ][%d nvls channels, ]%d p2p channels, %d p2p channels per peer`
# (2.7-2.16 without collnet/nvls, 2.17-2.19 with nvls, 2.20+ with both; reference §2.5 "Connect summary").
CHANNELS = re.compile(
    r"^(?P<coll>\d+) coll channels,(?: (?P<collnet>\d+) collnet channels,)?(?: (?P<nvls>\d+) nvls channels,)?"
    r" (?P<p2p>\d+) p2p channels, (?P<p2ppeer>\d+) p2p channels per peer\s*$"
)
# Shapes that look like a known family whose full regex failed: the line was cut off.
CUT_HINT = re.compile(r"^(?:[A-Za-z]+: opCount |(?:\S+ )?comm 0x[0-9a-f]+ rank (?!.* - )|(?:Channel|Ring) \d+(?:/\d+)? : \d+)")

# Known INFO messages that carry nothing the tables need (recognised, counted, not extracted).
_KNOWN_PREFIXES = (
    "Trees", "NVLS Trees", "NVLS Head", "NVLS multicast", "NVLS ", "threadThresholds", "Connected ", "P2P Chunksize",
    "CC Off", "Using ", "Launch mode", "Init timings", "Bootstrap timings", "cudaDriverVersion", "bootstrapSplit:",
    "Setting affinity", "ncclTopoGetCpuAffinity", "DMA-BUF", "RAS ", "MNNVL", "NET/", "Plugin Path", "P2P plugin",
    "Assigned NET plugin", "Initialized NET plugin", "Successfully loaded", "TUNER/Plugin", "ENV/Plugin", "PROFILER/Plugin",
    "GIN", "CUDA Dev", "Min Comp Cap", "Failed to open libibverbs", "NCCL git version", "Pattern ", "===", "+ ", "Comm config",
    "Could not enable P2P", "Check P2P Type", "Channel ", "Ring ", "Tree ", "CollNet ", "Coll ", "Allocated ",
    "ncclCommInitRank", "ncclCommSplit", "ncclCommInitAll", "ncclCommDestroy", "ncclCommAbort", "comm 0x", "Rank ",
    "Loaded ", "Symmetric", "Enabled NCCL Func", "Unable to", "Ignoring", "Skipping", "Memory", "Device ", "Topology",
)
_TUNING = re.compile(r"(?<!\d)\d+ Bytes -> Algo ")


def classify_message(msg: str, level: str) -> tuple[str, re.Match | None]:
    """Name the family of one NCCL message; cheap substring tests guard every regex."""
    if level == "WARN":
        return "warn", None
    if level in ("TRACE", "CALL"):
        return level.lower(), None
    if ": opCount " in msg:
        m = COLL.search(msg)
        return ("coll", m) if m else ("cut", None)
    if "comm 0x" in msg:
        if " nRanks " in msg:
            m = COMM_SHAPE.search(msg)
            if m:
                return "comm_shape", m
        if "Init " in msg:
            m = INIT.search(msg)
            if m:
                return "init", m
        m = INIT_OLD.match(msg)
        if m:
            return "init_old", m
    if " via " in msg:
        m = CONN.match(msg)
        if m:
            return "connection", m
    if msg.startswith("NCCL version"):
        m = VERSION.match(msg)
        if m:
            return "version", m
    if " set by environment to " in msg:
        m = ENV.match(msg)
        if m:
            return "env", m
    if " set to " in msg:
        m = ENV_SET.match(msg)
        if m:
            return "env", m
    if msg.startswith("Using network"):
        m = USING_NET.match(msg)
        if m:
            return "using_network", m
    if msg.startswith("Bootstrap"):
        m = BOOTSTRAP.match(msg)
        if m:
            return "bootstrap", m
    if msg.startswith("NET/"):
        m = NET_SOCKET.match(msg)
        if m:
            return "net_socket", m
        m = NET_IB.match(msg) if "; OOB " in msg else None
        if m:
            return "net_ib", m
    if " -> " in msg:
        m = ERRCHAIN.match(msg)
        if m:
            return "errchain", m
    if msg.startswith(("Ring ", "Channel ", "Tree ")):
        if RING_LIST.match(msg):
            return "ring_list", None
        if GRAPH_RING.match(msg):
            return "graph", None
    if msg.startswith(("Trees", "NVLS Trees")) and TREES.match(msg):
        return "trees", None
    if _TUNING.search(msg):
        return "tuning", None
    if " coll channels," in msg:
        m = CHANNELS.match(msg)
        if m:
            return "channels", m
    if CUT_HINT.match(msg):
        return "cut", None
    if msg.startswith(_KNOWN_PREFIXES) or " coll channels" in msg:
        return "known", None
    return "other", None


def iface_matches(text: str):
    """`IFACE` matches in `text`, one per whitespace-separated token (at its start or at a `[`), in order."""
    for tok in text.split():
        if len(tok) > _MAX_IFACE_TOKEN:
            continue
        m = IFACE.fullmatch(tok)
        pos = 0
        while m is None:
            pos = tok.find("[", pos + 1)
            if pos < 0:
                break
            m = IFACE.fullmatch(tok, pos)
        if m is not None:
            yield m


def normalise_transport(via: str) -> tuple[str, str]:
    """Split a connection's `via …` text into (normalised transport, rest), e.g. NET/IB/0/GDRDMA → (NET/IB, /0/GDRDMA)."""
    if via.startswith("direct shared memory"):
        return "SHM", via[len("direct shared memory"):].strip()
    head, _, rest = via.partition("/")
    if head == "NET" or head == "COLLNET":
        name, sep, tail = rest.partition("/")
        paren = name.find("(")  # NET/IB(1)/… never seen, but keep names clean
        if paren > 0:
            name, tail = name[:paren], name[paren:] + sep + tail
            sep = ""
        key = name.lower()
        if key.startswith("ibext"):
            name = "IBext"
        elif "libfabric" in key or key in ("ofi", "aws-ofi"):
            name = "OFI"
        elif key == "ib":
            name = "IB"
        elif key == "socket":
            name = "Socket"
        return f"{head}/{name}", (sep + tail) if tail or sep else ""
    if head == "P2P":
        kind = rest.split("/", 1)[0]
        word = kind.split(" ", 1)[0]
        after = rest[len(word):]
        label = {"ipc": "IPC", "cumem": "CUMEM", "direct": "direct", "indirect": "indirect"}.get(word.lower(), word)
        return f"P2P/{label}", after
    if head == "SHM":
        return "SHM", ("/" + rest) if rest else ""
    return head, ("/" + rest) if rest else ""
