"""The table of every configuration tried: --record appends one row per analysed run to a CSV or JSON-lines file
(deduplicated on the run id), and the comparison reads such files back as runs."""
from __future__ import annotations

import csv
import io
import json
import os
from typing import Iterable

from analyzer.scaling.rows import ROW_COLUMNS

_TEXT = {"run_id", "label", "source", "collected_at", "device_type", "shape", "throughput_unit"}


class RecordError(ValueError):
    """A record file that cannot be read: the message names the file and the reason."""


def is_record_file(path: str) -> bool:
    return os.path.isfile(path) and path.lower().endswith((".csv", ".jsonl", ".ndjson"))


_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def _csv_safe(row: dict) -> dict:
    """Text cells a spreadsheet would run as a formula get a leading quote (read_rows takes it off again)."""
    return {k: ("'" + v if k in _TEXT and isinstance(v, str) and v.startswith(_FORMULA) else v) for k, v in row.items()}


def _typed(row: dict) -> dict:
    out = {}
    for k in ROW_COLUMNS:
        v = row.get(k)
        if k in _TEXT and isinstance(v, str) and v.startswith("'") and v[1:].startswith(_FORMULA):
            v = v[1:]
        if k not in _TEXT and isinstance(v, str):
            v = None if v.strip() in ("", "None", "null") else float(v)
        if k in ("world_size", "steps", "hosts") and v is not None:
            v = int(v)
        out[k] = v if v != "" else None
    return out


def read_rows(path: str) -> list[dict]:
    """The rows of a record file (CSV with a header, or one JSON object per line)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise RecordError(f"{path}: cannot read the record file: {exc.strerror or exc}") from exc
    try:
        if path.lower().endswith(".csv"):
            raw = list(csv.DictReader(io.StringIO(text)))
        else:
            raw = [json.loads(line) for line in text.splitlines() if line.strip()]
        rows = [_typed(r) for r in raw if isinstance(r, dict)]
    except (ValueError, csv.Error) as exc:
        raise RecordError(f"{path}: not a record file ({type(exc).__name__}: {exc})"[:300]) from exc
    if any(not r.get("run_id") or not r.get("world_size") for r in rows):
        raise RecordError(f"{path}: a row lacks run_id or world_size: not a record file written by --record")
    return rows


def append_rows(path: str, rows: Iterable[dict]) -> int:
    """Append the rows whose run id the file lacks; returns how many were added."""
    existing = {r["run_id"] for r in read_rows(path)} if os.path.exists(path) and os.path.getsize(path) else set()
    new = []
    for r in rows:
        if r.get("run_id") and r["run_id"] not in existing:
            existing.add(r["run_id"])
            new.append({k: r.get(k) for k in ROW_COLUMNS})
    if not new:
        return 0
    as_csv = path.lower().endswith(".csv")
    header = as_csv and (not os.path.exists(path) or os.path.getsize(path) == 0)
    with open(path, "a", encoding="utf-8", newline="") as f:
        if as_csv:
            w = csv.DictWriter(f, fieldnames=list(ROW_COLUMNS))
            if header:
                w.writeheader()
            w.writerows(_csv_safe(r) for r in new)
        else:
            for r in new:
                f.write(json.dumps(r, sort_keys=False) + "\n")
    return len(new)
