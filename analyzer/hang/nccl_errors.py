"""NCCL errors as ProcessGroupNCCL prints them to stderr: the error class, what it means, its fix, the far side.

PyTorch raises `NCCL error in: <file>:<line>, <ncclGetErrorString>, NCCL version X` and follows it with
getNcclErrorDetailStr's line (`ncclRemoteError: A call failed possibly due to a network error or a remote process
exiting prematurely.`) and, since NCCL 2.13, `Last error:` with ncclGetLastError's text — for a network failure the
socket line that names the far side (`socketProgressOpt: Call to recv from 10.0.0.4<33759> failed : Connection reset
by peer`, `NET/IB : Got completion from peer 10.0.0.4<39138> with error 12`). The watchdog's teardown flattens the
same into one paragraph after `[E ProcessGroupNCCL.cpp:455] Some NCCL operations have failed or timed out`.

Cause and effect: a system / CUDA / internal / usage / argument error is the printing rank's own failure; a remote
error (and a socket line) means the printing rank only noticed — the culprit is on the far side of the connection,
the address the socket line names. Lines without a rank tag (a bare log someone kept) still make a finding: the
error class, its fix, the NCCL version and the peer, with no rank named.

`apply(diags, logs)` enriches the verdict's nccl_error diagnoses with class, meaning and fix, and adds one for the
errors no diagnosis covers (analyzer/hang/analysis.py calls it).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from parsers.table import Table, isin

from analyzer.hang.diagnosis import HangDiagnosis
from rules.phrases import ranks_text

#: ncclResult_t → (what it means, the fix, whether the printing rank's own failure); texts from NCCL's
#: ncclGetErrorString (src/init.cc) and PyTorch's getNcclErrorDetailStr (torch/csrc/distributed/c10d/NCCLUtils.cpp)
CLASSES: dict[str, tuple[str, str, bool]] = {
    "ncclUnhandledCudaError": (
        "a CUDA call inside NCCL failed on this rank (the GPU, its driver or the CUDA runtime; 'Last error' names "
        "the call's error)",
        "Check this rank's GPU and driver (nvidia-smi, dmesg for Xid errors), that every rank uses its own GPU "
        "(torch.cuda.set_device(local_rank) before init_process_group) and that the driver supports the CUDA and "
        "NCCL of the build; rerun with NCCL_DEBUG=INFO to see the failing call.", True),
    "ncclSystemError": (
        "a system call or external library call failed on this rank (socket, malloc, munmap, shared memory, an IB "
        "verbs call); before NCCL 2.13 a peer that exited also surfaced as this",
        "Rerun with NCCL_DEBUG=INFO and read the WARN line before the error: a wrong network interface "
        "(NCCL_SOCKET_IFNAME), ports blocked between nodes, too little shared memory in a container (--shm-size / "
        "--ipc=host), a low locked-memory limit for InfiniBand (ulimit -l); and check whether a peer crashed first.",
        True),
    "ncclInternalError": (
        "an internal check of NCCL failed: an NCCL bug, memory corruption, or (often) a network failure that "
        "surfaced through an internal path (NCCL 2.18 reports every network error so, NVIDIA/nccl#1092)",
        "Rerun with NCCL_DEBUG=INFO and read the first WARN line; a closed or reset connection there is a network "
        "or peer failure (treat as ncclRemoteError); otherwise upgrade NCCL.", True),
    "ncclInvalidArgument": (
        "an argument passed to NCCL was invalid (a bad pointer, device count, host:port pair or config value)",
        "Check what this rank passes: tensors on its own GPU, supported dtypes, the communicator config "
        "('Last error' names the value).", True),
    "ncclInvalidUsage": (
        "NCCL was used in a way it does not allow: most often two ranks on one GPU ('Duplicate GPU detected'), "
        "or unbalanced group calls / too many outstanding operations",
        "Give every rank its own GPU: torch.cuda.set_device(local_rank) (or init_process_group(device_id=…)) "
        "before the first collective, and no more ranks per node than GPUs; keep ncclGroupStart/End balanced.",
        True),
    "ncclRemoteError": (
        "a call failed because of the network or because a remote process exited: the rank that printed it only "
        "noticed, the failure is on the far side of the connection",
        "Look at the peer the socket line names (that host's ranks: did one crash, run out of memory, get "
        "killed?) and at the link to it (NIC / InfiniBand errors, cable, switch, firewall); the rank that printed "
        "this is a victim.", False),
}
REASON_CLASS = {"unhandled system error": "ncclSystemError", "internal error": "ncclInternalError",
                "remote process exited or there was a network error": "ncclRemoteError",
                "invalid argument": "ncclInvalidArgument", "invalid usage": "ncclInvalidUsage",
                "unhandled cuda error": "ncclUnhandledCudaError"}
_KINDS = ("nccl_error", "nccl_error_detail", "nccl_last_error", "nccl_teardown")
NEAR = 8  # lines after an error line where its class and last-error lines belong to it


@dataclass
class NcclErrorReport:
    """One NCCL error as one stream printed it (its error line, class line, last error line)."""

    file: str
    rank: int
    line: int
    cls: str = ""
    reason: str = ""
    version: str = ""
    where: str = ""
    peer: str = ""
    peer_rank: int = -1
    last_error: str = ""
    teardown: bool = False
    evidence: list[tuple[str, int | None, str]] = field(default_factory=list)

    @property
    def own(self) -> bool:
        """The printing rank's own failure (not a remote / network error it noticed)."""
        if self.cls in CLASSES:
            own = CLASSES[self.cls][2]
            # an internal error whose last error is a lost connection is a network / peer failure
            return own and not (self.cls == "ncclInternalError" and self.peer)
        return not self.peer


