"""Bring Flight Recorder dumps, NCCL COLL records and watchdog lines into per-group call and progress tables.

`calls`: one row per call of one rank in one group. Collectives carry `seq` = their collective sequence number
(FR `collective_seq_id`, NCCL `opCount + 1` once a communicator is linked to its group, watchdog `SeqNum`);
P2P ops carry `seq` = their P2P number and `coll_seq` = the collective counter at that point (the two counters
are never compared). Groups are keyed by the process-group *name* every member shares (FR `process_group[0]`,
the watchdog's `PG ID`), or `nccl:<commId>` for an NCCL communicator not linked to a group.

`progress`: one row per (group, rank): how far the rank got in collectives (enqueued / completed, -1 unknown)
and in P2P ops, from its own entries and its translated `pg_status` (analyzer/hang/fr_groups.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from analyzer.hang import fr_groups
from parsers.flight_recorder import MAX_RANK
from parsers.table import Table, unique

CALL_COLUMNS = ["source", "group", "rank", "kind", "seq", "coll_seq", "op", "peer", "numel_in", "numel_out",
                "sizes_in", "sizes_out", "dtype_in", "dtype_out", "done", "order", "created_ns", "timeout_ms", "ops_before",
                "file", "line", "text", "frame", "stack"]
PROGRESS_COLUMNS = ["group", "rank", "source", "coll_enqueued", "coll_completed", "p2p_enqueued", "p2p_completed",
                    "space", "raw_enqueued", "raw_started", "raw_completed", "window_lo", "file"]
NCCL_DTYPES = {0: "int8", 1: "uint8", 2: "int32", 3: "uint32", 4: "int64", 5: "uint64", 6: "float16",
               7: "float32", 8: "float64", 9: "bfloat16", 10: "fp8_e4m3", 11: "fp8_e5m2"}
FR_DTYPES = {"Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16", "Int": "int32",
             "Long": "int64", "Char": "int8", "Byte": "uint8", "Bool": "bool", "Short": "int16",
             "Float8_e4m3fn": "fp8_e4m3", "Float8_e5m2": "fp8_e5m2", "ComplexFloat": "complex64"}
ERROR_COLUMNS = ["rank", "group", "kind", "seq", "file", "line", "text"]
MAX_WORLD_FILL = 1 << 14  # without world_size, ranks 0..max seen are assumed only up to this many
_INT_CALL_COLUMNS = ("rank", "seq", "coll_seq", "peer", "numel_in", "numel_out", "done", "order", "created_ns",
                     "timeout_ms", "ops_before", "line")
_CALL_DTYPES = {c: (np.int64 if c in _INT_CALL_COLUMNS else object) for c in CALL_COLUMNS}
_PROGRESS_DTYPES = {c: (object if c in ("group", "source", "space", "file") else np.int64) for c in PROGRESS_COLUMNS}
_PRIORITY = {"flight_recorder": 0, "nccl_log": 1, "watchdog": 2}
_WD_OPS = {"ALLREDUCE": "allreduce", "ALLGATHER": "allgather", "_ALLGATHER_BASE": "allgather",
           "REDUCE_SCATTER": "reducescatter", "_REDUCE_SCATTER_BASE": "reducescatter", "BROADCAST": "broadcast",
           "REDUCE": "reduce", "ALLTOALL": "alltoall", "ALLTOALL_BASE": "alltoall", "SEND": "send", "RECV": "recv",
           "BARRIER": "barrier", "COALESCED": "coalesced", "GATHER": "gather", "SCATTER": "scatter"}


@dataclass
class Group:
    """A process group / communicator: name, description, members (global ranks; None when unknown), backend."""

    key: str
    desc: str = ""
    members: set[int] | None = None
    source: str = ""
    member_source: str = ""
    backend: str = ""
    pg_ids: dict[int, str] = field(default_factory=dict)


@dataclass
class DumpFacts:
    """What one rank's dump holds: its file, format, backend, entry count and whether the buffer was empty."""

    rank: int
    path: str
    format: str
    backend: str
    entries: int
    has_entries: bool
    version: str


