"""Communication efficiency rules: overlap coverage, communication share of step time, small latency-bound
collectives (gradient buckets too small)."""
from __future__ import annotations

from typing import Iterator, Optional

from rules.context import Context
from rules.finding import Evidence, Finding, Subject
from rules.registry import Threshold, rule
from rules.util import mb, num, pct, ranks_text, unsplit_text

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


_OVERLAP_SRC = ("the field's healthy ranges: DDP/FSDP gradient sync hides under backward (HTA and "
                "PyTorch DDP overlap design: buckets reduce while later layers still compute backward), Megatron TP's "
                "per-layer all-reduce blocks the next GEMM, so 60-70 % is already good with comm-GEMM overlap")
_SHARE_SRC = ("the field's healthy ranges: data-parallel sync ≤ 10 % of the step, tensor-parallel "
              "collectives ≤ 30 % (Megatron-LM scaling studies keep TP inside NVLink for this reason)")
OVERLAP_TARGET = {"dp": "dp_overlap_min", "fsdp": "dp_overlap_min", "tp": "tp_overlap_min"}
SHARE_LIMIT = {"dp": "dp_comm_share_max", "fsdp": "dp_comm_share_max", "tp": "tp_comm_share_max"}
ROLE_NAME = {"dp": "data-parallel", "fsdp": "FSDP", "tp": "tensor-parallel", "ep": "expert-parallel",
             "pp": "pipeline", "unknown": "unclassified"}


def role_label(role: str) -> str:
    """'expert-parallel (ep)': the role's name in words with the key the process-group table shows."""
    name = ROLE_NAME.get(role, role)
    return name if name == role else f"{name} ({role})"


def _roles(ctx: Context) -> list[dict]:
    """cross_rank.roles rows (per-role comm share, overlap, exposed share); [] when there is no cross-rank data."""
    return [r for r in (ctx.cross.get("roles") or []) if num(r.get("comm_share"))]


def _dp_rows(ctx: Context) -> list[dict]:
    """cross_rank.collectives.by_group_op rows of the data-parallel groups' gradient reductions."""
    dp = {str(g.get("name")) for g in ctx.groups() if str(g.get("judged_role") or g.get("role")) in ("dp", "fsdp")}
    return [r for r in (ctx.cross.get("collectives") or {}).get("by_group_op") or []
            if str(r.get("process_group")) in dp and str(r.get("op")) in ("allreduce", "reducescatter")]


def dp_reductions(ctx: Context) -> Optional[tuple[float, Optional[float]]]:
    """(gradient reductions per step, mean bytes or None when the trace records no sizes) of the data-parallel
    groups, from cross_rank.collectives."""
    steps = ctx.n_steps()
    rows = _dp_rows(ctx)
    count = sum(num(r.get("count")) or 0 for r in rows)
    sizes = [num(r.get("bytes")) for r in rows]
    if not steps or not count:
        return None
    per_group = max(1, len({str(r.get("process_group")) for r in rows}))
    known = all(b is not None and b > 0 for b in sizes)  # a trace without sizes (gloo, no record_shapes): unknown
    return count / steps / per_group, (sum(sizes) / count if known else None)


#: Share of a step's compute that is backward when nothing says otherwise (backward computes the gradients of
#: both the activations and the weights: about twice the forward's FLOPs, so ~2/3 of forward + backward).
BACKWARD_SHARE = 2.0 / 3.0
#: The backward must be at least this many times the reductions' transfer for smaller buckets to be advised.
HIDE_MARGIN = 2.0


