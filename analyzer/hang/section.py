"""The report's `hang` section: the hang post-mortem (analyzer/hang/analysis.py) as a JSON-ready dict."""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from analyzer.hang.analysis import analyze_hang
from analyzer.load.job import Job
from parsers.kineto import rank_from_file_name


def rank_stderr_files(job: Job) -> dict[int, str]:
    """Per-rank log files named like `stderr_rank3.log` / `rank3.err`: their last lines are a crash's evidence."""
    out: dict[int, str] = {}
    for f in job.files:
        if f.kind != "nccl_log" and Path(f.path).suffix.lower() not in (".log", ".err", ".txt", ".out", ".stderr", ".stdout"):
            continue
        rank = rank_from_file_name(f.path)
        if rank is not None and f.status != "failed":
            out.setdefault(rank, f.path)
    return out


def hang_section(job: Job) -> dict[str, Any]:
    """Diagnoses (root cause first) and per-group progress, from FR dumps and NCCL/watchdog logs."""
    if not job.fr_dumps and not job.nccl_logs:
        return {"status": "no_hang_evidence", "diagnoses": [], "groups": [], "warnings": [],
                "message": "no NCCL logs or Flight Recorder dumps among the inputs"}
    rep = analyze_hang(job.fr_dumps, job.nccl_logs, world_size=job.world_size, rank_logs=rank_stderr_files(job))
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
        for name, g in t.groupby("process_group", sort=True):
            groups.append({
                "process_group": str(name), "ranks": sorted(int(r) for r in g["rank"]),
                **{col: {str(int(r)): (None if v is None or v != v else int(v)) for r, v in zip(g["rank"], g[col])}
                   for col in ("last_enqueued", "last_started", "last_completed") if col in g.columns},
            })
    return {"status": "hang" if diagnoses else "no_hang_evidence", "diagnoses": diagnoses, "groups": groups,
            "warnings": list(rep.warnings)}
