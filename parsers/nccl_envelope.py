"""NCCL debug-line envelope (`host:pid:tid [dev] NCCL INFO …`) and launcher-prefix tags.

Separate from message parsing so the one regex that must tolerate every launcher wrapping
lives in one small place (see shared reference nccl-log-formats.md §1).
"""
from __future__ import annotations

import re
from contextvars import ContextVar
from dataclasses import dataclass

_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
# Raw texts of integers rejected by `int64` during the parse in progress (None outside a parse).
_REJECTED: ContextVar[list[str] | None] = ContextVar("nccl_rejected_ints", default=None)

# Lazy `launcher` absorbs any wrapper (MPI tags, srun labels, Ray, timestamps, glued fragments).
NCCL_LINE = re.compile(
    r"^(?P<launcher>.*?)"
    r"(?:\[(?P<ts>\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?)\] )?"
    r"(?P<host>[^\s:]*):(?P<pid>\d+):(?P<tid>\d+) "
    r"(?:\[(?P<dev>-?\d+)\] )?"
    r"(?:(?P<ttime>\d+\.\d+) )?"
    r"(?:(?P<src>[^\s]+):(?P<srcline>\d+)(?: \((?P<func>[^)]*)\))? )?"
    r"NCCL (?P<level>INFO|WARN|TRACE|CALL)(?: (?P<msg>.*))?$"
)
LEVEL_MARKERS = ("NCCL INFO", "NCCL WARN", "NCCL TRACE", "NCCL CALL")

# Launcher tags that carry a rank, tried in order on the launcher text.
_MPI = re.compile(r"\[\d+,(?P<r>\d+)\]<std(?:out|err)>:")
_TORCHRUN = re.compile(r"\[default(?P<r>\d+)\]:")
_PTRANK = re.compile(r"\[rank(?P<r>\d+)\]:")
_SRUN = re.compile(r"^\s*(?P<r>\d+): ")
_RANKTAG = re.compile(r"^\s*\[(?P<r>\d+)\] $")  # whole prefix only: `[1763]   1%|…` is a viewer line number
_RAY = re.compile(r"\((?P<actor>[\w.:-]+) pid=(?P<pid>\d+)(?:, ip=(?P<ip>[\d.:a-fA-F]+))?\)")
_PDSH = re.compile(r"^\s*(?P<h>[A-Za-z][\w.-]*): ")
LAUNCHER_TS = re.compile(
    r"(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?Z?"
    r"|[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} \d{4})"
)
_RAY_REPEAT = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")
_BOX = "│┃║"


@dataclass(frozen=True)
class LauncherTag:
    """What a launcher wrapper told us: its kind, a rank (-1 none), a pid (-1 none), a timestamp."""

    kind: str
    rank: int
    pid: int
    timestamp: str


NO_TAG = LauncherTag("none", -1, -1, "")


def int64(text: str | None, base: int = 10) -> int:
    """Integer of a log field when it fits an int64 column; else -1 (the columns' "unknown"), noting the reject.

    Every integer taken from a log line goes through here, so one absurd value (a 22-digit count, a garbled
    opCount) costs that value only, not the whole file. An absent field (None or "") is -1 and not a reject.
    """
    if not text:
        return -1
    try:
        v = int(text, base)
        if _I64_MIN <= v <= _I64_MAX:
            return v
    except (OverflowError, ValueError, TypeError):
        pass
    rejected = _REJECTED.get()
    if rejected is not None:
        rejected.append(str(text)[:40])
    return -1


def collect_rejected_ints(into: list[str] | None):
    """Make `int64` append its rejects to `into` (None: stop); returns a token for `_REJECTED.reset`."""
    return _REJECTED.set(into)


def stop_collecting_rejected_ints(token) -> None:
    """Undo `collect_rejected_ints`."""
    _REJECTED.reset(token)


def clean_line(text: str) -> str:
    """Strip trailing blanks, k9s box borders and Ray's `[repeated Nx]` suffix from one line."""
    text = text.rstrip()
    if text and text.lstrip()[:1] in _BOX and text[-1] in _BOX:
        text = text[:-1].rstrip()
    if text.endswith("cluster]"):
        text = _RAY_REPEAT.sub("", text)
    return text


def parse_launcher(prefix: str) -> LauncherTag:
    """Classify the text a launcher put before a log line; returns NO_TAG for an empty prefix."""
    if not prefix or prefix.isspace():
        return NO_TAG
    ts_m = LAUNCHER_TS.search(prefix)
    ts = ts_m.group(1) if ts_m else ""
    m = _MPI.search(prefix)
    if m:
        return LauncherTag("mpi", int64(m.group("r")), -1, ts)
    m = _PTRANK.search(prefix)
    if m:
        return LauncherTag("pytorch", int64(m.group("r")), -1, ts)
    m = _TORCHRUN.search(prefix)
    if m:
        return LauncherTag("torchrun", int64(m.group("r")), -1, ts)
    m = _RAY.search(prefix)
    if m:
        return LauncherTag("ray", -1, int64(m.group("pid")), ts)
    m = _SRUN.match(prefix)
    if m:
        return LauncherTag("srun", int64(m.group("r")), -1, ts)
    m = _RANKTAG.match(prefix)
    if m:
        return LauncherTag("rank_tag", int64(m.group("r")), -1, ts)
    if ts:
        return LauncherTag("timestamp", -1, -1, ts)
    m = _PDSH.match(prefix)
    if m:
        return LauncherTag("pdsh", -1, -1, "")
    return LauncherTag("other", -1, -1, "")
