"""The report's `nccl` section: what the NCCL debug logs say about versions, networks, env, transports, WARNs and
watchdog timeouts, per process, with file:line for every row (docs/report-sections.md)."""
from __future__ import annotations

from typing import Any

from parsers.table import Table

MAX_ROWS = 2000  # per table: a 4096-rank job's logs must not blow up the report
_WD_OPS = {"ALLREDUCE": "allreduce", "ALLGATHER": "allgather", "_ALLGATHER_BASE": "allgather",
           "REDUCE_SCATTER": "reducescatter", "_REDUCE_SCATTER_BASE": "reducescatter", "BROADCAST": "broadcast",
           "REDUCE": "reduce", "ALLTOALL": "alltoall", "ALLTOALL_BASE": "alltoall", "SEND": "send", "RECV": "recv",
           "BARRIER": "barrier"}


def _frame(log: Any, name: str) -> Table:
    """A table of a parsed log (parsers/table.py), or an empty table when the parser did not provide it."""
    df = getattr(log, name, None)
    return df if isinstance(df, Table) else Table()


def _int(v: Any, default: int = -1) -> int:
    """An int from a table cell (NaN/None/garbage → default)."""
    try:
        if v is None or (isinstance(v, float) and v != v):
            return default
        return int(v)
    except (TypeError, ValueError):
        return default


def _ranks(log: Any) -> dict[tuple[str, int], int]:
    """(host, pid) → global rank from the processes table (-1 when unknown)."""
    p = _frame(log, "processes")
    if p.empty or not {"host", "pid", "rank"} <= set(p.columns):
        return {}
    return {(str(h), _int(pid)): _int(r) for h, pid, r in zip(p["host"], p["pid"], p["rank"])}


def nccl_section(job: Any) -> dict:
    """Build the `nccl` section from job.nccl_logs; {} when the job has no NCCL/watchdog logs."""
    logs = list(getattr(job, "nccl_logs", None) or [])
    if not logs:
        return {}
    out: dict[str, list] = {k: [] for k in ("logs", "versions", "processes", "networks", "env", "transports",
                                            "warns", "timeouts")}
    versions: set[str] = set()
    hosts: set[str] = set()
    env_seen: set[tuple] = set()
    for log in logs:
        path = str(getattr(log, "path", ""))
        out["logs"].append({"path": path, "lines": _int(getattr(log, "n_lines", 0), 0),
                            "unrecognised": _int(getattr(log, "unrecognised", 0), 0)})
        rank_of = _ranks(log)
        procs = _frame(log, "processes")
        for r in procs.to_dict("records"):
            v = str(r.get("nccl_version") or "")
            if v:
                versions.add(v)
            hosts.add(str(r.get("host")))
            out["processes"].append({"host": str(r.get("host")), "pid": _int(r.get("pid")), "rank": _int(r.get("rank")),
                                     "cuda_dev": _int(r.get("cuda_dev")), "nccl_version": v or None, "file": path})
        for r in _frame(log, "networks").to_dict("records"):
            key = (str(r.get("host")), _int(r.get("pid")))
            out["networks"].append({"host": key[0], "pid": key[1], "rank": rank_of.get(key, -1),
                                    "network": str(r.get("network") or ""), "interface": str(r.get("interface") or ""),
                                    "address": str(r.get("address") or ""), "role": str(r.get("role") or ""),
                                    "file": path, "line": _int(r.get("line"))})
        for r in _frame(log, "env").to_dict("records"):
            key = (str(r.get("host")), _int(r.get("pid")))
            dedupe = (str(r.get("name")), str(r.get("value")), key[0])
            if dedupe in env_seen:
                continue
            env_seen.add(dedupe)
            out["env"].append({"name": dedupe[0], "value": dedupe[1], "host": key[0], "rank": rank_of.get(key, -1),
                               "file": path, "line": _int(r.get("line"))})
        out["transports"].extend(_transports(log, path, rank_of))
        for r in _frame(log, "warns").to_dict("records"):
            key = (str(r.get("host")), _int(r.get("pid")))
            out["warns"].append({"host": key[0], "pid": key[1], "rank": rank_of.get(key, -1),
                                 "src_file": str(r.get("src_file") or ""), "src_line": _int(r.get("src_line")),
                                 "message": str(r.get("message") or ""), "result_code": _int(r.get("result_code")),
                                 "level": str(r.get("level") or "WARN"), "file": path, "line": _int(r.get("line"))})
        out["timeouts"].extend(_timeouts(log, path))
    sec: dict[str, Any] = {k: v[:MAX_ROWS] for k, v in out.items()}
    sec["versions"] = sorted(versions)
    sec["hosts"] = sorted(h for h in hosts if h)
    sec["truncated"] = {k: len(v) for k, v in out.items() if len(v) > MAX_ROWS}
    return sec


def _transports(log: Any, path: str, rank_of: dict) -> list[dict]:
    """Connections per (process, communicator, transport): count, first file:line, communicator id and size."""
    conns = _frame(log, "connections")
    if conns.empty or not {"host", "pid", "comm", "transport", "line"} <= set(conns.columns):
        return []
    comms = _frame(log, "communicators")
    info: dict[tuple, tuple] = {}
    if not comms.empty:
        for r in comms.sort_values("line").to_dict("records"):
            info.setdefault((str(r["host"]), _int(r["pid"]), str(r["comm"])),
                            (str(r.get("comm_id") or ""), _int(r.get("rank")), _int(r.get("nranks"))))
    rows = []
    for (host, pid, comm, transport), x in conns.groups(["host", "pid", "comm", "transport"]):
        r = {"count": len(x), "min": x["line"].min()}
        cid, crank, n = info.get((str(host), _int(pid), str(comm)), ("", -1, -1))
        rows.append({"comm_id": cid, "rank": rank_of.get((str(host), _int(pid)), -1), "comm_rank": crank,
                     "nranks": n, "host": str(host), "transport": str(transport), "count": int(r["count"]),
                     "file": path, "line": int(r["min"])})
    return rows


def _timeouts(log: Any, path: str) -> list[dict]:
    """Watchdog 'collective operation timeout' lines: rank, process group (PG id, '0' when not printed), seq, op."""
    wd = _frame(log, "watchdog")
    if wd.empty or "kind" not in wd.columns:
        return []
    rows = []
    recs = wd.to_dict("records")
    for i, r in enumerate(recs):
        if r.get("kind") != "timeout":
            continue
        rank = _int(r.get("global_rank"))
        rank = rank if rank >= 0 else _int(r.get("rank"))
        pg = _int(r.get("pg_id"))
        if pg < 0:  # the timeout line has no PG id; the PG status line printed right after it does
            for nxt in recs[i + 1:i + 6]:
                if _int(nxt.get("pg_id")) >= 0 and _int(nxt.get("line")) - _int(r.get("line")) <= 3 and \
                        (_int(nxt.get("global_rank")) < 0 or _int(nxt.get("global_rank")) == rank):
                    pg = _int(nxt.get("pg_id"))
                    break
        op = str(r.get("op_type") or "")
        rows.append({"rank": rank, "process_group": str(pg) if pg >= 0 else "0", "seq": _int(r.get("seq")),
                     "op": _WD_OPS.get(op.upper(), op.lower()) or None, "timeout_ms": _int(r.get("timeout_ms")),
                     "ran_for_ms": _int(r.get("ran_for_ms")), "text": str(r.get("message") or "")[:500],
                     "file": path, "line": _int(r.get("line"))})
    return rows
