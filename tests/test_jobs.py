"""One job per run: jobs told apart by sub-folder, world size and start time; --job picks one; look-alikes stay one."""
from __future__ import annotations

from pathlib import Path

import pytest

import analyzer
from analyzer.cli import main
from analyzer.load.job import load_job
from tests import kineto_builder as kb

EPOCH = 1_700_000_000 * 10**9  # 2023-11-14, ns


def _rank(path: Path, rank: int, world: int, base_ns: int = EPOCH) -> None:
    ev = [kb.step(1, 0, 1000), kb.kernel(10, 500, correlation=1), kb.runtime(5, 3, 1),
          kb.nccl(600, 300, correlation=2), kb.runtime(550, 3, 2)]
    kb.write(path, kb.trace(ev, rank=rank, world_size=world, baseTimeNanoseconds=base_ns))


def _job(folder: Path, world: int, ranks=None, base_ns: int = EPOCH) -> None:
    for r in ranks if ranks is not None else range(world):
        _rank(folder / f"rank{r}.json", r, world, base_ns)


def test_two_runs_in_sub_folders_are_two_jobs_and_the_bigger_is_analysed(tmp_path):
    _job(tmp_path / "run1", 2, base_ns=EPOCH)
    _job(tmp_path / "run2", 2, ranks=[0, 1], base_ns=EPOCH + 3600 * 10**9)
    _rank(tmp_path / "run2" / "rank2.json", 2, 2, EPOCH + 3600 * 10**9)  # not plausible, but the most ranks
    job = load_job([tmp_path], jobs=1)
    assert [j["label"] for j in job.jobs] == ["run1", "run2"]
    sel = [j for j in job.jobs if j["selected"]]
    assert [j["label"] for j in sel] == ["run2"] and sel[0]["ranks"] == [0, 1, 2]
    skipped = [f for f in job.files if f.status == "skipped"]
    assert len(skipped) == 2 and all("another job (run1" in f.message for f in skipped)
    assert all("/run2/" in t.path for t in job.traces.values())


@pytest.mark.slow
def test_job_option_picks_a_job_and_a_wrong_one_is_a_usage_error(tmp_path, capsys):
    _job(tmp_path / "a", 2, base_ns=EPOCH)
    _job(tmp_path / "b", 2, base_ns=EPOCH + 7200 * 10**9)
    a = analyzer.load(tmp_path, job="a")
    assert {Path(t.path).parent.name for t in a.job.traces.values()} == {"a"}
    f = [x for x in a.findings if x["id"] == "INPUT005"]
    assert len(f) == 1 and "only a was analysed" in f[0]["title"]
    assert analyzer.load(tmp_path, job="2").report["inputs"]["jobs"][1]["selected"] is True
    assert main([str(tmp_path), "-q", "--job", "zzz"]) == 2
    err = capsys.readouterr().err
    assert "--job 'zzz' matches none" in err and "1. a" in err and "2. b" in err


def test_per_host_sub_folders_of_one_job_stay_one_job(tmp_path):
    _job(tmp_path / "node0", 4, ranks=[0, 1])
    _job(tmp_path / "node1", 4, ranks=[2, 3])
    job = load_job([tmp_path], jobs=1)
    assert job.jobs == [] and job.ranks == [0, 1, 2, 3]


def test_an_identical_copy_is_a_duplicate_not_another_job(tmp_path):
    _job(tmp_path, 2)
    _rank(tmp_path / "backup" / "rank0.json", 0, 2)
    job = load_job([tmp_path], jobs=1)
    assert job.jobs == []
    assert any(f.status == "skipped" and f.message.startswith("duplicate rank 0") for f in job.files)


def test_different_world_sizes_in_one_folder_are_two_jobs(tmp_path):
    _job(tmp_path, 4)
    _rank(tmp_path / "other_rank0.json", 0, 8)
    _rank(tmp_path / "other_rank5.json", 5, 8)
    job = load_job([tmp_path], jobs=1)
    assert sorted(j["label"] for j in job.jobs) == ["world4", "world8"]
    assert job.world_size == 4 and job.ranks == [0, 1, 2, 3]  # the job with the most ranks
    assert all(j["told_by"] == ["world size"] for j in job.jobs)


def test_start_times_far_apart_are_two_jobs_close_ones_one(tmp_path):
    near, far = tmp_path / "near", tmp_path / "far"
    _job(near, 2, ranks=[0], base_ns=EPOCH)
    _job(near, 2, ranks=[1], base_ns=EPOCH + 2 * 10**9)  # 2 s of host clock skew: one job
    assert load_job([near], jobs=1).jobs == []
    _job(far, 2, ranks=[0], base_ns=EPOCH)
    _rank(far / "late_rank0.json", 0, 2, EPOCH + 86400 * 10**9)  # the next day
    _rank(far / "late_rank1.json", 1, 2, EPOCH + 86400 * 10**9)
    job = load_job([far], jobs=1)
    assert len(job.jobs) == 2 and all(j["told_by"] == ["start time"] for j in job.jobs)
    sel = next(j for j in job.jobs if j["selected"])
    assert sel["ranks"] == [0, 1] and sel["start"].startswith("2023-11-15")


def test_the_text_report_says_which_job(tmp_path, capsys):
    _job(tmp_path / "run1", 2, base_ns=EPOCH)
    _job(tmp_path / "run2", 2, base_ns=EPOCH + 3600 * 10**9)
    main([str(tmp_path), "-q", "--jobs", "1"])
    out = capsys.readouterr().out
    assert "job: run2 (2 jobs in the inputs; not analysed: run1; choose with --job)" in out
    assert "INPUT005" in out


@pytest.mark.slow
def test_copies_of_a_real_run_in_sibling_folders_are_two_jobs(tmp_path, capsys):
    """runs/run1 and runs/run2 hold byte-identical copies of one real run: the folders are the user's job
    boundary, so they are two jobs (not one with duplicate ranks) and --job run2 analyses the second."""
    import json
    import shutil
    src = Path(__file__).resolve().parents[1] / "fixtures/real-cpu/ddp-clean"
    for name in ("run1", "run2"):
        shutil.copytree(src, tmp_path / "runs" / name)
    out = tmp_path / "r.json"
    assert main([str(tmp_path / "runs"), "-q", "--job", "run2", "--format", "json", "-o", str(out)]) == 0
    rep = json.loads(out.read_text())
    jobs = rep["inputs"]["jobs"]
    assert [(j["label"], j["ranks"], j["selected"]) for j in jobs] == [("run1", [0, 1, 2, 3], False),
                                                                       ("run2", [0, 1, 2, 3], True)]
    assert all("/runs/run2/" in r["file"] for r in rep["ranks"]) and len(rep["ranks"]) == 4
    assert not any("duplicate rank" in (f["message"] or "") for f in rep["inputs"]["files"])
    assert rep["about"]["job"]["label"] == "run2"
    assert "INPUT005" in [f["id"] for f in rep["findings"]]
    assert main([str(tmp_path / "runs"), "-q"]) == 0
    text = capsys.readouterr().out
    assert "2 jobs in the inputs; not analysed: run2" in text