@dataclass
class HangInputs:
    """Everything the hang analysis compares, in plain tables."""

    calls: Table
    progress: Table
    groups: dict[str, Group]
    world: set[int]
    dumps: dict[int, DumpFacts]
    log_ranks: dict[int, list[Any]] = field(default_factory=dict)
    warn_ranks: set[int] = field(default_factory=set)
    errors: Table = field(default_factory=lambda: Table.empty_of(ERROR_COLUMNS))
    warnings: list[str] = field(default_factory=list)

    @property
    def dump_ranks(self) -> set[int]:
        return set(self.dumps)


def norm_dtypes(s: str) -> str:
    """Comma-joined FR dtypes ('Float,Float') → sorted set of normalised names ('float32')."""
    parts = sorted({FR_DTYPES.get(x.strip(), x.strip().lower()) for x in str(s).split(",") if x.strip()})
    return ",".join(parts)


def _global_peer(local: np.ndarray, members: list[int]) -> np.ndarray:
    """Group-local peer indices → global ranks through the sorted member list (-1 where out of range)."""
    out = np.full(len(local), -1, dtype=np.int64)
    if members:
        ok = (local >= 0) & (local < len(members))
        out[ok] = np.asarray(members, dtype=np.int64)[local[ok]]
    return out


def _fr_tables(dumps: list, groups: dict[str, Group], warnings: list[str]
               ) -> tuple[list[Table], list[dict], dict[int, DumpFacts]]:
    """Call rows, progress rows and per-rank dump facts from Flight Recorder dumps; registers their groups."""
    frames, progress, facts = [], [], {}
    usable = []
    for d in dumps:
        rank = _rank_int(d.rank)
        if rank is None:
            why = "rank unknown" if d.rank is None else f"rank {d.rank!r} is not a rank (0 <= rank < {MAX_RANK})"
            warnings.append(f"{d.path}: {why}; dump not used for cross-rank matching")
            continue
        if rank in facts:
            warnings.append(f"{d.path}: a second dump of rank {rank} (first: {facts[rank].path}); ignored")
            continue
        e = d.entries.sort_values("record_id", kind="stable")
        facts[rank] = DumpFacts(rank, d.path, d.format, d.backend, len(e), bool(getattr(d, "has_entries", True)),
                                d.version)
        usable.append((rank, d, e[e["pg_name"] != ""]))
        _register_groups(d, e, groups)
    for rank, d, named in usable:  # second pass: every group's members are known now (global P2P peers)
        names = fr_groups.pg_id_names(named, d.pg_config, d.pg_status)
        warnings.extend(f"{d.path}: {c}" for c in names.conflicts)
        for pid, name in names.names.items():
            if name in groups:
                groups[name].pg_ids[rank] = pid
        unnamed = sorted(set(d.pg_status) - set(names.names), key=lambda k: (len(k), k))
        if unnamed:
            warnings.append(f"{d.path}: pg_status of pg_id {', '.join(unnamed)} left unnamed (no entry of those "
                            "groups in the buffer, and their names cannot be told from pg_config)")
        if len(named):
            frames.append(_fr_calls(d, rank, named, groups))
        for pid, st in d.pg_status.items():
            name = names.names.get(pid)
            if name is not None:
                progress.append(_fr_progress(d, rank, name, named[named["pg_name"] == name], st,
                                             pid in names.inferred))
    return frames, progress, facts


def _register_groups(d: Any, e: Table, groups: dict[str, Group]) -> None:
    """Groups named by one dump's pg_config and entries, with members from pg_config (gloo's '' entry skipped)."""
    for name, cfg in d.pg_config.items():
        if name == "":
            continue
        g = groups.setdefault(name, Group(name, source="flight_recorder"))
        g.desc = g.desc or cfg.get("desc", "")
        ranks = cfg.get("ranks")
        if ranks and g.members is None:
            g.members, g.member_source = _ranks_ok(ranks), "pg_config"
    named = e[e["pg_name"] != ""]
    for name, desc in ((k, x["pg_desc"][0]) for k, x in named.groups("pg_name")):
        g = groups.setdefault(name, Group(name, source="flight_recorder"))
        g.desc = g.desc or desc
        g.backend = g.backend or d.backend


