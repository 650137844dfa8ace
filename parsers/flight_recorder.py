"""PyTorch Flight Recorder dumps (pickle through a restricted unpickler, or JSON) → one rank's typed tables."""
from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import numpy as np

from parsers.collective_names import normalise_op as canonical_op
from parsers.errors import InputError
from parsers.safe_open import read_bounded
from parsers.safe_unpickle import MAX_PICKLE_BYTES, UnsafePickleError, check_plain, safe_loads, salvage_loads
from parsers.table import Table, column

ENTRY_COLUMNS = [
    "record_id", "pg_id", "pg_name", "pg_desc", "collective_seq_id", "p2p_seq_id", "op_id", "profiling_name", "op",
    "peer", "is_p2p", "input_numel", "output_numel", "input_sizes", "output_sizes", "input_dtypes",
    "output_dtypes", "state", "retired", "time_created_ns", "time_started_ns", "time_completed_ns", "timeout_ms",
    "top_frame", "user_stack",
]
INT_COLUMNS = ["record_id", "pg_id", "collective_seq_id", "p2p_seq_id", "op_id", "peer", "input_numel", "output_numel",
               "time_created_ns", "time_started_ns", "time_completed_ns", "timeout_ms"]

_PEER = re.compile(r"(\d+)\s*(->|<-)\s*(\d+)")
_RANK_SUFFIX = re.compile(r"(\d+)(?:\.(?:json|pkl|pickle|bin))?$")
_TORCH_FRAME = re.compile(r"(?:^|[/\\])(?:torch|site-packages|dist-packages)[/\\]|^<frozen |^<string>")
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
KNOWN_TOP_KEYS = {"version", "pg_config", "pg_status", "entries", "rank", "comm_lib_version", "nccl_version",
                  "nccl_comm_state"}  # what PyTorch's FlightRecorder::dump / dump_json write (2.x)
MAX_RANK = 1 << 20  # ranks (and peers) outside 0 <= rank < MAX_RANK are not believed
MAX_TEXT_NODES = 100_000  # sizes / dtypes / names longer than this many values are not serialised
MAX_TEXT_DEPTH = 32


@dataclass
class FlightRecorderDump:
    """One rank's Flight Recorder dump: its entries table, process-group config and status, warnings.

    `pg_config` is keyed by process-group *name* (the same on every member); `pg_status` by the rank-local
    `pg_id` that every entry also carries (PyTorch numbers its process-group objects per rank), so the two are
    joined through the entries' (`pg_id`, `pg_name`) pairs, never by key. `backend` is the prefix of the entries'
    profiling names (`nccl`, `gloo`, ...; '' when there are none); `has_entries` is False when the dump holds no
    `entries` key (a JSON dump of an empty buffer, or one taken without collectives).
    """

    path: str
    rank: int | None
    version: str
    pg_config: dict[str, dict[str, Any]]
    pg_status: dict[str, dict[str, int]]
    entries: Table
    warnings: list[str] = field(default_factory=list)
    rank_source: str = "none"
    format: str = "pickle"
    comm_lib_version: str = ""
    backend: str = ""
    has_entries: bool = True


def short(v: Any, limit: int = 200) -> str:
    """repr-like text of any value, at most ``limit`` characters; never raises (huge ints, odd objects)."""
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 256:
        return f"<integer of about {int(v.bit_length() * 0.30103) + 1} digits>"
    try:
        t = repr(v) if not isinstance(v, (list, tuple, dict, set)) or _small(v, 1000, 8) \
            else f"<{type(v).__name__} of {len(v)} items>"
    except (ValueError, TypeError, RecursionError):
        t = f"<{type(v).__name__}>"
    return t if len(t) <= limit else t[:limit] + "…"


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
    if m and op in ("send", "recv") and len(m.group(3)) <= 7 and int(m.group(3)) < MAX_RANK:
        peer = int(m.group(3))  # "send 1->2": peer 2; "recv 3<-0": peer 0; an impossible peer stays -1
    return op, peer


