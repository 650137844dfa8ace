"""Parsed tables as pandas DataFrames, for tests that compare them with pandas' own tools.

The parsers return :class:`parsers.table.Table` (numpy columns, no pandas: the hang path's start-up stays
small); a test that checks a table's content with ``iloc`` / ``groupby`` / ``equals`` reads it through
:func:`as_pandas`, which is ``Table.to_pandas()`` on every table field of a parsed object.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

from parsers.table import Table


def as_pandas(obj: Any) -> Any:
    """A copy of a parsed dataclass (StderrLog, NcclLog, FlightRecorderDump, HangReport) with its Tables as
    DataFrames; a Table itself becomes a DataFrame; anything else is returned as it is."""
    if isinstance(obj, Table):
        return obj.to_pandas()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {f.name: getattr(obj, f.name).to_pandas() for f in dataclasses.fields(obj)
                   if f.init and isinstance(getattr(obj, f.name), Table)}
        return dataclasses.replace(obj, **changes) if changes else obj
    return obj


def pandas_tables(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (a parser) with its result's tables as DataFrames (:func:`as_pandas`)."""
    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        return as_pandas(fn(*args, **kwargs))
    return wrapped