def _fr_progress(d: Any, rank: int, name: str, mine: Table, st: dict, inferred: bool) -> dict:
    """One progress row: the rank's pg_status of a group translated to collective / P2P numbers."""
    tr = fr_groups.status_space(mine, st, d.backend)
    coll = mine[~mine["is_p2p"]]
    return dict(group=name, rank=rank, source="flight_recorder", coll_enqueued=tr.coll_enqueued,
                coll_completed=tr.coll_completed, p2p_enqueued=tr.p2p_enqueued, p2p_completed=tr.p2p_completed,
                space=tr.space + ("/inferred-name" if inferred else ""),
                raw_enqueued=int(st.get("last_enqueued", -1)), raw_started=int(st.get("last_started", -1)),
                raw_completed=int(st.get("last_completed", -1)),
                window_lo=int(coll["collective_seq_id"].min()) if len(coll) else -1, file=d.path)


def _fr_calls(d: Any, rank: int, e: Table, groups: dict[str, Group]) -> Table:
    """One dump's entries → call rows (collectives with seq > 0, P2P ops with their global peer)."""
    e = e[e["op"] != "coalesced"]
    p2p = e["is_p2p"]
    seq = np.where(p2p, e["p2p_seq_id"], e["collective_seq_id"])
    keep = seq > 0
    e, p2p, seq = e[keep], p2p[keep], seq[keep]
    peer = e["peer"].astype(np.int64)
    gpeer = np.full(len(e), -1, dtype=np.int64)
    for name in unique(e["pg_name"][p2p]) if p2p.any() else []:
        g = groups.get(name)
        idx = (e["pg_name"] == name) & p2p
        gpeer[idx] = _global_peer(peer[idx], sorted(g.members) if g and g.members else [])
    # 'scheduled' does not mean incomplete (completion is often not discovered per entry): `_completion` decides
    done = np.where(e["state"] == "completed", 1, -1)
    # ops the group issued since the previous recorded one (op_id counts every op; gloo records no send/recv)
    op_id = e["op_id"].astype(np.int64)
    prev = _previous_in_group(e["pg_name"], op_id)
    ops_before = np.where((prev >= 0) & (op_id >= 0), op_id - prev - 1, -1)
    text = [f"rank {rank} {name}{' p2p #' if is_p2p else ' seq '}{n} in {si} {di} out {so} state {state}"
            for name, is_p2p, n, si, di, so, state in zip(e["profiling_name"], p2p.tolist(), seq.tolist(),
                                                          e["input_sizes"], e["input_dtypes"], e["output_sizes"],
                                                          e["state"])]
    return Table({
        "source": "flight_recorder", "group": e["pg_name"], "rank": rank,
        "kind": np.where(p2p, "p2p", "coll").astype(object), "seq": seq, "coll_seq": e["collective_seq_id"],
        "op": e["op"], "peer": gpeer, "numel_in": e["input_numel"],
        "numel_out": e["output_numel"], "sizes_in": e["input_sizes"],
        "sizes_out": e["output_sizes"],
        "dtype_in": [norm_dtypes(x) for x in e["input_dtypes"]], "dtype_out": [norm_dtypes(x) for x in e["output_dtypes"]],
        "done": done, "order": e["record_id"], "created_ns": e["time_created_ns"],
        "timeout_ms": e["timeout_ms"], "ops_before": ops_before,
        "file": d.path, "line": -1, "text": text, "frame": e["top_frame"],
        "stack": e["user_stack"]}, CALL_COLUMNS, dtypes=_CALL_DTYPES)


