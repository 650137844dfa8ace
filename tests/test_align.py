"""Clock alignment on hand-built observations: exact offsets, robustness to outliers, refusal."""
from __future__ import annotations

import numpy as np
import pandas as pd

from analyzer.cross_rank.align import MIN_MATCHED, estimate, p2p_pair_observations


def _obs(offsets: dict[int, int], n: int, noise: dict | None = None) -> pd.DataFrame:
    """n instances all members finish at true time 1e9 + k·1e6; local = true − offset."""
    rows = []
    for k in range(n):
        true = 1_000_000_000 + k * 1_000_000
        for r, o in offsets.items():
            rows.append({"obs": k, "rank": r, "t": true - o + (noise or {}).get((k, r), 0)})
    return pd.DataFrame(rows)


def test_per_rank_offsets_exact():
    offs = {0: 0, 1: 5_000, 2: -40_000_000, 3: 123}
    al = estimate(_obs(offs, 10), [0, 1, 2, 3], {r: f"rank{r}" for r in offs})
    assert al.status == "ok"
    assert al.offset_of == {0: 0, 1: 5_000, 2: -40_000_000, 3: 123}
    assert al.offsets["residual_ns"].max() == 0


def test_outliers_do_not_move_the_median():
    offs = {0: 0, 1: 7_000}
    noise = {(3, 1): 900_000, (5, 1): -400_000}   # two wild instances out of 9
    al = estimate(_obs(offs, 9, noise), [0, 1], {0: "a", 1: "b"})
    assert al.offset_of[1] == 7_000


def test_ranks_on_one_host_share_the_host_offset():
    offs = {0: 0, 1: 0, 2: 3_000_000, 3: 3_000_000}
    # only ranks 1 and 2 meet across hosts; 0 and 3 inherit their host's offset
    obs = _obs({1: 0, 2: 3_000_000}, 5)
    dom = {0: "h0", 1: "h0", 2: "h1", 3: "h1"}
    al = estimate(obs, [0, 1, 2, 3], dom)
    assert al.offset_of == {0: 0, 1: 0, 2: 3_000_000, 3: 3_000_000}


def test_chain_of_groups_reaches_every_rank():
    # groups {0,1}, {1,2}, {2,3}: rank 3 only linked through 2
    offs = {0: 0, 1: 10_000, 2: -20_000, 3: 30_000}
    parts = []
    for i, pair in enumerate([(0, 1), (1, 2), (2, 3)]):
        o = _obs({r: offs[r] for r in pair}, 4)
        o["obs"] += 100 * i
        parts.append(o)
    al = estimate(pd.concat(parts), [0, 1, 2, 3], {r: str(r) for r in offs})
    assert al.offset_of == offs


def test_refuses_with_too_few_instances():
    al = estimate(_obs({0: 0, 1: 5_000}, MIN_MATCHED - 1), [0, 1], {0: "a", 1: "b"})
    assert al.status == "refused"
    assert "too few" in al.message and al.offset_of == {0: 0, 1: 0}


def test_single_host_needs_no_estimate():
    al = estimate(_obs({0: 0, 1: 0}, 2), [0, 1], {0: "h", 1: "h"})
    assert al.status == "ok" and al.offset_of == {0: 0, 1: 0}


def test_unlabelled_send_recv_pairs_give_the_offset():
    # rank 0 (clock a) sends to rank 1 (clock b, 2 ms behind); ends coincide in true time
    rows = []
    for k in range(6):
        end = 10_000_000 + k * 777_000
        rows.append({"process_group": "0", "rank": 0, "op": "send", "start": end - 50_000, "end": end,
                     "nelems": 64})
        rows.append({"process_group": "0", "rank": 1, "op": "recv", "start": end - 2_000_000 - 300_000,
                     "end": end - 2_000_000, "nelems": 64})
    obs = p2p_pair_observations(pd.DataFrame(rows), {0: "a", 1: "b"})
    assert len(obs) == 12
    al = estimate(obs, [0, 1], {0: "a", 1: "b"})
    assert al.offset_of[1] == 2_000_000
