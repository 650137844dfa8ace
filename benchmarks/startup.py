"""The fixed cost of one `analyze` run on the smallest folders, next to the interpreter's and pandas' own start-up.

    python benchmarks/startup.py [FOLDER ...] [--runs 9] [--floor]

A CI step that runs `analyze` on many small jobs pays this each time. By default two hang folders are timed: a
stderr-only one (torchrun's log of a size abort) and one with a Flight Recorder dump next to the launcher's log;
neither needs pandas, matplotlib or Dask (docs/performance.md, "Start-up"). The commands run in turn, round after
round (so a machine's drift hits all alike), each as a fresh process; the medians and the ratios to
`python -c pass` and to `python -c 'import pandas'` are printed per folder. ``--floor`` also runs the naive floor
(benchmarks/floor.py: gunzip and ``orjson.loads`` of the folder's trace files, nothing else) in the same rounds
and prints `analyze` / floor per folder: the larger folders' measure (docs/performance.md). Byte-code caches are allowed to be written
(a warm-up run of each first), as on a user's machine: an environment with PYTHONDONTWRITEBYTECODE set would
otherwise compile every module from source on every run.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULTS = (ROOT / "fixtures" / "real-cpu-failures" / "stderr_only_size_abort",   # stderr only
            ROOT / "fixtures" / "real-cpu-failures" / "size_coalescing_manager")  # an FR dump + torchrun's log


def _time(cmd: list[str], env: dict) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process and its children): CPU time drifts less on a loaded machine."""
    import resource
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="*", default=[str(d) for d in DEFAULTS])
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--format", default="json")
    ap.add_argument("--floor", action="store_true", help="also time the naive floor on each folder's traces")
    a = ap.parse_args(argv)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(ROOT)
    out = Path(tempfile.mkdtemp()) / "report"
    base_cmds = {"python -c pass": [sys.executable, "-c", "pass"],
                 "python -c 'import pandas'": [sys.executable, "-c", "import pandas"]}
    ours = {f"analyze FOLDER{i + 1} --format {a.format}": [sys.executable, "-m", "analyzer", folder, "--format",
                                                          a.format, "-o", str(out)]
            for i, folder in enumerate(a.folders)}
    floors = {}
    if a.floor:
        for i, folder in enumerate(a.folders):
            files = sorted(str(p) for p in Path(folder).rglob("*") if p.is_file()
                           and p.name.endswith((".json", ".json.gz")) and ".pt.trace" in p.name)
            if files:
                floors[f"floor FOLDER{i + 1}"] = [sys.executable, str(ROOT / "benchmarks" / "floor.py"), *files]
    cmds = {**base_cmds, **ours, **floors}
    for cmd in cmds.values():
        _time(cmd, env)  # warm-up: byte-code caches, the page cache
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in cmds}
    for _ in range(a.runs):
        for k, cmd in cmds.items():
            times[k].append(_time(cmd, env))
    print(f"{a.runs} rounds, medians; load average {os.getloadavg()[0]:.1f}")
    for i, folder in enumerate(a.folders):
        print(f"FOLDER{i + 1}: {folder}")
    for j, what in ((0, "wall"), (1, "cpu")):
        med = {k: statistics.median(t[j] for t in v) for k, v in times.items()}
        base, pandas = med["python -c pass"], med["python -c 'import pandas'"]
        print(f" {what} seconds")
        for k, v in med.items():
            vals = [t[j] for t in times[k]]
            print(f"  {k:40s} {v:6.3f} s   (min {min(vals):.3f}, max {max(vals):.3f})")
        for k in ours:
            name = k.split()[1]
            print(f"  {name} / python -c pass        {med[k] / base:6.1f} x")
            print(f"  {name} / import pandas         {med[k] / pandas:6.2f} x")
            print(f"  {name} - python -c pass        {med[k] - base:6.3f} s  (the cost that is ours)")
            if f"floor {name}" in med:
                paired = statistics.median(t[j] / f[j] for t, f in zip(times[k], times[f"floor {name}"]))
                print(f"  {name} / floor                 {med[k] / med[f'floor {name}']:6.2f} x   (median of the "
                      f"rounds' own ratios {paired:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
