"""PyTorch ProcessGroupNCCL / c10d stderr lines: watchdog timeouts, PG status, NCCL errors, teardown.

Pure line classification (reference nccl-log-formats.md §4); `parse_pytorch_line` returns watchdog rows.
"""
from __future__ import annotations

import re

from parsers.nccl_envelope import int64

# Cheap substring guards: a line reaches the regexes only if it contains one of these.
PT_MARKERS = (
    "NCCL", "nccl", "atchdog", "WorkNCCL", "DistBackendError", "data inconsistency", "Last error", "ProcessGroup",
    "TIMEOUT(ms)", "[PG ", "Error: ", "Exception: ",
)
PT_PREFIX = re.compile(
    r"(?:\[rank(?P<grank>\d+)\]:)?\[(?P<sev>[EWIF])(?:(?P<mmdd>\d{3,4}) (?P<time>\d{2}:\d{2}:\d{2}\.\d+))?"
    r" ?(?:\d+ )?(?P<file>[\w.]+):(?P<line>\d+)\] ?"
)
GRANK_ONLY = re.compile(r"\[rank(?P<grank>\d+)\]: ?")
PG_PREFIX = re.compile(
    r"\[PG (?:ID )?(?P<pgid>\d+)(?: PG GUID (?P<guid>[^ \]()]+))?(?: ?\((?P<desc>[^)]{0,1024})\))? Rank (?P<rank>-?\d+)\]"
)
RANK_TAG = re.compile(r"\[Rank (?P<rank>-?\d+)\]")
WORK = re.compile(
    r"WorkNCCL\(SeqNum=(?P<seq>-?\d+), OpType=(?P<op>\w+)(?:, NumelIn=(?P<numel_in>-?\d+), NumelOut=(?P<numel_out>-?\d+))?"
    r"(?:, Timeout\(ms\)=(?P<timeout_ms>\d+))?\)"
)
RAN_FOR = re.compile(r"ran for (?P<ran_ms>\d+) milliseconds before timing out")
LAST_WORK = re.compile(r"last (?P<what>enqueued|completed|started)(?: NCCL)? work: (?P<seq>-?\d+)")
FAILED_AT = re.compile(r"(?:detected by watchdog at work(?: sequence id)?|Timeout at NCCL work): (?P<seq>-?\d+)")
NCCL_ERR = re.compile(
    r"NCCL error(?: in: (?P<where>\S+?):(?P<line>\d+),|:) (?P<reason>(?:(?!NCCL error)[^,]){1,512}?)"
    r"(?: \(run with NCCL_DEBUG=\w+ for details\))?, NCCL version (?P<ver>[\d.]+)"
)
NCCL_ERR_OLD = re.compile(r"NCCL Error (?P<code>\d+): (?P<reason>.+)$")
ERR_DETAIL = re.compile(r"\b(?P<name>nccl[A-Z]\w*(?:Error|Usage|Argument)): ")
PG_OPTION = re.compile(r"^\s*(?:NCCL_[A-Z_]+|TIMEOUT\(ms\)|USE_HIGH_PRIORITY_STREAM): \S+\s*$")
# A Python exception line (e.g. a crashed rank's `RuntimeError: CUDA error: …`), after any launcher prefix.
EXC = re.compile(r"(?:^|(?<=[\s:>\]|]))(?P<exc>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception)): ")
TIMEOUT_OPT = re.compile(r"TIMEOUT\(ms\): (?P<ms>\d+)")
_TEARDOWN = (
    "Some NCCL operations have failed or timed out", "To avoid data inconsistency",
    "watchdog thread terminated with exception", "terminate called after throwing an instance of",
    "Exception raised from checkTimeout", "what():",
)

COLUMNS = (
    "rank", "global_rank", "pid", "launcher_rank", "pg_id", "pg_guid", "pg_desc", "kind", "seq", "failed_seq",
    "op_type", "numel_in", "numel_out", "timeout_ms", "ran_for_ms", "severity", "timestamp", "nccl_version",
    "message", "line",
)


