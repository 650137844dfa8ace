"""Integrity of the real-failure test beds (fixtures/real-cpu-failures, the held-out fixtures/real-cpu-failures-2,
the nvrx GPU sets): every case carries a complete ground truth whose ranks, dumps and groups agree with the files
beside it. No analysis, no torch."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "fixtures"
BED = ROOT / "real-cpu-failures"
BED2 = ROOT / "real-cpu-failures-2"  # made after the post-mortem was tuned on BED: every case held out
NVRX = ROOT / "corpus" / "nvrx-fr-moe16"
KINDS = {"mismatched_op", "mismatched_size", "mismatched_dtype", "extra_collective", "skipped_collective",
         "missing_rank", "lagging_rank", "crashed_rank", "order_inversion", "p2p_mismatch", "rendezvous_failure",
         "device_stalled"}  # the last only in the GPU corpus sets
OUTCOMES = {"hang_timeout", "crash", "finished_wrong_results", "rendezvous_failure", "finished_ok"}
BED_CASES = sorted(p.parent for p in BED.glob("*/expected.json"))
BED2_CASES = sorted(p.parent for p in BED2.glob("*/expected.json"))
NVRX_CASES = sorted(p.parent for p in NVRX.glob("*/expected.json"))
CPU_CASES = BED_CASES + BED2_CASES
ALL_CASES = CPU_CASES + NVRX_CASES
MACHINE_PATHS = [b"/work/", b"/tmp/", b"/home/", b"/root/", b"/opt/"]


def _load(case: Path) -> dict:
    return json.loads((case / "expected.json").read_text())


def _dump_rank(name: str) -> int:
    return int(re.search(r"(\d+)(\.json)?$", name).group(1))


def test_the_bed_is_big_and_varied_enough():
    assert len(BED_CASES) >= 28
    docs = [_load(c) for c in BED_CASES]
    kinds = {f["kind"] for d in docs for f in d["faults"]}
    assert kinds == KINDS - {"device_stalled"}
    assert {d["world_size"] for d in docs} >= set(range(2, 9)) - {7}
    assert {d["dump_format"] for d in docs} == {"pickle", "json", "none"}
    held = [d for d in docs if d["held_out"]]
    assert 0.25 <= len(held) / len(docs) <= 0.45
    assert len({f["kind"] for d in held for f in d["faults"]}) >= 8  # held-out cases spread across kinds


def test_the_second_bed_is_held_out_and_differs_in_shape():
    assert 12 <= len(BED2_CASES) <= 16
    docs = {c.name: _load(c) for c in BED2_CASES}
    assert all(d["held_out"] for d in docs.values())
    assert not {c.name for c in BED2_CASES} & {c.name for c in BED_CASES}
    kinds = {f["kind"] for d in docs.values() for f in d["faults"]}
    assert len(kinds) >= 9 and "rendezvous_failure" not in kinds
    assert {d["world_size"] for d in docs.values()} >= {2, 3, 5, 6, 7, 8}
    assert {d["dump_format"] for d in docs.values()} == {"pickle", "json", "none"}
    assert any(d["only_active"] for d in docs.values())
    assert any(d["fr_buffer_size"] < 2000 for d in docs.values())
    healthy = [d for d in docs.values() if d["job_outcome"] == "finished_ok"]
    assert len(healthy) == 1 and healthy[0]["faults"] == [] and healthy[0]["dumps"]
    assert any(len({r for f in d["faults"] for r in f["ranks"]}) >= 2 and len(d["faults"]) >= 2
               for d in docs.values())  # two ranks failing independently
    # dump availability varies: all, the culprit's missing, none at all
    culprit_missing = [n for n, d in docs.items() if {int(r) for r in d["no_dump"]} & {r for f in d["faults"]
                                                                                        for r in f["ranks"]}]
    assert len(culprit_missing) >= 3
    logs = {n: (BED2 / n / "torchrun.log") for n in docs}
    assert any(not p.exists() for p in logs.values())  # only torchrun's per-rank files
    assert any(p.exists() and "[default0]:" in p.read_text() for p in logs.values())  # --tee
    size = sum(p.stat().st_size for p in BED2.rglob("*") if p.is_file())
    assert size < 1.6e6, size


@pytest.mark.parametrize("bed, cases", [(BED, BED_CASES), (BED2, BED2_CASES)], ids=["bed1", "bed2"])
def test_every_case_folder_has_a_ground_truth_and_a_readme_row(bed, cases):
    folders = sorted(p for p in bed.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))
    assert folders == cases
    readme = (bed / "README.md").read_text()
    for case in cases:
        assert f"`{case.name}`" in readme, case.name


@pytest.mark.parametrize("case", ALL_CASES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_expected_json_schema(case):
    d = _load(case)
    assert isinstance(d["world_size"], int) and 2 <= d["world_size"] <= 16
    assert d["backend"] in ("gloo", "nccl")
    assert isinstance(d["description"], str) and d["description"]
    assert d["job_outcome"] in OUTCOMES
    assert isinstance(d["held_out"], bool)
    assert bool(d["faults"]) == (d["job_outcome"] != "finished_ok")  # a healthy run has no fault at all
    for f in d["faults"]:
        assert set(f) == {"kind", "ranks", "process_group", "pg_desc", "seq", "op", "p2p"}
        assert f["kind"] in KINDS
        assert all(isinstance(r, int) and 0 <= r < d["world_size"] for r in f["ranks"])
        assert f["process_group"] is None or isinstance(f["process_group"], str)
        assert f["seq"] is None or (isinstance(f["seq"], int) and f["seq"] >= 1)
        assert f["op"] is None or isinstance(f["op"], str)
        if f["kind"] == "p2p_mismatch":
            assert set(f["p2p"]) == {"src", "dst", "tag"} and f["seq"] is None
            assert f["p2p"]["src"] != f["p2p"]["dst"]
        else:
            assert f["p2p"] is None
        if f["kind"] == "rendezvous_failure":
            assert f["ranks"] == [] and d["job_outcome"] == "rendezvous_failure"


@pytest.mark.parametrize("case", ALL_CASES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_culprits_and_healthy_ranks_cover_the_world(case):
    d = _load(case)
    culprits = {r for f in d["faults"] for r in f["ranks"]}
    healthy = set(d["healthy_ranks"])
    assert not culprits & healthy
    if d["job_outcome"] == "rendezvous_failure":  # no worker ever ran a collective: nobody to blame or clear
        assert not culprits and not healthy
    elif d["job_outcome"] == "finished_ok":  # nobody to blame
        assert not culprits and healthy == set(range(d["world_size"]))
    else:
        assert culprits and culprits | healthy == set(range(d["world_size"]))


@pytest.mark.parametrize("case", ALL_CASES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_rank_has_a_dump_or_a_reason(case):
    d = _load(case)
    on_disk = sorted(p.name for p in case.iterdir() if re.fullmatch(r"(nccl_trace_rank_|_dump_)\d+(\.json)?", p.name))
    assert on_disk == sorted(d["dumps"])
    for name in d["dumps"]:
        data = (case / name).read_bytes()
        assert data, name
        if name.endswith(".json"):
            doc = json.loads(data)
            assert ("entries" not in doc) == (name in d["empty_buffer_dumps"]), name
            assert "pg_config" in doc and "version" in doc
        else:
            assert data[:2] == b"\x80\x02", name  # a protocol-2 pickle, as the C++ pickler writes it
            assert name not in d["empty_buffer_dumps"]
    dumped = {_dump_rank(n) for n in d["dumps"]}
    missing = {int(r) for r in d["no_dump"]}
    assert all(isinstance(v, str) and v for v in d["no_dump"].values())
    assert not dumped & missing
    assert dumped | missing == set(range(d["world_size"]))
    if d["dumps"] and d["backend"] == "gloo":
        assert (case / "fr_trace_output.md").read_text().startswith("$ python -m torch.distributed.flight_recorder")


@pytest.mark.parametrize("case", CPU_CASES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_groups_of_the_faults_are_known(case):
    d = _load(case)
    groups = d["process_groups"]
    for name, g in groups.items():
        assert {"desc", "ranks"} <= set(g) and all(0 <= r < d["world_size"] for r in g["ranks"])
    if d["job_outcome"] == "rendezvous_failure":
        return
    for f in d["faults"]:
        g = groups[f["process_group"]]
        assert g["desc"] == f["pg_desc"]
        assert set(f["ranks"]) <= set(g["ranks"]), (f, g)
        if f["p2p"]:
            assert {f["p2p"]["src"], f["p2p"]["dst"]} <= set(g["ranks"])


@pytest.mark.parametrize("case", CPU_CASES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_torchrun_output_is_kept(case):
    d = _load(case)
    per_rank = sorted(case.glob("torchrun_logs/*/attempt_0/*/stderr.log"))
    if per_rank:  # torchrun --log-dir: one folder per local rank
        assert sorted(int(p.parent.name) for p in per_rank) == list(range(d["world_size"]))
    if not (case / "torchrun.log").exists():  # a case that kept only the per-rank files
        assert per_rank and case.parent == BED2
        return
    log = (case / "torchrun.log").read_text()
    assert log
    if d["job_outcome"] in ("crash", "hang_timeout"):
        assert "ChildFailedError" in log and "Root Cause (first observed failure):" in log
    if d["job_outcome"] in ("finished_wrong_results", "finished_ok"):
        assert "ChildFailedError" not in log


def test_no_absolute_machine_paths_anywhere():
    offenders = []
    for folder in (BED, BED2, NVRX):
        for p in folder.rglob("*"):
            if p.is_file():
                data = p.read_bytes()
                offenders += [f"{p.relative_to(ROOT)}: {m.decode()}" for m in MACHINE_PATHS if m in data]
    assert not offenders, offenders
