"""Bring Flight Recorder dumps, NCCL COLL records and watchdog lines into one per-group sequence table.

Rows of `seqs`: one collective call of one rank, keyed by (group, rank, seq). Group keys: the PG id for
Flight Recorder and watchdog data (they share it: FR `pg_name` == watchdog `PG ID`), `nccl:<commId>` for NCCL
communicators (opCount is a different counter, so these are analysed as their own groups).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from parsers.flight_recorder import MAX_RANK

SEQ_COLUMNS = ["source", "group", "rank", "seq", "op", "numel_in", "numel_out", "dtype", "done", "order",
               "file", "line", "text", "frame"]
STATUS_COLUMNS = ["source", "group", "rank", "last_enqueued", "last_started", "last_completed", "file"]
NCCL_DTYPES = {0: "int8", 1: "uint8", 2: "int32", 3: "uint32", 4: "int64", 5: "uint64", 6: "float16",
               7: "float32", 8: "float64", 9: "bfloat16", 10: "fp8_e4m3", 11: "fp8_e5m2"}
FR_DTYPES = {"Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16", "Int": "int32",
             "Long": "int64", "Char": "int8", "Byte": "uint8", "Bool": "bool", "Short": "int16"}
MAX_WORLD_FILL = 1 << 14  # without world_size, ranks 0..max seen are assumed only up to this many
_WD_OPS = {"ALLREDUCE": "allreduce", "ALLGATHER": "allgather", "_ALLGATHER_BASE": "allgather",
           "REDUCE_SCATTER": "reducescatter", "_REDUCE_SCATTER_BASE": "reducescatter", "BROADCAST": "broadcast",
           "REDUCE": "reduce", "ALLTOALL": "alltoall", "ALLTOALL_BASE": "alltoall", "SEND": "send", "RECV": "recv",
           "BARRIER": "barrier", "COALESCED": "coalesced", "GATHER": "gather", "SCATTER": "scatter"}


@dataclass
class Group:
    """A process group / communicator: its key, description, members (global ranks; None when unknown)."""

    key: str
    desc: str = ""
    members: set[int] | None = None
    source: str = ""
    member_source: str = ""


@dataclass
class HangInputs:
    """Everything the hang analysis compares, in plain tables."""

    seqs: pd.DataFrame
    status: pd.DataFrame
    groups: dict[str, Group]
    world: set[int]
    dump_ranks: set[int]
    log_ranks: dict[int, list[Any]] = field(default_factory=dict)
    warn_ranks: set[int] = field(default_factory=set)
    errors: pd.DataFrame = field(default_factory=pd.DataFrame)
    warnings: list[str] = field(default_factory=list)


def _dtype(s: str) -> str:
    """Comma-joined FR dtypes ('Float,Float') → one normalised name set string."""
    parts = sorted({FR_DTYPES.get(x.strip(), x.strip().lower()) for x in str(s).split(",") if x.strip()})
    return ",".join(parts)


def _fr_rows(dumps: list, groups: dict[str, Group], warnings: list[str]) -> tuple[list[dict], list[dict]]:
    """Seq and status rows from Flight Recorder dumps; registers their groups."""
    seqs, status = [], []
    for d in dumps:
        if d.rank is None:
            warnings.append(f"{d.path}: rank unknown; dump not used for cross-rank matching")
            continue
        if _rank_int(d.rank) is None:
            warnings.append(f"{d.path}: rank {d.rank!r} is not a rank (an integer 0 <= rank < {MAX_RANK}); "
                            "dump not used for cross-rank matching")
            continue
        e = d.entries
        for name, cfg in d.pg_config.items():
            if name == "" or cfg.get("ranks") in (None, []):
                continue
            g = groups.setdefault(name, Group(name, source="flight_recorder"))
            g.desc = g.desc or cfg.get("desc", "")
            if g.members is None:
                g.members, g.member_source = _ranks_ok(cfg["ranks"]), "pg_config"
        for name in set(d.pg_status) | set(e["pg_name"]):
            g = groups.setdefault(name, Group(name, source="flight_recorder"))
        for name, desc in e.groupby("pg_name")["pg_desc"].first().items():
            groups[name].desc = groups[name].desc or desc
        coll = e[~e["is_p2p"] & (e["collective_seq_id"] > 0)]
        for r in coll.itertuples(index=False):
            done = r.state == "completed" or r.time_completed_ns > 0
            seqs.append(dict(source="flight_recorder", group=r.pg_name, rank=d.rank, seq=r.collective_seq_id,
                             op=r.op, numel_in=r.input_numel, numel_out=r.output_numel, dtype=_dtype(r.input_dtypes),
                             done=done, order=r.record_id, file=d.path, line=None,
                             text=f"rank {d.rank} {r.profiling_name} seq {r.collective_seq_id} in {r.input_sizes} "
                                  f"{r.input_dtypes} out {r.output_sizes} state {r.state}",
                             frame=r.top_frame))
        for name, st in d.pg_status.items():
            status.append(dict(source="flight_recorder", group=name, rank=d.rank, file=d.path, **st))
    return seqs, status


def _log_rank_map(log: Any) -> dict[tuple[str, int], int]:
    """(host, pid) → global rank from a log's processes table (rank ≥ 0 only)."""
    p = getattr(log, "processes", None)
    if p is None or p.empty:
        return {}
    p = p[p["rank"].astype("int64") >= 0]
    return {(h, int(pid)): int(r) for h, pid, r in zip(p["host"], p["pid"], p["rank"])}