def dp_structure(ctx: Context) -> Optional[dict]:
    """What the job's own structure says about hiding its gradient reductions (the facts behind the advice):
    ``per_step`` reductions per step that reduces (per group), ``mean_bytes``, ``steps`` and ``active_steps``
    (steps with a reduction: fewer with gradient accumulation), ``accumulation`` (some steps reduce nothing),
    ``transfer_us`` (reduction transfer per reducing step, per group), ``backward_us`` (the backward that could
    hide it: BACKWARD_SHARE of the mean compute per step)."""
    rows = _dp_rows(ctx)
    steps = ctx.n_steps()
    if not rows or not steps:
        return None
    groups = max(1, len({str(r.get("process_group")) for r in rows}))
    count = sum(num(r.get("count")) or 0 for r in rows)
    active = max((int(num(r.get("active_steps")) or 0) for r in rows), default=0) or steps
    in_active = sum((num(r.get("calls_per_active_step")) or 0) * (num(r.get("active_steps")) or 0) for r in rows)
    per_step = (in_active or count) / groups / active
    sizes = [num(r.get("bytes")) for r in rows]
    known = all(b is not None and b > 0 for b in sizes)
    transfer = [num(r.get("transfer_us_per_active_step")) for r in rows]
    transfer_us = sum(t for t in transfer if t is not None) / groups if any(t is not None for t in transfer) else None
    comp = [(num(r.get("compute_us")), num(r.get("steps"))) for r in ctx.per_rank()]
    comp = [(c, n) for c, n in comp if c is not None and n]
    compute_us = sum(c for c, _ in comp) / sum(n for _, n in comp) if comp else None
    return {"per_step": per_step, "mean_bytes": sum(sizes) / count if known and count else None, "steps": steps,
            "active_steps": active, "accumulation": steps >= 2 and active < steps,
            "transfer_us": transfer_us, "compute_us": compute_us,
            "backward_us": compute_us * BACKWARD_SHARE if compute_us is not None else None}


def _ms(us: Optional[float]) -> str:
    return "?" if us is None else f"{us / 1e3:.1f} ms"


_NOTHING_OVERLAPS = (
    "Nothing overlaps: the gradient reduction only starts once backward has finished. With DDP the gradients then "
    "fit in one or two buckets, or something delays the hooks (a manual all_reduce after backward, "
    "find_unused_parameters=True, no_sync on every step): lower bucket_cap_mb (e.g. 25 → 5-10 MB) so the first "
    "buckets are ready early in backward, and let DDP's hooks reduce; with FSDP use backward_prefetch=BACKWARD_PRE.")

_SEND_LESS = ("send less or less often: bf16 gradients (DDP comm hook bf16_compress_hook, PowerSGD), a larger "
              "per-rank batch, or more micro-batches per optimizer step")


_FSDP_OVERLAP = ("Let FSDP overlap its collectives with compute: backward_prefetch=BACKWARD_PRE and "
                 "forward_prefetch=True (FSDP1), or fully_shard per block with the default prefetching (FSDP2); wrap "
                 "per transformer block so each all-gather / reduce-scatter can hide under the neighbouring block's "
                 "compute, and keep reshard_after_forward=False on the last blocks if memory allows.")


