"""The report's `hang` section: the hang post-mortem (analyzer/hang/analysis.py) as a JSON-ready dict."""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from analyzer.hang.analysis import analyze_hang
from analyzer.load.job import Job
from parsers.file_names import rank_from_file_name

_TEXT_SUFFIXES = (".log", ".err", ".txt", ".out", ".stderr", ".stdout")


def rank_stderr_files(job: Job) -> dict[int, str]:
    """Files that hold one rank's output only (`stderr_rank3.log`, `rank3.err`): their last lines are evidence.

    A file that holds several ranks' lines (a launcher's combined log) is not one rank's file, whatever its name.
    """
    multi = {str(getattr(s, "path", "")) for s in getattr(job, "stderr_logs", []) or []
             if len(getattr(s, "ranks", ()) or ()) > 1}
    out: dict[int, str] = {}
    for f in job.files:
        if f.status == "failed" or f.path in multi:
            continue
        if f.kind != "nccl_log" and Path(f.path).suffix.lower() not in _TEXT_SUFFIXES:
            continue
        rank = rank_from_file_name(f.path)
        if rank is not None:
            out.setdefault(rank, f.path)
    return out


#: at most this many wait rows in the report: ranks in one state share a row, so a 10,000-rank hang has a few
MAX_WAIT_ROWS = 200


def wait_cohorts(edges: Any) -> list[dict]:
    """Who waits for whom, compact: one row per (group, seq, op, the ranks waited for) with every rank waiting
    there, so ranks in the same state share a row whatever the job's size."""
    if edges is None or not len(edges):
        return []
    by_waiter: dict[tuple, set] = {}
    absent: dict[tuple, set] = {}
    for e in edges.records():
        k = (str(e["group"]), int(e["seq"]), str(e["op"] or ""), int(e["waiter"]))
        by_waiter.setdefault(k, set()).add(int(e["target"]))
        if e["absent"]:
            absent.setdefault(k, set()).add(int(e["target"]))
    rows: dict[tuple, dict] = {}
    for (g, seq, op, waiter), targets in by_waiter.items():
        key = (g, seq, op, tuple(sorted(targets)))
        row = rows.setdefault(key, {"process_group": g, "seq": seq, "op": op, "waiting": [],
                                    "waits_for": sorted(targets), "absent": sorted(absent.get((g, seq, op, waiter),
                                                                                             ()))})
        row["waiting"].append(waiter)
    out = sorted(rows.values(), key=lambda r: (r["process_group"], r["seq"], r["waits_for"]))
    for r in out:
        r["waiting"].sort()
    return out[:MAX_WAIT_ROWS]


def hang_section(job: Job) -> dict[str, Any]:
    """Diagnoses (root cause first), per-group progress and ranks without a dump, from dumps, logs and stderr."""
    stderr_logs = list(getattr(job, "stderr_logs", []) or [])
    ras_reports = list(getattr(job, "ras_reports", []) or [])
    if not job.fr_dumps and not job.nccl_logs and not stderr_logs and not ras_reports:
        return {"status": "no_hang_evidence", "diagnoses": [], "groups": [], "warnings": [],
                "ranks_without_dump": {},
                "message": "no NCCL logs, NCCL RAS reports, stderr or Flight Recorder dumps among the inputs"}
    rep = analyze_hang(job.fr_dumps, job.nccl_logs, world_size=job.world_size, rank_logs=rank_stderr_files(job),
                       stderr_logs=stderr_logs, ras_reports=ras_reports)
    diagnoses = []
    for d in rep.diagnoses:
        row = asdict(d)
        row["evidence"] = [{"file": e[0], "line": e[1], "text": e[2]} for e in d.evidence]
        for key in ("ops", "sizes", "dtypes"):
            row[key] = {str(k): v for k, v in row[key].items()}
        diagnoses.append(row)
    groups = []
    t = rep.tables
    if t is not None and not t.empty and "process_group" in t.columns:
        for name, g in t.groups("process_group"):
            groups.append({
                "process_group": str(name), "ranks": sorted(int(r) for r in g["rank"]),
                **{col: {str(int(r)): (None if v is None or v != v else int(v)) for r, v in zip(g["rank"], g[col])}
                   for col in ("last_enqueued", "last_started", "last_completed") if col in g.columns},
            })
    return {"status": "hang" if diagnoses else "no_hang_evidence", "diagnoses": diagnoses, "groups": groups,
            "waits": wait_cohorts(rep.waits),
            "ranks_without_dump": {str(k): v for k, v in sorted(rep.ranks_without_dump.items())},
            "warnings": list(rep.warnings), **({"ras": rep.ras} if rep.ras else {})}
