"""Run the registered rules over an analysed job and rank their findings (placeholder until rules land)."""
from __future__ import annotations

from typing import Any


def run_rules(job: Any, report: dict, config: Any = None) -> list[dict]:
    """Findings as JSON-ready dicts, ranked by severity, then estimated cost, then confidence."""
    return []
