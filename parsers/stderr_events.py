"""One stderr line's content → the error/diagnostic rows it holds (gloo, c10d, NCCL, CUDA, OOM, signals, torchrun).

Pure functions on one line's text (launcher prefix already peeled). Each family is tried only behind a cheap
substring test, and each regex is literal-led or anchored with bounded repetitions and runs on a bounded window,
so a line costs O(its length). Shapes and their sources: docs/stderr.md.
"""
from __future__ import annotations

import re

import numpy as np

from parsers.watchdog_log import NCCL_ERR, NCCL_ERR_OLD, parse_pytorch_line
from parsers.numbers import bounded_int

#: Every literal a recognised line contains at least one of (bytes, tested on the raw line before decoding), each
#: with one of its own three-byte pieces, chosen rare in ordinary training logs, for the vectorised pre-filter.
GUARD_TRIGRAMS = {
    b"Traceback": b"ceb", b"rror": b"rro", b"RROR": b"RRO", b"xception": b"xce", b"imed out": b"d o",
    b"imeout": b"meo", b"ignal": b"gna", b"SIG": b"SIG", b"Kill": b"Kil", b"Xid": b"Xid", b"of memory": b"f m",
    b"Of Memory": b"f M", b"ailure": b"ilu", b"bort": b"bor", b"Assertion": b"Ass", b"Fatal": b"Fat",
    b"onnect": b"onn", b"refused": b"efu", b"ismatch": b"ism", b"xitcode": b"xit", b"arrier": b"rri",
    b"ecorder": b"rde", b"trace to": b"rac", b"Sending process": b"Sen", b"ddress already": b"ddr",
    b"ADDRINUSE": b"DDR", b"clients joined": b"joi", b"oom_kill": b"m_k", b"oom-kill": b"m-k", b"OOM": b"OOM",
    b"ECC": b"ECC", b"NVRM": b"NVR", b"expected size": b"xpe", b"invalid tensor": b"nva", b"egmentation": b"egm",
    b"_STATUS_": b"US_", b"terminate called": b"rmi", b"got stuck": b"tuc", b"Root Cause": b"Cau",
    b"torch/distributed/elastic": b"d/e", b"torch.distributed.elastic": b"d.e", b"Duplicate GPU": b"upl",
    b"memory (MB)": b"(MB", b"GiB(": b"iB(", b"memory summary": b"emo", b"Allocated memory": b"emo",
    b"reserved memory": b"emo", b"Reserved memory": b"emo", b"Non-releasable memory": b"emo",
    b"cudaMalloc retries": b"Mal",
    b"by remote peer": b"emo", b"ncclIn": b"lIn", b"failed : ": b"d :", b"Got completion from peer": b"mpl", b"NCCL operations have failed": b"ns ",
}
GUARD_LITERALS = tuple(GUARD_TRIGRAMS)
GUARD = re.compile(b"|".join(re.escape(g) for g in GUARD_LITERALS))
_TRI_LUT = np.zeros(1 << 21, dtype=bool)  # 7-bit folded trigram → is it one of GUARD_TRIGRAMS
for _t in GUARD_TRIGRAMS.values():
    _TRI_LUT[(_t[0] << 14) | (_t[1] << 7) | _t[2]] = True


def candidate_mask(data: bytes, n_lines: int) -> list[bool] | None:
    """Per line of `data` (lines split on b"\\n"), whether it may hold a guard literal; None when none can.

    Vectorised: every position's three bytes (folded to 7 bits) are looked up in a table of the literals' pieces, so
    the exact GUARD regex runs only on the few lines that pass. A superset: it never drops a line GUARD would keep.
    """
    a = np.frombuffer(data, dtype=np.uint8)
    if a.size < 3 or n_lines == 0:
        return [True] * n_lines if n_lines else None
    b = a & 0x7F
    codes = b[:-2].astype(np.uint32)
    codes <<= 7
    codes |= b[1:-1]
    codes <<= 7
    codes |= b[2:]
    pos = np.flatnonzero(_TRI_LUT[codes])
    if pos.size == 0:
        return None
    idx = np.searchsorted(np.flatnonzero(a == 10), pos)
    mask = np.zeros(n_lines, dtype=bool)
    mask[idx[idx < n_lines]] = True
    return mask.tolist()


MAX_DETAIL = 400  # characters of an NCCL error class's explanation kept
WINDOW = 2048  # characters around a marker that a family's regex may look at

_SIZE = r"(\d{1,15}(?:\.\d{1,6})?) ?(bytes|[KMGTPE]i?B)"
_UNIT = {"bytes": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40, "PiB": 1 << 50,
         "EiB": 1 << 60, "KB": 10 ** 3, "MB": 10 ** 6, "GB": 10 ** 9, "TB": 10 ** 12, "PB": 10 ** 15, "EB": 10 ** 18}
_I64_MAX = (1 << 63) - 1

# gloo
_GLOO_WHERE = re.compile(r"\[(?:enforce fail at )?([^\]\s]{1,1024}:\d{1,9})\]")
_GLOO_SIZES = re.compile(r"(\d{1,20}) vs (\d{1,20})\. Received data size")
_GLOO_INVALID = re.compile(r"(?:ProcessGroupGloo::(\w{1,64}): )?invalid tensor size at index (\d{1,9})"
                           r"(?: \(expected \(([^()]{0,256})\), got \(([^()]{0,256})\)\))?")
