"""Stragglers in noise, collective placement and stage noise on the second real CPU test bed
(fixtures/real-cpu-perf-2, truth measured inside each job; judge.py decides what the first warning must be).

Tuned on the runs with `"held_out": false`; the held-out runs are scored by fixtures/real-cpu-perf-2/score.py and
their figures are in docs/performance.md ("Diagnoses on the second test bed"); nothing here asserts on them
(one of them, tp2-clean, fails the clean-run guarantee: see there).
"""
from __future__ import annotations

import json
import sys
from functools import lru_cache
from pathlib import Path

import pytest

from analyzer.load.job import load_job
from analyzer.report.assemble import run_analysis

BED = Path(__file__).resolve().parents[1] / "fixtures/real-cpu-perf-2"
sys.path.insert(0, str(BED))
import judge  # noqa: E402  (the bed's own judge: stdlib only)

pytestmark = pytest.mark.slow  # loads real or 64+ rank folders: outside the everyday loop


def _truth(run: str) -> dict:
    return json.loads((BED / run / "truth.json").read_text())


@lru_cache(maxsize=None)
def _report(run: str) -> dict:
    return run_analysis(load_job([str(BED / run)], jobs=1))


def _runs(kinds: tuple, held_out: bool) -> list[str]:
    return [d.name for d in sorted(BED.iterdir()) if (d / "truth.json").exists()
            and _truth(d.name)["kind"] in kinds and bool(_truth(d.name)["held_out"]) == held_out]


#: stragglers the first warning names right (rank and kind), tuned runs; pp2-host-15 is a pipeline stage
#: straggler (send/recv only: named by its own host time against the other stage's and the wait it causes)
NAMED = ["ddp4-data-25", "ddp4-host-15", "fsdp3-compute-25", "fsdp3-data-15", "fsdp3-host-10", "tp2-compute-15",
         "tp2-host-25", "pp2-host-15"]


@pytest.mark.parametrize("run", NAMED)
def test_the_first_warning_names_the_straggler_and_its_kind(run):
    ok, why = judge.judge(_truth(run), _report(run)["findings"])
    assert ok, why


def test_a_host_straggler_whose_hold_ups_noise_splits_is_named_by_its_consistent_excess():
    """ddp4-host-15: rank 2 holds 0.64 of the hold-ups (below 0.75; rank 1 takes steps 4-5), but its host time
    exceeds its peers' in 5 of 5 steps by 11.5 % against the others' noise (its host/idle time: the gap before its
    first compute or the step's idle time, issue #29; the gap alone read 13.7 %): the job measured 26.3 ms of host
    work, 12.6 % of the run's median step."""
    rep = _report("ddp4-host-15")
    row = next(r for r in rep["cross_rank"]["stragglers"]["per_rank"] if r["rank"] == 2)
    assert 0.4 <= row["holdup_share"] < 0.75
    assert row["consistent_excess"] and row["excess_kind"] == "host"
    assert (row["excess_steps_above"], row["excess_steps"]) == (5, 5)
    assert row["excess_share"] == pytest.approx(0.126, abs=0.02) and row["excess_spread"] < 0.06
    f = rep["findings"][0]
    text = " ".join(e["text"] for e in f["evidence"])
    assert "exceeds its peers' median in 5 of 5 steps by" in text and "standard errors" in text


def test_compute_nested_waits_are_not_compute():
    """FSDP2's pre-backward all_gather wait inside `evaluate_function`, DTensor's wait_tensor: once they count as
    waiting, the compute straggler's compute is the one above its peers'."""
    for run, rank in (("fsdp3-compute-25", 1), ("tp2-compute-15", 1)):
        s = _report(run)["cross_rank"]["stragglers"]
        assert (s["straggler"], s["attribution"]) == (rank, "compute"), run


def test_a_misplaced_metrics_all_reduce_is_named_with_its_rank_and_call_site():
    rep = _report("ddp4-misplaced-r1")
    (m,) = rep["cross_rank"]["placement"]["misplaced"]
    assert (m["rank"], m["op"], m["nelems"], m["index_in_step"], m["late"]) == (1, "allreduce", 4, 0, True)
    assert m["steps_consistent"] == m["steps"] == 5
    assert m["peers_compute_before_us"] < 1000 < 30_000 < m["compute_before_us"]  # after its ~40 ms forward
    f = rep["findings"][0]
    assert (f["id"], f["subject"]["ranks"], f["severity"]) == ("SYNC002", [1], "warning")
    assert 0.15 <= f["cost"] <= 0.35  # truth: 28.8 % of the step
    assert {"COMM001", "LOAD001"} <= {c["id"] for c in f["consequences"]}  # the waits, not their causes