def _bucket_advice(ctx: Context, coverage: Optional[float] = None, role: str = "dp") -> str:
    """COMM001's gradient-reduction advice, from the job's own structure (dp_structure): how many reductions
    run per reducing step and how large they are, whether the job already accumulates gradients, and whether its
    backward is long enough to hide the reductions at all. Smaller buckets are advised only where they can help:
    few reductions per step whose transfer fits inside the backward."""
    st = dp_structure(ctx)
    if st is None:
        return _NOTHING_OVERLAPS if coverage is not None and coverage < 0.05 else ""
    per_step, mean = st["per_step"], st["mean_bytes"]
    transfer, backward = st["transfer_us"], st["backward_us"]
    # smaller buckets are advised only under a backward clearly longer than the transfer (HIDE_MARGIN): the
    # estimate is rough, the last bucket always reduces after backward, and overlapped transfers slow down
    too_long = transfer is not None and backward is not None and transfer * HIDE_MARGIN > backward
    if st["accumulation"]:
        head = (f"The job already accumulates gradients: reductions run in {st['active_steps']} of {st['steps']} "
                f"steps ({per_step:.0f} per reducing step, {_ms(transfer)} of transfer), so their cost is shared by "
                f"{st['steps'] / max(1, st['active_steps']):.1f} micro-batches and the bucket size changes nothing "
                "in the other steps. ")
        if too_long:
            return head + (f"The synchronising micro-batch's backward (~{_ms(backward)}) is shorter than that "
                           f"transfer, so no bucket size hides it: {_SEND_LESS}.")
        return head + ("To hide the rest, let the synchronising micro-batch's backward overlap it (DDP's hooks, "
                       f"no manual all_reduce after backward), or {_SEND_LESS}.")
    if role == "fsdp" and not too_long:
        return _FSDP_OVERLAP
    if too_long:
        head = ""
        if coverage is not None and coverage < 0.05:  # nothing overlaps yet: overlap first, it hides the backward
            head = ("Nothing overlaps: the gradient reductions start only once backward has finished (a manual "
                    "all_reduce after backward, find_unused_parameters=True, or one bucket): let DDP's hooks reduce "
                    f"during backward, which hides up to its length (~{_ms(backward)}). ")
        longer = "longer than" if transfer > backward else "not clearly shorter than"
        return head + (f"The gradient reductions' transfer ({_ms(transfer)} per step, {per_step:.0f} reduction(s)) "
                       f"is {longer} the backward that could hide it (~{_ms(backward)}, ⅔ of the step's compute): "
                       "no bucket size hides more than part of the backward's length. "
                       f"{_SEND_LESS[0].upper() + _SEND_LESS[1:]}; gradient accumulation (no_sync() on all but the "
                       "last micro-batch) reduces once per optimizer step.")
    if per_step <= ctx.t("few_reductions_per_step"):
        each = f" of {mb(mean)} each" if mean is not None else ""
        cap = (f"to about a quarter of the {mb(mean * per_step)} the gradients total per step (four or more buckets)"
               if mean is not None else "(e.g. 25 → 5 MB)")
        return (f"Only {per_step:.0f} gradient reduction(s) per step{each}: they can start only once the bucket is "
                f"full, late in backward. Lower bucket_cap_mb {cap}, so the first buckets are reduced while backward "
                "still runs" + (f" (the backward, ~{_ms(backward)}, is long enough to hide the {_ms(transfer)} of "
                                "transfer)." if transfer is not None and backward is not None else "."))
    if per_step >= ctx.t("small_coll_per_step") and mean is not None and mean < ctx.t("small_coll_max_bytes"):
        return (f"{per_step:.0f} gradient reductions per step of {mb(mean)} each: each pays NCCL's latency. Raise "
                "bucket_cap_mb (25 → 50-100) so fewer, larger buckets overlap backward.")
    return _NOTHING_OVERLAPS if coverage is not None and coverage < 0.05 else ""


@rule("COMM001", "Low overlap of communication with compute", "warning",
      thresholds=(Threshold("dp_overlap_min", 0.9, "fraction",
                            "data-parallel / FSDP groups: report when less of their communication time overlaps compute",
                            source=_OVERLAP_SRC),
                  Threshold("tp_overlap_min", 0.6, "fraction",
                            "tensor-parallel groups (blocking per-layer collectives): report below this",
                            source=_OVERLAP_SRC),
                  Threshold("overlap_severe", 0.2, "fraction",
                            "without per-role data: a data-parallel job below this coverage gets a warning; between it "
                            "and dp_overlap_min an info",
                            source="a DDP job whose buckets start only after backward overlaps < 20 % (the hooks fire "
                                   "late); above it some buckets do hide, which is a tuning question"),
                  Threshold("exposed_comm_min", 0.05, "fraction",
                            "ignore low overlap when the exposed (non-overlapped) comm is below this share of step time",
                            source="below 5 % of the step perfect overlap would save less than run-to-run noise "
                                   "(step spread limit step_spread_max)"),
                  Threshold("role_exposed_warn", 0.10, "fraction",
                            "a role's exposed communication at or above this share of the step is a warning (below: info)",
                            source="the data-parallel comm-share limit (10 %): exposed time costs the step one to one, "
                                   "so 10 % exposed is the whole healthy DP budget spent on waiting"),
                  Threshold("few_reductions_per_step", 2, "calls/step",
                            "at most this many gradient reductions per step: advise a lower bucket_cap_mb",
                            source="DDP's default 25 MB bucket: a model whose gradients fill 1-2 buckets starts its "
                                   "first reduction only near the end of backward")),
      explains=("COMM002",),
      confirm="Open the trace of a reported rank: gradient all-reduce / reduce-scatter kernels run after the "
              "backward kernels instead of on a separate stream during them; the per-role table "
              "(cross_rank.roles) gives each role's comm share, overlap and exposed share.",
      fix="Let DDP/FSDP overlap: do not call all-reduce manually after backward; keep DDP's bucketed hooks "
          "(bucket_cap_mb 25-100; find_unused_parameters=False; static_graph=True), FSDP backward_prefetch="
          "BACKWARD_PRE and forward_prefetch=True; for TP use sequence parallelism / async TP "
          "(TransformerEngine comm-GEMM overlap); for EP overlap dispatch/combine with the other micro-batch "
          "(DeepEP's two-micro-batch schedule).")