def to_int64(v: Any, default: int = -1) -> tuple[int, bool]:
    """(int value, rejected): ints, integral floats and numeric strings within int64; else (default, True/False).

    `rejected` is True for a number that cannot be an int64 (inf, nan, 1e30, 10**30, a 5000-digit string), so a
    caller can count it; None and non-numeric values give (default, False).
    """
    if v is None:
        return default, False
    if isinstance(v, bool):
        return int(v), False
    if isinstance(v, (bytes, bytearray)):
        v = bytes(v).decode("ascii", "replace")
    if isinstance(v, str):
        t = v.strip()
        try:
            v = int(t) if len(t) <= 40 else float(t)  # long digit strings: float() says inf/huge, never slow
        except ValueError:
            try:
                v = float(t)
            except ValueError:
                return default, False
    if isinstance(v, float):
        if not math.isfinite(v) or not INT64_MIN <= v < 2.0 ** 63:
            return default, True
        return int(v), False
    if isinstance(v, int):
        return (v, False) if INT64_MIN <= v <= INT64_MAX else (default, True)
    return default, False


def _int(v: Any, default: int = -1) -> int:
    """Best-effort int64 (dumps store numbers as ints, strings, or None); `default` when unreadable or out of range."""
    return to_int64(v, default)[0]


def valid_rank(v: Any) -> int | None:
    """A rank as an int in 0 <= rank < MAX_RANK (ints, integral floats, digit strings); None otherwise (bools too)."""
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, str) and not v.strip().isdigit():
        return None
    r, bad = to_int64(v, -1)
    if bad or (isinstance(v, float) and not v.is_integer()):
        return None
    return r if 0 <= r < MAX_RANK else None


class _Reader:
    """Per-file conversions that count the values they had to reject (reported as one warning per file)."""

    def __init__(self) -> None:
        self.rejected: Counter[str] = Counter()

    def int(self, v: Any, what: str, default: int = -1) -> int:
        """Range-checked int64; an out-of-range value counts against `what` and yields `default`."""
        x, bad = to_int64(v, default)
        if bad:
            self.rejected[what] += 1
        return x

    def numel(self, sizes: Any, what: str) -> int:
        """Sum over tensors of the product of their sizes; -1 when unreadable or beyond int64 (counted)."""
        if not isinstance(sizes, (list, tuple)):
            return -1
        total = 0
        for shape in sizes:
            if not isinstance(shape, (list, tuple)):
                return -1
            n = 1
            for d in shape:
                if not isinstance(d, (str, bytes, int, float)):
                    return -1
                x, bad = to_int64(d, None)
                if x is None and not bad:
                    return -1
                if bad or abs(n * x) > INT64_MAX:
                    self.rejected[what] += 1
                    return -1
                n *= x
            total += n
            if abs(total) > INT64_MAX:
                self.rejected[what] += 1
                return -1
        return total

    def text(self, v: Any, what: str, as_json: bool = False) -> str:
        """str(v) (or JSON text) of a value; '' (counted) for one too large or too deep to write out."""
        if isinstance(v, str):
            return json.dumps(v) if as_json else v
        if isinstance(v, (bytes, bytearray)) and not as_json:
            return bytes(v).decode("utf-8", "replace")
        if not _small(v):
            self.rejected[what] += 1
            return ""
        try:
            return json.dumps(v, default=str) if as_json else str(v)
        except (ValueError, TypeError, RecursionError):
            self.rejected[what] += 1
            return ""

    def warning(self, p: str) -> str | None:
        """One line naming the file and how many values of which fields were rejected; None when none were."""
        if not self.rejected:
            return None
        parts = ", ".join(f"{k} x{n}" for k, n in sorted(self.rejected.items()))
        return (f"{p}: {sum(self.rejected.values())} values out of range or too large to use were read as unknown "
                f"(-1 / empty): {parts}")


def _small(v: Any, max_nodes: int = MAX_TEXT_NODES, max_depth: int = MAX_TEXT_DEPTH) -> bool:
    """True when walking `v` visits at most max_nodes nodes (shared references counted each time) and depth."""
    n = 0
    stack = [(v, 0)]
    while stack:
        o, d = stack.pop()
        n += 1
        if n > max_nodes or d > max_depth:
            return False
        if isinstance(o, dict):
            stack.extend((x, d + 1) for x in o.keys())
            stack.extend((x, d + 1) for x in o.values())
        elif isinstance(o, (list, tuple, set, frozenset)):
            if n + len(o) > max_nodes:
                return False
            stack.extend((x, d + 1) for x in o)
    return True


