"""One Chrome / Perfetto trace of every rank on the aligned clock (``analyze --timeline merged.json.gz``).

Each rank is a process: its CPU thread (ProfilerStep windows and collective calls), one thread per GPU stream,
one track per process group with its collective instances, and a "waits" track; flow arrows join each
collective instance across its ranks in arrival order; findings are instant events on the ranks and times they
name. Reads only the report and the report stage's TimelineInput (analyzer/report/views.py). Past
``max_events`` the shortest kernels are left out, then ranks are sampled; ``otherData`` says what was left out.
Format: the Chrome Trace Event Format (JSON object form: traceEvents, displayTimeUnit, otherData).
"""
from __future__ import annotations

import functools
import gzip
import os
from typing import Any, Optional

import numpy as np
import orjson
import pandas as pd

from analyzer.render.common import printable
from analyzer.render.formats import DEFAULT_MAX_EVENTS  # noqa: F401  (the --timeline-max-events default)

MAX_NAME = 300

#: thread ids inside a rank's process (names and real ids in thread_name metadata); a track whose slices overlap
#: without nesting continues on tid + k * LANE
TID_CPU, TID_STEPS, TID_STREAM0, TID_HOST0, TID_GROUP0, TID_WAITS = 1, 2, 100, 1_000, 10_000, 20_000
LANE = 1_000_000


def _name(x: Any) -> str:
    return _text(x) if isinstance(x, str) else _text(str(x))