def _nccl_rows(logs: list, groups: dict[str, Group]) -> list[pd.DataFrame]:
    """Seq rows from NCCL COLL lines, one group per commId; registers communicators and their members."""
    frames = []
    for log in logs:
        rmap = _log_rank_map(log)
        comms = getattr(log, "communicators", None)
        if comms is not None and not comms.empty:
            for c in comms.itertuples(index=False):
                cid = str(getattr(c, "comm_id", "") or "")
                if not cid:
                    continue
                key = f"nccl:{cid}"
                g = groups.setdefault(key, Group(key, desc=f"nccl comm {cid} nranks={c.nranks}", source="nccl_log",
                                                 members=set(), member_source="nccl_init"))
                grank = getattr(c, "global_rank", -1)
                grank = int(grank) if grank is not None and int(grank) >= 0 else rmap.get((c.host, int(c.pid)), -1)
                g.members.add(grank if grank >= 0 else int(c.rank))
        colls = getattr(log, "colls", None)
        if colls is None or colls.empty:
            continue
        df = _coll_rows(log, colls, rmap)
        for key in df["group"].unique():
            groups.setdefault(key, Group(key, source="nccl_log"))
        if len(df):
            frames.append(df)
    return frames


def _coll_rows(log: Any, colls: pd.DataFrame, rmap: dict[tuple[str, int], int]) -> pd.DataFrame:
    """Seq rows of one log's COLL lines, built with column operations (logs can hold millions of them)."""
    cid = colls["comm_id"].fillna("").astype(str) if "comm_id" in colls else pd.Series("", index=colls.index)
    crank = pd.to_numeric(colls["rank"], errors="coerce") if "rank" in colls else pd.Series(-1.0, index=colls.index)
    crank = crank.fillna(-1)
    if rmap:
        keys = pd.MultiIndex.from_arrays([colls["host"].astype(str), pd.to_numeric(colls["pid"]).astype("int64")])
        known = pd.Series(list(rmap.values()), index=pd.MultiIndex.from_tuples(list(rmap), names=None), dtype="int64")
        mapped = pd.Series(known.reindex(keys).to_numpy(), index=colls.index)
        rank = mapped.fillna(crank)
    else:
        rank = crank
    oc = colls["op_count"]
    keep = (cid != "") & (rank >= 0) & (rank < MAX_RANK)
    if pd.api.types.is_numeric_dtype(oc):
        seq = oc
    else:  # hex text (opCount is printed in hex); unreadable ones are dropped
        seq = oc.map({v: _hex(v) for v in pd.unique(oc)}).fillna(-1)
        keep &= seq >= 0
    if not keep.any():
        return pd.DataFrame(columns=SEQ_COLUMNS)
    c = colls[keep]
    rank, seq, cid = rank[keep].astype("int64"), seq[keep].astype("int64"), cid[keep]
    dt = c["datatype"].map({v: _nccl_dtype(v) for v in pd.unique(c["datatype"])})
    op = c["op"].map({v: str(v).lower() for v in pd.unique(c["op"])})
    line = c["line"].astype("int64")
    cnt = c["count"].astype("int64")

    def txt(x: pd.Series) -> np.ndarray:
        return np.asarray(x.astype(str), dtype=object)

    hexes = np.array([format(x, "x") for x in seq.tolist()], dtype=object)
    text = ("rank " + txt(rank) + " " + txt(c["op"]) + ": opCount " + hexes + " count " + txt(c["count"])
            + " datatype " + txt(c["datatype"]))
    df = pd.DataFrame({"source": "nccl_log", "group": "nccl:" + cid, "rank": rank, "seq": seq,
                       "op": op, "numel_in": cnt, "numel_out": cnt, "dtype": dt, "done": None,
                       "order": line, "file": log.path, "line": line, "text": pd.Series(text, index=c.index, dtype=object),
                       "frame": ""}, columns=SEQ_COLUMNS)
    return df.reset_index(drop=True)


