"""Which process group a Flight Recorder `pg_status` key means, and in which counter its numbers are.

PyTorch keys `pg_status` by the rank-local `pg_id` (the creation index of the process-group object on that
rank; non-members create none, so it differs from rank to rank) while groups are named in `pg_config` and in
every entry's `process_group[0]`. The entries give (pg_id, name) anchors. For pg_ids without entries (a ring
buffer that wrapped past them), both counters grow in creation order, so when the numeric names of `pg_config`
and the pg_ids are equally many and every anchor agrees with pairing them in sorted order, that pairing is used;
otherwise such a pg_id stays unnamed.

The status numbers are the sequence number of the last work enqueued / started / completed, in that work's own
counter: NCCL numbers collectives (`collective_seq_id`) and P2P ops (`p2p_seq_id`) separately, gloo counts every
op (`op_id`, P2P included, though gloo records no P2P entry). `status_space` finds which one by matching the
rank's entries, so a status number is only ever compared with numbers of the same counter.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from parsers.table import Table

COLL, P2P, OP, UNKNOWN = "collective", "p2p", "op", "unverified"


@dataclass(frozen=True)
class PgNames:
    """pg_id → group name for one dump; `inferred` holds the pg_ids named by creation order, not by an entry."""

    names: dict[str, str]
    inferred: frozenset[str]
    conflicts: tuple[str, ...] = ()


def _numeric(s: str) -> bool:
    return s.isdigit() and len(s) < 19


def pg_id_names(entries: Table, pg_config: dict, pg_status: dict) -> PgNames:
    """Name every pg_status key of one dump that the dump itself can name (see the module docstring)."""
    anchors: dict[str, str] = {}
    conflicts: list[str] = []
    if not entries.empty:
        pairs = entries[(entries["pg_id"] >= 0) & (entries["pg_name"] != "")][["pg_id", "pg_name"]]
        for pid, x in pairs.drop_duplicates(["pg_id", "pg_name"]).groups("pg_id"):
            names = x["pg_name"]
            if len(set(names.tolist())) == 1:
                anchors[str(int(pid))] = str(names[0])
            else:
                conflicts.append(f"pg_id {pid} is named {sorted(set(names))} by different entries")
    ids = sorted((k for k in pg_status if _numeric(str(k))), key=int)
    cfg = sorted((n for n in pg_config if n != ""), key=lambda n: (not _numeric(n), int(n) if _numeric(n) else 0, n))
    inferred: set[str] = set()
    out = dict(anchors)
    if ids and len(ids) == len(cfg) and all(_numeric(n) for n in cfg):
        zipped = dict(zip(ids, cfg))
        if all(zipped.get(i, n) == n for i, n in anchors.items()):
            inferred = {i for i in ids if i not in anchors}
            out.update({i: zipped[i] for i in inferred})
    return PgNames(names=out, inferred=frozenset(inferred), conflicts=tuple(conflicts))


@dataclass(frozen=True)
class StatusInCollectives:
    """One (rank, group) status translated to collective sequence numbers (-1 unknown) and P2P numbers."""

    space: str
    coll_enqueued: int
    coll_completed: int
    p2p_enqueued: int
    p2p_completed: int


def _value_entry(e: Table, space: str, v: int) -> Table:
    """The rank's entries (of one group) that carry `v` in counter `space`."""
    if space == COLL:
        return e[~e["is_p2p"] & (e["collective_seq_id"] == v)]
    if space == P2P:
        return e[e["is_p2p"] & (e["p2p_seq_id"] == v)]
    return e[e["op_id"] == v]


def status_space(e: Table, status: dict[str, int], backend: str) -> StatusInCollectives:
    """Translate one pg_status row with the rank's own entries of that group `e` (sorted by record_id).

    The last enqueued work is normally the group's last entry: its counter is the one whose value equals
    `last_enqueued`. Without a matching entry the number is unverified: for NCCL it is still a collective number
    when the group never showed a P2P entry, for gloo an op count (an upper bound of the collective count).
    """
    enq, done = int(status.get("last_enqueued", -1)), int(status.get("last_completed", -1))
    if len(e):
        e = e[np.array([str(x).rsplit(":", 1)[-1] != "coalesced" for x in e["profiling_name"]], dtype=bool)]
    space = UNKNOWN
    last = e.row(-1) if len(e) else None
    if last is not None and enq >= 0:
        if not last["is_p2p"] and int(last["collective_seq_id"]) == enq:
            space = COLL
        elif last["is_p2p"] and int(last["p2p_seq_id"]) == enq:
            space = P2P
        elif int(last["op_id"]) == enq:
            space = OP
        else:  # the dump raced an enqueue: look for the value anywhere in the window
            for sp in (COLL, P2P, OP):
                if len(_value_entry(e, sp, enq)):
                    space = sp
                    break
    if space == UNKNOWN:
        has_p2p = bool(len(e) and e["is_p2p"].any())
        if backend == "nccl" and not has_p2p and len(e):
            space = COLL
        elif backend == "gloo" or (not backend and not has_p2p):
            space = OP
    coll_enq = coll_done = p2p_enq = p2p_done = -1
    if space == COLL:
        coll_enq = enq
        coll_done = done
        if done >= 0 and len(e) and e["is_p2p"].any() and not len(_value_entry(e, COLL, done)):
            p = _value_entry(e, P2P, done)  # the last completed work was a P2P op: its collective counter
            if len(p):
                coll_done, p2p_done = int(p["collective_seq_id"][-1]), done
    elif space in (P2P, OP):
        hit = _value_entry(e, space, enq)
        coll_enq = int(hit["collective_seq_id"][-1]) if len(hit) else -1
        if space == P2P:
            p2p_enq = enq
        d = _value_entry(e, space, done) if done >= 0 else e[0:0]
        coll_done = int(d["collective_seq_id"][-1]) if len(d) else -1
        if space == P2P:
            p2p_done = done
        if space == OP and not len(hit) and not (len(e) and e["is_p2p"].any()):
            coll_enq = -1  # an op count is only an upper bound of collectives: not a collective number
    return StatusInCollectives(space, coll_enq, coll_done, p2p_enq, p2p_done)
