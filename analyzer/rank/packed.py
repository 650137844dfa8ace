"""Small per-rank tables packed as one record array each, with their strings coded against a job-wide pool.

The parent keeps seven small tables for every rank (docs/scale.md). As pandas DataFrames they cost about 5 KB
each before their first row, ~50 KB a rank in all; packed they cost their bytes plus ~200 B. A packed table
pickles as its raw bytes and a schema (so a worker's result unpickles into one array whose record type is
shared by every rank), and its string columns hold int32 codes: into the table's own strings until
:meth:`StringPool.adopt` re-points them into the job's pool, where equal strings of different ranks (a
10,000-rank "Process Group Ranks" list, kernel names) are one object.
"""
from __future__ import annotations

import os
from typing import Any, Iterable, Optional, Sequence, Union

import numpy as np
import pandas as pd

#: how a string column is rebuilt: categorical (categories of objects, or of pandas' "str" type), pandas
#: "string" (python storage; missing as pd.NA, or as NaN for pandas' default "str" type), or plain object
CATEGORY, CATEGORY_STR, STRING, STRING_NAN, OBJECT = "c", "C", "s", "n", "o"

#: a schema: ((column, kind, numpy type string), ...); kind "" for a numeric column
Schema = tuple
_SCHEMAS: dict[Schema, Schema] = {}
_DTYPES: dict[Schema, np.dtype] = {}


def _intern(schema: Schema) -> Schema:
    return _SCHEMAS.setdefault(schema, schema)


def _dtype(schema: Schema) -> np.dtype:
    dt = _DTYPES.get(schema)
    if dt is None:
        dt = _DTYPES[schema] = np.dtype([(name, typ) for name, _, typ in schema])
    return dt


class StringPool:
    """The job's distinct strings, append-only: a code stays valid as the pool grows."""

    def __init__(self) -> None:
        self.values: list[str] = []
        self._ids: dict[str, int] = {}
        self._array: Optional[np.ndarray] = None
        self._rows = RowStore()

    def ids(self, values: Sequence[str]) -> np.ndarray:
        """The pool code of each value (added when new)."""
        out = np.empty(len(values), np.int32)
        for i, v in enumerate(values):
            k = self._ids.get(v)
            if k is None:
                k = self._ids[v] = len(self.values)
                self.values.append(v)
            out[i] = k
        return out

    def __getstate__(self) -> dict:
        return {"values": self.values}

    def __setstate__(self, state: dict) -> None:
        self.values = list(state["values"])
        self._ids = {v: i for i, v in enumerate(self.values)}
        self._array = None
        self._rows = RowStore()

    def array(self) -> np.ndarray:
        """The pool as an object array (rebuilt only after it grew)."""
        if self._array is None or len(self._array) != len(self.values):
            self._array = np.asarray(self.values + [None], dtype=object)[:-1]  # 1-D even for tuple-like values
        return self._array

    def adopt(self, table: Optional["Packed"]) -> Optional["Packed"]:
        """``table`` with its string codes re-pointed into this pool (in place) and its schema shared."""
        if table is None or table.strings is self:
            return table
        fields = [name for name, kind, _ in table.schema if kind]
        schema = _intern(table.schema)
        rows = np.array(table.rows, dtype=_dtype(schema))  # a writable copy with the shared record type
        if fields and len(rows):
            ids = self.ids(list(table.strings))
            for f in fields:
                codes = rows[f]
                rows[f] = np.where(codes >= 0, ids[np.maximum(codes, 0)] if len(ids) else -1, -1)
        table.schema, table.strings = schema, self
        table.rows = self._rows.keep(rows)
        return table


class Spilled:
    """Where one table's record array lies in a :class:`RowStore`'s file: read back on each use."""

    __slots__ = ("store", "offset", "dtype", "n")

    def __init__(self, store: "RowStore", offset: int, dtype: np.dtype, n: int):
        self.store, self.offset, self.dtype, self.n = store, offset, dtype, n

    def read(self) -> np.ndarray:
        return self.store.read(self)