def _previous_in_group(keys: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per row: the value of the previous row with the same key (-1 for a key's first row)."""
    last: dict = {}
    out = np.empty(len(values), dtype=np.int64)
    for i, (k, v) in enumerate(zip(keys.tolist(), values.tolist())):
        out[i] = last.get(k, -1)
        last[k] = v
    return out


def _log_rank_map(log: Any) -> dict[tuple[str, int], int]:
    """(host, pid) → global rank from a log's processes table (rank ≥ 0 only)."""
    p = getattr(log, "processes", None)
    if p is None or p.empty:
        return {}
    p = p[p["rank"].astype(np.int64) >= 0]
    return {(h, int(pid)): int(r) for h, pid, r in zip(p["host"], p["pid"], p["rank"])}


def _nccl_rows(logs: list, groups: dict[str, Group]) -> list[Table]:
    """Call rows from NCCL COLL lines, one group per commId; registers communicators and their members."""
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
                                                 members=set(), member_source="nccl_init", backend="nccl"))
                grank = getattr(c, "global_rank", -1)
                grank = int(grank) if grank is not None and int(grank) >= 0 else rmap.get((c.host, int(c.pid)), -1)
                g.members.add(grank if grank >= 0 else int(c.rank))
        colls = getattr(log, "colls", None)
        if colls is None or colls.empty:
            continue
        df = _coll_rows(log, colls, rmap)
        for key in unique(df["group"]):
            groups.setdefault(key, Group(key, source="nccl_log", backend="nccl"))
        if len(df):
            frames.append(df)
    return frames


def _coll_rows(log: Any, colls: Table, rmap: dict[tuple[str, int], int]) -> Table:
    """Call rows of one log's COLL lines, built with column operations (logs can hold millions of them)."""
    n = len(colls)
    cid = (np.array(["" if v is None or v != v else str(v) for v in colls["comm_id"].tolist()], dtype=object)
           if "comm_id" in colls else np.full(n, "", dtype=object))
    crank = _numbers(colls["rank"]) if "rank" in colls else np.full(n, -1.0)
    crank = np.where(np.isnan(crank), -1, crank)
    if rmap:
        mapped = np.array([rmap.get((str(h), int(p)), np.nan) for h, p in zip(colls["host"].tolist(),
                                                                              colls["pid"].tolist())], dtype=float)
        rank = np.where(np.isnan(mapped), crank, mapped)
    else:
        rank = crank
    oc = colls["op_count"]
    keep = (cid != "") & (rank >= 0) & (rank < MAX_RANK)
    if oc.dtype.kind in "iufb":
        seq = oc
    else:  # hex text (opCount is printed in hex); unreadable ones are dropped
        hexes = {v: _hex(v) for v in unique(oc)}
        seq = np.array([hexes[v] for v in oc.tolist()], dtype=np.int64)
        keep &= seq >= 0
    if not keep.any():
        return Table.empty_of(CALL_COLUMNS, _CALL_DTYPES)
    c = colls[keep]
    rank, seq, cid = rank[keep].astype(np.int64), seq[keep].astype(np.int64), cid[keep]
    dts = {v: _nccl_dtype(v) for v in unique(c["datatype"])}
    dt = np.array([dts[v] for v in c["datatype"].tolist()], dtype=object)
    ops = {v: str(v).lower() for v in unique(c["op"])}
    op = np.array([ops[v] for v in c["op"].tolist()], dtype=object)
    line = c["line"].astype(np.int64)
    cnt = c["count"].astype(np.int64)
    cnt_text = [str(x) for x in cnt.tolist()]
    text = [f"rank {r} {o}: opCount {format(q, 'x')} count {n_} datatype {d}"
            for r, o, q, n_, d in zip(rank.tolist(), _texts(c["op"]), seq.tolist(), _texts(c["count"]),
                                      _texts(c["datatype"]))]
    p2p = np.isin(op, ["send", "recv"])
    return Table({"source": "nccl_log", "group": np.array(["nccl:" + x for x in cid.tolist()], dtype=object),
                  "rank": rank, "kind": np.where(p2p, "p2p", "coll").astype(object), "seq": seq, "coll_seq": seq,
                  "op": op, "peer": -1, "numel_in": cnt, "numel_out": cnt, "sizes_in": cnt_text,
                  "sizes_out": cnt_text, "dtype_in": dt, "dtype_out": dt, "done": -1,
                  "order": line, "created_ns": -1, "timeout_ms": -1, "ops_before": -1, "file": log.path,
                  "line": line, "text": text, "frame": "", "stack": ""}, CALL_COLUMNS, dtypes=_CALL_DTYPES)


def _numbers(v: np.ndarray) -> np.ndarray:
    """A column as floats (NaN where a value is not a number), as pandas.to_numeric(errors="coerce") reads it."""
    if v.dtype.kind in "iufb":
        return v.astype(float)
    out = np.full(len(v), np.nan)
    for i, x in enumerate(v.tolist()):
        try:
            out[i] = float(x)
        except (TypeError, ValueError):
            pass
    return out


