"""The fixed cost of one `analyze` run on the smallest folder, next to the interpreter's and pandas' own start-up.

    python benchmarks/startup.py [FOLDER] [--runs 9]

A CI step that runs `analyze` on many small jobs pays this each time. The three commands run in turn, round after
round (so a machine's drift hits all three alike), each as a fresh process; the medians and the ratios to
`python -c pass` and to `python -c 'import pandas'` are printed. Byte-code caches are allowed to be written
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
DEFAULT = ROOT / "fixtures" / "real-cpu-failures" / "stderr_only_size_abort"


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
    ap.add_argument("folder", nargs="?", default=str(DEFAULT))
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--format", default="json")
    a = ap.parse_args(argv)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(ROOT)
    out = Path(tempfile.mkdtemp()) / "report"
    cmds = {"python -c pass": [sys.executable, "-c", "pass"],
            "python -c 'import pandas'": [sys.executable, "-c", "import pandas"],
            f"analyze FOLDER --format {a.format}": [sys.executable, "-m", "analyzer", a.folder, "--format", a.format,
                                                   "-o", str(out)]}
    for cmd in cmds.values():
        _time(cmd, env)  # warm-up: byte-code caches, the page cache
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in cmds}
    for _ in range(a.runs):
        for k, cmd in cmds.items():
            times[k].append(_time(cmd, env))
    print(f"folder: {a.folder}  ({a.runs} rounds, medians; load average {os.getloadavg()[0]:.1f})")
    for j, what in ((0, "wall"), (1, "cpu")):
        med = {k: statistics.median(t[j] for t in v) for k, v in times.items()}
        base, pandas, ours = (med[k] for k in cmds)
        print(f" {what} seconds")
        for k, v in med.items():
            vals = [t[j] for t in times[k]]
            print(f"  {k:40s} {v:6.3f} s   (min {min(vals):.3f}, max {max(vals):.3f})")
        print(f"  analyze / python -c pass          {ours / base:6.1f} x")
        print(f"  analyze / import pandas           {ours / pandas:6.2f} x")
        print(f"  analyze - import pandas           {ours - pandas:6.3f} s  (the cost that is ours)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
