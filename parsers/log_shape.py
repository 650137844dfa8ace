"""Is a text a log, or prose / code / a config that only quotes log lines? Decided from line shapes, not names.

A failure message matters only in the context of a real log: a launcher prefix (`[rank3]:`, `[default0]:`, srun's
`3: `, a timestamp), a glog prefix (`[E ProcessGroupNCCL.cpp:455]`, `E1201 09:03:19.123 …`), NCCL's envelope
(`host:pid:tid [dev] NCCL INFO`), a Python traceback, an exception line at the start of a line (`RuntimeError: …`,
`ncclSystemError: …`). The same words inside a Markdown table row, a code fence, inline code, a string literal or
a docstring of source code are a quotation, not an event (issue #23: `analyze docs/` must not report the project's
own docs/stderr.md as a failed job).

`judge(head)` counts the lines holding a log marker (the same literals the sniffers look for) by context:
*log-shaped* (bare, with a log line's shape), *quoted* (fence, table, string, docstring, comment, `>>>` session)
and *prose* (bare, but a sentence). A text is a log when at least one marker line is log-shaped and log-shaped lines are not
outnumbered by quoted and prose ones. A bare log of two NCCL error lines is a log; a README that pastes one
traceback into a fence among prose is not. Pure, bounded: at most MAX_LINES lines of at most MAX_LINE characters.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from parsers.nccl_envelope import match_envelope
from parsers.stderr_prefix import peel

MAX_LINES = 20_000
MAX_LINE = 4096
ENOUGH = 32  # log-shaped marker lines with nothing quoted: decided, stop reading

#: what makes a line worth a look: the sniffers' literals (parsers/torch_stderr.py, parsers/nccl_log.py) and the
#: NCCL / PyTorch error texts (ncclGetErrorString, getNcclErrorDetailStr, ProcessGroupNCCL's teardown)
MARKER = re.compile(
    r"Traceback \(most recent call last\)|\[rank\d{1,7}\]:|\[default\d{1,7}\]:|torch[/.]distributed[/.]elastic"
    r"|ChildFailedError|gloo/transport|ProcessGroup(?:Gloo|NCCL)|\[c10d\]|TCPStore|Dist(?:Backend|Store|Network)Error"
    r"|CUDA out of memory|OutOfMemoryError|CUDA error: |NCCL error|NCCL (?:INFO|WARN)|NVRM: Xid|Out of memory: Kill"
    r"|Signal \d{1,3} \(SIG|terminate called after|Watchdog caught|monitoredBarrier|nccl[A-Z][a-zA-Z]{2,30}Error"
    r"|ncclInvalid(?:Usage|Argument)|NCCL version \d|oom[-_]kill event|Some NCCL operations have failed"
    r"|Setting OMP_NUM_THREADS environment variable|memory \(MB\) \| allocated: ")
_FENCE = re.compile(r" {0,3}(?:```|~~~)")
_TABLE = re.compile(r"\s{0,8}\|.*\|\s*$")
_CODE = re.compile(r"\s{0,16}(?:def |class |async def |import \w|from [\w.]+ import |return\b|raise \w|assert |"
                   r"elif |else:|try:|except\b|with .{1,200}:$|for .{1,200} in .{1,200}:$|if .{1,200}:$|@\w|"
                   r"#include |#define |static |const |void |int |struct |namespace |using |"
                   r"\w{1,64} = [\w\[\]{}(\"'.-]|\w{1,64}: [\w\[\].]{1,64} = )")
#: lines that only documents have: Markdown headings, fences, table rows, reStructuredText directives / literal blocks
_DOC = re.compile(r"#{1,6} [A-Za-z`*]|\s{0,3}(?:```|~~~)|\s{0,3}\|.*\|\s*$|\.\. [\w-]{1,40}::|.{0,4096}::$")
_TRIPLE = re.compile(r'"""|\'\'\'')
_OPEN_SQ = re.compile(r"""(?:^|[\s(\[{=,:+])[rbfuRBFU]{0,2}'[^']*$""")
#: the shape of a log line once a launcher prefix is peeled
_LOG_START = re.compile(
    r"(?:Traceback \(most recent call last\):"
    r"|(?:[A-Za-z_]\w{0,100}\.){0,12}[A-Za-z_]\w{0,100}(?:Error|Exception|Exit|Interrupt|Failure|Warning)(?::|$)"
    r"|nccl[A-Z]\w{2,40}: "
    r"|\[[EWIF](?:\d{4} \d\d:\d\d:\d\d[.\d]{0,10})? ?(?:\d{1,10} )?[\w./-]{1,200}:\d{1,7}\]"
    r"|[EWIF]\d{4} \d\d:\d\d:\d\d\.\d{1,9} {1,4}\d{1,10} "
    r"|[\w.-]{1,256}:\d{1,10}:\d{1,10} \[\d{1,4}\] "
    r"|(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)[: ]"
    r"|terminate called|what\(\): |Last error:|Exception raised from |frame #\d{1,4}: |Fatal Python error"
    r"|Signal \d{1,3} \(SIG|\*\*\* SIG|srun: |slurmstepd: |NVRM: |\[\d{1,7}\]:$|Failures:|Root Cause"
    r"|(?:time|host|rank|exitcode|error_file|traceback)\s{0,16}: "
    r"|\[(?:PG |Rank )\d|Rank \d{1,7} (?:failed to pass|successfully reached) monitoredBarrier"
    r"|(?:socketProgress\w{0,8}|Net|NET/\w{1,16}|misc/socket\.cc:\d{1,6}) ?: "
    r"|[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \S{1,256} \S{1,64}: )")
