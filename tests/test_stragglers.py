"""Straggler thresholds on hand-built instance tables."""
from __future__ import annotations

import pandas as pd

from analyzer.cross_rank.stragglers import per_rank_stats, step_spread


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


def test_link_difference_from_nccl_logs():
    """A rank whose NCCL set up sockets among ranks on InfiniBand is a link straggler; uniform networks say nothing."""
    from types import SimpleNamespace

    import pandas as pd

    from analyzer.cross_rank.stragglers import link_difference

    def log(rank, network, transport):
        host, pid = f"h{rank // 2}", 100 + rank
        return SimpleNamespace(
            processes=pd.DataFrame({"host": [host], "pid": [pid], "rank": [rank]}),
            networks=pd.DataFrame({"host": [host], "pid": [pid], "network": [network], "role": ["selected"]}),
            connections=pd.DataFrame({"host": [host], "pid": [pid], "transport": [transport]}))

    logs = [log(r, "IB", "NET/IB") for r in range(6)] + [log(6, "Socket", "NET/Socket"), log(7, "IB", "NET/IB")]
    msg = link_difference(logs, 6)
    assert msg == ("NCCL on rank 6 uses NET/Socket, network Socket while most ranks (7 of 7) use NET/IB, "
                   "network IB")
    assert link_difference(logs, 3) is None                  # rank 3 is like the others
    assert link_difference([log(r, "IB", "NET/IB") for r in range(4)], 1) is None
    assert link_difference([], 1) is None
