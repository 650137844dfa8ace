"""Find input files under the given paths and classify each by its content, not only by its name."""
from __future__ import annotations

import re

import os
import zlib
from dataclasses import dataclass
from pathlib import Path

from parsers.errors import InputError
from parsers.flight_recorder import looks_like_fr_dump
from parsers.memory_snapshot import looks_like_snapshot
from parsers.log_shape import LogShape, judge
from parsers.nccl_log import looks_like_nccl_log
from parsers.nccl_ras import looks_like_ras
from parsers.torch_stderr import SNIFF_TAIL, looks_like_stderr
from parsers.safe_open import not_regular_reason, open_input

#: Kinds a file can be classified as.
KINETO, NCCL_LOG, FR_DUMP, UNKNOWN = "kineto", "nccl_log", "flight_recorder", "unknown"
NCCL_RAS = "nccl_ras"  # a saved NCCL RAS report (parsers/nccl_ras.py)
MEMORY_SNAPSHOT = "memory_snapshot"  # the CUDA caching allocator's snapshot pickle (parsers/memory_snapshot.py)
STDERR = "stderr"  # torchrun / PyTorch / gloo / CUDA stderr (parsers/torch_stderr.py); NCCL debug logs stay nccl_log

_HEAD_BYTES = 256 * 1024
_TEXT_SUFFIXES = {".log", ".txt", ".out", ".err", ".stderr", ".stdout"}
#: The smallest file that can hold a profiler trace with one event; anything shorter is not worth a parse.
MIN_TRACE_BYTES = 32
_MAGIC = ((b"\x7fELF", "binary: an ELF executable or library"), (b"\x89PNG", "binary: a PNG image"),
          (b"PK\x03\x04", "binary: a zip archive (wheel, jar, zip)"), (b"%PDF", "binary: a PDF document"),
          (b"SQLite format 3", "binary: an SQLite database"), (b"\xff\xd8\xff", "binary: a JPEG image"),
          (b"GIF8", "binary: a GIF image"), (b"\x93NUMPY", "binary: a numpy array"),
          (b"BZh", "binary: bzip2-compressed"), (b"\xfd7zXZ", "binary: xz-compressed"),
          (b"\x28\xb5\x2f\xfd", "binary: zstd-compressed"))
UTF8_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class InputFile:
    """One discovered file and what it looks like."""

    path: str
    kind: str
    reason: str = ""  # why it was classified so (for unknown: why it is not a trace)


def iter_files(paths: list[str | Path]) -> tuple[list[Path], list[tuple[str, str]]]:
    """Expand folders recursively (sorted, hidden files skipped); returns (files, [(path, problem)])."""
    files: list[Path] = []
    problems: list[tuple[str, str]] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            for root, dirs, names in os.walk(p):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                files.extend(Path(root) / n for n in sorted(names) if not n.startswith("."))
        elif p.is_file() or (p.exists() and not p.is_dir()):
            files.append(p)  # FIFOs and devices too: classify() refuses them by name, without opening them
        else:
            problems.append((str(p), "no such file or folder"))
    return files, problems


def read_head(path: Path, n: int = _HEAD_BYTES) -> bytes:
    """The first ``n`` bytes of a file, inflated when it is gzip (a damaged gzip yields what inflates)."""
    with open_input(path) as fh:
        blob = fh.read(n)
    if blob.startswith(b"\x1f\x8b"):
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            return d.decompress(blob, n)
        except zlib.error:
            return b""
    return blob


#: a file that holds one rank's output by its place or name (torchrun --log-dir's attempt_N/R/stderr.log, rank3.log):
#: a bare Python traceback there is that rank's, with no launcher or torch line around it
_RANK_FILE = re.compile(r"attempt_\d{1,6}[/\\]\d{1,7}[/\\](?:stderr|stdout)\.log$|(?:^|[/\\_.-])rank[_.-]?\d{1,7}[^/\\]*$",
                        re.I)


