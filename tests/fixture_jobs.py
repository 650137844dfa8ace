"""The fixture jobs (every folder under fixtures/ that holds one job's inputs) and digests of their JSON reports.

tests/test_report_identity.py runs fixture jobs on every engine and compares the reports within the run. The
digests are a developer's aid, never a CI test (reports change legitimately with every analysis change):
``python -m tests.fixture_jobs write`` on the reference commit, then ``python -m tests.fixture_jobs check`` on
a change that must not alter any report (docs/scale.md, "Checking that a change leaves every report alone").
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
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
#: where the digests go (bench-data/ is git-ignored)
DIGESTS = ROOT / "bench-data" / "fixture_report_digests.json"


def main(argv: list[str]) -> int:
    """``write [PATH]``: store every fixture job's report digest; ``check [PATH]``: list the jobs whose differ."""
    import analyzer
    if not argv or argv[0] not in ("write", "check"):
        print("usage: python -m tests.fixture_jobs write|check [PATH]", file=sys.stderr)
        return 2
    path = Path(argv[1]) if len(argv) > 1 else DIGESTS
    os.chdir(ROOT)  # the reports name the files by the relative paths given
    want = json.loads(path.read_text()) if argv[0] == "check" else {}
    out, changed = {}, []
    for j in fixture_jobs():
        out[j] = digest(analyzer.load(j, jobs=1).report)
        if argv[0] == "check" and want.get(j) != out[j]:
            changed.append(j)
            print("changed:", j, flush=True)
    if argv[0] == "write":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
        print(f"wrote {len(out)} digests to {path}")
        return 0
    missing = sorted(set(want) - set(out))
    print(f"{len(out) - len(changed)} of {len(out)} reports unchanged; {len(changed)} changed; "
          f"{len(missing)} jobs gone: {missing}")
    return 1 if changed or missing else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
