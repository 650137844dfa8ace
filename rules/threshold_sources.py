"""Where each threshold's default number comes from, for thresholds whose definition does not say it itself
(`Threshold.source` wins when set). docs/rules.md's threshold table prints it; a test requires one for every
threshold, so a new threshold must say where its number comes from."""
from __future__ import annotations

SOURCES: dict[str, str] = {
    "straggler_pct_last": ("off by default: tuned on the real CPU runs, arrival counts named the wrong rank or none at "
                           "a few ranks (a 40 ms host straggler arrives last at only 42 %); when set, 60 % is the "
                           "arrived-last majority of TraceLens / HTA"),
    "straggler_cost_min": ("tuned on the real CPU runs of fixtures/real-cpu-perf and fixtures/real-cpu that are not held "
                           "out: clean jobs reach a delay share of 0.070 at most (all with hold-up share <= 0.65), 20 % "
                           "and 100 % stragglers 0.087-0.53; checked after on the held-out runs (docs/cross-rank.md)"),
    "straggler_share_min": ("tuned with straggler_cost_min on the same runs: clean jobs spread the hold-up delay "
                            "(shares 0.31-0.65), a straggler causes 0.90-1.0 of it; 0.75 sits between, checked on "
                            "the held-out runs"),
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
    "bubble_excess": ("measured on real pipelines over stage 0's window: 16 clean emulated runs read theory +0.5 to "
                      "+3.4 points, one stage 2x slower +18, 1.5x slower +13 (held out); 10 points separates them "
                      "(docs/cross-rank.md, \"Pipeline\")"),
    "bubble_ratio": ("as bubble_excess, in relative terms: the simulator's clean p=4 m=4 jobs read 1.07-1.32x their "
                     "theory, so a deep pipeline's large theoretical bubble does not turn P2P latency into a warning"),
    "clock_residual_max_us": "a kernel launch and one NCCL hop take ~5-20 µs (NCCL's tuning model: 8.4 µs base, "
                             "5.7-9.6 µs per hop); residuals above 100 µs exceed the waits the report attributes",
}


def source_of(t) -> str:
    """The source text of a registered Threshold ("" when nobody said)."""
    return t.source or SOURCES.get(t.name, "")
