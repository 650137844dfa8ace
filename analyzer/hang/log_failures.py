"""The last word of the verdict: a log that shows a failure never reads as "OK".

The verdict (analyzer/hang/verdict.py) builds diagnoses from ranks: a line with no rank tag (a bare traceback
someone kept, an OOM kill, torchrun's "failed (exitcode: -9) local_rank: 2") may find no rank to hang on and leave
the list empty. When nothing else was found, this module turns what the logs do show into one diagnosis that names
no rank: the process's own failure (an exception in user code, a CUDA error, a fatal signal) at 0.5, or what it
noticed of someone else's (a timeout, a peer that closed its connection) at 0.3 — with the lines as evidence. Two
cases say more: a rank torchrun's table shows dying on its own (a fatal signal, an exit code other than Python's 1)
while its output shows no one else's failure is named (0.6); a signal sent to the launcher itself means the job was
stopped from outside (no culprit rank).

`apply(diags, logs)` is called by analyzer/hang/analysis.py after the other stderr merges.
"""
from __future__ import annotations

from analyzer.hang.diagnosis import FIX, HangDiagnosis
from analyzer.hang.stderr_facts import _is_origin
from rules.phrases import ranks_text
from parsers.table import isin

#: event kinds that show something went wrong (parsers/stderr_events.py); informational kinds are left out
FAILURE_KINDS = {"gloo_size_mismatch", "gloo_invalid_tensor_size", "cuda_illegal_memory", "cuda_device_assert",
                 "cuda_error", "xid", "ecc", "oom", "host_oom_kill", "connection_closed", "connection_reset",
                 "recv_timeout", "send_timeout", "gloo_timeout", "watchdog_timeout", "watchdog_stuck",
                 "store_timeout", "monitored_barrier", "collective_mismatch", "nccl_error", "dist_backend_error",
                 "signal", "child_failed", "exception", "nccl_teardown", "rendezvous_eaddrinuse",
                 "rendezvous_refused"}
MAX_EVIDENCE = 6


def _lines(logs: list) -> list[dict]:
    """Every failure line of the logs (events of FAILURE_KINDS, tracebacks' exception lines, failed table rows)."""
    out: list[dict] = []
    for log in logs:
        path = str(getattr(log, "path", ""))
        ev = getattr(log, "events", None)
        if ev is not None and len(ev):
            sel = ev[isin(ev["kind"].astype(str), FAILURE_KINDS)]
            for x in sel.itertuples(index=False):
                kind, reason, code = str(x.kind), str(x.reason), int(x.code)
                if kind == "signal" and "SIGTERM" in reason and "launcher" not in reason:
                    continue  # the launcher stopping the survivors
                if kind == "signal" and "launcher" in reason:
                    kind = "launcher_signal"  # the launcher itself was sent a signal: stopped from outside
                origin = (_exit_is_own(code) if kind == "child_failed" else kind == "signal" or
                          _is_origin(kind, str(x.exc_type), str(x.text), reason))
                out.append(dict(file=path, line=int(x.line), kind=kind, text=str(x.text), rank=int(x.rank),
                                origin=origin))
        tb = getattr(log, "tracebacks", None)
        if tb is not None and len(tb):
            for x in tb[(tb["exc_type"].astype(str) != "") & ~tb["chained"].astype(bool)].itertuples(index=False):
                text = f"{x.exc_type}: {x.message}".strip()
                where = f" (at {x.user_file}:{x.user_line})" if str(x.user_file) else ""
                out.append(dict(file=path, line=int(x.end_line), kind="exception", text=text + where, rank=int(x.rank),
                                origin=_is_origin("exception", str(x.exc_type), text, "")))
        fails = getattr(log, "failures", None)
        if fails is not None and len(fails):
            for x in fails.itertuples(index=False):
                code = int(x.exitcode)
                if code in (0, -15) or code == -1 and not str(x.signal):
                    continue
                who = f"rank {x.rank}" if int(x.rank) >= 0 else "a worker"
                out.append(dict(file=path, line=int(x.line), kind="child_failed", origin=_exit_is_own(code),
                                rank=int(x.rank),
                                text=f"torchrun: {who} exitcode {code}" + (f" ({x.signal})" if str(x.signal) else "")))
    one = {}
    for x in out:  # one line per (file, line): a traceback's exception (with its user frame) over the event row
        key = (x["file"], x["line"])
        if key not in one or (x["kind"] == "exception" and " (at " in x["text"]):
            one[key] = dict(x, origin=x["origin"] or one.get(key, {}).get("origin", False))
    return sorted(one.values(), key=lambda d: (d["file"], d["line"]))


def _exit_is_own(code: int) -> bool:
    """An exit that is the process's own failure: a fatal signal, or a code it chose (not Python's 1 after an
    exception, whose cause is in its own output, nor the launcher's SIGTERM)."""
    return (code < 0 and code not in (-1, -15)) or code > 1


def diagnosis(logs: list) -> HangDiagnosis | None:
    """One culprit-less diagnosis from the failure lines, or None when the logs show no failure."""
    lines = _lines(list(logs))
    if not lines:
        return None
    outside = [x for x in lines if x["kind"] == "launcher_signal"]
    origins = [x for x in lines if x["origin"] and x["kind"] != "launcher_signal"]
    noticed = {x["rank"] for x in lines if not x["origin"] and x["rank"] >= 0 and x["kind"] != "child_failed"}
    # ranks torchrun's table (or a signal) shows dying on their own, whose own output shows no one else's failure
    culprits = sorted({x["rank"] for x in origins if x["rank"] >= 0} - noticed)
    shown = (outside or origins or lines)[:MAX_EVIDENCE]
    first = shown[0]["text"][:300]
    if outside:
        cause = (f"the job was stopped from outside: the launcher itself received a signal ({first}) — a "
                 "scheduler's time limit, preemption, scancel or a user's Ctrl-C; no rank failed on its own")
        conf, culprits = 0.5, []
    elif culprits:
        cause = (f"{ranks_text(culprits)} died on {'their' if len(culprits) > 1 else 'its'} own ({first}) while "
                 "no other failure shows before it; what made it exit is not in the inputs (read its own log)")
        conf = 0.6
    elif origins:
        cause = (f"the logs show a process failing on its own ({first}), but not which rank it was (no rank tag, "
                 "no per-rank file name): read the log around that line")
        conf = 0.5
    else:
        cause = (f"the logs show a process that noticed someone else's failure ({first}): a peer exited, crashed "
                 "or stalled, and its own output is not among the inputs")
        conf = 0.3
    return HangDiagnosis(kind="crashed_rank", process_group="", pg_desc="", seq=None, op="", culprit_ranks=culprits,
                         waiting_ranks=sorted(noticed - set(culprits)), cause=cause, confidence=conf, source="stderr",
                         evidence=[(x["file"], x["line"], x["text"][:400]) for x in shown], fix=FIX["crashed_rank"])


def apply(diags: list[HangDiagnosis], logs: list) -> list[HangDiagnosis]:
    """`diags` unchanged when it holds anything; else the one diagnosis the failure lines make (if any)."""
    if diags:
        return diags
    d = diagnosis(list(logs))
    return [d] if d is not None else []

