"""One Chrome / Perfetto trace of every rank on the aligned clock (``analyze --timeline merged.json.gz``).

Each rank is a process: its CPU thread (ProfilerStep windows and collective calls), one thread per GPU stream,
one track per process group with its collective instances, and a "waits" track; flow arrows join each
collective instance across its ranks in arrival order; findings are instant events on the ranks and times they
name. Reads only the report and the report stage's TimelineInput (analyzer/report/views.py). Past
``max_events`` the shortest kernels are left out, then ranks are sampled; ``otherData`` says what was left out.
Format: the Chrome Trace Event Format (JSON object form: traceEvents, displayTimeUnit, otherData).
"""
from __future__ import annotations

import gzip
import os
from typing import Any, Optional

import numpy as np
import orjson
import pandas as pd

from analyzer.render.common import printable

DEFAULT_MAX_EVENTS = 1_000_000
MAX_NAME = 300

#: thread ids inside a rank's process (names and real ids in thread_name metadata)
TID_CPU, TID_STREAM0, TID_GROUP0, TID_WAITS = 1, 100, 10_000, 20_000


def _name(x: Any) -> str:
    t = printable(x)
    return t if len(t) <= MAX_NAME else t[:MAX_NAME - 1] + "…"


def _meta(pid: int, tid: Optional[int], what: str, value: Any) -> dict:
    ev = {"ph": "M", "pid": pid, "name": what, "args": {"name" if what.endswith("_name") else "sort_index": value}}
    if tid is not None:
        ev["tid"] = tid
    return ev


def _us(ns: np.ndarray, t0: int) -> np.ndarray:
    return np.round((np.asarray(ns, dtype=np.int64) - t0) / 1000.0, 3)


def _slices(df: pd.DataFrame, t0: int) -> list[dict]:
    """Complete ('X') events from a frame with pid, tid, name, cat, start, end (ns) and optional args."""
    if df.empty:
        return []
    out = pd.DataFrame({"ph": "X", "pid": df["pid"].to_numpy(), "tid": df["tid"].to_numpy(),
                        "name": df["name"].to_numpy(), "cat": df["cat"].to_numpy(),
                        "ts": _us(df["start"].to_numpy(), t0),
                        "dur": np.maximum(np.round((df["end"].to_numpy() - df["start"].to_numpy()) / 1000.0, 3), 0.0)})
    recs = out.to_dict(orient="records")
    if "args" in df:
        for r, a in zip(recs, df["args"].to_numpy()):
            if a:
                r["args"] = a
    return recs


def _origin(tin: Any) -> int:
    starts = [int(r.activity["start"].min()) for r in tin.ranks if len(r.activity)]
    starts += [int(r.steps["start"].min()) for r in tin.ranks if len(r.steps)]
    return min(starts) if starts else 0


def _sample_ranks(ranks: list[int], keep: int, must: list[int]) -> list[int]:
    """``keep`` ranks: those the findings name first (worst finding first), then evenly spaced ones."""
    have = set(ranks)
    chosen = list(dict.fromkeys(r for r in must if r in have))[:keep]
    rest = [r for r in ranks if r not in set(chosen)]
    need = keep - len(chosen)
    if need > 0 and rest:
        idx = np.unique(np.linspace(0, len(rest) - 1, num=min(need, len(rest))).round().astype(int))
        chosen += [rest[i] for i in idx]
    return sorted(chosen)


