"""Issue #21.4: PyTorch lines that name ranks outright. `dist.monitored_barrier` names the rank that did not arrive
("Rank 2 failed to pass monitoredBarrier in 2000 ms", "Ranks 1, 3 failed to pass …" with wait_all_ranks=True); that
rank is the culprit, rank 0 (which printed it) waited. Real torchrun + gloo runs (fixtures/stderr/monitored_barrier_*,
made by fixtures/stderr/monitored_barrier/make.py) and hand-built logs, through the CLI on a folder."""
from __future__ import annotations

import functools
import json
import tempfile
from pathlib import Path

import pytest

from analyzer.cli import main

STDERR = Path(__file__).resolve().parents[1] / "fixtures" / "stderr"
REAL = sorted(p.parent for p in STDERR.glob("monitored_barrier_*/expected.json"))


@functools.lru_cache(maxsize=None)
def _report(folder: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        assert main([folder, "--format", "json", "-q", "-o", str(out), "--jobs", "1"]) == 1
        return json.loads(out.read_text())


def test_the_real_runs_are_there():
    assert {p.name for p in REAL} >= {"monitored_barrier_late4", "monitored_barrier_wait_all",
                                      "monitored_barrier_late_caught"}
    for p in REAL:
        assert (p / "torchrun.log").stat().st_size < 16_000


@pytest.mark.parametrize("case", REAL, ids=lambda p: p.name)
def test_the_named_late_rank_is_the_culprit(case):
    exp = json.loads((case / "expected.json").read_text())
    late = exp["faults"][0]["ranks"]
    rep = _report(str(case))
    first = rep["findings"][0]
    assert first["id"] == "HANG002" and first["subject"]["ranks"] == late
    assert first["confidence"] >= 0.85
    assert "failed to pass monitoredBarrier" in " ".join(e["text"] for e in first["evidence"])
    for f in rep["findings"]:  # no finding blames a healthy rank at >= 0.5
        if f["confidence"] >= 0.5:
            assert not set(f["subject"]["ranks"]) & set(exp["healthy_ranks"])


def test_the_older_three_rank_capture_too():
    rep = _report(str(STDERR / "real-cpu" / "monitored_barrier"))
    assert rep["findings"][0]["subject"]["ranks"] == [1] and rep["findings"][0]["confidence"] >= 0.85


def _one_file(tmp_path: Path, name: str, text: str) -> dict:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "rank0.log").write_text(text)
    return _report(str(folder))


def test_only_rank0s_log_names_the_late_rank(tmp_path):
    """Every rank timed out or only rank 0's log was kept: without the named line this was an unattributed timeout."""
    rep = _one_file(tmp_path, "r0", (
        "[E1202 00:51:54.701289470 ProcessGroupGloo.cpp:67] [Rank 0]: Rank 2 failed to pass monitoredBarrier in "
        "10000 ms\n"
        "Traceback (most recent call last):\n"
        '  File "/job/train.py", line 30, in checkpoint\n'
        "    dist.monitored_barrier(timeout=timedelta(seconds=10))\n"
        "RuntimeError: [Rank 0]: Rank 2 failed to pass monitoredBarrier in 10000 ms\n"
        " Original exception: \n"
        "[/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 10000ms for recv "
        "operation to complete\n"))
    first = rep["findings"][0]
    assert first["subject"]["ranks"] == [2] and first["confidence"] >= 0.85
    assert "rank 0" in first["evidence"][0]["text"] and "10000 ms" in first["evidence"][0]["text"]


def test_wait_all_ranks_names_every_late_rank(tmp_path):
    rep = _one_file(tmp_path, "all", (
        "[rank0]:[E1202 00:52:17.783020170 ProcessGroupGloo.cpp:67] [Rank 0]: Ranks 1, 3, 6 failed to pass "
        "monitoredBarrier in 2000 ms\n"
        "[rank2]:[E1202 00:52:17.773044717 ProcessGroupGloo.cpp:67] Rank 2 successfully reached monitoredBarrier, "
        "but received errors while waiting for send/recv from rank 0. Please check rank 0 logs for faulty rank.\n"))
    first = rep["findings"][0]
    assert first["subject"]["ranks"] == [1, 3, 6]
    assert "ranks 0, 2 wait in a monitored_barrier" in [e["text"] for e in first["evidence"]]


def test_the_detail_mismatch_report_names_the_odd_rank_with_its_element_count():
    """TORCH_DISTRIBUTED_DEBUG=DETAIL: rank 1 all-reduces 8 elements, the others 16 (real capture); the counts are
    sizes, not op names."""
    rep = _report(str(STDERR / "real-cpu" / "collective_mismatch_detail"))
    first = rep["findings"][0]
    texts = [e["text"] for e in first["evidence"]]
    assert first["id"] == "HANG001" and first["subject"]["ranks"] == [1]
    assert "elements per rank: 0: 16, 1: 8, 2: 16" in texts
    assert not any(t.startswith("op per rank") for t in texts)


def test_group_ranks_of_a_sub_group_are_translated_through_its_member_list():
    """On a sub-group the message counts the group's ranks: global 1 is the group's rank 0 and 'Rank 2' is global 3
    (the real case fixtures/real-cpu-failures-3/monitored_barrier_subgroup_sigkill). With the member list known the
    named rank is global; without it no global rank is named."""
    from analyzer.hang.named_ranks import group_ranks

    groups = [("0", [0, 1, 2, 3, 4]), ("1", [1, 2, 3, 4])]
    assert group_ranks(1, 0, groups) == ("1", [1, 2, 3, 4])
    assert group_ranks(0, 0, groups) is None             # the world's rank 0: global numbering
    assert group_ranks(1, 0, [("0", [0, 1, 2, 3, 4])]) == ("", [])  # a sub-group no input lists
    assert group_ranks(2, 0, [("1", [2, 3]), ("2", [2, 5])]) == ("", [])  # two candidates: undecided


def test_a_sub_group_barrier_without_members_names_no_global_rank():
    rep = _report(str(Path(__file__).resolve().parents[1] / "fixtures" / "real-cpu-failures-3"
                      / "monitored_barrier_subgroup_sigkill"))
    first = rep["findings"][0]
    assert first["subject"]["ranks"] == [3]  # the SIGKILLed rank, not the group rank 2 the barrier printed
    barrier = [f for f in rep["findings"] if "group rank(s) 2" in " ".join(e["text"] for e in f["evidence"])]
    assert barrier and all(not f["subject"]["ranks"] and f["confidence"] < 0.5 for f in barrier)