def low_overlap(ctx: Context) -> Iterator[Finding]:
    """The communication of a process-group role runs while no compute runs: it costs step time one to one.

    Judged per role (cross_rank.roles: each rank's comm of that role's groups, clipped to its steps and
    intersected with its compute): DP and FSDP should hide ≥ dp_overlap_min of their communication under
    backward, TP ≥ tp_overlap_min (its per-layer all-reduce blocks the next GEMM); EP and unclassified roles have no
    overlap target but are reported when their exposed communication is a material share of the step; pipeline
    send/recv is the PIPE rules' business. A role is reported when it misses its target and its exposed
    communication is at least exposed_comm_min of the step; a warning from role_exposed_warn on, else info.
    Whole-trace (no ProfilerStep) traces and trace sets missing ranks of the world give info only (comm time may
    be waiting for ranks that are not there to see). Exposed communication is the transfer's: the wait for the last
    member of a collective is the late rank's cost (LOAD001), not the network's. The advice follows the job's own
    structure (dp_structure): gradient accumulation already used (reductions in only some steps) → no bucket
    advice; a reduction whose transfer is not clearly shorter (HIDE_MARGIN) than the backward that could hide it
    (BACKWARD_SHARE of the step's compute) → send less; few reductions under a long backward → lower
    bucket_cap_mb; many small ones → raise it; FSDP → its prefetch and wrapping settings. Without per-role data the job-wide
    coverage is judged against the DP target (the TP one with TP groups). Cost: the role's exposed share.
    """
    roles = _roles(ctx)
    if roles:
        yield from _per_role(ctx, roles)
        return
    yield from _job_wide(ctx)