def _rows(logs: list) -> Table:
    frames = []
    for log in logs:
        ev = getattr(log, "events", None)
        if ev is not None and len(ev):
            sel = ev[isin(ev["kind"].astype(str), _KINDS)]
            if len(sel):
                frames.append(sel.with_columns(file=str(getattr(log, "path", ""))))
    if not frames:
        return Table()
    return Table.concat(frames).sort_values(["file", "line"], kind="stable")


def reports(logs: list) -> list[NcclErrorReport]:
    """The NCCL errors of the stderr logs, one per error line (class and last error joined from the lines after)."""
    rows = _rows(list(logs))
    out: list[NcclErrorReport] = []
    open_: dict[tuple[str, int], NcclErrorReport] = {}
    for x in rows.itertuples(index=False):
        key, kind, line = (str(x.file), int(x.rank)), str(x.kind), int(x.line)
        cur = open_.get(key)
        if cur is not None and line - cur.line > NEAR:
            cur = None
        ev = (str(x.file), line, str(x.text))
        if kind == "nccl_error" or cur is None:
            if kind == "nccl_error" and cur is not None and cur.line == line:
                pass  # a flattened paragraph: the error line is the same line as what came first
            else:
                cur = NcclErrorReport(str(x.file), int(x.rank), line)
                open_[key] = cur
                out.append(cur)
        if ev not in cur.evidence:
            cur.evidence.append(ev)
        if kind == "nccl_error":
            cur.reason = cur.reason or str(x.reason)
            cur.version = cur.version or str(x.nccl_version)
            cur.where = cur.where or str(x.where)
            cur.cls = cur.cls or REASON_CLASS.get(str(x.reason), "")
        elif kind == "nccl_error_detail":
            cur.cls = str(x.reason) if str(x.reason) in CLASSES else cur.cls or str(x.reason)
        elif kind == "nccl_last_error":
            if not cur.peer and str(x.peer):
                cur.peer = str(x.peer)
            if cur.peer_rank < 0 and int(x.peer_rank) >= 0:
                cur.peer_rank = int(x.peer_rank)
            cur.last_error = cur.last_error or str(x.reason)
        elif kind == "nccl_teardown":
            cur.teardown = True
    return [r for r in out if r.cls or r.reason]  # a socket line alone is an NCCL WARN's business (NCCL001)


def _host(peer: str) -> str:
    return peer.rsplit(":", 1)[0] if peer.count(":") >= 1 else peer


