"""The post-mortem timeline: each rank's Flight Recorder entries as slices on its own track, so Perfetto shows
where every rank stopped.

A job that hung or crashed leaves dumps, not profiler traces. Each entry becomes a complete ('X') slice on its
rank (process) and process group (thread), from the time it was created (enqueued) to its completion; an entry
that never completed runs to the last time any dump recorded (the dump is taken then), named `… (not completed)`.
The time it started on the device, when recorded, is an instant inside the slice. Dumps stamp wall-clock
nanoseconds, so the ranks share one clock up to the hosts' clock skew (no alignment is possible without
traces). The findings are instant events on their culprits' tracks at the time they stopped (their last entry).
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import orjson

from analyzer.render.timeline_events import LANE, TID_CPU, TID_GROUP0, _lanes, _meta, _name

CAT = "flight_recorder"


def has_entries(dumps: list) -> bool:
    """Whether any dump holds entries to draw."""
    return any(getattr(d, "rank", None) is not None and len(getattr(d, "entries", ()) or ()) for d in dumps)


def _groups(dumps: list) -> dict[str, int]:
    """A thread id per process group name, the same on every rank (numeric names first)."""
    names = sorted({str(n) for d in dumps for n in d.entries["pg_name"].tolist()},
                   key=lambda g: (not g.isdigit(), int(g) if g.isdigit() else 0, g))
    return {g: TID_GROUP0 + i for i, g in enumerate(names)}


def _slices(d: Any, tids: dict[str, int], t0: int, t_end: int, limit: int) -> tuple[list[dict], int]:
    """One dump's entries as slices (and device-start instants), the last ``limit`` kept; returns (events, left)."""
    e = d.entries
    created = np.asarray(e["time_created_ns"], dtype=np.int64)
    ok = created > 0
    idx = np.flatnonzero(ok)
    left = 0
    if len(idx) > limit:  # the most recent entries say where the rank stopped: keep those
        left, idx = len(idx) - limit, idx[np.argsort(created[idx], kind="stable")[-limit:]]
    out: list[dict] = []
    completed = np.asarray(e["time_completed_ns"], dtype=np.int64)
    started = np.asarray(e["time_started_ns"], dtype=np.int64)
    for i in idx.tolist():
        c, done, st = int(created[i]), int(completed[i]), int(started[i])
        end = done if done >= c else max(t_end, c)
        seq = int(e["collective_seq_id"][i]) if not bool(e["is_p2p"][i]) else int(e["p2p_seq_id"][i])
        op = str(e["op"][i] or e["profiling_name"][i])
        name = f"{op} #{seq}" + ("" if done >= c else " (not completed)")
        args = {"state": _name(e["state"][i]), "process_group": _name(e["pg_name"][i]),
                "pg_desc": _name(e["pg_desc"][i]), "seq": seq, "record_id": int(e["record_id"][i]),
                "input_sizes": _name(e["input_sizes"][i]), "input_dtypes": _name(e["input_dtypes"][i]),
                "created_ns": c, "started_ns": st if st > 0 else None, "completed_ns": done if done > 0 else None}
        if bool(e["is_p2p"][i]) and int(e["peer"][i]) >= 0:
            args["peer"] = int(e["peer"][i])
        if e["top_frame"][i]:
            args["frame"] = _name(e["top_frame"][i])
        tid = tids[str(e["pg_name"][i])]
        out.append({"ph": "X", "pid": int(d.rank), "tid": tid, "name": _name(name), "cat": CAT,
                    "ts": round((c - t0) / 1000.0, 3), "dur": round(max(0, end - c) / 1000.0, 3), "args": args})
        if c <= st <= end:
            out.append({"ph": "i", "s": "t", "pid": int(d.rank), "tid": tid, "name": "started on the device",
                        "cat": CAT, "ts": round((st - t0) / 1000.0, 3),
                        "args": {"record_id": args["record_id"], "process_group": args["process_group"]}})
    return out, left


def _nest(body: list[dict], head: list[dict]) -> None:
    """Slices of one track that overlap without nesting (an entry enqueued before the previous one completed) move
    to lanes of their own (tid + k × LANE), named like the track: Perfetto drops improperly nested slices."""
    xs = [e for e in body if e["ph"] == "X"]
    if not xs:
        return
    keys = np.array([e["pid"] * 10_000_000 + e["tid"] for e in xs], dtype=np.int64)
    start = np.array([e["ts"] for e in xs])
    lane = _lanes(keys, start, start + np.array([e["dur"] for e in xs]))
    names = {(m["pid"], m["tid"]): m["args"]["name"] for m in head if m["name"] == "thread_name"}
    extra = set()
    for e, k in zip(xs, lane.tolist()):
        if k:
            base = e["tid"]
            e["tid"] = base + k * LANE
            extra.add((e["pid"], base, e["tid"], k))
    starts = {}
    for e in body:  # a device-start instant follows its slice to its lane
        if e["ph"] == "X":
            starts[(e["pid"], e["args"]["record_id"], e["args"]["process_group"])] = e["tid"]
    for e in body:
        if e["ph"] == "i" and "record_id" in e.get("args", {}):
            e["tid"] = starts.get((e["pid"], e["args"]["record_id"], e["args"]["process_group"]), e["tid"])
    for pid, base, tid, k in sorted(extra):
        head += [_meta(pid, tid, "thread_name", f"{names.get((pid, base), 'Flight Recorder')} ({k + 1})"),
                 _meta(pid, tid, "thread_sort_index", tid)]


