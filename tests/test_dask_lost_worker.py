"""A Dask worker lost in the middle of a run (pre-emption, OOM): what it kept is rebuilt from the inputs, the
report is the one a run without the loss gives, and it says that it happened (docs/scale.md)."""
from __future__ import annotations

import os
import signal
import time

import orjson
import pytest

import analyzer
from tests.fixture_jobs import ROOT, report_json

pytest.importorskip("distributed")
JOB = "fixtures/real-cpu/ddp-straggler"
LOST = "a Dask worker was lost during the run"


def _kill_the_busiest_worker(eng, handles) -> None:
    """SIGKILL the worker that keeps most of ``handles``; return once the cluster has noticed."""
    from analyzer.load.engine import Kept
    futures = [h.future for h in handles if isinstance(h, Kept)]
    count: dict = {}
    for where in eng.client.who_has(futures).values():
        for w in where:
            count[w] = count.get(w, 0) + 1
    assert count, "nothing kept on the cluster: the test would prove nothing"
    victim = max(sorted(count), key=count.get)
    os.kill(eng.client.run(os.getpid)[victim], signal.SIGKILL)
    mine = [f for f, ws in zip(futures, eng.client.who_has(futures).values()) if victim in ws]
    t0 = time.monotonic()
    while all(f.status == "finished" for f in mine) and time.monotonic() - t0 < 20:
        time.sleep(0.02)


@pytest.mark.slow
def test_a_worker_killed_mid_run_gives_the_same_report(monkeypatch):
    from analyzer.cross_rank import collectives as co
    from analyzer.load.engine import DaskEngine
    monkeypatch.chdir(ROOT)
    with analyzer.load(JOB, jobs=1) as one:
        want = orjson.loads(report_json(one.report))
    monkeypatch.setattr(co, "PARTITION_ROWS", 8)  # member partitions kept on the workers, as in a large job
    eng = DaskEngine("local", 2)
    try:
        real, asked = eng.query, []

        def query(fn, handles, args):  # the first question the report asks finds a worker gone
            if not asked:
                _kill_the_busiest_worker(eng, handles)
            asked.append(fn)
            return real(fn, handles, args)
        monkeypatch.setattr(eng, "query", query)
        a = analyzer.load(JOB, engine=eng)
        got = orjson.loads(report_json(a.report))
        assert len(asked) > 1  # the questions after the loss were answered too
        said = [w for w in got["warnings"] if w.startswith(LOST)]
        assert len(said) == 1 and "rebuilt from their inputs" in said[0]
        got["warnings"] = [w for w in got["warnings"] if not w.startswith(LOST)]
        assert got == want  # the report, byte for byte, but for the warning that says what happened
        t1 = time.monotonic()
        assert len(a.render("html")) > 10000
        print("html took", time.monotonic() - t1)  # later questions (the timelines' lanes) are answered too
        a.close()
    finally:
        eng.close()
