"""The project's parser + metrics read every simulated trace and recover expected.json's per-rank step metrics."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from analyzer.rank.metrics import rank_step_metrics
from parsers.kineto import load_trace

SIM = Path(__file__).resolve().parent.parent / "fixtures" / "sim"
TRACED = sorted(p.name for p in SIM.iterdir() if (p / "rank0.pt.trace.json.gz").is_file())
INT_COLS = ["start_ns", "end_ns", "step_time_ns", "compute_ns", "comm_ns", "exposed_comm_ns", "idle_ns", "memcpy_ns"]
RATIOS = ["overlap_coverage", "comm_share", "exposed_comm_share"]


@pytest.mark.slow
@pytest.mark.parametrize("name", TRACED)
def test_parser_metrics_equal_truth(name):
    e = json.loads((SIM / name / "expected.json").read_text())
    truth = {(m["rank"], m["step"]): m for m in e["rank_step_metrics"]}
    seen = set()
    for f in e["files"]["traces"]:
        t = load_trace(SIM / name / f)
        assert not t.warnings, t.warnings
        assert t.meta["host"] == e["rank_host"][t.rank]
        df = rank_step_metrics(t).rename(columns={"start": "start_ns", "end": "end_ns"})
        for row in df.to_dict("records"):
            want = truth[(row["rank"], row["step"])]
            seen.add((row["rank"], row["step"]))
            for c in INT_COLS:
                assert int(row[c]) == want[c], (f, row["step"], c)
            for c in RATIOS:
                if want[c] is None:
                    assert math.isnan(row[c])
                else:
                    assert row[c] == pytest.approx(want[c], abs=1e-11), (f, c)
    assert seen == set(truth)


@pytest.mark.parametrize("name", ["tp_pp_dp_1f1b_clean", "moe_clean", "fsdp_clean", "ddp_clean_old_format"])
def test_parser_collectives_match_truth(name):
    e = json.loads((SIM / name / "expected.json").read_text())
    per_rank: dict = {}
    for c in e["collectives"]:
        for r, n in c["in_nelems"].items():
            per_rank.setdefault(int(r), []).append((c["start_ns"][r], c["op"]))
    for r in range(e["world_size"]):
        t = load_trace(SIM / name / f"rank{r}.pt.trace.json.gz")
        got = t.collectives[~t.collectives["op"].isin(["send", "recv", "sendrecv"])].sort_values("start")
        want = sorted(per_rank.get(r, []))
        assert list(got["start"]) == [s for s, _ in want]
        assert list(got["op"]) == [o for _, o in want]


def test_scale_mode_streams_repeated_steps_with_the_same_truth(tmp_path):
    from simulator.scale import write_scale

    write_scale(8, 0.4, tmp_path, gpus_per_host=4)
    e = json.loads((tmp_path / "expected.json").read_text())
    assert e["steps_per_rank"] > 1
    for r in (0, 5):
        t = load_trace(tmp_path / f"rank{r}.pt.trace.json.gz")
        df = rank_step_metrics(t)
        want = next(m for m in e["rank_step_metrics"] if m["rank"] == r)
        assert len(df) == e["steps_per_rank"]
        assert list(df["step"]) == list(range(want["step"], want["step"] + len(df)))
        for c in ("step_time_ns", "compute_ns", "comm_ns", "exposed_comm_ns", "idle_ns", "memcpy_ns"):
            assert (df[c] == want[c]).all(), c
        assert (df["start"].diff().dropna() == e["step_period_ns"]).all()


def test_scale_mode_holds_the_steps_per_rank_with_steps(tmp_path):
    """`python -m simulator scale --steps N` writes N steps in every rank whatever the world size (a benchmark over
    ranks then holds the work per rank constant), and the analyzer reads N steps a rank with the truth's metrics."""
    import analyzer
    from simulator.cli import main as sim_main

    for ranks, steps in ((4, 3), (8, 3)):
        out = tmp_path / f"s{ranks}"
        assert sim_main(["scale", "--ranks", str(ranks), "--gpus-per-host", "4", "--steps", str(steps),
                         "--out", str(out)]) == 0
        e = json.loads((out / "expected.json").read_text())
        assert e["steps_per_rank"] == steps
        with analyzer.load(out, jobs=1) as a:
            rows = a.report["metrics"]["per_step"]
            assert len(rows) == ranks * steps
            assert {r["rank"] for r in rows} == set(range(ranks))
            want = {m["rank"]: m["step_time_ns"] / 1000.0 for m in e["rank_step_metrics"]}
            assert all(r["step_time_us"] == want[r["rank"]] for r in rows)
            assert all(type(r) is dict for r in rows)  # plain dicts to every reader (json, ==, orjson)
    assert sim_main(["scale", "--ranks", "4", "--gpus-per-host", "4", "--steps", "0", "--out",
                     str(tmp_path / "bad")]) == 2
