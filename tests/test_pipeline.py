"""Bubble rate of one rank from hand-built compute kernels."""
from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest

from analyzer.cross_rank.pipeline import bubble_rates


def test_bubble_rate_is_idle_share_of_first_to_last_compute():
    # step [0, 1000): compute [100,300) [250,400) [700,900); comm [400,700) is not compute
    act = pd.DataFrame({"start": [100, 250, 400, 700], "end": [300, 400, 700, 900],
                        "kind": ["compute", "compute", "comm", "compute"]})
    t = SimpleNamespace(activity=act, steps=pd.DataFrame({"step": [1], "start": [0], "end": [1000]}))
    b = bubble_rates(t).iloc[0]
    assert b["window_ns"] == 800 and b["busy_ns"] == 500
    assert b["bubble_rate"] == pytest.approx(1 - 500 / 800)
