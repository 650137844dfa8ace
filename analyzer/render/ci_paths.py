"""File paths as CI services can map them: relative to the repository the job runs in.

GitHub code scanning (SARIF) and workflow annotations (``::error file=…``) map a file to the repository only
when its path is relative to the checkout; an absolute path (``analyze /home/runner/work/x/x/traces``) is
dropped or shown unlinked. The base is ``$GITHUB_WORKSPACE`` when set, else the git work tree holding the
working directory, else the working directory. A path outside the base stays absolute (nothing maps it).
"""
from __future__ import annotations

import os
from typing import Mapping, Optional

#: the SARIF uriBaseId the relative paths are given against (originalUriBaseIds says where it is)
BASE_ID = "SRCROOT"


def _git_root(start: str) -> Optional[str]:
    """The nearest folder at or above ``start`` holding ``.git`` (a folder, or a worktree's file)."""
    d = os.path.abspath(start)
    while True:
        if os.path.exists(os.path.join(d, ".git")):
            return d
        up = os.path.dirname(d)
        if up == d:
            return None
        d = up


def base_dir(env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None) -> str:
    """$GITHUB_WORKSPACE, else the git root of ``cwd``, else ``cwd`` (absolute)."""
    env = os.environ if env is None else env
    cwd = os.path.abspath(cwd or os.getcwd())
    ws = str(env.get("GITHUB_WORKSPACE") or "").strip()
    if ws and os.path.isabs(ws):
        return os.path.normpath(ws)
    return _git_root(cwd) or cwd


def relative(path: str, base: str, cwd: Optional[str] = None) -> Optional[str]:
    """``path`` relative to ``base`` with forward slashes (a relative path is taken from ``cwd``); None when it
    lies outside ``base``."""
    cwd = os.path.abspath(cwd or os.getcwd())
    full = os.path.normpath(path if os.path.isabs(path) else os.path.join(cwd, path))
    try:
        rel = os.path.relpath(full, base)
    except ValueError:  # another drive
        return None
    if rel == os.pardir or rel.startswith(os.pardir + os.sep) or os.path.isabs(rel):
        return None
    return rel.replace(os.sep, "/")


def ci_path(path: str, base: Optional[str] = None, cwd: Optional[str] = None) -> str:
    """The path to write in a CI annotation: relative to the base when under it, else as given."""
    rel = relative(path, base or base_dir(cwd=cwd), cwd)
    return path if rel is None else rel
