"""Collective placement (analyzer/cross_rank/placement.py, SYNC002) on hand-built DDP-like steps.

Each step of 1 ms (4 ranks): a small metrics all-reduce, a forward of 300 µs, then two gradient all-reduces
in the backward. A misplaced rank all-reduces its metrics after its forward; the others before theirs.
"""
from __future__ import annotations

from types import SimpleNamespace

import pandas as pd

from analyzer.cross_rank.placement import analyse, sites

STEP, FWD = 1_000_000, 300_000


def _job(rows, compute, ranks=(0, 1, 2, 3), steps=(1, 2, 3)):
    """instances and members from (step, op, nelems, {rank: start}); compute: {rank: [(start, end)]}."""
    inst, mem = [], []
    for i, (step, op, n, starts) in enumerate(rows):
        order = sorted(starts, key=lambda r: (starts[r], r))
        last, second = order[-1], order[-2]
        inst.append({"instance": i, "kind": "collective", "process_group": "0", "step": step, "seq": i, "op": op,
                     "nelems": n, "n_members": len(starts), "group_size": len(starts), "last_rank": last,
                     "start_max": starts[last], "last_delay_ns": starts[last] - starts[second],
                     "total_wait_ns": sum(starts[last] - v for v in starts.values())})
        mem += [{"iid": i, "rank": r, "start": v, "end": starts[last] + 1000, "wait_ns": starts[last] - v}
                for r, v in starts.items()]
    traces = {r: SimpleNamespace(activity=pd.DataFrame({"start": [a for a, _ in compute[r]],
                                                        "end": [b for _, b in compute[r]],
                                                        "kind": ["compute"] * len(compute[r])}))
              for r in ranks}
    sm = pd.DataFrame([{"rank": r, "step": s, "start": s * STEP, "step_time_ns": STEP, "compute_ns": 0}
                       for r in ranks for s in steps])
    job = SimpleNamespace(traces=traces, cache={}, step_metrics=sm, nccl_logs=[])
    return job, pd.DataFrame(inst), pd.DataFrame(mem)


def _misplaced(bad=2, late=True, n=4):
    rows, comp = [], {r: [] for r in range(n)}
    for s in (1, 2, 3):
        t0 = s * STEP
        if late:  # bad: forward, metrics, backward; the others: metrics (wait for bad's forward), forward, …
            metrics = {r: t0 + (FWD if r == bad else 0) for r in range(n)}
            fwd_end = {r: t0 + FWD if r == bad else t0 + FWD + 2_000 + FWD for r in range(n)}
        else:  # bad: metrics (waits for the others' forwards), forward; the others: forward, metrics
            metrics = {r: t0 + (0 if r == bad else FWD) for r in range(n)}
            fwd_end = {r: t0 + FWD + 2_000 + FWD if r == bad else t0 + FWD for r in range(n)}
        rows.append((s, "allreduce", 4, metrics))
        rows.append((s, "allreduce", 1000, {r: fwd_end[r] + 100_000 for r in range(n)}))
        rows.append((s, "allreduce", 2000, {r: fwd_end[r] + 200_000 for r in range(n)}))
        for r in range(n):
            f0 = fwd_end[r] - FWD
            comp[r] += [(f0, fwd_end[r]), (fwd_end[r], fwd_end[r] + 200_000)]
    return _job(rows, comp, ranks=tuple(range(n)))


def test_with_three_ranks_only_the_rank_that_moved_the_call_is_named():
    """Two peers: their median compute before entry is their mean (150 µs), so each healthy rank reads 150 µs
    "early"; it differs from the misplaced rank but not from the other healthy one, and is not named."""
    for late, bad in ((True, 2), (False, 0)):
        job, inst, mem = _misplaced(bad=bad, late=late, n=3)
        (m,) = analyse(job, inst, mem)["misplaced"]
        assert (m["rank"], m["index_in_step"], m["late"]) == (bad, 0, late)


