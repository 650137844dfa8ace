"""One Chrome / Perfetto trace of every rank on the aligned clock (``analyze --timeline merged.json.gz``).

Each rank is a process: its CPU thread (ProfilerStep windows and collective calls), one thread per GPU stream,
one track per process group with its collective instances, and a "waits" track; flow arrows join each
collective instance across its ranks in arrival order; findings are instant events on the ranks and times they
name. Reads only the report and what the report stage hands over (analyzer/report/views.py): a TimelineSource
(each rank's events kept where the rank was read, the member table in its partitions) or a TimelineInput held
here. Past ``max_events`` the shortest events of each class are left out, then ranks are sampled; ``otherData``
says what was left out. Format: the Chrome Trace Event Format (JSON object form: traceEvents, displayTimeUnit,
otherData).

Streamed (docs/performance.md): the plan (which ranks, which events of each class, which tracks) is made from
small answers the ranks' sides and the member partitions give (timeline_parts.py: counts, duration histograms,
thread names), then each class is written one chunk of ranks or one slice of a partition at a time into one
gzip stream; this process holds a few numbers per rank, never every event. The file is the one a single sort
of every event would make: the same events, order and bytes.
"""
from __future__ import annotations

import io
import os
import zlib
from collections import defaultdict
from typing import Any, Callable, Iterator, Optional

import numpy as np
import orjson
import pandas as pd

from analyzer.render.timeline_events import (  # noqa: F401  (the events every part builds)
    LANE, MAX_NAME, TID_CPU, TID_GROUP0, TID_HOST0, TID_STEPS, TID_STREAM0, TID_WAITS, _clean_args, _frame, _lanes,
    _meta, _name, _nest, _sample_ranks, _slices, _text, _us)
from analyzer.render.timeline_limit import DEFAULT_MAX_EVENTS  # noqa: F401  (the --timeline-max-events default)

# ---- choosing the k longest of a class across ranks (or member partitions) from counts

#: bins per round of the threshold search: a few rounds narrow any int64 ns range to one value
BINS = 4096
#: ranks asked at once for JSON text (the parent holds one chunk's answers while it compresses them)
WRITE_CHUNK = 8
#: ranks asked at once for counts
COUNT_CHUNK = 32
#: member rows (or flows) of a partition made into JSON text at once
WRITE_ROWS = 8192
#: member rows fetched at once to assign the collective tracks' lanes
LANE_ROWS = 1 << 16


