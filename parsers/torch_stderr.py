"""torchrun / PyTorch / gloo / NCCL / CUDA stderr → tables: error events, Python tracebacks, torchrun's failure table.

One pass in bounded blocks; a line reaches Python only when it holds a guard literal (or while a traceback or a
failure table is open), its launcher prefix is peeled (`stderr_prefix`), its content classified (`stderr_events`)
and its stream's tracebacks and failure table assembled (`stderr_structure`). No opinions: which rank is the
culprit is for the analyzer. Columns: docs/stderr.md.
"""
from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from parsers.errors import InputError
from parsers.safe_open import open_input
from parsers.file_names import rank_from_file_name
from parsers.stderr_events import GUARD, candidate_mask, classify, exc_head
from parsers.stderr_prefix import peel
from parsers.stderr_structure import CHAINED, MAX_TEXT, TB_HEAD, FailureTable, Traceback
from parsers.numbers import int_column
from parsers.table import Table

MAX_LINE = 64 * 1024    # bytes of one line that are read; the rest of a longer line is skipped and counted
BLOCK = 1024 * 1024      # bytes read at a time
MAX_ROWS_PER_KIND = 1000  # event rows of one (kind, rank) per file; more are counted in a warning
MAX_SEGMENTS = 64       # carriage-return segments of one line looked at (the first and last halves)

EVENT_COLUMNS: dict[str, object] = {
    "line": -1, "rank": -1, "local_rank": -1, "label": "", "pid": -1, "kind": "", "exc_type": "", "message": "",
    "peer": "", "peer_rank": -1, "tag": -1, "group": "", "seq": -1, "op": "", "timeout_ms": -1, "nccl_version": "",
    "reason": "", "where": "", "code": -1, "bytes_a": -1, "bytes_b": -1, "bytes_requested": -1, "bytes_total": -1,
    "bytes_free": -1, "bytes_allocated": -1, "bytes_reserved_unallocated": -1, "bytes_max_allocated": -1,
    "bytes_reserved": -1, "bytes_max_reserved": -1, "device": "", "source": "stream",
    "text": "",
}
TRACEBACK_COLUMNS: dict[str, object] = {
    "rank": -1, "local_rank": -1, "label": "", "line": -1, "end_line": -1, "exc_type": "", "message": "",
    "user_file": "", "user_line": -1, "user_func": "", "frames": 0, "chained": False, "inner_file": "",
    "inner_line": -1, "inner_func": "", "source": "stream", "user_stack": "",
}
FAILURE_COLUMNS: dict[str, object] = {
    "rank": -1, "local_rank": -1, "host": "", "exitcode": -1, "signal": "", "pid": -1, "time": "", "error_file": "",
    "root_cause": False, "line": -1, "exc_type": "", "message": "", "label": "",
}
_INT_COLUMNS = {c for c, v in {**EVENT_COLUMNS, **TRACEBACK_COLUMNS, **FAILURE_COLUMNS}.items()
                if isinstance(v, int) and not isinstance(v, bool)}
_DIGITS = re.compile(r"\d{1,7}")

_CTRL = re.compile(r"\x1b\[[0-9;?]{0,32}[ -/]{0,4}[@-~]|\x1b[@-Z\\-_]|[\x00-\x08\x0a-\x1f\x7f-\x9f]")
# torchrun's own log lines (glog-like since torch 2.2, `LEVEL:logger:` before): evidence of a launcher's console
_AGENT_LINE = re.compile(r"(?:[IWEF]\d{4} \d\d:\d\d:\d\d\.\d{1,9} {1,4}\d{1,10} |(?:INFO|WARNING|ERROR):)"
                         r"torch[/.]distributed[/.]")
