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

#: Bytes per element for the dtype names Kineto writes in the `dtype` arg (case-insensitive).
DTYPE_BYTES = {
    "float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2, "bfloat16": 2,
    "int": 4, "int32": 4, "long": 8, "int64": 8, "short": 2, "int16": 2, "char": 1, "int8": 1, "byte": 1,
    "uint8": 1, "bool": 1, "complexfloat": 8, "complexdouble": 16, "complexhalf": 4, "float8_e4m3fn": 1,
    "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1, "uint16": 2, "uint32": 4, "uint64": 8,
}

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
    """Every rank's comm rows in one table (rank column added; times still on each rank's own clock).

    A trace cut off mid-write gives only its rows before the cut, and none when the cut lost a whole thread
    (its collectives are then an unknown subset: analyzer/load/damage.py).

    The rows come from each rank's summary (analyzer/rank/summary.py) with their step and ``compute_before``
    (share of the step's compute done before the row) already computed where the rank was parsed; the ranks'
    packed tables are joined as raw arrays (analyzer/rank/packed.py), strings as the job's shared objects.
    """
    from analyzer.rank.packed import concat, lengths
    damage = getattr(job, "damage", None) or {}
    ranks = list(job.traces)
    parts = [_packed_collectives(job.traces[r]) for r in ranks]
    n = lengths(parts)
    long = concat(parts) if n.sum() else None
    if long is None or not len(long):
        return pd.DataFrame({k: [] for k in _LONG_COLUMNS + ["step"]})
    rank = np.repeat(np.asarray(ranks, dtype=np.int64), n)
    cut = np.repeat(np.array([_cut_at(damage.get(r)) for r in ranks], dtype=np.int64), n)
    long["rank"] = rank
    long["device_type"] = np.repeat(np.array([job.traces[r].device_type for r in ranks], dtype=object), n)
    if (cut < _NO_CUT).any():
        long = long[long["start"].to_numpy() < cut].reset_index(drop=True)
    long = long.reindex(columns=[k for k in _LONG_COLUMNS] + ["step", "compute_before"])
    for k in ("op", "dtype", "pg_name", "pg_ranks"):  # categories → the shared string objects
        col = long[k]
        long[k] = (np.asarray(col.astype(object).fillna(""), dtype=object) if isinstance(col.dtype, pd.CategoricalDtype)
                   else col.fillna("").astype(str))
    long["peer"] = long["peer"].fillna(-1).astype(np.int64)
    long["nelems"] = np.where(long["op"].to_numpy() == "allgather", long["out_nelems"], long["in_nelems"])
    long["nelems"] = np.where(long["nelems"] < 0, np.maximum(long["in_nelems"], long["out_nelems"]),
                              long["nelems"]).astype(np.int64)
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


def assign_keys(long: pd.DataFrame, declared: dict[str, Any]) -> Keys:
    """Set `process_group` on every row: the pg name; else the only declared group; else stream / rank order."""
    pg = long["pg_name"].to_numpy()
    has = pg != ""
    only = next(iter(declared)) if len(declared) == 1 else None
    cpu = long["device_type"].to_numpy() == "cpu"
    fallback = np.where(cpu, "order", "stream:" + long["stream"].astype(str).to_numpy())
    if only is not None:
        fallback = np.full(len(long), only, dtype=object)
    long["process_group"] = np.where(has, pg, fallback)
    members: dict[str, list[int]] = {}
    present = long.groupby("process_group")["rank"].unique()
    for key, rks in present.items():
        g = declared.get(key)
        members[key] = list(g.ranks) if g is not None and g.ranks else sorted(int(x) for x in rks)
    for rk in long.loc[has, ["pg_name", "pg_ranks"]].drop_duplicates().itertuples(index=False):
        from analyzer.cross_rank.topology import parse_ranks
        pr = parse_ranks(rk.pg_ranks)
        if pr and len(pr) > len(members.get(rk.pg_name, [])):
            members[rk.pg_name] = pr
    method = "process_group" if has.all() or only is not None else "stream_order"
    return Keys(members, method)


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
    m["wait_ns"] = latest - m["start"].to_numpy()
    m["duration_ns"] = (m["end"] - m["start"]).to_numpy()
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


def instance_table(job: Any, gpus_per_node: Optional[int] = None) -> pd.DataFrame:
    """One row per collective instance / send-recv pair on the aligned clock (for plots; see docs/cross-rank.md)."""
    from analyzer.cross_rank.section import analyse
    return analyse(job, gpus_per_node).instances


def member_table(job: Any, gpus_per_node: Optional[int] = None) -> pd.DataFrame:
    """One row per (instance, rank): aligned start/end, wait and duration."""
    from analyzer.cross_rank.section import analyse
    return analyse(job, gpus_per_node).members