@pytest.mark.parametrize("run", _runs(("none", "comm_bound"), held_out=False))
def test_clean_runs_get_no_straggler_finding(run):
    assert judge.straggler_on_clean(_truth(run), _report(run)["findings"]) is None


def test_a_scheduler_victim_is_only_a_may_be():
    """ddp4-clean: rank 2 is last at 14 of 15 all-reduces and computes 14 % more than its peers in 5 of 5 steps,
    but it runs the same 91 compute operators per step as they do: the same work run longer (the shared host's
    scheduler), not more work, so on a CPU-only job it is no consistent excess; the hold-ups alone make it an info
    "may be", and LOAD002 does not warn about it either."""
    rep = _report("ddp4-clean")
    row = next(r for r in rep["cross_rank"]["stragglers"]["per_rank"] if r["rank"] == 2)
    assert row["excess_kind"] == "compute" and (row["excess_steps_above"], row["excess_steps"]) == (5, 5)
    assert row["excess_share"] > 0.1 and row["more_compute_ops"] == 0.0 and not row["consistent_excess"]
    f = next(f for f in rep["findings"] if f["id"] == "LOAD001")
    assert f["severity"] == "info" and f["title"].startswith("Rank 2 may be a straggler")
    assert any("the same compute operators per step as its peers" in e["text"] for e in f["evidence"])
    assert all(g["severity"] == "info" for g in rep["findings"] if g["id"] == "LOAD002")


@pytest.mark.slow
def test_the_same_work_run_longer_on_another_host_is_a_straggler(tmp_path):
    """The scheduler-victim guard is for ranks that share one host's cores: put ddp4-clean's rank 2 on another host
    (its trace's host_name, nothing else changed) and its consistent +14 % compute in 5 of 5 steps is that node's
    own slowness, named as a compute straggler again."""
    import gzip
    import shutil
    run = tmp_path / "ddp4-clean-two-hosts"
    shutil.copytree(BED / "ddp4-clean", run)
    p = run / "rank2.pt.trace.json.gz"
    doc = json.loads(gzip.decompress(p.read_bytes()))
    assert doc["host_name"] == "vm"
    doc["host_name"] = "node-b"
    p.write_bytes(gzip.compress(json.dumps(doc).encode()))
    rep = run_analysis(load_job([str(run)], jobs=1))
    row = next(r for r in rep["cross_rank"]["stragglers"]["per_rank"] if r["rank"] == 2)
    assert row["excess_kind"] == "compute" and row["more_compute_ops"] is None and row["consistent_excess"]
    f = next(f for f in rep["findings"] if f["id"] == "LOAD001")
    assert f["severity"] == "warning" and f["title"].startswith("Rank 2"), f["title"]


@pytest.mark.parametrize("run", ["ddp4-compute-10", "ddp4-compute-25", "ddp4-compute-40", "fsdp3-compute-25",
                                 "fsdp3-compute-40", "tp2-compute-15"])
def test_a_compute_straggler_runs_more_operators(run):
    """The injected compute (extra matmuls) is more work: the straggler runs ≥ 25 more compute operators per step
    than its peers' median, no other rank more than its own peers' median."""
    r = _truth(run)["target_rank"]
    rows = {x["rank"]: x for x in _report(run)["cross_rank"]["stragglers"]["per_rank"]}
    assert rows[r]["more_compute_ops"] >= 25 and rows[r]["consistent_excess"]
    assert all(x["more_compute_ops"] <= 0.5 for k, x in rows.items() if k != r)


def test_identical_pipeline_stages_are_not_named_heavy():
    """pp2-1f1b-clean: 32 % bubble against a 20 % theory, but the stages' own transfer and host time are 12.5 % of
    the window: PIPE001 is an info that says so, and names no stage heavy."""
    f = next(f for f in _report("pp2-1f1b-clean")["findings"] if f["id"] == "PIPE001")
    assert not any("the other stages wait for it" in e["text"] for e in f["evidence"])
    assert f["severity"] == "info" and "own transfer and host time" in f["title"]


def test_operator_counts_from_full_traces_are_the_summaries_counts():
    """compute_ops_per_step reads a RankSummary's profile rows, or computes them from a full trace (the Python API
    without an engine): both give ddp4-clean's 91 compute operators per step on every rank."""
    from types import SimpleNamespace

    from analyzer.cross_rank.excess import compute_ops_per_step
    from parsers.kineto import load_trace
    full = SimpleNamespace(traces={r: load_trace(BED / "ddp4-clean" / f"rank{r}.pt.trace.json.gz") for r in range(4)})
    summaries = load_job([str(BED / "ddp4-clean")], jobs=1)
    assert compute_ops_per_step(full) == compute_ops_per_step(summaries) == {0: 91.0, 1: 91.0, 2: 91.0, 3: 91.0}
