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
            "ranks_without_dump": {str(k): v for k, v in sorted(rep.ranks_without_dump.items())},
            "warnings": list(rep.warnings), **({"ras": rep.ras} if rep.ras else {})}