def _texts(v: np.ndarray) -> list[str]:
    """A column's values as text, as pandas' astype(str) writes them."""
    return [str(x) for x in v.tolist()]


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
    g = -1 if g is None or g != g else int(g)
    return g if g >= 0 else int(r.rank)


def _watchdog_rows(logs: list, groups: dict[str, Group]) -> tuple[list[dict], list[dict], list[dict]]:
    """Call rows (timed-out work), progress rows (last enqueued/completed) and error rows from watchdog lines.

    The watchdog's `PG ID` is the group's name (`pg_uid`), and its `SeqNum` a collective number for collectives.
    """
    calls, progress, errors = [], [], []
    for log in logs:
        wd = getattr(log, "watchdog", None)
        if wd is None or wd.empty:
            continue
        st: dict[tuple[str, int], dict] = {}
        fs = wd["failed_seq"].tolist() if "failed_seq" in wd else [-1] * len(wd)
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
            op = _WD_OPS.get(str(r.op_type).upper(), str(r.op_type).lower())
            if kind in ("timeout",) or (kind not in ("last_enqueued", "last_completed", "last_started")
                                        and int(r.seq) > 0 and str(getattr(r, "op_type", ""))):
                g = groups.setdefault(pg, Group(pg, source="watchdog", backend="nccl"))
                g.desc = g.desc or str(r.pg_desc or "")
                p2p = op in ("send", "recv")
                calls.append(dict(source="watchdog", group=pg, rank=rank, kind="p2p" if p2p else "coll",
                                  seq=int(r.seq), coll_seq=-1 if p2p else int(r.seq), op=op, peer=-1,
                                  numel_in=int(r.numel_in), numel_out=int(r.numel_out), sizes_in=str(int(r.numel_in)),
                                  sizes_out=str(int(r.numel_out)), dtype_in="", dtype_out="", done=0,
                                  order=int(r.line), created_ns=-1, timeout_ms=int(r.timeout_ms), ops_before=-1,
                                  file=log.path,
                                  line=int(r.line),
                                  text=str(r.message), frame="", stack=""))
            elif kind in ("last_enqueued", "last_started", "last_completed"):
                groups.setdefault(pg, Group(pg, desc=str(r.pg_desc or ""), source="watchdog", backend="nccl"))
                s = st.setdefault((pg, rank), dict(group=pg, rank=rank, source="watchdog", coll_enqueued=-1,
                                                   coll_completed=-1, p2p_enqueued=-1, p2p_completed=-1,
                                                   space=fr_groups.COLL, raw_enqueued=-1, raw_started=-1,
                                                   raw_completed=-1, window_lo=-1, file=log.path))
                col = {"last_enqueued": "coll_enqueued", "last_completed": "coll_completed"}.get(kind)
                if col:
                    s[col] = max(s[col], int(r.seq))
                s["raw_" + kind[5:]] = max(s["raw_" + kind[5:]], int(r.seq))
            if kind in ("nccl_error", "dist_backend_error", "remote_error", "teardown", "timeout"):
                errors.append(dict(rank=rank, group=pg, kind=kind, seq=int(r.seq), file=log.path, line=int(r.line),
                                   text=str(r.message)))
        progress.extend(st.values())
    return calls, progress, errors


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


def _dedupe(calls: Table) -> Table:
    """One row per (group, rank, kind, seq, position in a coalesced call): the dump beats a COLL line beats a watchdog line."""
    if calls.empty:
        return calls
    pri = np.array([_PRIORITY.get(x, -1) for x in calls["source"].tolist()], dtype=np.int64)
    calls = calls.with_columns(_pri=pri).sort_values(["_pri", "order"], kind="stable")
    best: dict = {}
    keys = list(zip(*(calls[c].tolist() for c in ("group", "rank", "kind", "seq"))))
    for k, p in zip(keys, calls["_pri"].tolist()):
        best[k] = min(best.get(k, p), p)
    calls = calls[np.array([p == best[k] for k, p in zip(keys, calls["_pri"].tolist())], dtype=bool)]
    # only a dump lists a coalesced call's parts under one seq; log lines of one work are copies of it
    logs = calls["source"] != "flight_recorder"
    calls = Table.concat([calls[~logs], calls[logs].drop_duplicates(["group", "rank", "kind", "seq"])])
    return calls.drop("_pri").sort_values(["group", "rank", "kind", "seq", "order"])


