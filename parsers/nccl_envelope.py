"""NCCL debug-line envelope (`host:pid:tid [dev] NCCL INFO …`) and launcher-prefix tags.

Separate from message parsing so the one regex that must tolerate every launcher wrapping
lives in one small place (see shared reference nccl-log-formats.md §1).
"""
from __future__ import annotations

import re
from contextvars import ContextVar
from dataclasses import dataclass

#: A physical line longer than this many bytes is cut to its first MAX_LINE_BYTES (counted in a warning): no
#: NCCL or PyTorch line comes near it, and a line is never held whole in memory nor fed whole to a pattern.
MAX_LINE_BYTES = 65536
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
# Raw texts of integers rejected by `int64` during the parse in progress (None outside a parse).
_REJECTED: ContextVar[list[str] | None] = ContextVar("nccl_rejected_ints", default=None)

# The envelope after any launcher wrapping (MPI tags, srun labels, Ray, timestamps, glued fragments). It is only
# ever matched at a known start (see `match_envelope`), never searched for with a lazy prefix: that search is
# quadratic on long lines without colons. Free-text groups are bounded for the same reason.
_ENVELOPE = re.compile(
    r"(?:\[(?P<ts>\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?)\] )?"
    r"(?P<host>[^\s:]*):(?P<pid>\d+):(?P<tid>\d+) "
    r"(?:\[(?P<dev>-?\d+)\] )?"
    r"(?:(?P<ttime>\d+\.\d+) )?"
    r"(?:(?P<src>[^\s]{1,512}):(?P<srcline>\d+)(?: \((?P<func>[^)]{0,512})\))? )?"
    r"NCCL (?P<level>INFO|WARN|TRACE|CALL)(?: (?P<msg>.*))?$"
)
# Where an envelope can end its `host:pid:tid ` part; candidates are tried left to right.
_PID_TID = re.compile(r":\d+:\d+ ")
_HOST_REVERSED = re.compile(r"[^\s:]*")
_TS_BEFORE = re.compile(r"\[\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?\] \Z")
#: At most this many `:pid:tid ` candidates are tried on one line (real lines have one or two).
MAX_ENVELOPE_TRIES = 256


class Envelope:
    """One matched NCCL envelope: the launcher text before it and the envelope's groups (an re.Match-like view)."""

    __slots__ = ("launcher", "m")

    def __init__(self, launcher: str, m: re.Match) -> None:
        self.launcher, self.m = launcher, m

    def group(self, name: int | str = 0) -> str | None:
        """A named group ("launcher" included), or the whole line for 0."""
        if name == 0:
            return self.m.string
        if name == "launcher":
            return self.launcher
        return self.m.group(name)

    def groups(self) -> tuple:
        """(launcher, ts, host, pid, tid, dev, ttime, src, srcline, func, level, msg), as NCCL_LINE.groups() was."""
        return (self.launcher,) + self.m.groups()


def match_envelope(text: str) -> Envelope | None:
    """The envelope of an NCCL debug line (`host:pid:tid [dev] … NCCL LEVEL msg`) after any launcher prefix.

    Equivalent to matching ``^(?P<launcher>.*?)<envelope>`` but linear in the line: the envelope can only start
    where a `:pid:tid ` candidate's host run starts (or at a timestamp just before it), so each candidate is
    matched once at that one position. Host runs of successive candidates do not overlap.
    """
    prev = 0
    for tries, c in enumerate(_PID_TID.finditer(text)):
        if tries >= MAX_ENVELOPE_TRIES:
            return None
        j = c.start()
        start = j - _HOST_REVERSED.match(text[prev:j][::-1]).end()
        prev = c.end()
        if start >= 2 and text[start - 2:start] == "] ":
            t = _TS_BEFORE.search(text, max(0, start - 40), start)
            if t:
                start = t.start()
        m = _ENVELOPE.match(text, start)
        if m:
            return Envelope(text[:start], m)
    return None


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
_RAY_REPEAT = re.compile(r"\[repeated \d+x across cluster\]$")
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
        i = text.rfind("[repeated ")
        if i >= 0 and _RAY_REPEAT.match(text, i):
            text = text[:i].rstrip()
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
