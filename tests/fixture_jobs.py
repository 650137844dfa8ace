"""The fixture jobs (every folder under fixtures/ that holds one job's inputs) and a digest of a job's JSON report.

Used by tests/test_report_identity.py: the report of every fixture job must not change when the per-rank work
moves into the workers (docs/scale.md), and must be the same whichever engine runs it.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
#: case folders: each sub-folder of these is one job (a failure, a hang, a simulated or real run)
CASE_ROOTS = ("real-cpu-failures", "real-cpu-hang", "sim", "real-cpu", "real-cpu-perf", "corpus/nvrx-fr-moe16")


def fixture_jobs() -> list[str]:
    """Job folders relative to the repository root: every case folder, and every folder holding a Kineto trace."""
    from parsers.discover import KINETO, discover
    found, _ = discover([str(FIXTURES)])
    dirs = {os.path.relpath(os.path.dirname(f.path), ROOT) for f in found if f.kind == KINETO}
    for root in CASE_ROOTS:
        for d in sorted((FIXTURES / root).iterdir()):
            if d.is_dir():
                dirs.add(os.path.relpath(d, ROOT))
    # a folder inside another job (a case's torchrun_logs, a trace_diff half) is part of that job
    jobs = sorted(dirs)
    return [d for d in jobs if not any(d.startswith(o + os.sep) for o in jobs if o != d)]


def report_json(report: dict) -> str:
    """The report as --format json writes it."""
    from analyzer.render.json_out import render_json
    return render_json(report)


def digest(report: dict) -> str:
    return hashlib.sha256(report_json(report).encode()).hexdigest()[:20]


#: jobs checked on every CI run (every kind of input the per-rank work sees: real GPU and CPU traces, pipelines,
#: FSDP, cut-off gzip traces, a single rank, a failure with dumps and stderr, a simulated job); all of them with
#: ANALYZE_FULL_IDENTITY=1
QUICK_JOBS = [
    "fixtures/corpus/param-dlrm_kineto",
    "fixtures/corpus/hta-trace_filter",
    "fixtures/corpus/tracelens-single_rank/mi300",
    "fixtures/real-cpu/ddp-straggler",
    "fixtures/real-cpu/pp-1f1b",
    "fixtures/real-cpu-perf/cut-ddp4-gzip",
    "fixtures/real-cpu-perf/pp2-m8-interleaved-medium",
    "fixtures/real-cpu-perf/fsdp4-clean-medium",
    "fixtures/real-cpu-failures/pipeline_stage_stops_sending",
    "fixtures/sim/ddp_fully_overlapped",
]
DIGESTS = ROOT / "tests" / "golden" / "fixture_report_digests.json"


def main() -> int:
    """Write DIGESTS from this checkout's reports (run on the commit whose reports are the reference)."""
    import analyzer
    os.chdir(ROOT)  # the reports name the files by the relative paths given
    out = {}
    for j in fixture_jobs():
        a = analyzer.load(j, jobs=1)
        out[j] = digest(a.report)
        print(out[j], j, flush=True)
    DIGESTS.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
