"""Cross-rank timeline analysis section of the report (clock alignment, collectives, stragglers, groups, pipeline)."""
from __future__ import annotations

from typing import Optional

from analyzer.job import Job


def cross_rank_section(job: Job, gpus_per_node: Optional[int] = None) -> dict:
    """JSON-ready dict of everything learned between ranks (placeholder until the cross-rank analysis lands)."""
    return {}