_ADDR = r"\[([0-9A-Za-z.:_%-]{1,256})\]:(\d{1,5})"
_PEER_CLOSED = re.compile(r"Connection closed by peer " + _ADDR)
_PEER_ERROR = re.compile(r"(?:Read|Write|writev|Connect) (?:error|timeout) " + _ADDR)
_TIMED_OUT = re.compile(r"Timed out waiting (\d{1,15})ms for (recv|send|\w{1,32}) operation")
_FROM_RANK = re.compile(r"\b(?:from|to|peer) rank (\d{1,7})")
_TAG = re.compile(r"\btag:? (-?\d{1,19})")
_MB_FAIL = re.compile(r"Rank (\d{1,7}) failed to pass monitoredBarrier in (\d{1,15}) ms")
_MB_FAIL_ALL = re.compile(r"Ranks ((?:\d{1,7}, ){0,4096}\d{1,7}) failed to pass monitoredBarrier in (\d{1,15}) ms")
_REPORTER = re.compile(r"\[Rank (\d{1,7})\]:? ")
_MB_ERR = re.compile(r"while waiting for send/recv from rank (\d{1,7})")
_FINGERPRINT = re.compile(
    r"Rank (\d{1,7}) is running collective: CollectiveFingerPrint\(SequenceNumber=(\d{1,19}), OpType=(\w{1,64})")
_BUT_RANK = re.compile(r", but Rank (\d{1,7}) is running collective")
_DIFFER = re.compile(r"differ in the following aspects: {0,8}(.{0,256})")
# NCCL (via ProcessGroupNCCL); reasons normalised to ncclGetErrorString's text without the "(run with …)" hint
_NCCL_REASONS = (
    ("unhandled system error", "unhandled system error"), ("system error", "unhandled system error"),
    ("remote process exited", "remote process exited or there was a network error"),
    ("remote error", "remote process exited or there was a network error"),
    ("unhandled cuda error", "unhandled cuda error"), ("cuda error", "unhandled cuda error"),
    ("internal error", "internal error"), ("invalid argument", "invalid argument"), ("invalid usage", "invalid usage"),
    ("in progress", "NCCL operation in progress"), ("timeout", "timeout"),
)
_NCCL_DETAIL = re.compile(r"\b(nccl(?:SystemError|RemoteError|InternalError|InvalidArgument|InvalidUsage|"
                          r"UnhandledCudaError|InProgress|Timeout))\b")
_NCCL_DETAIL_REASON = {"ncclSystemError": "unhandled system error", "ncclInternalError": "internal error",
                       "ncclRemoteError": "remote process exited or there was a network error",
                       "ncclInvalidArgument": "invalid argument", "ncclInvalidUsage": "invalid usage",
                       "ncclUnhandledCudaError": "unhandled cuda error", "ncclInProgress": "NCCL operation in progress",
                       "ncclTimeout": "timeout"}
#: the socket / network texts NCCL leaves as the "Last error:" (misc/socket.cc, transport/net_ib.cc, net plugins):
#: the address is the far side of the failing connection, as `host<port>`
_NCCL_ADDR = r"([0-9A-Za-z.:_%\[\]-]{1,256})<(\d{1,5})>"
_NCCL_SOCKET = (
    (re.compile(r"Call to (recv|send|connect|accept)\w{0,16} (?:from|to) " + _NCCL_ADDR + r" failed ?: ?([^\n]{1,200})"),
     None),
    (re.compile(r"Connection closed by remote peer " + _NCCL_ADDR), "connection closed by remote peer"),
    (re.compile(r"Got completion from peer " + _NCCL_ADDR + r" with (?:status=\w{1,64}\(\d{1,5}\)|error) ?(\d{0,5})"),
     "IB completion error"),
    (re.compile(r"Connect to " + _NCCL_ADDR + r" failed ?: ?([^\n]{1,200})"), None),
)
_NCCL_PROXY_RANK = re.compile(r"(?:from|to) rank (\d{1,7})")
_DUP_GPU = re.compile(r"Duplicate GPU detected : rank (\d{1,7}) and rank (\d{1,7}) both on CUDA device (\w{1,32})")
_NCCL_CUDA_FAIL = re.compile(r"Cuda failure (\d{1,5}) '([^'\n]{1,200})'")
_OFI_ERR = re.compile(r"NET/OFI [^\n]{0,200}?(?:completed with error|error)[^\n]{0,200}")
# CUDA
_CUDA_ERR = re.compile(r"(?:CUDA error|CUDA driver error|Triton Error \[CUDA\])(?:: | )([^.\n]{1,256})")
_KERNEL_ASSERT = re.compile(r"(\S{1,1024}?\.(?:cu|cuh|h|cpp)):(\d{1,9}): ")  # at the start of the line
_CUBLAS = re.compile(r"\b((?:CUBLAS|CUDNN|CUSOLVER|CUFFT|CURAND|CUSPARSE)_STATUS_[A-Z_]{1,64})")
_OOM_NEW_ALLOC = re.compile(r"Tried to allocate " + _SIZE)
_OOM_NEW_CAP = re.compile(r"GPU (\d{1,4}) has a total capacity of " + _SIZE + r" of which " + _SIZE + r" is free")
_OOM_NEW_SPLIT = re.compile(r"Of the allocated memory " + _SIZE + r" is allocated by PyTorch, and " + _SIZE
                            + r" is reserved by PyTorch but unallocated")