def gather(dumps: list, logs: list, world_size: int | None) -> HangInputs:
    """Build the unified tables; resolve group membership where the inputs did not state it."""
    groups: dict[str, Group] = {}
    warnings: list[str] = []
    fr_frames, fr_progress, facts = _fr_tables(dumps, groups, warnings)
    nccl_frames = _nccl_rows(logs, groups)
    wd_calls, wd_progress, err = _watchdog_rows(logs, groups)
    parts = [x for x in fr_frames + nccl_frames + [Table.from_records(wd_calls, CALL_COLUMNS, _CALL_DTYPES)]
             if len(x)]
    calls = Table.concat(parts, CALL_COLUMNS) if parts else Table.empty_of(CALL_COLUMNS, _CALL_DTYPES)
    calls = _dedupe(calls)
    progress = Table.from_records(fr_progress + wd_progress, PROGRESS_COLUMNS, _PROGRESS_DTYPES)
    log_ranks = _log_ranks(logs)
    if world_size and not 0 < world_size <= MAX_RANK:
        warnings.append(f"world size {world_size} is not in 1..{MAX_RANK}; ignored")
        world_size = None
    world = set(range(world_size)) if world_size else set()
    seen = set(facts) | set(log_ranks) | set(calls["rank"].astype(np.int64).tolist()) \
        | set(progress["rank"].astype(np.int64).tolist())
    for g in groups.values():
        seen |= g.members or set()
    world |= _ranks_ok(seen)
    if not world_size and world:
        if max(world) < MAX_WORLD_FILL:  # ranks are dense: a gap is a rank that left nothing
            world = set(range(max(world) + 1))
        else:
            warnings.append(f"highest rank seen is {max(world)}; the world is taken as the {len(world)} ranks seen "
                            "(pass the world size to count ranks that left nothing)")
    _resolve_members(groups, calls, progress, world, set(facts) | set(log_ranks))
    calls, progress = _link_comms(calls, progress, groups, warnings)
    calls = _completion(calls, progress, groups)
    return HangInputs(calls=calls, progress=progress, groups=groups, world=world, dumps=facts,
                      log_ranks=log_ranks, warn_ranks=_warn_ranks(logs),
                      errors=Table.from_records(err, ERROR_COLUMNS),
                      warnings=warnings)


def _link_comms(calls: Table, progress: Table, groups: dict[str, Group], warnings: list[str]
                ) -> tuple[Table, Table]:
    """Fold an NCCL communicator into the process group it serves when members match and opCount + 1 == SeqNum.

    The offset is checked against the watchdog/FR rows of that group (same count at seq = opCount + 1 on a
    majority of comparable rows); with nothing to check against, a communicator is linked only when exactly one
    process group has its members.
    """
    if calls.empty:
        return calls, progress
    pgs = [g for g in groups.values() if not g.key.startswith("nccl:") and g.members]
    for c in [g for g in groups.values() if g.key.startswith("nccl:") and g.members]:
        cands = [g for g in pgs if g.members == c.members]
        crow = calls[(calls["group"] == c.key) & (calls["kind"] == "coll")]
        if not cands or crow.empty:
            continue
        best, best_score = None, 0
        for g in cands:
            grow = calls[(calls["group"] == g.key) & (calls["source"] != "nccl_log") & (calls["kind"] == "coll")]
            theirs: dict = {}
            for k, v in zip(zip(crow["rank"].tolist(), (crow["seq"] + 1).tolist()), crow["numel_in"].tolist()):
                theirs.setdefault(k, []).append(v)
            pairs = [(a, b) for k, a in zip(zip(grow["rank"].tolist(), grow["seq"].tolist()), grow["numel_in"].tolist())
                     for b in theirs.get(k, ()) if a >= 0 and b >= 0]  # an inner join on (rank, seq + 1)
            hits = sum(1 for a, b in pairs if a == b)
            score = hits - (len(pairs) - hits)
            if score > best_score:
                best, best_score = g, score
        if best is None and len(cands) == 1 and calls[(calls["group"] == cands[0].key)].empty:
            best = cands[0]
        if best is None:
            continue
        idx = (calls["group"] == c.key) & (calls["kind"] == "coll")
        calls = calls.copy()
        calls["seq"][idx] = calls["seq"][idx] + 1
        calls["coll_seq"][idx] = calls["seq"][idx]
        calls["group"][calls["group"] == c.key] = best.key
        best.desc = best.desc or c.desc
        warnings.append(f"NCCL communicator {c.key[5:]} linked to process group {best.key} ({best.desc}): "
                        "opCount + 1 used as the sequence number")
        del groups[c.key]
    return _dedupe(calls), progress