def _finding_points(report: dict, tin: Any, t0: int) -> list[dict]:
    """Instant events for the findings, on the ranks (process scope) and the time each finding names."""
    by_rank = {r.rank: r for r in tin.ranks}
    m = tin.members
    out = []
    for i, f in enumerate(report.get("findings") or [], 1):
        s = f.get("subject") or {}
        ranks = [int(r) for r in s.get("ranks") or [] if int(r) in by_rank]
        args = {"rank_in_report": i, "id": f.get("id"), "severity": f.get("severity"),
                "title": _name(f.get("title")), "evidence": [_name(e.get("text") if isinstance(e, dict) else e)
                                                              for e in (f.get("evidence") or [])[:4]],
                "explains": [f"{c.get('id')}: {_name(c.get('title'))}" for c in f.get("consequences") or []],
                "fix": _name(f.get("fix") or "")}
        name = f"{str(f.get('severity', '')).upper()} {f.get('id')}: {_name(f.get('title'))}"
        if not ranks:
            ts = t0
            first = [int(r.steps["start"].min()) for r in tin.ranks if len(r.steps)]
            if first:
                ts = min(first)
            out.append({"ph": "i", "s": "g", "pid": 0, "tid": TID_CPU, "ts": float(_us([ts], t0)[0]),
                        "name": name, "cat": "finding", "args": args})
            continue
        for r in ranks:
            ts = None
            if s.get("seq") is not None and s.get("process_group") is not None and len(m):
                hit = m[(m["rank"] == r) & (m["process_group"].astype(str) == str(s["process_group"]))
                        & (m["seq"] == int(s["seq"]))]
                if len(hit):
                    ts = int(hit["start_ns"].iloc[0])
            st = by_rank[r].steps
            if ts is None and s.get("step") is not None and len(st):
                row = st[st["step"] == int(s["step"])]
                if len(row):
                    ts = int(row["start"].iloc[0])
            if ts is None:
                ts = int(st["start"].min()) if len(st) else (int(by_rank[r].activity["start"].min())
                                                             if len(by_rank[r].activity) else t0)
            out.append({"ph": "i", "s": "p", "pid": r, "tid": TID_CPU, "ts": float(_us([ts], t0)[0]),
                        "name": name, "cat": "finding", "args": args})
    return out


