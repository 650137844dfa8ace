"""The merged timeline's per-rank and per-partition work, run where each rank's events or member rows are.

``analyzer/render/timeline.py`` plans the file in the parent from small answers and streams it; the questions it
asks are here, as module-level functions an engine can ship (docs/scale.md):

- :func:`prepare_rank` makes one rank's *side* (its tracks, lanes and event columns, kept where it was made)
  and a *summary* of a few numbers (event counts per class, duration range, first times, its thread names);
- :func:`rank_hist`, :func:`rank_eq`, :func:`rank_final`, :func:`rank_write`, :func:`rank_launch` answer
  from a side: duration histograms (to find the thinning threshold), tie counts, launch-arrow counts and the
  tracks used, and finally the JSON text of one class of the rank's events;
- the ``part_*`` functions answer the same from a partition of the collective member table.

Which events are kept is decided by :class:`analyzer.render.timeline.Sel` specs handed in: ``None`` keeps all,
``False`` none, ``(d, q)`` keeps every event longer than ``d`` ns and the first ``q`` (in position order) of
exactly ``d``: the k longest of a class across all ranks, ties by position, as one stable sort would pick them.
"""
from __future__ import annotations

import pickle
from typing import Any, Optional

import numpy as np
import orjson
import pandas as pd

from analyzer.render import timeline_events as tl
from analyzer.render.timeline_events import flow_start

RANK_CLASSES = ("steps", "calls", "acts", "hosts")


# ---- keeping and counting by a selection spec

def keep_mask(d: np.ndarray, spec: Any) -> np.ndarray:
    """Boolean mask of the entries a spec keeps (see the module docstring)."""
    if spec is None:
        return np.ones(len(d), dtype=bool)
    if spec is False:
        return np.zeros(len(d), dtype=bool)
    dstar, quota = spec
    keep = d > dstar
    if quota > 0:
        keep[np.flatnonzero(d == dstar)[:quota]] = True
    return keep


