"""Per-rank failure facts from parsed stderr (parsers/torch_stderr.py): who died, how, and what came first.

Every recognised line is either an *origin* (something went wrong on this rank: a Python exception in user
code, a gloo size check, a CUDA error, out of memory, a signal other than the launcher's SIGTERM) or a
*consequence* (this rank noticed someone else's failure: timeouts, connection closed/reset by peer, a remote
error, the launcher's SIGTERM). Only origins make a rank a culprit; consequences make it a waiter, and a timeout
that names its peer says on whom it waited. torchrun's "Root Cause (first observed failure)" names the first
child it reaped, which is often not the first that failed: it is kept as evidence, never as the verdict.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

ORIGIN_KINDS = {"gloo_size_mismatch", "gloo_invalid_tensor_size", "cuda_illegal_memory", "cuda_device_assert",
                "cuda_error", "xid", "ecc", "oom", "host_oom_kill"}
CONSEQUENCE_KINDS = {"connection_closed", "connection_reset", "recv_timeout", "send_timeout", "gloo_timeout",
                     "watchdog_timeout", "sigterm_sent", "store_timeout"}
RENDEZVOUS_KINDS = {"rendezvous_eaddrinuse", "rendezvous_refused"}
NCCL_CONSEQUENCE_REASONS = ("remote process exited", "network error", "timeout", "timed out", "aborted")
DIST_EXC = re.compile(r"(?:^|\.)(?:RuntimeError|DistBackendError|DistError|DistNetworkError|DistStoreError|"
                      r"ChildFailedError|SignalException|TimeoutError|ConnectionError|ConnectionResetError|"
                      r"BrokenPipeError|KeyboardInterrupt|SystemExit)$")
CONSEQUENCE_TEXT = re.compile(r"[Tt]imed out|[Tt]imeout|[Cc]onnection (?:closed|reset|refused)|by peer|"
                              r"remote process exited|[Ss]ignal 15|SIGTERM|Broken pipe|NCCL communicator was aborted|"
                              r"watchdog")
ORIGIN_TEXT = re.compile(r"Received data size doesn't match|invalid tensor size|out of memory|illegal memory|"
                         r"device-side assert|CUDA error|ECC|Xid")
SIGNALS_ORIGIN = {"SIGABRT", "SIGKILL", "SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL"}


@dataclass
class RankFailure:
    """What stderr says about one rank."""

    rank: int
    died: bool = False
    how: str = ""                         # 'SIGABRT', 'exit code 1', ...
    origin: dict | None = None            # the first origin line: kind, text, file, line, exc_type, message, where
    consequences: list[dict] = field(default_factory=list)
    peers: list[int] = field(default_factory=list)
    timed_out: bool = False
    root_cause_by_launcher: bool = False
    evidence: list[tuple[str, int | None, str]] = field(default_factory=list)


@dataclass
class StderrFacts:
    """Failures per rank, the launcher's root-cause pick, rendezvous failures and the job's first origin."""

    ranks: dict[int, RankFailure] = field(default_factory=dict)
    launcher_root: int | None = None
    rendezvous: list[dict] = field(default_factory=list)
    unranked_origins: list[dict] = field(default_factory=list)

    def origin_ranks(self) -> list[int]:
        """Ranks with an origin failure, in the order their first origin line appears."""
        rows = [(f.origin.get("order", 0), r) for r, f in self.ranks.items() if f.origin]
        return [r for _, r in sorted(rows)]


def _cell(x: Any, default: Any = "") -> Any:
    return default if x is None or (isinstance(x, float) and x != x) else x


def _is_origin(kind: str, exc_type: str, text: str, reason: str) -> bool:
    """Origin vs consequence for one event (module docstring)."""
    if kind in ORIGIN_KINDS:
        return True
    if kind in CONSEQUENCE_KINDS or kind in RENDEZVOUS_KINDS:
        return False
    if kind == "nccl_error":
        return not any(w in reason.lower() for w in NCCL_CONSEQUENCE_REASONS)
    if kind in ("exception", "dist_backend_error"):
        if ORIGIN_TEXT.search(text):
            return True
        if CONSEQUENCE_TEXT.search(text):
            return False
        return not DIST_EXC.search(exc_type or "")
    return False


def _rank_of(v: Any) -> int:
    try:
        r = int(v)
    except (TypeError, ValueError):
        return -1
    return r if 0 <= r < 1 << 20 else -1


def stderr_facts(logs: list) -> StderrFacts:
    """Fold every StderrLog's events, tracebacks and failure table into per-rank failure facts."""
    out = StderrFacts()
    order = 0
    for log in logs:
        path = str(getattr(log, "path", ""))
        ev = getattr(log, "events", None)
        tb = getattr(log, "tracebacks", None)
        fails = getattr(log, "failures", None)
        rows = []
        if ev is not None and len(ev):
            rows += [("event", x) for x in ev.to_dict("records")]
        if tb is not None and len(tb):
            rows += [("traceback", x) for x in tb.to_dict("records")]
        rows.sort(key=lambda kx: int(_cell(kx[1].get("line"), 0) or 0))
        for what, x in rows:
            order += 1
            r = _rank_of(x.get("rank"))
            line = int(_cell(x.get("line"), 0) or 0) or None
            if what == "traceback":
                _traceback(out, r, x, path, line, order)
                continue
            kind = str(_cell(x.get("kind")))
            text = str(_cell(x.get("text")))
            exc, reason = str(_cell(x.get("exc_type"))), str(_cell(x.get("reason")))
            item = dict(kind=kind, text=text, file=path, line=line, exc_type=exc, message=str(_cell(x.get("message"))),
                        where=str(_cell(x.get("where"))), reason=reason, order=order,
                        peer=_rank_of(x.get("peer")), group=str(_cell(x.get("group"))),
                        seq=int(_cell(x.get("seq"), -1) if str(_cell(x.get("seq"), -1)).lstrip("-").isdigit() else -1),
                        bytes_a=_cell(x.get("bytes_a"), None), bytes_b=_cell(x.get("bytes_b"), None))
            if kind in RENDEZVOUS_KINDS:
                out.rendezvous.append(item)
                continue
            if r < 0:
                if _is_origin(kind, exc, text, reason):
                    out.unranked_origins.append(item)
                continue
            f = out.ranks.setdefault(r, RankFailure(r))
            if kind == "signal" or kind == "child_failed":
                sig = str(_cell(x.get("reason")) or _cell(x.get("message")))
                _death(f, sig, item)
                continue
            if _is_origin(kind, exc, text, reason):
                if f.origin is None:
                    f.origin = item
                f.evidence.append((path, line, text))
            elif kind in CONSEQUENCE_KINDS or kind in ("exception", "dist_backend_error", "nccl_error"):
                f.consequences.append(item)
                if "timeout" in kind or "timed out" in text.lower():
                    f.timed_out = True
                if item["peer"] >= 0 and item["peer"] != r:
                    f.peers.append(item["peer"])
        if fails is not None and len(fails):
            for x in fails.to_dict("records"):
                r = _rank_of(x.get("rank"))
                if r < 0:
                    continue
                f = out.ranks.setdefault(r, RankFailure(r))
                sig = str(_cell(x.get("signal")))
                code = _cell(x.get("exitcode"), None)
                how = sig or (f"exit code {code}" if code not in (None, "", 0) else "")
                item = dict(kind="child_failed", text=f"torchrun: rank {r} exitcode {code}" + (f" ({sig})" if sig else ""),
                            file=path, line=int(_cell(x.get("line"), 0) or 0) or None, order=order)
                if how:
                    _death(f, how, item)
                if bool(_cell(x.get("root_cause"), False)):
                    out.launcher_root = r
                    f.root_cause_by_launcher = True
    return out


