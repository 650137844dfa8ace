"""Open an input file for reading without ever blocking: FIFOs, sockets and devices are refused unopened-for-read.

A FIFO named like a trace would block `open()` forever (no writer), and /dev/zero would never end; a post-mortem
folder can hold either. `open_input` opens with O_NONBLOCK (which a FIFO honours at open time) and refuses
anything that is not a regular file before reading a byte.
"""
from __future__ import annotations

import io
import os
import stat
from pathlib import Path
from typing import BinaryIO

from parsers.errors import InputError


def file_kind(mode: int) -> str:
    """'FIFO', 'socket', 'character device', … for a stat mode that is not a regular file; '' for a regular one."""
    if stat.S_ISREG(mode):
        return ""
    for test, name in ((stat.S_ISFIFO, "FIFO (named pipe)"), (stat.S_ISSOCK, "socket"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
                       (stat.S_ISDIR, "folder")):
        if test(mode):
            return name
    return "special file"


def not_regular_reason(path: str | Path) -> str:
    """Why ``path`` must not be read (a FIFO, a device, …), or '' for a regular file; stat only, never opens it."""
    try:
        kind = file_kind(os.stat(path).st_mode)
    except OSError:
        return ""  # let the open report the real error
    return f"not a regular file ({kind}); not read" if kind else ""


def open_input(path: str | Path) -> BinaryIO:
    """A buffered binary reader of a regular file; InputError for anything else or an OS error."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise InputError(path, f"cannot read file ({exc.strerror or exc})") from exc
    try:
        kind = file_kind(os.fstat(fd).st_mode)
        if kind:
            raise InputError(path, f"not a regular file ({kind}); not read")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return io.open(fd, "rb", closefd=True)
    except BaseException:
        os.close(fd)
        raise


def read_bounded(path: str | Path, max_bytes: int) -> bytes:
    """The whole of a file that must be read at once (a pickle, a JSON document), refused past ``max_bytes``;
    InputError when it cannot be opened or is larger."""
    p = str(path)
    try:
        with open_input(p) as fh:
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise InputError(p, f"cannot open: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise InputError(p, f"larger than {max_bytes} bytes; refusing to load")
    return data