def hist(d: np.ndarray, win: tuple) -> np.ndarray:
    """Counts of ``d`` in [lo, hi) by bins of width w (nb bins)."""
    lo, hi, w, nb = win
    x = d[(d >= lo) & (d < hi)]
    return np.bincount((x - lo) // w, minlength=nb)[:nb].astype(np.int64)


def _dumps(recs: list) -> bytes:
    """Events as JSON text joined by commas (no brackets), as they sit inside traceEvents."""
    return orjson.dumps(recs, option=orjson.OPT_SERIALIZE_NUMPY)[1:-1] if recs else b""


# ---- one rank

def prepare_rank(r: Any, want_steps: bool = False) -> tuple[dict, dict]:
    """(summary, side) of one rank (a views.RankEvents on the aligned clock)."""
    pid = r.rank
    threads: dict[tuple[int, int], tuple[str, int]] = {}
    a = r.activity
    launch_tids = a.loc[a["launch_tid"] >= 0, "launch_tid"] if len(a) else pd.Series([], dtype=np.int64)
    main_tid = int(launch_tids.mode().iloc[0]) if len(launch_tids) else None
    cpu_label = ("CPU thread " + str(main_tid) + " (launches the GPU work): collective calls") \
        if main_tid is not None else ("CPU (training thread): collective calls" if r.device_type == "cpu"
                                      else "CPU: collective calls")
    threads[(pid, tl.TID_CPU)] = (cpu_label, 1)
    threads[(pid, tl.TID_STEPS)] = ("ProfilerStep windows", 0)
    frames: dict[str, pd.DataFrame] = {c: pd.DataFrame() for c in RANK_CLASSES}
    if len(r.steps):
        frames["steps"] = tl._frame(pid, tl.TID_STEPS, r.steps["start"], r.steps["end"],
                                    ["ProfilerStep#" + str(int(s)) for s in r.steps["step"]], "step")
    cc = r.cpu_comm
    if len(cc):
        on_main = cc if main_tid is None else cc[cc["tid"] == main_tid]
        if len(on_main):
            frames["calls"] = tl._frame(pid, tl.TID_CPU, on_main["start"], on_main["end"],
                                        [tl._name(x) for x in on_main["name"]], "cpu_collective")
    if len(a):
        streams = sorted(set(int(s) for s in a["stream"].unique()))
        tid_of = {s: tl.TID_STREAM0 + i for i, s in enumerate(streams)}
        what = "GPU stream" if r.device_type != "cpu" else "CPU thread"
        for s_, tid in tid_of.items():
            threads[(pid, tid)] = (f"{what} {s_}", tid)
        af = tl._frame(pid, a["stream"].map(tid_of).to_numpy(), a["start"], a["end"],
                       [tl._name(x) for x in a["name"]], a["kind"].to_numpy())
        ka = r.kernel_args or {}
        af["args"] = [tl._clean_args(ka[c]) if c in ka else None for c in a["correlation"].to_numpy().tolist()] \
            if ka else [None] * len(a)
        af["correlation"] = a["correlation"].to_numpy()
        frames["acts"] = af
    h = r.host_ops if r.host_ops is not None else pd.DataFrame()
    if len(h):
        htids = sorted(set(int(x) for x in h["tid"]), key=lambda x: (x != main_tid, x))
        tid_of_h = {x: tl.TID_HOST0 + i for i, x in enumerate(htids)}
        for x, tid in tid_of_h.items():
            threads[(pid, tid)] = (f"CPU thread {x}: ops and runtime calls"
                                   + (" (launches the GPU work)" if x == main_tid else ""), tid)
        hf = tl._frame(pid, h["tid"].map(tid_of_h).to_numpy(), h["start"], h["end"],
                       [tl._name(x) for x in h["name"]], h["cat"].to_numpy(),
                       [tl._clean_args(x) if x else None for x in h["args"]])
        hf["correlation"] = h["correlation"].to_numpy()
        frames["hosts"] = hf
    for c in RANK_CLASSES:
        tl._nest(frames[c], threads)
    light: dict[str, dict] = {}
    blob: dict[str, bytes] = {}
    step_starts: dict[int, int] = {}
    if want_steps:  # the rank a finding names: where each of its steps starts (the first row of a step number)
        for s, t in zip(r.steps["step"].tolist(), r.steps["start"].tolist()):
            step_starts.setdefault(int(s), int(t))
    summary: dict[str, Any] = {"rank": pid, "n": {}, "range": {}, "n_cpu_comm": int(len(cc)),
                               "n_steps": int(len(r.steps)),
                               "label": f"rank {pid}" + (f" ({r.host})" if r.host else ""),
                               "threads": {t: v for (_, t), v in threads.items()},
                               "act_min": int(a["start"].min()) if len(a) else None,
                               "step_min": int(r.steps["start"].min()) if len(r.steps) else None,
                               "step_starts": step_starts}
    for c, df in frames.items():
        if not len(df):
            summary["n"][c] = 0
            continue
        start, end = df["start"].to_numpy(dtype=np.int64), df["end"].to_numpy(dtype=np.int64)
        d = end - start
        light[c] = {"tid": df["tid"].to_numpy(dtype=np.int64), "start": start, "end": end, "d": d}
        if c == "acts":
            light[c]["corr"] = df["correlation"].to_numpy()
        if c == "hosts":
            light[c]["corr"] = df["correlation"].to_numpy()
            light[c]["runtime"] = df["cat"].to_numpy() == "runtime"
        cols = [x for x in ("name", "cat", "args") if x in df]
        blob[c] = pickle.dumps(df[cols], protocol=pickle.HIGHEST_PROTOCOL)
        summary["n"][c] = int(len(df))
        summary["range"][c] = (int(d.min()), int(d.max()))
    return summary, {"pid": pid, "light": light, "blob": blob}


def _d(side: dict, c: str) -> np.ndarray:
    return side["light"][c]["d"] if c in side["light"] else np.zeros(0, np.int64)


def rank_hist(side: dict, arg: dict) -> dict:
    """{class: counts} of the rank's durations in each class's window."""
    return {c: hist(_d(side, c), win) for c, win in arg.items()}


def rank_eq(side: dict, arg: dict) -> dict:
    """{class: how many of the rank's events last exactly the threshold}."""
    return {c: int((_d(side, c) == dstar).sum()) for c, dstar in arg.items()}


def _launch_pairs(side: dict, specs: dict) -> tuple[np.ndarray, np.ndarray]:
    """(host rows, activity rows) of the launch arrows between kept runtime calls and kept activity."""
    li = side["light"]
    if "acts" not in li or "hosts" not in li:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    ka = keep_mask(li["acts"]["d"], specs.get("acts"))
    kh = keep_mask(li["hosts"]["d"], specs.get("hosts"))
    h, ac = li["hosts"], li["acts"]
    hm = kh & h["runtime"] & (h["corr"] >= 0)
    hidx, aidx = np.flatnonzero(hm), np.flatnonzero(ka)
    pid = side["pid"]
    j = pd.merge(pd.DataFrame({"pid": np.full(len(hidx), pid, np.int64), "corr": h["corr"][hidx], "h": hidx}),
                 pd.DataFrame({"pid": np.full(len(aidx), pid, np.int64), "corr": ac["corr"][aidx], "a": aidx}),
                 on=["pid", "corr"])
    if not len(j):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    j = j.drop_duplicates("a").drop_duplicates("h")
    hj, aj = j["h"].to_numpy(), j["a"].to_numpy()
    ok = ac["start"][aj] >= h["start"][hj]
    return hj[ok], aj[ok]


def rank_final(side: dict, specs: dict) -> tuple[int, list[int]]:
    """(launch arrows between kept events, the tids the rank's kept slices sit on) under the classes' specs."""
    used: set[int] = set()
    for c, li in side["light"].items():
        used.update(np.unique(li["tid"][keep_mask(li["d"], specs.get(c))]).tolist())
    return len(_launch_pairs(side, specs)[0]), sorted(used)


def rank_write(side: dict, arg: tuple) -> bytes:
    """The JSON text of the rank's kept events of one class."""
    c, t0, spec = arg
    if c not in side["light"]:
        return b""
    li = side["light"][c]
    keep = keep_mask(li["d"], spec)
    if not keep.any():
        return b""
    df = pickle.loads(side["blob"][c])
    df.insert(0, "pid", side["pid"])
    df.insert(1, "tid", li["tid"])
    df["start"], df["end"] = li["start"], li["end"]
    return _dumps(tl._slices(df[keep], t0))


def rank_launch(side: dict, arg: tuple) -> bytes:
    """The JSON text of the rank's first ``n`` launch arrows, ids from ``fid0 + 1``."""
    t0, specs, n, fid0 = arg
    hs, as_ = _launch_pairs(side, specs)
    hs, as_ = hs[:n], as_[:n]
    if not len(hs):
        return b""
    h, ac = side["light"]["hosts"], side["light"]["acts"]
    k_start = ac["start"][as_]
    ts_s = tl._us(flow_start(h["start"][hs], h["end"][hs], k_start), t0).tolist()  # inside the launch call
    ts_f = tl._us(k_start, t0).tolist()
    ht, at = h["tid"][hs].tolist(), ac["tid"][as_].tolist()
    pid = side["pid"]
    out = []
    for i in range(len(hs)):
        fid = fid0 + i + 1
        out.append({"ph": "s", "id": fid, "pid": pid, "tid": ht[i], "ts": ts_s[i], "name": "launch", "cat": "launch"})
        out.append({"ph": "f", "bp": "e", "id": fid, "pid": pid, "tid": at[i], "ts": ts_f[i], "name": "launch",
                    "cat": "launch"})
    return _dumps(out)


# ---- a partition of the collective member table

def member_view(part: pd.DataFrame, inst: Optional[pd.DataFrame]) -> pd.DataFrame:
    """The member rows as views.collectives_frame gives them to the timeline (instance, process_group, seq,
    kind, op, rank, src, dst, bytes, wait_us, last_rank, start_ns, end_ns), from a partition as the cross-rank
    stage keeps it and the instances of its iid range; ``inst`` None: already that view."""
    if inst is None:
        return part
    iid = part["iid"].to_numpy()
    pos = pd.Index(inst["instance"].to_numpy()).get_indexer(iid)
    has = pos >= 0
    by = inst["bytes"].to_numpy(dtype=float)
    lr = inst["last_rank"].to_numpy(dtype=float)
    b = np.where(has, by[np.where(has, pos, 0)], np.nan)
    out = pd.DataFrame({
        "instance": iid, "process_group": part["process_group"].to_numpy(), "seq": part["seq"].to_numpy(),
        "kind": part["kind"].to_numpy(), "op": part["op"].to_numpy(), "rank": part["rank"].to_numpy(),
        "src": part["src"].to_numpy(), "dst": part["dst"].to_numpy(),
        "bytes": np.where(b >= 0, b, np.nan),
        "wait_us": part["wait_ns"].to_numpy().astype(float) / 1000.0,
        "last_rank": np.where(has, lr[np.where(has, pos, 0)], np.nan),
        "start_ns": part["start"].to_numpy(dtype=np.int64), "end_ns": part["end"].to_numpy(dtype=np.int64)})
    return out


def _kept(part: pd.DataFrame, arg: dict) -> pd.DataFrame:
    m = member_view(part, arg.get("inst"))
    kept = arg.get("kept")
    if kept is not None and len(m):
        m = m[m["rank"].isin(kept)].reset_index(drop=True)
    return m


def _tracks(m: pd.DataFrame) -> list[str]:
    p2p = (m["kind"] == "p2p").to_numpy() if "kind" in m else np.zeros(len(m), bool)
    return [f"{g} {int(a_)}→{int(b_)}" if k else str(g) for g, k, a_, b_ in
            zip(m["process_group"].astype(str), p2p, m["src"].fillna(-1), m["dst"].fillna(-1))]


def _track_tids(m: pd.DataFrame, gtid: dict) -> np.ndarray:
    """Each row's track tid (gtid of its _tracks name), the group's name looked up once per group."""
    p2p = (m["kind"] == "p2p").to_numpy() if "kind" in m else np.zeros(len(m), bool)
    codes, uniq = pd.factorize(m["process_group"])
    if (codes < 0).any():  # a missing group: named as astype(str) names it, row by row
        return np.array([gtid[g] for g in _tracks(m)], dtype=np.int64)
    by_group = np.array([gtid.get(str(g), -1) for g in uniq], dtype=np.int64)
    tids = by_group[codes] if len(m) else np.zeros(0, np.int64)
    if p2p.any():
        tids[p2p] = [gtid[g] for g in _tracks(m[p2p])]
    return tids


def part_counts(part: pd.DataFrame, arg: dict) -> dict:
    """{rank: member rows} of the partition."""
    m = member_view(part, arg.get("inst"))
    r, n = np.unique(m["rank"].to_numpy(dtype=np.int64), return_counts=True)
    return dict(zip(r.tolist(), n.tolist()))


def _cols(m: pd.DataFrame, arg: dict) -> dict:
    """The arrays the member classes are drawn from (as timeline.py drew them from the whole table)."""
    start = m["start_ns"].to_numpy(dtype=np.int64)
    end = np.maximum(m["end_ns"].to_numpy(dtype=np.int64), start)
    wait = np.round(m["wait_us"].to_numpy() * 1000).astype(np.int64)
    pids = m["rank"].to_numpy(dtype=np.int64)
    out = {"start": start, "end": end, "wait": wait, "w": wait > 0, "pids": pids,
           "iid": m["instance"].to_numpy(dtype=np.int64)}
    if "gtid" in arg:
        tids = _track_tids(m, arg["gtid"])
        lanes = arg.get("lanes") or {}
        wlanes = arg.get("wlanes") or {}
        lane = np.array([lanes.get(k, 0) for k in zip(out["iid"].tolist(), pids.tolist())], dtype=np.int64) \
            if lanes else np.zeros(len(m), np.int64)
        out["tids"] = tids + lane * tl.LANE
        out["base_tids"] = tids
        w = out["w"]
        wl = np.array([wlanes.get(k, 0) for k in zip(out["iid"][w].tolist(), pids[w].tolist())], dtype=np.int64) \
            if wlanes else np.zeros(int(w.sum()), np.int64)
        out["wtids"] = tl.TID_WAITS + wl * tl.LANE
    return out


def part_facts(part: pd.DataFrame, arg: dict) -> dict:
    """Of the kept ranks' members: the (rank, track) pairs, rows, waits and the duration range of each."""
    m = _kept(part, arg)
    c = _cols(m, arg)
    track = _tracks(m)
    d, wd = c["end"] - c["start"], c["wait"][c["w"]]
    return {"pairs": sorted({(int(r_), t) for t, r_ in zip(track, c["pids"].tolist())}),
            "n": int(len(m)), "n_wait": int(c["w"].sum()),
            "range": (int(d.min()), int(d.max())) if len(d) else None,
            "wrange": (int(wd.min()), int(wd.max())) if len(wd) else None}


def part_lane_rows(part: pd.DataFrame, arg: dict) -> dict:
    """The rows of the ranks in ``arg["chunk"]`` the lanes are computed from: iid, rank, tid, start, end, wait."""
    m = _kept(part, arg)
    m = m[m["rank"].isin(arg["chunk"])].reset_index(drop=True)
    c = _cols(m, arg)
    return {"iid": c["iid"], "pids": c["pids"], "tids": c["base_tids"], "start": c["start"], "end": c["end"],
            "wait": c["wait"]}


def part_hist(part: pd.DataFrame, arg: dict) -> dict:
    """{"coll"/"wait": counts of the member slices' durations in the window}."""
    c = _cols(_kept(part, arg), arg)
    d = {"coll": c["end"] - c["start"], "wait": c["wait"][c["w"]]}
    return {k: hist(d[k], win) for k, win in arg["win"].items()}


def part_eq(part: pd.DataFrame, arg: dict) -> dict:
    c = _cols(_kept(part, arg), arg)
    d = {"coll": c["end"] - c["start"], "wait": c["wait"][c["w"]]}
    return {k: int((d[k] == v).sum()) for k, v in arg["eq"].items()}


def _flows(c: dict, keep: np.ndarray) -> list[tuple[int, int]]:
    """(from row, to row) of each flow between kept slices: arrival k → k+1 of the same instance."""
    order = np.lexsort((c["pids"], c["start"], c["iid"]))
    inst = c["iid"][order]
    a_idx = np.flatnonzero(inst[1:] == inst[:-1])
    a_, b_ = order[a_idx], order[a_idx + 1]
    ok = keep[a_] & keep[b_]
    return list(zip(a_[ok].tolist(), b_[ok].tolist()))


def part_final(part: pd.DataFrame, arg: dict) -> tuple[int, list]:
    """(flows between kept collective slices, the (pid, tid) tracks the kept member slices sit on)."""
    c = _cols(_kept(part, arg), arg)
    kc = keep_mask(c["end"] - c["start"], arg["coll"])
    kw = keep_mask(c["wait"][c["w"]], arg.get("wait", False))
    used = set(zip(c["pids"][kc].tolist(), c["tids"][kc].tolist()))
    used |= set(zip(c["pids"][c["w"]][kw].tolist(), c["wtids"][kw].tolist()))
    return len(_flows(c, kc)), sorted(used)


def _names_args(m: pd.DataFrame) -> tuple[list, list]:
    pg = m["process_group"].astype(str).to_numpy()
    ops = m["op"].astype(str).to_numpy()
    seq = m["seq"].to_numpy()
    names = [f"{o} #{int(q)} (group {g})" for o, q, g in zip(ops, seq, pg)]
    args = [{"process_group": g, "seq": int(q), "op": o, "instance": int(i), "wait_us": round(float(w), 3),
             "bytes": (None if b != b else int(b)), "last_rank": int(lr) if lr == lr else None}
            for g, q, o, i, w, b, lr in zip(pg, seq, ops, m["instance"], m["wait_us"], m["bytes"], m["last_rank"])]
    return names, args


def part_write(part: pd.DataFrame, arg: dict) -> bytes:
    """The JSON text of the partition's kept collective slices (``what`` "coll") or waits ("wait") among its
    rows ``slice`` [a, b), or of its flows a..b-1 of the first ``n`` ("flows", ids from ``fid0 + 1``). Which are
    kept is decided over the whole partition; only the slice's events are made (the answer stays small)."""
    m = _kept(part, arg)
    if not len(m):
        return b""
    c = _cols(m, arg)
    t0, what = arg["t0"], arg["what"]
    a, b = arg.get("slice", (0, len(m)))
    kc = keep_mask(c["end"] - c["start"], arg["coll"])
    if what == "flows":
        fl = _flows(c, kc)[:arg["n"]][a:b]
        if not fl:
            return b""
        fa, fb = np.array([f[0] for f in fl]), np.array([f[1] for f in fl])
        sub = m.iloc[fa]
        p2p = (sub["kind"] == "p2p").to_numpy() if "kind" in sub else np.zeros(len(sub), bool)
        fname = [f"send/recv #{int(q)} (group {g})" if k else f"{o} #{int(q)} (group {g})"
                 for o, q, g, k in zip(sub["op"].astype(str), sub["seq"], sub["process_group"].astype(str), p2p)]
        st, en = c["start"], c["end"]
        us_s = tl._us(flow_start(st[fa], en[fa], st[fb]), t0).tolist()  # strictly inside the earlier slice
        us_f = tl._us(st[fb], t0).tolist()
        cp, ct = c["pids"], c["tids"]
        pa, ta, pb, tb = cp[fa].tolist(), ct[fa].tolist(), cp[fb].tolist(), ct[fb].tolist()
        out = []
        for i in range(len(fl)):
            fid = arg["fid0"] + a + i + 1
            out.append({"ph": "s", "id": fid, "pid": pa[i], "tid": ta[i], "ts": us_s[i], "name": fname[i],
                        "cat": "collective"})
            out.append({"ph": "f", "bp": "e", "id": fid, "pid": pb[i], "tid": tb[i], "ts": us_f[i],
                        "name": fname[i], "cat": "collective"})
        return _dumps(out)
    if what == "coll":
        keep = kc[a:b]
        if not keep.any():
            return b""
        names, args = _names_args(m.iloc[a:b])
        df = tl._frame(c["pids"][a:b], c["tids"][a:b], c["start"][a:b], c["end"][a:b], names, "collective", args)
        return _dumps(tl._slices(df[keep], t0))
    w = c["w"]
    wpos = np.flatnonzero(w)
    ia, ib = int(np.searchsorted(wpos, a)), int(np.searchsorted(wpos, b))
    if ia >= ib:
        return b""
    keep = keep_mask(c["wait"][w], arg["wait"])[ia:ib]
    if not keep.any():
        return b""
    rows = wpos[ia:ib]
    names, args = _names_args(m.iloc[rows])
    start, wait = c["start"][rows], c["wait"][rows]
    df = tl._frame(c["pids"][rows], c["wtids"][ia:ib], start, start + wait,
                   [f"wait: {n}, last rank {a_['last_rank']}" for n, a_ in zip(names, args)], "wait", args)
    return _dumps(tl._slices(df[keep], t0))


def part_points(part: pd.DataFrame, arg: dict) -> dict:
    """{(rank, group, seq): start_ns of the first kept member row} for the findings' subjects asked."""
    m = _kept(part, arg)
    out: dict = {}
    if not len(m):
        return out
    g = m["process_group"].astype(str).to_numpy()
    r, q, s = m["rank"].to_numpy(), m["seq"].to_numpy(), m["start_ns"].to_numpy()
    for key in arg["want"]:
        hit = np.flatnonzero((r == key[0]) & (g == key[1]) & (q == key[2]))
        if len(hit):
            out[key] = int(s[hit[0]])
    return out
