"""The one exception parsers raise: nothing at all could be read from a file."""
from __future__ import annotations

from pathlib import Path


class InputError(Exception):
    """A file that could not be read at all; carries the path and a human reason."""

    def __init__(self, path: str | Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = str(path)
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


class EmptyInput(InputError):
    """A file read whole that holds nothing to analyse (a profile that recorded no operator, kernel, step or
    collective): the caller may list it as skipped rather than failed."""