def _hex(v: Any) -> int:
    """opCount as printed (hex text) or already a number → int; -1 when unreadable or beyond int64."""
    try:
        x = int(v, 16) if isinstance(v, str) else int(v)
    except (TypeError, ValueError, OverflowError):
        return -1
    return x if 0 <= x < 1 << 63 else -1


def _nccl_dtype(v: Any) -> str:
    """NCCL's datatype number (as printed in COLL lines) → dtype name; anything else as text."""
    s = str(v)
    return NCCL_DTYPES.get(int(s), s) if s.lstrip("-").isdigit() else s


def _rank_int(v: Any) -> int | None:
    """An int rank 0 <= r < MAX_RANK from a Python/numpy int or integral float; None for anything else (bools too)."""
    if isinstance(v, (bool, np.bool_)):
        return None
    if isinstance(v, (float, np.floating)):
        if not np.isfinite(v) or not float(v).is_integer():
            return None
        v = int(v) if abs(v) < 2.0 ** 62 else -1
    if isinstance(v, (int, np.integer)):
        return int(v) if 0 <= v < MAX_RANK else None
    return None


def _ranks_ok(ranks: Any) -> set[int]:
    """The members of a collection that are plausible ranks (0 <= r < MAX_RANK, not bool)."""
    return {r for r in map(_rank_int, ranks) if r is not None}


def _wd_rank(r: Any) -> int:
    """Global rank of a watchdog row: the [rankN]: tag when present, else the rank printed in the message."""
    g = getattr(r, "global_rank", -1)
    g = -1 if g is None or pd.isna(g) else int(g)
    return g if g >= 0 else int(r.rank)