_OOM_OLD = re.compile(r"\(GPU (\d{1,4}); " + _SIZE + r" total capacity; " + _SIZE + r" already allocated; " + _SIZE
                      + r" free; (?:" + _SIZE + r" allowed; )?" + _SIZE + r" reserved in total by PyTorch\)")
# Megatron-LM's report_memory (megatron/training/utils.py): "[Rank N] (after K iterations) memory (MB) | allocated: A |
# max allocated: B | reserved: C | max reserved: D", MB = 2^20 bytes, printed by the first data-parallel rank
_NUM = r"(\d{1,12}(?:\.\d{1,16})?)"
_MEGATRON_MEM = re.compile(r"memory \(MB\) \| allocated: " + _NUM + r" \| max allocated: " + _NUM + r" \| reserved: "
                           + _NUM + r" \| max reserved: " + _NUM)
_MEGATRON_ITER = re.compile(r"\(after (\d{1,12}) iterations\)")
# torchtitan's step line (torchtitan/components/metrics.py): "step: S  loss: L  [grad_norm: G  ]memory: X GiB(P%)
#  tps: ...", X = torch.cuda.max_memory_reserved() since the last log line, P = X / the device's memory
_TITAN_MEM = re.compile(r"step:\s{0,8}(\d{1,12})\b.{0,400}?memory:\s{0,8}" + _NUM + r"\s?GiB\s?\(" + _NUM + r"%\)")
# torch.cuda.memory_summary()'s table (torch/cuda/memory.py), one line at a time: its header names the device, a
# metric row gives the current and peak sizes (_format_size: B, KiB, MiB, ...; older versions KB, MB, GB)
_MSUM_HEAD = re.compile(r"PyTorch CUDA memory summary, device ID (\d{1,4})")
_MSUM_COUNTS = re.compile(r"CUDA OOMs: (\d{1,9})\s{0,20}\|\s{0,20}cudaMalloc retries: (\d{1,12})")
_SIZE_CELL = r"\s{0,16}(\d{1,15}(?:\.\d{1,3})?)\s?([KMGTP]i?B|B)\s{0,8}\|"
_MSUM_ROW = re.compile(r"\|\s{0,4}(Allocated memory|GPU reserved memory|Reserved memory|Non-releasable memory)"
                       r"\s{0,30}\|" + _SIZE_CELL + _SIZE_CELL)
_MSUM_UNIT = {"B": 1, "KB": 1 << 10, "KiB": 1 << 10, "MB": 1 << 20, "MiB": 1 << 20, "GB": 1 << 30, "GiB": 1 << 30,
         "TB": 1 << 40, "TiB": 1 << 40, "PB": 1 << 50, "PiB": 1 << 50}
_MSUM_KEY = {"Allocated memory": "allocated", "GPU reserved memory": "reserved", "Reserved memory": "reserved",
             "Non-releasable memory": "non_releasable"}
_ANSI = re.compile(r"\x1b\[[0-9;]{0,16}m")
# c10/core/impl/alloc_cpu.cpp: the host allocator's failure ("Buy new RAM!" on Windows, in GB)
_OOM_CPU = re.compile(r"DefaultCPUAllocator: (?:can't allocate memory|not enough memory): you tried to allocate "
                      r"(\d{1,20})(GB)?")
_XID = re.compile(r"\b(S?Xid) \((?:PCI:)?([0-9A-Fa-f:.]{1,32})\): (\d{1,6})(?:, pid=('?[^,\s]{0,64}'?))?"
                  r"(?:, name=('?[^,]{0,128}'?))?,? ?([^\n]{0,512})")
_FALLEN = re.compile(r"GPU (?:at PCI:)?([0-9A-Fa-f:.]{1,32})[^\n]{0,128}?fallen off the bus")
_ECC_XIDS = {48, 63, 64, 92, 94, 95}
# host OOM killer, signals, torchrun
_KILLED_PROC = re.compile(r"(?:Out of memory|Memory cgroup out of memory): Kill(?:ed)? process (\d{1,10})"
                          r"(?: \(([^)\n]{0,128})\))?")
_OOM_EVENTS = re.compile(r"Detected (\d{1,9}) oom[-_]kill event")
_SHELL_KILLED = re.compile(r"^(?:.{0,256}: )?(?:line \d{1,9}: )?(?: {0,8}(\d{1,10}) )?Killed(?: {1,40}.{0,512})?$")
_SRUN_OOM = re.compile(r"srun: error: ([^\s:]{1,256}): task (\d{1,7}): Out Of Memory")
_LOADER_KILLED = re.compile(r"DataLoader worker \(pid (\d{1,10})\) is killed by signal: ([A-Za-z ]{1,40})")
_SIG_RECEIVED = re.compile(r"Signal (\d{1,3}) \((SIG\w{1,12})\) received by PID (\d{1,10})")
_GOT_SIGNAL = re.compile(r"Process (\d{1,10}) got signal: (\d{1,3})")
_DEATH_SIGNAL = re.compile(r"Received (\d{1,3}) death signal")
_STAR_SIG = re.compile(r"\*\*\* (SIG[A-Z]{2,12}) received at time=")
_FATAL_PY = re.compile(r"Fatal Python error: ([^\n]{0,128})")
_TERMINATE = re.compile(r"terminate called (?:after throwing an instance of '([^']{0,256})'|without an active exception"
                        r"|recursively)")