def _per_role(ctx: Context, roles: list[dict]) -> Iterator[Finding]:
    caveat = ctx.whole_trace_only() or bool((ctx.report.get("job") or {}).get("missing_ranks"))
    # worst first: findings on the same ranks merge into the first one (rules/engine.py merge_duplicates)
    for r in sorted(roles, key=lambda x: -(num(x.get("exposed_comm_share")) or 0.0)):
        role = str(r.get("role"))
        if role == "pp":
            continue
        cov, exposed, share = num(r.get("overlap_coverage")), num(r.get("exposed_comm_share")), num(r.get("comm_share"))
        bound = _unsplit_bound(ctx, r, exposed)
        if bound is not None:
            yield bound
            continue
        if cov is None or exposed is None or exposed < ctx.t("exposed_comm_min"):
            continue
        target = ctx.t(OVERLAP_TARGET[role]) if role in OVERLAP_TARGET else None
        if target is not None and cov >= target:
            continue
        if target is None and exposed < ctx.t("role_exposed_warn"):
            continue
        severe = exposed >= ctx.t("role_exposed_warn") and not caveat
        groups = [str(x) for x in r.get("groups") or []]
        gs = [ctx.group(g) or {} for g in groups]
        ranks = sorted({int(x) for g in gs for x in g.get("ranks") or []} | {int(x) for x in r.get("ranks") or []})
        name = role_label(role)
        ev = [Evidence(f"{name} communication: {pct(share)} of step time, {pct(cov)} of it overlapped by compute"
                       + (f" (target ≥ {pct(target)})" if target is not None else "")),
              Evidence(f"exposed {name} communication {pct(exposed)} of step time "
                       f"({num(r.get('exposed_comm_us')) or 0:.0f} µs per rank over the traced steps); groups "
                       f"{', '.join(groups[:6])}{' …' if len(groups) > 6 else ''}")]
        wait = num(r.get("wait_us"))
        if wait:
            ev.append(Evidence(f"not counted: {wait / 1e3:.1f} ms per rank of waiting inside these collectives for "
                               "the last member to arrive (a wait is the late rank's cost, not the network's)"))
        line = unsplit_text(ctx.cross, num(r.get("unsplit_share")), "these ranks", groups)
        if line:
            ev.append(Evidence(line))
        fix = ""
        if role in ("dp", "fsdp"):
            fix = _bucket_advice(ctx, cov, role)
            st = dp_structure(ctx)
            if st is not None:
                size = f", mean {mb(st['mean_bytes'])}" if st["mean_bytes"] is not None else \
                    " (the trace records no sizes)"
                where = (f" in {st['active_steps']} of {st['steps']} steps" if st["accumulation"] else "")
                ev.append(Evidence(f"{st['per_step']:.1f} gradient reduction(s) per reducing step per group{size}"
                                   f"{where}"))
        elif role == "tp":
            fix = ("Tensor-parallel all-reduces block the next GEMM by design, so bucket settings do not apply: overlap "
                   "them with sequence parallelism and async TP (torch's micro-pipeline TP, "
                   "torch._inductor.config._micro_pipeline_tp with symmetric memory; TransformerEngine's comm-GEMM "
                   "overlap), keep each TP group inside one node's fast links, or lower the TP degree and raise the "
                   "data-parallel one.")
        elif role == "ep":
            fix = ("Overlap expert dispatch/combine with compute: split the batch into two micro-batches and run one's "
                   "all-to-all while the other computes (DeepEP's hook-based low-latency mode frees the SMs), or "
                   "reduce all-to-all bytes (FP8 dispatch, fewer experts per token across nodes).")
        yield Finding(title=f"{pct(exposed)} of step time is exposed {name} communication "
                            f"(overlap {pct(cov)}{', target ≥ ' + pct(target) if target is not None else ''})",
                      fix=fix, severity="warning" if severe else "info", confidence=0.8 if severe else 0.6,
                      evidence=ev, cost=exposed,
                      subject=Subject(ranks=ranks, process_group=groups[0] if len(groups) == 1 else None),
                      involved=set(ranks) | set(ctx.report.get("job", {}).get("ranks") or []),
                      extra={"role": role})


