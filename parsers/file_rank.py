"""The rank a file's name carries (``rank-3``, ``rank3``, ``worker3``, ``_rank3``): for every kind of input whose
content may not name its rank (a trace without distributedInfo, a stderr file, a Flight Recorder dump)."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

_RANK_IN_NAME = re.compile(r"(?:^|[^a-z])(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)


def rank_from_file_name(path: str | Path) -> Optional[int]:
    """The rank a file name carries (`rank-3`, `rank3`, `worker3`, `_rank3`), the last one if several; else None."""
    path = Path(path)
    m = _RANK_IN_NAME.findall(path.name)
    return int(m[-1]) if m else None
