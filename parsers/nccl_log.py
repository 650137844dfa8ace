"""NCCL debug logs (NCCL_DEBUG=INFO, 2.3 → 2.30) and PyTorch watchdog stderr → typed tables.

One pass over the lines, any launcher prefix, salvaging damaged lines. Line families and their regexes
live in `nccl_messages` (NCCL) and `watchdog_log` (PyTorch); process state and tables live in `nccl_state`.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path


from parsers.errors import InputError
from parsers.nccl_envelope import (LEVEL_MARKERS, MAX_LINE_BYTES, clean_line, collect_rejected_ints, match_envelope,
                                   stop_collecting_rejected_ints)
from parsers.safe_open import open_input
from parsers.trace_bytes import GZIP_MAGIC, BlockReader
from parsers.nccl_messages import NCCL_TESTS_FAIL, NCCL_TESTS_RANK, VERSION, classify_message
from parsers.nccl_state import CHANNEL_COLUMNS, LogState
from parsers.table import Table
from parsers.watchdog_log import PT_MARKERS, parse_pytorch_line

HEAD_BYTES = 65536
_SNIFF_PT = re.compile(
    rb"ProcessGroupNCCL\.cpp:\d+\]|Watchdog caught collective operation timeout|NCCL version \d+\.\d+\.\d+\+cuda"
    rb"|NCCL error in: \S+ProcessGroupNCCL"
)


@dataclass
class NcclLog:
    """Tables from one NCCL / watchdog log; every table keeps its columns even when empty."""

    path: str
    processes: Table
    communicators: Table
    connections: Table
    networks: Table
    env: Table
    colls: Table
    warns: Table
    watchdog: Table
    unrecognised: int
    n_lines: int
    warnings: list[str] = field(default_factory=list)
    family_counts: dict[str, int] = field(default_factory=dict)
    #: the per-communicator channel summary lines (`N coll channels, … nvls channels, … p2p channels …`; -1 when the
    #: NCCL version does not print that count), one row per line
    channels: Table = field(default_factory=lambda: Table.empty_of(CHANNEL_COLUMNS))


def looks_like_nccl_log(head: bytes) -> bool:
    """True when the first bytes of a file hold NCCL INFO/WARN lines or ProcessGroupNCCL/watchdog lines."""
    head = head[:HEAD_BYTES]
    if _SNIFF_PT.search(head):
        return True
    for line in head.split(b"\n"):
        if b"NCCL INFO" in line or b"NCCL WARN" in line:
            env = match_envelope(line.decode("utf-8", "replace").rstrip())
            if env is not None and env.group("level") in ("INFO", "WARN"):
                return True
    return False


def parse_nccl_log(path: str | Path) -> NcclLog:
    """Parse one log file; raises InputError only when the file cannot be opened or read at all."""
    p = Path(path)
    try:
        with open_input(p) as fh:
            head = fh.read(HEAD_BYTES)
            gz = head.startswith(GZIP_MAGIC)
            if not gz:
                fh.seek(0)
                log = parse_nccl_lines(bounded_lines(fh), path=str(p))
        if gz:  # a gzipped log is read inflated (discovery classified it by its inflated head)
            reader = BlockReader(p, block_bytes=1 << 20)
            first: list[bytes] = []
            log = parse_nccl_lines(block_lines(reader.blocks(), first), path=str(p))
            head = first[0][:HEAD_BYTES] if first else b""
            for why in (reader.gzip_error, reader.gzip_note):
                if why:
                    log.warnings.append(f"{p}: {why}")
    except (OSError, MemoryError) as exc:
        raise InputError(p, f"cannot read file ({exc.__class__.__name__}: {exc.strerror or exc})") from exc
    nul = head.count(b"\0")
    if nul and not log.family_counts:
        log.warnings.insert(0, f"{p}: looks like a binary file ({nul} NUL bytes in the first {len(head)} bytes), "
                               "not an NCCL log; nothing extracted")
    return log


def bounded_lines(fh, limit: int = MAX_LINE_BYTES) -> Iterator[bytes]:
    """The lines of a binary file, each at most ``limit + 1`` bytes: the rest of a longer line is skipped unread."""
    while True:
        line = fh.readline(limit + 1)
        if not line:
            return
        if len(line) > limit and not line.endswith(b"\n"):
            while True:  # skip the rest of the physical line in bounded reads
                rest = fh.readline(limit)
                if not rest or rest.endswith(b"\n"):
                    break
        yield line


def block_lines(blocks: Iterable[bytes], first: list[bytes] | None = None,
                limit: int = MAX_LINE_BYTES) -> Iterator[bytes]:
    """Lines of a stream of byte blocks, each at most ``limit + 1`` bytes (the rest of a longer line skipped)."""
    carry = bytearray()
    skipping = False
    for block in blocks:
        if first is not None and not first:
            first.append(block)
        start = 0
        while True:
            nl = block.find(b"\n", start)
            if nl < 0:
                if not skipping:
                    carry += block[start:start + limit + 1 - len(carry)]
                    if len(carry) > limit:
                        yield bytes(carry)
                        carry.clear()
                        skipping = True
                break
            if skipping:
                skipping = False
            else:
                if len(carry) + nl + 1 - start > limit + 1:
                    carry += block[start:start + limit + 1 - len(carry)]
                    yield bytes(carry)
                else:
                    carry += block[start:nl + 1]
                    yield bytes(carry)
                carry.clear()
            start = nl + 1
    if carry:
        yield bytes(carry)


def parse_nccl_lines(lines: Iterable[bytes | str], path: str = "<memory>") -> NcclLog:
    """Parse lines (bytes decoded as UTF-8 with replacement, or str) into an NcclLog; one bad line never sinks it."""
    parser = _LineParser(path)
    token = collect_rejected_ints(parser.state.rejected)
    try:
        lineno = 0
        for lineno, raw in enumerate(lines, 1):
            parser.feed(lineno, raw)
        return parser.finish(lineno)
    finally:
        stop_collecting_rejected_ints(token)


class _LineParser:
    """Streaming classifier: holds one possibly-wrapped line back so its continuation can be joined."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.state = LogState(path)
        self.pending: tuple[int, str, tuple, int] | None = None  # (line, text, record, out-of-range ints)
        self.last_error_row: dict | None = None
        self.last_newline = True
        self.last_commit: tuple[int, str, str | None] | None = None

    def feed(self, lineno: int, raw: bytes | str) -> None:
        """Classify and record one physical line; a line whose handling fails is counted, not raised."""
        try:
            self._feed(lineno, raw)
        except MemoryError:
            raise
        except Exception as exc:  # noqa: BLE001 - salvage promise: one line must not lose the file
            self.state.rejected.clear()
            text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else str(raw)
            self.state.note_line_error(lineno, text.rstrip("\r\n"), exc)

    def _feed(self, lineno: int, raw: bytes | str) -> None:
        """Classify and record one physical line."""
        if len(raw) > MAX_LINE_BYTES:
            raw = raw[:MAX_LINE_BYTES]
            self.state.note_long_line(lineno)
        if isinstance(raw, bytes):
            self.last_newline = raw.endswith(b"\n")
            text = raw.decode("utf-8", errors="replace")
        else:
            self.last_newline = True
            text = raw
        if "\ufffd" in text:
            self.state.bad_utf8 += 1
        text = text.rstrip("\r\n")
        segments = text.split("\r") if "\r" in text else (text,)
        for seg in segments:
            self._feed_text(lineno, clean_line(seg))

    def _feed_text(self, lineno: int, text: str) -> None:
        """Handle one cleaned text segment of a line."""
        if not text.strip():
            self._flush()
            return
        if self.last_error_row is not None:
            self.last_error_row["message"] += " " + text.strip()
            self.last_error_row = None
            self.state.count("last_error_text")
            return
        rec, nbad = self._classify(text)
        if self.pending is not None:
            cont = rec is None or (rec[0] == "pytorch" and not text.lstrip().startswith(("[", "(")))
            if cont and self._try_join(text):
                return
            self._flush()
        if _is_partial(rec):
            self.pending = (lineno, text, rec, nbad)
            return
        self._commit(lineno, text, rec, nbad)

    def _classify(self, text: str) -> tuple[tuple | None, int]:
        """classify_line plus the number of its integers that did not fit int64."""
        rejected = self.state.rejected
        rejected.clear()
        rec = classify_line(text)
        nbad = len(rejected)
        rejected.clear()
        return rec, nbad

    def _try_join(self, text: str) -> bool:
        """Join a held partial line with this continuation when that yields a complete record."""
        lineno, held, _, _ = self.pending
        spaced, glued = held + " " + text.lstrip(), held + text
        for joined in ((spaced, glued) if held[-1:] in ":,;)" else (glued, spaced)):
            rec, nbad = self._classify(joined)
            if rec is not None and not _is_partial(rec):
                self.pending = None
                self.state.joined.append(lineno)
                self._commit(lineno, joined, rec, nbad)
                return True
        return False

    def _flush(self) -> None:
        """Record the held line as it is."""
        if self.pending is not None:
            lineno, text, rec, nbad = self.pending
            self.pending = None
            self._commit(lineno, text, rec, nbad)

    def _commit(self, lineno: int, text: str, rec: tuple | None, nbad: int = 0) -> None:
        """Apply one classified record to the state; `nbad` out-of-range ints were already met classifying it."""
        st = self.state
        st.rejected.clear()
        self._apply(lineno, text, rec, nbad)
        st.note_out_of_range(lineno, nbad + len(st.rejected))
        st.rejected.clear()

    def _apply(self, lineno: int, text: str, rec: tuple | None, nbad: int) -> None:
        """Record one classified line in the state tables."""
        st = self.state
        self.last_commit = (lineno, text, None if rec is None else (rec[2] if rec[0] == "nccl" else rec[0]))
        if rec is None:
            st.unrecognised += 1
            st.note_unrecognised(lineno, text)
            return
        kind = rec[0]
        if kind == "nccl":
            st.add_nccl(lineno, rec[1], rec[2], rec[3])
        elif kind == "banner":
            st.add_banner(lineno, text, rec[1])
        elif kind == "pytorch":
            rows = st.add_pytorch(lineno, rec[1], rec[2])
            if not nbad and any(r["kind"] == "timeout" and r["seq"] < 0 for r in rows):  # not cut: seq too big
                st.cut.append((lineno, text[:120]))
            if rows and rows[-1]["kind"] == "last_error" and rows[-1]["message"].rstrip() == "Last error:":
                self.last_error_row = rows[-1]
        elif kind == "tests_rank":
            st.add_tests_rank(lineno, rec[1])
        elif kind == "tests_fail":
            st.add_tests_fail(lineno, text, rec[1])

    def finish(self, n_lines: int) -> NcclLog:
        """Flush held state and build the tables."""
        try:
            self._flush()
        except MemoryError:
            raise
        except Exception as exc:  # noqa: BLE001 - same salvage rule as `feed`
            self.state.rejected.clear()
            self.state.note_line_error(n_lines, self.last_commit[1] if self.last_commit else "", exc)
        last = self.last_commit
        if not self.last_newline and last is not None and last[2] in (None, "other"):
            self.state.cut.append((last[0], last[1]))
        return self.state.build(n_lines, NcclLog)


