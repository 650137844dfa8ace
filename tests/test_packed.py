"""Packed per-rank tables (analyzer/rank/packed.py): exact round trips, one string pool, job-wide joins."""
from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pytest

from analyzer.rank.packed import StringPool, concat, lengths, pack


def _table(ops, ranks_str, start=0):
    n = len(ops)
    return pd.DataFrame({
        "start": np.arange(start, start + n, dtype=np.int64) * 1000,
        "ok": np.ones(n, bool),
        "share": np.linspace(0, 1, n),
        "op": pd.Series(ops, dtype=object).astype("category"),
        "pg_ranks": pd.Series(ranks_str, dtype=object).astype("category"),
        "name": pd.array(ops, dtype="string"),
        "obj": pd.Series(list(ops), dtype=object),
    })


def test_round_trip_keeps_values_dtypes_and_sorted_categories():
    df = _table(["recv", "allreduce", "send", "allreduce"], ["[0, 1]"] * 4)
    back = pickle.loads(pickle.dumps(pack(df))).frame()
    pd.testing.assert_frame_equal(back, df)
    assert list(back["op"].cat.categories) == ["allreduce", "recv", "send"]  # as astype("category") sorts them
    assert back["share"].tolist() == df["share"].tolist()


def test_missing_strings_stay_missing():
    df = pd.DataFrame({"c": pd.Series(["x", None, "y"], dtype="category"), "o": pd.Series(["p", None, "p"], dtype=object)})
    back = pack(df).frame()
    assert back["c"].isna().tolist() == [False, True, False]
    assert back["o"].tolist() == ["p", None, "p"] and back["o"].dtype == object


def test_empty_and_none():
    assert pack(None) is None
    empty = pd.DataFrame({"a": pd.Series([], dtype="category"), "b": np.empty(0, np.int64)})
    back = pack(empty).frame()
    assert len(back) == 0 and list(back.columns) == ["a", "b"] and back["b"].dtype == np.int64


def test_pool_shares_equal_strings_of_different_ranks():
    pool = StringPool()
    long_list = "[" + ", ".join(str(i) for i in range(10_000)) + "]"
    a = pool.adopt(pickle.loads(pickle.dumps(pack(_table(["allreduce", "send"], [long_list] * 2)))))
    b = pool.adopt(pickle.loads(pickle.dumps(pack(_table(["send", "allgather"], [long_list] * 2)))))
    assert a.strings is pool and b.strings is pool
    assert sorted(pool.values) == sorted({"allreduce", "send", "allgather", long_list})  # once each
    fa, fb = a.frame(), b.frame()
    assert fa["pg_ranks"].cat.categories[0] is fb["pg_ranks"].cat.categories[0]
    assert fb["op"].tolist() == ["send", "allgather"] and fa["op"].tolist() == ["allreduce", "send"]


def test_concat_joins_ranks_in_order_with_extra_columns():
    pool = StringPool()
    parts = [pool.adopt(pack(_table(ops, ["g"] * len(ops), start=10 * i)))
             for i, ops in enumerate([["allreduce"], [], ["send", "recv", "allreduce"]])]
    n = lengths(parts)
    assert n.tolist() == [1, 0, 3]
    df = concat(parts + [None], rank=np.repeat([0, 1, 2], n))
    assert df["op"].astype(str).tolist() == ["allreduce", "send", "recv", "allreduce"]
    assert df["rank"].tolist() == [0, 2, 2, 2]
    assert df["start"].tolist() == [0, 20_000, 21_000, 22_000]
    ref = pd.concat([p.frame() for p in parts], ignore_index=True)
    assert df["name"].tolist() == ref["name"].tolist() and df["share"].tolist() == ref["share"].tolist()
    assert concat([None]) is None


def test_tables_of_other_schemas_are_rebuilt_one_by_one():
    a = pack(pd.DataFrame({"x": [1, 2]}))
    b = pack(pd.DataFrame({"x": [3.5]}))
    assert concat([a, b])["x"].tolist() == [1.0, 2.0, 3.5]


def test_with_column_copies():
    p = pack(pd.DataFrame({"rank": np.zeros(3, np.int64), "v": [1, 2, 3]}))
    q = p.with_column("rank", 7)
    assert q.frame()["rank"].tolist() == [7, 7, 7] and p.frame()["rank"].tolist() == [0, 0, 0]


def test_a_summary_holds_no_dataframe():
    from analyzer.load.job import load_job
    job = load_job(["fixtures/real-cpu/ddp-straggler"], jobs=1)
    t = next(iter(job.traces.values()))
    held = [getattr(t, k, None) for k in t.__slots__]
    assert not any(isinstance(v, pd.DataFrame) for v in held)
    assert isinstance(t.collectives, pd.DataFrame) and len(t.collectives) == len(t.packed("collectives")) > 0
    with pytest.raises(AttributeError):
        t.anything_else = 1  # slots: nothing else is kept by accident


def test_pickling_many_pooled_tables_keeps_one_pool():
    pool = StringPool()
    names = [f"kernel_{i}" for i in range(500)]
    tables = [pool.adopt(pack(pd.DataFrame({"name": pd.Series(names, dtype=object), "n": np.arange(500)})))
              for _ in range(20)]
    data = pickle.dumps(tables)
    back = pickle.loads(data)
    assert all(t.strings is back[0].strings for t in back)  # one pool, shared again
    assert back[7].frame()["name"].tolist() == names
    rows = sum(len(t.rows.tobytes()) for t in tables)
    assert len(data) - rows < 2 * len(pickle.dumps(pool))  # the pool's 500 strings once, not 20 times
    more = back[0].strings.ids(["kernel_3", "new"])
    assert more.tolist() == [3, 500]  # the restored pool still knows its codes