def _unsplit_bound(ctx: Context, r: dict, exposed: Optional[float]) -> Optional[Finding]:
    """An info for a role whose known exposed share is under exposed_comm_min but that could reach
    role_exposed_warn if its unsplit time (collectives lacking a traced rank: docs/metrics.md, "Wait and
    transfer") were transfer: the exposure is then a range, and which end holds is a question the folder cannot
    answer (a comm-bound job with a healthy rank's trace cut, or a cut straggler's victims waiting). None when
    the role has no such range."""
    eu = num(r.get("exposed_unsplit_share")) or 0.0
    low = exposed or 0.0
    if low >= ctx.t("exposed_comm_min") or low + eu < ctx.t("role_exposed_warn"):
        return None
    role = str(r.get("role"))
    name = role_label(role)
    groups = [str(x) for x in r.get("groups") or []]
    ranks = sorted(int(x) for x in r.get("ranks") or [])
    wu = (ctx.cross.get("collectives") or {}).get("wait_unknown") or {}
    missing = [int(x) for x in wu.get("ranks_missing") or []]
    who = ranks_text(missing) if missing else "a traced rank"
    ev = [Evidence(f"exposed {name} communication: {pct(low)} of step time known as transfer, up to {pct(low + eu)} "
                   f"if the unsplit time no compute hides ({pct(eu)}) is transfer rather than waiting for {who}")]
    line = unsplit_text(ctx.cross, num(r.get("unsplit_share")), "these ranks", groups)
    if line:
        ev.append(Evidence(line))
    return Finding(title=f"Exposed {name} communication is {pct(low)} to {pct(low + eu)} of step time: {who} "
                         f"{'are' if len(missing) > 1 else 'is'} missing from its "
                         "collectives, so its wait and the transfer cannot be told apart",
                   fix="Nothing to decide from this folder: re-collect the traces with every rank's file whole (let "
                       "the profiler finish writing on every rank), then this rule judges the overlap. If the cut rank "
                       "was late, the time is its straggling (LOAD001 on a whole set); if not, it is exposed "
                       "communication.",
                   severity="info", confidence=0.5, evidence=ev, cost=low,
                   subject=Subject(ranks=ranks, process_group=groups[0] if len(groups) == 1 else None),
                   involved=set(ranks), extra={"role": role})


_PIPELINE_OVERLAP = ("Part of the exposed communication is the pipeline's send/recv, which the PIPE findings judge; for "
                     "the data-parallel part let DDP's bucketed hooks overlap backward (bucket_cap_mb, no manual "
                     "all_reduce after backward), for tensor parallelism use sequence parallelism / comm-GEMM "
                     "overlap.")


def p2p_only(ctx: Context) -> bool:
    """A pipeline whose only communication is its send/recv (no DP/TP/EP collectives): its comm share and
    overlap are the stages waiting for each other, which the PIPE rules judge, not a DP or TP target."""
    ops = {str(r.get("op")) for r in (ctx.cross.get("collectives") or {}).get("by_group_op") or []}
    return bool((ctx.cross.get("pipeline") or {}).get("detected")) and ops <= {"send", "recv"}


def _job_wide(ctx: Context) -> Iterator[Finding]:
    if p2p_only(ctx):
        return
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
    line = unsplit_text(ctx.cross, num(ctx.summary.get("unsplit_share")), "the ranks")
    if line:
        ev.append(Evidence(line))
    yield Finding(title=f"Only {pct(cov)} of communication overlaps compute ({pct(exposed)} of step time exposed)",
                  fix=_bucket_advice(ctx, cov) if not tp and not pipeline else _PIPELINE_OVERLAP,
                  severity="warning" if severe else "info", confidence=0.8 if severe else 0.6, evidence=ev,
                  cost=exposed, subject=Subject(ranks=sorted(low), process_group=None if g is None else
                                                str(g.get("name"))),
                  involved=set(low) | set(ctx.report.get("job", {}).get("ranks") or []))


@rule("COMM002", "High communication share of step time", "info",
      thresholds=(Threshold("dp_comm_share_max", 0.10, "fraction",
                            "data-parallel / FSDP groups: report when their communication takes more of the step",
                            source=_SHARE_SRC),
                  Threshold("tp_comm_share_max", 0.30, "fraction",
                            "tensor-parallel groups: report when their communication takes more of the step",
                            source=_SHARE_SRC)),
      confirm="Per-role comm share in cross_rank.roles; compare busbw with nccl-tests on the same hosts.",
      fix="Send less or less often: gradient accumulation (no_sync() for all but the last micro-step), a larger "
          "per-GPU batch, bf16 gradients / communication hooks (bf16_compress_hook, PowerSGD), ZeRO stage or "
          "TP degree appropriate for the network; check the link bandwidth (NET rules).")
