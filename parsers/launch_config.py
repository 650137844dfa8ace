"""Lines of a launcher's or a program's log that state the job's size → rows (no opinions).

torchrun at `LOGLEVEL=INFO` prints its launch config (`Using nproc_per_node=3.`, `  min_nodes : 1`,
`  max_nodes : 1`, `  nproc_per_node : 3`) and, once the rendezvous completes, the ranks it assigned
(`  group_world_size=1`, `  global_world_sizes=[3, 3, 3]`); programs and schedulers often print `WORLD_SIZE=8`
or `world_size: 8`. Each recognised statement is one row: kind, value, 1-based line, text. Only the first
`HEAD_BYTES` of a file are read (launchers print their config first). The world size itself is decided by
analyzer/load/world.py.
"""
from __future__ import annotations

import re
from pathlib import Path

HEAD_BYTES = 1 << 20
MAX_VALUE = 1 << 20
_PATTERNS = [
    ("global_world_sizes", re.compile(r"\bglobal_world_sizes=\[(\d{1,7})(?:, ?\d{1,7}){0,4096}\]")),
    ("nproc_per_node", re.compile(r"\bnproc_per_node\s{0,40}(?::|=)\s{0,4}(\d{1,7})\b")),
    ("min_nodes", re.compile(r"\bmin_nodes\s{0,40}:\s{0,4}(\d{1,7})\b")),
    ("max_nodes", re.compile(r"\bmax_nodes\s{0,40}:\s{0,4}(\d{1,7})\b")),
    ("group_world_size", re.compile(r"\bgroup_world_size=(\d{1,7})\b")),
    ("WORLD_SIZE", re.compile(r"\bWORLD_SIZE['\"]?\s{0,4}[=:]\s{0,4}['\"]?(\d{1,7})\b")),
    ("world_size", re.compile(r"(?<![A-Za-z_.])world[_ ]size\s{0,4}(?:[=:]|is)?\s{0,4}(\d{1,7})\b")),
]
_GUARD = re.compile(r"world_size|WORLD_SIZE|world size|nproc_per_node|_nodes\s", re.I)


def size_statements(path: str | Path, head_bytes: int = HEAD_BYTES) -> list[dict]:
    """Rows {kind, value, line, text} for each statement of the job's size in the file's first `head_bytes`.

    An unreadable file gives no rows (the file's own parser reports it). `group_world_size` is the number of
    launcher agents (nodes); `min_nodes` / `max_nodes` bound it; `nproc_per_node` is processes per agent.
    """
    try:
        with open(path, "rb") as fh:
            data = fh.read(head_bytes)
    except OSError:
        return []
    out = []
    for i, raw in enumerate(data.decode("utf-8", "replace").splitlines()):
        if len(raw) > 4096 or not _GUARD.search(raw):
            continue
        for kind, pat in _PATTERNS:
            m = pat.search(raw)
            if m and 0 < int(m.group(1)) <= MAX_VALUE:
                out.append(dict(kind=kind, value=int(m.group(1)), line=i + 1, text=raw.strip()[:300]))
                break
    return out
