"""Does the worker pool pay for itself? `analyze` on one folder three ways, interleaved round after round: in one
process (``--jobs 1``), with the pool of every core forced (``ANALYZE_POOL_BYTES=0``), and as chosen by default
from the input's size (analyzer/load/engine.py, ``POOL_BYTES_PER_WORKER``).

    python benchmarks/pool_choice.py [FOLDER ...] [--sizes 1,8,32] [--ranks 8] [--runs 5]

Without folders it writes 8-rank gzip jobs of each size in MB per rank (benchmarks/gen_traces.py) to a temporary
folder and times those, plus the 8-rank PARAM DLRM traces of fixtures/corpus. Per folder it prints each way's
median wall time and the paired ratios (per round, then the median): auto / one process and auto / forced pool.
The default is right when auto / one process ≤ 1 on small inputs and auto / pool ≤ 1 on large ones.
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
WAYS = {"one process": (["--jobs", "1"], {}), "pool": ([], {"ANALYZE_POOL_BYTES": "0"}), "auto": ([], {})}


def _wall(folder: Path, args: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "analyzer", str(folder), "-q", "--format", "json", "-o", os.devnull,
                    *args], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), **env}, check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def measure(folder: Path, runs: int) -> dict:
    """Per way the wall times of ``runs`` interleaved rounds (after one warm-up round)."""
    times: dict[str, list[float]] = {w: [] for w in WAYS}
    for r in range(runs + 1):
        for way, (args, env) in WAYS.items():
            t = _wall(folder, args, env)
            if r:
                times[way].append(t)
    return times


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folders", nargs="*")
    p.add_argument("--sizes", default="1,8,32", help="MB per rank of the generated jobs")
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--runs", type=int, default=5)
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folders = [Path(f) for f in a.folders]
        if not folders:
            folders = [ROOT / "fixtures/corpus/param-dlrm_kineto"]
            for mb in (float(x) for x in a.sizes.split(",") if x):
                out = Path(tmp) / f"r{a.ranks}x{mb:g}MB"
                subprocess.run([sys.executable, str(ROOT / "benchmarks/gen_traces.py"), "--ranks", str(a.ranks),
                                "--mb-per-rank", str(mb), "--out", str(out), "--gzip", "--jobs", "1"],
                               check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
                folders.append(out)
        print(f"{os.cpu_count()} cores; {a.runs} interleaved rounds; medians")
        print(f"{'folder':<28} {'one process':>11} {'pool':>7} {'auto':>7} {'auto/one':>9} {'auto/pool':>9}")
        for f in folders:
            t = measure(f, a.runs)
            r1 = statistics.median(x / y for x, y in zip(t["auto"], t["one process"]))
            r2 = statistics.median(x / y for x, y in zip(t["auto"], t["pool"]))
            print(f"{f.name[:28]:<28} {statistics.median(t['one process']):>10.2f}s "
                  f"{statistics.median(t['pool']):>6.2f}s {statistics.median(t['auto']):>6.2f}s {r1:>9.2f} {r2:>9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
