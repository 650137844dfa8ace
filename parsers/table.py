"""A small column table: named numpy columns of one length, for the small tables of the hang path.

The hang path (stderr, NCCL logs, Flight Recorder dumps → the hang analysis) works on tables of tens to thousands
of rows, where importing pandas (half a second) costs more than all the work; a CI step that runs ``analyze`` on
many small jobs pays that start-up every time (docs/performance.md, "Start-up"). So those tables are a
:class:`Table`: a dict of equal-length numpy arrays with the handful of operations the analysis uses —
select columns (``t["rank"]`` is the numpy array), filter rows by a mask or index array (``t[mask]``), sort
(stable), group, concatenate, iterate as records. Nothing else: arithmetic and comparisons are numpy's, on the
columns. ``to_pandas()`` gives a DataFrame for a user who wants one (pandas is imported there, not here).

Strings are object arrays (no categories); integers int64 unless a parser chose narrower; missing values are
the column's sentinel (-1, ""), never NaN.
"""
from __future__ import annotations

from collections import namedtuple
from typing import Any, Iterable, Iterator, Optional, Sequence

import numpy as np


def column(values: Any, dtype: Any = None) -> np.ndarray:
    """``values`` as a 1-d numpy array; strings and mixed values stay Python objects (an object array)."""
    if isinstance(values, np.ndarray) and values.ndim == 1 and (dtype is None or values.dtype == dtype):
        return values
    if isinstance(values, np.ndarray) and values.ndim == 1:
        return values.astype(dtype)
    seq = list(values)
    if dtype is not None:
        if np.dtype(dtype) == object:
            return objects(seq)
        return np.array(seq, dtype=dtype)
    if seq and all(isinstance(v, (bool, np.bool_)) for v in seq):
        return np.array(seq, dtype=bool)
    if seq and all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in seq):
        try:
            return np.array(seq, dtype=np.int64)
        except OverflowError:
            pass
    if seq and all(isinstance(v, (float, np.floating)) for v in seq):
        return np.array(seq, dtype=np.float64)
    return objects(seq)


def objects(seq: list) -> np.ndarray:
    """An object array holding exactly these values (lists stay lists: no 2-d array is made of them)."""
    a = np.empty(len(seq), dtype=object)
    for i, v in enumerate(seq):
        a[i] = v
    return a


