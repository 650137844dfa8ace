"""parsers/table.py: the hang path's column table sorts, groups and joins as the analysis needs (and as pandas
did before it: the same reports byte for byte depend on the same row orders)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from parsers.table import Table, isin, unique


def _t() -> Table:
    return Table({"g": ["b", "a", "b", "a", "c"], "r": [2, 1, 0, 1, 3], "v": [10, 20, 30, 40, 50]})


def test_columns_are_numpy_arrays_with_inferred_dtypes():
    t = _t()
    assert t.columns == ["g", "r", "v"] and len(t) == 5 and not t.empty
    assert t["r"].dtype == np.int64 and t["g"].dtype == object and isinstance(t["g"][0], str)
    assert Table({"x": [1.5, 2.0]})["x"].dtype == np.float64 and Table({"f": [True, False]})["f"].dtype == bool
    e = Table.empty_of(["a", "b"], {"a": np.int64})
    assert e.empty and e.columns == ["a", "b"] and e["a"].dtype == np.int64 and e["b"].dtype == object
    assert Table({"n": [1, 2], "s": "x"})["s"].tolist() == ["x", "x"]  # a scalar fills its column
    lists = Table({"m": [[0, 1], [2, 3]]}, dtypes={"m": object})  # lists stay lists (no 2-d array)
    assert lists["m"].shape == (2,) and lists["m"][1] == [2, 3]


def test_rows_by_mask_indices_and_slices():
    t = _t()
    assert t[t["g"] == "a"]["v"].tolist() == [20, 40]
    assert t[np.array([4, 0])]["v"].tolist() == [50, 10]
    assert t[1:3]["v"].tolist() == [20, 30] and t[0:0].empty
    assert t[["v", "g"]].columns == ["v", "g"]
    assert t.row(-1) == {"g": "c", "r": 3, "v": 50} and type(t.row(0)["r"]) is int
    assert t.records()[1] == {"g": "a", "r": 1, "v": 20}
    assert [x.v for x in t.itertuples(index=False)] == [10, 20, 30, 40, 50]


@pytest.mark.parametrize("by, ascending", [("r", True), ("r", False), ("g", True), ("g", False),
                                           (["g", "r"], True), (["r", "g"], [False, True])])
def test_sort_orders_rows_as_pandas_sort_values_does(by, ascending):
    rng = np.random.default_rng(7)
    for n in (5, 40, 300):  # small (insertion sort) and large tables, many ties
        g = np.array([str(x) for x in rng.integers(0, 4, n)], dtype=object)
        r = rng.integers(0, 5, n)
        t, d = Table({"g": g, "r": r, "i": np.arange(n)}), pd.DataFrame({"g": g, "r": r, "i": np.arange(n)})
        for kind in ("quicksort", "stable"):
            want = d.sort_values(by, ascending=ascending, kind=kind)["i"].to_numpy()
            assert t.sort_values(by, ascending, kind=kind)["i"].tolist() == want.tolist(), (n, kind)


def test_groups_in_key_order_and_in_appearance_order():
    t = _t()
    assert [(k, x["v"].tolist()) for k, x in t.groups("g")] == [("a", [20, 40]), ("b", [10, 30]), ("c", [50])]
    assert [k for k, _ in t.groups(["g", "r"])] == [("a", 1), ("b", 0), ("b", 2), ("c", 3)]
    assert [k for k, _ in t.groups("g", sort=False)] == ["b", "a", "c"]
    assert t.drop_duplicates(["g"])["v"].tolist() == [10, 20, 50]  # the first row of each


def test_concat_keeps_types_and_widens_integers():
    a = Table({"x": np.array([1, 2], dtype=np.int32), "s": ["p", "q"]})
    b = Table({"x": np.array([3], dtype=np.int64), "s": ["r"]})
    c = Table.concat([a, b])
    assert c["x"].tolist() == [1, 2, 3] and c["x"].dtype == np.int64 and c["s"].tolist() == ["p", "q", "r"]
    assert Table.concat([a, Table.empty_of(["x", "s"])])["x"].dtype == np.int32  # an empty part does not widen
    assert Table.concat([], ["x"]).columns == ["x"]


def test_helpers_and_equality():
    assert isin(np.array([1, 2, 3]), {2, 3}).tolist() == [False, True, True]
    assert unique(np.array(["b", "a", "b"], dtype=object)) == ["b", "a"]
    t = _t()
    assert t.equals(t.copy()) and not t.equals(t.with_columns(v=[0, 0, 0, 0, 0]))
    assert t.rename({"v": "w"}).columns == ["g", "r", "w"] and t.drop("v").columns == ["g", "r"]
    df = t.to_pandas()
    assert list(df.columns) == ["g", "r", "v"] and df["v"].sum() == 150