#: a bare line that carries an exception head or a C++ source location mid-line is a log line an application
#: printed (`rank 0: collective failed: RuntimeError: [/…/gloo/transport/tcp/unbound_buffer.cc:129] Timed out …`)
_EMBEDDED = re.compile(r"[A-Za-z0-9_](?:Error|Exception): \S|nccl[A-Z]\w{2,40}: |\w\.(?:cc|cpp|hpp|cu|cuh|h):\d{1,7}\b")
_FRAME = re.compile(r"\s{1,12}File \"[^\"]{1,4096}\", line \d{1,9}")
_TORCH_FILE = re.compile(r"[/\\]torch[/\\]")


@dataclass
class LogShape:
    """Marker lines of a text by context, and the verdict."""

    log: int = 0       # bare marker lines shaped like a log line
    quoted: int = 0    # marker lines inside a fence, table, string, docstring or comment
    prose: int = 0     # bare marker lines that read as a sentence
    code: int = 0      # lines of the text that look like source code
    lines: int = 0
    source: bool = False  # enough code lines that strings, docstrings and comments are told apart
    bare_tb: int = 0   # log-shaped marker lines that are only a bare `Traceback (most recent call last):` header
    torch_frame: bool = False  # a traceback frame in torch's own code (a process of a PyTorch job)

    @property
    def markers(self) -> int:
        return self.log + self.quoted + self.prose

    @property
    def is_log(self) -> bool:
        """At least one log-shaped marker line, not outnumbered by quotations and prose, and something that makes
        it a rank's log: a marker other than a bare traceback header (a launcher or rank prefix, c10d, gloo, NCCL,
        CUDA) or a frame in torch's code. A test runner's output with a Python traceback is not a rank's log."""
        return self.log > 0 and self.log >= self.quoted + self.prose and (self.log > self.bare_tb or
                                                                           self.torch_frame)

    @property
    def only_tracebacks(self) -> bool:
        return self.log > 0 and self.log <= self.bare_tb and not self.torch_frame

    def reason(self) -> str:
        """Why a text with markers is not a log (for the skipped-files list)."""
        if self.only_tracebacks and self.log >= self.quoted + self.prose:
            return ("text with Python tracebacks but no launcher, rank, torch, c10d or NCCL line: not a rank's "
                    "log")
        what = "source code" if self.source else "prose, documentation or configuration"
        return (f"text that quotes log lines ({what}: {self.quoted} quoted, {self.prose} in sentences, "
                f"{self.log} shaped like a log line), not a log")