class Table:
    """Named columns (numpy arrays) of one length, in a fixed order; cheap to filter, sort and group."""

    __slots__ = ("_cols",)

    def __init__(self, data: Optional[dict[str, Any]] = None, columns: Optional[Sequence[str]] = None,
                 dtypes: Optional[dict[str, Any]] = None):
        """``data``: {name: values or a scalar}; a scalar fills the column. ``columns``: the order (and the
        columns that must exist: missing ones come out as empty object columns of the table's length)."""
        data = dict(data or {})
        dtypes = dtypes or {}
        n = next((len(v) for v in data.values() if _is_seq(v)), 0)
        names = list(columns) if columns is not None else list(data)
        cols: dict[str, np.ndarray] = {}
        for c in names:
            v = data[c] if c in data else _fill(None, n)
            cols[c] = column(v, dtypes.get(c)) if _is_seq(v) else _fill(v, n, dtypes.get(c))
        self._cols = cols

    @classmethod
    def from_records(cls, rows: Iterable[Any], columns: Sequence[str],
                     dtypes: Optional[dict[str, Any]] = None) -> "Table":
        """Rows (dicts, or tuples in the order of ``columns``) → a table with exactly ``columns``."""
        rows = list(rows)
        dtypes = dtypes or {}
        if rows and not isinstance(rows[0], dict):
            data = {c: [r[i] for r in rows] for i, c in enumerate(columns)}
        else:
            data = {c: [r.get(c) for r in rows] for c in columns}
        return cls({c: column(v, dtypes.get(c)) if v or c not in dtypes else _fill(None, 0, dtypes[c])
                    for c, v in data.items()}, columns)

    @classmethod
    def empty_of(cls, columns: Sequence[str], dtypes: Optional[dict[str, Any]] = None) -> "Table":
        """A table with these columns and no rows (object columns unless ``dtypes`` says otherwise)."""
        dtypes = dtypes or {}
        return cls({c: np.empty(0, dtype=dtypes.get(c, object)) for c in columns}, columns)

    @staticmethod
    def concat(tables: Sequence["Table"], columns: Optional[Sequence[str]] = None) -> "Table":
        """Rows of every table in turn; the columns are those of the first (or ``columns``)."""
        tables = list(tables)
        if not tables:
            return Table.empty_of(columns or [])
        names = list(columns) if columns is not None else tables[0].columns
        out = {}
        for c in names:
            parts = [t._cols[c] if c in t._cols else _fill(None, len(t)) for t in tables]
            kinds = {p.dtype for p in parts if len(p)} or {parts[0].dtype}
            if len(kinds) == 1:
                out[c] = np.concatenate(parts).astype(kinds.pop())
            elif all(k.kind in "iuf" for k in kinds):  # int32 and int64 → int64, ints and floats → float
                out[c] = np.concatenate(parts).astype(np.result_type(*kinds))
            else:
                out[c] = np.concatenate([p.astype(object) for p in parts])
        return Table(out, names)

    # --- shape
    @property
    def columns(self) -> list[str]:
        return list(self._cols)

    def __len__(self) -> int:
        return len(next(iter(self._cols.values()))) if self._cols else 0

    @property
    def empty(self) -> bool:
        """True when the table has no rows (or no columns)."""
        return len(self) == 0 or not self._cols

    def __contains__(self, name: object) -> bool:
        return name in self._cols

    def __repr__(self) -> str:
        return f"Table({len(self)} rows: {', '.join(self._cols)})"

    # --- access
    def __getitem__(self, key: Any) -> Any:
        """``t["c"]`` → the column array; ``t[["a", "b"]]`` → those columns; ``t[mask]`` / ``t[indices]`` /
        ``t[a:b]`` → those rows."""
        if isinstance(key, str):
            return self._cols[key]
        if isinstance(key, list) and all(isinstance(k, str) for k in key) and (key or not self._cols):
            return Table({k: self._cols[k] for k in key}, key)
        return self.take(key)

    def __setitem__(self, name: str, values: Any) -> None:
        """Set or add a column (a scalar fills it); its length must be the table's."""
        col = column(values) if _is_seq(values) else _fill(values, len(self))
        others = [c for c in self._cols if c != name]
        if others and len(col) != len(self._cols[others[0]]):
            raise ValueError(f"column {name!r} has {len(col)} values, the table {len(self)} rows")
        self._cols[name] = col

    def take(self, rows: Any) -> "Table":
        """The rows a boolean mask, an index array or a slice picks, in that order."""
        if isinstance(rows, slice):
            return Table({c: v[rows] for c, v in self._cols.items()}, self.columns)
        idx = np.asarray(rows)
        if idx.dtype != bool:
            idx = idx.astype(np.int64)
        return Table({c: v[idx] for c, v in self._cols.items()}, self.columns)

    def row(self, i: int) -> dict[str, Any]:
        """Row ``i`` as {column: value}, values as Python objects (numpy scalars → int / float / bool / str)."""
        return {c: _native(v[i]) for c, v in self._cols.items()}

    def records(self) -> list[dict[str, Any]]:
        """Every row as a dict, values as Python objects (numpy scalars → int / float / bool / str)."""
        lists = {c: v.tolist() for c, v in self._cols.items()}
        return [dict(zip(lists, vals)) for vals in zip(*lists.values())] if lists else []

    def to_dict(self, orient: str = "records") -> list[dict[str, Any]]:
        """The rows as dicts (only ``orient="records"``): what DataFrame.to_dict("records") gives."""
        if orient != "records":
            raise ValueError("Table.to_dict supports orient='records' only")
        return self.records()

    def itertuples(self, index: bool = False, name: str = "Row") -> Iterator[tuple]:
        """Rows as named tuples (attribute per column); values as numpy gives them."""
        if index:
            raise ValueError("Table has no index")
        ok = all(c.isidentifier() and not c.startswith("_") for c in self._cols)
        Row = namedtuple(name, list(self._cols) if ok else [f"_{i}" for i in range(len(self._cols))])
        cols = [v.tolist() for v in self._cols.values()]
        for vals in zip(*cols):
            yield Row(*vals)

    def equals(self, other: object) -> bool:
        """Same columns in the same order, same dtypes, same values (NaN equal to NaN)."""
        if not isinstance(other, Table) or self.columns != other.columns or len(self) != len(other):
            return False
        for c, v in self._cols.items():
            w = other._cols[c]
            if v.dtype != w.dtype:
                return False
            if v.dtype.kind == "f":
                if not np.array_equal(v, w, equal_nan=True):
                    return False
            elif v.tolist() != w.tolist():
                return False
        return True

    # --- reshaping
    def copy(self) -> "Table":
        return Table({c: v.copy() for c, v in self._cols.items()}, self.columns)

    def with_columns(self, **values: Any) -> "Table":
        """A copy with these columns set or added."""
        out = Table(dict(self._cols), self.columns)
        for k, v in values.items():
            out[k] = v
        return out

    def drop(self, columns: Sequence[str] | str) -> "Table":
        gone = {columns} if isinstance(columns, str) else set(columns)
        return Table({c: v for c, v in self._cols.items() if c not in gone}, [c for c in self._cols if c not in gone])

    def rename(self, names: dict[str, str]) -> "Table":
        return Table({names.get(c, c): v for c, v in self._cols.items()}, [names.get(c, c) for c in self._cols])

    def order(self, by: Sequence[str] | str, ascending: bool | Sequence[bool] = True,
              kind: str = "quicksort") -> np.ndarray:
        """The row order that sorts by these columns. Several columns: stable (ties keep their order); one column:
        numpy's ``kind`` (default quicksort, as pandas' sort_values, so that the same table sorts the same)."""
        by = [by] if isinstance(by, str) else list(by)
        asc = [ascending] * len(by) if isinstance(ascending, bool) else list(ascending)
        if len(by) == 1:
            return _nargsort(self._cols[by[0]], asc[0], kind)
        idx = np.arange(len(self))
        for c, up in reversed(list(zip(by, asc))):  # last key first: stable sorts compose
            idx = idx[_nargsort(self._cols[c][idx], up, "stable")]
        return idx

    def sort_values(self, by: Sequence[str] | str, ascending: bool | Sequence[bool] = True,
                    kind: str = "quicksort") -> "Table":
        """The rows sorted by these columns (see :meth:`order`)."""
        return self.take(self.order(by, ascending, kind))

    def drop_duplicates(self, subset: Sequence[str] | str) -> "Table":
        """The first row of each distinct combination of ``subset``'s values, in table order."""
        subset = [subset] if isinstance(subset, str) else list(subset)
        seen: set = set()
        keep = []
        for i, k in enumerate(zip(*(self._cols[c].tolist() for c in subset))):
            if k not in seen:
                seen.add(k)
                keep.append(i)
        return self.take(np.array(keep, dtype=np.int64))

    def groups(self, by: Sequence[str] | str, sort: bool = True) -> list[tuple[Any, "Table"]]:
        """[(key, the key's rows in table order)] per distinct key (a tuple when ``by`` is a list), sorted by
        key unless ``sort`` is False (then in order of first appearance)."""
        one = isinstance(by, str)
        cols = [self._cols[by]] if one else [self._cols[c] for c in by]
        keys = list(zip(*(c.tolist() for c in cols))) if cols else []
        where: dict[Any, list[int]] = {}
        for i, k in enumerate(keys):
            where.setdefault(k, []).append(i)
        order = sorted(where, key=_sort_key) if sort else list(where)
        return [(k[0] if one else k, self.take(np.array(where[k], dtype=np.int64))) for k in order]

    def to_pandas(self):
        """The table as a pandas DataFrame (imports pandas)."""
        import pandas as pd
        return pd.DataFrame({c: v for c, v in self._cols.items()}, columns=self.columns)


