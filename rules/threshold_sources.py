"""Where each threshold's default number comes from, for thresholds whose definition does not say it itself
(`Threshold.source` wins when set). docs/rules.md's threshold table prints it; a test requires one for every
threshold, so a new threshold must say where its number comes from."""
from __future__ import annotations

SOURCES: dict[str, str] = {
    "straggler_pct_last": "the arrived-last statistic of TraceLens / HTA; 60 % is a clear majority, and 1.5× the "
                          "chance level keeps a 2-rank group (chance 50 %) from naming noise",
    "straggler_cost_min": "below 2 % of the step the imposed waits are within run-to-run jitter (step_spread_max is 5 %)",
    "straggler_compute_excess": "chosen well above the per-step compute variation of clean real runs "
                                "(fixtures/real-cpu-perf: a few per cent)",
    "step_spread_max": "ranks synchronised by collectives finish a step together; clean real CPU runs "
                       "(fixtures/real-cpu-perf) spread 2.5-5.9 %, so 5 % sits at the edge of their jitter",
    "persistent_frac": "the same majority as straggler_pct_last, over steps instead of collectives",
    "idle_share_max": "a GPU-bound training step keeps the GPU busy: the real MI300X DDP trace in the corpus idles "
                      "4.9 %; 15 % leaves room for launch gaps before blaming the host",
    "uneven_compute_frac": "a short last batch (drop_last=False) cuts a step's compute by a third or more; smaller "
                           "dips are data-dependent variation",
    "moe_imbalance_ratio": "the expert capacity factors of GShard / Switch Transformer (1.25-2): a rank receiving "
                           "1.5× the median tokens overflows a typical capacity",
    "bubble_excess": "the schedule's theoretical bubble (p−1)/(m+p−1) (GPipe, Huang et al. 2019); 15 points above it "
                     "is three times the measurement's own error on clean real pipelines (within 5 points)",
    "bubble_ratio": "as bubble_excess: 25 % above the theory in relative terms, so small theoretical bubbles are not "
                    "flagged for a few points of noise",
    "clock_residual_max_us": "a kernel launch and one NCCL hop take ~5-20 µs (NCCL's tuning model: 8.4 µs base, "
                             "5.7-9.6 µs per hop); residuals above 100 µs exceed the waits the report attributes",
}


def source_of(t) -> str:
    """The source text of a registered Threshold ("" when nobody said)."""
    return t.source or SOURCES.get(t.name, "")
