"""A large job's packed per-rank rows lie in the pool's scratch file (analyzer/rank/packed.RowStore) and are read
back when used: the report is the same as with every row in memory."""
from __future__ import annotations

import os
import pickle

import numpy as np
import pandas as pd
import pytest

from analyzer.rank import packed as pk
from tests.fixture_jobs import ROOT, report_json


def _table(n: int, tag: str) -> pd.DataFrame:
    return pd.DataFrame({"start": np.arange(n, dtype=np.int64) * 10, "op": pd.Categorical([tag] * n),
                         "share": np.linspace(0, 1, n)})


def test_rows_past_the_budget_go_to_the_file_and_read_back_the_same(monkeypatch):
    monkeypatch.setattr(pk.RowStore, "KEEP_BYTES", 100)
    pool = pk.StringPool()
    a = pool.adopt(pk.pack(_table(3, "allreduce")))  # 60 bytes: kept in memory
    assert isinstance(a._rows, np.ndarray)
    b = pool.adopt(pk.pack(_table(4, "broadcast")))  # past 100 bytes: both go to the file
    assert isinstance(a._rows, pk.Spilled) and isinstance(b._rows, pk.Spilled)
    assert (len(a), len(b)) == (3, 4)
    pd.testing.assert_frame_equal(a.frame(), _table(3, "allreduce"), check_categorical=False)
    cols = pk.concat_columns([a, None, b], ["start", "op"])
    assert cols["start"].tolist() == [0, 10, 20, 0, 10, 20, 30]
    assert cols["op"].tolist() == ["allreduce"] * 3 + ["broadcast"] * 4
    back = pickle.loads(pickle.dumps([a, b]))  # a worker gets the rows themselves
    assert isinstance(back[1]._rows, np.ndarray) and back[1].frame().equals(b.frame())


@pytest.mark.slow
@pytest.mark.parametrize("folder", ["fixtures/sim/tp_pp_dp_1f1b_straggler", "fixtures/real-cpu/ddp-straggler"])
def test_report_with_rows_in_the_file_is_the_same(folder, monkeypatch):
    import analyzer
    monkeypatch.chdir(ROOT)
    want = report_json(analyzer.load(folder, jobs=1).report)
    monkeypatch.setattr(pk.RowStore, "KEEP_BYTES", 0)
    monkeypatch.setenv("ANALYZE_POOL_BYTES", "0")  # the pool even for this small job
    a = analyzer.load(folder, jobs=2)
    t = next(iter(a.job.traces.values()))
    assert isinstance(t.packed("collectives")._rows, pk.Spilled)
    assert report_json(a.report) == want
    a.close()