def _stops(dumps: list) -> dict[int, int]:
    """Per rank, the time of its last entry (where it stopped)."""
    out: dict[int, int] = {}
    for d in dumps:
        c = np.asarray(d.entries["time_created_ns"], dtype=np.int64)
        if d.rank is not None and (c > 0).any():
            out[int(d.rank)] = int(c[c > 0].max())
    return out


def stream_fr_timeline(report: dict, dumps: list, sink: Callable[[bytes], Any], max_events: int) -> dict:
    """Write the post-mortem trace document from the dumps: a process per rank, a track per process group, the
    entries as slices, the findings at their culprits' last entries; at most ``max_events`` events."""
    dumps = sorted((d for d in dumps if d.rank is not None and len(d.entries)), key=lambda d: int(d.rank))
    dumps = list({int(d.rank): d for d in dumps}.values())  # one dump a rank (the first one read)
    times = [np.asarray(d.entries[c], dtype=np.int64) for d in dumps
             for c in ("time_created_ns", "time_started_ns", "time_completed_ns")]
    pos = [t[t > 0] for t in times]
    t0 = min((int(p.min()) for p in pos if len(p)), default=0)
    t_end = max((int(p.max()) for p in pos if len(p)), default=t0)
    tids = _groups(dumps)
    descs = {str(g): str(desc) for d in dumps for g, desc in zip(d.entries["pg_name"].tolist(),
                                                                     d.entries["pg_desc"].tolist())}
    head: list[dict] = []
    for d in dumps:
        r = int(d.rank)
        head += [_meta(r, None, "process_name", f"rank {r} (Flight Recorder)"), _meta(r, None, "process_sort_index", r)]
        for g in sorted({str(x) for x in d.entries["pg_name"].tolist()}, key=lambda g: tids[g]):
            label = f"Flight Recorder: process group {g}" + (f" ({descs[g]})" if descs.get(g) else "")
            head += [_meta(r, tids[g], "thread_name", _name(label)), _meta(r, tids[g], "thread_sort_index", tids[g])]
    stops = _stops(dumps)
    points = []
    for i, f in enumerate(report.get("findings") or [], 1):
        rs = [int(x) for x in (f.get("subject") or {}).get("ranks") or [] if int(x) in stops]
        name = f"{str(f.get('severity', '')).upper()} {f.get('id')}: {_name(f.get('title'))}"
        args = {"rank_in_report": i, "id": f.get("id"), "title": _name(f.get("title")),
                "fix": _name(f.get("fix") or "")}
        for r in rs or [int(dumps[0].rank)] if dumps else []:
            ts = stops.get(r, t0) if rs else t_end
            points.append({"ph": "i", "s": "p" if rs else "g", "pid": r, "tid": TID_CPU, "name": name,
                           "cat": "finding", "ts": round((ts - t0) / 1000.0, 3), "args": args})
    room = max(0, max_events - len(head) - len(points))
    per_rank = room // max(1, len(dumps)) if dumps else 0
    body: list[dict] = []
    left = 0
    for d in dumps:
        ev, lost = _slices(d, tids, t0, t_end, max(0, per_rank // 2))
        body += ev
        left += lost
    _nest(body, head)
    events = (head + points + body)[:max_events]
    sink(b'{"traceEvents":[')
    for i, ev in enumerate(events):
        sink((b"," if i else b"") + orjson.dumps(ev))
    other = {"tool": f"analyze {(report.get('tool') or {}).get('version', '')}", "verdict": report.get("verdict"),
             "clock": "Flight Recorder wall-clock times (no profiler traces: not aligned across hosts)",
             "time_origin_ns": int(t0), "max_events": int(max_events), "events": len(events),
             "ranks": len(dumps), "ranks_drawn": len(dumps), "flight_recorder_entries": sum(
                 1 for e in body if e["ph"] == "X"), "flight_recorder_entries_left_out": int(left),
             "findings": len(points), "thinned": (f"{left} older Flight Recorder entries left out to stay under the "
                                                  "event limit" if left else "")}
    sink(b'],"displayTimeUnit":"ms","otherData":' + orjson.dumps(other) + b"}")
    return other
