"""Per-rank failure facts from parsed stderr (parsers/torch_stderr.py): who died, how, and what came first.

Every recognised line is either an *origin* (something went wrong on this rank: a Python exception in user
code, a gloo size check, a CUDA error, out of memory, a fatal signal other than the launcher's SIGTERM) or a
*consequence* (this rank noticed someone else's failure: timeouts, connection closed/reset by peer, a remote
error, the launcher's SIGTERM). Only origins make a rank a culprit; consequences make it a waiter. torchrun's
"Root Cause (first observed failure)" names the first child it reaped, which is often not the first that failed:
it is kept as evidence, never as the verdict.

gloo's fatal size check is printed by std::terminate without a rank tag; when exactly one rank of that file died
of the matching signal (SIGABRT) and has no other origin, the line is that rank's.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from parsers.table import Table

ORIGIN_KINDS = {"gloo_size_mismatch", "gloo_invalid_tensor_size", "cuda_illegal_memory", "cuda_device_assert",
                "cuda_error", "xid", "ecc", "oom", "host_oom_kill"}
CONSEQUENCE_KINDS = {"connection_closed", "connection_reset", "recv_timeout", "send_timeout", "gloo_timeout",
                     "watchdog_timeout", "watchdog_stuck", "sigterm_sent", "store_timeout", "monitored_barrier",
                     "collective_mismatch", "fr_dump"}
RENDEZVOUS_KINDS = {"rendezvous_eaddrinuse", "rendezvous_refused"}
NCCL_CONSEQUENCE_REASONS = ("remote process exited", "network error", "timeout", "timed out", "aborted")
# exceptions that report someone else's failure or the launcher's shutdown (RuntimeError is not among them: it is
# also what shape errors, CUDA errors and most user errors raise; its message decides)
DIST_EXC = re.compile(r"(?:^|\.)(?:DistBackendError|DistError|DistNetworkError|DistStoreError|"
                      r"ChildFailedError|SignalException|TimeoutError|ConnectionError|ConnectionResetError|"
                      r"BrokenPipeError|KeyboardInterrupt|SystemExit)$")
GLOO_TEXT = re.compile(r"gloo[/:]|ProcessGroupGloo|c10d|ProcessGroupNCCL|NCCL communicator")
CONSEQUENCE_TEXT = re.compile(r"[Tt]imed out|[Tt]imeout|[Cc]onnection (?:closed|reset|refused)|by peer|"
                              r"Detected mismatch between collectives|"
                              r"remote process exited|[Ss]ignal 15|SIGTERM|killed by signal: Terminated|Broken pipe|NCCL communicator was aborted|"
                              r"[Ww]atchdog|monitoredBarrier|failed to pass")
ORIGIN_TEXT = re.compile(r"Received data size doesn't match|invalid tensor size|out of memory|illegal memory|"
                         r"device-side assert|CUDA error|ECC|Xid")
P2P_APIS = {"send", "recv", "isend", "irecv", "batch_isend_irecv", "P2POp"}
COLLECTIVE_APIS = {"all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
                   "broadcast", "reduce", "all_to_all", "all_to_all_single", "barrier", "gather", "scatter",
                   "all_reduce_coalesced", "monitored_barrier", "_all_gather_base", "_reduce_scatter_base",
                   "all_gather_object", "broadcast_object_list", "gather_object", "scatter_object_list",
                   "_coalescing_manager"}  # coalesced collectives wait there (batched P2P waits in user code)
SIGNAL_NAMES = {6: "SIGABRT", 9: "SIGKILL", 11: "SIGSEGV", 7: "SIGBUS", 8: "SIGFPE", 4: "SIGILL", 15: "SIGTERM",
                1: "SIGHUP", 2: "SIGINT"}
SIGNALS_ORIGIN = {"SIGABRT", "SIGKILL", "SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL"}
UNRANKED_SIGNAL = {"gloo_size_mismatch": "SIGABRT", "gloo_invalid_tensor_size": "SIGABRT",
                   "host_oom_kill": "SIGKILL"}


@dataclass
class RankFailure:
    """What stderr says about one rank."""

    rank: int
    died: bool = False
    how: str = ""                         # 'SIGABRT', 'exit code 1', 'uncaught ValueError', ...
    origin: dict | None = None            # the first origin line: kind, text, file, line, exc_type, message, where
    consequences: list[dict] = field(default_factory=list)
    peers: list[int] = field(default_factory=list)
    timed_out: bool = False
    root_cause_by_launcher: bool = False
    evidence: list[tuple[str, int | None, str]] = field(default_factory=list)
    blocked_in: str = ""                  # the API its fatal wait was in: all_reduce, recv, send, wait, ...
    stack: str = ""                       # user-code functions of its fatal traceback, outermost first
    p2p_direction: str = ""               # 'send' / 'recv' when a timeout says which kind of transfer hung
    failed_at: float | None = None        # torchrun's table: when it failed (its error file's time), epoch seconds

    @property
    def blocked_in_p2p(self) -> bool:
        """It died waiting in a send/recv: inside a torch P2P API (a timeout or a lost peer), or timed out in a
        user-code wait on isend/irecv work."""
        if self.blocked_in in P2P_APIS:
            return True
        if not self.timed_out:
            return False
        # gloo's collectives time out in their internal sends/recvs too: without a traceback that ends outside
        # the collective APIs (a user-code wait on isend/irecv work), a 'send' / 'recv' timeout proves nothing
        return bool(self.p2p_direction) and bool(self.blocked_in) and self.blocked_in not in COLLECTIVE_APIS


@dataclass
class StderrFacts:
    """Failures per rank, the launcher's root-cause pick, rendezvous failures, and lines no rank can be given."""

    ranks: dict[int, RankFailure] = field(default_factory=dict)
    launcher_root: int | None = None
    rendezvous: list[dict] = field(default_factory=list)
    unranked_origins: list[dict] = field(default_factory=list)
    mismatch_reports: list[dict] = field(default_factory=list)
    seen: set[int] = field(default_factory=set)    # ranks whose own output is among the inputs

    def origin_ranks(self) -> list[int]:
        """Ranks with an origin failure, in the order their first origin line appears."""
        rows = [(f.origin.get("order", 0), r) for r, f in self.ranks.items() if f.origin]
        return [r for _, r in sorted(rows)]

    def rank(self, r: int) -> RankFailure:
        return self.ranks.setdefault(r, RankFailure(r))


