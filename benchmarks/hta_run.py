"""HTA 0.5.0 on a folder of traces: TraceAnalysis load + comm/comp overlap + temporal breakdown.

Run with a separate HTA virtualenv ($HTA_PYTHON), never the project's:
    $HTA_PYTHON benchmarks/hta_run.py TRACE_DIR
"""
from __future__ import annotations

import logging
import sys
import time


def main(trace_dir: str) -> int:
    logging.disable(logging.WARNING)
    from hta.trace_analysis import TraceAnalysis

    t0 = time.perf_counter()
    ta = TraceAnalysis(trace_dir=trace_dir)
    t1 = time.perf_counter()
    overlap = ta.get_comm_comp_overlap(visualize=False)
    t2 = time.perf_counter()
    temporal = ta.get_temporal_breakdown(visualize=False)
    t3 = time.perf_counter()
    print(f"load {t1 - t0:.2f} s, overlap {t2 - t1:.2f} s, temporal {t3 - t2:.2f} s", file=sys.stderr)
    print(overlap.to_string(), temporal.to_string(), sep="\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
