"""Cross-rank matching of collective instances and send/recv pairs, and the per-instance timing table.

An instance is (process group, sequence number). Sequence numbers are the order of a rank's collectives within
the group (`Process Group Name` args); without args, the order per stream (GPU) or per rank (CPU/gloo).
Send/recv are paired per (group, src, dst) in order: the k-th send a→b with the k-th recv on b from a. Peers
come from the trace (gloo's c10d::send/recv_ args); without them (NCCL kernels carry no peer), each send's
peer is the rank whose recv ends at the same aligned time.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import pandas as pd

from analyzer.cross_rank.topology import P2P_OPS
from analyzer.cross_rank.member_parts import partition_cuts
from parsers.dtype_sizes import DTYPE_BYTES  # noqa: F401  (bytes per element of Kineto's dtype names)

#: nccl-tests bus-bandwidth factors (doc/PERFORMANCE.md): f(n) multiplies algbw.
def busbw_factor(op: str, n: int) -> float:
    """AllReduce 2(n−1)/n; AllGather, ReduceScatter, AllToAll (n−1)/n; Broadcast, Reduce, SendRecv 1."""
    if n <= 0:
        return float("nan")
    if op == "allreduce":
        return 2.0 * (n - 1) / n
    if op in ("allgather", "reducescatter", "alltoall"):
        return (n - 1) / n
    return 1.0


def dtype_size(name: str) -> int:
    """Element size in bytes of a Kineto dtype name; 0 when unknown."""
    return DTYPE_BYTES.get(str(name).strip().lower().replace("c10::", "").replace("torch.", ""), 0)


_LONG_COLUMNS = ["rank", "start", "end", "stream", "op", "in_nelems", "out_nelems", "dtype", "pg_name",
                 "pg_ranks", "peer", "device_type"]


def gather(job: Any) -> pd.DataFrame:
    """Every rank's comm rows in one table (rank column added; times still on each rank's own clock):
    :func:`gather_columns` as a DataFrame."""
    cols = gather_columns(job)
    return pd.DataFrame(cols, copy=False) if len(cols["rank"]) else pd.DataFrame({k: [] for k in _LONG_COLUMNS +
                                                                                   ["step"]})


def gather_columns(job: Any) -> dict[str, np.ndarray]:
    """Every rank's comm rows as named columns (a dict of arrays: a column can be dropped as soon as it has been
    used, which a DataFrame's consolidated blocks do not allow).

    A trace cut off mid-write gives only its rows before the cut, and none when the cut lost a whole thread
    (its collectives are then an unknown subset: analyzer/load/damage.py).

    The rows come from each rank's summary (analyzer/rank/summary.py) with their step and ``compute_before``
    (share of the step's compute done before the row) already computed where the rank was parsed; only the
    columns used here are joined from the ranks' packed tables (analyzer/rank/packed.py), strings as the job's
    shared objects, so no wider table of every row is built on the way.
    """
    from analyzer.rank.packed import concat, concat_columns, lengths
    damage = getattr(job, "damage", None) or {}
    ranks = list(job.traces)
    parts = [_packed_collectives(job.traces[r]) for r in ranks]
    n = lengths(parts)
    wanted = [k for k in _LONG_COLUMNS if k not in ("rank", "device_type")] + ["step", "compute_before"]
    if not n.sum():
        return {k: np.empty(0, np.int64) for k in _LONG_COLUMNS + ["step", "compute_before", "nelems"]}
    try:
        cols = concat_columns(parts, wanted)
    except KeyError:  # a table without every column: joined whole below
        cols = None
    if cols is None:
        long = concat(parts).reindex(columns=wanted)
        for k in ("op", "dtype", "pg_name", "pg_ranks"):  # categories → the shared string objects
            col = long[k]
            long[k] = (np.asarray(col.astype(object).fillna(""), dtype=object)
                       if isinstance(col.dtype, pd.CategoricalDtype) else col.fillna("").astype(str))
        cols = {k: long[k].to_numpy() for k in wanted}
        del long
    cut = np.repeat(np.array([_cut_at(damage.get(r)) for r in ranks], dtype=np.int64), n)
    keep = cols["start"] < cut if (cut < _NO_CUT).any() else None
    cols["rank"] = np.repeat(np.asarray(ranks, dtype=np.int64), n)
    cols["device_type"] = np.repeat(np.array([job.traces[r].device_type for r in ranks], dtype=object), n)
    if keep is not None:
        cols = {k: v[keep] for k, v in cols.items()}
    peer = pd.Series(cols.pop("peer"))
    cols["peer"] = peer.fillna(-1).astype(np.int64).to_numpy()
    op, i_n, o_n = cols["op"], cols["in_nelems"], cols["out_nelems"]
    nel = np.where(op == "allgather", o_n, i_n)
    long = {k: cols.pop(k) for k in _LONG_COLUMNS + ["step", "compute_before"]}
    long["nelems"] = np.where(nel < 0, np.maximum(i_n, o_n), nel).astype(np.int64)
    return long


def _packed_collectives(t: Any) -> Any:
    """A rank's collective rows packed (a RankSummary's own; a full trace's packed here)."""
    from analyzer.rank.packed import pack
    if hasattr(t, "packed"):
        return t.packed("collectives")
    c = t.collectives
    return None if c is None else pack(c)


_NO_CUT = np.iinfo(np.int64).max


def _cut_at(d: Any) -> int:
    """Rows of a damaged trace kept: those starting before the cut; none when its collectives are untrusted."""
    if d is None:
        return _NO_CUT
    return int(d.cut_at_ns) if d.collectives_trusted() else np.iinfo(np.int64).min


@dataclass
class Keys:
    """How rows were grouped: the group key per row and each key's expected members."""

    members: dict[str, list[int]]
    method: str  # process_group | stream_order
    #: groups whose members are only the ranks that have rows in them (no declared ranks, no pg_ranks)
    inferred: frozenset = frozenset()


def assign_keys(long: Any, declared: dict[str, Any]) -> Keys:
    """Set `process_group` on every row: the pg name; else the only declared group; else stream / rank order.

    ``long``: a DataFrame or a dict of columns (:func:`gather_columns`)."""
    pg = np.asarray(long["pg_name"])
    has = pg != ""
    only = next(iter(declared)) if len(declared) == 1 else None
    key = pg.copy() if pg.dtype == object else pg.astype(object)
    if not has.all():  # the fallback key only for the rows that need it, one string object per distinct key
        if only is not None:
            key[~has] = only
        else:
            cpu = np.asarray(long["device_type"])[~has] == "cpu"
            stream = pd.Series(np.asarray(long["stream"])[~has]).astype(str).to_numpy(dtype=object)
            names = np.where(cpu, "order", "stream:" + stream)
            codes, uniq = pd.factorize(names)
            key[~has] = np.asarray(uniq, dtype=object)[codes]
    long["process_group"] = key
    from analyzer.cross_rank.topology import parse_ranks
    members: dict[str, list[int]] = {}
    kcode, knames = pd.factorize(key, sort=True)
    rank = np.asarray(long["rank"], dtype=np.int64)
    span = int(rank.max()) + 1 if len(rank) else 1
    pairs = np.unique(kcode.astype(np.int64) * span + rank)  # (group, rank) present, by group then rank
    cut = np.searchsorted(pairs // span, np.arange(len(knames) + 1))
    inferred = set()
    for i, k in enumerate(knames):
        g = declared.get(k)
        members[k] = list(g.ranks) if g is not None and g.ranks else (pairs[cut[i]:cut[i + 1]] % span).tolist()
        if g is None or not g.ranks:
            inferred.add(k)
    # each distinct (pg name, pg ranks) once, in order of first appearance
    pcode = pd.factorize(pg[has])[0].astype(np.int64)
    rcodes, rnames = pd.factorize(np.asarray(long["pg_ranks"])[has])
    _, first = np.unique(pcode * (len(rnames) + 1) + rcodes, return_index=True)
    named = np.flatnonzero(has)[np.sort(first)]
    for name, ranks_text in zip(pg[named], np.asarray(long["pg_ranks"])[named]):
        pr = parse_ranks(ranks_text)
        if pr and len(pr) > len(members.get(name, [])):
            members[name] = pr
            inferred.discard(name)
    method = "process_group" if has.all() or only is not None else "stream_order"
    return Keys(members, method, frozenset(inferred))


#: Columns of a collective row that the cross-rank stage uses after the rows are split (section.py).
COLL_COLUMNS = ("rank", "start", "end", "stream", "op", "nelems", "dtype", "process_group", "step", "compute_before")


def split_rows(long: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], pd.DataFrame]:
    """Group-wide collectives as columns sorted by (rank, group, start, end) with `seq`, and the send/recv rows.

    Consumes ``long`` (a dict from :func:`gather_columns` with `process_group` set): each column is dropped once
    it has been copied, so the rows are held about once. Same rows and order as :func:`collective_sequences`
    and :func:`p2p_rows`."""
    is_p2p = np.isin(long["op"], list(P2P_OPS))
    p2p = pd.DataFrame({k: v[is_p2p] for k, v in long.items()}) if is_p2p.any() else \
        pd.DataFrame({k: v[:0] for k, v in long.items()})
    sel = np.flatnonzero(~is_p2p)
    gcode = pd.factorize(long["process_group"][sel], sort=True)[0]
    order = sel[np.lexsort((long["end"][sel], long["start"][sel], gcode, long["rank"][sel]))]
    del sel, gcode
    coll = {}
    for k in list(long):
        v = long.pop(k)
        if k in COLL_COLUMNS:
            coll[k] = v[order]
        del v
    coll["seq"] = _cumcount(coll["rank"], coll["process_group"])
    return coll, p2p


def _cumcount(rank: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Position of each row within its run of equal (rank, group) (rows sorted by rank then group)."""
    n = len(rank)
    if not n:
        return np.empty(0, np.int64)
    new = np.ones(n, bool)
    new[1:] = (rank[1:] != rank[:-1]) | (group[1:] != group[:-1])
    first = np.flatnonzero(new)
    runs = np.diff(np.append(first, n))
    return np.arange(n, dtype=np.int64) - np.repeat(first, runs)


def collective_sequences(long: pd.DataFrame) -> pd.DataFrame:
    """Rows that are group-wide collectives, with `seq` = order within (rank, process_group)."""
    c = long[~long["op"].isin(P2P_OPS)].sort_values(["rank", "process_group", "start", "end"], kind="stable")
    c["seq"] = c.groupby(["rank", "process_group"], sort=False).cumcount().to_numpy()  # c is a new frame
    return c


def p2p_rows(long: pd.DataFrame) -> pd.DataFrame:
    """Send/recv rows, with (src, dst) filled where the peer is known or implied by a two-member group."""
    p = long[long["op"].isin(P2P_OPS)].copy()
    return p


def pair_by_order(p: pd.DataFrame) -> pd.DataFrame:
    """Given `peer` on send/recv rows: `src`, `dst`, and `seq` = k-th transfer src→dst within the group."""
    p = p[p["peer"] >= 0].copy()
    is_send = p["op"].to_numpy() == "send"
    p["src"] = np.where(is_send, p["rank"], p["peer"]).astype(np.int64)
    p["dst"] = np.where(is_send, p["peer"], p["rank"]).astype(np.int64)
    p = p.sort_values(["process_group", "src", "dst", "op", "start", "end"], kind="stable")
    p["seq"] = p.groupby(["process_group", "src", "dst", "op"], sort=False).cumcount().to_numpy()
    return p


def peers_by_end(p: pd.DataFrame, aligned_end: np.ndarray, tolerance_ns: int, tie_ns: int = 1_000) -> np.ndarray:
    """Peer of each unlabelled send/recv: the other rank of the group whose opposite op ends at the same time.

    A send and a recv of one transfer end together on the aligned clock. When two ranks' ends tie (a stage
    often sends one way and receives the other at one instant), the rank this one exchanges with most among
    its unambiguous transfers wins: pipeline neighbours talk all the time, other ranks never.
    """
    p = p.assign(aend=aligned_end, _i=np.arange(len(p)))
    peer = np.full(len(p), -1, np.int64)
    for _, g in p.groupby("process_group", sort=False):
        members = np.sort(g["rank"].unique())
        dist = np.full((len(g), len(members)), np.inf)
        pos = {i: k for k, i in enumerate(g["_i"].to_numpy())}
        for side, other in (("send", "recv"), ("recv", "send")):
            q = g[g["op"] == side].sort_values("aend")
            if not len(q):
                continue
            for j, b in enumerate(members):
                cand = g[(g["op"] == other) & (g["rank"] == b)].sort_values("aend")
                qq = q[q["rank"] != b]
                if not len(cand) or not len(qq):
                    continue
                m = pd.merge_asof(qq[["aend", "_i", "nelems"]], cand[["aend", "nelems"]].rename(
                    columns={"aend": "cend", "nelems": "cn"}), left_on="aend", right_on="cend",
                    direction="nearest")
                d = np.abs(m["aend"].to_numpy() - m["cend"].to_numpy()).astype(np.float64)
                d[m["cn"].to_numpy() != m["nelems"].to_numpy()] = np.inf
                dist[[pos[i] for i in m["_i"].to_numpy()], j] = d
        best = dist.min(axis=1) if len(members) else np.full(len(g), np.inf)
        near = (dist <= best[:, None] + tie_ns) & (dist <= tolerance_ns)
        n_near = near.sum(axis=1)
        ranks = g["rank"].to_numpy()
        # how often each (rank, other) pair is the only candidate
        uniq = n_near == 1
        choice = np.argmax(near, axis=1)
        pair_count = np.zeros((len(members), len(members)))
        ridx = np.searchsorted(members, ranks)
        np.add.at(pair_count, (ridx[uniq], choice[uniq]), 1)
        pair_count = pair_count + pair_count.T
        score = np.where(near, pair_count[ridx] + 1e-3 * (1 - dist / (tolerance_ns + 1)), -np.inf)
        pick = np.argmax(score, axis=1)
        ok = n_near >= 1
        peer[g["_i"].to_numpy()[ok]] = members[pick[ok]]
    return peer


def instance_frame(members: pd.DataFrame, hosts_of: dict[int, str], expected: dict,
                   owned: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per-instance metrics from member rows (columns iid, rank, start, end aligned, op, nelems, dtype, …).

    ``owned``: the caller hands ``members`` over, already sorted by (iid, rank) with a RangeIndex; it is
    extended into the returned member table, so a job's member rows are not held twice."""
    if owned:
        m = members
    else:
        m = members.sort_values(["iid", "rank"], kind="stable").reset_index(drop=True)
    g = m.groupby("iid", sort=True)
    latest = g["start"].transform("max").to_numpy()
    duration = (m["end"] - m["start"]).to_numpy()
    # a member's span = its wait for the last member to arrive (never past its own end) + its transfer
    wait = np.clip(latest - m["start"].to_numpy(), 0, np.maximum(duration, 0))
    m["wait_ns"] = wait
    m["duration_ns"] = duration
    m["member_transfer_ns"] = duration - wait
    first = g.first()
    inst = pd.DataFrame({
        "instance": first.index.to_numpy(),
        "process_group": first["process_group"].to_numpy(),
        "kind": first["kind"].to_numpy(),
        "seq": first["seq"].to_numpy(),
        "src": first["src"].to_numpy(), "dst": first["dst"].to_numpy(),
        "op": first["op"].to_numpy(),
        "op_consistent": (g["op"].nunique() == 1).to_numpy(),
        "dtype": first["dtype"].to_numpy(),
        "nelems": g["nelems"].max().to_numpy(),
        "n_members": g.size().to_numpy(),
        "start_min": g["start"].min().to_numpy(), "start_max": g["start"].max().to_numpy(),
        "end_min": g["end"].min().to_numpy(), "end_max": g["end"].max().to_numpy(),
        "transfer_ns": g["duration_ns"].min().to_numpy(),
        "step": g["step"].max().to_numpy(),
    })
    inst["group_size"] = [len(expected.get((k, pg), [])) or n for k, pg, n in
                          zip(inst["kind"], inst["process_group"], inst["n_members"])]
    inst["complete"] = inst["n_members"] >= inst["group_size"]
    inst["arrival_skew_ns"] = inst["start_max"] - inst["start_min"]
    inst["end_skew_ns"] = inst["end_max"] - inst["end_min"]
    # last arrival and how much later it was than the second-latest (the delay it alone caused)
    ms = m[["iid", "start", "rank"]].sort_values(["iid", "start", "rank"], kind="stable")
    last = ms.groupby("iid").tail(1).set_index("iid")
    second = ms.groupby("iid")["start"].nth(-2)
    second = pd.Series(second.to_numpy(), index=ms.loc[second.index, "iid"].to_numpy())
    inst["last_rank"] = last["rank"].reindex(inst["instance"]).to_numpy()
    sec = second.reindex(inst["instance"]).to_numpy()
    inst["last_delay_ns"] = np.where(np.isnan(sec.astype(float)), 0, inst["start_max"] - np.nan_to_num(sec))
    inst["total_wait_ns"] = m.groupby("iid")["wait_ns"].sum().reindex(inst["instance"]).to_numpy()
    size = np.array([dtype_size(d) for d in inst["dtype"]], dtype=np.int64)
    nbytes = np.where((size > 0) & (inst["nelems"].to_numpy() >= 0), inst["nelems"].to_numpy() * size, -1)
    inst["bytes"] = nbytes
    with np.errstate(divide="ignore", invalid="ignore"):
        algbw = np.where((nbytes > 0) & (inst["transfer_ns"] > 0), nbytes / inst["transfer_ns"].to_numpy(), np.nan)
    factor = np.array([busbw_factor("sendrecv" if k == "p2p" else op, n)
                       for k, op, n in zip(inst["kind"], inst["op"], inst["group_size"])])
    inst["algbw_gbps"] = algbw
    inst["busbw_gbps"] = algbw * factor
    if hosts_of:
        h = m["rank"].map(hosts_of)
        nh = h.groupby(m["iid"]).nunique().reindex(inst["instance"]).to_numpy()
        inst["n_hosts"] = nh
        inst["crossed_hosts"] = nh > 1
    else:
        inst["n_hosts"] = np.nan
        inst["crossed_hosts"] = None
    return inst, m


def mark_wait_known(inst: pd.DataFrame, expected: dict, present: Any, maybe: Optional[dict] = None) -> None:
    """Set ``wait_known`` on the instance table, in place: False on a collective instance that lacks a member
    whose rank is traced in this job (its rows were lost in a cut, or it recorded fewer steps). Its members'
    waits are then known only up to the last *present* arrival: the rest of each span is the wait for the absent
    rank and the transfer together, which no timing here tells apart, so its bandwidth is unknown too (NaN). An
    instance lacking only ranks that were never traced (a subset of the world traced) keeps True: nothing in
    the folder says those ranks were late (docs/metrics.md, "Wait and transfer"). ``maybe``: group → traced
    ranks that may be members though no row says so (a cut lost all their collectives, and the group's members
    are known only from its rows: :func:`maybe_members`)."""
    if not len(inst):
        inst["wait_known"] = np.ones(0, bool)
        return
    present = set(int(r) for r in present)
    need = {k[1]: sum(1 for r in m if int(r) in present) + len((maybe or {}).get(k[1], ()))
            for k, m in expected.items() if k[0] == "collective"}
    n_present = inst["process_group"].map(need).fillna(0).to_numpy(np.int64)
    known = (inst["kind"].to_numpy() != "collective") | (inst["n_members"].to_numpy() >= n_present)
    inst["wait_known"] = known
    if not known.all():
        for c in ("algbw_gbps", "busbw_gbps"):
            inst[c] = np.where(known, inst[c].to_numpy(np.float64), np.nan)


def maybe_members(keys: Keys, job: Any) -> dict[str, list[int]]:
    """Per group whose members are known only from its rows (Keys.inferred) and that spans every other traced
    rank: the ranks whose collectives a cut lost entirely (analyzer/load/damage.py), which may have been members.
    A group of only some of the other ranks (a TP or pipeline pair) is left as its rows say: nothing tells
    which of such groups a lost rank was in, and adding it to all would unsettle every one of them."""
    lost = {int(r) for r, d in (getattr(job, "damage", None) or {}).items()
            if d is not None and not d.collectives_trusted()}
    if not lost:
        return {}
    others = {int(r) for r in getattr(job, "traces", None) or {}} - lost
    out = {}
    for k in keys.inferred:
        seen = set(int(r) for r in keys.members.get(k, []))
        extra = sorted(lost - seen)
        if extra and others <= seen:
            out[k] = extra
    return out


def unknown_iids(inst: Optional[pd.DataFrame]) -> np.ndarray:
    """Sorted ids of the instances whose waits are known only in part (:func:`mark_wait_known`)."""
    if inst is None or not len(inst) or "wait_known" not in inst:
        return np.empty(0, np.int64)
    return np.sort(inst.loc[~inst["wait_known"].to_numpy(bool), "instance"].to_numpy(np.int64))


#: The instance stage works through the member rows in partitions of about this many rows (whole instances):
#: its memory stays that of one partition however large the job (docs/scale.md).
PARTITION_ROWS = 1 << 16


def instance_frames(m: pd.DataFrame, hosts_of: dict[int, str], expected: dict,
                    partition_rows: Optional[int] = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`instance_frame` over partitions of whole instances (about ``partition_rows`` rows each, default
    PARTITION_ROWS): ``m`` is handed over sorted by (iid, rank) with a RangeIndex; the result is the same as one
    call over every row."""
    n = len(m)
    partition_rows = PARTITION_ROWS if partition_rows is None else partition_rows
    if n <= partition_rows:
        return instance_frame(m, hosts_of, expected, owned=True)
    cuts = partition_cuts(m["iid"].to_numpy(), partition_rows)
    wait, dur, tr = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64)
    parts = []
    for a, b in zip(cuts[:-1], cuts[1:]):
        inst, part = instance_frame(m.iloc[a:b].reset_index(drop=True), hosts_of, expected, owned=True)
        wait[a:b], dur[a:b] = part["wait_ns"].to_numpy(), part["duration_ns"].to_numpy()
        tr[a:b] = part["member_transfer_ns"].to_numpy()
        parts.append(inst)
        del part
    m["wait_ns"], m["duration_ns"], m["member_transfer_ns"] = wait, dur, tr
    return pd.concat(parts, ignore_index=True), m


def instance_task(item: tuple) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Engine task for one partition of whole instances (section.py): its instance rows, which travel back,
    and its member rows with their waits, which stay where they were made (member_parts.py)."""
    frame, hosts_of, expected = item
    return instance_frame(frame.reset_index(drop=True), hosts_of, expected, owned=True)