def parse_ranks(v: Any) -> list[int] | None:
    """pg_config 'ranks' as a list of ints: accepts '[0, 1]', [0, 1], '0,1'; None when absent/unreadable."""
    if v is None:
        return None
    if isinstance(v, (list, tuple, set, frozenset)):
        if any(isinstance(x, bool) for x in v):
            return None
        try:
            return sorted(int(x) for x in v)
        except (TypeError, ValueError, OverflowError):
            return None
    if isinstance(v, (bytes, str)):
        s = v.decode("utf-8", "replace") if isinstance(v, bytes) else v
        nums = re.findall(r"-?\d+", s)
        if not nums and s.strip() not in ("[]", ""):
            return None
        try:
            return [int(x) for x in nums]
        except ValueError:  # a number with thousands of digits
            return None
    return None


MAX_STACK = 16  # user-code function names kept per entry (outermost first): a call site's identity


def user_stack(frames: Any, reader: _Reader | None = None) -> str:
    """The user-code frames of an entry's stack as 'function:line', outermost first, ';'-joined: its call site."""
    if not isinstance(frames, (list, tuple)):
        return ""
    rd = reader or _Reader()
    names = []
    for f in frames:
        if not isinstance(f, dict):
            continue
        fn = rd.text(f.get("filename", ""), "frames")
        if fn and not _TORCH_FRAME.search(fn):
            names.append(f"{rd.text(f.get('name', ''), 'frames')[:200]}:{rd.int(f.get('line'), 'frames')}")
    return ";".join(reversed(names[:MAX_STACK]))


def top_user_frame(frames: Any, reader: _Reader | None = None) -> str:
    """'file:line name' of the innermost frame outside torch / site-packages; '' if none."""
    if not isinstance(frames, (list, tuple)):
        return ""
    rd = reader or _Reader()
    for f in frames:  # Flight Recorder lists the innermost frame first
        if not isinstance(f, dict):
            continue
        fn = rd.text(f.get("filename", ""), "frames")
        if fn and not _TORCH_FRAME.search(fn):
            return f"{fn}:{rd.int(f.get('line'), 'frames')} {rd.text(f.get('name', ''), 'frames')}"
    return ""


def _entry_row(e: dict, pg_names: dict[str, str], rd: _Reader) -> dict[str, Any]:
    """One entry dict → one table row (every number range-checked, every text bounded)."""
    pg = e.get("process_group")
    if isinstance(pg, (list, tuple)) and pg:
        pg_name, pg_desc = rd.text(pg[0], "process_group"), rd.text(pg[1], "process_group") if len(pg) > 1 else ""
    else:  # no (name, desc) pair: a bare name string, else unnamed (the rank-local pg_id is not a name)
        pg_name = rd.text(pg, "process_group") if isinstance(pg, str) else ""
        pg_desc = pg_names.get(pg_name, "")
    prof = rd.text(e.get("profiling_name", ""), "profiling_name")
    op, peer = normalise_op(prof)
    if peer < 0 and op in ("send", "recv") and _PEER.search(prof):
        rd.rejected["peer"] += 1
    is_p2p = bool(e.get("is_p2p", op in ("send", "recv")))
    ins, outs = e.get("input_sizes"), e.get("output_sizes")
    started = rd.int(e.get("time_discovered_started_ns"), "time_discovered_started_ns")
    completed = rd.int(e.get("time_discovered_completed_ns"), "time_discovered_completed_ns")

    def dts(v: Any, what: str) -> str:
        if isinstance(v, (list, tuple)) and _small(v):
            return ",".join(rd.text(x, what) for x in v)
        return "" if v is None else rd.text(v, what)

    return {
        "record_id": rd.int(e.get("record_id"), "record_id"), "pg_id": rd.int(e.get("pg_id"), "pg_id"),
        "pg_name": pg_name, "pg_desc": pg_desc,
        "collective_seq_id": rd.int(e.get("collective_seq_id"), "collective_seq_id"),
        "p2p_seq_id": rd.int(e.get("p2p_seq_id"), "p2p_seq_id"),
        "op_id": rd.int(e.get("op_id"), "op_id"), "profiling_name": prof, "op": op, "peer": peer, "is_p2p": is_p2p,
        "input_numel": rd.numel(ins, "input_sizes"), "output_numel": rd.numel(outs, "output_sizes"),
        "input_sizes": rd.text(ins, "input_sizes", as_json=True),
        "output_sizes": rd.text(outs, "output_sizes", as_json=True),
        "input_dtypes": dts(e.get("input_dtypes"), "input_dtypes"),
        "output_dtypes": dts(e.get("output_dtypes"), "output_dtypes"),
        "state": rd.text(e.get("state", ""), "state"), "retired": e.get("retired") is True,
        "time_created_ns": rd.int(e.get("time_created_ns"), "time_created_ns"),
        "time_started_ns": started if started > 0 else -1, "time_completed_ns": completed if completed > 0 else -1,
        "timeout_ms": rd.int(e.get("timeout_ms"), "timeout_ms"), "top_frame": top_user_frame(e.get("frames"), rd),
        "user_stack": user_stack(e.get("frames"), rd),
    }