# ProcessGroupNCCL's log prefix for the default group, whose group rank is the global rank
_DEFAULT_PG_RANK = re.compile(r"\[PG (?:ID )?0 (?:PG GUID [^\s\]()]{1,64} ?)?\(default_pg\) Rank (\d{1,7})\]")
# `[Rank N]` that c10d puts before its own messages (the watchdog before torch 2.2 printed no group, gloo's
# monitoredBarrier `[Rank 0]: Rank 2 failed to pass …`), after any glog prefix: the rank of the process that printed
_RANK_TAG = re.compile(r"(?:\[?[EWIF]\d{0,4}[ \d:.]{0,24}(?:\d{1,10} )?[\w./-]{1,200}:\d{1,7}\] ?)?\[Rank (\d{1,7})\]")
_RANK_ANY = re.compile(r"\[rank(\d{1,7})\]: ?")
_LOGDIR = re.compile(r"attempt_\d{1,6}[/\\](\d{1,7})[/\\](?:stderr|stdout)\.log$")
_SNIFF = re.compile(
    rb"Traceback \(most recent call last\):|\[rank\d{1,7}\]:|\[default\d{1,7}\]:|torch[/.]distributed[/.]elastic"
    rb"|ChildFailedError|gloo/transport|ProcessGroupGloo|\[c10d\]|TCPStore|Dist(?:Backend|Store|Network)Error"
    rb"|CUDA out of memory|OutOfMemoryError|CUDA error: |NCCL error|NVRM: Xid|Out of memory: Kill"
    rb"|Signal \d{1,3} \(SIG|Setting OMP_NUM_THREADS environment variable|oom[-_]kill event|terminate called after"
    rb"|memory \(MB\) \| allocated: "  # Megatron-LM's per-rank memory report
)
_NOT_LOG_SUFFIXES = {".py", ".pyi", ".md", ".rst", ".html", ".htm", ".ipynb", ".json", ".yaml", ".yml", ".toml",
                     ".c", ".cc", ".cpp", ".h", ".hpp", ".cu", ".sh", ".csv", ".tex", ".cfg", ".ini"}
SNIFF_TAIL = 64 * 1024


@dataclass
class StderrLog:
    """Tables from one stderr file; every table keeps its columns even when empty (docs/stderr.md)."""

    path: str
    events: Table
    tracebacks: Table
    failures: Table
    ranks: list[int]
    n_lines: int
    #: the one rank this file belongs to (file name, torchrun log-dir layout or a single `[rankN]:` tag), else None
    rank: Optional[int] = None
    warnings: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        """True when nothing was recognised."""
        return self.events.empty and self.tracebacks.empty and self.failures.empty


def looks_like_stderr(head: bytes, path: str | Path | None = None) -> bool:
    """True for text whose first (or, for a plain file, last) bytes hold tracebacks, torchrun, c10d, gloo, CUDA."""
    if path is not None and Path(path).suffix.lower() in _NOT_LOG_SUFFIXES:
        return False
    if head[:4096].count(b"\x00") > 16:
        return False
    if _SNIFF.search(head):
        return True
    if path is None or Path(path).suffix.lower() in (".gz", ".gzip", ".zst", ".xz", ".bz2"):
        return False
    try:
        with open_input(path) as fh:
            size = fh.seek(0, 2)
            if size <= len(head):
                return False
            fh.seek(max(0, size - SNIFF_TAIL))
            tail = fh.read(SNIFF_TAIL)
    except (OSError, InputError):
        return False
    return tail[:4096].count(b"\x00") <= 16 and bool(_SNIFF.search(tail))


def parse_stderr(path: str | Path, all_lines: bool = False) -> StderrLog:
    """Parse one stderr file (plain or gzip); raises InputError only when it cannot be opened or read at all.

    `all_lines` sends every line through the classifiers instead of only those holding a guard literal (the tables
    are the same: tests check that the guard loses nothing).
    """
    p = Path(path)
    try:
        with open_input(p) as raw:  # a FIFO or device: InputError, never a blocking open
            magic = raw.read(2)
            raw.seek(0)
            fh = _GzipReader(raw) if magic == b"\x1f\x8b" else raw
            return parse_stderr_blocks(_read_blocks(fh), str(p), all_lines)
    except (OSError, MemoryError) as exc:
        raise InputError(p, f"cannot read file ({exc.__class__.__name__}: {getattr(exc, 'strerror', None) or exc})") \
            from exc


def parse_stderr_lines(lines: Iterable[bytes | str], path: str = "<memory>") -> StderrLog:
    """Parse lines (without or with their newline) held in memory; the same tables as `parse_stderr`."""
    data = [ln.encode("utf-8", "surrogateescape") if isinstance(ln, str) else ln for ln in lines]
    blob = b"\n".join(x[:-1] if x.endswith(b"\n") else x for x in data)
    return parse_stderr_blocks(_read_blocks(_Bytes(blob + b"\n" if data else b"")), path)


