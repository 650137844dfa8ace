"""Dimensions from the groups' membership alone: the groups of one mesh dimension are equal in size, disjoint,
cover the world, and share one offset pattern (ranks − first rank); and which dimension's groups the send/recv
peers fit (a peer is the group-local rank where the program sent on a sub-group: gloo's ``c10d::send`` records
the group rank)."""
from __future__ import annotations

from itertools import combinations
from typing import Optional

import numpy as np


def partitions(groups: dict[str, list[int]], world: int) -> list[list[str]]:
    """Sets of group names that partition range(world) into equal, disjoint sets with one offset pattern each,
    in order of first appearance; groups of one rank and the world group are none."""
    buckets: dict[tuple, list[str]] = {}
    for name, ranks in groups.items():
        if 1 < len(ranks) < world:
            pattern = tuple(r - ranks[0] for r in ranks)
            buckets.setdefault(pattern, []).append(name)
    out = []
    for names in buckets.values():
        seen: set = set()
        keep = []
        for n in names:
            rs = set(groups[n])
            if rs & seen:
                continue
            seen |= rs
            keep.append(n)
        if seen == set(range(world)):
            out.append(keep)
    return out


def choose_dims(sizes: list[int], coords_ok, world: int) -> list[int]:
    """Indices of the largest subset of candidate dimensions whose sizes multiply to the world size and give every
    rank a distinct coordinate (``coords_ok(subset)``); [] when none does."""
    n = len(sizes)
    for k in range(min(n, 8), 0, -1):
        for sub in combinations(range(n), k):
            if int(np.prod([sizes[i] for i in sub])) == world and coords_ok(list(sub)):
                return list(sub)
    return []


def peer_fit(rank: np.ndarray, op: np.ndarray, peer: np.ndarray, mapping: Optional[dict[int, list[int]]],
             world: int) -> Optional[np.ndarray]:
    """Send/recv peers read as global ranks (``mapping`` None) or as ranks local to each rank's group
    (``mapping``: rank → its group's sorted ranks); the global peers when that reading is consistent — no rank
    talks to itself, every peer exists, and a→b sends are as many as b's receives from a — else None."""
    known = peer >= 0
    out = peer.astype(np.int64).copy()
    if mapping is not None:
        width = max((len(g) for g in mapping.values()), default=0)
        table = np.full((world + 1, max(width, 1)), -1, np.int64)  # row world: ranks without a group
        for r, g in mapping.items():
            if 0 <= r < world:
                table[r, :len(g)] = g
        rk = np.where((rank >= 0) & (rank < world), rank, world)[known]
        pk = peer[known]
        if (pk >= width).any():
            return None
        mapped = table[rk, pk]
        if (mapped < 0).any():
            return None
        out[known] = mapped
    k = out[known]
    if (k >= world).any() or (k == rank[known]).any():
        return None
    s = known & (op == "send")
    r = known & (op == "recv")
    span = np.int64(world + 1)
    sends, ns = np.unique(rank[s].astype(np.int64) * span + out[s], return_counts=True)
    recvs, nr = np.unique(out[r] * span + rank[r].astype(np.int64), return_counts=True)
    present = np.unique(rank)
    keys = np.union1d(sends, recvs)
    both = np.isin(keys // span, present) & np.isin(keys % span, present)
    keys = keys[both]
    cs = np.zeros(len(keys), np.int64)
    cr = np.zeros(len(keys), np.int64)
    cs[np.searchsorted(keys, sends[np.isin(sends, keys)])] = ns[np.isin(sends, keys)]
    cr[np.searchsorted(keys, recvs[np.isin(recvs, keys)])] = nr[np.isin(recvs, keys)]
    return out if (cs == cr).all() else None