def classify(path: Path) -> InputFile:
    """Classify one file as kineto / nccl_log / nccl_ras / flight_recorder / stderr / unknown by sniffing its head."""
    special = not_regular_reason(path)
    if special:
        return InputFile(str(path), UNKNOWN, special)
    try:
        head = read_head(path)
    except InputError as exc:
        return InputFile(str(path), UNKNOWN, exc.reason)
    except OSError as exc:
        return InputFile(str(path), UNKNOWN, f"cannot read ({exc.strerror or exc})")
    if head.startswith(UTF8_BOM):
        head = head[len(UTF8_BOM):]
    if not head:
        with open_input(path) as fh:
            gz = fh.read(2) == b"\x1f\x8b"
        return InputFile(str(path), UNKNOWN, "unreadable gzip" if gz else "empty file")
    name = path.name.lower()
    for magic, what in _MAGIC:
        if head.startswith(magic):
            return InputFile(str(path), UNKNOWN, what)
    if looks_like_fr_dump(head) and b'"traceEvents"' not in head:
        return InputFile(str(path), FR_DUMP, "Flight Recorder dump (pickle or JSON)")
    stripped = head.lstrip()
    looks_json = stripped[:1] == b"{" or (stripped[:1] == b"[" and stripped[1:].lstrip()[:1] in (b"{", b"]"))
    if looks_like_ras(head):
        return InputFile(str(path), NCCL_RAS, "NCCL RAS report (ncclras text, JSON or monitor lines)")
    if looks_json:
        if b'"traceEvents"' in head or b'"schemaVersion"' in head or (
                stripped[:1] == b"[" and b'"ph"' in head):
            return InputFile(str(path), KINETO, "JSON with traceEvents")
        if name.startswith("nccl_trace_rank") or "flight" in name:
            return InputFile(str(path), FR_DUMP, "Flight Recorder file name")
        if stripped[:1] == b"[":
            return InputFile(str(path), UNKNOWN, "top-level JSON is a list, not a trace object")
        return InputFile(str(path), UNKNOWN, "JSON object without traceEvents (not a profiler trace)")
    if name.startswith("nccl_trace_rank_") and head[:1] == b"\x80":
        return InputFile(str(path), FR_DUMP, "Flight Recorder file name")
    if looks_like_nccl_log(head):
        shape = _shape(path, head)
        if shape.is_log:
            return InputFile(str(path), NCCL_LOG, "text with NCCL / ProcessGroupNCCL lines")
        return InputFile(str(path), UNKNOWN, shape.reason())
    if looks_like_stderr(head, path):
        shape = _shape(path, head)
        if shape.is_log or (shape.only_tracebacks and (_RANK_FILE.search(str(path)) or _ends_in_traceback(path))):
            return InputFile(str(path), STDERR, "text with Python tracebacks / torchrun / c10d / gloo / CUDA lines")
        return InputFile(str(path), UNKNOWN, shape.reason())
    if looks_like_snapshot(head):
        return InputFile(str(path), MEMORY_SNAPSHOT, "CUDA caching allocator snapshot (pickle)")
    if head.startswith(b"\x80") and len(head) > 1 and head[1] in range(2, 6):
        return InputFile(str(path), UNKNOWN, "binary: a Python pickle that is not a Flight Recorder dump")
    if b"\x00" in head[:4096] or _binary_share(head[:4096]) > 0.3:
        return InputFile(str(path), UNKNOWN, "binary")
    nxt = stripped[1:].lstrip()[:1]
    if stripped[:1] == b"[" and nxt and nxt in b'{["]-0123456789':  # a JSON list, not a TOML [section]
        return InputFile(str(path), UNKNOWN, "top-level JSON is a list, not a trace object")
    if len(head) < MIN_TRACE_BYTES:
        return InputFile(str(path), UNKNOWN, f"too small to be a trace (under {MIN_TRACE_BYTES} bytes)")
    if Path(name).suffix in _TEXT_SUFFIXES:
        return InputFile(str(path), UNKNOWN, "text without NCCL or watchdog lines")
    return InputFile(str(path), UNKNOWN, "text, not a trace or log (no NCCL, watchdog or profiler content)")


