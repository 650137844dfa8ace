"""NCCL RAS output (NCCL 2.24+: the `ncclras` client's text report, its JSON from 2.28.7, monitor-mode lines) → tables.

RAS asks every process of a job, over its own network, for the state of each NCCL communicator: which ranks
answered, their status, asynchronous errors and how many operations of each collective type each rank has
*launched* (not completed). The text layout follows NCCL's own format strings (src/ras/client_support.cc):
the communicators table (``Group  Comms  Nodes  Ranks … Status  Errors``), then ``Errors`` (INCOMPLETE, DEAD,
``#<group>-<comm> (<hash>) INCOMPLETE|ERROR`` blocks) and ``Warnings`` (TIMEOUT, ``#g-c (hash) MISMATCH``
blocks with ``N ranks have launched up to operation X`` and the outlier ranks listed one by one). The parser
keeps what the text says and judges nothing (analyzer/hang/ras.py does).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import orjson

from parsers.errors import InputError
from parsers.safe_open import open_input
from parsers.table import Table

#: a saved report larger than this is not a RAS report a person saved (a 10,000-rank verbose one is a few MB)
MAX_BYTES = 64 << 20
MAX_LINE = 4096
COLL_OPS = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")

COHORT_COLUMNS = ("comm", "comm_hash", "op", "launched", "n_ranks", "line", "text")
RANK_COLUMNS = ("comm", "comm_hash", "rank", "context", "op", "launched", "status", "error", "gpu", "pid", "host",
                "line")
PROCESS_COLUMNS = ("state", "pid", "host", "gpus", "line")
GROUP_COLUMNS = ("group", "comms", "nodes", "ranks_per_node", "ranks_per_comm", "ranks_in_group", "status",
                 "errors", "line")
COMM_COLUMNS = ("comm", "comm_hash", "size", "kind", "line")
EVENT_COLUMNS = ("time", "event", "pid", "host", "details", "line")
_INTS = {"launched", "n_ranks", "rank", "pid", "line", "group", "comms", "nodes", "ranks_per_comm", "ranks_in_group",
         "size"}


@dataclass
class NcclRas:
    """One saved RAS report. `cohorts`: per communicator and collective type, how many ranks launched up to which
    operation; `ranks`: the ranks the report names one by one (comm ranks, not global ranks), with the context
    they were listed under (`count`, `status`, `missing`, `error`); `processes`: job processes reported missing or
    dead (pid, node); `comms`: each communicator block (`#g-c`, hash, its size where known, INCOMPLETE / ERROR /
    MISMATCH); `events`: monitor-mode lines. Every table keeps its columns when empty."""

    path: str
    format: str
    nccl_version: str
    timestamp: str
    job: dict
    groups: Table
    comms: Table
    cohorts: Table
    ranks: Table
    processes: Table
    events: Table
    timeouts: int = 0
    warnings: list[str] = field(default_factory=list)


_TEXT_MARKS = (re.compile(rb"^Job summary\r?\n=+", re.M), re.compile(rb"^Communicators\.\.\.", re.M),
               re.compile(rb"^Group +Comms +Nodes +Ranks", re.M))
_MONITOR = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\] (PEER_[A-Z_]+|[A-Z][A-Z_]{3,40}): ?(.*)$")
_MONITOR_B = re.compile(rb"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] PEER_[A-Z_]+: ", re.M)


def looks_like_ras(head: bytes) -> bool:
    """True for a saved `ncclras` report: its text headings, its JSON document, or monitor-mode PEER_* lines."""
    s = head.lstrip()
    if s[:1] == b"{":
        return b'"communicators"' in head and b'"nccl_version"' in head and (
            b'"collective_counts"' in head or b'"missing_ranks' in head or b'"communicators_count"' in head)
    hits = sum(1 for rx in _TEXT_MARKS if rx.search(head))
    return hits >= 2 or len(_MONITOR_B.findall(head)) >= 2


def parse_ras(path: str) -> NcclRas:
    """Read one RAS report (text, JSON or monitor lines); raises InputError only when nothing can be read."""
    with open_input(path) as fh:
        blob = fh.read(MAX_BYTES + 1)
    warnings: list[str] = []
    if len(blob) > MAX_BYTES:
        blob = blob[:MAX_BYTES]
        warnings.append(f"{path}: larger than {MAX_BYTES >> 20} MB; read the first {MAX_BYTES >> 20} MB")
    if blob.lstrip()[:1] == b"{":
        return _parse_json(path, blob, warnings)
    return _parse_text(path, blob.decode("utf-8", "replace"), warnings)


# ---------------------------------------------------------------- text
_VERSION = re.compile(r"^NCCL version (\S+) compiled with CUDA")
_GROUP_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+(?:-\d+)?)\s+(\d+)\s+(\d+)\s+"
                        r"(NOCOMM|INIT|RUNNING|FINALIZE|ABORT)\s+([A-Z,]+)\s*$")
_BLOCK = re.compile(r"^#(\d+)-(\d+) \(([0-9a-fA-F]+)\) (INCOMPLETE|ERROR|MISMATCH)\s*$")
_DIFF_COUNTS = re.compile(r"^\s*Communicator ranks have different (\w+) operation counts")
_DIFF_STATUS = re.compile(r"^\s*Communicator ranks have different status")
_COHORT = re.compile(r"^\s*(\d+) ranks have launched up to operation (\d+)\s*$")
_COHORT_NONE = re.compile(r"^\s*(\d+) ranks have not launched any operations\s*$")
_RANK_LAUNCHED = re.compile(r"^\s*Rank (\d+) has launched up to operation (\d+) -- (.*)$")
_RANK_NONE = re.compile(r"^\s*Rank (\d+) has not launched any operations -- (.*)$")
_RANK_STATUS = re.compile(r"^\s*Rank (\d+) has status (\w+) -- (.*)$")
_RANK_REPORTED = re.compile(r"^\s*Rank (\d+) reported (.+?) -- (.*)$")
_RANK_PLAIN = re.compile(r"^\s*Rank (\d+) -- (.*)$")
_N_STATUS = re.compile(r"^\s*(\d+) ranks have status (\w+)\s*$")
_N_REPORTED = re.compile(r"^\s*(\d+) ranks reported (.+?)\s*$")
_MISSING_RANKS = re.compile(r"^\s*Missing communicator data from (\d+) ranks?\s*$")
_MISSING_PROCS = re.compile(r"^\s*Missing communicator data from (\d+) job process(?:es)?\s*$")
_DEAD = re.compile(r"^\s*(\d+) job process(?:es are| is) considered dead")
_PROCESS = re.compile(r"^\s*Process (\d+) on node (\S+) managing GPUs? (.+?)\s*$")
_TIMEOUT = re.compile(r"^\s*Encountered (\d+) communication timeouts? while gathering")
_WHERE = re.compile(r"GPU (.+?) managed by process (\d+) on node (\S+)")
_JOB_FULL = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*$")
_JOB_TOTAL = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s*$")


_MAX_INT = 2 ** 62


def _int_of(text: str) -> int:
    """A count or rank from the report; a number too large for any real job reads as -1 (unknown)."""
    return int(text) if len(text) <= 18 else -1


def _where(rest: str) -> tuple[str, int, str]:
    m = _WHERE.search(rest)
    return (m.group(1), _int_of(m.group(2)), m.group(3)) if m else ("", -1, "")


def _parse_text(path: str, text: str, warnings: list[str]) -> NcclRas:
    version, job = "", {}
    groups, comms, cohorts, ranks, procs, events = [], [], [], [], [], []
    timeouts = 0
    block: dict | None = None  # the current #g-c block
    context = ""  # count | status | missing | error | procs_missing | procs_dead
    ctx_value: dict = {}
    expect_job = ""
    sections: set[str] = set()
    for ln, raw in enumerate(text.splitlines(), 1):
        line = raw[:MAX_LINE].rstrip()
        if not line.strip():
            continue
        if m := _VERSION.match(line):
            version = m.group(1)
            continue
        if "per node  per process    (total)  (total)" in line:
            expect_job = "full"
            continue
        if line.startswith("(total)") and "(total)" in line[7:]:
            expect_job = "total"
            continue
        if expect_job:
            m = (_JOB_FULL if expect_job == "full" else _JOB_TOTAL).match(line)
            if m:
                v = [_int_of(x) for x in m.groups()]
                job = (dict(nodes=v[0], processes_per_node=v[1], gpus_per_process=v[2], processes=v[3], gpus=v[4])
                       if expect_job == "full" else dict(nodes=v[0], processes=v[1], gpus=v[2]))
            expect_job = ""
            continue
        if m := _MONITOR.match(line):
            _, pid, host = _where(m.group(3))
            pm = _PROCESS.search(m.group(3)) or re.search(r"[Pp]rocess (\d+) on node (\S+)", m.group(3))
            if pm and pid < 0:
                pid, host = _int_of(pm.group(1)), pm.group(2)
            events.append(dict(time=m.group(1), event=m.group(2), pid=pid, host=host, details=m.group(3), line=ln))
            continue
        if m := _GROUP_ROW.match(line):
            groups.append(dict(group=_int_of(m.group(1)), comms=_int_of(m.group(2)), nodes=_int_of(m.group(3)),
                               ranks_per_node=m.group(4), ranks_per_comm=_int_of(m.group(5)),
                               ranks_in_group=_int_of(m.group(6)), status=m.group(7), errors=m.group(8), line=ln))
            continue
        if m := _BLOCK.match(line):
            g = _int_of(m.group(1))
            size = next((r["ranks_per_comm"] for r in groups if r["group"] == g), -1)
            block = dict(comm=f"#{g}-{m.group(2)}", comm_hash=m.group(3).lower(), size=size, kind=m.group(4),
                         line=ln)
            comms.append(block)
            context, ctx_value = ("missing" if block["kind"] == "INCOMPLETE" else ""), {}
            continue
        stripped = line.strip()
        if stripped in ("Errors", "Warnings"):
            sections.add(stripped)
        if stripped in ("INCOMPLETE", "DEAD", "TIMEOUT", "Errors", "Warnings") or set(stripped) == {"="}:
            block = None if stripped in ("INCOMPLETE", "DEAD", "TIMEOUT") else block
            context = {"INCOMPLETE": "procs_missing", "DEAD": "procs_dead"}.get(stripped, "")
            continue
        if m := _TIMEOUT.match(line):
            timeouts += _int_of(m.group(1))
            continue
        if m := _DEAD.match(line):
            context = "procs_dead"
            continue
        if m := _MISSING_PROCS.match(line):
            context = "procs_missing"
            continue
        if m := _PROCESS.match(line):
            if context in ("procs_missing", "procs_dead"):
                procs.append(dict(state="dead" if context == "procs_dead" else "missing", pid=_int_of(m.group(1)),
                                  host=m.group(2), gpus=m.group(3), line=ln))
            continue
        if block is None:
            continue
        key = dict(comm=block["comm"], comm_hash=block["comm_hash"])
        if m := _DIFF_COUNTS.match(line):
            context, ctx_value = "count", dict(op=m.group(1))
            continue
        if _DIFF_STATUS.match(line):
            context, ctx_value = "status", {}
            continue
        if m := _MISSING_RANKS.match(line):
            context, ctx_value = "missing", {}
            continue
        if m := (_COHORT.match(line) or _COHORT_NONE.match(line)):
            launched = _int_of(m.group(2)) if m.re is _COHORT else 0
            cohorts.append(dict(**key, op=ctx_value.get("op", ""), launched=launched, n_ranks=_int_of(m.group(1)),
                                line=ln, text=line.strip()))
            ctx_value = dict(op=ctx_value.get("op", ""), launched=launched)
            continue
        if m := (_RANK_LAUNCHED.match(line) or _RANK_NONE.match(line)):
            launched = _int_of(m.group(2)) if m.re is _RANK_LAUNCHED else 0
            gpu, pid, host = _where(m.group(m.lastindex))
            cohorts.append(dict(**key, op=ctx_value.get("op", ""), launched=launched, n_ranks=1, line=ln,
                                text=line.strip()))
            ranks.append(dict(**key, rank=_int_of(m.group(1)), context="count", op=ctx_value.get("op", ""),
                              launched=launched, status="", error="", gpu=gpu, pid=pid, host=host, line=ln))
            continue
        if m := _N_STATUS.match(line):
            ctx_value = dict(status=m.group(2))
            continue
        if m := _N_REPORTED.match(line):
            context, ctx_value = "error", dict(error=m.group(2))
            continue
        if m := _RANK_STATUS.match(line):
            gpu, pid, host = _where(m.group(3))
            ranks.append(dict(**key, rank=_int_of(m.group(1)), context="status", op="", launched=-1,
                              status=m.group(2), error="", gpu=gpu, pid=pid, host=host, line=ln))
            continue
        if m := _RANK_REPORTED.match(line):
            gpu, pid, host = _where(m.group(3))
            ranks.append(dict(**key, rank=_int_of(m.group(1)), context="error", op="", launched=-1, status="",
                              error=m.group(2), gpu=gpu, pid=pid, host=host, line=ln))
            continue
        if m := _RANK_PLAIN.match(line):
            gpu, pid, host = _where(m.group(2))
            ranks.append(dict(**key, rank=_int_of(m.group(1)), context=context or "listed", op=ctx_value.get("op", ""),
                              launched=ctx_value.get("launched", -1) if context == "count" else -1,
                              status=ctx_value.get("status", ""), error=ctx_value.get("error", ""), gpu=gpu,
                              pid=pid, host=host, line=ln))
            continue
        if re.match(r"^\s*(Initialization|Asynchronous) errors? on \d+ ranks?", line):
            context, ctx_value = "error", {}
            continue
    if not (groups or comms or cohorts or procs or events or version):
        raise InputError(path, "no NCCL RAS report in it (no communicators table, no error blocks)")
    if groups and "Warnings" not in sections:  # ncclras always prints both headings, even empty
        warnings.append(f"{path}: the report stops before its "
                        f"{'Warnings' if 'Errors' in sections else 'Errors and Warnings'} section: cut off, so what "
                        "it does not list (mismatched counts, dead ranks) is unknown, not absent")
    return _result(path, "monitor" if events and not groups else "text", version, "", job, groups, comms, cohorts,
                   ranks, procs, events, timeouts, warnings)


# ---------------------------------------------------------------- JSON (NCCL 2.28.7+)
def _parse_json(path: str, blob: bytes, warnings: list[str]) -> NcclRas:
    try:
        doc = orjson.loads(blob)
    except orjson.JSONDecodeError as exc:
        raise InputError(path, f"not valid JSON ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("communicators"), list):
        raise InputError(path, "JSON without a 'communicators' list (not a RAS report)")
    comms, cohorts, ranks = [], [], []

    def _int(v, default=-1) -> int:
        return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) < 2 ** 62 else default

    def _str(v) -> str:
        return v[:256] if isinstance(v, str) else ""

    for i, c in enumerate(doc["communicators"]):
        if not isinstance(c, dict):
            warnings.append(f"{path}: communicators[{i}] is not an object; skipped")
            continue
        h = _str(c.get("hash")).lower().removeprefix("0x")
        comm = f"#{i}"
        members = [r for r in c.get("ranks") or [] if isinstance(r, dict)]
        counts: dict[str, dict[int, int]] = {}
        for r in members:
            cc = r.get("collective_counts") if isinstance(r.get("collective_counts"), dict) else {}
            st = r.get("status") if isinstance(r.get("status"), dict) else {}
            status = ("ABORT" if st.get("abort_flag") else "FINALIZE" if st.get("finalize_called") or
                      st.get("destroy_flag") else "RUNNING" if _int(st.get("init_state"), 0) == 0 else "INIT")
            err = _int(st.get("async_error"), 0)
            for op in COLL_OPS:
                n = _int(cc.get(op), -1)
                if n >= 0:
                    counts.setdefault(op, {})[_int(r.get("rank"))] = n
            ranks.append(dict(comm=comm, comm_hash=h, rank=_int(r.get("rank")), context="member", op="",
                              launched=-1, status=status, error=(f"async error {err}" if err not in (0, 7) else ""),
                              gpu=str(_int(r.get("cuda_dev"))), pid=_int(r.get("pid")), host=_str(r.get("host")),
                              line=-1))
        for r in c.get("missing_ranks") or []:
            if not isinstance(r, dict):
                continue
            st = r.get("status") if isinstance(r.get("status"), dict) else {}
            ranks.append(dict(comm=comm, comm_hash=h, rank=_int(r.get("rank")), context="missing", op="",
                              launched=-1, status="DEAD" if st.get("considered_dead") else
                              "UNRESPONSIVE" if st.get("unresponsive") else "NOCOMM", error="",
                              gpu=str(_int(r.get("cuda_dev"))), pid=_int(r.get("pid")), host=_str(r.get("host")),
                              line=-1))
        mismatch = False
        for op, per_rank in counts.items():
            values: dict[int, list[int]] = {}
            for rank, n in per_rank.items():
                values.setdefault(n, []).append(rank)
            if len(values) > 1:
                mismatch = True
                for n, rs in values.items():
                    cohorts.append(dict(comm=comm, comm_hash=h, op=op, launched=n, n_ranks=len(rs), line=-1,
                                        text=f"{len(rs)} rank(s) launched {op} up to operation {n}"))
                    ranks.extend(dict(comm=comm, comm_hash=h, rank=rank, context="count", op=op, launched=n,
                                      status="", error="", gpu="", pid=-1, host="", line=-1) for rank in sorted(rs))
        kind = "MISMATCH" if mismatch else "INCOMPLETE" if _int(c.get("missing_ranks_count"), 0) > 0 else "OK"
        comms.append(dict(comm=comm, comm_hash=h, size=_int(c.get("size")), kind=kind, line=-1))
    ras = doc.get("ras") if isinstance(doc.get("ras"), dict) else {}
    return _result(path, "json", _str(doc.get("nccl_version")), _str(doc.get("timestamp")), {}, [], comms, cohorts,
                   ranks, [], [], _int(ras.get("timeouts_count"), 0), warnings)


def _table(rows: list[dict], columns: tuple[str, ...]) -> Table:
    return Table.from_records(rows, columns, {c: (int if c in _INTS else object) for c in columns}) if rows \
        else Table.empty_of(columns, {c: (int if c in _INTS else object) for c in columns})


def _result(path, fmt, version, timestamp, job, groups, comms, cohorts, ranks, procs, events, timeouts,
            warnings) -> NcclRas:
    return NcclRas(path=str(path), format=fmt, nccl_version=version, timestamp=timestamp, job=job,
                   groups=_table(groups, GROUP_COLUMNS), comms=_table(comms, COMM_COLUMNS),
                   cohorts=_table(cohorts, COHORT_COLUMNS), ranks=_table(ranks, RANK_COLUMNS),
                   processes=_table(procs, PROCESS_COLUMNS), events=_table(events, EVENT_COLUMNS),
                   timeouts=timeouts, warnings=warnings)
