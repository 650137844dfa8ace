"""Digest of every KinetoTrace field, to check that a parser change keeps the output identical."""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from parsers.errors import InputError  # noqa: E402
from parsers.kineto import load_trace  # noqa: E402


def _frame_digest(df: pd.DataFrame) -> str:
    h = hashlib.sha256()
    h.update(repr(list(df.columns)).encode())
    h.update(repr([str(t) for t in df.dtypes]).encode())
    h.update(repr(list(df.index)[:3] + [len(df)]).encode())
    for c in df.columns:
        col = df[c]
        if str(col.dtype) == "category":
            h.update(repr(list(col.cat.categories)).encode())
            h.update(col.cat.codes.to_numpy().tobytes())
        elif col.dtype == object or str(col.dtype).startswith(("str", "string")):
            h.update(json.dumps(col.tolist(), default=str).encode())
        else:
            h.update(col.to_numpy().tobytes())
    return h.hexdigest()[:16]


def digest(path: str) -> dict:
    """Field → short hash (frames, names, meta, warnings, salvage) of one parsed trace."""
    try:
        t = load_trace(path)
    except InputError as exc:
        return {"error": str(exc.reason)}
    out = {"rank": t.rank, "rank_source": t.rank_source, "world_size": t.world_size,
           "meta": hashlib.sha256(json.dumps(t.meta, sort_keys=True, default=str).encode()).hexdigest()[:16],
           "names": hashlib.sha256(json.dumps(t.names).encode()).hexdigest()[:16],
           "warnings": t.warnings, "salvage": t.salvage}
    for f in ("activity", "collectives", "steps", "annotations"):
        out[f] = _frame_digest(getattr(t, f))
    out["n_activity"] = len(t.activity)
    return out


if __name__ == "__main__":
    paths = sys.argv[1:]
    print(json.dumps({p: digest(p) for p in paths}, indent=1, sort_keys=True))