class Sel:
    """Which ``k`` of a class's ``n`` candidates are kept: the longest, ties by position (the first ranks', then
    the first rows'), as a stable sort of every duration would pick them. Found from per-chunk histograms of
    ever narrower windows (:meth:`window`, :meth:`feed`), then per-chunk counts of the threshold (:meth:`ties`).
    """

    def __init__(self, n: int, k: int, rng: Optional[tuple[int, int]]):
        self.n, self.k = int(n), max(0, min(int(k), int(n)))
        self.dstar: Optional[int] = None
        self.quota: list[int] = []
        self.found = self.k >= self.n or self.k == 0
        if not self.found:
            self.lo, self.hi, self.above = int(rng[0]), int(rng[1]) + 1, 0
            if self.hi - self.lo == 1:  # one duration: it is the threshold
                self.dstar, self.found = self.lo, True

    @property
    def partial(self) -> bool:
        return 0 < self.k < self.n

    def window(self) -> tuple[int, int, int, int]:
        nb = min(BINS, self.hi - self.lo)
        return self.lo, self.hi, -(-(self.hi - self.lo) // nb), nb

    def feed(self, counts: np.ndarray) -> None:
        """Narrow the window to the bin that holds the k-th longest."""
        lo, hi, w, nb = self.window()
        top = counts[::-1].cumsum() + self.above
        jr = int(np.searchsorted(top, self.k))  # first bin (from the top) where k are reached
        j = nb - 1 - jr
        self.above = int(top[jr] - counts[j])
        self.lo, self.hi = lo + j * w, min(lo + (j + 1) * w, hi)
        if self.hi - self.lo == 1:
            self.dstar, self.found = self.lo, True

    def ties(self, eq: list[int]) -> None:
        """Per chunk (in order), how many of its events of exactly the threshold are kept."""
        need = self.k - self.above
        for e in eq:
            q = min(int(e), need)
            self.quota.append(q)
            need -= q

    def spec(self, i: int) -> Any:
        """The selection for chunk ``i`` (timeline_parts.keep_mask)."""
        if self.k >= self.n:
            return None
        if self.k == 0:
            return False
        return (self.dstar, self.quota[i])

    @property
    def shortest_kept(self) -> Optional[int]:
        return self.dstar if self.partial else None


class TimelineTables:
    """A TimelineInput held in this process (views.timeline_input: every rank's events, the member table),
    asked the questions the writer asks a job's engine (views.TimelineSource) in the same way."""

    def __init__(self, tin: Any):
        self.tin = tin
        self.aligned, self.alignment_status = tin.aligned, tin.alignment_status
        self._sides: list = []

    def rank_ids(self) -> list[int]:
        return [r.rank for r in self.tin.ranks]

    def prepare(self, want: set, prepare_rank: Callable) -> list[dict]:
        out = [prepare_rank(r, r.rank in want) for r in self.tin.ranks]
        self._sides = [s for _, s in out]
        return [c for c, _ in out]

    def ask(self, fn: Any, positions: list[int], args: list) -> list:
        return [fn(self._sides[i], a) for i, a in zip(positions, args)]

    @property
    def n_parts(self) -> int:
        m = self.tin.members
        return 1 if m is not None and len(m) else 0

    def ask_parts(self, fn: Any, args: list, which: list[int]) -> list:
        return [fn(self.tin.members, args[i]) for i in which]


def _as_source(tin: Any) -> Any:
    return tin if hasattr(tin, "ask_parts") else TimelineTables(tin)


def _sum(dicts: "list[dict] | Any", into: dict) -> None:
    for d in dicts:
        for k, v in d.items():
            into[k] = into[k] + v if k in into else v


class _Writer:
    """The document's bytes into ``sink``, events separated by commas as they come."""

    def __init__(self, sink: Callable[[bytes], Any]):
        self.sink, self.first = sink, True

    def events(self, frag: bytes) -> None:
        if frag:
            self.sink(frag if self.first else b"," + frag)
            self.first = False

    def dicts(self, evs: list[dict]) -> None:
        if evs:
            self.events(orjson.dumps(evs, option=orjson.OPT_SERIALIZE_NUMPY)[1:-1])


def stream_timeline(report: dict, tin: Any, sink: Callable[[bytes], Any],
                    max_events: int = DEFAULT_MAX_EVENTS) -> dict:
    """Write the trace document (``traceEvents``, ``displayTimeUnit``, ``otherData``) to ``sink`` as bytes, at
    most ``max_events`` events in all (metadata included); returns its otherData.

    What is kept first, in order: the ranks' processes and tracks, findings, step windows, collective slices and
    the flows joining their ranks, waits, collective calls; then GPU activity (longest first), CPU ops and runtime
    calls (longest first), and the launch arrows from a runtime call to its kernel. Too many ranks for the first
    group: ranks are sampled (those the findings name first).

    ``tin`` is a views.TimelineSource (each rank's events stay where the rank was read, the member table in its
    partitions) or a views.TimelineInput held here. Either way the plan is made from small answers (counts,
    duration histograms, thread names) and each class of events is written one chunk of ranks (or one member
    partition) at a time, so this process holds a few numbers per rank, never every event.
    """
    src = _as_source(tin)
    dumps = list(getattr(getattr(src, "job", None), "fr_dumps", None) or [])
    try:
        if not src.rank_ids() and dumps:  # a post-mortem: the ranks' Flight Recorder entries are the timeline
            from analyzer.render.timeline_fr import has_entries, stream_fr_timeline
            if has_entries(dumps):
                return stream_fr_timeline(report, dumps, sink, max(1, int(max_events)))
        return _stream(report, src, sink, max(1, int(max_events)))
    finally:
        if hasattr(src, "close"):
            src.close()  # the ranks' sides are made again for the next timeline


def _stream(report: dict, src: Any, sink: Callable[[bytes], Any], max_events: int) -> dict:
    from analyzer.render import timeline_parts as tp
    findings = report.get("findings") or []
    all_ranks = src.rank_ids()
    n_all = len(all_ranks)
    named = [int(x) for f in findings for x in (f.get("subject") or {}).get("ranks") or []
             if len((f.get("subject") or {}).get("ranks") or []) < n_all]  # findings about a few ranks
    want = {int(x) for f in findings for x in (f.get("subject") or {}).get("ranks") or []}
    sums = src.prepare(want, tp.prepare_rank)
    starts = [s["act_min"] for s in sums if s["act_min"] is not None]
    starts += [s["step_min"] for s in sums if s["step_min"] is not None]
    t0 = min(starts) if starts else 0
    members_of: dict[int, int] = {}
    _sum(_parts(src, tp.part_counts, {}), members_of)
    per_rank_fixed = [s["n_steps"] + s["n_cpu_comm"] + 24 + 4 * members_of.get(s["rank"], 0) for s in sums]
    fixed = sum(per_rank_fixed)
    kept_ranks = all_ranks
    notes = []
    if fixed > max_events and all_ranks:
        per = max(1, fixed // max(1, n_all))
        keep = max(1, min(n_all, max_events // per))
        kept_ranks = _sample_ranks(all_ranks, keep, named)
        notes.append(f"{len(kept_ranks)} of {n_all} ranks drawn (those the findings name, then evenly "
                     "spaced): the others left out to stay under the event limit")
    kept = set(kept_ranks)
    pos = [i for i, s in enumerate(sums) if s["rank"] in kept]  # the kept ranks' sides, in the source's order
    ranks = [sums[i] for i in pos]
    del sums
    kept_list = sorted(kept)

    # ---- tracks: each rank's own, then the collective tracks (from the member partitions' facts)
    threads: dict[int, dict[int, tuple[str, int]]] = {s["rank"]: dict(s["threads"]) for s in ranks}
    facts = list(_parts(src, tp.part_facts, {"kept": kept_list}))
    pairs = sorted({p for f in facts for p in f["pairs"]})
    n_coll, n_wait = sum(f["n"] for f in facts), sum(f["n_wait"] for f in facts)
    groups = sorted({t for _, t in pairs}, key=lambda g: (not g.split()[0].isdigit(),
                                                          int(g.split()[0]) if g.split()[0].isdigit() else 0, g))
    gtid = {g: TID_GROUP0 + i for i, g in enumerate(groups)}
    gpos = {g: i for i, g in enumerate(groups)}
    for pid_, g in sorted(pairs, key=lambda x: (x[0], gpos[x[1]])):
        what = f"send/recv: process group {g}" if "→" in g else f"collectives: process group {g}"
        threads[pid_][gtid[g]] = (what, gtid[g])
    for pid_ in sorted({p for p, _ in pairs}):
        threads[pid_][TID_WAITS] = ("waits for the last rank to arrive", TID_WAITS)
    lanes, wlanes = _member_lanes(src, kept_list, members_of, gtid, threads)
    marg = {"kept": kept_list, "gtid": gtid, "lanes": lanes, "wlanes": wlanes}

    def rng(key: str) -> Optional[tuple[int, int]]:
        got = [f[key] for f in facts if f[key] is not None]
        return (min(g[0] for g in got), max(g[1] for g in got)) if got else None

    # ---- the budget, class by class (a flow costs two events)
    n_threads_max = 2 * sum(len(v) for v in threads.values())
    room = max_events - 2 * len(ranks) - n_threads_max - 1  # 1: the "timeline thinned" note, when there is one
    fp_all = _finding_points(report, src, ranks, marg, t0)
    left_out: dict[str, int] = {}

    def take(n: int, what: str) -> int:
        nonlocal room
        k = max(0, min(n, room))
        room -= k
        if k < n:
            left_out[what] = n - k
        return k

    def total(c: str) -> int:
        return sum(s["n"][c] for s in ranks)

    def rank_rng(c: str) -> Optional[tuple[int, int]]:
        got = [s["range"][c] for s in ranks if c in s["range"]]
        return (min(g[0] for g in got), max(g[1] for g in got)) if got else None

    fp = fp_all[:take(len(fp_all), "findings")]
    mem_all = memory_counters(report, kept, src.aligned, t0)
    mem = mem_all[:take(len(mem_all), "memory counter points")]
    sel: dict[str, Sel] = {"steps": Sel(total("steps"), take(total("steps"), "steps"), rank_rng("steps"))}
    coll = Sel(n_coll, take(n_coll, "collectives"), rng("range"))
    _resolve(src, pos, {}, {"coll": coll}, marg)
    flow_counts = [n for n, _ in _parts(src, tp.part_final, _part_args(src, {**marg, "wait": False}, {"coll": coll}))]
    flows_ok = sum(flow_counts)
    n_pairs = min(flows_ok, max(0, room) // 2)
    room -= 2 * n_pairs
    if n_pairs < flows_ok:
        left_out["collective flows"] = flows_ok - n_pairs
    wait = Sel(n_wait, take(n_wait, "waits"), rng("wrange"))
    sel["calls"] = Sel(total("calls"), take(total("calls"), "calls"), rank_rng("calls"))
    sel["acts"] = Sel(total("acts"), take(total("acts"), "GPU/CPU activity events"), rank_rng("acts"))
    sel["hosts"] = Sel(total("hosts"), take(total("hosts"), "CPU ops and runtime calls"), rank_rng("hosts"))
    _resolve(src, pos, sel, {"wait": wait}, marg)

    def specs(i: int) -> dict:
        return {c: s.spec(i) for c, s in sel.items()}

    finals = list(_ask_ranks(src, pos, tp.rank_final, [specs(i) for i in range(len(pos))], COUNT_CHUNK))
    launch_of = [n for n, _ in finals]
    used: dict[int, set] = defaultdict(set)  # pid -> the tids its kept events sit on
    for s, (_, u) in zip(ranks, finals):
        used[s["rank"]].update(u)
    del finals
    for _, u in _parts(src, tp.part_final, _part_args(src, marg, {"coll": coll, "wait": wait})):
        for p_, t_ in u:
            used[p_].add(t_)
    for e in fp:
        used[e["pid"]].add(e["tid"])
    n_launch_all = sum(launch_of)
    n_launch = min(n_launch_all, max(0, room) // 2)
    if n_launch < n_launch_all:
        left_out["launch arrows"] = n_launch_all - n_launch

    act, host = sel["acts"], sel["hosts"]
    min_kept_us = None
    dropped_kernels = act.n - act.k
    if dropped_kernels:
        min_kept_us = float(act.shortest_kept) / 1000.0 if act.k else None
        notes.append(f"{dropped_kernels} of {act.n} GPU/CPU activity events left out: the shortest "
                     + (f"(kept those of at least {min_kept_us:.3f} µs)" if min_kept_us is not None else "(all)"))
    for what, n in left_out.items():
        if what != "GPU/CPU activity events":
            notes.append(f"{n} {what} left out (the shortest)" if "flows" not in what and "arrows" not in what
                         else f"{n} {what} left out")

    # ---- the events themselves, streamed in the order they are listed
    head = [ev for s in ranks for ev in (_meta(s["rank"], None, "process_name", s["label"]),
                                         _meta(s["rank"], None, "process_sort_index", s["rank"]))]
    n_used = 0
    for pid_ in sorted(threads):
        for tid_, (nm, sort) in sorted(threads[pid_].items()):
            if tid_ in used.get(pid_, ()):
                head += [_meta(pid_, tid_, "thread_name", nm), _meta(pid_, tid_, "thread_sort_index", sort)]
                n_used += 1
    if notes:
        head.append({"ph": "i", "s": "g", "pid": ranks[0]["rank"] if ranks else 0, "tid": TID_CPU, "ts": 0.0,
                     "name": "timeline thinned: " + "; ".join(notes), "cat": "analyze"})
    del threads, used
    n_body = len(fp) + len(mem) + sum(s.k for s in sel.values()) + coll.k + wait.k + 2 * n_pairs + 2 * n_launch
    n_events = len(head) + n_body
    sink(b'{"traceEvents":[')
    out = _Writer(sink)
    if n_events > max_events:  # a hard limit even when the ranks' own tracks alone exceed it (the body is empty)
        head, n_events = head[:max_events], max_events
        notes.append(f"cut to the first {max_events} events")
    out.dicts(head)
    del head
    out.dicts(fp)
    out.dicts(mem)
    _write_ranks(src, pos, out, "steps", t0, sel["steps"])
    part_rows = [f["n"] for f in facts]
    for what in ("coll", "wait"):
        if (coll if what == "coll" else wait).k:
            args = _part_args(src, {**marg, "t0": t0, "what": what}, {"coll": coll, "wait": wait})
            _write_parts(src, out, args, part_rows)
    for c in ("calls", "acts", "hosts"):
        _write_ranks(src, pos, out, c, t0, sel[c])
    fid0, left = 0, n_pairs
    args_f = []
    for n in flow_counts:
        args_f.append((fid0, min(n, left)))
        fid0 += args_f[-1][1]
        left -= args_f[-1][1]
    if n_pairs:
        _write_parts(src, out, _part_args(src, {**marg, "t0": t0, "what": "flows"}, {"coll": coll},
                                          [{"fid0": a, "n": b} for a, b in args_f]), [b for _, b in args_f])
    fid, left, largs = n_pairs, n_launch, []
    for i, n in enumerate(launch_of):
        k = min(n, left)
        largs.append((t0, specs(i), k, fid))
        fid += k
        left -= k
    for frag in _ask_ranks(src, pos, tp.rank_launch, largs, WRITE_CHUNK, lambda i: largs[i][2] > 0):
        out.events(frag)
    other = {
        "tool": f"analyze {(report.get('tool') or {}).get('version', '')}", "verdict": report.get("verdict"),
        "clock": ("aligned: each rank's clock offset applied (report cross_rank.alignment)" if src.aligned else
                  f"not aligned (alignment {src.alignment_status}): each rank on its own clock"),
        "time_origin_ns": int(t0), "max_events": int(max_events), "events": int(n_events),
        "ranks": n_all, "ranks_drawn": len(ranks),
        "ranks_left_out": [r for r in all_ranks if r not in kept],
        "activity_events_left_out": int(dropped_kernels), "shortest_activity_kept_us": min_kept_us,
        "host_events": int(host.k), "host_events_left_out": int(host.n - host.k),
        "collective_members": int(n_coll), "flows": int(n_pairs), "launch_flows": int(n_launch),
        "findings": len(fp), "memory_points": len(mem), "thinned": "; ".join(notes) if notes else "",
    }
    sink(b'],"displayTimeUnit":"ms","otherData":' + orjson.dumps(other, option=orjson.OPT_SERIALIZE_NUMPY) + b"}")
    return other


def _ask_ranks(src: Any, pos: list[int], fn: Any, args: list, chunk: int,
               want: Optional[Callable[[int], bool]] = None) -> Iterator:
    """``fn(side, args[i])`` for the kept ranks' sides, ``chunk`` ranks per engine call, answers in order
    (ranks ``want`` says no to are skipped)."""
    idx = [i for i in range(len(pos)) if want is None or want(i)]
    for a in range(0, len(idx), chunk):
        part = idx[a:a + chunk]
        yield from src.ask(fn, [pos[i] for i in part], [args[i] for i in part])


def _parts(src: Any, fn: Any, args: "dict | list", one: bool = False) -> Iterator:
    """``fn(partition, arg)`` over the member partitions, answers in order: all asked at once, or (``one``)
    one partition at a time (its answer is large: JSON text)."""
    n = src.n_parts
    if not n:
        return
    args = args if isinstance(args, list) else [args] * n
    if one:
        for i in range(n):
            yield from src.ask_parts(fn, args, [i])
    else:
        yield from src.ask_parts(fn, args, list(range(n)))


def _write_parts(src: Any, out: _Writer, args: list, sizes: list[int]) -> None:
    """part_write over each member partition in slices of WRITE_ROWS rows (or flows), one slice at a time."""
    from analyzer.render import timeline_parts as tp
    for i, n in enumerate(sizes):
        for a in range(0, n, WRITE_ROWS):
            for frag in src.ask_parts(tp.part_write, [{**x, "slice": (a, min(n, a + WRITE_ROWS))} if j == i else x
                                                      for j, x in enumerate(args)], [i]):
                out.events(frag)


def _part_args(src: Any, base: dict, sels: dict, per_part: Optional[list] = None) -> list:
    """Per partition: ``base`` plus each selection's spec for that partition's position."""
    return [{**base, **{k: s.spec(i) for k, s in sels.items()}, **(per_part[i] if per_part else {})}
            for i in range(src.n_parts)]


def _resolve(src: Any, pos: list[int], rank_sels: dict, part_sels: dict, marg: dict) -> None:
    """Find each selection's threshold (rounds of histograms over the ranks' sides and the member partitions,
    all open selections at once), then how many of the threshold's ties each chunk keeps."""
    from analyzer.render import timeline_parts as tp
    while True:
        r_open = {c: s for c, s in rank_sels.items() if not s.found}
        p_open = {c: s for c, s in part_sels.items() if not s.found}
        if not r_open and not p_open:
            break
        if r_open:
            win = {c: s.window() for c, s in r_open.items()}
            tot: dict = {}
            _sum(_ask_ranks(src, pos, tp.rank_hist, [win] * len(pos), COUNT_CHUNK), tot)
            for c, s in r_open.items():
                s.feed(tot[c])
        if p_open:
            tot = {}
            _sum(_parts(src, tp.part_hist, {"kept": marg["kept"], "win": {c: s.window() for c, s in p_open.items()}}),
                 tot)
            for c, s in p_open.items():
                s.feed(tot[c])
    r_tie = {c: s.dstar for c, s in rank_sels.items() if s.partial and not s.quota}
    if r_tie:
        eqs = list(_ask_ranks(src, pos, tp.rank_eq, [r_tie] * len(pos), COUNT_CHUNK))
        for c in r_tie:
            rank_sels[c].ties([e[c] for e in eqs])
    p_tie = {c: s.dstar for c, s in part_sels.items() if s.partial and not s.quota}
    if p_tie:
        eqs = list(_parts(src, tp.part_eq, {"kept": marg["kept"], "eq": p_tie}))
        for c in p_tie:
            part_sels[c].ties([e[c] for e in eqs])


def _member_lanes(src: Any, kept: list[int], members_of: dict, gtid: dict, threads: dict) -> tuple[dict, dict]:
    """{(iid, rank): lane} of the collective slices and of the waits that overlap without nesting on their
    track (the rest: lane 0), from the member rows of a few ranks at a time; names the extra lanes' tracks."""
    from analyzer.render import timeline_parts as tp
    lanes: dict = {}
    wlanes: dict = {}
    chunks, cur, rows = [], [], 0
    for r in kept:
        n = members_of.get(r, 0)
        if not n:
            continue
        if cur and rows + n > LANE_ROWS:
            chunks.append(cur)
            cur, rows = [], 0
        cur.append(r)
        rows += n
    if cur:
        chunks.append(cur)
    for ch in chunks:
        got = list(_parts(src, tp.part_lane_rows, {"kept": kept, "chunk": ch, "gtid": gtid}))
        if not got:
            continue
        c = {k: np.concatenate([g[k] for g in got]) for k in got[0]}
        del got
        iid, pids, tids, start, end, wait = c["iid"], c["pids"], c["tids"], c["start"], c["end"], c["wait"]
        lane = _lanes(pids * (1 << 32) + tids, start, end)
        for i in np.flatnonzero(lane).tolist():
            p_, t_, k = int(pids[i]), int(tids[i]), int(lane[i])
            lanes[(int(iid[i]), p_)] = k
            base_name, sort = threads[p_][t_]
            threads[p_][t_ + k * LANE] = (f"{base_name} (overlapping, {k + 1})", sort)
        w = wait > 0
        if w.any():
            wl = _lanes(pids[w], start[w], start[w] + wait[w])
            wi, wp = iid[w], pids[w]
            for i in np.flatnonzero(wl).tolist():
                p_, k = int(wp[i]), int(wl[i])
                wlanes[(int(wi[i]), p_)] = k
                threads[p_][TID_WAITS + k * LANE] = (f"waits for the last rank to arrive (overlapping, {k + 1})",
                                                     TID_WAITS)
    return lanes, wlanes


def _finding_points(report: dict, src: Any, ranks: list[dict], marg: dict, t0: int) -> list[dict]:
    """Instant events for the findings, on the ranks (process scope) and the time each finding names."""
    from analyzer.render import timeline_parts as tp
    by_rank = {s["rank"]: s for s in ranks}
    findings = report.get("findings") or []
    ask = sorted({(int(r), str(s["process_group"]), int(s["seq"])) for f in findings for s in [f.get("subject") or {}]
                  if s.get("seq") is not None and s.get("process_group") is not None
                  for r in s.get("ranks") or [] if int(r) in by_rank})
    at: dict = {}
    if ask:
        for got in _parts(src, tp.part_points, {"kept": marg["kept"], "want": ask}):
            for k, v in got.items():
                at.setdefault(k, v)
    out = []
    for i, f in enumerate(findings, 1):
        s = f.get("subject") or {}
        rs = [int(r) for r in s.get("ranks") or [] if int(r) in by_rank]
        args = {"rank_in_report": i, "id": f.get("id"), "severity": f.get("severity"),
                "title": _name(f.get("title")), "evidence": [_name(e.get("text") if isinstance(e, dict) else e)
                                                              for e in (f.get("evidence") or [])[:4]],
                "explains": [f"{c.get('id')}: {_name(c.get('title'))}" for c in f.get("consequences") or []],
                "fix": _name(f.get("fix") or "")}
        name = f"{str(f.get('severity', '')).upper()} {f.get('id')}: {_name(f.get('title'))}"
        if not rs:
            ts = t0
            first = [x["step_min"] for x in ranks if x["step_min"] is not None]
            if first:
                ts = min(first)
            pid0 = ranks[0]["rank"] if ranks else 0  # a process that exists (rank 0 may not be drawn)
            out.append({"ph": "i", "s": "g", "pid": pid0, "tid": TID_CPU, "ts": float(_us([ts], t0)[0]),
                        "name": name, "cat": "finding", "args": args})
            continue
        for r in rs:
            ts = None
            x = by_rank[r]
            if s.get("seq") is not None and s.get("process_group") is not None:
                ts = at.get((r, str(s["process_group"]), int(s["seq"])))
            if ts is None and s.get("step") is not None:
                ts = x["step_starts"].get(int(s["step"]))
            if ts is None:
                ts = x["step_min"] if x["step_min"] is not None else (x["act_min"] if x["act_min"] is not None
                                                                        else t0)
            out.append({"ph": "i", "s": "p", "pid": r, "tid": TID_CPU, "ts": float(_us([ts], t0)[0]),
                        "name": name, "cat": "finding", "args": args})
    return out


def memory_counters(report: dict, kept: set, aligned: bool, t0: int) -> list[dict]:
    """Each kept rank's memory as a counter track ("memory cuda:0": allocated and reserved MiB), from the report's
    memory section: per traced step the allocated bytes at its start, at its peak (with reserved then) and at its
    end, on the timeline's clock (the rank's alignment offset added when the timeline is aligned)."""
    from analyzer.render.timeline_data import offsets_ns
    rows = (report.get("memory") or {}).get("per_rank") or []
    if not rows:
        return []
    off = offsets_ns(report)[0] if aligned else {}
    out = []
    for r in rows:
        rank = int(r["rank"])
        if rank not in kept:
            continue
        o = off.get(rank, 0)
        name = f"memory {_name(r.get('device'))}"
        for s in r.get("steps") or []:
            if "start_ns" not in s:
                continue
            res = s["reserved_at_peak"] / 2**20
            for ts, alloc in ((s["start_ns"], s["allocated_start"]), (s["peak_ns"], s["peak_allocated"]),
                              (s["end_ns"], s["allocated_end"])):
                out.append({"ph": "C", "pid": rank, "name": name, "ts": round((ts + o - t0) / 1000.0, 3),
                            "cat": "memory",
                            "args": {"allocated MiB": round(alloc / 2**20, 3), "reserved MiB": round(res, 3)}})
    return out


def _write_ranks(src: Any, pos: list[int], out: _Writer, c: str, t0: int, sel: Sel) -> None:
    """One class of every kept rank's events, a chunk of ranks at a time."""
    from analyzer.render import timeline_parts as tp
    if not sel.k:
        return
    for frag in _ask_ranks(src, pos, tp.rank_write, [(c, t0, sel.spec(i)) for i in range(len(pos))], WRITE_CHUNK):
        out.events(frag)


def build_timeline(report: dict, tin: Any, max_events: int = DEFAULT_MAX_EVENTS) -> dict:
    """The trace document as a dict (``traceEvents``, ``displayTimeUnit``, ``otherData``), at most ``max_events``
    events in all (metadata included): what :func:`stream_timeline` writes, read back (for tests and notebooks;
    the files are written without it)."""
    buf = io.BytesIO()
    stream_timeline(report, tin, buf.write, max_events)
    return orjson.loads(buf.getvalue())


def timeline_json(report: dict, tin: Any, max_events: int = DEFAULT_MAX_EVENTS) -> tuple[str, dict]:
    """(the trace as JSON text, its otherData metadata)."""
    buf = io.BytesIO()
    other = stream_timeline(report, tin, buf.write, max_events)
    return buf.getvalue().decode() + "\n", other


class _GzipSink:
    """Bytes into one gzip member (level 6, mtime 0): the same file gzip.compress(data, 6, mtime=0) makes."""

    def __init__(self, fh: Any):
        self.fh, self.z = fh, zlib.compressobj(6, zlib.DEFLATED, 31)

    def write(self, b: bytes) -> None:
        out = self.z.compress(b)
        if out:
            self.fh.write(out)

    def close(self) -> None:
        self.fh.write(self.z.flush())


def write_timeline(path: "str | os.PathLike[str]", report: dict, tin: Any,
                   max_events: int = DEFAULT_MAX_EVENTS) -> dict:
    """Write the trace to ``path`` (gzip when it ends in .gz), streamed; returns its otherData metadata."""
    p = os.fspath(path)
    existed = os.path.exists(p)
    with open(p, "wb") as fh:
        try:
            if p.endswith(".gz"):
                z = _GzipSink(fh)
                other = stream_timeline(report, tin, z.write, max_events)
                z.close()
            else:
                other = stream_timeline(report, tin, fh.write, max_events)
        except BaseException:
            fh.truncate(0)  # never a partial document a viewer (or a CI step) could take for the timeline
            if not existed:  # nor an empty file this run made (Ctrl-C, a crash)
                try:
                    os.unlink(p)
                except OSError:
                    pass
            raise
    return other