def build_timeline(report: dict, tin: Any, max_events: int = DEFAULT_MAX_EVENTS) -> dict:
    """The trace document as a dict (``traceEvents``, ``displayTimeUnit``, ``otherData``)."""
    t0 = _origin(tin)
    m = tin.members if tin.members is not None else pd.DataFrame()
    all_ranks = [r.rank for r in tin.ranks]
    named = [int(x) for f in report.get("findings") or [] for x in (f.get("subject") or {}).get("ranks") or []
             if len((f.get("subject") or {}).get("ranks") or []) < len(tin.ranks)]  # findings about a few ranks
    n_coll = len(m)
    per_rank_fixed = {r.rank: len(r.steps) + len(r.cpu_comm) + 12 for r in tin.ranks}
    fixed = sum(per_rank_fixed.values()) + 3 * n_coll  # collective slice + wait + flow end per member
    kept_ranks = all_ranks
    notes = []
    if fixed > max_events and all_ranks:
        per = max(1, fixed // max(1, len(all_ranks)))
        keep = max(1, min(len(all_ranks), max_events // per))
        kept_ranks = _sample_ranks(all_ranks, keep, named)
        notes.append(f"{len(kept_ranks)} of {len(all_ranks)} ranks drawn (those the findings name, then evenly "
                     "spaced): the others left out to stay under the event limit")
    kept = set(kept_ranks)
    ranks = [r for r in tin.ranks if r.rank in kept]
    if len(m):
        m = m[m["rank"].isin(kept)]
    fixed = sum(per_rank_fixed[r.rank] for r in ranks) + 3 * len(m)
    budget = max(0, max_events - fixed)
    n_act = sum(len(r.activity) for r in ranks)
    min_kept_us = None
    dropped_kernels = 0
    if n_act > budget:
        durs = np.concatenate([(r.activity["end"] - r.activity["start"]).to_numpy() for r in ranks]) \
            if ranks else np.empty(0)
        cut = np.sort(durs)[::-1][budget - 1] if budget > 0 else np.inf
        min_kept_us = float(cut) / 1000.0 if np.isfinite(cut) else None
        dropped_kernels = int((durs < cut).sum()) if np.isfinite(cut) else int(len(durs))
        notes.append(f"{dropped_kernels} of {n_act} GPU/CPU activity events left out: the shortest "
                     + (f"(kept those of at least {min_kept_us:.3f} µs)" if min_kept_us is not None else "(all)"))
    else:
        cut = -1

    events: list[dict] = []
    host_of = {}
    for r in ranks:
        pid = r.rank
        host_of[pid] = r.host
        label = f"rank {pid}" + (f" ({r.host})" if r.host else "")
        events += [_meta(pid, None, "process_name", label), _meta(pid, None, "process_sort_index", pid)]
        a = r.activity
        launch_tids = a.loc[a["launch_tid"] >= 0, "launch_tid"] if len(a) else pd.Series([], dtype=np.int64)
        main_tid = int(launch_tids.mode().iloc[0]) if len(launch_tids) else None
        cpu_label = ("CPU thread " + str(main_tid) + " (launches the GPU work)") if main_tid is not None else \
            ("CPU (training thread)" if r.device_type == "cpu" else "CPU")
        events += [_meta(pid, TID_CPU, "thread_name", cpu_label), _meta(pid, TID_CPU, "thread_sort_index", 0)]
        if len(r.steps):
            st = pd.DataFrame({"pid": pid, "tid": TID_CPU, "start": r.steps["start"], "end": r.steps["end"],
                               "name": ["ProfilerStep#" + str(int(s)) for s in r.steps["step"]], "cat": "step"})
            events += _slices(st, t0)
        cc = r.cpu_comm
        if len(cc):
            on_main = cc if main_tid is None else cc[cc["tid"] == main_tid]
            if len(on_main):
                events += _slices(pd.DataFrame({"pid": pid, "tid": TID_CPU, "start": on_main["start"],
                                                "end": on_main["end"], "name": [_name(x) for x in on_main["name"]],
                                                "cat": "cpu_collective"}), t0)
        if len(a):
            keep = (a["end"] - a["start"]).to_numpy() >= cut
            act = a[keep]
            streams = sorted(set(int(s) for s in a["stream"].unique()))
            tid_of = {s: TID_STREAM0 + i for i, s in enumerate(streams)}
            for s, tid in tid_of.items():
                what = "GPU stream" if r.device_type != "cpu" else "CPU thread"
                events += [_meta(pid, tid, "thread_name", f"{what} {s}"), _meta(pid, tid, "thread_sort_index", tid)]
            if len(act):
                events += _slices(pd.DataFrame({"pid": pid, "tid": act["stream"].map(tid_of).to_numpy(),
                                                "start": act["start"], "end": act["end"],
                                                "name": [_name(x) for x in act["name"]],
                                                "cat": act["kind"].to_numpy()}), t0)
    # collectives: one track per process group, wait slices, flow arrows in arrival order
    n_flows = 0
    if len(m):
        # one track per process group; send/recv pairs per direction (the two directions overlap in time)
        p2p = (m["kind"] == "p2p").to_numpy() if "kind" in m else np.zeros(len(m), bool)
        track = [f"{g} {int(a_)}→{int(b_)}" if k else str(g) for g, k, a_, b_ in
                 zip(m["process_group"].astype(str), p2p, m["src"].fillna(-1), m["dst"].fillna(-1))]
        groups = sorted(set(track), key=lambda g: (not g.split()[0].isdigit(),
                                                   int(g.split()[0]) if g.split()[0].isdigit() else 0, g))
        gtid = {g: TID_GROUP0 + i for i, g in enumerate(groups)}
        for pid in sorted(set(int(x) for x in m["rank"])):
            for g in sorted({t for t, r in zip(track, m["rank"]) if r == pid}, key=groups.index):
                what = f"send/recv: process group {g}" if "→" in g else f"collectives: process group {g}"
                events += [_meta(pid, gtid[g], "thread_name", what), _meta(pid, gtid[g], "thread_sort_index", gtid[g])]
            events += [_meta(pid, TID_WAITS, "thread_name", "waits for the last rank to arrive"),
                       _meta(pid, TID_WAITS, "thread_sort_index", TID_WAITS)]
        start = m["start_ns"].to_numpy(dtype=np.int64)
        end = m["end_ns"].to_numpy(dtype=np.int64)
        pg = m["process_group"].astype(str).to_numpy()
        ops = m["op"].astype(str).to_numpy()
        seq = m["seq"].to_numpy()
        names = [f"{o} #{int(q)} (group {g})" for o, q, g in zip(ops, seq, pg)]
        args = [{"process_group": g, "seq": int(q), "op": o, "instance": int(i), "wait_us": round(float(w), 3),
                 "bytes": (None if b != b else int(b)), "last_rank": int(lr) if lr == lr else None}
                for g, q, o, i, w, b, lr in zip(pg, seq, ops, m["instance"], m["wait_us"], m["bytes"],
                                                m["last_rank"])]
        events += _slices(pd.DataFrame({"pid": m["rank"].to_numpy(), "tid": [gtid[g] for g in track], "start": start,
                                        "end": end, "name": names, "cat": "collective", "args": args}), t0)
        wait = np.round(m["wait_us"].to_numpy() * 1000).astype(np.int64)
        w = wait > 0
        if w.any():
            events += _slices(pd.DataFrame({
                "pid": m["rank"].to_numpy()[w], "tid": TID_WAITS, "start": start[w], "end": start[w] + wait[w],
                "name": [f"wait: {n}, last rank {a_['last_rank']}" for n, a_, k in zip(names, args, w) if k],
                "cat": "wait", "args": [a_ for a_, k in zip(args, w) if k]}), t0)
        order = np.lexsort((m["rank"].to_numpy(), start, m["instance"].to_numpy()))
        inst = m["instance"].to_numpy()[order]
        a_idx = np.flatnonzero(inst[1:] == inst[:-1])  # link arrival k → k+1 of the same instance
        mid = np.where(end > start, (start + end) // 2, start)  # bind inside the slice
        tids = np.array([gtid[g] for g in track], dtype=np.int64)
        names_a = np.asarray(names, dtype=object)
        fid = np.arange(1, len(a_idx) + 1)
        for ph, rows in (("s", order[a_idx]), ("f", order[a_idx + 1])):
            fl = pd.DataFrame({"ph": ph, "id": fid, "pid": m["rank"].to_numpy()[rows], "tid": tids[rows],
                               "ts": _us(mid[rows], t0), "name": names_a[rows], "cat": "collective", "bp": "e"})
            events += fl.to_dict(orient="records")
        n_flows = len(a_idx)
    fp = _finding_points(report, type(tin)(tin.aligned, tin.alignment_status, ranks, m), t0)
    events += fp
    if notes:
        events.append({"ph": "i", "s": "g", "pid": ranks[0].rank if ranks else 0, "tid": TID_CPU, "ts": 0.0,
                       "name": "timeline thinned: " + "; ".join(notes), "cat": "analyze"})
    other = {
        "tool": f"analyze {(report.get('tool') or {}).get('version', '')}", "verdict": report.get("verdict"),
        "clock": ("aligned: each rank's clock offset applied (report cross_rank.alignment)" if tin.aligned else
                  f"not aligned (alignment {tin.alignment_status}): each rank on its own clock"),
        "time_origin_ns": int(t0), "max_events": int(max_events), "events": len(events),
        "ranks": len(all_ranks), "ranks_drawn": len(ranks),
        "ranks_left_out": [r for r in all_ranks if r not in kept],
        "activity_events_left_out": dropped_kernels, "shortest_activity_kept_us": min_kept_us,
        "collective_members": int(len(m)), "flows": int(n_flows), "findings": len(fp),
        "thinned": "; ".join(notes) if notes else "",
    }
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def timeline_json(report: dict, tin: Any, max_events: int = DEFAULT_MAX_EVENTS) -> tuple[str, dict]:
    """(the trace as JSON text, its otherData metadata)."""
    doc = build_timeline(report, tin, max_events)
    return orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY).decode() + "\n", doc["otherData"]


def write_timeline(path: "str | os.PathLike[str]", report: dict, tin: Any,
                   max_events: int = DEFAULT_MAX_EVENTS) -> dict:
    """Write the trace to ``path`` (gzip when it ends in .gz); returns its otherData metadata."""
    doc = build_timeline(report, tin, max_events)
    data = orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY)
    p = os.fspath(path)
    if p.endswith(".gz"):
        data = gzip.compress(data, compresslevel=6, mtime=0)
    with open(p, "wb") as fh:
        fh.write(data)
    return doc["otherData"]
