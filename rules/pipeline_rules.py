"""Pipeline-parallel rules: bubble above the schedule's theory, too few micro-batches for the depth."""
from __future__ import annotations

from typing import Iterator

from rules.context import Context
from rules.finding import Evidence, Finding, Subject
from rules.registry import Threshold, rule
from rules.util import num, pct


def _pipe(ctx: Context) -> dict:
    """The cross-rank pipeline section when a pipeline was detected, else {}."""
    p = ctx.cross.get("pipeline") or {}
    return p if p.get("detected") else {}


@rule("PIPE001", "Pipeline bubble well above the schedule's theoretical bubble", "warning",
      thresholds=(Threshold("bubble_excess", 0.15, "fraction",
                            "report when the measured bubble exceeds the theoretical (p−1)/(m+p−1) by this much "
                            "(absolute) …"),
                  Threshold("bubble_ratio", 1.25, "×", "… and by at least this factor")),
      confirm="Look at one stage's compute timeline in a step: gaps between micro-batches beyond the warm-up "
              "and cool-down ramps are extra bubble (waiting for activations/gradients from a neighbour stage).",
      fix="Balance the stages (move layers from the slowest stage; the first/last stages also carry embedding "
          "and loss), overlap P2P with compute (batch_p2p_comm / async send-recv), and check the inter-stage "
          "link; more micro-batches (PIPE002) shrink the ramps.")
def bubble_high(ctx: Context) -> Iterator[Finding]:
    """Stages idle in the pipeline window far more than the schedule requires.

    bubble rate = the share of a stage's pipeline window (first to last compute of the step) without compute.
    For GPipe and 1F1B with p stages and m micro-batches theory gives (p−1)/(m+p−1) (interleaved with v
    chunks: (p−1)/(v·m+p−1)). A measured bubble well above it means unbalanced stages or slow P2P transfers.
    Cost: the excess bubble (fraction of the step).
    """
    p = _pipe(ctx)
    meas, theo = num(p.get("mean_bubble_rate")), num(p.get("theoretical_bubble"))
    if meas is None or theo is None:
        return
    excess = meas - theo
    if excess < ctx.t("bubble_excess") or meas < theo * ctx.t("bubble_ratio"):
        return
    worst = {}
    for s in p.get("per_stage") or []:
        b = num(s.get("bubble_rate"))
        if b is not None and s.get("rank") is not None:
            worst[int(s["rank"])] = max(worst.get(int(s["rank"]), 0.0), b)
    ev = [Evidence(f"mean bubble {pct(meas)} vs theoretical {pct(theo)} for p={p.get('p')}, m={p.get('m')}, "
                   f"schedule {p.get('schedule')}")]
    if worst:
        r = max(worst, key=worst.get)
        ev.append(Evidence(f"highest: rank {r} at {pct(worst[r])}"))
    ranks = sorted({int(x) for st in p.get("stage_ranks") or [] for x in st})
    yield Finding(title=f"Pipeline bubble {pct(meas)}, theory {pct(theo)} for this schedule", confidence=0.7,
                  evidence=ev, cost=excess, subject=Subject(ranks=ranks), involved=set(ranks))


@rule("PIPE002", "Too few micro-batches for the pipeline depth (m < 4p)", "info",
      confirm="The schedule's micro-batch count m (n_microbatches / num_microbatches / gradient accumulation "
              "steps) and the stage count p; theory (p−1)/(m+p−1) is quoted in the evidence.",
      fix="Raise the micro-batch count to at least 4× the stages (smaller micro-batches, or more gradient "
          "accumulation steps), or use an interleaved schedule (virtual_pipeline_model_parallel_size / "
          "ScheduleInterleaved1F1B) to divide the bubble by the chunk count.")
def few_microbatches(ctx: Context) -> Iterator[Finding]:
    """With m micro-batches over p stages the schedule alone idles (p−1)/(m+p−1) of every stage.

    Narayanan et al. (Megatron-LM, SC'21) keep m ≫ p; m ≥ 4p bounds the bubble near 15-20 %. Judged on the
    theoretical bubble the cross-rank section reports (it accounts for interleaving): fires when it exceeds
    the bubble of m = 4p, (p−1)/(4pv+p−1) with v model chunks per stage. Cost: the bubble that m = 4p would remove. Informational: the
    schedule is a deliberate configuration (memory often forces it); PIPE001 warns when the measured bubble
    exceeds what the schedule explains.
    """
    p = _pipe(ctx)
    stages, m, theo = num(p.get("p")), num(p.get("m")), num(p.get("theoretical_bubble"))
    if not stages or stages < 2 or m is None or theo is None:
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
    yield Finding(title=f"{int(m)} micro-batches for {int(stages)} pipeline stages: {pct(theo)} bubble by design",
                  confidence=0.8, cost=theo - at4p, subject=Subject(ranks=ranks), involved=set(ranks), fix=fix,
                  evidence=[Evidence(f"theoretical bubble {pct(theo)} ({p.get('schedule')}); with m = 4p = "
                                     f"{int(4 * stages)} it would be {pct(at4p)}")])
