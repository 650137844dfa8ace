"""Straggler thresholds on hand-built instance tables."""
from __future__ import annotations

import pandas as pd

from analyzer.stragglers import per_rank_stats, step_spread


def _tables(lasts, delay=50_000, n=4):
    inst = pd.DataFrame({"instance": range(len(lasts)), "kind": "collective", "n_members": n, "group_size": n,
                         "last_rank": lasts, "last_delay_ns": delay, "total_wait_ns": delay * (n - 1)})
    mem = pd.DataFrame([{"iid": i, "rank": r, "wait_ns": 0 if r == l else delay}
                        for i, l in enumerate(lasts) for r in range(n)])
    return inst, mem


def test_counts_and_wait_imposed():
    inst, mem = _tables([2, 2, 2, 1])
    s = per_rank_stats(inst, mem).set_index("rank")
    assert s.loc[2, "times_last"] == 3 and s.loc[2, "pct_last"] == 0.75
    assert s.loc[2, "wait_imposed_ns"] == 3 * 150_000 and s.loc[2, "delay_caused_ns"] == 150_000
    assert per_rank_stats(inst, mem)["rank"].iloc[0] == 2


def test_ties_are_not_last_arrivals():
    inst, mem = _tables([2, 2, 2, 2], delay=0)
    s = per_rank_stats(inst, mem).set_index("rank")
    assert s["times_last"].sum() == 0 and s.loc[2, "n_decided"] == 0


def test_step_spread():
    sm = pd.DataFrame({"rank": [0, 1, 2], "step": [3, 3, 3], "step_time_ns": [100_000, 110_000, 130_000]})
    (row,) = step_spread(sm)
    assert row["spread"] == 30_000 / 110_000 and row["slowest_rank"] == 2 and row["fastest_rank"] == 0
