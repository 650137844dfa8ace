"""PyTorch Flight Recorder dumps (pickle through a restricted unpickler, or JSON) → one rank's typed tables."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pandas as pd

from parsers.collective_names import normalise_op as canonical_op
from parsers.errors import InputError
from parsers.safe_unpickle import MAX_PICKLE_BYTES, UnsafePickleError, safe_loads, salvage_loads

ENTRY_COLUMNS = [
    "record_id", "pg_name", "pg_desc", "collective_seq_id", "p2p_seq_id", "op_id", "profiling_name", "op",
    "peer", "is_p2p", "input_numel", "output_numel", "input_sizes", "output_sizes", "input_dtypes",
    "output_dtypes", "state", "time_created_ns", "time_started_ns", "time_completed_ns", "timeout_ms", "top_frame",
]
INT_COLUMNS = ["record_id", "collective_seq_id", "p2p_seq_id", "op_id", "peer", "input_numel", "output_numel",
               "time_created_ns", "time_started_ns", "time_completed_ns", "timeout_ms"]

_PEER = re.compile(r"(\d+)\s*(->|<-)\s*(\d+)")
_RANK_SUFFIX = re.compile(r"(\d+)(?:\.(?:json|pkl|pickle|bin))?$")
_TORCH_FRAME = re.compile(r"(?:^|[/\\])(?:torch|site-packages|dist-packages)[/\\]|^<frozen |^<string>")


@dataclass
class FlightRecorderDump:
    """One rank's Flight Recorder dump: its entries table, process-group config and status, warnings."""

    path: str
    rank: int | None
    version: str
    pg_config: dict[str, dict[str, Any]]
    pg_status: dict[str, dict[str, int]]
    entries: pd.DataFrame
    warnings: list[str] = field(default_factory=list)
    rank_source: str = "none"
    format: str = "pickle"


def normalise_op(profiling_name: str) -> tuple[str, int]:
    """Map 'nccl:all_reduce' / 'gloo:send 1->2' / 'nccl:_allgather_base' to (op, peer or -1)."""
    name = str(profiling_name or "")
    base = name.split(":", 1)[1] if ":" in name else name
    peer = -1
    m = _PEER.search(base)
    word = base.split()[0] if base.split() else ""
    op = canonical_op(word)
    if op == "unknown":  # keep an unfamiliar name distinct, so two different unknown ops still mismatch
        op = re.sub(r"[^a-z]", "", word.lower()) or "unknown"
    if m and op in ("send", "recv"):
        peer = int(m.group(3))  # "send 1->2": peer 2; "recv 3<-0": peer 0
    return op, peer


def _numel(sizes: Any) -> int:
    """Sum over tensors of the product of their sizes; -1 when the sizes are unreadable."""
    if not isinstance(sizes, (list, tuple)):
        return -1
    total = 0
    for shape in sizes:
        if not isinstance(shape, (list, tuple)):
            return -1
        try:
            total += int(np.prod([int(d) for d in shape], dtype=np.int64)) if shape else 1
        except (TypeError, ValueError):
            return -1
    return total


def _int(v: Any, default: int = -1) -> int:
    """Best-effort int (dumps store numbers as ints, strings, or None)."""
    if v is None or isinstance(v, bool):
        return default if v is None else int(v)
    try:
        return int(v)
    except (TypeError, ValueError):
        try:
            return int(float(v))
        except (TypeError, ValueError):
            return default


def parse_ranks(v: Any) -> list[int] | None:
    """pg_config 'ranks' as a list of ints: accepts '[0, 1]', [0, 1], '0,1'; None when absent/unreadable."""
    if v is None:
        return None
    if isinstance(v, (list, tuple, set, frozenset)):
        try:
            return sorted(int(x) for x in v)
        except (TypeError, ValueError):
            return None
    if isinstance(v, (bytes, str)):
        s = v.decode("utf-8", "replace") if isinstance(v, bytes) else v
        nums = re.findall(r"-?\d+", s)
        if not nums and s.strip() not in ("[]", ""):
            return None
        return [int(x) for x in nums]
    return None


def top_user_frame(frames: Any) -> str:
    """'file:line name' of the innermost frame outside torch / site-packages; '' if none."""
    if not isinstance(frames, (list, tuple)):
        return ""
    for f in frames:  # Flight Recorder lists the innermost frame first
        if not isinstance(f, dict):
            continue
        fn = str(f.get("filename", ""))
        if fn and not _TORCH_FRAME.search(fn):
            return f"{fn}:{_int(f.get('line'))} {f.get('name', '')}"
    return ""