def _completion(calls: Table, progress: Table, groups: dict[str, Group]) -> Table:
    """Mark each call done (1) / not done (0) / unknown (-1) from the rank's completed counts of that group.

    A call is done when its number is at most the rank's last completed number of the same counter (collective
    or P2P) or its own entry says so; not done when a completed count is known and it is above it; unknown
    otherwise. gloo's counts say nothing (it counts failed work as completed), so gloo calls stay unknown unless
    marked done by their entry.
    """
    if calls.empty:
        return calls
    gloo = {k for k, g in groups.items() if g.backend == "gloo"}
    p = progress[~np.isin(progress["group"], list(gloo))] if len(progress) else progress
    if p.empty:
        return calls
    p = p.sort_values("coll_completed", ascending=False).drop_duplicates(["group", "rank"])
    best = {(g, int(r)): (cc, pc) for g, r, cc, pc in zip(p["group"].tolist(), p["rank"].tolist(),
                                                         p["coll_completed"].tolist(), p["p2p_completed"].tolist())}
    got = [best.get((g, int(r)), (-1, -1)) for g, r in zip(calls["group"].tolist(), calls["rank"].tolist())]
    lim = np.array([pc if k == "p2p" else cc for (cc, pc), k in zip(got, calls["kind"].tolist())], dtype=np.int64)
    done = calls["done"].astype(np.int64).copy()
    known = lim >= 0
    seq = calls["seq"].astype(np.int64)
    done[known & (seq <= lim)] = 1
    done[known & (seq > lim) & (done != 1)] = 0
    return calls.with_columns(done=done)


def _resolve_members(groups: dict[str, Group], calls: Table, progress: Table, world: set[int],
                     recorded: set[int] | None = None) -> None:
    """Members of groups whose config did not list them (gloo): the world for the default group, else those
    observed — completed with ranks that left no record where the group's role says members are missing.

    Groups of one role (the same description: TP, DP, PP groups) have the same size. When the groups of a role that
    lack members lack exactly as many as there are ranks with no record at all, and one group lacks them all, those
    ranks are its members; otherwise the membership stays what was observed.
    """
    for g in groups.values():
        if g.members is None and (g.key == "0" or g.desc == "default_pg"):
            g.members, g.member_source = set(world), "world"
        elif g.members is None:
            seen = (set(calls["rank"][calls["group"] == g.key].tolist())
                    | set(progress["rank"][progress["group"] == g.key].tolist()))
            g.members, g.member_source = {int(x) for x in seen}, "observed"
    absent = set(world) - (recorded or set())
    by_role: dict[str, list[Group]] = {}
    for g in groups.values():
        if g.member_source == "observed" and g.desc:
            by_role.setdefault(g.desc, []).append(g)
    for role in by_role.values():
        size = max(len(g.members or ()) for g in role)
        short = [g for g in role if len(g.members or ()) < size]
        taken = set().union(*[g.members or set() for g in role])
        free = sorted(absent - taken)
        if len(short) != 1:
            continue
        need = size - len(short[0].members or ())
        if len(free) != need and sum(len(g.members or ()) for g in role) == len(taken):
            # the role's groups are disjoint, so they split the world: the ranks in none of them (with a dump
            # that holds no entry of this role, or no record at all) are the short group's missing members
            free = sorted(set(world) - taken)
        if len(free) == need and need > 0:
            short[0].members = set(short[0].members or ()) | set(free)
            short[0].member_source = "observed+role"
