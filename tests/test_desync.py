"""Desync detection on hand-built collective tables, and on real and simulated traces with one collective removed."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from analyzer.cross_rank import collectives as co
from analyzer.cross_rank.desync import EXTRA_SEQ, realign

#: end times (µs) of one group's six collectives, two steps of three; irregular spacing as real buckets
ENDS = [100, 180, 400, 1100, 1190, 1420]


def _coll(ranks=(0, 1, 2), drop=None, extra=None, op_at=None, offset=None):
    rows = []
    for r in ranks:
        for k, e in enumerate(ENDS):
            if drop == (r, k):
                continue
            off = (offset or {}).get(r, 0)
            op = op_at[2] if op_at and (r, k) == op_at[:2] else "allreduce"
            rows.append({"rank": r, "process_group": "0", "op": op, "start": (e - 50 + r) * 1000 + off,
                         "end": e * 1000 + off, "nelems": -1, "step": 1 if k < 3 else 2})
        if extra and extra[0] == r:
            rows.append({"rank": r, "process_group": "0", "op": "allreduce", "start": extra[1] * 1000,
                         "end": (extra[1] + 20) * 1000, "nelems": -1, "step": 2})
    long = pd.DataFrame(rows)
    return co.collective_sequences(long.sort_values(["rank", "start"]).reset_index(drop=True))


def _job(ranks=(0, 1, 2), steps=(1, 2)):
    return SimpleNamespace(step_metrics=pd.DataFrame([{"rank": r, "step": s} for r in ranks for s in steps]))


def test_missing_collective_named_with_rank_group_position_and_step():
    coll, found, changed = realign(_coll(drop=(2, 4)), _job())
    assert changed
    (d,) = found
    assert {k: d[k] for k in ("kind", "rank", "process_group", "op", "position", "step", "index_in_step")} == \
        {"kind": "missing", "rank": 2, "process_group": "0", "op": "allreduce", "position": 4, "step": 2,
         "index_in_step": 1}
    assert d["confidence"] > 0.9 and "or_position" not in d
    seq = coll[coll["rank"] == 2].sort_values("start")["seq"].tolist()
    assert seq == [0, 1, 2, 3, 5]  # the later collective keeps its own instance


def test_missing_collective_with_an_unknown_clock_offset():
    coll, found, _ = realign(_coll(drop=(1, 1), offset={1: 7_000_000}), _job())
    assert [(d["rank"], d["position"]) for d in found] == [(1, 1)]
    coll, found, _ = realign(_coll(drop=(1, 1), offset={1: 7_000_000}), _job(), offset_of={0: 0, 1: -7_000_000, 2: 0})
    assert [(d["rank"], d["position"]) for d in found] == [(1, 1)]


def test_outside_the_ranks_recorded_steps_is_no_desync():
    """A trace that lacks its first step (started later, or cut) lacks those collectives: realigned, not reported."""
    rows = _coll(drop=(2, 0))
    job = SimpleNamespace(step_metrics=pd.DataFrame([{"rank": r, "step": s} for r in (0, 1) for s in (1, 2)]
                                                    + [{"rank": 2, "step": 2}]))
    coll, found, changed = realign(rows, job)
    assert found == [] and changed
    assert coll[coll["rank"] == 2].sort_values("start")["seq"].tolist() == [1, 2, 3, 4, 5]


def test_extra_and_reordered_collectives():
    coll, found, _ = realign(_coll(extra=(1, 1300)), _job())
    (d,) = found
    assert (d["kind"], d["rank"], d["step"]) == ("extra", 1, 2)
    assert (coll[coll["rank"] == 1]["seq"] >= EXTRA_SEQ).sum() == 1
    _, found, changed = realign(_coll(op_at=(0, 2, "allgather")), _job())
    (d,) = found
    assert (d["kind"], d["rank"], d["position"], d["op"], d["expected_op"]) == ("order", 0, 2, "allgather", "allreduce")
    _, found, changed = realign(_coll(), _job())
    assert found == [] and not changed


@pytest.mark.parametrize("path", ["fixtures/real-cpu-perf/fsdp4-clean-medium", "fixtures/sim/ddp_clean",
                                  "fixtures/sim/tp_dp_clean", "fixtures/real-cpu-perf/ddp8-clean-small"])
@pytest.mark.slow
def test_any_removed_collective_is_found(path):
    """Remove each collective of one rank in turn from a real (or simulated) job: it is found at its position (the
    real gloo runs were profiled with record_shapes, so their buckets' sizes tell simultaneous ones apart; without
    sizes the other position would be offered as `or_position` below confidence 0.7)."""
    from analyzer.cross_rank.section import analyse
    from analyzer.cross_rank.topology import declared_groups
    from analyzer.load.job import load_job
    job = load_job([path], jobs=1)
    off = analyse(job).alignment.offset_of
    long = co.gather(job)
    co.assign_keys(long, declared_groups(job))
    coll = co.collective_sequences(long)
    r = int(coll["rank"].max())
    tried = exact = 0
    for pg, sub in coll[coll["rank"] == r].groupby("process_group"):
        idx = sub.sort_values("seq").index
        for pos in np.linspace(0, len(idx) - 1, min(len(idx), 12)).astype(int):
            c2 = co.collective_sequences(coll.drop(index=idx[pos]).drop(columns=["seq"]))
            _, found, _ = realign(c2, job, off)
            hit = [d for d in found if d["rank"] == r and d["process_group"] == pg]
            assert len(hit) == 1, (pg, pos, found)
            tried += 1
            if hit[0]["position"] == pos:
                exact += 1
            else:
                assert hit[0].get("or_position") == pos and hit[0]["confidence"] < 0.7, (pg, pos, hit)
    assert exact == tried