class RowStore:
    """The job's packed rows past :data:`KEEP_BYTES`, in one unnamed scratch file (docs/scale.md).

    Up to ``KEEP_BYTES`` of adopted rows stay in memory (a small job reads its tables as before); past it every
    further table, and those kept so far, go to the file and are read back (a copy, let go after use) each time
    a table is read. The parent's heap then holds no rank's rows between the stages that read them: a 2 MB
    rank's ~30 KB of collective rows, times the ranks. The kernel keeps the file in its page cache (written to
    disk under pressure); the file is removed when the process lets the pool go or ends."""

    KEEP_BYTES = 4 << 20

    def __init__(self) -> None:
        self._fh: Any = None
        self._size = 0
        self._kept = 0
        self._held: list[Any] = []  # weak references to the tables kept in memory so far
        self._failed = False  # no file could be made: every table stays in memory

    def keep(self, rows: np.ndarray) -> Any:
        """What a table stores as its rows: the array itself, or its place in the file."""
        if self._fh is None:
            self._kept += rows.nbytes
            if self._kept <= self.KEEP_BYTES or self._failed or not self._open():
                return rows
        return self._write(rows)

    def track(self, table: "Packed") -> None:
        """Remember a table kept in memory (weakly), to move its rows to the file once it is opened."""
        if self._fh is None and not self._failed and not isinstance(table._rows, Spilled):
            import weakref
            self._held.append(weakref.ref(table))

    def _open(self) -> bool:
        import tempfile
        if self._failed or not hasattr(os, "pwrite") or not hasattr(os, "pread"):  # rows stay in memory
            self._failed = True
            return False
        try:
            self._fh = tempfile.TemporaryFile(prefix="analyze-rows-")
        except OSError:  # no scratch folder to write to: rows stay in memory, as in a small job
            self._failed = True
            return False
        held, self._held = self._held, []
        for ref in held:  # the tables kept in memory so far go to the file too
            t = ref()
            if t is not None and t.strings is self._pool_of(t) and not isinstance(t._rows, Spilled):
                t._rows = self._write(t._rows)
        return True

    def _pool_of(self, table: "Packed") -> Any:
        return table.strings if isinstance(table.strings, StringPool) and table.strings._rows is self else None

    def _write(self, rows: np.ndarray) -> Any:
        data = np.ascontiguousarray(rows)
        view = memoryview(data).cast("B")
        try:
            done = 0
            while done < len(view):  # a short write goes on where it stopped
                n = os.pwrite(self._fh.fileno(), view[done:], self._size + done)
                if n <= 0:
                    raise OSError("no progress writing the scratch file")
                done += n
        except (OSError, ValueError):  # no room on the scratch disk: this table stays in memory
            return rows
        place = Spilled(self, self._size, data.dtype, len(data))
        self._size += data.nbytes
        return place

    def read(self, place: Spilled) -> np.ndarray:
        size = place.n * place.dtype.itemsize
        data = os.pread(self._fh.fileno(), size, place.offset) if size else b""
        if len(data) != size:
            raise OSError(f"the scratch file of packed rows was cut short ({len(data)} of {size} bytes)")
        return np.frombuffer(data, dtype=place.dtype)

    def __getstate__(self) -> dict:
        return {}

    def __setstate__(self, state: dict) -> None:
        self.__init__()


Strings = Union[tuple, StringPool]


def _strings_array(strings: Strings) -> np.ndarray:
    if isinstance(strings, StringPool):
        return strings.array()
    return np.asarray(list(strings) + [None], dtype=object)[:-1]


def _rebuild(schema: Schema, data: bytes, strings: Strings) -> "Packed":
    schema = _intern(schema)
    return Packed(schema, np.frombuffer(data, dtype=_dtype(schema)), strings)


