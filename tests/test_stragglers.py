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


def _job(compute: dict, steps=(1, 2), step_ns=1_000_000, ranks=(0, 1, 2)):
    """A stand-in job: per-rank compute intervals (ns) and step metrics of `step_ns` per step."""
    from types import SimpleNamespace

    traces = {r: SimpleNamespace(activity=pd.DataFrame({
        "start": [a for a, _ in compute.get(r, [])], "end": [b for _, b in compute.get(r, [])],
        "kind": ["compute"] * len(compute.get(r, []))}), steps=pd.DataFrame({"step": [], "start": [], "end": []}))
        for r in ranks}
    sm = pd.DataFrame([{"rank": r, "step": s, "step_time_ns": step_ns, "compute_ns": 0} for r in ranks for s in steps])
    return SimpleNamespace(traces=traces, cache={}, step_metrics=sm, nccl_logs=[])


def _held(rows):
    """Instance and member tables from (step, group, {rank: start}) rows (aligned = local clocks)."""
    inst, mem = [], []
    for i, (step, pg, starts) in enumerate(rows):
        order = sorted(starts, key=starts.get)
        last, second = order[-1], order[-2]
        inst.append({"instance": i, "kind": "collective", "process_group": pg, "step": step,
                     "n_members": len(starts), "group_size": len(starts), "last_rank": last,
                     "start_max": starts[last], "last_delay_ns": starts[last] - starts[second],
                     "total_wait_ns": sum(starts[last] - v for v in starts.values())})
        mem += [{"iid": i, "rank": r, "start": v, "end": starts[last] + 1000, "wait_ns": starts[last] - v}
                for r, v in starts.items()]
    return pd.DataFrame(inst), pd.DataFrame(mem)


def test_delay_is_the_longest_hold_up_or_the_exposed_wait():
    """Persisting lateness over overlapped collectives counts once; blocking ones add up (exposed wait)."""
    from analyzer.cross_rank.stragglers import step_delays
    # step 1: rank 2 late by 100 µs at two overlapped buckets while the others compute (DDP-like)
    # step 2: rank 2 late by 30 µs at three collectives while the others sit idle (TP-like, blocking)
    inst, mem = _held([(1, "0", {0: 0, 1: 10_000, 2: 110_000}), (1, "0", {0: 200_000, 1: 210_000, 2: 310_000}),
                       (2, "0", {0: 1_000_000, 1: 1_000_000, 2: 1_030_000}),
                       (2, "0", {0: 1_100_000, 1: 1_100_000, 2: 1_130_000}),
                       (2, "0", {0: 1_200_000, 1: 1_200_000, 2: 1_230_000})])
    busy = [(0, 400_000)]  # ranks 0 and 1 compute through step 1, not in step 2
    d = step_delays(_job({0: busy, 1: busy}), inst, mem).set_index(["rank", "step"])
    assert d.loc[(2, 1), "longest_ns"] == 100_000 and d.loc[(2, 1), "exposed_ns"] == 0
    assert d.loc[(2, 1), "delay_ns"] == 100_000
    assert d.loc[(2, 2), "longest_ns"] == 30_000 and d.loc[(2, 2), "exposed_ns"] == 90_000
    assert d.loc[(2, 2), "delay_ns"] == 90_000


def test_straggler_needs_material_delay_and_most_of_its_groups_waiting():
    from analyzer.cross_rank.stragglers import analyse
    # rank 2 holds up each step by 100 µs (10 % of a 1 ms step); rank 1 once by 20 µs
    rows = [(1, "0", {0: 0, 1: 0, 2: 100_000}), (2, "0", {0: 1_000_000, 1: 1_000_000, 2: 1_100_000}),
            (2, "0", {0: 1_500_000, 1: 1_520_000, 2: 1_500_000})]
    inst, mem = _held(rows)
    out = analyse(_job({}), inst, mem)
    per = {r["rank"]: r for r in out["per_rank"]}
    assert per[2]["delay_share"] == 0.1 and per[2]["holdup_share"] == 200_000 / 220_000
    assert per[2]["delay_per_step_us"] == 100.0 and per[2]["steps_held"] == 2
    assert out["straggler"] == 2 and out["attribution"] == "unknown"
    assert out["per_step"] == [
        {"step": 1, "slowest_rank": 2, "delay_us": 100.0, "material": True, "last_arrivals": {"2": 1}},
        {"step": 2, "slowest_rank": 2, "delay_us": 100.0, "material": True, "last_arrivals": {"2": 1, "1": 1}}]
    inst, mem = _held(rows[:2])
    assert analyse(_job({}), inst, mem)["straggler"] is None  # 2 decided collectives: too few to say
    # the same delay spread over two ranks: neither makes most of the waiting
    inst, mem = _held([(1, "0", {0: 0, 1: 0, 2: 100_000}), (2, "0", {0: 1_000_000, 1: 1_100_000, 2: 1_000_000})] * 3)
    assert analyse(_job({}), inst, mem)["straggler"] is None


