"""Hang analysis over the simulator's hang scenarios (fixtures/sim/hang_*): FR alone, logs alone, and both."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import pytest

from analyzer.hang.analysis import KIND_ALIASES, analyze_hang, load_and_analyze
from parsers.flight_recorder import load_dump
from parsers.torch_stderr import parse_stderr
from parsers.nccl_log import parse_nccl_log

pytestmark = pytest.mark.slow  # loads real or 64+ rank folders: outside the everyday loop

SIM = Path(__file__).resolve().parent.parent / "fixtures" / "sim"
HANGS = sorted(p.name for p in SIM.glob("hang_*") if (p / "expected.json").exists())


@lru_cache(maxsize=None)
def _inputs(d: Path) -> tuple[list, list]:
    """Pickle dumps when the scenario has them, else JSON dumps; every *.log through the NCCL log parser."""
    pk = sorted(p for p in d.glob("nccl_trace_rank_*") if p.suffix != ".json")
    dumps = [load_dump(p) for p in (pk or sorted(d.glob("nccl_trace_rank_*.json")))]
    return dumps, [parse_nccl_log(p) for p in sorted(d.glob("*.log"))]


@pytest.mark.skipif(not HANGS, reason="no simulated hang scenarios in fixtures/sim")
@pytest.mark.parametrize("name", HANGS)
@pytest.mark.parametrize("mode", ["fr", "logs", "both"])
def test_sim_hang_first_diagnosis_matches_truth(name: str, mode: str) -> None:
    """The top diagnosis names the planted fault's kind, process group, seq and ranks."""
    d = SIM / name
    truth = json.loads((d / "expected.json").read_text())
    fault = truth["faults"][0]
    dumps, logs = _inputs(d)
    if mode == "fr":
        logs = []
    elif mode == "logs":
        dumps = []
    dumps, logs = list(dumps), list(logs)
    # the simulator's stderr_rank*.log files are what the loader reads as stderr (the crash is told there)
    err = [] if mode == "fr" else [parse_stderr(p) for p in sorted(d.glob("stderr_rank*.log"))]
    rep = analyze_hang(dumps, logs, stderr_logs=err)  # the world size as the inputs show it, not the truth
    top = rep.diagnoses[0]
    assert (top.kind, top.process_group, top.seq) == (
        KIND_ALIASES.get(fault["kind"], fault["kind"]), fault["process_group"], fault["seq"])
    if top.tie:  # two members disagree and nothing else tells them apart: both are suspects, below 0.5
        assert set(fault["ranks"]) < set(top.culprit_ranks) and top.confidence < 0.5
    else:
        assert top.culprit_ranks == sorted(fault["ranks"])


@pytest.mark.skipif(not (SIM / "ddp_clean").exists(), reason="no simulated clean job")
@pytest.mark.parametrize("name", ["ddp_clean", "tp_dp_clean", "uneven_last_batch", "straggler_ddp"])
def test_sim_jobs_that_did_not_hang_get_no_diagnosis(name: str) -> None:
    """Jobs that finished (clean or merely slow) yield no hang diagnosis: no false alarms."""
    d = SIM / name
    if not d.exists():
        pytest.skip(f"{name} not generated")
    files = [p for p in d.iterdir() if p.name.startswith("nccl_trace") or p.suffix == ".log"]
    assert files
    assert load_and_analyze(files).diagnoses == []