class Packed:
    """One small table: a record array (string columns as int32 codes, −1 for missing) and its strings. The
    rows of a table in a large job's pool lie in the pool's scratch file (:class:`RowStore`): ``rows`` reads
    them back."""

    __slots__ = ("schema", "_rows", "strings", "_n", "__weakref__")

    def __init__(self, schema: Schema, rows: np.ndarray, strings: Strings):
        self.schema, self.rows, self.strings = schema, rows, strings

    @property
    def rows(self) -> np.ndarray:
        r = self._rows
        return r.read() if isinstance(r, Spilled) else r

    @rows.setter
    def rows(self, value: Any) -> None:
        self._rows = value
        self._n = value.n if isinstance(value, Spilled) else len(value)
        if isinstance(self.strings if hasattr(self, "strings") else None, StringPool):
            self.strings._rows.track(self)

    def __len__(self) -> int:
        return self._n

    def __reduce__(self):
        # a pool travels as itself: one copy in a pickle of many ranks' tables (pickle's memo)
        strings = self.strings if isinstance(self.strings, StringPool) else tuple(self.strings)
        return _rebuild, (self.schema, self.rows.tobytes(), strings)

    @property
    def columns(self) -> list[str]:
        return [name for name, _, _ in self.schema]

    def frame(self) -> pd.DataFrame:
        """The table as the DataFrame it was packed from (dtypes and string kinds as they were)."""
        return _frame(self.schema, self.rows, self.strings)

    def column(self, name: str) -> np.ndarray:
        """One column as a numpy array without building a DataFrame: numbers as stored, strings as objects
        (None where missing). Raises KeyError for a column the table does not have."""
        kind = next((k for n, k, _ in self.schema if n == name), None)
        if kind is None and name not in self.columns:
            raise KeyError(name)
        col = self.rows[name]
        if not kind:
            return np.asarray(col)
        codes = np.asarray(col, dtype=np.int64)
        out = np.empty(len(codes), dtype=object)
        ok = codes >= 0
        out[ok] = _strings_array(self.strings)[codes[ok]]
        return out

    def with_column(self, name: str, value: Any) -> "Packed":
        """A copy with the numeric column ``name`` set to ``value`` everywhere."""
        rows = np.array(self.rows)
        rows[name] = value
        return Packed(self.schema, rows, self.strings)


def _string_kind(s: pd.Series) -> Optional[str]:
    dt = s.dtype
    if isinstance(dt, pd.CategoricalDtype):
        return CATEGORY_STR if isinstance(dt.categories.dtype, pd.StringDtype) else CATEGORY
    if isinstance(dt, pd.StringDtype):
        return STRING_NAN if getattr(dt, "na_value", pd.NA) is not pd.NA else STRING
    if dt == object:
        return OBJECT
    return None


def pack(df: Optional[pd.DataFrame]) -> Optional[Packed]:
    """``df`` as a :class:`Packed` table (None stays None). Numeric and bool columns keep their type; string-like
    columns (categorical, "string", object) become codes into one list of the table's distinct strings."""
    if df is None:
        return None
    schema, cols, strings, index = [], {}, [], {}
    for name in df.columns:
        s = df[name]
        kind = _string_kind(s)
        if kind is None:
            arr = s.to_numpy()
            schema.append((str(name), "", arr.dtype.str))
            cols[str(name)] = arr
            continue
        vals = s.to_numpy(dtype=object, na_value=None) if kind != OBJECT else s.to_numpy()
        codes = np.empty(len(vals), np.int32)
        for i, v in enumerate(vals):
            if v is None or (isinstance(v, float) and v != v):
                codes[i] = -1
                continue
            k = index.get(v)
            if k is None:
                k = index[v] = len(strings)
                strings.append(v)
            codes[i] = k
        schema.append((str(name), kind, "<i4"))
        cols[str(name)] = codes
    schema_t = _intern(tuple(schema))
    rows = np.empty(len(df), dtype=_dtype(schema_t))
    for name, arr in cols.items():
        rows[name] = arr
    return Packed(schema_t, rows, tuple(strings))