def _s(x: Any) -> str:
    return "" if x is None or (isinstance(x, float) and x != x) else str(x)


def _i(x: Any) -> int:
    try:
        return int(x)
    except (TypeError, ValueError):
        return -1


def _is_origin(kind: str, exc_type: str, text: str, reason: str) -> bool:
    """Origin vs consequence for one event (module docstring)."""
    if kind in ORIGIN_KINDS:
        return True
    if kind in CONSEQUENCE_KINDS or kind in RENDEZVOUS_KINDS:
        return False
    if kind == "nccl_error":
        return not any(w in (reason + " " + text).lower() for w in NCCL_CONSEQUENCE_REASONS)
    if kind in ("exception", "dist_backend_error"):
        if ORIGIN_TEXT.search(text):
            return True
        if CONSEQUENCE_TEXT.search(text) or kind == "dist_backend_error":
            return False
        if DIST_EXC.search(exc_type or ""):
            return False
        return not GLOO_TEXT.search(text)
    return False


def _signal_name(code: int, reason: str) -> str:
    """'SIGABRT' from a signal row's reason or number (exit code -6 means signal 6)."""
    m = re.search(r"SIG[A-Z]+", reason or "")
    if m:
        return m.group(0)
    n = abs(code) if code not in (-1, 0) else 0
    return SIGNAL_NAMES.get(n, f"signal {n}" if n else "")


def _item(path: str, order: int, **kw: Any) -> dict:
    base = dict(kind="", text="", file=path, line=None, exc_type="", message="", where="", reason="", order=order,
                peer=-1, group="", seq=-1, op="", bytes_a=-1, bytes_b=-1, code=-1)
    base.update(kw)
    return base