def high_comm_share(ctx: Context) -> Iterator[Finding]:
    """The transfer of a role occupies a large part of every step (transfer share = |∪comm − waits| / step time).

    Judged per role (cross_rank.roles): DP/FSDP against dp_comm_share_max, TP against tp_comm_share_max; EP and
    PP have no healthy range of their own here (their traffic follows the model and the schedule). Waiting
    inside a collective for a late rank is not counted (analyzer/report/waits.py): it is the late rank's cost,
    which LOAD001 reports. Informational: a high share hidden under compute costs little;
    COMM001 judges the exposed part. Without per-role data the job-wide share is judged (TP limit with TP groups).
    """
    roles = _roles(ctx)
    if roles:
        for r in roles:
            role = str(r.get("role"))
            share = num(r.get("transfer_share"))
            share = num(r.get("comm_share")) if share is None else share
            if role not in SHARE_LIMIT or share is None or share <= ctx.t(SHARE_LIMIT[role]):
                continue
            limit = ctx.t(SHARE_LIMIT[role])
            groups = [str(x) for x in r.get("groups") or []]
            ranks = sorted(int(x) for x in r.get("ranks") or [])
            yield Finding(title=f"{role_label(role)[:1].upper() + role_label(role)[1:]} communication takes {pct(share)} of step "
                                f"time (limit {pct(limit)})", confidence=0.6,
                          evidence=[Evidence(f"{role} transfer {pct(share)} of step time (whole spans "
                                             f"{pct(num(r.get('comm_share')))}, the rest waiting for late members"
                                             + (f" or unsplit ({pct(num(r.get('unsplit_share')))})"
                                                if (num(r.get("unsplit_share")) or 0) >= 0.0005 else "")
                                             + f"), exposed {pct(num(r.get('exposed_comm_share')))}, overlap "
                                             f"{pct(num(r.get('overlap_coverage')))}; groups {', '.join(groups[:6])}")]
                          + [Evidence(t) for t in [unsplit_text(ctx.cross, num(r.get("unsplit_share")), "these ranks",
                                                                groups)] if t],
                          cost=num(r.get("exposed_comm_share")),
                          subject=Subject(ranks=ranks, process_group=groups[0] if len(groups) == 1 else None),
                          involved=set(ranks), extra={"role": role})
        return
    share = num(ctx.summary.get("transfer_share"))
    share = num(ctx.summary.get("comm_share")) if share is None else share
    if share is None or p2p_only(ctx):
        return
    tp = _has_tp(ctx)
    limit = ctx.t("tp_comm_share_max") if tp else ctx.t("dp_comm_share_max")
    if share <= limit:
        return
    by_rank = _rank_values(ctx, "transfer_share") or _rank_values(ctx, "comm_share")
    high = sorted(r for r, v in by_rank.items() if v > limit)
    yield Finding(title=f"Communication takes {pct(share)} of step time (limit {pct(limit)})", confidence=0.6,
                  evidence=[Evidence(f"transfer share {pct(share)} (whole spans {pct(num(ctx.summary.get('comm_share')))}),"
                                     f" exposed {pct(num(ctx.summary.get('exposed_comm_share')))}"
                                     f", overlap coverage {pct(num(ctx.summary.get('overlap_coverage')))}"),
                            Evidence(f"{ranks_text(high)} above the limit")],
                  cost=num(ctx.summary.get("exposed_comm_share")), subject=Subject(ranks=high), involved=set(high))


def _avoidable_latency(ctx: Context, group: str, per_step: float, mean_bytes: float) -> Optional[tuple[float, int]]:
    """(share of the step, ideal calls) the extra calls of a data-parallel group cost: DDP's default buckets make
    1 + ⌈(bytes a step − 1 MB) / 25 MB⌉ calls of the same bytes; with more than twice as many, the latency-bound
    calls' part of the group's exposed communication beyond those — exposed share × (1 − ideal / calls) — is
    what larger buckets give back. None for groups the roles section does not call data-parallel (dp / fsdp), or
    at most twice the ideal count."""
    import math
    ideal = 1 + math.ceil(max(0.0, per_step * mean_bytes - 1e6) / 25e6)
    if per_step <= 2 * ideal:  # more than twice (3 buckets and a metrics all-reduce a step are not judged)
        return None
    role = next((x for x in ctx.cross.get("roles") or [] if group in [str(g) for g in x.get("groups") or []]), None)
    if role is None or str(role.get("role")) not in ("dp", "fsdp"):  # gradient reductions only: a TP group's
        return None  # all-reduces carry activations, one per layer by design, and no bucket setting changes them
    exposed = num(role.get("exposed_comm_share"))
    if exposed is None:
        return None
    return exposed * (1 - ideal / per_step), ideal