def _string_column(kind: str, values: np.ndarray, codes: np.ndarray) -> Any:
    """A rebuilt string column: ``values`` are the objects for ``codes`` (None where the code is −1).
    Categories come back sorted, as ``astype("category")`` made them."""
    if kind in (CATEGORY, CATEGORY_STR):
        present = codes >= 0
        uniq, first, inv = np.unique(codes[present], return_index=True, return_inverse=True)
        cats = values[present][first]
        order = np.argsort(cats.astype(str), kind="stable")
        where = np.empty(len(order), np.int64)
        where[order] = np.arange(len(order))
        full = np.full(len(codes), -1, np.int64)
        full[present] = where[inv]
        return pd.Categorical.from_codes(full, categories=pd.Index(list(cats[order]),
                                                                   dtype="str" if kind == CATEGORY_STR else object))
    if kind == STRING:
        return pd.array(values, dtype="string")
    if kind == STRING_NAN:
        return pd.array(values, dtype=pd.StringDtype("python", na_value=np.nan))
    return pd.Series(values, dtype=object)


def _frame(schema: Schema, rows: np.ndarray, strings: Strings) -> pd.DataFrame:
    data: dict[str, Any] = {}
    table = None
    for name, kind, _ in schema:
        col = rows[name]
        if not kind:
            data[name] = np.array(col)
            continue
        if table is None:
            table = _strings_array(strings)
        codes = np.asarray(col, dtype=np.int64)
        values = np.empty(len(codes), dtype=object)
        ok = codes >= 0
        values[ok] = table[codes[ok]]
        data[name] = _string_column(kind, values, codes)
    return pd.DataFrame(data, index=pd.RangeIndex(len(rows)))


def concat(parts: Iterable[Optional[Packed]], **extra: np.ndarray) -> Optional[pd.DataFrame]:
    """Many ranks' packed tables as one DataFrame, in order, plus ``extra`` columns of the same length (a rank
    column, say). Tables of one schema whose strings are one pool are joined as raw arrays; anything else is
    rebuilt table by table. None when there are no tables."""
    parts = [p for p in parts if p is not None]
    if not parts:
        return None
    schema, pool = parts[0].schema, parts[0].strings
    if all(p.schema == schema for p in parts) and (isinstance(pool, StringPool)
                                                    and all(p.strings is pool for p in parts)):
        rows = np.concatenate([p.rows for p in parts]) if len(parts) > 1 else parts[0].rows
        df = _frame(schema, rows, pool)
    else:
        df = pd.concat([p.frame() for p in parts], ignore_index=True)
    for k, v in extra.items():
        df[k] = v
    return df


def concat_columns(parts: Sequence[Optional[Packed]], names: Sequence[str],
                   missing: str = "") -> Optional[dict[str, np.ndarray]]:
    """Only the columns ``names`` of many ranks' packed tables, joined column by column (no table of every
    column is built): numbers as stored, strings as the pool's objects with ``missing`` where absent. None when
    the tables do not share one schema and one pool (the caller then joins them with :func:`concat`)."""
    parts = [p for p in parts if p is not None]
    if not parts:
        return None
    schema, pool = parts[0].schema, parts[0].strings
    if not isinstance(pool, StringPool) or any(p.schema != schema or p.strings is not pool for p in parts):
        return None
    kinds = {n: k for n, k, _ in schema}
    for name in names:
        if name not in kinds:
            raise KeyError(name)
    dt = _dtype(schema)
    raw = {name: np.empty(int(lengths(parts).sum()), dtype=dt[name]) for name in names}
    at = 0
    for p in parts:  # each table's rows read once (from the scratch file, when they lie there)
        rows = p.rows
        for name in names:
            raw[name][at:at + len(rows)] = rows[name]
        at += len(rows)
        del rows
    out: dict[str, np.ndarray] = {}
    table = None
    for name in names:
        col = raw.pop(name)
        if not kinds[name]:
            out[name] = col
            continue
        if table is None:
            table = np.append(pool.array(), np.array([missing], dtype=object))  # code −1 → the last slot
        out[name] = table[col]
    return out


def lengths(parts: Sequence[Optional[Packed]]) -> np.ndarray:
    """Row count of each table (0 for None)."""
    return np.array([0 if p is None else len(p) for p in parts], dtype=np.int64)
