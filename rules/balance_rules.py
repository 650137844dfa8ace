"""Load-balance rules: straggler rank, step-time spread, host / data-loader stalls, uneven work in one step,
MoE expert imbalance."""
from __future__ import annotations

from typing import Iterator, Optional

from rules.context import Context
from rules.finding import Evidence, Finding, Subject
from rules.registry import Threshold, rule
from rules.util import frac, group_for_rank, median, num, pct, ranks_text

WAIT_EFFECTS = ("LOAD002", "COMM001", "COMM002", "PIPE001")
#: Below this confidence (both margins thin: near the noise of a clean run) LOAD001 is an info, "may be".
WEAK_STRAGGLER = 0.5
ATTRIBUTION = {
    "compute": "it computes longer than its peers (more work or a slower GPU)",
    "host": "its GPU waits for the host (data loader, CPU work, Python) before launching work",
    "link": "its transfers are slower (a slower link or NIC)",
}
#: The same on a CPU-only (gloo) run, which has no GPU to speak of.
ATTRIBUTION_CPU = dict(ATTRIBUTION, compute="it computes longer than its peers (more work or a slower CPU)",
                       host="it spends longer in host work outside its compute (data loader, logging, Python) before "
                            "its collectives")


def _all_ranks(ctx: Context) -> set[int]:
    """Every rank the report knows about."""
    return {int(r) for r in (ctx.report.get("job") or {}).get("ranks") or []}


def _steps_by_rank(ctx: Context) -> dict[int, dict[int, dict]]:
    """{step: {rank: per_step row}} for real ProfilerStep windows (whole-trace rows excluded)."""
    out: dict[int, dict[int, dict]] = {}
    for r in ctx.per_step():
        if r.get("whole_trace") or r.get("step") is None or r.get("rank") is None:
            continue
        out.setdefault(int(r["step"]), {})[int(r["rank"])] = r
    return out


