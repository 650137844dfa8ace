"""Multi-line structures of stderr, fed one stream's lines at a time: Python tracebacks and torchrun's failure table.

A combined log interleaves the lines of many ranks; the caller routes each line to the assembler of its stream
(launcher label + rank tag), so each assembler sees only its own process's lines, in order.
"""
from __future__ import annotations

import re

from parsers.stderr_events import signal_name

MAX_FRAMELESS = 200   # lines of a stream after a traceback's last frame before it is closed as cut
MAX_TABLE_LINES = 2000  # lines of a failure table before it is closed as cut
MAX_TEXT = 1000
MAX_STACK = 16  # user-code frames kept per traceback as 'function:line' (outermost first): the call site

TB_HEAD = "Traceback (most recent call last):"
CHAINED = ("During handling of the above exception, another exception occurred:",
           "The above exception was the direct cause of the following exception:")
_FRAME = re.compile(r'\s{1,8}File "([^"]{1,4096})", line (\d{1,9})(?:, in (.{1,512}))?$')
_EXC_NAME = re.compile(r"((?:[A-Za-z_]\w{0,100}\.){0,12}[A-Za-z_]\w{0,100})(?=:|$)")
_STDLIB = re.compile(r"/lib(?:64)?/python\d\.\d{1,2}/")
_FIELD = re.compile(r"  (time|host|rank|exitcode|error_file|traceback)\s{0,16}: ?(.*)$")
_ENTRY = re.compile(r"\[(\d{1,7})\]:$")
_RANK_FIELD = re.compile(r"(-?\d{1,9})(?: \(local_rank: (-?\d{1,9})\))?")
_EXIT_FIELD = re.compile(r"(-?\d{1,9})(?: \(pid: (\d{1,10})\))?(?:\s{1,8}\((SIG[A-Z0-9]{1,12})\))?")
_SIGNAL_FIELD = re.compile(r"Signal (\d{1,3}) \((SIG\w{1,12})\) received by PID (\d{1,10})")


def is_library(path: str) -> bool:
    """A frame in torch, an installed package, the Python standard library or an entry-point script: not user code."""
    p = path.replace("\\", "/")
    if p.startswith("<"):
        return not p.startswith("<ipython")
    if "/site-packages/" in p or "/dist-packages/" in p or "/torch/" in p or p.startswith("torch/"):
        return True
    if _STDLIB.search(p) or "/Lib/" in p:
        return True
    return not p.endswith((".py", ".pyx", ".ipynb"))  # bin/torchrun, bin/deepspeed, …


class Traceback:
    """Assembles the Python tracebacks of one stream; `feed` returns a finished traceback row or None."""

    __slots__ = ("cur", "chained_next", "since_frame", "source")

    def __init__(self, source: str = "stream") -> None:
        self.cur: dict | None = None
        self.chained_next = False
        self.since_frame = 0
        self.source = source

    @property
    def open(self) -> bool:
        return self.cur is not None

    def feed(self, lineno: int, body: str) -> tuple[dict | None, dict | None]:
        """(a traceback closed by this line, or one cut by a new one) for one line of this stream."""
        cut = None
        if body.startswith(TB_HEAD):
            if self.cur is not None:
                cut = self._close(lineno - 1, "", "")
            self.cur = dict(line=lineno, frames=0, user=("", -1, ""), inner=("", -1, ""), chained=self.chained_next,
                            stack=[])
            self.chained_next, self.since_frame = False, 0
            return None, cut
        if self.cur is None:
            if body.startswith(CHAINED):
                self.chained_next = True
            return None, None
        if not body or body[0].isspace():
            m = _FRAME.match(body) if body.lstrip().startswith("File ") else None
            if m:
                frame = (m.group(1), int(m.group(2)), (m.group(3) or "").strip())
                self.cur["frames"] += 1
                self.cur["inner"] = frame
                if not is_library(frame[0]):
                    self.cur["user"] = frame
                    if len(self.cur["stack"]) < MAX_STACK:
                        self.cur["stack"].append(f"{frame[2]}:{frame[1]}")
                self.since_frame = 0
                return None, None
            return self._idle(lineno), None
        m = _EXC_NAME.match(body)
        if m is None:
            return self._idle(lineno), None
        return self._close(lineno, m.group(1), body[m.end() + 1:]), None

    def _idle(self, lineno: int) -> dict | None:
        """Count a line that is no frame; close the traceback as cut when frames stopped long ago."""
        self.since_frame += 1
        if self.since_frame > MAX_FRAMELESS:
            return self._close(lineno, "", "")
        return None

    def finish(self, lineno: int) -> dict | None:
        """Close a traceback still open at the end of the file (cut)."""
        return self._close(lineno, "", "") if self.cur is not None else None

    def _close(self, end_line: int, exc_type: str, message: str) -> dict:
        c = self.cur
        self.cur = None
        return dict(line=c["line"], end_line=end_line, exc_type=exc_type, message=message.strip()[:MAX_TEXT],
                    user_file=c["user"][0], user_line=c["user"][1], user_func=c["user"][2], frames=c["frames"],
                    inner_file=c["inner"][0], inner_line=c["inner"][1], inner_func=c["inner"][2],
                    chained=c["chained"], source=self.source, user_stack=";".join(c["stack"]))


