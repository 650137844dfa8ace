"""The benchmark generator writes what it says: consecutive ProfilerStep numbers, all-reduces inside the steps."""
from __future__ import annotations

from benchmarks.gen_traces import write_rank
from parsers.kineto import load_trace


def test_steps_are_numbered_in_order_and_hold_the_allreduces(tmp_path):
    path = tmp_path / "rank3.pt.trace.json"
    write_rank(path, 3, 8, 1.2, seed=1, use_gzip=False)
    t = load_trace(path)
    steps = t.steps["step"].tolist()
    assert len(steps) >= 3
    assert steps == list(range(100, 100 + len(steps)))      # not the all-reduce element counts (1 << 20, ...)
    c = t.collectives
    assert set(c["op"]) == {"allreduce"} and set(c["in_nelems"]) <= {1 << 20, 1 << 22, 1 << 24}
    # six all-reduces per step (every fourth layer's backward), each inside its step's CPU window
    st = t.steps.sort_values("start")
    inside = [((c["start"] >= s) & (c["start"] < e)).sum() for s, e in zip(st["start"], st["end"])]
    assert inside[:-1] == [6] * (len(inside) - 1)
