"""The per-rank work moved into the workers (docs/scale.md) without changing a single byte of any report, and
the report is the same whichever engine runs the work: one process, the local pool, or Dask distributed.

``tests/golden/fixture_report_digests.json`` holds the digest of every fixture job's JSON report as the code
before that move wrote it (regenerate with ``python -m tests.fixture_jobs`` on the commit whose reports are the
reference, when a change means to alter reports). CI checks QUICK_JOBS; ANALYZE_FULL_IDENTITY=1 checks all.
"""
from __future__ import annotations

import json
import os

import pytest

import analyzer
from analyzer.load.engine import LocalEngine
from tests.fixture_jobs import DIGESTS, QUICK_JOBS, ROOT, digest, fixture_jobs, report_json

FULL = bool(os.environ.get("ANALYZE_FULL_IDENTITY"))
JOBS = fixture_jobs() if FULL else QUICK_JOBS


@pytest.fixture(autouse=True)
def _at_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # reports name files by the relative paths given


def test_quick_jobs_are_fixture_jobs():
    every = fixture_jobs()
    assert set(QUICK_JOBS) <= set(every) and len(every) >= 100
    assert set(json.loads(DIGESTS.read_text())) == set(every)


@pytest.mark.parametrize("job", JOBS)
def test_report_unchanged(job):
    want = json.loads(DIGESTS.read_text())[job]
    assert digest(analyzer.load(job, jobs=1).report) == want


def test_pool_gives_the_same_report():
    for job in JOBS[:6]:
        one = report_json(analyzer.load(job, jobs=1).report)
        assert report_json(analyzer.load(job, engine=LocalEngine(2)).report) == one, job


@pytest.fixture(scope="module")
def dask_engine():
    pytest.importorskip("distributed", reason="the optional Dask extra is not installed (pip install '.[dask]')")
    from analyzer.load.engine import DaskEngine
    eng = DaskEngine("local", 2)
    yield eng
    eng.close()


def test_dask_local_gives_the_same_report(dask_engine):
    assert dask_engine.workers == 2
    for i, job in enumerate(JOBS):
        ref = analyzer.load(job, jobs=1)
        a = analyzer.load(job, engine=dask_engine)
        assert report_json(a.report) == report_json(ref.report), job
        if i < 3:  # what the renderers read back through the engine: the HTML timelines' lanes
            assert a.render("html") == ref.render("html"), job
