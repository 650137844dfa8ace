"""Communication efficiency rules: overlap coverage, communication share of step time, small latency-bound
collectives (gradient buckets too small)."""
from __future__ import annotations

from typing import Iterator, Optional

from rules.context import Context
from rules.finding import Evidence, Finding, Subject
from rules.registry import Threshold, rule
from rules.util import mb, num, pct, ranks_text

DP_ROLES = ("dp", "fsdp", "world", "unknown")
DP_OPS = ("allreduce", "reducescatter", "allgather")


def _dp_group(ctx: Context) -> Optional[dict]:
    """The data-parallel group when there is exactly one kind: a single dp/fsdp group, else the world group."""
    for roles in (("dp", "fsdp"), ("world",)):
        gs = [g for g in ctx.groups() if str(g.get("role")) in roles]
        if len(gs) == 1:
            return gs[0]
    return None


def _has_tp(ctx: Context) -> bool:
    """True when the job has tensor-parallel groups (their blocking collectives change what 'good' means)."""
    return "tp" in ctx.roles()


def _rank_values(ctx: Context, key: str) -> dict[int, float]:
    """Per-rank metric (metrics.per_rank) as {rank: value}, values that are numbers only."""
    out = {}
    for r in ctx.per_rank():
        v = num(r.get(key))
        if v is not None and r.get("rank") is not None:
            out[int(r["rank"])] = v
    return out


@rule("COMM001", "Low overlap of communication with compute", "warning",
      thresholds=(Threshold("dp_overlap_min", 0.9, "fraction",
                            "data-parallel jobs: report when less of the communication time overlaps compute"),
                  Threshold("tp_overlap_min", 0.6, "fraction",
                            "jobs with tensor-parallel groups (blocking per-layer collectives): report below this"),
                  Threshold("overlap_severe", 0.2, "fraction",
                            "a data-parallel job below this coverage gets a warning; between it and "
                            "dp_overlap_min an info (comm longer than the compute it could hide under)"),
                  Threshold("exposed_comm_min", 0.05, "fraction",
                            "ignore low overlap when the exposed (non-overlapped) comm is below this share "
                            "of step time")),
      explains=("COMM002",),
      confirm="Open the trace of a reported rank: gradient all-reduce / reduce-scatter kernels run after the "
              "backward kernels instead of on a separate stream during them.",
      fix="Let DDP/FSDP overlap: do not call all-reduce manually after backward; keep DDP's bucketed hooks "
          "(bucket_cap_mb 25-100; find_unused_parameters=False; static_graph=True), FSDP backward_prefetch="
          "BACKWARD_PRE and forward_prefetch=True; for TP use sequence parallelism / async TP "
          "(TransformerEngine comm-GEMM overlap).")
def low_overlap(ctx: Context) -> Iterator[Finding]:
    """Much of the communication time runs while no compute runs (overlap coverage below target).

    overlap coverage = |∪comm ∩ ∪compute| / |∪comm| (docs/metrics.md, HTA's definition). Data-parallel gradient
    sync can hide almost completely under backward (target ≥ 90 %); tensor-parallel collectives are blocking
    per layer, so ≥ 60 % is already good. The report has one job-wide coverage, not one per group role, so
    a job with TP groups is judged against the TP target. Severity warning when a pure data-parallel job
    hides less than overlap_severe of its communication, info otherwise (with pipeline or expert parallelism
    the blocking P2P / all-to-all time is judged by the PIPE / MOE rules); whole-trace (no ProfilerStep)
    and CPU-only (gloo: comm spans include the wait for peers) traces give info only, and so do trace sets
    missing ranks of the world (comm time may be waiting for ranks that are not there to see).
    Cost: the exposed comm share (the most that perfect overlap could save).
    """
    cov = num(ctx.summary.get("overlap_coverage"))
    exposed = num(ctx.summary.get("exposed_comm_share"))
    if cov is None or exposed is None or exposed < ctx.t("exposed_comm_min"):
        return
    tp = _has_tp(ctx)
    target = ctx.t("tp_overlap_min") if tp else ctx.t("dp_overlap_min")
    if cov >= target:
        return
    pipeline = bool((ctx.cross.get("pipeline") or {}).get("detected")) or bool({"pp", "ep"} & ctx.roles())
    severe = not tp and not pipeline and cov < ctx.t("overlap_severe") and not ctx.whole_trace_only() \
        and not ctx.cpu_only() and not (ctx.report.get("job") or {}).get("missing_ranks")
    low = {r: v for r, v in _rank_values(ctx, "overlap_coverage").items() if v < target}
    g = None if tp else _dp_group(ctx)
    ev = [Evidence(f"overlap coverage {pct(cov)} of communication time (target ≥ {pct(target)} for "
                   f"{'jobs with tensor parallelism' if tp else 'data parallelism'})"),
          Evidence(f"exposed communication {pct(exposed)} of step time; comm share "
                   f"{pct(num(ctx.summary.get('comm_share')))}")]
    if low:
        worst = min(low, key=low.get)
        ev.append(Evidence(f"lowest: rank {worst} at {pct(low[worst])}; {len(low)} rank(s) below target"))
    fix = ""
    if not tp and not pipeline and cov < 0.05:  # nothing at all overlaps: the reduction starts after backward
        fix = ("Nothing overlaps: the gradient reduction only starts once backward has finished. With DDP the "
               "gradients then fit in one or two buckets, or something delays the hooks (a manual all_reduce "
               "after backward, find_unused_parameters=True, no_sync on every step): lower bucket_cap_mb (e.g. "
               "25 → 5-10 MB) so the first buckets are ready early in backward, and let DDP's hooks reduce; "
               "with FSDP use backward_prefetch=BACKWARD_PRE.")
    yield Finding(title=f"Only {pct(cov)} of communication overlaps compute ({pct(exposed)} of step time exposed)",
                  fix=fix,
                  severity="warning" if severe else "info", confidence=0.8 if severe else 0.6, evidence=ev,
                  cost=exposed, subject=Subject(ranks=sorted(low), process_group=None if g is None else
                                                str(g.get("name"))),
                  involved=set(low) | set(ctx.report.get("job", {}).get("ranks") or []))


