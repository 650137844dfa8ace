"""Expert-parallel load: how many elements each rank of an expert-parallel group receives for its experts, from
the all-to-all sizes (NCCL's ``In msg nelems`` / ``Out msg nelems``; gloo's split sizes on ``c10d::alltoall_base_``,
parsers/kineto_collectives.py), so an overloaded expert is named as such instead of as exposed communication.

The k-th all-to-all of every member is one call. A dispatch sends every member's own tokens (the same input
count on every member) and delivers to each expert its routed tokens (the output counts differ); a combine is its
mirror (the outputs equal, the inputs differ); a balanced call has both equal. Each member's load is the sum over
its calls of the differing side (the output of a dispatch, the input of a combine): the tokens its experts ran.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from analyzer.rank.summary import collective_column

#: a rank whose experts receive this many times the median of its group's other ranks is overloaded (MOE001's
#: moe_imbalance_ratio is the rule's own threshold; this one only marks the section's `balanced`)
BALANCED_BELOW = 1.25


def _rows(t: Any) -> tuple[np.ndarray, np.ndarray]:
    op = np.asarray(collective_column(t, "op")).astype(str) if len(collective_column(t, "op")) else np.empty(0, str)
    if not len(op):
        return np.empty(0, np.int64), np.empty(0, np.int64)
    sel = op == "alltoall"
    start = np.asarray(collective_column(t, "start"), dtype=np.int64)[sel]
    o = np.argsort(start, kind="stable")
    return (np.asarray(collective_column(t, "in_nelems"), dtype=np.int64)[sel][o],
            np.asarray(collective_column(t, "out_nelems"), dtype=np.int64)[sel][o])


def expert_load(job: Any, mesh: Any) -> list[dict]:
    """Per expert-parallel group: each member's received elements, the hot rank and its factor over the median of
    the others (``cross_rank.expert_load``, docs/cross-rank.md). [] without an ep dimension or sizes."""
    d = mesh.by_role("ep") if mesh is not None else None
    if d is None:
        return []
    out = []
    for name, ranks in zip(d.group_names, d.groups):
        members = [r for r in ranks if r in job.traces]
        if len(members) < 2:
            continue
        rows = {r: _rows(job.traces[r]) for r in members}
        n = min(len(rows[r][0]) for r in members)
        if n == 0:
            continue
        ins = np.stack([rows[r][0][:n] for r in members])   # members × calls
        outs = np.stack([rows[r][1][:n] for r in members])
        known = (ins >= 0).all(axis=0) & (outs >= 0).all(axis=0)
        same_in = (ins == ins[:1]).all(axis=0)
        same_out = (outs == outs[:1]).all(axis=0)
        dispatch = known & same_in & ~same_out
        combine = known & same_out & ~same_in
        balanced = known & same_in & same_out
        used = dispatch | combine | balanced
        if not used.any():
            continue
        load = (np.where(dispatch, outs, 0) + np.where(combine, ins, 0) + np.where(balanced, outs, 0)).sum(axis=1)
        hot = int(np.argmax(load))
        others = np.delete(load, hot)
        med = float(np.median(others)) if len(others) else 0.0
        factor: Optional[float] = float(load[hot] / med) if med > 0 else None
        out.append({"process_group": str(name), "ranks": [int(r) for r in members],
                    "received_elements": {str(r): int(v) for r, v in zip(members, load)},
                    "hot_rank": int(members[hot]), "factor": factor,
                    "calls": {"dispatch": int(dispatch.sum()), "combine": int(combine.sum()),
                              "balanced": int(balanced.sum())},
                    "balanced": factor is not None and factor < BALANCED_BELOW})
    return out
