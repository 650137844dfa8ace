"""What a file's name says about the rank it belongs to (`rank-3`, `rank3`, `worker3`, `_rank3`).

Kept apart from the trace parser (parsers/kineto.py) so that the parsers of logs and dumps, and the hang
analysis, read a rank from a file name without importing the trace path (and pandas with it).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

_RANK_IN_NAME = re.compile(r"(?:^|[^a-z])(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)


def rank_from_file_name(path: str | Path) -> Optional[int]:
    """The rank a file name carries (`rank-3`, `rank3`, `worker3`, `_rank3`), the last one if several; else None."""
    m = _RANK_IN_NAME.findall(Path(path).name)
    return int(m[-1]) if m else None
