"""Run one command and report its wall time, CPU time and peak memory as JSON (one line on stdout).

    python benchmarks/measure.py -- CMD ARGS...

``max_rss_mb`` is the largest single process of the command's tree (``getrusage(RUSAGE_CHILDREN)``, which
covers every waited-for descendant); ``tree_rss_mb`` is the peak of the whole tree's summed RSS, sampled
from /proc every 20 ms (parent plus worker processes at the same moment).
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(x) for x in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def _tree_rss(pid: int) -> int:
    """Sum of resident pages (bytes) of ``pid`` and all its descendants."""
    total, todo, page = 0, [pid], os.sysconf("SC_PAGE_SIZE")
    while todo:
        p = todo.pop()
        try:
            total += int(Path(f"/proc/{p}/statm").read_text().split()[1]) * page
        except (OSError, IndexError, ValueError):
            continue
        todo += _children(p)
    return total


def main(argv: list[str]) -> int:
    cmd = argv[argv.index("--") + 1:] if "--" in argv else argv
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, _tree_rss(proc.pid))
        time.sleep(0.02)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode(errors="replace")[-2000:]
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(json.dumps({"rc": proc.returncode, "wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime,
                      "max_rss_mb": ru.ru_maxrss / 1024, "tree_rss_mb": peak / 2**20, "stderr": err}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
