"""What profile_memory's events cost: one rank's parse + summary with 0, 10^5 and 10^6 ``[memory]`` events added to
the same generated GPU trace, as ratios against the trace without them, next to the ratio of their bytes.

    python benchmarks/memory_events.py [--mb 30] [--counts 0,100000,1000000]

Each measurement is a fresh subprocess (wall time of load_trace + summarise, peak RSS: VmHWM, Linux). The goal:
the time ratio stays at or under the bytes ratio (the events cost no more per byte than the rest of the trace), and
the summary that goes back to the parent stays a few KB whatever the count. Inputs go to bench-data/memory/
(git-ignored; deleted unless --keep).
"""
from __future__ import annotations

import argparse
import json
import pickle
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# peak RSS from VmHWM (reset by exec; getrusage's ru_maxrss keeps the forking parent's peak across exec)
_CHILD = r"""
import pickle, sys, time
t = time.perf_counter()
from parsers.kineto import load_trace
from analyzer.rank.summary import summarise
s, _ = summarise(load_trace(sys.argv[1]))
dt = time.perf_counter() - t
m = s.memory
hwm = [int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")][0]
print(dt, hwm / 1024, len(pickle.dumps(s)), 0 if m is None else len(m))
"""


def with_memory(base: Path, out: Path, n: int, seed: int = 0) -> int:
    """``base`` with ``n`` [memory] events spread over its ProfilerStep windows (on the CPU thread of its steps),
    and profile_memory set (so its CPU operators are kept to name each peak); returns the file's size."""
    doc = json.loads(base.read_bytes())
    doc["profile_memory"] = 1 if n else 0  # n = 0: the baseline, a trace profiled without profile_memory
    ev = doc["traceEvents"]
    steps = [e for e in ev if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("cat") == "user_annotation"]
    rnd = random.Random(seed)
    alloc, mem = 1 << 30, []
    for i in range(n):
        s = steps[i % len(steps)]
        b = rnd.choice((512, 4096, 1 << 20, 1 << 22)) * (1 if i % 2 == 0 else -1)
        alloc += b
        at = s["ts"] + s["dur"] * (i // len(steps) + 0.5) / (n // len(steps) + 1)
        mem.append({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": s["pid"],
                    "tid": s["tid"], "ts": round(at, 3),
                    "args": {"Total Reserved": 2 << 30, "Total Allocated": alloc, "Bytes": b, "Device Id": 0,
                             "Device Type": 1, "Addr": 140000000000000 + 512 * i, "Ev Idx": i}})
    doc["traceEvents"] = ev + mem
    data = json.dumps(doc).encode()
    out.write_bytes(data)
    return len(data)


def measure(path: Path) -> tuple[float, float, int, int]:
    r = subprocess.run([sys.executable, "-c", _CHILD, str(path)], cwd=ROOT, capture_output=True, text=True,
                       check=True, timeout=1800)
    dt, rss, pick, rows = r.stdout.split()
    return float(dt), float(rss), int(pick), int(rows)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=30)
    ap.add_argument("--counts", default="0,100000,1000000")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    from benchmarks.gen_traces import write_rank
    d = ROOT / "bench-data/memory"
    d.mkdir(parents=True, exist_ok=True)
    base = d / "base.json"
    write_rank(base, 0, 8, a.mb, 7, False)
    rows = []
    for n in (int(x) for x in a.counts.split(",")):
        p = d / f"mem{n}.json"
        size = with_memory(base, p, n)  # n = 0: the same document re-serialised, the baseline
        t0 = time.perf_counter()
        dt, rss, pick, k = measure(p)
        rows.append((n, size, dt, rss, pick, k))
        print(f"{n:>9} memory events: {size / 1e6:7.1f} MB, parse+summary {dt:6.2f} s, peak RSS {rss:6.0f} MB, "
              f"summary {pick / 1024:6.1f} KB ({k} memory rows)  [{time.perf_counter() - t0:.0f} s]", flush=True)
    n0, s0, t0_, *_ = rows[0]
    for n, size, dt, rss, pick, k in rows[1:]:
        print(f"{n:>9}: bytes x{size / s0:.2f}, time x{dt / t0_:.2f}, summary +{(pick - rows[0][4]) / 1024:.1f} KB")
    if not a.keep:
        shutil.rmtree(d)


if __name__ == "__main__":
    main()