def stderr_facts(logs: list) -> StderrFacts:
    """Fold every StderrLog's events, tracebacks and failure table into per-rank failure facts.

    An NCCL error that the rank only noticed (ncclRemoteError, or a lost connection its last-error line names:
    analyzer/hang/nccl_errors.py reads the error line with the lines after it) is a consequence for that rank,
    never its origin: the failure is on the far side."""
    from analyzer.hang.nccl_errors import reports
    logs = list(logs)
    noticed = {(r.file, r.line) for r in reports(logs) if not r.own}
    out = StderrFacts()
    order = 0
    for log in logs:
        path = str(getattr(log, "path", ""))
        out.seen |= {int(r) for r in getattr(log, "ranks", ()) or () if int(r) >= 0}
        rows = []
        for what, df in (("event", getattr(log, "events", None)), ("traceback", getattr(log, "tracebacks", None))):
            if df is not None and len(df):
                rows += [(what, x) for x in df.to_dict("records")]
        rows.sort(key=lambda kx: _i(kx[1].get("line")))
        chained_at = _chains_after_consequence(rows)
        unranked: list[dict] = []
        for what, x in rows:
            order += 1
            r = _i(x.get("rank"))
            line = _i(x.get("line"))
            line = line if line > 0 else None
            if what == "traceback":
                _traceback(out, r, x, path, line, order)
                continue
            kind, text = _s(x.get("kind")), _s(x.get("text"))
            exc, reason = _s(x.get("exc_type")), _s(x.get("reason"))
            item = _item(path, order, kind=kind, text=text, line=line, exc_type=exc, message=_s(x.get("message")),
                         where=_s(x.get("where")), reason=reason, peer=_i(x.get("peer_rank")),
                         group=_s(x.get("group")), seq=_i(x.get("seq")), op=_s(x.get("op")),
                         bytes_a=_i(x.get("bytes_a")), bytes_b=_i(x.get("bytes_b")), code=_i(x.get("code")),
                         requested=_i(x.get("bytes_requested")), allocated=_i(x.get("bytes_allocated")),
                         reserved_free=_i(x.get("bytes_reserved_unallocated")), total=_i(x.get("bytes_total")),
                         nccl_version=_s(x.get("nccl_version")), device=_s(x.get("device")))
            if kind in RENDEZVOUS_KINDS or (kind == "store_timeout" and r < 0):
                out.rendezvous.append(item)
                continue
            if kind == "collective_mismatch":
                out.mismatch_reports.append(dict(item, rank=r))
            if r < 0:
                if _is_origin(kind, exc, text, reason):
                    unranked.append(item)
                continue
            f = out.rank(r)
            if kind in ("signal", "child_failed"):
                # a child_failed line's code is an exit code: only a negative one is a signal (exit 1 is not SIGHUP)
                code = item["code"]
                sig = _signal_name(code, reason) if kind == "signal" or code < -1 or "SIG" in reason else ""
                _death(f, sig or (f"exit code {item['code']}" if item["code"] not in (-1, 0) else ""), item)
                continue
            if kind == "monitored_barrier" and item["peer"] >= 0 and item["peer"] != r:
                f.peers.append(item["peer"])
                f.timed_out = True
            handling = kind == "exception" and r in chained_at and (line or 0) >= chained_at[r]
            remote = kind == "nccl_error" and (path, line) in noticed
            if not handling and not remote and _is_origin(kind, exc, text, reason):
                if f.origin is None:
                    f.origin = item
                elif kind in ORIGIN_KINDS and f.origin.get("kind") in ("exception", "signal"):
                    f.origin = dict(item, order=f.origin.get("order", order))  # the specific line beats the generic
                f.evidence.append((path, line, text))
            else:
                f.consequences.append(item)
                if "timeout" in kind or re.search(r"[Tt]imed? ?out", text):
                    f.timed_out = True
                if kind in ("send_timeout", "recv_timeout") and not f.p2p_direction:
                    f.p2p_direction = kind.split("_")[0]
                if item["peer"] >= 0 and item["peer"] != r:
                    f.peers.append(item["peer"])
        _failure_table(out, getattr(log, "failures", None), path, order)
        _attribute_unranked(out, unranked)
    return out


def _chains_after_consequence(rows: list[tuple[str, dict]]) -> dict[int, int]:
    """rank → first line of a chained traceback ("During handling of the above exception…") whose first
    exception reports someone else's failure: what that rank raised while handling it (its DataLoader worker
    killed by the launcher's SIGTERM, a cleanup error) is a consequence too, not a failure of its own."""
    first: dict[int, bool] = {}
    out: dict[int, int] = {}
    for what, x in rows:
        r = _i(x.get("rank"))
        if what != "traceback" or r < 0:
            continue
        exc, msg = _s(x.get("exc_type")), _s(x.get("message"))
        if not bool(x.get("chained")):
            first.setdefault(r, _is_origin("exception", exc, f"{exc}: {msg}", ""))
        elif first.get(r) is False and r not in out:
            out[r] = _i(x.get("line"))
    return out


