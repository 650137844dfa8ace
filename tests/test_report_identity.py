"""The report is the same, byte for byte, whichever engine runs the per-rank work: one process, the local pool,
or Dask distributed (docs/scale.md) — compared within one run, so no stored report has to be kept in step.

CI runs QUICK_JOBS (every kind of input the per-rank work sees); ANALYZE_FULL_IDENTITY=1 runs every fixture job.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pandas as pd
import pytest

import analyzer
from analyzer.load.engine import LocalEngine
from tests.fixture_jobs import QUICK_JOBS, ROOT, fixture_jobs, report_json

pytestmark = pytest.mark.slow  # loads real or 64+ rank folders: outside the everyday loop

FULL = bool(os.environ.get("ANALYZE_FULL_IDENTITY"))
JOBS = fixture_jobs() if FULL else QUICK_JOBS


@pytest.fixture(autouse=True)
def _at_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # reports name files by the relative paths given


@pytest.fixture(scope="module")
def dask_engine():
    from analyzer.load.engine import DaskEngine
    eng = DaskEngine("local", 2)
    yield eng
    eng.close()


def test_quick_jobs_are_fixture_jobs():
    every = fixture_jobs()
    assert set(QUICK_JOBS) <= set(every) and len(every) >= 100


def test_every_engine_gives_the_same_report(dask_engine, monkeypatch):
    assert dask_engine.workers == 2
    monkeypatch.setenv("ANALYZE_POOL_BYTES", "0")  # the pool even for these small jobs (it would run them here)
    pool = LocalEngine(2)
    for i, job in enumerate(JOBS):
        one = analyzer.load(job, jobs=1)
        want = report_json(one.report)
        via_pool = analyzer.load(job, engine=pool)
        via_dask = analyzer.load(job, engine=dask_engine)
        assert report_json(via_pool.report) == want, job
        assert report_json(via_dask.report) == want, job
        if i < 3:  # what the renderers read back through the engine: the HTML timelines' lanes
            html = one.render("html")
            assert via_pool.render("html") == html, job
            assert via_dask.render("html") == html, job
        one.close()
    pool.close()


def test_dask_reports_progress_per_trace(dask_engine):
    seen = []
    a = analyzer.load("fixtures/corpus/param-dlrm_kineto", engine=dask_engine,
                      progress=lambda i, n, path: seen.append((i, n, os.path.basename(path))))
    assert [s[:2] for s in seen] == [(i, 8) for i in range(1, 9)]
    assert sorted(s[2] for s in seen) == sorted(os.path.basename(t.path) for t in a.job.traces.values())


def test_parent_holds_compact_ranks_with_shared_values(tmp_path):
    from benchmarks.gen_traces import write_rank
    for r in range(3):  # traces whose collectives name their group's ranks ("[0, ..., 2]")
        write_rank(tmp_path / f"rank{r}.pt.trace.json", r, 3, 0.6, 1, False)
    a = analyzer.load(tmp_path, jobs=2)
    ts = list(a.job.traces.values())
    assert len(ts) == 3 and all(not hasattr(t, "__dict__") for t in ts)  # only the declared compact fields
    # every table packed, its strings in the one pool of the job (analyzer/rank/packed.py)
    pool = ts[0].packed("collectives").strings
    assert all(t.packed(k).strings is pool for t in ts for k in ("steps", "collectives", "kernels", "idle"))
    assert sum(t.n_activities for t in ts) == sum(r["activities"] for r in a.report["ranks"]) > 0
    # one object for a group's rank list on every rank, not one copy per rank
    rank_lists = [t.collectives["pg_ranks"].cat.categories for t in ts]
    assert all(list(c) == ["[0, ..., 2]"] for c in rank_lists)
    assert rank_lists[1][0] is rank_lists[0][0] and rank_lists[2][0] is rank_lists[0][0]
    lanes = a.job.lanes({r: (int(t.steps["start"].min()), int(t.steps["end"].max())) for r, t in a.job.traces.items()})
    assert sorted(lanes) == a.job.ranks and all(len(v["compute"][0]) > 0 for v in lanes.values())
    a.close()
    b = analyzer.load("fixtures/real-cpu/ddp-straggler", jobs=2)  # every rank's distributedInfo.pg_config
    configs = [t.meta["pg_config"] for t in b.job.traces.values()]
    assert len(configs) == 4 and configs[0] and all(c is configs[0] for c in configs)


def test_cli_dask_local(tmp_path):
    out = tmp_path / "r.json"
    ref = tmp_path / "ref.json"
    job = "fixtures/real-cpu/ddp-straggler"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for extra, path in ((["--dask", "local"], out), ([], ref)):
        p = subprocess.run([sys.executable, "-m", "analyzer", job, "--jobs", "2", "--format", "json",
                            "--output", str(path), *extra], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=300)
        assert p.returncode in (0, 1), p.stderr[-2000:]
    assert out.read_text() == ref.read_text()


def test_cli_dask_unreachable_scheduler_is_a_usage_error():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-m", "analyzer", "fixtures/real-cpu/ddp-straggler", "--dask",
                        "tcp://127.0.0.1:1", "--quiet"], cwd=ROOT, env={**env, "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "2s"},
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    assert "cannot reach the Dask scheduler" in p.stderr


#: jobs whose member tables are cut into several partitions below: DDP with a straggler, two pipeline
#: schedules (send/recv pairs), FSDP, a DLRM's all-to-alls, a simulated 3-D parallel straggler
PARTED_JOBS = ["fixtures/real-cpu/ddp-straggler", "fixtures/real-cpu/pp-1f1b",
               "fixtures/real-cpu-perf/pp2-m8-interleaved-medium", "fixtures/real-cpu-perf/fsdp4-clean-medium",
               "fixtures/corpus/param-dlrm_kineto", "fixtures/sim/tp_pp_dp_1f1b_straggler"]


def _cross_rank(a):
    (cr,) = [v for k, v in a.job.cache.items() if isinstance(k, tuple) and k[0] == "cross_rank"]
    return cr


def test_member_partitions_kept_by_the_engine_give_the_same_report(dask_engine, monkeypatch):
    """Past one partition the member table is built by engine tasks and stays with the engine (member_parts.py):
    the report, its HTML figures and the API's member table are those of one table built here, and building
    the report never joins the partitions."""
    from analyzer.cross_rank import collectives as co
    want = {}
    for i, job in enumerate(PARTED_JOBS):
        one = analyzer.load(job, jobs=1)
        cr = _cross_rank(one)
        assert not cr.parts.remote and len(cr.parts.parts) == 1
        want[job] = (report_json(one.report), one.render("html") if i < 2 else None, cr.members, cr.instances)
        one.close()
    monkeypatch.setenv("ANALYZE_POOL_BYTES", "0")  # the pool even for these small jobs
    pool = LocalEngine(2)
    for i, job in enumerate(PARTED_JOBS):
        monkeypatch.setattr(co, "PARTITION_ROWS", max(4, len(want[job][2]) // 5))  # 5-6 parts of whole instances
        # one process and Dask on the first two, Dask on the rest (one process and the pool run the same code)
        for engine in ((None, dask_engine, pool) if i < 2 else (dask_engine,)):
            a = analyzer.load(job, jobs=1) if engine is None else analyzer.load(job, engine=engine)
            cr = _cross_rank(a)
            assert cr.parts.remote and 4 <= len(cr.parts.parts) <= 8, job
            js, html, members, instances = want[job]
            assert report_json(a.report) == js, (job, engine)
            if html is not None:  # the figures of a straggler job and a pipeline job
                assert a.render("html") == html, (job, engine)
            assert not hasattr(cr, "_members"), "the report joined the member partitions"
            pd.testing.assert_frame_equal(cr.instances, instances)
            pd.testing.assert_frame_equal(cr.members, members)
            a.close()
    pool.close()


def test_member_partitions_after_the_engine_closed_say_so(monkeypatch):
    from analyzer.cross_rank import collectives as co
    from analyzer.load.engine import EngineClosed
    monkeypatch.setattr(co, "PARTITION_ROWS", 8)
    with analyzer.load("fixtures/real-cpu/ddp-straggler", jobs=1) as a:
        cr = _cross_rank(a)
        assert cr.parts.remote and len(cr.members) == 32
        del cr._members
    with pytest.raises(EngineClosed, match="closed .*before closing it"):
        cr.members
