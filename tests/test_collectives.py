"""Instance metrics from hand-built member rows: waits, transfer, bandwidth factors, bytes."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analyzer.cross_rank.collectives import busbw_factor, dtype_size, instance_frame


def test_nccl_tests_factors():
    assert busbw_factor("allreduce", 8) == pytest.approx(2 * 7 / 8)
    for op in ("allgather", "reducescatter", "alltoall"):
        assert busbw_factor(op, 4) == pytest.approx(3 / 4)
    for op in ("broadcast", "reduce", "sendrecv"):
        assert busbw_factor(op, 4) == 1.0


def test_dtype_sizes_as_kineto_spells_them():
    assert [dtype_size(d) for d in ("Float", "BFloat16", "Half", "Int", "Long", "Byte", "Double", "nope")] == \
        [4, 2, 2, 4, 8, 1, 8, 0]


def _members(starts, ends, op="allreduce", nelems=1_000_000, dtype="Float"):
    n = len(starts)
    return pd.DataFrame({"iid": 0, "rank": range(n), "start": starts, "end": ends, "op": op, "nelems": nelems,
                         "dtype": dtype, "process_group": "3", "kind": "collective", "seq": 0, "src": -1,
                         "dst": -1, "step": 5})


def test_wait_transfer_skew_and_bandwidth():
    # starts 100, 130, 110, 160 µs; all end at 400 µs → transfer = 400 − 160 = 240 µs (min duration)
    m = _members([100_000, 130_000, 110_000, 160_000], [400_000, 400_500, 400_000, 400_000])
    inst, mem = instance_frame(m, {0: "h0", 1: "h0", 2: "h1", 3: "h1"}, {("collective", "3"): [0, 1, 2, 3]})
    row = inst.iloc[0]
    assert mem["wait_ns"].tolist() == [60_000, 30_000, 50_000, 0]
    assert row["transfer_ns"] == 240_000
    assert row["arrival_skew_ns"] == 60_000 and row["end_skew_ns"] == 500
    assert row["last_rank"] == 3 and row["last_delay_ns"] == 30_000
    assert row["total_wait_ns"] == 140_000
    assert row["bytes"] == 4_000_000
    assert row["algbw_gbps"] == pytest.approx(4_000_000 / 240_000)   # bytes per ns = decimal GB/s
    assert row["busbw_gbps"] == pytest.approx(4_000_000 / 240_000 * 1.5)
    assert bool(row["crossed_hosts"]) and row["complete"]


def test_missing_member_marks_instance_incomplete():
    m = _members([0, 10], [100, 100])
    inst, _ = instance_frame(m, {}, {("collective", "3"): [0, 1, 2]})
    assert not inst["complete"].iloc[0] and inst["group_size"].iloc[0] == 3
    assert inst["crossed_hosts"].iloc[0] is None
