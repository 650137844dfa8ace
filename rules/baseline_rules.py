"""Regressions against a baseline run: registered here so --list-rules, --explain, --select and --ignore know them.

The comparison itself runs in analyzer/report/baseline.py after the analysis (it needs the baseline report, which rules
do not see); these entries carry the documentation, and yield nothing on their own.
"""
from __future__ import annotations

from typing import Iterator

from rules.context import Context
from rules.finding import Finding
from rules.registry import rule

_CONFIRM = ("Open both runs' HTML reports (--html) side by side: the per-rank step table and the timelines show "
            "where the time moved. Rerun the baseline to see the run-to-run noise before trusting a small change.")


@rule("BASE001", "Step time regressed against the baseline", "error", confirm=_CONFIRM,
      fix="Bisect the change between the runs (code, NCCL/driver version, topology, link health); raise "
          "--regression-threshold step_time=… only for known, accepted noise.")
def step_time_regression(ctx: Context) -> Iterator[Finding]:
    """With --baseline: the mean step time grew by more than the threshold (default +5 %).

    This is what a CI gate on performance wants: the job got slower. The evidence says what changed, as a trace
    diff does: the kernels (CPU operators in a CPU-only trace) whose time per step grew most, the ones that
    appeared or vanished, and the collectives whose count per step changed. Per-metric thresholds and the
    metrics compared are in docs/json-schema.md (baseline section).
    """
    return iter(())


@rule("BASE002", "Communication or overlap regressed against the baseline", "warning", confirm=_CONFIRM,
      fix="Look for changed bucket sizes (bucket_cap_mb), parallel layout, overlap settings or NCCL environment "
          "between the runs.")
def comm_regression(ctx: Context) -> Iterator[Finding]:
    """With --baseline: comm time (+10 %), comm share or exposed comm share (+5 points), overlap coverage
    (−10 points) or pipeline bubble (+5 points) got worse."""
    return iter(())


@rule("BASE003", "Collective bus bandwidth dropped against the baseline", "warning", confirm=_CONFIRM,
      fix="Check the links the group uses (ibstat, nvidia-smi topo -m, NCCL_IB_HCA, NCCL_SOCKET_IFNAME) and the "
          "NCCL version and algorithm between the runs.")
def busbw_regression(ctx: Context) -> Iterator[Finding]:
    """With --baseline: mean bus bandwidth of a (process group, op) fell by more than 10 %."""
    return iter(())


@rule("BASE004", "The baseline is a job of another shape", "warning", confirm=_CONFIRM,
      fix="Compare runs of the same job shape (world size, hosts, parallel degrees); to judge a re-layout, compare "
          "step time and throughput per GPU by hand.")
def baseline_shape(ctx: Context) -> Iterator[Finding]:
    """With --baseline: world size, hosts, the roles and sizes of the process groups or the pipeline depth differ.

    Metrics of two different jobs are not comparable (a step of TP=8 is not a step of TP=4), so no BASE001-003
    verdict is given; the values and the trace diff stay in the baseline section for reading.
    """
    return iter(())