def _entry_row(e: dict, pg_names: dict[str, str]) -> dict[str, Any]:
    """One entry dict → one table row."""
    pg = e.get("process_group")
    if isinstance(pg, (list, tuple)) and pg:
        pg_name, pg_desc = str(pg[0]), str(pg[1]) if len(pg) > 1 else ""
    else:
        pg_name = str(e.get("pg_id", pg if isinstance(pg, str) else ""))
        pg_desc = pg_names.get(pg_name, "")
    prof = str(e.get("profiling_name", ""))
    op, peer = normalise_op(prof)
    is_p2p = bool(e.get("is_p2p", op in ("send", "recv")))
    ins, outs = e.get("input_sizes"), e.get("output_sizes")
    started = _int(e.get("time_discovered_started_ns"), -1)
    completed = _int(e.get("time_discovered_completed_ns"), -1)

    def dts(v: Any) -> str:
        return ",".join(str(x) for x in v) if isinstance(v, (list, tuple)) else ("" if v is None else str(v))

    return {
        "record_id": _int(e.get("record_id")), "pg_name": pg_name, "pg_desc": pg_desc,
        "collective_seq_id": _int(e.get("collective_seq_id")), "p2p_seq_id": _int(e.get("p2p_seq_id")),
        "op_id": _int(e.get("op_id")), "profiling_name": prof, "op": op, "peer": peer, "is_p2p": is_p2p,
        "input_numel": _numel(ins), "output_numel": _numel(outs),
        "input_sizes": json.dumps(ins, default=str), "output_sizes": json.dumps(outs, default=str),
        "input_dtypes": dts(e.get("input_dtypes")), "output_dtypes": dts(e.get("output_dtypes")),
        "state": str(e.get("state", "")),
        "time_created_ns": _int(e.get("time_created_ns")),
        "time_started_ns": started if started > 0 else -1, "time_completed_ns": completed if completed > 0 else -1,
        "timeout_ms": _int(e.get("timeout_ms")), "top_frame": top_user_frame(e.get("frames")),
    }