@rule("COMM002", "High communication share of step time", "info",
      thresholds=(Threshold("dp_comm_share_max", 0.10, "fraction",
                            "data-parallel jobs: report when communication takes more of the step"),
                  Threshold("tp_comm_share_max", 0.30, "fraction",
                            "jobs with tensor-parallel groups: report when communication takes more of the step")),
      confirm="Per-rank comm share in the metrics table; compare busbw with nccl-tests on the same hosts.",
      fix="Send less or less often: gradient accumulation (no_sync() for all but the last micro-step), a larger "
          "per-GPU batch, bf16 gradients / communication hooks (bf16_compress_hook, PowerSGD), ZeRO stage or "
          "TP degree appropriate for the network; check the link bandwidth (NET rules).")
def high_comm_share(ctx: Context) -> Iterator[Finding]:
    """Communication occupies a large part of every step (comm share = |∪comm| / step time).

    Waiting inside a collective for a late rank counts as communication time, so a straggler inflates this
    number (LOAD001 lists it as a consequence then). Informational: a high share hidden under compute costs
    little; COMM001 judges the exposed part.
    """
    share = num(ctx.summary.get("comm_share"))
    if share is None:
        return
    tp = _has_tp(ctx)
    limit = ctx.t("tp_comm_share_max") if tp else ctx.t("dp_comm_share_max")
    if share <= limit:
        return
    high = sorted(r for r, v in _rank_values(ctx, "comm_share").items() if v > limit)
    yield Finding(title=f"Communication takes {pct(share)} of step time (limit {pct(limit)})", confidence=0.6,
                  evidence=[Evidence(f"comm share {pct(share)}, exposed {pct(num(ctx.summary.get('exposed_comm_share')))}"
                                     f", overlap coverage {pct(num(ctx.summary.get('overlap_coverage')))}"),
                            Evidence(f"{ranks_text(high)} above the limit")],
                  cost=num(ctx.summary.get("exposed_comm_share")), subject=Subject(ranks=high), involved=set(high))


@rule("COMM003", "Many small, latency-bound collectives (gradient buckets too small)", "warning",
      thresholds=(Threshold("small_coll_per_step", 20, "calls/step",
                            "report a data-parallel group/op issuing at least this many collectives per step …"),
                  Threshold("small_coll_max_bytes", 1e6, "bytes",
                            "… whose mean size is below this (NCCL is latency-bound below ~1-4 MB per call)")),
      explains=("COMM001", "COMM002"),
      confirm="Count the all-reduce (reduce-scatter) kernels per ProfilerStep in a trace and their sizes "
              "(In msg nelems × dtype); compare their busbw with nccl-tests at 25 MB.",
      fix="Use fewer, larger buckets: DDP(bucket_cap_mb=25…100) (default 25), FSDP: wrap larger modules "
          "(auto-wrap min_num_params), DeepSpeed reduce_bucket_size / allgather_bucket_size ≥ 5e8 elements; "
          "gradient accumulation with no_sync() to synchronise once per optimizer step.")
def small_collectives(ctx: Context) -> Iterator[Finding]:
    """A data-parallel group issues many small collectives per step: each pays NCCL's fixed latency.

    A collective costs roughly α + bytes/β; below ~1-4 MB the latency α (tens of µs, more across nodes)
    dominates and busbw collapses. Tensor-parallel, pipeline and expert groups are not judged (their message
    sizes follow the model). Cost: the transfer time of these collectives per rank as a fraction of step time.
    """
    steps = ctx.n_steps()
    if not steps:
        return
    tt = ctx.traced_time_us()
    for r in (ctx.cross.get("collectives") or {}).get("by_group_op") or []:
        g = ctx.group(r.get("process_group")) or {}
        if str(g.get("role", "unknown")) not in DP_ROLES or str(r.get("op")) not in DP_OPS:
            continue
        count, nbytes = num(r.get("count")), num(r.get("bytes"))
        if not count or nbytes is None:
            continue
        per_step, mean_bytes = count / steps, nbytes / count
        if per_step < ctx.t("small_coll_per_step") or mean_bytes >= ctx.t("small_coll_max_bytes"):
            continue
        transfer = count * (num(r.get("mean_transfer_us")) or 0.0)
        ranks = [int(x) for x in g.get("ranks") or []]
        yield Finding(title=f"{per_step:.0f} {r.get('op')} calls per step on process group {r.get('process_group')}"
                            f" with a mean of {mb(mean_bytes)}",
                      confidence=0.8, cost=min(1.0, transfer / tt) if tt else None,
                      evidence=[Evidence(f"{int(count)} calls over {steps} step(s), mean {mb(mean_bytes)}, mean "
                                         f"transfer {num(r.get('mean_transfer_us')) or 0:.0f} µs, busbw "
                                         f"{num(r.get('mean_busbw_gbps')) or 0:.2f} GB/s")],
                      subject=Subject(ranks=ranks, process_group=str(r.get("process_group")),
                                      collective={"op": r.get("op"), "seq": None}),
                      involved=set(ranks))