def test_with_two_ranks_the_late_arrival_is_named():
    """Two ranks that disagree at a site are one placement seen from both sides: the late one makes the other
    wait there (and nothing else tells which rank moved the call)."""
    job, inst, mem = _misplaced(bad=1, late=True, n=2)
    (m,) = analyse(job, inst, mem)["misplaced"]
    assert (m["rank"], m["late"]) == (1, True)


def test_sites_are_op_size_and_position_in_the_step():
    _, inst, _ = _misplaced()
    st = sites(inst)
    assert st["site"].nunique() == 3 and list(st["index"][:3]) == [0, 1, 2]
    assert (st.groupby("site")["step"].nunique() == 3).all()


def test_a_rank_entering_the_metrics_all_reduce_after_its_forward_is_named_with_the_site():
    job, inst, mem = _misplaced(bad=2)
    (m,) = analyse(job, inst, mem)["misplaced"]
    assert (m["rank"], m["process_group"], m["op"], m["nelems"], m["index_in_step"], m["late"]) == \
        (2, "0", "allreduce", 4, 0, True)
    assert m["compute_before_us"] == 300.0 and m["peers_compute_before_us"] == 0.0
    assert (m["steps"], m["steps_consistent"]) == (3, 3)
    assert m["wait_per_step_us"] == 300.0 and m["cost_share"] == 0.3  # the others wait its forward there
    assert m["wait_back_per_step_us"] == 302.0 and m["other_sites"] == [1, 2]  # … and it waits for theirs


def test_a_rank_entering_it_before_its_forward_while_the_others_do_after():
    job, inst, mem = _misplaced(bad=1, late=False)
    (m,) = analyse(job, inst, mem)["misplaced"]
    assert (m["rank"], m["index_in_step"], m["late"]) == (1, 0, False)
    assert m["compute_before_us"] == 0.0 and m["peers_compute_before_us"] == 300.0
    assert m["wait_per_step_us"] == 300.0  # it waits there for the others' forwards


def test_a_straggler_is_not_a_placement():
    """Late at every collective and never early: its extra work, not where it calls them."""
    rows, comp = [], {r: [] for r in range(4)}
    for s in (1, 2, 3):
        t0 = s * STEP
        extra = {r: 200_000 if r == 3 else 0 for r in range(4)}
        rows.append((s, "allreduce", 4, {r: t0 for r in range(4)}))
        rows.append((s, "allreduce", 1000, {r: t0 + 2_000 + FWD + extra[r] + 100_000 for r in range(4)}))
        rows.append((s, "allreduce", 2000, {r: t0 + 2_000 + FWD + extra[r] + 200_000 for r in range(4)}))
        for r in range(4):
            comp[r] += [(t0 + 2_000, t0 + 2_000 + FWD + extra[r] + 200_000)]
    job, inst, mem = _job(rows, comp)
    assert analyse(job, inst, mem)["misplaced"] == []


def test_sync002_names_the_rank_and_call_site_and_absorbs_the_exposed_comm():
    import rules.catalog  # noqa: F401  (registers the thresholds)
    from rules.context import Context
    from rules.placement_rules import misplaced_collective
    job, inst, mem = _misplaced(bad=2)
    rep = {"job": {"ranks": [0, 1, 2, 3]}, "cross_rank": {"placement": analyse(job, inst, mem)}}
    (f,) = list(misplaced_collective(Context(rep)))
    assert (f.subject.ranks, f.subject.process_group, f.cost) == ([2], "0", 0.3)
    assert f.title == ("Rank 2 calls the 1st collective of group 0's step (allreduce) after work its peers do "
                       "after it: its placement makes the ranks wait for each other")
    assert "after 0.30 ms of compute in its step, its peers after 0.00 ms" in f.evidence[0].text
    rep["cross_rank"]["placement"]["misplaced"][0]["cost_share"] = 0.04
    assert list(misplaced_collective(Context(rep))) == []  # below placement_cost_min