_CHILD_FAILED = re.compile(r"failed \(exitcode: (-?\d{1,9})\) local_rank: (\d{1,7}) \(pid: (\d{1,10})\)")
_SENDING = re.compile(r"Sending process (\d{1,10}) closing signal (SIG[A-Z]{2,12})")
# rendezvous / store
_ERRNO = re.compile(r"errno: (\d{1,5}) - ([^)\n]{1,128})\)")
_LISTEN = re.compile(r"port: (\d{1,5})[^\n]{0,256}?code: (-?\d{1,5}), name: (E[A-Z]{1,20})")
_BIND = re.compile(r"failed to bind to " + r"(\S{1,256}?)(?: \(errno|\.|$)")
_CONNECT_TO = re.compile(r"connect (?:to|/validate to host) \(?\[?([^\s()\[\],]{1,256}?)\]?[,:]? ?(\d{1,5})?[).\s]")
_CLIENT_TIMEOUT = re.compile(r"timed out after (\d{1,15})ms while trying to connect to \(([^,\s]{1,256}), (\d{1,5})\)")
_STORE_WAIT = re.compile(r"wait timeout after (\d{1,15})ms(?:, keys: ([^\n]{0,512}))?")
_STORE_CLIENTS = re.compile(r"Timed out after (\d{1,9}) seconds waiting for clients\. (\d{1,9})/(\d{1,9}) "
                            r"clients joined")
_STORE_BARRIER = re.compile(r"store based barrier on rank:? (\d{1,7}), for key: (\S{1,256})")
_SOCKET_WAIT = re.compile(r"remote=\[?([^\s\]()]{1,256})\]?:?(\d{1,5})?\)? timed out after (\d{1,15})ms")
# Flight Recorder
_FR_TO = re.compile(r"dumping (?:nccl|backend|\w{1,32}) trace to (\S{1,1024})")
_WATCHDOG_STUCK = re.compile(r"watchdog got stuck for (\d{1,9}) seconds")
_EXC_HEAD = re.compile(r"((?:[A-Za-z_]\w{0,100}\.){0,12}[A-Za-z_]\w{0,100}"
                       r"(?:Error|Exception|Exit|Interrupt|Failure)): ")


def to_bytes(num: str, unit: str) -> int:
    """A size as PyTorch's format_size writes it (`20.00 MiB`, `512 bytes`) in bytes; -1 when it does not fit."""
    try:
        v = round(float(num) * _UNIT[unit])
    except (KeyError, ValueError, OverflowError):
        return -1
    return v if 0 <= v <= _I64_MAX else -1


def _int(text: str | None) -> int:
    """An int of a matched field (bounded by its regex), -1 when absent."""
    return bounded_int(text)