def _sentence(r: NcclErrorReport) -> str:
    who = f"rank {r.rank}" if r.rank >= 0 else "a rank the log does not name"
    ver = f" (NCCL {r.version})" if r.version else ""
    cls = r.cls or "an NCCL error"
    meaning = CLASSES[r.cls][0] if r.cls in CLASSES else (r.reason or "")
    text = f"{who} hit {cls}{ver}: {meaning}"
    if r.last_error:
        text += f"; last error: {r.last_error}" + (f" with {r.peer}" if r.peer else "")
    if r.peer and not r.own:
        text += (f" — the far side of that connection ({_host(r.peer)}) is the likely culprit; "
                 f"{'rank ' + str(r.rank) if r.rank >= 0 else 'the rank that printed this'} only noticed")
    if r.teardown:
        text += "; ProcessGroupNCCL then took the process down"
    return text


def _fix(rs: list[NcclErrorReport]) -> str:
    classes = list(dict.fromkeys(r.cls for r in rs if r.cls in CLASSES))
    return " ".join(f"{c}: {CLASSES[c][1]}" for c in classes[:2]) or \
        "Rerun with NCCL_DEBUG=INFO and read the WARN line before the error; fix that, then restart."


def diagnosis(rs: list[NcclErrorReport]) -> HangDiagnosis:
    """One nccl_error diagnosis for reports not covered by the verdict: culprits are the ranks whose own failure it
    is; a remote error's printing ranks wait (the culprit is the peer, named by rank only when NCCL names it)."""
    own = sorted({r.rank for r in rs if r.own and r.rank >= 0})
    peers = sorted({r.peer_rank for r in rs if not r.own and r.peer_rank >= 0} - set(own))
    noticed = sorted({r.rank for r in rs if not r.own and r.rank >= 0} - set(own) - set(peers))
    culprits = own or peers
    if own:
        conf = 0.8
    elif peers:
        conf = 0.6
    else:
        conf = 0.5 if any(r.own for r in rs) else 0.4  # no rank named: the class and the peer, not a culprit
    firsts = list({(r.rank, r.cls, r.peer): r for r in rs}.values())
    cause = "; ".join(_sentence(r) for r in firsts[:3])
    if len(firsts) > 3:
        cause += f"; and {len(firsts) - 3} more"
    if not own and noticed:
        cause += f" ({ranks_text(noticed)} reported a failure on the far side, not of their own)"
    ev = [e for r in firsts[:4] for e in r.evidence[:3]]
    return HangDiagnosis(kind="nccl_error", process_group="", pg_desc="", seq=None, op="", culprit_ranks=culprits,
                         waiting_ranks=noticed, evidence=ev, cause=cause, fix=_fix(rs), confidence=conf,
                         source="stderr")


def apply(diags: list[HangDiagnosis], logs: list) -> list[HangDiagnosis]:
    """The ranked diagnoses with NCCL error classes, meanings, fixes and peers in; errors no diagnosis covers become
    one nccl_error diagnosis (first when nothing stronger is there)."""
    rs = reports(list(logs))
    if not rs:
        return diags
    covered: set[int] = set()
    out: list[HangDiagnosis] = []
    for d in diags:
        mine = [r for r in rs if r.rank in d.culprit_ranks] if d.kind == "nccl_error" else []
        victims = {r.rank for r in mine} - {r.rank for r in mine if r.own}
        if mine and victims >= set(d.culprit_ranks):
            continue  # every culprit only noticed a remote / network failure: rebuilt below, as a victim
        if mine:
            d.cause = d.cause + " — " + "; ".join(_sentence(r) for r in mine[:2]) if d.cause else \
                "; ".join(_sentence(r) for r in mine[:2])
            d.fix = _fix(mine)
            d.evidence.extend(e for r in mine[:2] for e in r.evidence[1:3] if e not in d.evidence)
            covered |= {id(r) for r in mine}
        out.append(d)
    diags = out
    rest = [r for r in rs if id(r) not in covered and not any(
        r.rank in d.culprit_ranks or (r.rank >= 0 and r.rank in d.waiting_ranks) for d in diags)]
    if not rest:
        return diags
    d = diagnosis(rest)
    at = next((i for i, x in enumerate(diags) if x.confidence < d.confidence or x.kind == "watchdog_timeout"),
              len(diags))
    return diags[:at] + [d] + diags[at:]
