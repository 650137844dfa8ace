"""Pipeline-parallel rules: bubble above the schedule's theory, too few micro-batches for the depth."""
from __future__ import annotations

from typing import Iterator, Optional

from rules.context import Context
from rules.finding import Evidence, Finding, Subject
from rules.registry import Threshold, rule
from rules.util import num, pct

#: Below this confidence of the inferred p / m / v the theory is a guess: no pipeline finding.
MIN_INFERENCE_CONFIDENCE = 0.5


def _pipe(ctx: Context) -> dict:
    """The cross-rank pipeline section when a pipeline was detected, else {}."""
    p = ctx.cross.get("pipeline") or {}
    return p if p.get("detected") else {}


def _confidence(p: dict, *keys: str) -> float:
    """Confidence of the inferred keys (reports without `inference` predate it: taken as sure)."""
    inf = p.get("inference")
    if not isinstance(inf, dict):
        return 1.0
    by = inf.get("confidence_by_key") or {}
    vals = [num(by.get(k)) for k in keys]
    vals = [x for x in vals if x is not None] or [num(inf.get("confidence"))]
    return min((x for x in vals if x is not None), default=1.0)


#: A stage is named heavy when it works ≥ HEAVY_RATIO × the median stage and its excess over the median stage
#: is at least NOISE_K × the step-to-step noise (the median over stages of each one's standard deviation of busy
#: time across steps): on a CPU-contended run identical stages swing by ±20-60 ms per step.
HEAVY_RATIO = 1.1
NOISE_K = 3.0


def _stage_steps(p: dict) -> dict[int, list[float]]:
    """Busy time (µs) of each stage per step, from the per-stage rows (summed per step: a rank's chunks)."""
    acc: dict[int, dict] = {}
    for s in p.get("per_stage") or []:
        b = num(s.get("busy_us"))
        if b is not None and s.get("stage") is not None:
            by = acc.setdefault(int(s["stage"]), {})
            by[s.get("step")] = by.get(s.get("step"), 0.0) + b
    return {k: list(v.values()) for k, v in acc.items() if v}


def _stage_work(p: dict) -> dict[int, float]:
    """Mean busy time per step of each stage (µs), from the per-stage rows."""
    return {k: sum(v) / len(v) for k, v in _stage_steps(p).items()}