def _watchdog_rows(logs: list, groups: dict[str, Group]) -> tuple[list[dict], list[dict], list[dict]]:
    """Seq rows (timed-out work), status rows (last enqueued/started/completed) and error rows from watchdog lines."""
    seqs, status, errors = [], [], []
    for log in logs:
        wd = getattr(log, "watchdog", None)
        if wd is None or wd.empty:
            continue
        st: dict[tuple[str, int], dict] = {}
        # timeout lines often lack the PG prefix; the status line of the same rank and failed seq carries it
        fs = wd["failed_seq"] if "failed_seq" in wd else pd.Series([-1] * len(wd), index=wd.index)
        pg_of = {(_wd_rank(r), int(f)): int(r.pg_id) for r, f in zip(wd.itertuples(index=False), fs)
                 if int(r.pg_id) >= 0 and int(f) >= 0}
        for r in wd.itertuples(index=False):
            rank = _wd_rank(r)
            pid = int(r.pg_id) if str(r.pg_id).lstrip("-").isdigit() else -1
            pid = pid if pid >= 0 else pg_of.get((rank, int(r.seq)), 0)
            pg = str(pid)
            if rank < 0:
                continue
            kind = str(r.kind)
            if kind in ("timeout",) or (kind not in ("last_enqueued", "last_completed", "last_started")
                                        and int(r.seq) > 0 and str(getattr(r, "op_type", ""))):
                g = groups.setdefault(pg, Group(pg, source="watchdog"))
                g.desc = g.desc or str(r.pg_desc or "")
                seqs.append(dict(source="watchdog", group=pg, rank=rank, seq=int(r.seq),
                                 op=_WD_OPS.get(str(r.op_type).upper(), str(r.op_type).lower()),
                                 numel_in=int(r.numel_in), numel_out=int(r.numel_out), dtype="", done=False,
                                 order=int(r.line), file=log.path, line=int(r.line), text=str(r.message), frame=""))
            elif kind.startswith("last_"):
                groups.setdefault(pg, Group(pg, desc=str(r.pg_desc or ""), source="watchdog"))
                s = st.setdefault((pg, rank), dict(source="watchdog", group=pg, rank=rank, last_enqueued=-1,
                                                   last_started=-1, last_completed=-1, file=log.path))
                s[kind] = max(s[kind], int(r.seq))
            if kind in ("nccl_error", "dist_backend_error", "remote_error", "teardown", "timeout"):
                errors.append(dict(rank=rank, group=pg, kind=kind, seq=int(r.seq), file=log.path, line=int(r.line),
                                   text=str(r.message)))
        status.extend(st.values())
    return seqs, status, errors


def _warn_ranks(logs: list) -> set[int]:
    """Global ranks whose own log holds NCCL WARN lines (a rank that failed rather than one that wandered off)."""
    out: set[int] = set()
    for log in logs:
        w = getattr(log, "warns", None)
        if w is None or w.empty or "host" not in w:
            continue
        rmap = _log_rank_map(log)
        out |= {rmap[(h, int(p))] for h, p in zip(w["host"], w["pid"]) if (h, int(p)) in rmap}
    return out


def _log_ranks(logs: list) -> dict[int, list[Any]]:
    """Global rank → the logs that speak for it (processes table, watchdog [rankN] tags)."""
    out: dict[int, list[Any]] = {}
    for log in logs:
        ranks = set(_log_rank_map(log).values())
        wd = getattr(log, "watchdog", None)
        if wd is not None and not wd.empty:
            ranks |= {_wd_rank(r) for r in wd.itertuples(index=False)} - {-1}
        for r in ranks:
            out.setdefault(r, []).append(log)
    return out


def gather(dumps: list, logs: list, world_size: int | None) -> HangInputs:
    """Build the unified tables; resolve group membership where the inputs did not state it."""
    groups: dict[str, Group] = {}
    warnings: list[str] = []
    s1, st1 = _fr_rows(dumps, groups, warnings)
    s2 = _nccl_rows(logs, groups)
    s3, st3, err = _watchdog_rows(logs, groups)
    parts = [pd.DataFrame(s1, columns=SEQ_COLUMNS)] + s2 + [pd.DataFrame(s3, columns=SEQ_COLUMNS)]
    parts = [x for x in parts if len(x)]
    seqs = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=SEQ_COLUMNS)
    if not seqs.empty:  # the dump is the better witness of the same call than a watchdog line
        seqs["_pri"] = seqs["source"].map({"flight_recorder": 0, "nccl_log": 1, "watchdog": 2})
        seqs = seqs.sort_values(["_pri", "order"]).drop_duplicates(["group", "rank", "seq"]).drop(columns="_pri")
        seqs = seqs.sort_values(["group", "rank", "seq"]).reset_index(drop=True)
    status = pd.DataFrame(st1 + st3, columns=STATUS_COLUMNS)
    dump_ranks = {d.rank for d in dumps if d.rank is not None}
    log_ranks = _log_ranks(logs)
    if world_size and not 0 < world_size <= MAX_RANK:
        warnings.append(f"world size {world_size} is not in 1..{MAX_RANK}; ignored")
        world_size = None
    world = set(range(world_size)) if world_size else set()
    seen = dump_ranks | set(log_ranks) | set(pd.to_numeric(seqs["rank"], errors="coerce").dropna()) \
        | set(pd.to_numeric(status["rank"], errors="coerce").dropna())
    for d in dumps:
        for cfg in d.pg_config.values():
            if cfg.get("ranks"):
                seen |= _ranks_ok(cfg["ranks"])
    world |= _ranks_ok(seen)
    if not world_size and world:
        if max(world) < MAX_WORLD_FILL:  # ranks are dense: a gap is a rank that left nothing
            world = set(range(max(world) + 1))
        else:
            warnings.append(f"highest rank seen is {max(world)}; the world is taken as the {len(world)} ranks seen "
                            "(pass the world size to count ranks that left nothing)")
    _resolve_members(groups, seqs, status, world)
    seqs = _link_comms(seqs, groups, warnings)
    return HangInputs(seqs=seqs, status=status, groups=groups, world=world, dump_ranks=dump_ranks,
                      log_ranks=log_ranks, warn_ranks=_warn_ranks(logs),
                      errors=pd.DataFrame(err, columns=["rank", "group", "kind", "seq", "file", "line", "text"]),
                      warnings=warnings)