@functools.lru_cache(maxsize=65536)
def _text(x: str) -> str:
    """A name from the input made printable and at most MAX_NAME long (names repeat: computed once each)."""
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
            pid0 = tin.ranks[0].rank if tin.ranks else 0  # a process that exists (rank 0 may not be drawn)
            out.append({"ph": "i", "s": "g", "pid": pid0, "tid": TID_CPU, "ts": float(_us([ts], t0)[0]),
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


def _lanes(keys: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per slice, the lane (0, 1, …) of its track that keeps every lane properly nested: a slice that starts inside
    another and ends after it would be dropped by Perfetto's importer, so it moves to the next free lane."""
    n = len(keys)
    lane = np.zeros(n, dtype=np.int64)
    if n < 2:
        return lane
    order = np.lexsort((-end, start, keys))
    ks, ss, es = keys[order], start[order], end[order]
    stacks: list[list[int]] = []
    cur = None
    out = np.zeros(n, dtype=np.int64)
    for i in range(n):
        k, s_, e_ = ks[i], ss[i], es[i]
        if k != cur:
            cur, stacks = k, []
        for j, st in enumerate(stacks):
            while st and st[-1] <= s_:
                st.pop()
            if not st or e_ <= st[-1]:
                st.append(e_)
                out[i] = j
                break
        else:
            stacks.append([e_])
            out[i] = len(stacks) - 1
    lane[order] = out
    return lane


def _nest(df: pd.DataFrame, threads: dict) -> None:
    """Move slices that overlap without nesting to extra lanes of their track (in place), naming the lanes."""
    if len(df) < 2:
        return
    pid, tid = df["pid"].to_numpy(dtype=np.int64), df["tid"].to_numpy(dtype=np.int64)
    lane = _lanes(pid * (1 << 32) + tid, df["start"].to_numpy(), np.maximum(df["end"].to_numpy(),
                                                                            df["start"].to_numpy()))
    if not lane.any():
        return
    df["tid"] = tid + lane * LANE
    for (p_, t_, k) in {(int(a), int(b), int(c)) for a, b, c in zip(pid, tid, lane) if c}:
        base_name, sort = threads.get((p_, t_), (f"thread {t_}", t_))
        threads[(p_, t_ + k * LANE)] = (f"{base_name} (overlapping, {k + 1})", sort)


def _take_longest(durs: np.ndarray, room: int) -> np.ndarray:
    """Boolean mask of the ``room`` longest entries (ties by position), all when they fit."""
    n = len(durs)
    keep = np.zeros(n, dtype=bool)
    if room >= n:
        keep[:] = True
    elif room > 0:
        keep[np.argsort(-durs, kind="stable")[:room]] = True
    return keep


def _frame(pid, tid, start, end, name, cat, args=None) -> pd.DataFrame:
    df = pd.DataFrame({"pid": np.asarray(pid, dtype=np.int64) if np.ndim(pid) else pid,
                       "tid": np.asarray(tid, dtype=np.int64) if np.ndim(tid) else tid,
                       "start": np.asarray(start, dtype=np.int64), "end": np.asarray(end, dtype=np.int64),
                       "name": name, "cat": cat})
    if args is not None:
        df["args"] = list(args)
    return df


def _clean_args(a: dict) -> dict:
    """Input-derived argument values made printable (numbers kept; the keys are the readers' own names)."""
    return {k: (v if isinstance(v, (int, float, bool)) else _text(str(v))) for k, v in a.items()}


def build_timeline(report: dict, tin: Any, max_events: int = DEFAULT_MAX_EVENTS) -> dict:
    """The trace document as a dict (``traceEvents``, ``displayTimeUnit``, ``otherData``), at most ``max_events``
    events in all (metadata included).

    What is kept first, in order: the ranks' processes and tracks, findings, step windows, collective slices and
    the flows joining their ranks, waits, collective calls; then GPU activity (longest first), CPU ops and runtime
    calls (longest first), and the launch arrows from a runtime call to its kernel. Too many ranks for the first
    group: ranks are sampled (those the findings name first).
    """
    max_events = max(1, int(max_events))
    t0 = _origin(tin)
    m = tin.members if tin.members is not None else pd.DataFrame()
    all_ranks = [r.rank for r in tin.ranks]
    named = [int(x) for f in report.get("findings") or [] for x in (f.get("subject") or {}).get("ranks") or []
             if len((f.get("subject") or {}).get("ranks") or []) < len(tin.ranks)]  # findings about a few ranks
    members_of = m["rank"].value_counts().to_dict() if len(m) else {}
    per_rank_fixed = {r.rank: len(r.steps) + len(r.cpu_comm) + 24 + 4 * members_of.get(r.rank, 0)
                      for r in tin.ranks}
    fixed = sum(per_rank_fixed.values())
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
        m = m[m["rank"].isin(kept)].reset_index(drop=True)

    # ---- the candidate events of every class, as frames (ns times), before any is turned into a dict
    meta: list[dict] = []
    threads: dict[tuple[int, int], tuple[str, int]] = {}  # (pid, tid) -> (name, sort index); emitted when used
    steps, calls, acts, hosts = [], [], [], []
    act_args: list[list] = []
    for r in ranks:
        pid = r.rank
        label = f"rank {pid}" + (f" ({r.host})" if r.host else "")
        meta += [_meta(pid, None, "process_name", label), _meta(pid, None, "process_sort_index", pid)]
        a = r.activity
        launch_tids = a.loc[a["launch_tid"] >= 0, "launch_tid"] if len(a) else pd.Series([], dtype=np.int64)
        main_tid = int(launch_tids.mode().iloc[0]) if len(launch_tids) else None
        cpu_label = ("CPU thread " + str(main_tid) + " (launches the GPU work): collective calls") \
            if main_tid is not None else ("CPU (training thread): collective calls" if r.device_type == "cpu"
                                          else "CPU: collective calls")
        threads[(pid, TID_CPU)] = (cpu_label, 1)
        threads[(pid, TID_STEPS)] = ("ProfilerStep windows", 0)
        if len(r.steps):
            steps.append(_frame(pid, TID_STEPS, r.steps["start"], r.steps["end"],
                                ["ProfilerStep#" + str(int(s)) for s in r.steps["step"]], "step"))
        cc = r.cpu_comm
        if len(cc):
            on_main = cc if main_tid is None else cc[cc["tid"] == main_tid]
            if len(on_main):
                calls.append(_frame(pid, TID_CPU, on_main["start"], on_main["end"],
                                    [_name(x) for x in on_main["name"]], "cpu_collective"))
        if len(a):
            streams = sorted(set(int(s) for s in a["stream"].unique()))
            tid_of = {s: TID_STREAM0 + i for i, s in enumerate(streams)}
            what = "GPU stream" if r.device_type != "cpu" else "CPU thread"
            for s_, tid in tid_of.items():
                threads[(pid, tid)] = (f"{what} {s_}", tid)
            acts.append(_frame(pid, a["stream"].map(tid_of).to_numpy(), a["start"], a["end"],
                               [_name(x) for x in a["name"]], a["kind"].to_numpy()))
            ka = r.kernel_args or {}
            act_args.append([_clean_args(ka[c]) if c in ka else None for c in a["correlation"].to_numpy().tolist()]
                            if ka else [None] * len(a))
        h = r.host_ops if r.host_ops is not None else pd.DataFrame()
        if len(h):
            htids = sorted(set(int(x) for x in h["tid"]), key=lambda x: (x != main_tid, x))
            tid_of_h = {x: TID_HOST0 + i for i, x in enumerate(htids)}
            for x, tid in tid_of_h.items():
                threads[(pid, tid)] = (f"CPU thread {x}: ops and runtime calls"
                                       + (" (launches the GPU work)" if x == main_tid else ""), tid)
            hf = _frame(pid, h["tid"].map(tid_of_h).to_numpy(), h["start"], h["end"],
                        [_name(x) for x in h["name"]], h["cat"].to_numpy(),
                        [_clean_args(x) if x else None for x in h["args"]])
            hf["correlation"] = h["correlation"].to_numpy()
            hosts.append(hf)
    steps_df = pd.concat(steps, ignore_index=True) if steps else pd.DataFrame()
    calls_df = pd.concat(calls, ignore_index=True) if calls else pd.DataFrame()
    acts_df = pd.concat(acts, ignore_index=True) if acts else pd.DataFrame()
    if len(acts_df):
        acts_df["args"] = [x for part in act_args for x in part]
        acts_df["correlation"] = np.concatenate([r.activity["correlation"].to_numpy() for r in ranks
                                                 if len(r.activity)])
    hosts_df = pd.concat(hosts, ignore_index=True) if hosts else pd.DataFrame()
    for df in (steps_df, calls_df, acts_df, hosts_df):
        _nest(df, threads)

    # collectives: one track per process group, wait slices, flow arrows in arrival order
    coll_df, wait_df = pd.DataFrame(), pd.DataFrame()
    flow_rows: list[tuple] = []  # (s_row, f_row, s_ts_ns, f_ts_ns, name) over coll_df rows
    if len(m):
        p2p = (m["kind"] == "p2p").to_numpy() if "kind" in m else np.zeros(len(m), bool)
        track = [f"{g} {int(a_)}→{int(b_)}" if k else str(g) for g, k, a_, b_ in
                 zip(m["process_group"].astype(str), p2p, m["src"].fillna(-1), m["dst"].fillna(-1))]
        groups = sorted(set(track), key=lambda g: (not g.split()[0].isdigit(),
                                                   int(g.split()[0]) if g.split()[0].isdigit() else 0, g))
        gtid = {g: TID_GROUP0 + i for i, g in enumerate(groups)}
        for pid_, g in sorted({(int(r_), t) for t, r_ in zip(track, m["rank"])},
                              key=lambda x: (x[0], groups.index(x[1]))):
            what = f"send/recv: process group {g}" if "→" in g else f"collectives: process group {g}"
            threads[(pid_, gtid[g])] = (what, gtid[g])
        for pid_ in sorted(set(int(x) for x in m["rank"])):
            threads[(pid_, TID_WAITS)] = ("waits for the last rank to arrive", TID_WAITS)
        start = m["start_ns"].to_numpy(dtype=np.int64)
        end = np.maximum(m["end_ns"].to_numpy(dtype=np.int64), start)
        pg = m["process_group"].astype(str).to_numpy()
        ops = m["op"].astype(str).to_numpy()
        seq = m["seq"].to_numpy()
        names = [f"{o} #{int(q)} (group {g})" for o, q, g in zip(ops, seq, pg)]
        args = [{"process_group": g, "seq": int(q), "op": o, "instance": int(i), "wait_us": round(float(w), 3),
                 "bytes": (None if b != b else int(b)), "last_rank": int(lr) if lr == lr else None}
                for g, q, o, i, w, b, lr in zip(pg, seq, ops, m["instance"], m["wait_us"], m["bytes"],
                                                m["last_rank"])]
        pids = m["rank"].to_numpy(dtype=np.int64)
        tids = np.array([gtid[g] for g in track], dtype=np.int64)
        lane = _lanes(pids * (1 << 32) + tids, start, end)
        tids = tids + lane * LANE
        for (p_, t_), k in {(int(p_), int(t_)): int(k) for p_, t_, k in zip(pids, tids, lane) if k}.items():
            base_name, sort = threads[(p_, t_ - k * LANE)]
            threads[(p_, t_)] = (f"{base_name} (overlapping, {k + 1})", sort)
        coll_df = _frame(pids, tids, start, end, names, "collective", args)
        wait = np.round(m["wait_us"].to_numpy() * 1000).astype(np.int64)
        w = wait > 0
        if w.any():
            wait_df = _frame(pids[w], TID_WAITS, start[w], start[w] + wait[w],
                             [f"wait: {n}, last rank {a_['last_rank']}" for n, a_, k in zip(names, args, w) if k],
                             "wait", [a_ for a_, k in zip(args, w) if k])
            wl = _lanes(pids[w], start[w], start[w] + wait[w])
            wait_df["tid"] = TID_WAITS + wl * LANE
            for p_, k in {(int(p_), int(k)) for p_, k in zip(pids[w], wl) if k}:
                threads[(p_, TID_WAITS + k * LANE)] = (f"waits for the last rank to arrive (overlapping, {k + 1})",
                                                       TID_WAITS)
        order = np.lexsort((pids, start, m["instance"].to_numpy()))
        inst = m["instance"].to_numpy()[order]
        a_idx = np.flatnonzero(inst[1:] == inst[:-1])  # link arrival k → k+1 of the same instance
        fname = [f"send/recv #{int(q)} (group {g})" if k else f"{o} #{int(q)} (group {g})"
                 for o, q, g, k in zip(ops, seq, pg, p2p)]  # both ends of a flow carry the same name
        for i in a_idx:
            a_, b_ = order[i], order[i + 1]
            flow_rows.append((a_, b_, min(int(start[b_]), int(end[a_])), int(start[b_]), fname[a_]))

    # ---- the budget, class by class (a flow costs two events)
    n_threads_max = 2 * len(threads)
    room = max_events - len(meta) - n_threads_max - 1  # 1: the "timeline thinned" note, when there is one
    fp_all = _finding_points(report, type(tin)(tin.aligned, tin.alignment_status, ranks, m), t0)
    left_out: dict[str, int] = {}

    def take(n: int, what: str) -> int:
        nonlocal room
        k = max(0, min(n, room))
        room -= k
        if k < n:
            left_out[what] = n - k
        return k

    fp = fp_all[:take(len(fp_all), "findings")]
    keep_steps = _take_longest((steps_df["end"] - steps_df["start"]).to_numpy(), take(len(steps_df), "steps")) \
        if len(steps_df) else np.zeros(0, bool)
    keep_coll = _take_longest((coll_df["end"] - coll_df["start"]).to_numpy(), take(len(coll_df), "collectives")) \
        if len(coll_df) else np.zeros(0, bool)
    flows_ok = [f for f in flow_rows if keep_coll[f[0]] and keep_coll[f[1]]]
    n_pairs = min(len(flows_ok), max(0, room) // 2)
    room -= 2 * n_pairs
    if n_pairs < len(flows_ok):
        left_out["collective flows"] = len(flows_ok) - n_pairs
    flows_ok = flows_ok[:n_pairs]
    keep_wait = _take_longest((wait_df["end"] - wait_df["start"]).to_numpy(), take(len(wait_df), "waits")) \
        if len(wait_df) else np.zeros(0, bool)
    keep_calls = _take_longest((calls_df["end"] - calls_df["start"]).to_numpy(), take(len(calls_df), "calls")) \
        if len(calls_df) else np.zeros(0, bool)
    act_d = (acts_df["end"] - acts_df["start"]).to_numpy() if len(acts_df) else np.zeros(0, np.int64)
    keep_act = _take_longest(act_d, take(len(acts_df), "GPU/CPU activity events"))
    host_d = (hosts_df["end"] - hosts_df["start"]).to_numpy() if len(hosts_df) else np.zeros(0, np.int64)
    keep_host = _take_longest(host_d, take(len(hosts_df), "CPU ops and runtime calls"))
    launch: list[tuple] = []  # (host row, act row)
    if len(acts_df) and len(hosts_df):
        hk = hosts_df[keep_host & (hosts_df["cat"].to_numpy() == "runtime") & (hosts_df["correlation"].to_numpy() >= 0)]
        ak = acts_df[keep_act]
        j = pd.merge(pd.DataFrame({"pid": hk["pid"].to_numpy(), "corr": hk["correlation"].to_numpy(), "h": hk.index}),
                     pd.DataFrame({"pid": ak["pid"].to_numpy(), "corr": ak["correlation"].to_numpy(), "a": ak.index}),
                     on=["pid", "corr"])
        if len(j):
            j = j.drop_duplicates("a").drop_duplicates("h")
            ok = acts_df["start"].to_numpy()[j["a"].to_numpy()] >= hosts_df["start"].to_numpy()[j["h"].to_numpy()]
            launch = list(zip(j["h"].to_numpy()[ok], j["a"].to_numpy()[ok]))
    n_launch = min(len(launch), max(0, room) // 2)
    if n_launch < len(launch):
        left_out["launch arrows"] = len(launch) - n_launch
    launch = launch[:n_launch]

    min_kept_us = None
    dropped_kernels = int((~keep_act).sum())
    if dropped_kernels:
        min_kept_us = float(act_d[keep_act].min()) / 1000.0 if keep_act.any() else None
        notes.append(f"{dropped_kernels} of {len(acts_df)} GPU/CPU activity events left out: the shortest "
                     + (f"(kept those of at least {min_kept_us:.3f} µs)" if min_kept_us is not None else "(all)"))
    for what, n in left_out.items():
        if what != "GPU/CPU activity events":
            notes.append(f"{n} {what} left out (the shortest)" if "flows" not in what and "arrows" not in what
                         else f"{n} {what} left out")

    # ---- the events themselves
    body: list[dict] = list(fp)
    for df, keep in ((steps_df, keep_steps), (coll_df, keep_coll), (wait_df, keep_wait), (calls_df, keep_calls),
                     (acts_df, keep_act), (hosts_df, keep_host)):
        if len(df):
            body += _slices(df[keep], t0)
    fid = 0
    if flows_ok:
        cp, ct = coll_df["pid"].to_numpy(), coll_df["tid"].to_numpy()
        fa = np.array([f[0] for f in flows_ok])
        fb = np.array([f[1] for f in flows_ok])
        us_s = _us(np.array([f[2] for f in flows_ok]), t0).tolist()
        us_f = _us(np.array([f[3] for f in flows_ok]), t0).tolist()
        pa, ta, pb, tb = cp[fa].tolist(), ct[fa].tolist(), cp[fb].tolist(), ct[fb].tolist()
        for i, f in enumerate(flows_ok):
            fid += 1
            body.append({"ph": "s", "id": fid, "pid": pa[i], "tid": ta[i], "ts": us_s[i], "name": f[4],
                         "cat": "collective"})
            body.append({"ph": "f", "bp": "e", "id": fid, "pid": pb[i], "tid": tb[i], "ts": us_f[i], "name": f[4],
                         "cat": "collective"})
    n_coll_flows = fid
    if launch:
        hs, as_ = np.array([x[0] for x in launch]), np.array([x[1] for x in launch])
        h_start, h_end = hosts_df["start"].to_numpy()[hs], hosts_df["end"].to_numpy()[hs]
        k_start = acts_df["start"].to_numpy()[as_]
        ts_s, ts_f = _us(np.minimum(h_end, k_start), t0), _us(k_start, t0)
        hp, ht = hosts_df["pid"].to_numpy()[hs], hosts_df["tid"].to_numpy()[hs]
        ap, at = acts_df["pid"].to_numpy()[as_], acts_df["tid"].to_numpy()[as_]
        del h_start
        hp, ht, ap, at, ts_s, ts_f = (x.tolist() for x in (hp, ht, ap, at, ts_s, ts_f))
        for i in range(len(launch)):
            fid += 1
            body.append({"ph": "s", "id": fid, "pid": hp[i], "tid": ht[i], "ts": ts_s[i], "name": "launch",
                         "cat": "launch"})
            body.append({"ph": "f", "bp": "e", "id": fid, "pid": ap[i], "tid": at[i], "ts": ts_f[i],
                         "name": "launch", "cat": "launch"})
    used = {(e["pid"], e["tid"]) for e in body if "tid" in e}
    events = list(meta)
    for (pid_, tid_), (nm, sort) in sorted(threads.items()):
        if (pid_, tid_) in used:
            events += [_meta(pid_, tid_, "thread_name", nm), _meta(pid_, tid_, "thread_sort_index", sort)]
    if notes:
        events.append({"ph": "i", "s": "g", "pid": ranks[0].rank if ranks else 0, "tid": TID_CPU, "ts": 0.0,
                       "name": "timeline thinned: " + "; ".join(notes), "cat": "analyze"})
    events += body
    if len(events) > max_events:  # a hard limit even when the ranks' own tracks alone exceed it
        events = _cut(events, max_events)
        notes.append(f"cut to the first {max_events} events")
    other = {
        "tool": f"analyze {(report.get('tool') or {}).get('version', '')}", "verdict": report.get("verdict"),
        "clock": ("aligned: each rank's clock offset applied (report cross_rank.alignment)" if tin.aligned else
                  f"not aligned (alignment {tin.alignment_status}): each rank on its own clock"),
        "time_origin_ns": int(t0), "max_events": int(max_events), "events": len(events),
        "ranks": len(all_ranks), "ranks_drawn": len(ranks),
        "ranks_left_out": [r for r in all_ranks if r not in kept],
        "activity_events_left_out": dropped_kernels, "shortest_activity_kept_us": min_kept_us,
        "host_events": int(keep_host.sum()), "host_events_left_out": int((~keep_host).sum()),
        "collective_members": int(len(m)), "flows": int(n_coll_flows), "launch_flows": int(fid - n_coll_flows),
        "findings": len(fp), "thinned": "; ".join(notes) if notes else "",
    }
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def _cut(events: list[dict], n: int) -> list[dict]:
    """The first ``n`` events, less any flow whose other end fell past the cut (a flow is a pair or nothing)."""
    head = events[:n]
    ends: dict[tuple, int] = {}
    for e in head:
        if e.get("ph") in ("s", "f"):
            k = (e.get("cat"), e.get("name"), e.get("id"))
            ends[k] = ends.get(k, 0) + 1
    return [e for e in head if e.get("ph") not in ("s", "f") or ends[(e.get("cat"), e.get("name"), e.get("id"))] == 2]


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