def entries_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Rows → the entries DataFrame with fixed columns and dtypes (empty table when no rows)."""
    df = pd.DataFrame(rows, columns=ENTRY_COLUMNS)
    for c in INT_COLUMNS:
        df[c] = df[c].astype("int64") if len(df) else pd.Series([], dtype="int64")
    df["is_p2p"] = df["is_p2p"].astype(bool)
    for c in set(ENTRY_COLUMNS) - set(INT_COLUMNS) - {"is_p2p"}:
        df[c] = df[c].fillna("").astype(str)
    return df


def rank_from_name(path: str | Path) -> int | None:
    """Rank from a file-name suffix: nccl_trace_rank_3, fr_3.json → 3."""
    m = _RANK_SUFFIX.search(Path(path).name)
    return int(m.group(1)) if m else None


def looks_like_fr_dump(head: bytes) -> bool:
    """True when the first bytes of a file look like a Flight Recorder dump (pickle or JSON)."""
    if head[:1] == b"\x80" and len(head) > 1 and 2 <= head[1] <= 5:
        return b"entries" in head or b"pg_config" in head
    s = head.lstrip()[:1]
    if s == b"{":
        return b'"entries"' in head and (b'"version"' in head or b'"pg_config"' in head)
    return False


def _decode(path: str, data: bytes, warnings: list[str]) -> tuple[Any, str]:
    """Bytes → (top-level object, format), salvaging a cut-off file; InputError when nothing is readable."""
    if not data:
        raise InputError(path, "empty file")
    if data[:1] == b"\x80":
        try:
            return safe_loads(data), "pickle"
        except UnsafePickleError as exc:
            raise InputError(path, f"pickle refused: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - truncated or corrupt: try salvage
            obj, reason = salvage_loads(data)
            if isinstance(obj, dict) and ("entries" in obj or "pg_config" in obj or "version" in obj):
                warnings.append(f"{path}: pickle unreadable as a whole ({type(exc).__name__}: {exc}); "
                                f"salvaged what was complete: {reason}")
                return obj, "pickle"
            raise InputError(path, f"not a readable Flight Recorder pickle ({type(exc).__name__}: {exc})") from None
    if data.lstrip()[:1] == b"{":
        try:
            return orjson.loads(data), "json"
        except orjson.JSONDecodeError as exc:
            obj = _salvage_json(data)
            if obj is not None:
                warnings.append(f"{path}: JSON cut off or corrupt ({exc}); salvaged {len(obj['entries'])} "
                                f"complete entries")
                return obj, "json"
            raise InputError(path, f"not readable JSON: {exc}") from None
    raise InputError(path, "neither a pickle nor a JSON Flight Recorder dump (binary or unknown content)")


def _salvage_json(data: bytes) -> dict | None:
    """From a truncated JSON dump, decode the top-level keys before 'entries' and each complete entry."""
    text = data.decode("utf-8", "replace")
    i = text.find('"entries"')
    if i < 0:
        return None
    j = text.find("[", i)
    if j < 0:
        return None
    out: dict[str, Any] = {"entries": []}
    for key in ("version", "pg_config", "pg_status", "rank"):
        m = re.search(r'"%s"\s*:\s*' % key, text)
        if m:
            try:
                out[key], _ = json.JSONDecoder().raw_decode(text, m.end())
            except ValueError:
                pass
    dec = json.JSONDecoder()
    pos = j + 1
    while True:
        while pos < len(text) and text[pos] in " \r\n\t,":
            pos += 1
        if pos >= len(text) or text[pos] != "{":
            break
        try:
            obj, pos = dec.raw_decode(text, pos)
        except ValueError:
            break
        out["entries"].append(obj)
    return out


def _version_tuple(v: str) -> tuple[int, ...]:
    """'2.10' → (2, 10) so that 2.10 sorts after 2.9."""
    return tuple(int(x) for x in re.findall(r"\d+", v)[:3])


def load_dump(path: str | Path, max_bytes: int = MAX_PICKLE_BYTES) -> FlightRecorderDump:
    """Read one rank's Flight Recorder dump; raise InputError only when nothing at all is readable."""
    p = str(path)
    warnings: list[str] = []
    try:
        with open(p, "rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise InputError(p, f"cannot open: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise InputError(p, f"larger than {max_bytes} bytes; refusing to load")
    obj, fmt = _decode(p, data, warnings)
    if not isinstance(obj, dict):
        raise InputError(p, f"top level is a {type(obj).__name__}, not a Flight Recorder dict")
    version = str(obj.get("version", ""))
    if not version:
        warnings.append(f"{p}: no 'version' key")
    elif _version_tuple(version)[:1] != (2,):
        warnings.append(f"{p}: Flight Recorder version {version} is not 2.x; reading it as 2.x")

    pg_config, pg_names = _read_pg_config(p, obj.get("pg_config"), warnings)
    pg_status = _read_pg_status(p, obj.get("pg_status"), warnings)
    raw = obj.get("entries", [])
    if not isinstance(raw, list):
        warnings.append(f"{p}: 'entries' is a {type(raw).__name__}, not a list; no entries read")
        raw = []
    rows, bad = [], 0
    for e in raw:
        if isinstance(e, dict) and ("collective_seq_id" in e or "profiling_name" in e):
            rows.append(_entry_row(e, pg_names))
        else:
            bad += 1
    if bad:
        warnings.append(f"{p}: skipped {bad} entries that are not entry records")
    entries = entries_frame(rows)
    if "entries" not in obj:
        warnings.append(f"{p}: no 'entries' key (collectives not included in the dump)")

    rank, source = None, "none"
    if "rank" in obj and _int(obj.get("rank")) >= 0:
        rank, source = _int(obj.get("rank")), "dump"
    elif (r := rank_from_name(p)) is not None:
        rank, source = r, "filename"
    else:
        warnings.append(f"{p}: rank unknown (no 'rank' key, no numeric file-name suffix)")
    _check_wrap(p, entries, warnings)
    return FlightRecorderDump(path=p, rank=rank, version=version, pg_config=pg_config, pg_status=pg_status,
                              entries=entries, warnings=warnings, rank_source=source, format=fmt)


def _read_pg_config(p: str, cfg: Any, warnings: list[str]) -> tuple[dict, dict[str, str]]:
    """pg_config → {pg_name: {desc, ranks (list or None)}}, skipping the empty '' placeholder gloo writes."""
    out: dict[str, dict[str, Any]] = {}
    names: dict[str, str] = {}
    if cfg is None:
        warnings.append(f"{p}: no pg_config; process-group membership must be inferred")
        return out, names
    if not isinstance(cfg, dict):
        warnings.append(f"{p}: pg_config is a {type(cfg).__name__}, not a dict; ignored")
        return out, names
    for key, v in cfg.items():
        if not isinstance(v, dict):
            warnings.append(f"{p}: pg_config[{key!r}] is not a dict; ignored")
            continue
        name = str(v.get("name", key) or key)
        ranks = parse_ranks(v.get("ranks"))
        if v.get("ranks") is not None and ranks is None:
            warnings.append(f"{p}: pg_config[{key!r}] ranks {v.get('ranks')!r} unreadable")
        out[name] = {"desc": str(v.get("desc", "") or ""), "ranks": ranks}
        names[name] = out[name]["desc"]
    return out, names


def _read_pg_status(p: str, st: Any, warnings: list[str]) -> dict[str, dict[str, int]]:
    """pg_status → {pg_name: {last_enqueued, last_started, last_completed}} as ints (-1 unknown)."""
    out: dict[str, dict[str, int]] = {}
    if st is None:
        return out
    if not isinstance(st, dict):
        warnings.append(f"{p}: pg_status is a {type(st).__name__}, not a dict; ignored")
        return out
    for pg, v in st.items():
        if isinstance(v, dict):
            out[str(pg)] = {k: _int(v.get(f"{k}_collective", v.get(k))) for k in
                            ("last_enqueued", "last_started", "last_completed")}
    return out


def _check_wrap(p: str, entries: pd.DataFrame, warnings: list[str]) -> None:
    """Note a ring buffer that wrapped: the first collective of a group has seq > 1."""
    if entries.empty:
        return
    coll = entries[~entries["is_p2p"] & (entries["collective_seq_id"] > 0)]
    first = coll.groupby("pg_name")["collective_seq_id"].min()
    wrapped = first[first > 1]
    if len(wrapped):
        warnings.append(f"{p}: ring buffer wrapped (older entries dropped); first seq per group: "
                        + ", ".join(f"{k}={v}" for k, v in wrapped.items()))