#: Files that sit beside traces in a run folder or a test fixture and are never inputs: a fixture's or the
#: simulator's ground truth (expected.json, scenario.json, truth.json, facts.json), documentation and scripts.
#: When their content is not an input either, they are counted (``inputs.ignored``) instead of listed as skipped.
KNOWN_NON_INPUT_NAMES = frozenset({"expected.json", "scenario.json", "truth.json", "facts.json"})
KNOWN_NON_INPUT_SUFFIXES = frozenset({".md", ".rst", ".py", ".sh", ".ipynb"})


def known_non_input(f: InputFile) -> bool:
    """True for a file classified unknown whose name says it is documentation, a script or a fixture's ground
    truth: not worth a line among the skipped inputs."""
    if f.kind != UNKNOWN:
        return False
    name = os.path.basename(f.path).lower()
    return name in KNOWN_NON_INPUT_NAMES or name.startswith("readme") or \
        os.path.splitext(name)[1] in KNOWN_NON_INPUT_SUFFIXES


def _shape(path: Path, head: bytes) -> LogShape:
    """How the text's marker lines read (parsers/log_shape.py): its head, or its tail when the head holds none
    (a long log whose failure is at the end)."""
    shape = judge(head)
    if shape.markers or head.startswith(b"\x1f\x8b"):
        return shape
    try:
        with open_input(path) as fh:
            if fh.read(2) == b"\x1f\x8b":
                return shape
            size = fh.seek(0, 2)
            if size <= len(head):
                return shape
            fh.seek(max(0, size - SNIFF_TAIL))
            tail = fh.read(SNIFF_TAIL)
    except (OSError, InputError):
        return shape
    return judge(tail[tail.find(b"\n") + 1:] if size > SNIFF_TAIL else tail)


def _tail_text(path: Path, n: int = SNIFF_TAIL, limit: int = 64 << 20) -> bytes:
    """The last ``n`` bytes of a file's text (a gzip is inflated as a stream, at most ``limit`` bytes)."""
    with open_input(path) as fh:
        if fh.read(2) != b"\x1f\x8b":
            size = fh.seek(0, 2)
            fh.seek(max(0, size - n))
            return fh.read(n)
        fh.seek(0)
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        keep, seen = b"", 0
        while seen < limit and (block := fh.read(1 << 20)):
            try:
                out = d.decompress(block)
            except zlib.error:
                break
            seen += len(out)
            keep = (keep + out)[-n:]
        return keep


def _ends_in_traceback(path: Path) -> bool:
    """The text ends with a Python traceback (at most two lines after its exception line): the process that wrote
    it died of that exception. A test runner's or a tool's log that prints tracebacks and goes on is not a rank's
    log; a bare traceback someone kept from a failed rank is."""
    try:
        lines = [ln.rstrip() for ln in _tail_text(path).decode("utf-8", "replace").splitlines() if ln.strip()]
    except (OSError, InputError):
        return False
    heads = [i for i, ln in enumerate(lines) if ln.lstrip().startswith("Traceback (most recent call last)")]
    if not heads:
        return False
    after = lines[heads[-1] + 1:]
    exc = next((i for i, ln in enumerate(after) if not ln[:1].isspace()), None)
    return exc is not None and len(after) - exc - 1 <= 2


def _binary_share(block: bytes) -> float:
    """Share of a block that is control bytes or invalid UTF-8 (0 for text; a cut last character is text)."""
    if not block:
        return 0.0
    control = sum(1 for b in block if b < 32 and b not in (9, 10, 13))
    invalid = 0
    try:
        block.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(block) - 4:  # not merely a character cut at the end of the head
            invalid = block.decode("utf-8", errors="replace").count("\ufffd")
    return (control + invalid) / len(block)


def discover(paths: list[str | Path]) -> tuple[list[InputFile], list[tuple[str, str]]]:
    """Classify every file under ``paths``; returns (files, [(path, problem)] for paths that do not exist)."""
    files, problems = iter_files(paths)
    return [classify(f) for f in files], problems
