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


class _Future:
    def __init__(self, status: str):
        self.status = status


class _FlakyClient:
    """A Dask client stand-in whose gather fails ``fails`` times (the kept side's worker gone), then answers."""

    status = "running"

    def __init__(self, fails: int):
        self.fails = fails

    def map(self, fn, futures, args, pure=False):
        return [(fn, a) for a in args]

    def gather(self, jobs):
        if self.fails:
            self.fails -= 1
            raise KeyError("lost dependency")
        return [fn(None, a) for fn, a in jobs]

    def submit(self, fn, *args, pure=False):
        return _Future("finished" if not self.fails else "lost")


def test_a_loss_that_takes_several_rebuilds_is_one_line_in_the_report():
    """The CI flake: the worker restarted after a loss was lost again, so one question rebuilt twice; the report
    says so once, counting each result once."""
    from analyzer.load.engine import DaskEngine, Kept
    eng = object.__new__(DaskEngine)
    eng.client, eng.notes = _FlakyClient(fails=2), []
    kept = [Kept(_Future("lost"), (None, "a", False)), Kept(_Future("lost"), (None, "b", False)),
            Kept(_Future("finished"), (None, "c", False))]
    assert eng.query(lambda side, a: a * 2, kept, [1, 2, 3]) == [2, 4, 6]
    assert eng.notes == [LOST + " (KeyError): 2 result(s) it kept (per-rank sets or member partitions) were "
                         "rebuilt from their inputs (in 2 attempts)"]
    eng.notes = []
    kept = [Kept(_Future("lost"), (None, "a", False))]
    eng.client = _FlakyClient(fails=5)  # more losses than MAX_REBUILDS: Dask's error is the answer, still noted
    with pytest.raises(KeyError):
        eng.query(lambda side, a: a, kept, [1])
    assert len(eng.notes) == 1 and eng.notes[0].endswith("(in 3 attempts)")