@rule("COMM003", "Many small, latency-bound collectives (gradient buckets too small)", "warning",
      thresholds=(Threshold("small_coll_per_step", 20, "calls/step",
                            "report a data-parallel group/op issuing at least this many collectives per step …",
                            source="DDP's default 25 MB buckets give a few reductions per step for models up to "
                                   "~0.5 B parameters; 20+ per step means buckets of a few MB or per-parameter "
                                   "reductions"),
                  Threshold("small_coll_max_bytes", 1e6, "bytes",
                            "… whose mean size is below this (NCCL is latency-bound below ~1-4 MB per call)",
                            source="α-β model with NCCL's ring latency (8.4 µs + 5.7-6.6 µs per hop, "
                                   "src/graph/tuning.cc): below ~1 MB latency is over half the time on any link"),
                  Threshold("small_coll_cost_min", 0.05, "fraction",
                            "… or fewer calls, more than twice as many as DDP's default buckets would make of the same "
                            "bytes, when the part of the group's exposed communication the extra calls account for "
                            "is at least this share of the step",
                            source="real CPU runs (fixtures/real-cpu-perf-4): bucket_cap_mb=0.02 gives 8 all-reduces "
                                   "a step where 25 MB buckets give 2, and 23.6 % of the step is lost against 25 MB "
                                   "buckets (measured in the job); 0.5 MB buckets (3 a step) are not judged")),
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
    Fewer calls are judged by what they cost: a data-parallel role issuing more than twice the calls DDP's
    default buckets would make of the same bytes (1 MB first, then 25 MB) is reported when the extra calls' part
    of its exposed communication (exposed share × (1 − ideal / calls)) is ≥ ``small_coll_cost_min`` of the step;
    that part is then the cost (real CPU runs, bucket_cap_mb=0.02: 20.5 % estimated, 23.6 % measured in the job
    against 25 MB buckets).
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
        if mean_bytes >= ctx.t("small_coll_max_bytes"):
            continue
        avoidable = _avoidable_latency(ctx, str(r.get("process_group")), per_step, mean_bytes)
        many = per_step >= ctx.t("small_coll_per_step")
        if not many and (avoidable is None or avoidable[0] < ctx.t("small_coll_cost_min")):
            continue
        transfer = count * (num(r.get("mean_transfer_us")) or 0.0)
        ranks = [int(x) for x in g.get("ranks") or []]
        yield Finding(title=f"{per_step:.0f} {r.get('op')} calls per step on process group {r.get('process_group')}"
                            f" with a mean of {mb(mean_bytes)}",
                      confidence=0.8, cost=(min(1.0, transfer / tt) if tt else None) if many else avoidable[0],
                      evidence=[Evidence(f"{int(count)} calls over {steps} step(s), mean {mb(mean_bytes)}, mean "
                                         f"transfer {num(r.get('mean_transfer_us')) or 0:.0f} µs, busbw "
                                         f"{num(r.get('mean_busbw_gbps')) or 0:.2f} GB/s")]
                      + ([Evidence(f"DDP's default buckets (1 MB first, then 25 MB) would make {avoidable[1]} "
                                   f"call{'s' if avoidable[1] != 1 else ''} a step of these {mb(per_step * mean_bytes)}"
                                   f"; the {per_step:.0f} calls' share of the group's exposed communication beyond "
                                   f"those is {pct(avoidable[0])} of the step (each call pays the latency)")]
                         if avoidable is not None else []),
                      subject=Subject(ranks=ranks, process_group=str(r.get("process_group")),
                                      collective={"op": r.get("op"), "seq": None}),
                      involved=set(ranks))