def _step_noise(steps: dict[int, list[float]]) -> Optional[float]:
    """The median over stages of each stage's standard deviation of busy time across steps (µs); None with
    fewer than two steps (no spread to measure)."""
    sds = []
    for v in steps.values():
        if len(v) >= 2:
            m = sum(v) / len(v)
            sds.append((sum((x - m) ** 2 for x in v) / (len(v) - 1)) ** 0.5)
    if not sds:
        return None
    sds.sort()
    n = len(sds)
    return sds[n // 2] if n % 2 else (sds[n // 2 - 1] + sds[n // 2]) / 2


def _imbalance(p: dict) -> tuple[Optional[Evidence], bool]:
    """Which stage works most, against the median stage (the usual cause of extra bubble), above the noise;
    and whether that stage is named heavy."""
    ev = _imbalance_evidence(p)
    return ev, ev is not None and ev.text.endswith("the other stages wait for it")


def _imbalance_evidence(p: dict) -> Optional[Evidence]:
    """The evidence of :func:`_imbalance`."""
    steps = _stage_steps(p)
    work = {k: sum(v) / len(v) for k, v in steps.items()}
    if len(work) < 2:
        return None
    vals = sorted(work.values())
    med = vals[len(vals) // 2] if len(vals) % 2 else (vals[len(vals) // 2 - 1] + vals[len(vals) // 2]) / 2
    top = max(work, key=work.get)
    if med <= 0:
        return None
    ratio = work[top] / med
    stage_ranks = p.get("stage_ranks") or []
    ranks = stage_ranks[top] if top < len(stage_ranks) else []
    noise = _step_noise(steps)
    above_noise = noise is None or work[top] - med >= NOISE_K * noise
    if ratio >= HEAVY_RATIO and above_noise:
        return Evidence(f"stage {top} (rank(s) {ranks}) works {ratio:.2f}× the median stage per step "
                        f"({work[top] / 1e3:.1f} ms vs {med / 1e3:.1f} ms"
                        + (f"; step-to-step noise ±{noise / 1e3:.1f} ms" if noise is not None else "")
                        + "): the other stages wait for it")
    if ratio >= HEAVY_RATIO:
        return Evidence(f"no stage works more than the step-to-step noise allows (most: stage {top}, {ratio:.2f}× "
                        f"the median, +{(work[top] - med) / 1e3:.1f} ms, while a stage's work varies ±"
                        f"{noise / 1e3:.1f} ms from step to step; {NOISE_K:g}× that would name it): the extra idle "
                        "is waiting on transfers or a busy host rather than one slow stage")
    return Evidence(f"the stages work alike (most: stage {top}, {ratio:.2f}× the median): the extra idle is "
                    "waiting on transfers (slow P2P, a busy host) rather than one slow stage")


@rule("PIPE001", "Pipeline bubble well above the schedule's theoretical bubble", "warning",
      thresholds=(Threshold("bubble_excess", 0.10, "fraction",
                            "report when the measured bubble exceeds the schedule's theory by this much (absolute; "
                            "16 clean emulated real pipelines measured theory +0.5 to +3.4 points, the "
                            "simulator's clean ones up to +9 with P2P on the critical path, one stage 2x slower "
                            "+18; held out: 1.5x slower +13, a clean looped BFS with P2P coupling +9) …"),
                  Threshold("bubble_ratio", 1.25, "×", "… and by at least this factor (so a deep pipeline's large "
                            "theoretical bubble does not turn P2P latency into a warning: the simulator's clean "
                            "p=4 m=4 jobs read 1.07-1.32x their theory)")),
      confirm="Look at one stage's compute timeline in a step: gaps between micro-batches beyond the warm-up "
              "and cool-down ramps are extra bubble (waiting for activations/gradients from a neighbour stage).",
      fix="Balance the stages (move layers from the slowest stage; the first/last stages also carry embedding "
          "and loss), overlap P2P with compute (batch_p2p_comm / async send-recv), and check the inter-stage "
          "link; more micro-batches (PIPE002) shrink the ramps.")
def bubble_high(ctx: Context) -> Iterator[Finding]:
    """Stages idle in the pipeline window far more than the schedule requires.

    bubble rate = 1 − a stage's work in the step / the pipeline window, the window being stage 0's span from
    its first to its last work of the step (docs/metrics.md, "Pipeline bubble"), the same for every stage. For
    GPipe and 1F1B with p stages and m micro-batches theory gives (p−1)/(m+p−1) (interleaved / looped with v
    stages per rank: (p−1)/(v·m+p−1)). A measured bubble well above it means unbalanced stages or slow P2P
    transfers. The evidence names the stage that works most when it works ≥ 1.1× the median stage and its
    excess is ≥ 3× the step-to-step noise (the median over stages of the standard deviation of a stage's work
    across steps: identical stages on a CPU-contended run differ by 1.4× in one step and swap in the next);
    else it says the stages work alike within the noise. The bubble counts as idle the stages' own time outside
    their work — moving the data inside send/recv after the peer arrived, and host work between ops
    (``mean_own_idle_share``) — which no schedule theory has and no neighbour caused: when no stage is heavy and
    the excess minus that own time is below ``bubble_excess``, the finding is an info that says so (a transfer-
    or host-bound pipeline, e.g. 4 CPU stages on 2 shared cores, not a schedule or balance problem). Silent when
    p, m or v were inferred with confidence below 0.5, and for zero-bubble schedules (no closed-form theory).
    Cost: the excess bubble (fraction of the step).
    """
    p = _pipe(ctx)
    meas, theo = num(p.get("mean_bubble_rate")), num(p.get("theoretical_bubble"))
    if meas is None or theo is None:
        return
    conf = _confidence(p, "p", "m", "v")
    if conf < MIN_INFERENCE_CONFIDENCE:
        return
    excess = meas - theo
    if excess < ctx.t("bubble_excess") or meas < theo * ctx.t("bubble_ratio"):
        return
    worst = {}
    for s in p.get("per_stage") or []:
        b = num(s.get("bubble_rate"))
        if b is not None and s.get("rank") is not None:
            worst[int(s["rank"])] = max(worst.get(int(s["rank"]), 0.0), b)
    ev = [Evidence(f"mean bubble {pct(meas)} vs theoretical {pct(theo)} for p={p.get('p')}, m={p.get('m')}"
                   f"{', v=' + str(p.get('v')) if (num(p.get('v')) or 1) > 1 else ''}, schedule {p.get('schedule')}")]
    imb, heavy = _imbalance(p)
    if imb is not None:
        ev.append(imb)
    if worst:
        r = max(worst, key=worst.get)
        ev.append(Evidence(f"highest: rank {r} at {pct(worst[r])}"))
    own = num(p.get("mean_own_idle_share"))
    # the stages' own transfer and host time count as idle in the bubble, but no schedule theory has them and no
    # neighbour made the stage wait for them: what is left of the excess is the waiting the schedule did not plan
    weak = own is not None and not heavy and excess - own < ctx.t("bubble_excess")
    if own is not None:
        ev.append(Evidence(f"of the {pct(excess)} above theory, the stages' own time outside their work (moving the "
                           f"data inside send/recv, host work between ops) is {pct(own)} of the window: "
                           + (f"{pct(max(0.0, excess - own))} is left as waiting on a neighbour, under the "
                              f"{pct(ctx.t('bubble_excess'))} threshold (a transfer- or host-bound pipeline, e.g. "
                              "a CPU-contended one, rather than a schedule or balance problem)" if weak else
                              f"{pct(max(0.0, excess - own))} is waiting on a neighbour")))
    ranks = sorted({int(x) for st in p.get("stage_ranks") or [] for x in st})
    yield Finding(title=f"Pipeline bubble {pct(meas)}, theory {pct(theo)} for this schedule"
                        + (": the excess is the stages' own transfer and host time" if weak else ""),
                  confidence=min(0.45 if weak else 0.9, conf), evidence=ev, cost=excess,
                  severity="info" if weak else "warning", subject=Subject(ranks=ranks), involved=set(ranks))


@rule("PIPE002", "Too few micro-batches for the pipeline depth (m < 4p)", "info",
      confirm="The schedule's micro-batch count m (n_microbatches / num_microbatches / gradient accumulation "
              "steps) and the stage count p; theory (p−1)/(m+p−1) is quoted in the evidence, with how m was "
              "read from the trace.",
      fix="Raise the micro-batch count to at least 4× the stages (smaller micro-batches, or more gradient "
          "accumulation steps), or use an interleaved schedule (virtual_pipeline_model_parallel_size / "
          "ScheduleInterleaved1F1B) to divide the bubble by the chunk count.")
def few_microbatches(ctx: Context) -> Iterator[Finding]:
    """With m micro-batches over p stages the schedule alone idles (p−1)/(m+p−1) of every stage.

    Narayanan et al. (Megatron-LM, SC'21) keep m ≫ p; at m = 4p the bubble is (p−1)/(5p−1), below 20 % for
    any depth, and each further doubling of m saves less. Judged on the theoretical bubble the cross-rank section
    reports (it accounts for interleaving): fires when it exceeds the bubble of m = 4p, (p−1)/(4pv+p−1) with v
    stages per rank. Silent when m or v were inferred with confidence below 0.5, and for zero-bubble schedules.
    Cost: the bubble that m = 4p would remove. Informational: the schedule is a deliberate configuration
    (memory often forces it); PIPE001 warns when the measured bubble exceeds what the schedule explains.
    """
    p = _pipe(ctx)
    stages, m, theo = num(p.get("p")), num(p.get("m")), num(p.get("theoretical_bubble"))
    if not stages or stages < 2 or m is None or theo is None:
        return
    conf = _confidence(p, "m", "v")
    if conf < MIN_INFERENCE_CONFIDENCE:
        return
    v = num(p.get("v")) or 1  # model chunks per stage (interleaved schedules)
    at4p = (stages - 1) / (v * 4 * stages + stages - 1)
    if theo <= at4p + 1e-9:
        return
    ranks = sorted({int(x) for st in p.get("stage_ranks") or [] for x in st})
    fix = ""
    if v > 1 or p.get("schedule") == "interleaved":  # already interleaved: only more micro-batches help
        fix = ("Raise the micro-batch count to at least 4x the stages (smaller micro-batches, or more gradient "
               "accumulation steps); the schedule is already interleaved, more virtual stages per rank would "
               "shrink the bubble further at the cost of more P2P traffic.")
    ev = [Evidence(f"theoretical bubble {pct(theo)} ({p.get('schedule')}"
                   f"{', v=' + str(int(v)) if v > 1 else ''}); with m = 4p = {int(4 * stages)} it would be "
                   f"{pct(at4p)}")]
    inf = p.get("inference") if isinstance(p.get("inference"), dict) else {}
    if inf.get("sources"):
        ev.append(Evidence(f"m = {int(m)} read from {', '.join(inf['sources'])} (confidence {conf:.2f})"))
    yield Finding(title=f"{int(m)} micro-batches for {int(stages)} pipeline stages: {pct(theo)} bubble by design",
                  confidence=min(0.8, conf), cost=theo - at4p, subject=Subject(ranks=ranks), involved=set(ranks),
                  fix=fix, evidence=ev)