class FailureTable:
    """torchrun's ChildFailedError table (`Failures:` / `Root Cause (first observed failure):` blocks) of one stream."""

    __slots__ = ("open", "root", "entry", "rows", "tb", "tracebacks", "lines")

    def __init__(self) -> None:
        self.open = False
        self.root = False
        self.entry: dict | None = None
        self.rows: list[dict] = []
        self.tracebacks: list[dict] = []
        self.tb: Traceback | None = None
        self.lines = 0

    def feed(self, lineno: int, body: str) -> bool:
        """Consume one launcher line; True when it belonged to the table."""
        stripped = body.strip()
        if not self.open:
            if stripped in ("Failures:", "Root Cause (first observed failure):"):
                self.open, self.root, self.lines = True, stripped.startswith("Root"), 0
                return True
            return False
        self.lines += 1
        if stripped == "Root Cause (first observed failure):":
            self._flush(lineno)
            self.root = True
            return True
        if stripped.startswith("---") or stripped.startswith("===") or self.lines > MAX_TABLE_LINES:
            self._flush(lineno)
            if stripped.startswith("===") or self.lines > MAX_TABLE_LINES:
                self.open = False
            return True
        m = _ENTRY.match(stripped)
        if m:
            self._flush(lineno)
            self.entry = dict(line=lineno, root_cause=self.root, rank=-1, local_rank=-1, host="", exitcode=-1,
                              signal="", pid=-1, time="", error_file="", exc_type="", message="")
            return True
        if self.entry is None:
            return True  # `<NO_OTHER_FAILURES>`
        f = _FIELD.match(body)
        if f:
            self._field(lineno, f.group(1), f.group(2).strip())
            return True
        if self.tb is not None and self.tb.open:
            done, _ = self.tb.feed(lineno, body[2:] if body.startswith("  ") else body)
            if done is not None:
                self._tb_done(done)
        return True

    def _field(self, lineno: int, name: str, value: str) -> None:
        e = self.entry
        if name == "rank":
            m = _RANK_FIELD.match(value)
            if m:
                e["rank"], e["local_rank"] = int(m.group(1)), int(m.group(2)) if m.group(2) else -1
        elif name == "exitcode":
            m = _EXIT_FIELD.match(value)
            if m:
                e["exitcode"], e["pid"] = int(m.group(1)), int(m.group(2)) if m.group(2) else -1
                e["signal"] = m.group(3) or signal_name(e["exitcode"])
        elif name == "host":
            e["host"] = value[:256]
        elif name == "time":
            e["time"] = value[:64]
        elif name == "error_file":
            e["error_file"] = "" if value in ("<N/A>", "") else value[:1024]
        elif name == "traceback":
            if value.startswith(TB_HEAD):
                self.tb = Traceback(source="failure_table")
                self.tb.feed(lineno, value)
            elif value.startswith("Signal "):
                s = _SIGNAL_FIELD.match(value)
                e["message"] = value[:MAX_TEXT]
                if s and not e["signal"]:
                    e["signal"] = s.group(2)

    def _tb_done(self, tb: dict) -> None:
        if self.entry is not None:
            tb["rank"], tb["local_rank"] = self.entry["rank"], self.entry["local_rank"]
            self.entry["exc_type"], self.entry["message"] = tb["exc_type"], tb["message"]
        self.tracebacks.append(tb)

    def _flush(self, lineno: int) -> None:
        if self.tb is not None and self.tb.open:
            cut = self.tb.finish(lineno)
            if cut is not None:
                self._tb_done(cut)
        self.tb = None
        if self.entry is not None:
            self.rows.append(self.entry)
            self.entry = None

    def finish(self, lineno: int) -> None:
        """Flush what is held at the end of the file."""
        self._flush(lineno)
        self.open = False