class _GzipReader:
    """Inflates in small steps so that a truncated or corrupt gzip still yields everything before the damage."""

    STEP = 64 * 1024

    def __init__(self, raw) -> None:
        self.gz = gzip.GzipFile(fileobj=raw)
        self.error: BaseException | None = None

    def read(self, n: int) -> bytes:
        if self.error is not None:
            raise self.error
        parts, size = [], 0
        while size < n:
            try:
                part = self.gz.read1(min(self.STEP, n - size))
            except (OSError, EOFError, zlib.error) as exc:
                self.error = exc
                break
            if not part:
                break
            parts.append(part)
            size += len(part)
        if not parts and self.error is not None:
            raise self.error
        return b"".join(parts)


class _Bytes:
    """A minimal file object over bytes for `_read_blocks`."""

    def __init__(self, blob: bytes) -> None:
        self.blob, self.pos = blob, 0

    def read(self, n: int) -> bytes:
        out = self.blob[self.pos:self.pos + n]
        self.pos += len(out)
        return out


@dataclass
class _ReadStats:
    cut: int = 0
    first_cut: int = 0
    bad_utf8: int = 0
    first_bad: int = 0
    nul_lines: int = 0
    no_newline: bool = False
    read_error: str = ""


def _read_blocks(fh) -> Iterator[tuple[bytes, list[bytes], _ReadStats]]:
    """(bytes, their lines without newlines, stats) per block; longer lines cut to MAX_LINE; damage counted, not raised.

    The bytes are those the lines were split from (a line cut to MAX_LINE keeps its index), for the vectorised filter.
    """
    stats = _ReadStats()
    carry, skipping, base = b"", False, 0
    while True:
        try:
            chunk = fh.read(BLOCK)
        except (OSError, EOFError, zlib.error) as exc:  # a damaged gzip: keep what inflated
            stats.read_error = f"{exc.__class__.__name__}: {exc}"
            chunk = b""
        if not chunk:
            break
        if skipping:
            nl = chunk.find(b"\n")
            if nl < 0:
                continue
            chunk, skipping = chunk[nl + 1:], False
        data = carry + chunk if carry else chunk
        lines = data.split(b"\n")
        carry = lines.pop()
        if len(carry) > MAX_LINE:
            lines.append(carry[:MAX_LINE])
            carry, skipping = b"", True
            _note_cut(stats, base + len(lines))
        if lines and len(data) > MAX_LINE and max(map(len, lines)) > MAX_LINE:
            for i, ln in enumerate(lines):
                if len(ln) > MAX_LINE:
                    lines[i] = ln[:MAX_LINE]
                    _note_cut(stats, base + i + 1)
        _note_damage(stats, data, lines, base)
        base += len(lines)
        yield data, lines, stats
    if carry:
        stats.no_newline = True
        _note_damage(stats, carry, [carry], base)
        yield carry, [carry], stats
    elif skipping:
        stats.no_newline = True
    yield b"", [], stats


def _note_cut(stats: _ReadStats, lineno: int) -> None:
    stats.cut += 1
    stats.first_cut = stats.first_cut or lineno


def _note_damage(stats: _ReadStats, data: bytes, lines: list[bytes], base: int) -> None:
    """Count lines holding bytes that are not UTF-8, or NUL bytes (cheap whole-block tests first)."""
    if not data.isascii():
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            for i, ln in enumerate(lines):
                if not ln.isascii():
                    try:
                        ln.decode("utf-8")
                    except UnicodeDecodeError:
                        stats.bad_utf8 += 1
                        stats.first_bad = stats.first_bad or base + i + 1
    if b"\x00" in data:
        stats.nul_lines += sum(1 for ln in lines if b"\x00" in ln)


def parse_stderr_blocks(blocks: Iterable[tuple[bytes, list[bytes], _ReadStats]], path: str,
                        all_lines: bool = False) -> StderrLog:
    """Run the parser over blocks of lines; `all_lines` sends every line through it (tests: the guard loses nothing)."""
    parser = _Parser(path)
    guard = GUARD.search
    lineno = 0
    stats = _ReadStats()
    for data, lines, stats in blocks:
        mask = None if all_lines else candidate_mask(data, len(lines))
        if mask is None and not all_lines and not parser.n_open:
            lineno += len(lines)  # no line of this block can hold anything and no traceback or table is open
            continue
        for i, raw in enumerate(lines):
            lineno += 1
            candidate = all_lines or (mask is not None and mask[i] and guard(raw) is not None)
            if candidate or parser.n_open:
                parser.line(lineno, raw, candidate)
    return parser.finish(lineno, stats)