_LITERAL = re.compile(r"""[rbfuRBFU]{0,2}(?:"(?:[^"\\]|\\.){0,4096}"?|'(?:[^'\\]|\\.){0,4096}'?)|(?:#|//).{0,4096}$""")


def _in_literal(line: str, pos: int) -> bool:
    """In a source line: position `pos` lies inside a string literal or a comment (tokenised left to right)."""
    for t in _LITERAL.finditer(line):
        if t.start() > pos:
            return False
        if t.end() > pos:
            return True
    return False


def _quoted_before(prefix: str) -> bool:
    """The marker sits inside a string or inline code opened earlier on the line."""
    return prefix.count('"') % 2 == 1 or prefix.count("`") % 2 == 1 or _OPEN_SQ.search(prefix) is not None


def judge(head: bytes | str) -> LogShape:
    """Count the marker lines of a text by context (module docstring); bounded by MAX_LINES."""
    text = head.decode("utf-8", "replace") if isinstance(head, bytes) else head
    lines = text.split("\n", MAX_LINES)[:MAX_LINES]
    out = LogShape(lines=len(lines))
    out.code = sum(1 for ln in lines if _CODE.match(ln[:MAX_LINE]))
    codey = out.code >= 3 and out.code * 10 >= len([ln for ln in lines if ln.strip()])
    out.source = codey
    doc = sum(1 for ln in lines if _DOC.match(ln[:MAX_LINE])) >= 2  # an indented block there is a quotation
    fence = triple = repl = False
    tb = 0  # lines left of an open traceback (frames quote paths that hold markers)
    for raw in lines:
        ln = raw[:MAX_LINE].rstrip("\r")
        if _FENCE.match(ln):
            fence = not fence
            continue
        n_triple = len(_TRIPLE.findall(ln)) if codey else 0
        in_string = fence or triple
        if n_triple % 2:
            triple = not triple
        stripped = ln.lstrip()
        if stripped.startswith((">>> ", "... ", "In [")):
            repl = True  # an interactive session (doctest, IPython): what follows it is its quoted output
        elif not stripped:
            repl = False
        if tb and not out.torch_frame and _FRAME.match(ln) and _TORCH_FILE.search(ln):
            out.torch_frame = True
        m = MARKER.search(ln)
        if m is None:
            tb = max(0, tb - 1) if ln.strip() else tb
            continue
        if in_string or n_triple or repl or _TABLE.match(ln):
            out.quoted += 1
            continue
        label, local, rank, mpi, body = peel(ln)
        body_s = body.lstrip()
        if tb and (_FRAME.match(body) or body[:1].isspace()):
            out.log += 1
            tb = 200
            continue
        if doc and body.startswith("    ") and len(body) == len(ln):
            out.quoted += 1  # a Markdown / reST indented code block
            continue
        pos = m.start() - (len(ln) - len(body_s))
        if (_in_literal(ln, m.start()) if codey else _quoted_before(body_s[:max(0, pos)])):
            out.quoted += 1
            continue
        if ("NCCL INFO" in ln or "NCCL WARN" in ln) and match_envelope(ln) is not None:
            out.log += 1
            continue
        prefixed = len(body) < len(ln) and (label or local >= 0 or rank >= 0 or mpi >= 0 or not ln[:1].isspace())
        if prefixed or _LOG_START.match(body_s) or _EMBEDDED.search(body_s):
            out.log += 1
            if body_s.startswith("Traceback (most recent call last)"):
                tb = 200
                if len(body) == len(ln) and m.group(0).startswith("Traceback"):
                    out.bare_tb += 1
        else:
            out.prose += 1
        if out.log >= ENOUGH and not out.quoted and not out.prose:
            break
    return out