def _failure_table(out: StderrFacts, fails: Table | None, path: str, order: int) -> None:
    """torchrun's table: exit code and signal per rank (a death), its root-cause pick (evidence only)."""
    if fails is None or not len(fails):
        return
    for x in fails.to_dict("records"):
        r = _i(x.get("rank"))
        if r < 0:
            continue
        f = out.rank(r)
        sig = _s(x.get("signal"))
        code = _i(x.get("exitcode"))
        how = sig or (_signal_name(code, "") if code < -1 else (f"exit code {code}" if code > 0 else ""))
        text = f"torchrun: rank {r} exitcode {code}" + (f" ({sig})" if sig else "")
        if how:
            _death(f, how, _item(path, order, kind="child_failed", text=text, line=_i(x.get("line")) or None))
        if bool(x.get("root_cause")) is True:
            out.launcher_root = r
            f.root_cause_by_launcher = True
        t = _table_time(_s(x.get("time")))
        if t is not None and (f.failed_at is None or t < f.failed_at):
            f.failed_at = t


def _table_time(text: str) -> float | None:
    """torchrun's failure-table time ('2026-12-06_04:18:28', the error file's timestamp, or when it saw the exit)
    as seconds (naive, whole seconds: only differences between rows are used)."""
    from datetime import datetime, timezone
    for fmt in ("%Y-%m-%d_%H:%M:%S", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S"):
        try:
            return datetime.strptime(text.strip()[:19], fmt).replace(tzinfo=timezone.utc).timestamp()
        except ValueError:
            continue
    return None


def origin_time(facts: "StderrFacts", r: int) -> float | None:
    """When rank r failed on its own, by the evidence of time: torchrun's table time of an exception (its error
    file); for a death by signal, which writes no error file and is seen only at the launcher's next check, no later
    than the earliest time another rank noticed a lost peer (it lost this one, or an earlier one)."""
    f = facts.ranks.get(r)
    if f is None or f.failed_at is None:
        return None
    if f.origin is not None and f.origin.get("kind") == "signal":
        lost = [g.failed_at for q, g in facts.ranks.items() if q != r and g.failed_at is not None and g.origin is None
                and any(c.get("kind") in ("connection_closed", "connection_reset") or "by peer" in c.get("text", "")
                        for c in g.consequences)]
        return min([f.failed_at] + lost)
    return f.failed_at


def _attribute_unranked(out: StderrFacts, unranked: list[dict]) -> None:
    """Give an untagged fatal line (gloo's terminate, an OOM kill) to the one rank that died of its signal."""
    for item in unranked:
        sig = UNRANKED_SIGNAL.get(item["kind"])
        cands = [r for r, f in out.ranks.items() if f.died and f.origin is not None
                 and f.origin.get("kind") == "signal" and sig and sig in f.how]
        if sig and len(cands) == 1:
            f = out.ranks[cands[0]]
            f.origin = dict(item, order=f.origin.get("order", item["order"]))
            f.evidence.insert(0, (item["file"], item["line"], item["text"]))
        else:
            out.unranked_origins.append(item)


def _death(f: RankFailure, how: str, item: dict) -> None:
    """Record that a rank died and how; a signal other than SIGTERM with no other origin is itself the origin."""
    f.died = True
    if how and (not f.how or f.how.startswith("uncaught") and how.startswith("SIG")):
        f.how = how
    f.evidence.append((item["file"], item["line"], item["text"]))
    if f.origin is None and any(s in how for s in SIGNALS_ORIGIN):
        f.origin = dict(item, kind="signal", exc_type="", message=how)


def _traceback(out: StderrFacts, r: int, x: dict, path: str, line: int | None, order: int) -> None:
    """An uncaught traceback: the rank died of it; its exception is an origin unless it reports someone else.

    The launcher's own RendezvousTimeoutError / RendezvousError (no rank) says the job never formed."""
    exc = _s(x.get("exc_type"))
    if "Rendezvous" in exc and not bool(x.get("chained")):
        out.rendezvous.append(_item(path, order, kind="rendezvous_timeout" if "Timeout" in exc else "rendezvous_error",
                                    text=f"{exc}: {_s(x.get('message'))}".strip(": "), line=line, exc_type=exc))
        return
    if r < 0 or bool(x.get("chained")) is True:
        return
    f = out.rank(r)
    msg = _s(x.get("message"))
    f.blocked_in = f.blocked_in or _s(x.get("inner_func"))
    if f.blocked_in in ("send", "isend", "recv", "irecv") and not f.p2p_direction:
        f.p2p_direction = "send" if "send" in f.blocked_in else "recv"
    f.stack = f.stack or _s(x.get("user_stack"))
    where = ""
    if _s(x.get("user_file")):
        where = f"{x['user_file']}:{_i(x.get('user_line'))} {_s(x.get('user_func'))}".strip()
    text = f"{exc}: {msg}"[:400] + (f" (at {where})" if where else "")
    item = _item(path, order, kind="exception", text=text, line=line, exc_type=exc, message=msg, where=where)
    f.died = True
    f.how = f.how or f"uncaught {exc}"
    if _is_origin("exception", exc, f"{exc}: {msg}", ""):
        if f.origin is None or f.origin.get("kind") == "signal":
            f.origin = item
        f.evidence.insert(0, (path, line, text))
    else:
        f.consequences.append(item)
        if re.search(r"[Tt]imed? ?out", msg):
            f.timed_out = True


def add_log_errors(facts: StderrFacts, errors: Table) -> None:
    """Fold NCCL / watchdog error lines from NCCL logs (hang inputs' `errors`) into the facts.

    An NCCL error on a rank that did not itself time out is that rank's origin; a timeout makes the rank a waiter;
    a 'remote error' seen from a rank that timed out is someone else's failure.
    """
    if errors is None or errors.empty:
        return
    timed = set(int(r) for r in errors["rank"][errors["kind"] == "timeout"])
    for x in errors.itertuples(index=False):
        r = int(x.rank)
        f = facts.rank(r)
        item = _item(str(x.file), 10_000_000 + int(x.line), kind=str(x.kind), text=str(x.text), line=int(x.line),
                     message=str(x.text), reason=str(x.text), group=str(x.group), seq=int(x.seq))
        if x.kind == "timeout":
            f.timed_out = True
            f.consequences.append(item)
        elif x.kind in ("nccl_error", "dist_backend_error") and r not in timed:
            item["kind"] = "nccl_error"
            if f.origin is None:
                f.origin = item
            f.evidence.append((item["file"], item["line"], item["text"]))
        else:
            f.consequences.append(item)


def _gib(n: int) -> str:
    return f"{n / 2 ** 30:.2f} GiB"


def origin_sentence(r: int, o: dict) -> str:
    """One plain sentence for a rank's origin failure, with the numbers its line carries."""
    k = o.get("kind", "")
    if k == "gloo_size_mismatch":
        got, want = o.get("bytes_a", -1), o.get("bytes_b", -1)
        size = f": it received {got} bytes where its own buffer holds {want}" if got >= 0 and want >= 0 else ""
        return f"gloo's size check aborted rank {r} (SIGABRT){size}"
    if k == "gloo_invalid_tensor_size":
        return f"rank {r} passed tensors of the wrong size to {o.get('op') or 'a collective'} ({o.get('reason', '')})"
    if k == "oom":
        alloc, free, want = o.get("allocated", -1), o.get("reserved_free", -1), o.get("requested", -1)
        parts = [f"rank {r} ran out of GPU memory"]
        if want >= 0:
            parts.append(f"asking for {_gib(want)}")
        if alloc >= 0 and free >= 0:
            parts.append(f"with {_gib(alloc)} allocated by PyTorch and {_gib(free)} reserved but unallocated")
            if want >= 0 and free >= want:  # the request fit in memory PyTorch already held, only not in one piece
                parts.append("— the reserved-but-free memory alone would hold the request, so it is fragmented: try "
                             "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
        return " ".join(parts)
    if k == "host_oom_kill" or (k == "signal" and "SIGKILL" in o.get("message", "") + o.get("text", "")):
        return f"rank {r} was killed by SIGKILL (the host's OOM killer, or the scheduler)"
    if k == "signal":
        return f"rank {r} died of {o.get('message') or o.get('reason') or 'a signal'}"
    if k == "nccl_error":
        ver = f" (NCCL {o['nccl_version']})" if o.get("nccl_version") else ""
        return f"rank {r} hit an NCCL error{ver}: {(o.get('reason') or o.get('text', ''))[:200]}"
    if k in ("cuda_illegal_memory", "cuda_device_assert", "cuda_error", "xid", "ecc"):
        dev = f" on GPU {o['device']}" if o.get("device") else ""
        return f"rank {r} hit a GPU error{dev}: {(o.get('reason') or o.get('text', ''))[:200]}"
    if k == "exception":
        where = f" at {o['where']}" if o.get("where") else ""
        return f"rank {r} raised {o.get('exc_type') or 'an exception'}: {o.get('message', '')[:200]}{where}"
    return f"rank {r}: {o.get('text', '')[:240]}"