def entries_frame(rows: list[dict[str, Any]]) -> Table:
    """Rows → the entries table with fixed columns and dtypes (empty table when no rows): int64 numbers, bool
    flags, str text."""
    data: dict[str, Any] = {}
    for c in ENTRY_COLUMNS:
        vals = [r.get(c) for r in rows]
        if c in INT_COLUMNS:
            data[c] = np.array(vals, dtype=np.int64)
        elif c in ("is_p2p", "retired"):
            data[c] = np.array([bool(v) if v is not None else False for v in vals], dtype=bool)
        else:
            data[c] = column(["" if v is None else str(v) for v in vals], object)
    return Table(data, ENTRY_COLUMNS)


def rank_from_name(path: str | Path) -> int | None:
    """Rank from a file-name suffix: nccl_trace_rank_3, fr_3.json → 3."""
    m = _RANK_SUFFIX.search(Path(path).name)
    return valid_rank(m.group(1)) if m else None


_BOM = b"\xef\xbb\xbf"


def is_pickle(head: bytes) -> bool:
    """A pickle's first bytes: PROTO 2-5, or a protocol 0/1 dict (`(d…` MARK DICT, `}` EMPTY_DICT)."""
    if head[:1] == b"\x80":
        return len(head) > 1 and 2 <= head[1] <= 5
    return head[:2] == b"(d" or head[:2] in (b"}q", b"}r", b"}(", b"}\x94")


def looks_like_fr_dump(head: bytes) -> bool:
    """True when the first bytes of a file look like a Flight Recorder dump (pickle or JSON)."""
    if is_pickle(head):
        return b"entries" in head or b"pg_config" in head
    if head.startswith(_BOM):
        head = head[len(_BOM):]
    s = head.lstrip()[:1]
    if s == b"{":  # a dump of an empty buffer has no "entries" key at all: pg_config + pg_status identify it
        first = _FIRST_KEY.match(head.lstrip())
        if first is None or first.group(1) not in _TOP_KEYS:
            return False  # another program's JSON that mentions "entries" and "version" (a docs index, a package)
        return (b'"entries"' in head and (b'"version"' in head or b'"pg_config"' in head)) or \
            (b'"pg_config"' in head and b'"pg_status"' in head)
    return False


#: the top-level keys of a Flight Recorder JSON dump (torch/csrc/distributed/c10d/FlightRecorder*.cpp): a JSON
#: dump's first key is one of them
_TOP_KEYS = {b"version", b"comm_lib_version", b"nccl_version", b"pg_config", b"pg_status", b"entries"}
_FIRST_KEY = re.compile(rb'\{\s{0,64}"([A-Za-z_]{1,40})"\s{0,16}:')