def group_first_index(keys: Sequence[np.ndarray]) -> np.ndarray:
    """Per row: its position within its group of equal keys (0 for the first row of each group)."""
    seen: dict = {}
    out = np.empty(len(keys[0]) if keys else 0, dtype=np.int64)
    for i, k in enumerate(zip(*(np.asarray(c).tolist() for c in keys))):
        out[i] = seen.get(k, 0)
        seen[k] = out[i] + 1
    return out


def isin(values: Any, allowed: Iterable[Any]) -> np.ndarray:
    """Per value: whether it is one of ``allowed`` (pandas' Series.isin)."""
    ok = set(allowed)
    return np.array([v in ok for v in np.asarray(values).tolist()], dtype=bool)


def _native(v: Any) -> Any:
    return v.item() if isinstance(v, np.generic) else v


def unique(values: Any) -> list:
    """Distinct values in order of first appearance (pandas.unique)."""
    return list(dict.fromkeys(np.asarray(values).tolist()))


def _sort_key(k: tuple) -> tuple:
    return k


def _nargsort(v: np.ndarray, ascending: bool, kind: str) -> np.ndarray:
    """argsort as pandas' nargsort does it (descending: reverse, sort, reverse back — ties keep their order under
    a stable kind). Object columns compare as Python objects."""
    if kind == "stable" and v.dtype == object:
        items = v.tolist()
        if not ascending:
            items = items[::-1]
        o = np.array(sorted(range(len(items)), key=items.__getitem__), dtype=np.int64)
    else:
        o = (v[::-1] if not ascending else v).argsort(kind=kind)
    if not ascending:
        o = (len(v) - 1 - o)[::-1]
    return o


def _is_seq(v: Any) -> bool:
    return isinstance(v, (list, tuple, np.ndarray, range))


def _fill(value: Any, n: int, dtype: Any = None) -> np.ndarray:
    if dtype is not None and np.dtype(dtype) != object:
        return np.full(n, value if value is not None else 0, dtype=dtype)
    if isinstance(value, (bool, np.bool_)):
        return np.full(n, value, dtype=bool)
    if isinstance(value, (int, np.integer)):
        return np.full(n, value, dtype=np.int64)
    if isinstance(value, (float, np.floating)):
        return np.full(n, value, dtype=np.float64)
    return objects([value] * n)