class _Parser:
    """Per-file state: one traceback assembler per stream, one failure table per launcher label, the rows."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.n_open = 0
        self.streams: dict[tuple[str, int, int], Traceback] = {}
        self.tables: dict[str, FailureTable] = {}
        self.events: list[dict] = []
        self.tracebacks: list[dict] = []
        self.kind_counts: dict[tuple[str, int, int], int] = {}
        self.dropped: dict[str, int] = {}
        self.local_pairs: set[tuple[str, int, int]] = set()
        self.tag_ranks: set[int] = set()
        self.local_tags: set[tuple[str, int]] = set()
        self.agent_lines = 0
        self.cut_tracebacks: list[tuple[int, int]] = []

    # --- one line -------------------------------------------------------------------------------------------
    def line(self, lineno: int, raw: bytes, candidate: bool) -> None:
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        text = raw.decode("utf-8", "replace")
        if "\r" in text:
            segs = [s for s in text.split("\r") if s.strip()]
            if len(segs) > MAX_SEGMENTS:
                segs = segs[:MAX_SEGMENTS // 2] + segs[-MAX_SEGMENTS // 2:]
            for seg in segs:
                self._segment(lineno, seg, candidate)
        else:
            self._segment(lineno, text, candidate)

    def _segment(self, lineno: int, text: str, candidate: bool) -> None:
        if not text.isprintable():
            text = _CTRL.sub("", text.replace("\t", "    "))
        label, local, rank, mpi, body = peel(text)
        if rank < 0 and candidate and "[rank" in body:  # a tag glued after other text (tqdm, viewers)
            m = _RANK_ANY.search(body, 0, 4096)
            if m:
                rank, body = int(m.group(1)), body[m.end():]
        if rank < 0 and mpi >= 0:
            rank = mpi
        tagged = local >= 0 or rank >= 0
        if rank >= 0:
            self.tag_ranks.add(rank)
            if local >= 0:
                self.local_pairs.add((label, local, rank))
        if local >= 0:
            self.local_tags.add((label, local))
        source, consumed = "stream", False
        if not tagged:
            table = self.tables.get(label)
            if table is None and ("Failures:" in body or "Root Cause" in body):
                table = self.tables[label] = FailureTable()
            if table is not None:
                was = table.open
                consumed = table.feed(lineno, body)
                self.n_open += int(table.open) - int(was)
                if consumed:
                    source = "failure_table"
                    entry = table.entry
                    if entry is not None and entry["rank"] >= 0:  # a line of this entry's traceback field
                        rank, local, tagged = entry["rank"], entry["local_rank"], True
        done = None
        if not consumed:
            key = (label, local, rank)
            tb = self.streams.get(key)
            if tb is None and body.startswith((TB_HEAD, *CHAINED)):
                tb = self.streams[key] = Traceback()
            if tb is not None:
                was = tb.open
                done, cut = tb.feed(lineno, body)
                self.n_open += int(tb.open) - int(was)
                for row in (cut, done):
                    if row is not None:
                        self._add_traceback(row, label, local, rank)
        if not candidate:
            return
        if rank < 0 and "(default_pg) Rank " in body:
            m = _DEFAULT_PG_RANK.search(body, 0, 4096)
            if m:
                rank = int(m.group(1))  # the default group's rank is the global rank
        elif rank < 0 and "[Rank " in body and "[PG " not in body:
            m = _RANK_TAG.match(body)
            if m:
                rank = int(m.group(1))
        if _AGENT_LINE.match(body):
            self.agent_lines += 1
        rows = classify(body)
        closed = done is not None and done["end_line"] == lineno and done["exc_type"]
        exc = done["exc_type"] if closed else exc_head(body)
        if closed:
            rows.append(dict(kind="exception", message=done["message"]))
        for row in rows:
            row.setdefault("exc_type", exc)
            if local >= 0 and "local_rank" not in row:
                row["local_rank"] = local
            self._add_event(lineno, row, label, rank, tagged, source, text, body)

    def _add_event(self, lineno: int, row: dict, label: str, rank: int, tagged: bool, source: str, text: str,
                   body: str) -> None:
        key = (row["kind"], rank, row.get("local_rank", -1))
        n = self.kind_counts.get(key, 0) + 1
        self.kind_counts[key] = n
        if n > MAX_ROWS_PER_KIND:
            self.dropped[row["kind"]] = self.dropped.get(row["kind"], 0) + 1
            return
        row.update(line=lineno, rank=rank, label=label, source=source, _tagged=tagged, text=text[:MAX_TEXT])
        if not row.get("message"):
            row["message"] = body.strip()[:MAX_TEXT]
        self.events.append(row)

    def _add_traceback(self, row: dict, label: str, local: int, rank: int) -> None:
        row.update(rank=rank, local_rank=local, label=label, _tagged=local >= 0 or rank >= 0)
        if not row["exc_type"]:
            self.cut_tracebacks.append((row["line"], rank))
        self.tracebacks.append(row)

    # --- the end --------------------------------------------------------------------------------------------
    def finish(self, n_lines: int, stats: _ReadStats) -> StderrLog:
        for key, tb in self.streams.items():
            row = tb.finish(n_lines)
            if row is not None:
                self._add_traceback(row, *key)
        failures: list[dict] = []
        for label, table in self.tables.items():
            table.finish(n_lines)
            for r in table.rows:
                failures.append(dict(r, label=label))
            for r in table.tracebacks:
                self.tracebacks.append(dict(r, label=label, _tagged=True))
        events = _frame(self.events, EVENT_COLUMNS, extra=("_tagged",))
        tracebacks = _frame(self.tracebacks, TRACEBACK_COLUMNS, extra=("_tagged",))
        failures_df = _frame(failures, FAILURE_COLUMNS)
        warnings = self._warnings(n_lines, stats)
        file_rank, layout_local = self._file_rank()
        self._resolve(events, tracebacks, failures_df, file_rank, layout_local, warnings)
        ranks = set(self.tag_ranks)
        for df in (events, tracebacks, failures_df):
            ranks.update(int(r) for r in np.unique(df["rank"]) if r >= 0)
        if file_rank is not None:
            ranks.add(file_rank)
        events = _finalise(events.drop(columns="_tagged"), EVENT_COLUMNS)
        tracebacks = _finalise(tracebacks.drop(columns="_tagged"), TRACEBACK_COLUMNS)
        failures_df = _finalise(failures_df, FAILURE_COLUMNS)
        return StderrLog(self.path, events, tracebacks, failures_df, sorted(ranks), n_lines, file_rank, warnings)

    def _file_rank(self) -> tuple[Optional[int], int]:
        """(the rank of a single-rank file or None, the local rank of a torchrun log-dir worker file or -1)."""
        name_rank = rank_from_file_name(self.path)
        m = _LOGDIR.search(self.path.replace("\\", "/"))
        layout_local = int(m.group(1)) if m else -1
        if name_rank is not None and self.tag_ranks <= {name_rank}:
            return name_rank, layout_local
        combined = bool(self.tables) or self.agent_lines > 0 or len(self.local_tags) > 1
        if layout_local >= 0 and len(self.tag_ranks) == 1 and not combined:  # one worker's --log-dir file
            return next(iter(self.tag_ranks)), layout_local
        return None, layout_local

    def _resolve(self, events: Table, tracebacks: Table, failures: Table,
                 file_rank: Optional[int], layout_local: int, warnings: list[str]) -> None:
        """Fill unknown global ranks: tee local rank → rank, pid → rank (from this file), then the file rank."""
        pairs: dict[tuple[str, int], set[int]] = {}
        for label, local, rank in self.local_pairs:
            pairs.setdefault((label, local), set()).add(rank)
        pid_rank: dict[tuple[str, int], int] = {}
        for r in failures.itertuples(index=False):
            if r.rank >= 0 and r.local_rank >= 0:
                pairs.setdefault((r.label, r.local_rank), set()).add(int(r.rank))
            if r.rank >= 0 and r.pid >= 0:
                pid_rank[(r.label, int(r.pid))] = int(r.rank)
        ambiguous = sorted(k for k, v in pairs.items() if len(v) > 1)
        if ambiguous:
            shown = ", ".join(f"{lb or '-'}/{lr}" for lb, lr in ambiguous[:5])
            warnings.append(f"{self.path}: local rank(s) {shown} map to several global ranks (restarts?); "
                            "left unresolved")
        local_map = {k: next(iter(v)) for k, v in pairs.items() if len(v) == 1}
        srun_is_rank = not self.tables and not self.agent_lines and not self.local_tags
        for df in (events, tracebacks):
            if df.empty:
                continue
            rank, local = df["rank"], df["local_rank"]  # changed in place
            if layout_local >= 0:  # every line of a --log-dir worker file is that worker's
                local[local < 0] = layout_local
            unknown = rank < 0
            if local_map and unknown.any():
                keys = list(zip(df["label"].tolist(), local.tolist()))
                mapped = np.array([local_map.get(k, -1) for k in keys], dtype=np.int64)
                rank[unknown] = mapped[unknown]
            if "pid" in df.columns and pid_rank:
                unknown = (rank < 0) & (df["pid"] >= 0)
                if unknown.any():
                    mapped = np.array([pid_rank.get((lb, int(p)), -1) for lb, p in zip(df["label"], df["pid"])])
                    rank[unknown] = mapped[unknown]
            if file_rank is not None:
                # tee-tagged lines are the file's too when it holds one worker's tag only (a per-rank file of a
                # --tee run: `[default3]:` is rank 7's local rank on its node)
                mine = ~df["_tagged"].astype(bool) | (len(self.local_tags) == 1 and not self.tables
                                                      and not self.agent_lines)
                rank[(rank < 0) & mine] = file_rank
            if srun_is_rank:
                labelled = (rank < 0) & np.array([bool(_DIGITS.fullmatch(str(x))) for x in df["label"]], dtype=bool)
                rank[labelled] = [int(x) for x in df["label"][labelled]]

    def _warnings(self, n_lines: int, stats: _ReadStats) -> list[str]:
        p, out = self.path, []
        if n_lines == 0:
            out.append(f"{p}: empty file")
        if stats.read_error:
            out.append(f"{p}: reading stopped after line {n_lines} ({stats.read_error}); the rest is lost")
        if stats.cut:
            out.append(f"{p}: {stats.cut} line(s) longer than {MAX_LINE // 1024} KiB cut to that length "
                       f"(first at line {stats.first_cut})")
        if stats.bad_utf8:
            out.append(f"{p}: {stats.bad_utf8} line(s) with bytes that are not UTF-8, replaced "
                       f"(first at line {stats.first_bad})")
        if stats.nul_lines:
            out.append(f"{p}: {stats.nul_lines} line(s) with NUL bytes (binary data or a file cut by a crash?)")
        if stats.no_newline and n_lines:
            out.append(f"{p}: the last line has no newline (file cut mid-line?)")
        if self.cut_tracebacks:
            line, rank = self.cut_tracebacks[0]
            out.append(f"{p}: {len(self.cut_tracebacks)} traceback(s) without their exception line "
                       f"(first at line {line}, rank {rank if rank >= 0 else 'unknown'})")
        for kind, n in sorted(self.dropped.items()):
            out.append(f"{p}: {n} more '{kind}' line(s) of one rank beyond {MAX_ROWS_PER_KIND} not tabled")
        return out


def _frame(rows: list[dict], columns: dict[str, object], extra: tuple[str, ...] = ()) -> Table:
    """Rows → a table with every column (defaults for missing fields)."""
    cols = list(columns) + list(extra)
    if not rows:
        return Table.empty_of(cols, {c: _dtype(c, columns.get(c, False)) for c in cols})
    data = {c: [r.get(c, columns.get(c, False)) for r in rows] for c in cols}
    return Table({c: int_column(v) if _dtype(c, columns.get(c, False)) == "int64" else v for c, v in data.items()},
                 cols)


def _dtype(name: str, default: object) -> str:
    if isinstance(default, bool):
        return "bool"
    return "int64" if isinstance(default, int) else "object"


def _finalise(df: Table, columns: dict[str, object]) -> Table:
    """Compact dtypes: ints as int64 (bytes, pids, tags, seqs, timeouts) / int32 (the rest), flags as bool,
    text as Python strings."""
    out = df[list(columns)].copy()
    for c, default in columns.items():
        if isinstance(default, bool):
            out[c] = out[c].astype(bool)
        elif isinstance(default, int):
            out[c] = int_column(out[c], "int64" if c.startswith("bytes") or c in ("pid", "tag", "seq", "timeout_ms")
                                else "int32")
        else:
            out[c] = out[c].astype(object)
    return out