def _link_comms(seqs: pd.DataFrame, groups: dict[str, Group], warnings: list[str]) -> pd.DataFrame:
    """Fold an NCCL communicator into the process group it serves when members match and opCount + 1 == SeqNum.

    The offset is checked against the watchdog/FR rows of that group (same count at seq = opCount + 1 on a
    majority of comparable rows); with nothing to check against, a communicator is linked only when exactly one
    process group has its members.
    """
    if seqs.empty:
        return seqs
    pgs = [g for g in groups.values() if not g.key.startswith("nccl:") and g.members]
    for c in [g for g in groups.values() if g.key.startswith("nccl:") and g.members]:
        cands = [g for g in pgs if g.members == c.members]
        crow = seqs[seqs["group"] == c.key]
        if not cands or crow.empty:
            continue
        best, best_score = None, 0
        for g in cands:
            grow = seqs[(seqs["group"] == g.key) & (seqs["source"] != "nccl_log")]
            m = grow.merge(crow.assign(seq=crow["seq"] + 1), on=["rank", "seq"], suffixes=("", "_c"))
            m = m[(m["numel_in"] >= 0) & (m["numel_in_c"] >= 0)]
            hits = int((m["numel_in"] == m["numel_in_c"]).sum())
            score = hits - (len(m) - hits)
            if score > best_score:
                best, best_score = g, score
        if best is None and len(cands) == 1 and seqs[(seqs["group"] == cands[0].key)].empty:
            best = cands[0]
        if best is None:
            continue
        idx = seqs["group"] == c.key
        seqs.loc[idx, "seq"] = seqs.loc[idx, "seq"] + 1
        seqs.loc[idx, "group"] = best.key
        best.desc = best.desc or c.desc
        warnings.append(f"NCCL communicator {c.key[5:]} linked to process group {best.key} ({best.desc}): "
                        "opCount + 1 used as the sequence number")
        del groups[c.key]
    pri = seqs["source"].map({"flight_recorder": 0, "nccl_log": 1, "watchdog": 2})
    seqs = seqs.assign(_pri=pri).sort_values(["_pri", "order"]).drop_duplicates(["group", "rank", "seq"])
    return seqs.drop(columns="_pri").sort_values(["group", "rank", "seq"]).reset_index(drop=True)


def _resolve_members(groups: dict[str, Group], seqs: pd.DataFrame, status: pd.DataFrame, world: set[int]) -> None:
    """Members of groups whose config did not list them: the world for the default group, else those observed."""
    for g in groups.values():
        if g.members is None and (g.key == "0" or g.desc == "default_pg"):
            g.members, g.member_source = set(world), "world"
        elif g.members is None:
            seen = set(seqs.loc[seqs["group"] == g.key, "rank"]) | set(status.loc[status["group"] == g.key, "rank"])
            g.members, g.member_source = {int(x) for x in seen}, "observed"