def test_hold_up_share_is_per_group():
    """A rank that slows its TP partner owns that group's waiting though its slowed replica holds up DP groups too."""
    from analyzer.cross_rank.stragglers import holdup_shares, step_delays
    rows = [(1, "tp", {0: 0, 1: 50_000}), (1, "tp", {0: 100_000, 1: 150_000}),
            (1, "dp", {1: 500_000, 3: 400_000}), (1, "dp2", {0: 500_000, 2: 400_000})]
    inst, mem = _held(rows)
    sh = holdup_shares(step_delays(_job({}, ranks=(0, 1, 2, 3)), inst, mem, by_group=True))
    assert sh[1] == 1.0 and sh[0] == 1.0  # rank 1 owns the tp group's waiting, rank 0 its dp group's


def test_excess_consistency_is_a_sign_test_with_an_effect_size_above_the_peers_noise():
    """Rank 3 computes 20 % of the step more than its peers in 3 of 3 steps, against peers within ±1 %: consistent;
    rank 1 is 6 % above in 2 of 3 steps only: not."""
    from types import SimpleNamespace

    from analyzer.cross_rank.stragglers import excess_consistency
    step = 1_000_000
    extra = {0: (0, 10_000, -10_000), 1: (60_000, 60_000, -60_000), 2: (-10_000, 0, 10_000),
             3: (200_000, 180_000, 220_000)}
    sm = pd.DataFrame([{"rank": r, "step": s, "step_time_ns": step, "compute_ns": 500_000 + extra[r][i]}
                       for r in range(4) for i, s in enumerate((1, 2, 3))])
    traces = {r: SimpleNamespace(first_gaps=pd.DataFrame({"step": [1, 2, 3], "gap_ns": [1000, 1000, 1000]}))
              for r in range(4)}
    out = excess_consistency(SimpleNamespace(step_metrics=sm, traces=traces)).set_index("rank")
    r3 = out.loc[3]
    assert (r3["excess_kind"], r3["excess_steps"], r3["excess_steps_above"], bool(r3["consistent"])) == \
        ("compute", 3, 3, True)
    # peers' median per step: step 1 → median(0, 60k, −10k) = 0 → +200k; step 2 → 10k → +170k; step 3 → −10k → +230k
    assert r3["excess_share"] == 0.2 and abs(r3["excess_spread"] - 1.4826 * 0.03) < 1e-9
    assert not bool(out.loc[1, "consistent"])


def test_cpu_compute_excess_needs_more_work_and_more_work_alone_can_name():
    """On a CPU-only job the ranks of one data-parallel job run the same operators: a compute excess without more
    of them is the host's contention (not consistent), and more of them (>= 2 %, no send/recv) is work of the
    rank's own; GPU traces are left as they are."""
    from types import SimpleNamespace

    from analyzer.cross_rank.stragglers import _more_work, _same_work_is_contention

    def job(counts, device="cpu"):
        traces = {r: SimpleNamespace(device_type=device, profile=(pd.DataFrame(
            {"name": ["aten::mm"], "kind": ["compute"], "per_step_n": [float(n)], "per_step_ns": [1.0]}), 3))
            for r, n in counts.items()}
        return SimpleNamespace(traces=traces)

    cons = pd.DataFrame({"rank": [0, 1, 2, 3], "excess_kind": ["compute", "compute", "host", "host"],
                         "consistent": [True, True, False, False]})
    out = _same_work_is_contention(job({0: 91, 1: 121, 2: 91, 3: 91}), cons).set_index("rank")
    assert list(out["more_ops"]) == [0.0, 30.0, 0.0, 0.0]
    assert not out.loc[0, "consistent"] and out.loc[1, "consistent"]  # same operators, longer: contention
    gpu = _same_work_is_contention(job({0: 91, 1: 121, 2: 91, 3: 91}, device="cuda"), cons)
    assert "more_ops" not in gpu and bool(gpu.set_index("rank").loc[0, "consistent"])
    assert list(out["more_ops_base"]) == [91.0, 91.0, 91.0, 91.0]
    stats = out.reset_index()[["rank", "more_ops", "more_ops_base"]].copy()
    inst = pd.DataFrame({"kind": ["collective"]})
    assert list(_more_work(inst, stats)) == [False, True, False, False]
    assert abs(stats.loc[1, "more_ops_share"] - 30 / 91) < 1e-9
    assert not _more_work(pd.DataFrame({"kind": ["p2p"]}), stats).any()


def test_median_of_the_other_ranks_without_a_loop():
    import numpy as np

    from analyzer.cross_rank.excess import median_of_others
    v = np.array([91.0, 333.8, 91.0, 91.0])
    assert list(median_of_others(v[None, :])[0]) == [91.0, 91.0, 91.0, 91.0]
    assert list(median_of_others(np.array([[106.0, 340.4, 106.0]]))[0]) == [223.2, 106.0, 223.2]
    assert list(median_of_others(np.array([[1.0, 2.0]]))[0]) == [2.0, 1.0]