def parse_pytorch_line(text: str) -> tuple[str, list[dict]]:
    """Classify one PyTorch/c10d line; returns (launcher prefix text, watchdog rows without `line`)."""
    m = PT_PREFIX.search(text)
    if m:
        prefix, body = text[: m.start()], text[m.end():]
        grank, sev = int64(m.group("grank")), m.group("sev")
        ts = f"{m.group('mmdd')} {m.group('time')}" if m.group("mmdd") else ""
    else:
        g = GRANK_ONLY.search(text)
        if g:
            prefix, body, grank = text[: g.start()], text[g.end():], int64(g.group("grank"))
        else:
            prefix, body, grank = "", text, -1
        sev, ts = "", ""
    kinds = _kinds(body)
    if not kinds:
        e = EXC.search(text) if ("Error: " in text or "Exception: " in text) else None
        if e is None or m is not None:
            return prefix, []
        prefix, body, kinds = text[: e.start()], text[e.start():], {"exception": -1}
    base = {"global_rank": grank, "severity": sev, "timestamp": ts, "message": body.strip(),
            "pg_id": -1, "pg_guid": "", "pg_desc": "", "rank": -1, "seq": -1, "failed_seq": -1, "op_type": "",
            "numel_in": -1, "numel_out": -1, "timeout_ms": -1, "ran_for_ms": -1, "nccl_version": ""}
    pg = PG_PREFIX.search(body)
    if pg:
        base.update(pg_id=int64(pg.group("pgid")), pg_guid=pg.group("guid") or "", pg_desc=pg.group("desc") or "",
                    rank=int64(pg.group("rank")))
    else:
        r = RANK_TAG.search(body)
        if r:
            base["rank"] = int64(r.group("rank"))
    if base["rank"] < 0:
        base["rank"] = grank
    w = WORK.search(body)
    if w:
        base.update(seq=int64(w.group("seq")), op_type=w.group("op"), numel_in=int64(w.group("numel_in")),
                    numel_out=int64(w.group("numel_out")), timeout_ms=int64(w.group("timeout_ms")))
    rf = RAN_FOR.search(body)
    if rf:
        base["ran_for_ms"] = int64(rf.group("ran_ms"))
    fa = FAILED_AT.search(body)
    if fa:
        base["failed_seq"] = int64(fa.group("seq"))
    ne = NCCL_ERR.search(body)
    if ne:
        base["nccl_version"] = ne.group("ver")
    t = TIMEOUT_OPT.search(body)
    if t and base["timeout_ms"] < 0:
        base["timeout_ms"] = int64(t.group("ms"))
    rows = []
    for kind in kinds:
        row = dict(base, kind=kind)
        if kind.startswith("last_"):
            row["seq"] = kinds[kind]
        rows.append(row)
    return prefix, rows


def _kinds(body: str) -> dict[str, int]:
    """Map of row kinds this body yields (value = seq for last_* kinds, else -1); empty when irrelevant."""
    out: dict[str, int] = {}
    if any(t in body for t in _TEARDOWN):
        out["teardown"] = -1
    elif "Watchdog caught collective" in body or "milliseconds before timing out" in body:
        out["timeout"] = -1
    if "last " in body and " work: " in body:
        for lw in LAST_WORK.finditer(body):
            out[f"last_{lw.group('what')}"] = int64(lw.group("seq"))
    if "DistBackendError" in body and "terminate called" not in body:
        out["dist_backend_error"] = -1
    elif "NCCL error" in body or "NCCL Error " in body:
        if NCCL_ERR.search(body) or NCCL_ERR_OLD.search(body) or "raised the following async exception" in body:
            out["nccl_error"] = -1
    d = ERR_DETAIL.search(body) if "nccl" in body else None
    if d:
        out["remote_error" if d.group("name") == "ncclRemoteError" else "error_detail"] = -1
    if not out:
        if "watchdog thread started" in body:
            out["watchdog_started"] = -1
        elif "ProcessGroupNCCL initialized with following options" in body or "ProcessGroupNCCL initialization options" in body:
            out["pg_init"] = -1
        elif PG_OPTION.match(body):
            out["pg_option"] = -1
        elif body.lstrip().startswith("Last error:"):
            out["last_error"] = -1
        elif "Stack trace of the failed collective" in body:
            out["stack_trace"] = -1
    return out
