"""A trace's ``distributedInfo.pg_config`` as a typed table: one row per process group the rank is in.

PyTorch writes ``distributedInfo`` = {backend, rank, world_size, pg_count, pg_config: [{pg_name, pg_desc,
backend_config, pg_size, ranks}], nccl_version} (torch/distributed/distributed_c10d.py, ``_get_all_pg_configs``).
``pg_desc`` is what the program named the group: ``default_pg``, DeviceMesh's ``mesh_<dim>``, Megatron's
``TENSOR_MODEL_PARALLEL_GROUP``…, or ``undefined`` for a ``new_group`` without a description. No opinions here:
which dimension a group is belongs to analyzer/layout.
"""
from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from parsers.kineto_values import MAX_RANKS

#: columns of the table (ranks: a tuple of ints, sorted; () when the trace does not list them)
GROUP_COLUMNS = ["pg_name", "pg_desc", "backend_config", "pg_size", "ranks"]
_INTS = re.compile(r"-?\d+")
#: at most this many groups are read from one trace's pg_config (a real job has a handful per rank)
MAX_GROUPS = 4096


def _ranks(v: Any) -> tuple:
    """'[0, 1]' or [0, 1] → (0, 1); () when unreadable or out of range."""
    if isinstance(v, str):
        v = [int(x) for x in _INTS.findall(v[:1 << 20])]
    if not isinstance(v, (list, tuple)):
        return ()
    out = [x for x in v if x.__class__ is int and 0 <= x < MAX_RANKS]
    return tuple(sorted(set(out))) if len(out) == len(v) else ()


def _size(v: Any) -> int:
    return v if v.__class__ is int and 0 <= v <= MAX_RANKS else -1


def process_groups(pg_config: Any) -> pd.DataFrame:
    """The typed table of one trace's ``pg_config`` list (rows without a ``pg_name`` skipped)."""
    rows = []
    for pg in (pg_config if isinstance(pg_config, list) else [])[:MAX_GROUPS]:
        if not isinstance(pg, dict) or pg.get("pg_name") is None:
            continue
        rows.append((str(pg["pg_name"])[:200], str(pg.get("pg_desc") or "")[:200],
                     str(pg.get("backend_config") or "")[:200], _size(pg.get("pg_size")), _ranks(pg.get("ranks"))))
    df = pd.DataFrame.from_records(rows, columns=GROUP_COLUMNS)
    df["pg_size"] = df["pg_size"].astype(np.int64)
    return df
