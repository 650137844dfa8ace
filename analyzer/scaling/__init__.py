"""Across runs: the scaling comparison of several finished per-run reports (docs/scaling.md).

A stage after the report stage: it reads reports (or rows saved by ``--record``), never traces.
"""
from analyzer.scaling.compare import compare_rows
from analyzer.scaling.rows import run_row

__all__ = ["compare_rows", "run_row"]
