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