def _death(f: RankFailure, how: str, item: dict) -> None:
    """Record that a rank died and how; a signal other than SIGTERM with no other origin is itself the origin."""
    f.died = True
    f.how = f.how or how
    f.evidence.append((item["file"], item["line"], item["text"]))
    if f.origin is None and any(s in how for s in SIGNALS_ORIGIN):
        f.origin = dict(item, kind="signal", exc_type="", message=how)


def _traceback(out: StderrFacts, r: int, x: dict, path: str, line: int | None, order: int) -> None:
    """An uncaught traceback: the rank died of it; its exception is an origin unless it reports someone else."""
    if r < 0:
        return
    f = out.ranks.setdefault(r, RankFailure(r))
    exc, msg = str(_cell(x.get("exc_type"))), str(_cell(x.get("message")))
    if bool(_cell(x.get("chained"), False)):
        return
    where = ""
    if _cell(x.get("user_file")):
        where = f"{x['user_file']}:{_cell(x.get('user_line'), '')} {_cell(x.get('user_func'))}".strip()
    text = f"{exc}: {msg}" + (f" (at {where})" if where else "")
    item = dict(kind="exception", text=text, file=path, line=line, exc_type=exc, message=msg, where=where,
                reason="", order=order, peer=-1, group="", seq=-1, bytes_a=None, bytes_b=None)
    f.died = True
    f.how = f.how or f"uncaught {exc}"
    if _is_origin("exception", exc, f"{exc}: {msg}", ""):
        if f.origin is None or f.origin.get("kind") in ("exception", "signal"):
            f.origin = f.origin if (f.origin and f.origin.get("kind") != "signal") else item
        f.evidence.append((path, line, text))
    else:
        f.consequences.append(item)
        if CONSEQUENCE_TEXT.search(msg) and re.search(r"[Tt]imed? ?out", msg):
            f.timed_out = True


def add_log_errors(facts: StderrFacts, errors: pd.DataFrame) -> None:
    """Fold NCCL / watchdog error lines from NCCL logs (hang inputs' `errors`) into the facts.

    An NCCL error on a rank that did not itself time out is that rank's origin; a timeout makes the rank a waiter;
    a 'remote error' seen from a rank that timed out is someone else's failure.
    """
    if errors is None or errors.empty:
        return
    timed = set(int(r) for r in errors.loc[errors["kind"] == "timeout", "rank"])
    for x in errors.itertuples(index=False):
        r = int(x.rank)
        f = facts.ranks.setdefault(r, RankFailure(r))
        item = dict(kind=str(x.kind), text=str(x.text), file=str(x.file), line=int(x.line), exc_type="",
                    message=str(x.text), where="", reason=str(x.text), order=10_000_000 + int(x.line), peer=-1,
                    group=str(x.group), seq=int(x.seq), bytes_a=None, bytes_b=None)
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