def _window(body: str, marker: str) -> str:
    """The bounded text around the first `marker` (the marker is known to be in `body`)."""
    i = body.find(marker)
    return body[max(0, i - WINDOW // 2): i + WINDOW]


def exc_head(body: str) -> str:
    """The exception type a line starts with (`RuntimeError: …` → `RuntimeError`), else ''."""
    if ": " not in body[:1400]:
        return ""
    m = _EXC_HEAD.match(body, 0, 1400)
    return m.group(1) if m else ""


def classify(body: str) -> list[dict]:
    """Rows (kind + the fields this line gives) for one line's content; [] when it holds nothing we know."""
    rows: list[dict] = []
    _gloo(body, rows)
    _c10d(body, rows)
    if "NCCL" in body or "nccl" in body or "atchdog" in body:
        _nccl(body, rows)
    if "CUDA" in body or "ssert" in body or "CUBLAS" in body or "CUDNN" in body or "out of memory" in body \
            or "OutOfMemoryError" in body or "CPUAllocator" in body:
        _cuda(body, rows)
    if "Xid" in body or "NVRM" in body or "ECC" in body:
        _gpu_driver(body, rows)
    if "peer" in body or "Call to" in body or "Connect to" in body or "Duplicate GPU" in body \
            or "Cuda failure" in body or "NET/OFI" in body:
        _nccl_last_error(body, rows)
    _host(body, rows)
    if "memory (MB)" in body or "GiB(" in body:
        _memory_report(body, rows)
    elif "memory" in body or "cudaMalloc retries" in body:
        _memory_summary(body, rows)
    return rows


def _gloo(body: str, rows: list[dict]) -> None:
    if "Received data size" in body and "expected size" in body:
        w = _window(body, "Received data size")
        m, where = _GLOO_SIZES.search(w), _GLOO_WHERE.search(w)
        rows.append(dict(kind="gloo_size_mismatch", bytes_a=_int(m and m.group(1)), bytes_b=_int(m and m.group(2)),
                         where=where.group(1) if where else ""))
    if "invalid tensor size at index" in body:
        m = _GLOO_INVALID.search(_window(body, "invalid tensor size"))
        reason = ""
        if m and m.group(3) is not None:
            reason = f"index {m.group(2)}: expected ({m.group(3)}), got ({m.group(4)})"
        rows.append(dict(kind="gloo_invalid_tensor_size", op=(m.group(1) or "") if m else "", reason=reason))
    if "onnection closed by peer" in body:
        w = _window(body, "onnection closed by peer")
        m, where = _PEER_CLOSED.search(w), _GLOO_WHERE.search(w)
        rows.append(dict(kind="connection_closed", peer=f"{m.group(1)}:{m.group(2)}" if m else "",
                         where=where.group(1) if where else ""))
    if "onnection reset by peer" in body:
        w = _window(body, "onnection reset by peer")
        m, where = _PEER_ERROR.search(w), _GLOO_WHERE.search(w)
        rows.append(dict(kind="connection_reset", peer=f"{m.group(1)}:{m.group(2)}" if m else "",
                         where=where.group(1) if where else ""))
    if "Timed out waiting" in body:
        w = _window(body, "Timed out waiting")
        m = _TIMED_OUT.search(w)
        if m:
            op = m.group(2)
            kind = {"recv": "recv_timeout", "send": "send_timeout"}.get(op, "gloo_timeout")
            where, peer, tag = _GLOO_WHERE.search(w), _FROM_RANK.search(w), _TAG.search(w)
            rows.append(dict(kind=kind, timeout_ms=int(m.group(1)), op=op, where=where.group(1) if where else "",
                             peer=peer.group(1) if peer else "", peer_rank=_int(peer and peer.group(1)),
                             tag=_int(tag and tag.group(1))))
    if ("Read timeout" in body or "Write timeout" in body) and "[" in body:
        w = _window(body, "timeout")
        m, where = _PEER_ERROR.search(w), _GLOO_WHERE.search(w)
        if m:
            rows.append(dict(kind="gloo_timeout", peer=f"{m.group(1)}:{m.group(2)}",
                             where=where.group(1) if where else "", reason="socket timeout"))
    if "Application timeout caused pair closure" in body:
        rows.append(dict(kind="gloo_timeout", reason="application timeout caused pair closure"))
    if "monitoredBarrier" in body:
        w = _window(body, "monitoredBarrier")
        m, many = _MB_FAIL.search(w), _MB_FAIL_ALL.search(w)
        rep = _REPORTER.search(w)
        reporter = dict(code=int(rep.group(1))) if rep else {}  # `[Rank 0]:` the rank that printed it
        if many:
            for r in many.group(1).split(", "):
                rows.append(dict(kind="monitored_barrier", peer=r, peer_rank=int(r), timeout_ms=int(many.group(2)),
                                 reason="failed to pass", **reporter))
        elif m:
            rows.append(dict(kind="monitored_barrier", peer=m.group(1), peer_rank=int(m.group(1)),
                             timeout_ms=int(m.group(2)), reason="failed to pass", **reporter))
        else:
            e = _MB_ERR.search(w)
            if e:
                rows.append(dict(kind="monitored_barrier", peer=e.group(1), peer_rank=int(e.group(1)),
                                 reason="received errors from the peer"))
    if "Detected mismatch between collectives" in body:
        w = body[body.find("Detected mismatch"):][:4 * WINDOW]
        m, other, d = _FINGERPRINT.search(w), _BUT_RANK.search(w), _DIFFER.search(body[-WINDOW:])
        rows.append(dict(kind="collective_mismatch", seq=_int(m and m.group(2)), op=m.group(3) if m else "",
                         peer=other.group(1) if other else "", peer_rank=_int(other and other.group(1)),
                         reason=d.group(1).strip() if d else ""))


def _c10d(body: str, rows: list[dict]) -> None:
    if "ADDRINUSE" in body or "ddress already in use" in body:
        w = _window(body, "ADDRINUSE" if "ADDRINUSE" in body else "ddress already in use")
        m, b = _LISTEN.search(w), _BIND.search(w)
        rows.append(dict(kind="rendezvous_eaddrinuse", peer=(m.group(1) if m else b.group(1) if b else ""),
                         code=98, reason="address already in use"))
    refused = "onnection refused" in body
    if refused or "failed to connect" in body or "while trying to connect to" in body:
        w = _window(body, "onnection refused" if refused else "connect")
        t, e, c = _CLIENT_TIMEOUT.search(w), _ERRNO.search(w), _CONNECT_TO.search(w)
        peer = f"{t.group(2)}:{t.group(3)}" if t else (f"{c.group(1)}:{c.group(2)}" if c and c.group(2)
                                                       else c.group(1) if c else "")
        store_like = refused or "c10d" in body or "TCPStore" in body or "socket" in body or t is not None
        if store_like and ("gloo" not in body or refused):
            reason = ("connection refused" if refused or (e and e.group(1) == "111") else
                      "connect timed out" if (t or (e and e.group(1) == "110")) else
                      (e.group(2).strip().lower() if e else "connect failed"))
            rows.append(dict(kind="rendezvous_refused", peer=peer, timeout_ms=_int(t and t.group(1)),
                             code=_int(e and e.group(1)), reason=reason))
    if "wait timeout after" in body:
        m = _STORE_WAIT.search(_window(body, "wait timeout after"))
        if m:
            rows.append(dict(kind="store_timeout", timeout_ms=int(m.group(1)), reason=f"keys: {m.group(2) or ''}"
                             .strip()))
    if "clients joined" in body:
        m = _STORE_CLIENTS.search(_window(body, "clients joined"))
        if m:
            rows.append(dict(kind="store_timeout", timeout_ms=int(m.group(1)) * 1000,
                             reason=f"{m.group(2)}/{m.group(3)} clients joined"))
    if "store based barrier" in body:
        m = _STORE_BARRIER.search(_window(body, "store based barrier"))
        rows.append(dict(kind="store_timeout", reason=f"store based barrier, key {m.group(2)}" if m else
                         "store based barrier", peer_rank=_int(m and m.group(1))))
    if "Socket Timeout" in body:
        rows.append(dict(kind="store_timeout", reason="socket timeout"))
    if "waitForInput" in body and "timed out after" in body:
        m = _SOCKET_WAIT.search(_window(body, "timed out after"))
        if m:
            rows.append(dict(kind="store_timeout", peer=f"{m.group(1)}:{m.group(2)}" if m.group(2) else m.group(1),
                             timeout_ms=int(m.group(3)), reason="socket read timed out"))


def _nccl_reason(text: str) -> str:
    """ncclGetErrorString's text without the "(run with …)" hint, in one spelling across NCCL versions."""
    low = text.lower()
    for needle, reason in _NCCL_REASONS:
        if needle in low:
            return reason
    return text.split(" (run with", 1)[0].strip()[:200]


def _nccl(body: str, rows: list[dict]) -> None:
    if "NCCL error" in body or "NCCL Error " in body:
        w = _window(body, "NCCL error" if "NCCL error" in body else "NCCL Error ")
        m = NCCL_ERR.search(w)
        if m:
            rows.append(dict(kind="nccl_error", where=f"{m.group('where')}:{m.group('line')}" if m.group("where")
                             else "", reason=_nccl_reason(m.group("reason")), nccl_version=m.group("ver")))
        else:
            o = NCCL_ERR_OLD.search(w)
            d = _NCCL_DETAIL.search(w)
            if o:
                rows.append(dict(kind="nccl_error", code=int(o.group("code")) if len(o.group("code")) < 10 else -1,
                                 reason=_nccl_reason(o.group("reason"))))
            elif d:
                rows.append(dict(kind="nccl_error", reason=_NCCL_DETAIL_REASON[d.group(1)]))
    if "nccl" in body:
        d = _NCCL_DETAIL.search(body, 0, 64 * 1024)
        if d:
            text = body[d.start():]
            rows.append(dict(kind="nccl_error_detail", reason=d.group(1),
                             message=text.split(" Last error:", 1)[0].strip()[:MAX_DETAIL]))
    if "DistBackendError" in body:
        rows.append(dict(kind="dist_backend_error"))
    if "NCCL operations have failed" in body:
        rows.append(dict(kind="nccl_teardown", reason="some NCCL operations have failed or timed out: "
                                                       "ProcessGroupNCCL takes the process down"))
    if ("Watchdog caught collective" in body or "milliseconds before timing out" in body) and "WorkNCCL" in body:
        for r in parse_pytorch_line(_window(body, "WorkNCCL"))[1]:
            if r["kind"] == "timeout":
                group = r["pg_desc"] or (str(r["pg_id"]) if r["pg_id"] >= 0 else "")
                rows.append(dict(kind="watchdog_timeout", seq=r["seq"], op=r["op_type"], timeout_ms=r["timeout_ms"],
                                 group=group, reason=f"ran for {r['ran_for_ms']} ms" if r["ran_for_ms"] >= 0 else ""))
                break
    if "got stuck" in body and "atchdog" in body:
        m = _WATCHDOG_STUCK.search(_window(body, "got stuck"))
        rows.append(dict(kind="watchdog_stuck", timeout_ms=int(m.group(1)) * 1000 if m else -1))


def _nccl_last_error(body: str, rows: list[dict]) -> None:
    """NCCL's "Last error:" texts (socket, IB, OFI, duplicate GPU, CUDA failure): the far side when they name it."""
    if "<" in body and (">" in body) and ("peer" in body or "Call to" in body or "Connect to" in body):
        for rx, reason in _NCCL_SOCKET:
            m = rx.search(body, 0, 64 * 1024)
            if m:
                g = m.groups()
                why = reason or g[-1].strip().lower()
                if reason == "IB completion error" and g[2]:
                    why = f"IB completion error {g[2]}"
                elif reason is None and g[0] in ("recv", "send", "connect", "accept"):
                    why = f"{g[0]} failed: {why}"
                host, port = (g[1], g[2]) if g[0] in ("recv", "send", "connect", "accept") else (g[0], g[1])
                pr = _NCCL_PROXY_RANK.search(body, 0, 4096)
                rows.append(dict(kind="nccl_last_error", peer=f"{host}:{port}", reason=why[:200],
                                 peer_rank=int(pr.group(1)) if pr else -1))
                return
    if "Duplicate GPU" in body:
        m = _DUP_GPU.search(body, 0, 64 * 1024)
        if m:
            rows.append(dict(kind="nccl_last_error", peer_rank=int(m.group(2)), device=m.group(3),
                             reason=f"duplicate GPU: ranks {m.group(1)} and {m.group(2)} on one CUDA device"))
            return
    if "Cuda failure" in body:
        m = _NCCL_CUDA_FAIL.search(body, 0, 64 * 1024)
        if m:
            rows.append(dict(kind="nccl_last_error", code=int(m.group(1)), reason=f"CUDA failure {m.group(1)} "
                             f"'{m.group(2)}'"))
            return
    if "NET/OFI" in body:
        m = _OFI_ERR.search(body, 0, 64 * 1024)
        if m:
            rows.append(dict(kind="nccl_last_error", reason=m.group(0).strip()[:200]))


def _memory_summary(body: str, rows: list[dict]) -> None:
    """One line of torch.cuda.memory_summary()'s table: its header (device), the OOM / retry counts, or one of the
    metric rows kept (allocated, reserved, non-releasable: current and peak bytes)."""
    m = _MSUM_ROW.search(body)
    if m:
        cur = int(float(m.group(2)) * _MSUM_UNIT[m.group(3)])
        peak = int(float(m.group(4)) * _MSUM_UNIT[m.group(5)])
        rows.append(dict(kind="memory_summary", where=_MSUM_KEY[m.group(1)], bytes_a=cur, bytes_b=peak))
        return
    m = _MSUM_HEAD.search(body)
    if m:
        rows.append(dict(kind="memory_summary", where="header", device=m.group(1)))
        return
    m = _MSUM_COUNTS.search(body)
    if m:
        rows.append(dict(kind="memory_summary", where="counts", code=int(m.group(1)), seq=int(m.group(2))))


def _memory_report(body: str, rows: list[dict]) -> None:
    """A training framework's own memory line (Megatron-LM's report_memory, torchtitan's step line)."""
    if "\x1b" in body:
        body = _ANSI.sub("", body)
    m = _MEGATRON_MEM.search(body)
    if m:
        it = _MEGATRON_ITER.search(body, 0, m.start() + 1)
        a, ma, r, mr = (int(float(x) * 2**20) for x in m.groups())
        rows.append(dict(kind="memory_report", where="megatron", seq=int(it.group(1)) if it else -1,
                         bytes_allocated=a, bytes_max_allocated=ma, bytes_reserved=r, bytes_max_reserved=mr))
        return
    m = _TITAN_MEM.search(body)
    if m:
        mr, pct = float(m.group(2)) * 2**30, float(m.group(3))
        rows.append(dict(kind="memory_report", where="torchtitan", seq=int(m.group(1)), bytes_max_reserved=int(mr),
                         bytes_total=int(round(mr * 100 / pct / 2**20)) * 2**20 if pct > 0 else -1))


def _cuda(body: str, rows: list[dict]) -> None:
    if "CPUAllocator" in body:
        m = _OOM_CPU.search(body)
        if m:
            n = int(m.group(1)) << (30 if m.group(2) else 0)
            rows.append(dict(kind="oom", bytes_requested=n if n < 1 << 62 else -1, device="cpu",
                             reason="host allocator"))
            return
    if "out of memory" in body or "OutOfMemoryError" in body:
        w = _window(body, "out of memory" if "out of memory" in body else "OutOfMemoryError")
        row = dict(kind="oom")
        a = _OOM_NEW_ALLOC.search(w)
        if a:
            row["bytes_requested"] = to_bytes(a.group(1), a.group(2))
        cap = _OOM_NEW_CAP.search(w)
        if cap:
            row.update(device=cap.group(1), bytes_total=to_bytes(cap.group(2), cap.group(3)),
                       bytes_free=to_bytes(cap.group(4), cap.group(5)))
        split = _OOM_NEW_SPLIT.search(w)
        if split:
            row.update(bytes_allocated=to_bytes(split.group(1), split.group(2)),
                       bytes_reserved_unallocated=to_bytes(split.group(3), split.group(4)))
        old = None if (cap or split) else _OOM_OLD.search(w)
        if old:
            g = old.groups()
            alloc, reserved = to_bytes(g[3], g[4]), to_bytes(g[9], g[10])
            row.update(device=g[0], bytes_total=to_bytes(g[1], g[2]), bytes_allocated=alloc,
                       bytes_free=to_bytes(g[5], g[6]),
                       bytes_reserved_unallocated=reserved - alloc if alloc >= 0 and reserved >= alloc else -1)
        if a or cap or split or old or "CUDA out of memory" in body or "OutOfMemoryError" in body \
                or "CUDA error: out of memory" in body:
            row["reason"] = "caching allocator" if (a or cap or split or old) else "out of memory"
            rows.append(row)
            return
    if "CUDA error" in body or "CUDA driver error" in body or "Triton Error [CUDA]" in body:
        w = _window(body, "CUDA")
        m = _CUDA_ERR.search(w)
        reason = m.group(1).strip().lower() if m else ""
        kind = ("cuda_illegal_memory" if "illegal memory access" in reason else
                "cuda_device_assert" if "device-side assert" in reason else
                "ecc" if "ecc error" in reason else "cuda_error")
        rows.append(dict(kind=kind, reason=reason))
    elif "Assertion `" in body and "failed" in body:
        m = _KERNEL_ASSERT.match(body.lstrip())
        if m:
            rows.append(dict(kind="cuda_device_assert", where=f"{m.group(1)}:{m.group(2)}", reason="kernel assertion"))
    if "_STATUS_" in body:
        m = _CUBLAS.search(_window(body, "_STATUS_"))
        if m and not any(r["kind"].startswith("cuda") for r in rows):
            rows.append(dict(kind="cuda_error", reason=m.group(1)))


def _gpu_driver(body: str, rows: list[dict]) -> None:
    if "Xid" in body:
        m = _XID.search(_window(body, "Xid"))
        if m:
            code = int(m.group(3))
            rest = m.group(6).strip()
            rows.append(dict(kind="xid", device=m.group(2), code=code, reason=f"{m.group(1)} {code}: {rest}"[:300]))
            if m.group(1) == "Xid" and code in _ECC_XIDS:
                rows.append(dict(kind="ecc", device=m.group(2), code=code, reason=rest[:300]))
            return
    if "fallen off the bus" in body and "NVRM" in body:
        m = _FALLEN.search(_window(body, "fallen off"))
        rows.append(dict(kind="xid", device=m.group(1).rstrip(":.") if m else "", code=79,
                         reason="GPU has fallen off the bus"))
    elif "ECC" in body and ("rror" in body or "ncorrectable" in body) and not any(r["kind"] == "ecc" for r in rows):
        rows.append(dict(kind="ecc", reason=_window(body, "ECC").strip()[:300]))


def _host(body: str, rows: list[dict]) -> None:
    if "Kill" in body:
        m = _KILLED_PROC.search(_window(body, "Kill")) if "out of memory" in body.lower() else None
        if m:
            rows.append(dict(kind="host_oom_kill", pid=int(m.group(1)), reason="kernel oom killer",
                             message=(m.group(2) or "")))
        elif "OOM Killed" in body or "oom_kill" in body or "oom-kill" in body:
            e = _OOM_EVENTS.search(_window(body, "oom"))
            rows.append(dict(kind="host_oom_kill", reason="cgroup oom kill" + (f" ({e.group(1)} events)" if e else "")))
        elif "Killed" in body and len(body) < 1024:
            s = _SHELL_KILLED.match(body.strip())
            if s:
                rows.append(dict(kind="host_oom_kill", pid=_int(s.group(1)), code=9, reason="shell: Killed (SIGKILL)"))
    elif ("oom_kill" in body or "oom-kill" in body) and "vent" in body:
        e = _OOM_EVENTS.search(_window(body, "oom"))
        rows.append(dict(kind="host_oom_kill", reason="cgroup oom kill" + (f" ({e.group(1)} events)" if e else "")))
    elif "Out Of Memory" in body and "srun" in body:
        m = _SRUN_OOM.search(_window(body, "Out Of Memory"))
        if m:
            rows.append(dict(kind="host_oom_kill", reason=f"srun: task {m.group(2)} on {m.group(1)}: Out Of Memory"))
    if "is killed by signal" in body:
        m = _LOADER_KILLED.search(_window(body, "is killed by signal"))
        if m:
            name = m.group(2).strip()
            rows.append(dict(kind="signal", pid=int(m.group(1)), code=9 if name == "Killed" else -1,
                             reason=f"DataLoader worker killed by signal: {name}"))
    if "ignal" in body or "SIG" in body:
        _signals(body, rows)
    if "egmentation fault" in body and "Fatal Python error" not in body:
        rows.append(dict(kind="signal", code=11, reason="SIGSEGV"))
    if "Aborted (core dumped)" in body:
        rows.append(dict(kind="signal", code=6, reason="SIGABRT"))
    if "Fatal Python error" in body:
        m = _FATAL_PY.search(_window(body, "Fatal Python error"))
        reason = m.group(1).strip() if m else ""
        code = 11 if "Segmentation" in reason else 6 if "Abort" in reason else -1
        rows.append(dict(kind="signal", code=code, reason=f"Fatal Python error: {reason}"[:200]))
    if "terminate called" in body:
        m = _TERMINATE.search(_window(body, "terminate called"))
        if m:
            rows.append(dict(kind="signal", code=6, reason="SIGABRT (std::terminate"
                             + (f": {m.group(1)})" if m.group(1) else ")")))
    if "failed (exitcode:" in body:
        m = _CHILD_FAILED.search(_window(body, "failed (exitcode:"))
        if m:
            rows.append(dict(kind="child_failed", code=int(m.group(1)), local_rank=int(m.group(2)),
                             pid=int(m.group(3)), reason=signal_name(int(m.group(1)))))
    if "Sending process" in body:
        m = _SENDING.search(_window(body, "Sending process"))
        if m:
            rows.append(dict(kind="sigterm_sent", pid=int(m.group(1)), reason=m.group(2)))
    if "ecorder" in body or "trace to" in body:
        low = body.lower()
        if "flight recorder" in low or "dumping" in low:
            m = _FR_TO.search(_window(body, "trace to")) if "trace to" in body else None
            if m or ("flight recorder" in low and ("dump" in low or "finished" in low)):
                rows.append(dict(kind="fr_dump", reason=m.group(1) if m else ""))


def _signals(body: str, rows: list[dict]) -> None:
    if "received by PID" in body:
        m = _SIG_RECEIVED.search(_window(body, "received by PID"))
        if m:
            rows.append(dict(kind="signal", code=int(m.group(1)), reason=m.group(2), pid=int(m.group(3))))
    if "got signal:" in body:
        m = _GOT_SIGNAL.search(_window(body, "got signal:"))
        if m:
            rows.append(dict(kind="signal", code=int(m.group(2)), pid=int(m.group(1)),
                             reason=signal_name(-int(m.group(2))) + " (to the launcher)"))
    if "death signal" in body:
        m = _DEATH_SIGNAL.search(_window(body, "death signal"))
        if m:
            rows.append(dict(kind="signal", code=int(m.group(1)), reason=signal_name(-int(m.group(1)))
                             + " (to the launcher)"))
    if "*** SIG" in body:
        m = _STAR_SIG.search(_window(body, "*** SIG"))
        if m:
            rows.append(dict(kind="signal", code=_SIGNALS_BY_NAME.get(m.group(1), -1), reason=m.group(1)))


_SIGNAL_NAMES = {1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT", 7: "SIGBUS",
                 8: "SIGFPE", 9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2", 13: "SIGPIPE",
                 14: "SIGALRM", 15: "SIGTERM", 24: "SIGXCPU", 25: "SIGXFSZ"}
_SIGNALS_BY_NAME = {v: k for k, v in _SIGNAL_NAMES.items()}


def signal_name(exitcode: int) -> str:
    """The signal a negative exit code means (Linux numbering, as torchrun reports it); '' for a normal exit."""
    return _SIGNAL_NAMES.get(-exitcode, f"signal {-exitcode}") if exitcode < 0 else ""