def _compute_straggler(ctx: Context) -> Optional[dict]:
    """A rank whose compute is ≥ (1 + straggler_compute_excess) × the step median in ≥ 80 % of steps."""
    steps = _steps_by_rank(ctx)
    if len(steps) < 2 or ctx.cpu_only():  # CPU op durations swing with core contention: not evidence
        return None
    excess = ctx.t("straggler_compute_excess")
    slow: dict[int, list[float]] = {}
    step_times = []
    for rows in steps.values():
        comp = {r: num(x.get("compute_us")) for r, x in rows.items() if num(x.get("compute_us"))}
        if len(comp) < 2:
            continue
        med = median(list(comp.values()))
        step_times.append(median([num(x.get("step_time_us")) or 0.0 for x in rows.values()]) or 0.0)
        for r, c in comp.items():
            if med and c >= (1 + excess) * med:
                slow.setdefault(r, []).append(c - med)
    n_steps = len(step_times)
    cand = {r: v for r, v in slow.items() if len(v) >= 0.8 * n_steps}
    if not cand or len(cand) > max(1, len(_all_ranks(ctx)) // 4):
        return None
    r = max(cand, key=lambda k: sum(cand[k]))
    st = median(step_times) or 0.0
    extra = sum(cand[r]) / len(cand[r])
    return {"rank": r, "cost": min(1.0, extra / st) if st else None, "attribution": "compute", "confidence": 0.6,
            "evidence": [Evidence(f"rank {r} computes {extra / 1000:.2f} ms more than the median rank in "
                                  f"{len(cand[r])} of {n_steps} steps")]}


def _clauses(text: str) -> list[str]:
    """'a (b; c); d' → ['a (b; c)', 'd']: the '; '-separated clauses outside parentheses."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and text.startswith("; ", i):
            out.append(text[start:i])
            start = i + 2
    return out + [text[start:]]


def _straggler_confidence(delay: float, share: float, held: float, delay_min: float, share_min: float) -> float:
    """Margins over both thresholds (each worth half), times the share of steps in which the rank held up most."""
    a = min(1.0, delay / (2 * delay_min)) if delay_min > 0 else 1.0
    b = min(1.0, (share - share_min) / (1 - share_min)) if share_min < 1 else 1.0
    return round(max(0.0, 0.5 * a + 0.5 * b) * min(1.0, held), 3)


def _stage_straggler(ctx: Context) -> Optional[dict]:
    """The pipeline section's straggling stage (analyzer/cross_rank/pipeline_stragglers.py) as a straggler:
    its own off-schedule work or host time exceeds the other stages' consistently and they wait for it."""
    x = (ctx.cross.get("pipeline") or {}).get("stage_straggler")
    if not isinstance(x, dict) or x.get("rank") is None:
        return None
    return {"rank": int(x["rank"]), "cost": min(1.0, num(x.get("delay_share")) or 0.0),
            "attribution": str(x.get("attribution") or "unknown"), "confidence": num(x.get("confidence")) or 0.0,
            "evidence": [Evidence(str(x.get("evidence") or ""))]}


def straggler_info(ctx: Context) -> Optional[dict]:
    """The straggler (rank, cost, attribution, evidence) from the cross-rank hold-ups, else from per-step compute.

    A rank qualifies when the delay it alone causes per step is at least ``straggler_cost_min`` of the median
    step and its share of all ranks' hold-up delay at least ``straggler_share_min`` (docs/cross-rank.md); how
    often it arrives last is supporting evidence (``straggler_pct_last``, off by default).
    """
    s = ctx.cross.get("stragglers") or {}
    if (ctx.cross.get("alignment") or {}).get("status") == "refused":
        return None  # arrival order on unaligned clocks means nothing, and traces whose collectives cannot be
        # matched may not even be one job (CLOCK001 says so)
    rows = [r for r in s.get("per_rank") or [] if r.get("rank") is not None]
    stage = _stage_straggler(ctx)
    if not rows:  # no collectives: a pipeline's straggling stage, else per-step compute (GPU traces only)
        return stage or _compute_straggler(ctx)
    dmin, smin = ctx.t("straggler_cost_min"), ctx.t("straggler_share_min")
    scons = ctx.t("straggler_share_consistent")

    n_steps = len([x for x in s.get("per_step") or [] if (x.get("step") or 0) >= 0])

    def passes(r: dict) -> bool:
        d, sh = num(r.get("delay_share")) or 0.0, num(r.get("holdup_share")) or 0.0
        if d < dmin or int(r.get("n_decided") or 0) < 3 or (frac(r.get("pct_last")) or 0.0) < ctx.t("straggler_pct_last"):
            return False
        # the consistent-excess path also needs the wait it imposes to recur (a material delay in half the steps)
        periodic = len(r.get("periodic_steps") or [])
        recurs = int(r.get("steps_delaying") or 0) >= max(1, min(-(-n_steps // 2), periodic or n_steps))
        own = bool(r.get("consistent_excess")) or bool(r.get("more_work")) or periodic > 0  # its own work stands out
        return sh >= smin or (own and sh >= scons and recurs)

    # a rank idling on its own, consistently, while the hold-ups name nobody or only a "may be" (the analyzer's
    # stragglers.own_host_excess): the shared host's noise never outweighs it
    own_host = [r for r in rows if r.get("own_host_excess")]
    # the largest delay among the ranks that pass (a rank whose own work is consistently longer may hold a
    # smaller share of the hold-ups than the one noise made late once); none pass: no straggler
    ok = own_host or [r for r in rows if passes(r)]
    if not ok:
        return stage  # send/recv hold nobody up in the collectives' sense: a pipeline stage's own excess may
    # a rank that runs more work of its own than its peers (more compute operators per step) comes before one
    # whose same work merely ran longer (a composed job's two TP pairs both wait for their slower rank: the one
    # with the extra work is the cause, the other the shared host's contention)
    row = max(ok, key=lambda r: (bool(r.get("more_work")) and not any(
        bool(x.get("consistent_excess")) and not x.get("more_work") for x in ok if x is not r),
        num(r.get("delay_per_step_us")) or 0.0, -int(r["rank"])))
    rank = int(row["rank"])
    delay, share = num(row.get("delay_share")) or 0.0, num(row.get("holdup_share")) or 0.0
    cost = delay
    if row.get("own_host_excess") or row.get("consistent_excess"):
        # its own lost time, from its step decomposition: the excess of its compute or host/idle time over its
        # peers' in every step, which the job waits for whether or not the noise splits the hold-ups
        cost = max(delay, num(row.get("excess_share")) or 0.0)
    last = frac(row.get("pct_last")) or 0.0
    imposed = num(row.get("wait_imposed_us")) or 0.0
    ev = [Evidence(f"the other ranks waited for rank {rank} alone {(num(row.get('delay_per_step_us')) or 0) / 1000:.2f} "
                   f"ms per step (the step's delay it caused: its longest hold-up in the step, counted once, not "
                   f"per waiting rank; {pct(delay)} of the step, threshold straggler_cost_min {pct(dmin)}; "
                   f"{pct(share)} of all waiting for a single rank, threshold "
                   + (f"straggler_share_min {pct(smin)})" if share >= smin else
                      f"straggler_share_consistent {pct(scons)} with a consistent excess or more work)")),
          Evidence(f"it arrives last at {pct(last)} of the collectives with a clear last arrival (times last: "
                   f"{row.get('times_last')}); the waiting it imposed, summed over every rank that waited for it "
                   "and every collective it was last in (so not comparable with the delay above): "
                   + (f"{imposed / n_steps / 1000:.2f} ms per step, {imposed / 1000:.2f} ms over {n_steps} "
                      f"step{'s' if n_steps != 1 else ''}" if n_steps else f"{imposed / 1000:.2f} ms over the trace"))]
    if row.get("own_host_excess"):
        ev.insert(0, Evidence(f"its own host/idle time (no op running, or before its first compute) exceeds its peers' "
                              f"by {pct(num(row.get('excess_share')))} of the step in "
                              f"{row.get('excess_steps_above')} of {row.get('excess_steps')} steps, far above their "
                              "noise: a shared host's contention makes ops run longer, it does not leave one rank "
                              "idle; the hold-ups name no rank with work of its own"))
    named = s.get("straggler") == rank
    comp = _compute_straggler(ctx)
    said = ("the others waited for", "it arrived last", "it arrives last") + \
        (("its compute per step",) if comp and comp["rank"] == rank else ())
    if named and s.get("evidence"):  # what the section adds to the lines here (not the same numbers again)
        extra = [c for c in _clauses(str(s["evidence"])) if not c.startswith(said)]
        if extra:
            ev.append(Evidence("; ".join(extra)))
    attribution = str(s.get("attribution") or "unknown") if named else "unknown"
    if comp and comp["rank"] == rank:
        ev += comp["evidence"]
        if attribution == "unknown":
            attribution = "compute"
    n_held = max(1, len([x for x in s.get("per_step") or [] if (x.get("step") or 0) >= 0]))
    conf = num(s.get("confidence")) if named else None
    if conf is None:
        conf = _straggler_confidence(delay, share, int(row.get("steps_held") or 0) / n_held, dmin, smin)
        if row.get("consistent_excess") and num(row.get("excess_confidence")) is not None:
            conf = max(conf, num(row.get("excess_confidence")))  # the analyzer's (cross_rank/stragglers.py)
    basis = confidence_basis(rank, attribution, conf, delay, share, int(row.get("steps_held") or 0), n_held,
                             dmin, smin, str(s.get("evidence") or "") if named else "")
    return {"rank": rank, "cost": min(1.0, cost), "attribution": attribution, "confidence": conf, "evidence": ev,
            "confidence_basis": basis}


def confidence_basis(rank: int, attribution: str, conf: float, delay: float, share: float, held: int, n_held: int,
                     dmin: float, smin: float, section_evidence: str = "") -> str:
    """What a straggler's confidence is of, and what keeps it from 100 %, in words: the confidence is that this
    rank is the one the others wait for (and, when known, why); the cost is measured, not guessed. Its parts
    (cross_rank/stragglers.py): the margins over both thresholds, the steps in which the rank held up most,
    a close runner-up, no consistent excess of its own."""
    what = f"of the diagnosis: rank {rank} is the rank the others wait for" + (
        f", and its {attribution} is why" if attribution not in ("unknown", "") else "") + \
        "; the cost is measured"
    if conf >= 0.995:
        return what
    why = []
    if dmin > 0 and delay < 2 * dmin:
        why.append(f"its delay is {pct(delay)} of the step (full marks from {pct(2 * dmin)})")
    if smin < 1 and share < 1:
        why.append(f"it holds {pct(share)} of the waiting for a single rank (full marks at 100%)")
    if n_held and held < n_held:
        why.append(f"it held the others up most in {held} of {n_held} steps")
    if "also hold up their groups" in section_evidence:
        why.append("another rank holds its group up almost as long")
    if "may be the machine's" in section_evidence:
        why.append("nothing it does exceeds its peers' beyond the noise (capped: the machine may be the cause)")
    return what + ("; not higher: " + "; ".join(why) if why else "")


@rule("LOAD001", "Straggler rank", "warning",
      thresholds=(Threshold("straggler_cost_min", 0.05, "fraction",
                            "a rank must alone hold the others up this share of the median step (its longest "
                            "hold-up per step, or the others' idle time inside its hold-ups when longer); real CPU "
                            "runs: clean jobs up to 0.070, 20 % stragglers 0.087 and up"),
                  Threshold("straggler_share_min", 0.75, "fraction",
                            "… and cause this share of all ranks' hold-up delay in the process group where it "
                            "holds up most; real CPU runs: clean jobs 0.31-0.65, stragglers 0.90-1.0"),
                  Threshold("straggler_share_consistent", 0.4, "fraction",
                            "… or only this share when the rank's own compute or host time exceeds its peers' "
                            "median consistently (≥ 80 % of ≥ 3 steps, median excess ≥ 5 % of the step, above its "
                            "spread and ≥ 3 standard errors of the other ranks' noise): noise splits a real "
                            "straggler's hold-ups (0.57 / 0.43 seen)",
                            source="tuned on fixtures/real-cpu-perf-2 runs not held out: a 15 % host straggler "
                                   "holds 0.64 of the hold-ups (noise gives rank 1 steps 4-5), clean runs' ranks "
                                   "with a consistent excess hold at most 0.41 with a recurring delay in fewer than "
                                   "half the steps; checked on the held-out runs (docs/performance-diagnoses.md)"),
                  Threshold("straggler_pct_last", 0.0, "fraction",
                            "optional: also require arriving last at this share of collectives (off: arrival "
                            "counts are noise at a few ranks, a host straggler can be last at only 42 %)"),
                  Threshold("straggler_compute_excess", 0.2, "fraction",
                            "without cross-rank data: a rank computing this much more than the step median in "
                            "≥ 80 % of steps (well above the few % a GPU's time for identical work varies)")),
      explains=WAIT_EFFECTS,
      confirm="In the straggler's trace the step's compute (or the gap before its first kernel) is longer than "
              "on the other ranks; on the others the collectives start early and wait.",
      fix="Compute straggler: check that rank's GPU (nvidia-smi -q: clocks, throttling, ECC; DCGM), its share of "
          "the data (uneven sequence lengths: bucket or pack), and any rank-0-only work (logging, checkpoint, "
          "eval) — move it off the step. Host straggler: see LOAD003. Link straggler: see NET004.")
def straggler(ctx: Context) -> Iterator[Finding]:
    """One rank makes every other rank wait for it, step after step.

    In synchronous training the slowest rank sets the pace: the others' waits inside collectives show up as
    communication time (so a straggler inflates comm share and lowers overlap, listed as consequences). Judged
    by the delay it alone causes (the others have all arrived and wait for it) and by its part of all such
    delay; arrival counts are supporting evidence (docs/cross-rank.md). On a noisy machine, where the hold-ups
    split between ranks, a rank whose own compute or host time exceeds its peers' median consistently (≥ 80 %
    of ≥ 3 steps, by ≥ 5 % of the step and ≥ 3 standard errors of the peers' noise; on a CPU-only job a compute
    excess also needs more compute operators per step than its peers: the same work run longer is the host's
    contention; or, CPU-only without send/recv, it runs ≥ 2 % more compute operators per step: more work of its
    own) and whose delay recurs in half the steps needs only ``straggler_share_consistent`` of the hold-ups; one the hold-ups name without
    such an excess (and no link difference) is a "may be". In a pipeline, whose send/recv hold nobody up in
    this sense, a stage is the straggler when its own work outside its typical micro-batch blocks (or its host
    time) exceeds the other stages' by the same consistent-excess test and they wait in their transfers for it
    ≥ 5 % of the step in half the steps (docs/cross-rank.md, "Pipeline stage straggler"); a stage heavy by
    partition stays PIPE001's. Falls back on per-step compute when there are no cross-rank data. A rank whose
    trace was cut off mid-write is compared only on the steps it fully has (the evidence says which it lacks).
    Cost: its delay per step as a fraction of the median step. A finding with confidence below 0.5 (both
    thresholds passed by thin margins, where a clean run's noise lives) is an info titled "may be a straggler".
    """
    info = straggler_info(ctx)
    if info is None:
        return
    r = info["rank"]
    g = group_for_rank(ctx.groups(), r)
    why = (ATTRIBUTION_CPU if ctx.cpu_only() else ATTRIBUTION).get(info["attribution"], "")
    if ctx.cpu_only():  # gloo on CPUs: there is no GPU to blame
        why = why.replace("a slower GPU", "a slower or busier CPU")
    weak = info["confidence"] < WEAK_STRAGGLER
    dmg = damage_note(ctx)
    extra = {"attribution": info["attribution"]}
    if info.get("confidence_basis"):
        extra["confidence_basis"] = info["confidence_basis"]
    yield Finding(title=(f"Rank {r} may be a straggler" if weak else f"Rank {r} is a straggler")
                  + (f": {why}" if why else ""), confidence=info["confidence"],
                  severity="info" if weak else "warning", evidence=info["evidence"] + ([dmg] if dmg else []),
                  cost=info["cost"],
                  subject=Subject(ranks=[r], process_group=None if g is None else str(g.get("name"))),
                  involved=_all_ranks(ctx) | {r}, extra=extra)


def damage_note(ctx: Context) -> Optional[Evidence]:
    """What the cross-rank comparison of step times left out because a trace was cut off mid-write (the report's
    ranks[].cut), or None: such a rank is compared only on the steps it fully has."""
    parts = []
    for r in ctx.report.get("ranks") or []:
        cut = r.get("cut") or {}
        steps = sorted({int(x["step"]) for x in cut.get("excluded_steps") or [] if x.get("step") is not None}
                       | {int(x) for x in cut.get("lost_steps") or []})
        if cut and steps:
            parts.append(f"rank {r.get('rank')} (its trace was cut off mid-write) is left out of step"
                         f"{'s' if len(steps) > 1 else ''} {', '.join(str(x) for x in steps[:8])}"
                         f"{' …' if len(steps) > 8 else ''}")
    if not parts:
        return None
    return Evidence("; ".join(parts) + ": step times and hold-ups are compared only on the steps each rank fully "
                    "has")


def _spread_rows(ctx: Context) -> list[dict]:
    """Per-step spread rows (cross-rank section, else computed from the per-step step times)."""
    rows = [r for r in ctx.cross.get("step_spread") or [] if num(r.get("spread")) is not None]
    if rows:
        return rows
    out = []
    for step, by in sorted(_steps_by_rank(ctx).items()):
        t = {rk: num(x.get("step_time_us")) for rk, x in by.items() if num(x.get("step_time_us"))}
        if len(t) < 2:
            continue
        med = median(list(t.values()))
        out.append({"step": step, "min_us": min(t.values()), "median_us": med, "max_us": max(t.values()),
                    "spread": (max(t.values()) - min(t.values())) / med if med else None,
                    "slowest_rank": max(t, key=t.get), "fastest_rank": min(t, key=t.get)})
    return [r for r in out if r["spread"] is not None]


@rule("LOAD002", "Step time differs across ranks", "warning",
      thresholds=(Threshold("step_spread_max", 0.05, "fraction",
                            "report when the median over steps of (max−min)/median step time across ranks exceeds "
                            "this"),
                  Threshold("persistent_frac", 0.6, "fraction",
                            "warning when the steps waited for the same rank in at least this share of ≥ 3 "
                            "steps (info otherwise: jitter)")),
      confirm="Compare the ranks' ProfilerStep durations per step (metrics table); a rank the steps persistently "
              "wait for points at that rank, a changing one at noise or at data-dependent work.",
      fix="Find why the rank the steps wait for is late (see LOAD001 / LOAD003); for data-dependent step times, balance "
          "the per-rank work (sequence-length bucketing, packing).")
def step_spread(ctx: Context) -> Iterator[Finding]:
    """Ranks disagree on how long a step takes: (max − min) / median above 5 %.

    In synchronous data parallelism every rank ends up waiting for the slowest one, so the spread is lost
    time on the faster ranks. A spread caused by a straggler is listed under LOAD001. With cross-rank data a
    step's slowest rank is the one it waited for (the largest hold-up, when material; else the longest step),
    so this finding and LOAD001 name the same rank. Severity warning when the same rank is the slowest in most
    steps (and, with cross-rank data, is the straggler LOAD001 names as a warning, not a "may be"); info
    otherwise (jitter). Cost: the
    median over steps of (max − median) / max. Not judged when the clocks could not be aligned (traces
    whose collectives do not match may come from different jobs).
    """
    rows = _spread_rows(ctx)
    if not rows or (ctx.cross.get("alignment") or {}).get("status") == "refused":
        return  # traces whose collectives cannot be matched may not be one job: do not compare them
    spreads = [num(r["spread"]) for r in rows]
    med = median(spreads) or 0.0
    if med <= ctx.t("step_spread_max"):
        return
    slow = [r.get("slowest_rank") for r in rows if r.get("slowest_rank") is not None]
    top = max(set(slow), key=slow.count) if slow else None
    persistent = top is not None and len(rows) >= 3 and slow.count(top) >= ctx.t("persistent_frac") * len(rows)
    if persistent and (ctx.cross.get("stragglers") or {}).get("per_rank"):
        s = straggler_info(ctx)  # with cross-rank data the slowest rank of a step is the one it waited for:
        # persistent only if that is the straggler, and one LOAD001 names firmly (not a "may be": a warning
        # here must not name a rank more surely than the straggler rule does)
        persistent = s is not None and s["rank"] == int(top) and s["confidence"] >= WEAK_STRAGGLER
    costs = [((num(r.get("max_us")) or 0) - (num(r.get("median_us")) or 0)) / num(r.get("max_us"))
             for r in rows if num(r.get("max_us"))]
    worst = max(rows, key=lambda r: num(r["spread"]) or 0)
    wmax = num(worst["spread"]) or 0.0
    n = len(rows)
    # the decision is on the median over steps (step_spread_max); the headline shows the worst step: name both
    both = (f"step spread {pct(med)} (median over {n} step{'s' if n != 1 else ''}"
            + (f"; worst step {pct(wmax)}" if n > 1 and pct(wmax) != pct(med) else "")
            + f"; threshold {pct(ctx.t('step_spread_max'))})")
    yield Finding(title=f"Step time differs across ranks: {both}"
                        + (f"; {slow.count(top)} of them waited for rank {top}" if persistent else ""),
                  severity="warning" if persistent else "info", confidence=0.7 if persistent else 0.5,
                  cost=median(costs), subject=Subject(ranks=[int(top)] if persistent else []),
                  evidence=[Evidence(f"step {worst.get('step')}: {num(worst.get('min_us')) or 0:.0f}–"
                                     f"{num(worst.get('max_us')) or 0:.0f} µs (spread {pct(num(worst['spread']))}), "
                                     f"{_waited_for(ctx)}: {worst.get('slowest_rank')}"),
                            Evidence(f"{_waited_for(ctx)}, per step: " + ", ".join(str(s) for s in slow[:16]))]
                  + ([dmg] if (dmg := damage_note(ctx)) is not None else []))


def _waited_for(ctx: Context) -> str:
    """What a spread row's ``slowest_rank`` is: with cross-rank data the rank the step waited for (last to
    arrive, whose own step time may be mid-range), else the rank with the longest step."""
    return ("rank the step waited for" if any(num(r.get("spread")) is not None
                                              for r in ctx.cross.get("step_spread") or [])
            else "rank with the longest step")


@rule("LOAD003", "GPU idle waiting for the host (data loader / CPU stall)", "warning",
      thresholds=(Threshold("idle_share_max", 0.15, "fraction",
                            "report ranks whose GPU is idle (no kernel, no memcpy) for more than this share of "
                            "step time"),),
      explains=("LOAD001", "LOAD002", "COMM001", "COMM002"),
      confirm="In the rank's trace, the GPU timeline has a gap at the start of each step while the CPU thread "
              "is in the data loader (enumerate(DataLoader) / __next__), in H2D copies, or in Python.",
      fix="Feed the GPU faster: DataLoader(num_workers=4-8 per GPU, pin_memory=True, prefetch_factor=2-4, "
          "persistent_workers=True), move decoding/augmentation to workers or the GPU (DALI), avoid host syncs "
          "(.item(), .cpu(), print of tensors) in the step, use non_blocking=True copies; CUDA graphs for "
          "launch-bound models.")
def host_stall(ctx: Context) -> Iterator[Finding]:
    """The GPU sits idle for a large part of the step on some ranks: the host does not feed it.

    idle = step time − |∪ all GPU activity| (docs/metrics.md); shares are Σ idle / Σ step time. A rank-specific idle gap (data loader, CPU
    preprocessing, a host sync) also makes every other rank wait for it in the next collective, so the
    resulting straggler, step spread and comm share are listed under this finding (when the straggler is
    one of the idle ranks). Causes: data loading, CPU preprocessing, Python/launch overhead, host syncs
    (.item(), .cpu()), checkpointing. The report has per-step
    idle but not the gap before the first kernel, so the position in the step is not checked. CPU-only
    (gloo) traces are not judged; whole-trace windows (no ProfilerStep) give info only. Cost: the idle share.
    """
    if ctx.cpu_only():
        return
    limit = ctx.t("idle_share_max")
    idle = {int(r["rank"]): num(r.get("idle_share")) for r in ctx.per_rank()
            if r.get("rank") is not None and num(r.get("idle_share")) is not None}
    bad = {r: v for r, v in idle.items() if v > limit}
    if not bad:
        return
    whole = ctx.whole_trace_only()
    some = len(bad) < len(idle)
    s = straggler_info(ctx)
    host = s is not None and s["attribution"] == "host" and s["rank"] in bad
    ev = [Evidence(f"rank {r}: GPU idle {pct(v)} of step time") for r, v in sorted(bad.items())[:8]]
    if some:
        others = [v for r, v in idle.items() if r not in bad]
        ev.append(Evidence(f"other ranks: median idle {pct(median(others))}"))
    if host:
        ev.append(Evidence(f"the cross-rank analysis attributes rank {s['rank']}'s lateness to the host"))
    worst = max(bad, key=bad.get)
    split = next((r for r in ctx.section("breakdown").get("per_rank") or [] if r.get("rank") == worst), None)
    sh = (split or {}).get("shares") or {}
    if split and split.get("idle_split") and sh.get("idle_host") is not None:  # what the idle time waited for
        ev.insert(0, Evidence(f"rank {worst}'s idle {pct(sh.get('idle'))} of the step: {pct(sh.get('idle_host'))} "
                              f"waiting for the host to launch work, {pct(sh.get('idle_peer'))} for peers (the host "
                              f"in a collective call), {pct(sh.get('idle_kernel_wait'))} launch latency, "
                              f"{pct(sh.get('idle_other'))} other (time breakdown per rank)"))
    g = group_for_rank(ctx.groups(), worst) if some else None
    late = host or (s is not None and s["rank"] in bad)
    # one definition of an idle share everywhere: Σ idle / Σ step time (the headline's, over these ranks)
    sums = {int(r["rank"]): (num(r.get("idle_us")), num(r.get("step_time_us"))) for r in ctx.per_rank()
            if r.get("rank") is not None}
    num_ = sum((sums.get(r) or (None, None))[0] or 0.0 for r in bad)
    den_ = sum((sums.get(r) or (None, None))[1] or 0.0 for r in bad)
    share = num_ / den_ if den_ > 0 else sum(bad.values()) / len(bad)
    where = "all ranks" if not some else "these ranks"
    amount = pct(bad[worst]) if len(bad) == 1 else f"up to {pct(bad[worst])} ({pct(share)} over {where})"
    yield Finding(title=f"GPU idle {amount} of step time on {ranks_text(bad)}: the host does not keep it busy"
                        + (" (data loader / CPU stall)" if some else "")
                        + f" (threshold {pct(ctx.t('idle_share_max'))} per rank)",
                  severity="info" if whole else "warning", confidence=0.85 if (host or some) else 0.6,
                  evidence=ev, cost=share,
                  subject=Subject(ranks=sorted(bad), process_group=None if g is None else str(g.get("name"))),
                  involved=set(bad) | (_all_ranks(ctx) if late else set()),
                  extra={"confidence_basis": "of the diagnosis: the host, not the GPU's own work, leaves it idle; "
                                             "the idle share is measured" + (
                                                 "" if (host or some) else
                                                 "; not higher: every rank idles and the cross-rank analysis "
                                                 "blames no rank's host for its lateness, so a cause common to "
                                                 "all (a small batch, the model's launch overhead) fits as well")})


@rule("LOAD004", "Uneven work in one step (short batch on some ranks)", "warning",
      thresholds=(Threshold("uneven_compute_frac", 0.3, "fraction",
                            "report ranks whose compute in a step is this much below the step's median while "
                            "normal in the other steps"),),
      explains=("LOAD002",),
      confirm="The reported ranks' compute in that step is a fraction of the others'; the step is usually the "
              "last of an epoch (dataset size not divisible by world size × batch).",
      fix="Give every rank the same number of full batches: DataLoader(drop_last=True) and "
          "DistributedSampler(drop_last=True), or pad the last batch; for legitimately uneven inputs use the "
          "DDP Join context manager.")
def uneven_step(ctx: Context) -> Iterator[Finding]:
    """In one step some ranks compute much less than the others (a short last batch), in other steps not.

    Ranks with a partial batch finish early and wait; with different tensor shapes the collectives can even
    mismatch (HANG001). Cost: the compute the short ranks skipped, as a fraction of the run. CPU-only (gloo)
    traces are not judged: CPU op durations swing with core contention.
    """
    steps = _steps_by_rank(ctx)
    if len(steps) < 2 or ctx.cpu_only() or (ctx.cross.get("alignment") or {}).get("status") == "refused":
        return
    f = ctx.t("uneven_compute_frac")
    low: dict[int, list[int]] = {}
    comp = {s: {r: num(x.get("compute_us")) for r, x in rows.items() if num(x.get("compute_us"))}
            for s, rows in steps.items()}
    meds = {s: median(list(c.values())) for s, c in comp.items() if len(c) >= 2}
    for s, c in comp.items():
        if s not in meds or not meds[s]:
            continue
        short = [r for r, v in c.items() if v < (1 - f) * meds[s]]
        if short and len(short) < len(c) / 2:
            low[s] = sorted(short)
    for s, ranks in sorted(low.items()):
        normal = all(comp[o].get(r, 0) >= 0.9 * meds[o] for r in ranks for o in comp if o != s and o in meds)
        if not normal:
            continue
        tt = ctx.traced_time_us()
        lost = sum(meds[s] - comp[s][r] for r in ranks) / len(ranks)
        yield Finding(title=f"{ranks_text(ranks).capitalize()} did {pct(min(comp[s][r] for r in ranks) / meds[s])} "
                            f"of the others' compute in step {s}: uneven last batch?",
                      confidence=0.7, cost=min(1.0, lost / tt) if tt else None,
                      subject=Subject(ranks=ranks, step=s),
                      evidence=[Evidence(f"step {s}: compute {', '.join(f'rank {r} {comp[s][r] / 1000:.2f} ms' for r in ranks[:4])}"
                                         f" vs median {meds[s] / 1000:.2f} ms"),
                                Evidence("the same ranks compute normally in the other steps")],
                      involved=set(ranks))


@rule("MOE001", "Mixture-of-experts load imbalance", "warning",
      thresholds=(Threshold("moe_imbalance_ratio", 1.5, "×",
                            "max/median per-rank all-to-all bytes above which expert load is called imbalanced"),),
      explains=("LOAD001",) + WAIT_EFFECTS,
      confirm="Log the router's tokens-per-expert counts per step; the hot rank's experts receive several times "
              "the mean. Its all-to-all receive size and expert GEMMs are larger.",
      fix="Balance the router: auxiliary load-balancing loss (coefficient ~1e-2), capacity factor 1.0-1.25 "
          "with token dropping, or aux-loss-free bias balancing; place hot experts on different ranks / "
          "replicate them.")
def moe_imbalance(ctx: Context) -> Iterator[Finding]:
    """One expert-parallel rank receives far more tokens than the others: everyone waits for its experts.

    Evidence, best first: the elements each rank of an expert-parallel group received for its experts
    (cross_rank.expert_load, from the all-to-all sizes: the hot rank and its factor over the others' median; a
    balanced routing there rules the finding out), per-rank all-to-all bytes (`rank_bytes` in
    collectives.by_group_op), else a compute straggler that belongs to an expert-parallel group running
    all-to-all (lower confidence). Cost: the straggler's imposed wait.
    """
    loads = ctx.cross.get("expert_load") or []
    for g in sorted(loads, key=lambda g: -(num(g.get("factor")) or 0.0)):
        factor = num(g.get("factor"))
        if factor is None or factor < ctx.t("moe_imbalance_ratio"):
            continue
        hot = int(g["hot_rank"])
        got = {int(k): int(v) for k, v in (g.get("received_elements") or {}).items()}
        s = straggler_info(ctx)
        calls = g.get("calls") or {}
        yield Finding(title=f"Rank {hot}'s experts receive {factor:.1f}× the tokens of the other ranks of "
                            f"expert-parallel group {g.get('process_group')}: expert load imbalance",
                      confidence=0.9, cost=s["cost"] if s is not None and s["rank"] == hot else None,
                      evidence=[Evidence("elements each rank received for its experts over the traced steps "
                                         f"(all-to-all sizes): {got}"),
                                Evidence(f"{calls.get('dispatch', 0)} dispatch and {calls.get('combine', 0)} combine "
                                         "all-to-alls whose sizes differ across the group's ranks; the others wait "
                                         f"for rank {hot}'s experts")],
                      subject=Subject(ranks=[hot], process_group=str(g.get("process_group")),
                                      collective={"op": "alltoall", "seq": None}),
                      involved=_all_ranks(ctx) | {hot})
        return
    if loads and all(g.get("balanced") for g in loads):
        return  # the routing is balanced: a rank the group waits for is late for another reason (LOAD001)
    for r in (ctx.cross.get("collectives") or {}).get("by_group_op") or []:
        rb = r.get("rank_bytes") or r.get("per_rank_bytes")
        if str(r.get("op")) != "alltoall" or not isinstance(rb, dict) or len(rb) < 2:
            continue
        vals = {int(k): num(v) or 0.0 for k, v in rb.items()}
        med = median(list(vals.values()))
        hot = max(vals, key=vals.get)
        if med and vals[hot] / med >= ctx.t("moe_imbalance_ratio"):
            s = straggler_info(ctx)
            yield Finding(title=f"Rank {hot} moves {vals[hot] / med:.1f}× the median all-to-all volume in expert "
                                f"group {r.get('process_group')}", confidence=0.85,
                          cost=None if s is None else s["cost"],
                          evidence=[Evidence(f"all-to-all bytes per rank: {vals}")],
                          subject=Subject(ranks=[hot], process_group=str(r.get("process_group")),
                                          collective={"op": "alltoall", "seq": None}),
                          involved=_all_ranks(ctx) | {hot})
            return
    s = straggler_info(ctx)
    if s is None or s["attribution"] not in ("compute", "unknown"):
        return
    ep = [g for g in ctx.groups() if str(g.get("role")) == "ep" and s["rank"] in [int(x) for x in g.get("ranks") or []]
          and (not g.get("ops") or "alltoall" in (g.get("ops") or {}))]
    if not ep:
        return
    g = ep[0]
    yield Finding(title=f"Rank {s['rank']} holds up expert-parallel group {g.get('name')}: expert load "
                        "imbalance likely", confidence=0.6, cost=s["cost"],
                  evidence=s["evidence"] + [Evidence(f"rank {s['rank']} is in expert-parallel group {g.get('name')} "
                                                     f"(ranks {g.get('ranks')}) that runs all-to-all")],
                  subject=Subject(ranks=[s["rank"]], process_group=str(g.get("name")),
                                  collective={"op": "alltoall", "seq": None}),
                  involved=_all_ranks(ctx) | {s["rank"]})


@rule("LOAD005", "Ranks recorded different steps", "info",
      confirm="The report's job.step_coverage lists, per rank, the steps it lacks; each rank's ranks[].steps the "
              "ProfilerStep numbers its trace holds.",
      fix="Nothing in the job to fix: give every rank the same profiler schedule and let each finish writing "
          "(stop the job after prof.stop() / export_chrome_trace returns on every rank), so that all ranks "
          "record the same steps.")
def different_steps(ctx: Context) -> Iterator[Finding]:
    """Some ranks' traces hold fewer steps than their peers' (exported early, cut, another profiler window).

    The ranks are compared only on the steps every rank has (analyzer/report/coverage.py): per-rank means,
    spreads and straggler statistics over different steps would compare different work. When the ranks share no
    step, each rank's figures are over its own steps, and cross-rank comparisons are weak.
    """
    cov = (ctx.report.get("job") or {}).get("step_coverage")
    if not cov or not cov.get("missing"):
        return
    missing = cov["missing"]
    common = cov.get("common_steps") or []
    left = {int(r) for r in cov.get("left_out") or []}
    cut = {int(r.get("rank")) for r in ctx.report.get("ranks") or [] if r.get("cut")}
    ev = []
    for m in missing[:8]:
        steps = f"{', '.join(str(s) for s in m['steps'][:8])}{' …' if len(m['steps']) > 8 else ''}"
        why = " (its trace was cut off mid-write: INPUT002)" if int(m["rank"]) in cut else ""
        ev.append(Evidence(f"rank {m['rank']} has none of the steps {steps} that other ranks recorded{why}: it is "
                           "left out of the cross-rank comparisons" if int(m["rank"]) in left else
                           f"rank {m['rank']} lacks step(s) {steps} that other ranks recorded{why}"))
    every = "every other rank has" if left else "every rank has"
    if common:
        ev.append(Evidence(f"compared: the {len(common)} step(s) {every} "
                           f"({', '.join(str(s) for s in common[:8])}{' …' if len(common) > 8 else ''}); "
                           f"left out of the comparisons: {len(cov.get('all_steps') or []) - len(common)} step(s)"))
    else:
        ev.append(Evidence("the ranks share no step: each rank's figures are over its own steps"))
    ranks = sorted(int(m["rank"]) for m in missing)
    if left and set(ranks) <= left:
        title = (f"{ranks_text(ranks).capitalize()} {'has' if len(ranks) == 1 else 'have'} no step left to compare: "
                 f"{'it is' if len(ranks) == 1 else 'they are'} left out"
                 + (f", and the other ranks are compared on the {len(common)} step(s) they all have" if common else ""))
    else:
        title = (f"{ranks_text(ranks).capitalize()} recorded fewer steps than the other ranks"
                 + (f": compared on the {len(common)} step(s) {every}" if common else ""))
    yield Finding(title=title,
                  confidence=1.0, evidence=ev, subject=Subject(ranks=ranks), involved=set(ranks))