def _decode(path: str, data: bytes, warnings: list[str]) -> tuple[Any, str]:
    """Bytes → (top-level object, format), salvaging a cut-off file; InputError when nothing is readable."""
    if not data:
        raise InputError(path, "empty file")
    if data.startswith(_BOM):
        data = data[len(_BOM):]
    if is_pickle(data):
        try:
            return safe_loads(data), "pickle"
        except UnsafePickleError as exc:
            raise InputError(path, f"pickle refused: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - truncated or corrupt: try salvage
            obj, reason = salvage_loads(data)
            try:
                check_plain(obj)
            except UnsafePickleError as exc2:
                raise InputError(path, f"pickle refused: {exc2}") from None
            if isinstance(obj, dict) and ("entries" in obj or "pg_config" in obj or "version" in obj):
                warnings.append(f"{path}: pickle unreadable as a whole ({type(exc).__name__}: {str(exc)[:200]}); "
                                f"salvaged what was complete: {reason}")
                return obj, "pickle"
            raise InputError(path, f"not a readable Flight Recorder pickle ({type(exc).__name__}: {str(exc)[:200]})") \
                from None
    if data.lstrip()[:1] == b"{":
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            if "recursion" in str(exc).lower():
                raise InputError(path, "JSON nesting too deep (more than 1024 levels)") from None
            try:
                obj = _salvage_json(data)
            except RecursionError:
                raise InputError(path, "JSON nesting too deep to read") from None
            except ValueError as exc2:  # e.g. an integer of more digits than Python converts
                raise InputError(path, f"not readable JSON: {str(exc2)[:200]}") from None
            if obj is None:
                raise InputError(path, f"not readable JSON: {exc}") from None
            warnings.append(f"{path}: JSON cut off or corrupt ({exc}); salvaged {len(obj['entries'])} "
                            f"complete entries")
        try:
            check_plain(obj)
        except UnsafePickleError as exc:
            raise InputError(path, f"JSON refused: {exc}") from None
        return obj, "json"
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
    return tuple(int(x) for x in re.findall(r"\d{1,9}", v)[:3])  # bounded: no 5000-digit int()


def load_dump(path: str | Path, max_bytes: int = MAX_PICKLE_BYTES) -> FlightRecorderDump:
    """Read one rank's Flight Recorder dump; raise InputError only when nothing at all is readable."""
    p = str(path)
    warnings: list[str] = []
    data = read_bounded(p, max_bytes)
    obj, fmt = _decode(p, data, warnings)
    if not isinstance(obj, dict):
        raise InputError(p, f"top level is a {type(obj).__name__}, not a Flight Recorder dict")
    rd = _Reader()
    version = rd.text(obj.get("version", ""), "version")
    if not version:
        warnings.append(f"{p}: no 'version' key")
    elif _version_tuple(version)[:1] != (2,):
        warnings.append(f"{p}: Flight Recorder version {version} is not 2.x; reading it as 2.x")
    unknown = sorted(short(k, 40) for k in list(obj)[:1000] if not (isinstance(k, str) and k in KNOWN_TOP_KEYS))
    if unknown:
        warnings.append(f"{p}: keys this reader does not know were ignored: {', '.join(unknown[:10])}"
                        + (f" (+{len(unknown) - 10} more)" if len(unknown) > 10 else ""))

    pg_config, pg_names = _read_pg_config(p, obj.get("pg_config"), warnings, rd)
    pg_status = _read_pg_status(p, obj.get("pg_status"), warnings, rd)
    raw = obj.get("entries", [])
    if not isinstance(raw, list):
        warnings.append(f"{p}: 'entries' is a {type(raw).__name__}, not a list; no entries read")
        raw = []
    rows, bad = [], 0
    for e in raw:
        if isinstance(e, dict) and ("collective_seq_id" in e or "profiling_name" in e):
            rows.append(_entry_row(e, pg_names, rd))
        else:
            bad += 1
    if bad:
        warnings.append(f"{p}: skipped {bad} entries that are not entry records")
    entries = entries_frame(rows)
    if "entries" not in obj:
        warnings.append(f"{p}: no entries: the recorder's buffer was empty when it dumped (PyTorch then omits the "
                        "'entries' key) or the dump excluded collectives; only pg_config/pg_status are known")
    backends = sorted({n.split(":", 1)[0] for n in entries["profiling_name"] if ":" in n})
    backend = backends[0] if len(backends) == 1 else ",".join(backends)

    rank, source = None, "none"
    raw_rank = obj.get("rank")
    if (r := valid_rank(raw_rank)) is not None:
        rank, source = r, "dump"
    elif (r := rank_from_name(p)) is not None:
        rank, source = r, "filename"
    else:
        warnings.append(f"{p}: rank unknown (no usable 'rank' key, no numeric file-name suffix)")
    if raw_rank is not None and source != "dump":
        warnings.append(f"{p}: 'rank' {short(raw_rank if not isinstance(raw_rank, str) else raw_rank[:40])} is not a rank (an integer 0 <= rank < "
                        f"{MAX_RANK}); " + (f"using the file-name rank {rank}" if rank is not None else "ignored"))
    if (w := rd.warning(p)) is not None:
        warnings.append(w)
    _check_wrap(p, entries, warnings)
    comm = obj.get("comm_lib_version", obj.get("nccl_version", ""))
    return FlightRecorderDump(path=p, rank=rank, version=version, pg_config=pg_config, pg_status=pg_status,
                              entries=entries, warnings=warnings, rank_source=source, format=fmt,
                              comm_lib_version=rd.text(comm or "", "comm_lib_version")[:40], backend=backend,
                              has_entries="entries" in obj)


def _read_pg_config(p: str, cfg: Any, warnings: list[str], rd: _Reader) -> tuple[dict, dict[str, str]]:
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
            warnings.append(f"{p}: pg_config[{short(key)}] is not a dict; ignored")
            continue
        key = rd.text(key, "pg_config")
        name = rd.text(v.get("name", key) or key, "pg_config")
        ranks = parse_ranks(v.get("ranks"))
        if v.get("ranks") is not None and ranks is None:
            warnings.append(f"{p}: pg_config[{short(key)}] ranks {rd.text(v.get('ranks'), 'pg_config')[:200]} unreadable")
        elif ranks and not all(0 <= x < MAX_RANK for x in ranks):
            warnings.append(f"{p}: pg_config[{short(key)}] lists ranks outside 0..{MAX_RANK - 1}; membership ignored")
            ranks = None
        out[name] = {"desc": rd.text(v.get("desc", "") or "", "pg_config"), "ranks": ranks}
        names[name] = out[name]["desc"]
    return out, names


def _read_pg_status(p: str, st: Any, warnings: list[str], rd: _Reader) -> dict[str, dict[str, int]]:
    """pg_status → {pg_id: {last_enqueued, last_started, last_completed}} as ints (-1 unknown).

    Keys are the rank-local pg_ids (see FlightRecorderDump); the values are the sequence number of the last work
    enqueued / started / completed in that group, in whichever counter that work used (analyzer/hang/inputs.py).
    """
    out: dict[str, dict[str, int]] = {}
    if st is None:
        return out
    if not isinstance(st, dict):
        warnings.append(f"{p}: pg_status is a {type(st).__name__}, not a dict; ignored")
        return out
    for pg, v in st.items():
        if isinstance(v, dict):
            out[rd.text(pg, "pg_status")] = {k: rd.int(v.get(f"{k}_collective", v.get(k)), "pg_status")
                                             for k in ("last_enqueued", "last_started", "last_completed")}
    return out


def _check_wrap(p: str, entries: Table, warnings: list[str]) -> None:
    """Note a ring buffer that wrapped: the first collective of a group has seq > 1."""
    if entries.empty:
        return
    coll = entries[~entries["is_p2p"] & (entries["collective_seq_id"] > 0)]
    first = {k: int(x["collective_seq_id"].min()) for k, x in coll.groups("pg_name")}
    wrapped = {k: v for k, v in first.items() if v > 1}
    if len(wrapped):
        warnings.append(f"{p}: ring buffer wrapped (older entries dropped); first seq per group: "
                        + ", ".join(f"{k}={v}" for k, v in wrapped.items()))