def classify_line(text: str) -> tuple | None:
    """Pure classification of one cleaned line; None when it is neither NCCL nor PyTorch output."""
    if any(mk in text for mk in LEVEL_MARKERS):
        m = match_envelope(text)
        if m:
            msg = m.group("msg") or ""
            family, mm = classify_message(msg, m.group("level"))
            return ("nccl", m, family, mm)
    if "NCCL version" in text and "+cuda" in text:
        vm = VERSION.search(text)
        if vm:
            return ("banner", vm)
    if any(mk in text for mk in PT_MARKERS):
        prefix, rows = parse_pytorch_line(text)
        if rows:
            return ("pytorch", prefix, rows)
    if text.lstrip().startswith("#") and " Pid " in text:
        tm = NCCL_TESTS_RANK.match(text.lstrip())
        if tm:
            return ("tests_rank", tm)
    if "Test NCCL failure" in text:
        fm = NCCL_TESTS_FAIL.search(text)
        if fm:
            return ("tests_fail", fm)
    return None


def _is_partial(rec: tuple | None) -> bool:
    """A record that may be the first half of a wrapped line."""
    if rec is None:
        return False
    if rec[0] == "nccl":
        return rec[2] in ("cut", "other")
    if rec[0] == "pytorch":
        return any(r["kind"] in ("timeout", "teardown") and r["seq"] < 0 and "WorkNCCL" not in r["message"]
                   and r["message"].endswith(("timeout:", "timeout", "exception:"))
                   for r in rec[2])
    return False
