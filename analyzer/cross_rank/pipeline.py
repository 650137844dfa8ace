"""Pipeline parallelism: which ranks form pipelines and in which stage order, the schedule's p, m, v with a
confidence (pipeline_schedule.py), and every stage's bubble over one common pipeline window.

Pipelines: the connected components of the matched send/recv graph when the peers are trustworthy (the trace
names them — gloo with record_shapes, NCCL `Src Rank`/`Dst Rank` — or a GPU's send and recv kernels end
together); a CPU trace profiled without record_shapes names no peer and gloo's send ends only when waited on, so
there the pipeline is every rank with send/recv, ordered by the schedule's stage annotations, else by which rank
sends more forwards (stage 0) or backwards (last stage) and when each rank's first block starts.

Bubble (docs/metrics.md, "Pipeline bubble"): per pipeline and step k, the window W(k) is stage 0's span from its
first to its last work in its step k (compute and collectives, optimizer excluded): stage 0 runs the first forward
and the last backward, so W(k) is the pipeline's makespan. Every stage s of that pipeline: bubble = 1 − busy_s(k) /
|W(k)| with busy_s(k) its own work in its step k. Only lengths are compared, so no clock alignment is needed and the
stages' staggered step windows do not matter. A clean GPipe / 1F1B schedule then measures (p−1)/(m+p−1) and an
interleaved or looped one (p−1)/(v·m+p−1).
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
import pandas as pd

from analyzer.cross_rank import pipeline_schedule as ps
from analyzer.cross_rank.member_parts import as_parts
from analyzer.cross_rank.pipeline_blocks import RankBlocks, rank_blocks
from analyzer.cross_rank.pipeline_stragglers import stage_straggler
from analyzer.rank import intervals as iv
from analyzer.rank.summary import collective_column

#: CPU traces whose send/recv name their peer for less than this share are paired by nothing we can trust.
PEERS_GIVEN_MIN = 0.9
#: Report value of `schedule` (documented set) for each inferred schedule name.
COARSE_SCHEDULE = {"gpipe": "gpipe", "1f1b": "1f1b", "interleaved_1f1b": "interleaved",
                   "looped_bfs": "interleaved", "unknown": "unknown"}


def bubble_rates(trace: Any) -> pd.DataFrame:
    """step, window_ns, busy_ns, bubble_rate for one rank over its own first-to-last compute (compute kernels
    whose start lies in the step). Kept for callers of the earlier definition; the report uses stage_bubbles."""
    a, st = trace.activity, trace.steps
    cols = {"step": [], "window_ns": [], "busy_ns": [], "bubble_rate": []}
    if not len(a) or not len(st):
        return pd.DataFrame(cols)
    comp = a[a["kind"].to_numpy() == "compute"]
    s, e = comp["start"].to_numpy(), comp["end"].to_numpy()
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    for step, ws, we in zip(st["step"], st["start"], st["end"]):
        lo, hi = np.searchsorted(s, ws, "left"), np.searchsorted(s, we, "left")
        if hi <= lo:
            continue
        u = iv.union(s[lo:hi], e[lo:hi])
        win = int(u[1][-1] - u[0][0])
        busy = iv.total(u)
        cols["step"].append(int(step))
        cols["window_ns"].append(win)
        cols["busy_ns"].append(busy)
        cols["bubble_rate"].append(1.0 - busy / win if win > 0 else np.nan)
    return pd.DataFrame(cols)


def theoretical_bubble(schedule: str, p: int, m: Optional[int], v: Optional[int]) -> Optional[float]:
    """GPipe / 1F1B (p−1)/(m+p−1); interleaved 1F1B and looped BFS (p−1)/(v·m+p−1): each of a rank's v stages
    holds 1/v of its layers, so the fill and drain ramps are v times shorter. Zero-bubble schedules fill the
    ramps with weight-gradient work: no closed form (None)."""
    if not m or p < 2 or schedule in ("zero_bubble", "zbv"):
        return None
    vv = v or 1
    if schedule in ("gpipe", "1f1b"):
        vv = 1
    return (p - 1) / (vv * m + p - 1)


def _components(edges: pd.DataFrame) -> list[list[int]]:
    ranks = sorted(set(edges["src"]) | set(edges["dst"]))
    comp = {r: r for r in ranks}

    def find(x: int) -> int:
        while comp[x] != x:
            comp[x] = comp[comp[x]]
            x = comp[x]
        return x
    for a, b in zip(edges["src"], edges["dst"]):
        comp[find(int(a))] = find(int(b))
    return [[r for r in ranks if find(r) == root] for root in sorted({find(r) for r in ranks})]


def _first_stage(ranks: list[int], rbs: dict[int, RankBlocks], first_op: dict[int, str], pool: list[int]
                 ) -> tuple[int, str]:
    """Stage 0 among the candidates `pool`: the rank the annotations name for stage 0, else the one that sends
    more forwards than backwards, else the one whose first transfer is a send, else the lowest rank."""
    pp0 = [r for r in pool if r in rbs and 0 in rbs[r].pp_stages]
    if pp0:
        return pp0[0], "it holds stage 0 in the schedule annotations"
    lab = ps.first_stage_by_labels([r for r in pool if r in rbs], rbs)
    if len(lab) == 1:
        return lab[0], "it sends more forward activations than gradients"
    send = [r for r in pool if first_op.get(r) == "send"]
    if send:
        return min(send), "its first transfer is a send"
    return min(pool), "lowest rank (nothing else tells)"


def _graph_order(ranks: list[int], edges: pd.DataFrame, rbs: dict[int, RankBlocks], first_op: dict[int, str]
                 ) -> tuple[list[int], bool, str]:
    """Ranks in stage order along the send/recv graph; True when it is a ring (interleaved chunks)."""
    adj: dict[int, set] = {r: set() for r in ranks}
    for a, b in zip(edges["src"], edges["dst"]):
        if a != b:
            adj[int(a)].add(int(b))
            adj[int(b)].add(int(a))
    ring = len(ranks) >= 3 and all(len(x) == 2 for x in adj.values())
    ends = [r for r in ranks if len(adj[r]) <= 1]
    s0, why = _first_stage(ranks, rbs, first_op, ranks if ring or not ends else ends)
    order = [s0]
    fwd = edges[edges["src"] == s0].sort_values("first_start")
    nxt: Optional[int] = int(fwd["dst"].iloc[0]) if len(fwd) else None
    if ring:  # go round towards the neighbour the annotations call stage 1, else the one stage 0 sends to first
        one = [r for r in adj[s0] if r in rbs and 1 in rbs[r].pp_stages]
        nxt = one[0] if one else nxt
    while nxt is not None and nxt not in order:
        order.append(nxt)
        cand = sorted(adj[nxt] - set(order))
        nxt = cand[0] if cand else None
    return order, ring, why


def _untrusted_order(ranks: list[int], rbs: dict[int, RankBlocks], offsets: dict[int, int]
                     ) -> tuple[list[list[int]], str]:
    """Stage positions (each a list of ranks) without peers: annotation stage indices, else forward/backward
    sends (first and last stage) and the time each rank's first block starts (the middle stages)."""
    if all(rbs[r].pp_stages for r in ranks):
        first = {r: min(rbs[r].pp_stages) for r in ranks}
        pos = sorted(set(first.values()))
        return [[r for r in ranks if first[r] == s] for s in pos], "stage indices in the schedule annotations"
    counts = {r: ps.send_label_counts(rbs[r]) for r in ranks if rbs[r].labelled_by != "none"}
    s0 = [r for r, c in counts.items() if c and c[0] > c[1]]
    last = [r for r, c in counts.items() if c and c[1] > c[0]]
    mid = [r for r in ranks if r not in s0 and r not in last]
    if not s0 or not last or len(s0) != len(last) or len(mid) % len(s0):
        return [[r] for r in sorted(ranks)], "rank order (nothing else tells)"

    def rel(r: int) -> float:
        t = []
        for k, sb in rbs[r].steps.items():
            ref = [rbs[x].steps[k].first_block_ns + offsets.get(x, 0) for x in s0
                   if k in rbs[x].steps and rbs[x].steps[k].first_block_ns is not None]
            if ref and sb.first_block_ns is not None:
                t.append(sb.first_block_ns + offsets.get(r, 0) - float(np.median(ref)))
        return float(np.median(t)) if t else float(r)
    mid.sort(key=lambda r: (rel(r), r))
    n = len(s0)
    positions = [sorted(s0)] + [sorted(mid[i:i + n]) for i in range(0, len(mid), n)] + [sorted(last)]
    return positions, ("first stage: sends more activations than gradients; last: the reverse; the others by "
                       "when their first forward starts")


def _fwd_counts(members: pd.DataFrame, order: list[int], rbs: dict[int, RankBlocks]) -> dict[tuple[int, int], int]:
    """Sends per step (mode over the sender's steps) on every stage-order link, from the sender's rows; a trace
    without ProfilerStep (step −1) is divided by the iterations its optimizer steps cut it into."""
    if not len(members):
        return {}
    s = members[(members["kind"] == "p2p") & (members["op"] == "send") & members["rank"].isin(order)]
    out = {}
    for (src, dst), g in s.groupby(["src", "dst"]):
        per = g.groupby("step").size()
        n = len(rbs[int(src)].steps) if int(src) in rbs else 0
        if (per.index.to_numpy() == -1).all() and n > 1 and min(rbs[int(src)].steps) >= 0:
            out[(int(src), int(dst))] = int(round(int(per.sum()) / n))
        else:
            out[(int(src), int(dst))] = int(ps._mode(per.tolist()) or 0)
    return out


def _direction_orders(members: pd.DataFrame, order: list[int], ring: bool) -> dict[int, str]:
    """Per rank, its first step's transfers as F (activation: to the next / from the previous stage) or B."""
    if not len(members):
        return {}
    p = len(order)
    out = {}
    pm = members[(members["kind"] == "p2p") & members["rank"].isin(order)]
    for i, r in enumerate(order):
        nxt = order[(i + 1) % p] if (ring or i + 1 < p) else None
        prv = order[(i - 1) % p] if (ring or i > 0) else None
        g = pm[pm["rank"] == r]
        if not len(g):
            continue
        g = g[g["step"] == g["step"].min()].sort_values(["start", "end"])
        peer = np.where(g["op"].to_numpy() == "send", g["dst"].to_numpy(), g["src"].to_numpy())
        fwd = ((g["op"].to_numpy() == "send") & (peer == nxt)) | ((g["op"].to_numpy() == "recv") & (peer == prv))
        out[r] = "".join("F" if f else "B" for f in fwd)
    return out


def stage_bubbles(positions: list[list[int]], rbs: dict[int, RankBlocks], theo: Optional[float]) -> list[dict]:
    """Per stage, rank and step: bubble over the pipeline window W(k) = stage 0's first-to-last compute span."""
    rows = []
    s0 = [r for r in positions[0] if r in rbs]
    steps = sorted({k for rk in positions for r in rk if r in rbs for k in rbs[r].steps})
    for k in steps:
        spans = [rbs[r].steps[k].last_ns - rbs[r].steps[k].first_ns for r in s0
                 if k in rbs[r].steps and rbs[r].steps[k].first_ns is not None]
        if not spans:
            continue
        w = float(np.median(spans))
        if w <= 0:
            continue
        for s, rk in enumerate(positions):
            for r in rk:
                sb = rbs[r].steps.get(k) if r in rbs else None
                if sb is None or sb.first_ns is None:
                    continue
                rows.append({"stage": s, "rank": int(r), "step": int(k),
                             "bubble_rate": float(max(0.0, 1.0 - sb.busy_ns / w)), "window_us": w / 1e3,
                             "busy_us": sb.busy_ns / 1e3, "theoretical_bubble": theo})
    return rows


def _own_time(job: Any, per_stage: list[dict]) -> Optional[float]:
    """Adds to each per-stage row the stage's own non-work time in its step — ``transfer_us`` (inside its
    send/recv after the peer was there: moving the data) and ``host_idle_us`` (outside every traced op: host
    work, the scheduler) — from the per-step metrics, and returns their mean share of the window W(k) (each row
    capped at 1), or None without those metrics. The bubble counts this time as idle, but it is the stage's own:
    no schedule theory has it, and no neighbour made the stage wait for it."""
    sm = getattr(job, "step_metrics", None)
    if sm is None or not len(sm) or not {"transfer_ns", "idle_ns"} <= set(sm.columns) or not per_stage:
        return None
    t = sm.set_index(["rank", "step"])[["transfer_ns", "idle_ns"]]
    shares = []
    for x in per_stage:
        k = (x["rank"], x["step"])
        if k not in t.index or not x["window_us"]:
            continue
        tr, idle = (float(v) for v in t.loc[k])
        if not (np.isfinite(tr) and np.isfinite(idle)):
            continue
        x["transfer_us"], x["host_idle_us"] = tr / 1e3, idle / 1e3
        shares.append(min(1.0, (tr + idle) / 1e3 / x["window_us"]))
    return float(np.mean(shares)) if shares else None


def _blocks_of(job: Any, ranks: list[int]) -> dict[int, RankBlocks]:
    cache = job.cache.setdefault("pipeline_blocks", {}) if hasattr(job, "cache") else {}
    for r in ranks:
        if r not in cache and r in job.traces:
            t = job.traces[r]  # a RankSummary brings its blocks, computed where the rank was parsed
            cache[r] = t.blocks if getattr(t, "blocks", None) is not None else rank_blocks(r, t)
    return {r: cache[r] for r in ranks if r in cache}


def _p2p_ranks(job: Any) -> list[int]:
    out = []
    for r, t in job.traces.items():
        ops = collective_column(t, "op")
        if len(ops) and np.isin(ops, ["send", "recv"]).any():
            out.append(int(r))
    return sorted(out)


#: the member columns the pipeline section reads (first ops, sends per link and step, first-step directions)
P2P_COLUMNS = ["rank", "kind", "op", "src", "dst", "step", "start", "end"]


def _p2p_rows(part: pd.DataFrame, _arg: Any) -> pd.DataFrame:
    """Run where a member partition is: its send/recv members, the columns this module reads (in a pipeline
    job nearly every member row is a send or a recv: half the table's columns travel, not all of them)."""
    cols = [c for c in P2P_COLUMNS if c in part]
    return part.loc[part["kind"] == "p2p", cols] if len(part) else part[cols]


def analyse(job: Any, inst: pd.DataFrame, members: Any, offsets: Optional[dict[int, int]] = None) -> dict:
    """The `pipeline` section (docs/report-sections.md)."""
    none = {"detected": False, "p": None, "m": None, "v": None, "schedule": "unknown", "stage_ranks": [],
            "per_stage": [], "mean_bubble_rate": None, "theoretical_bubble": None, "evidence": "no send/recv"}
    ranks = _p2p_ranks(job)
    if len(ranks) < 2:
        return none
    rbs = _blocks_of(job, ranks)
    offsets = offsets or {}
    cpu = all(rbs[r].device_type == "cpu" for r in rbs)
    given = float(np.mean([rbs[r].peers_given for r in rbs])) if rbs else 0.0
    trusted = not (cpu and given < PEERS_GIVEN_MIN and len(ranks) > 2)
    p2p = inst[inst["kind"] == "p2p"] if len(inst) else inst
    members = pm = as_parts(members).frame(_p2p_rows)  # only the send/recv members' P2P_COLUMNS travel
    first_op = pm.sort_values("start").groupby("rank")["op"].first().to_dict() if len(pm) else {}
    pipes = []  # (process group, positions [[ranks] per stage], ring, how the order was found, peers)
    if trusted and len(p2p):
        for pg, g in p2p.groupby("process_group", sort=False):
            edges = g.groupby(["src", "dst"]).agg(count=("instance", "size"), first_start=("start_min", "min"))
            edges = edges.reset_index()
            for rs in _components(edges):
                if len(rs) < 2:
                    continue
                order, ring, why = _graph_order(rs, edges[edges["src"].isin(rs)], rbs, first_op)
                how = (f"stage order {order} along the send/recv graph{' (a ring)' if ring else ''}; stage 0 = "
                       f"rank {order[0]}: {why}")
                pipes.append((pg, [[r] for r in order], ring, how, True))
    if not pipes:
        positions, why = _untrusted_order(ranks, rbs, offsets)
        how = (f"send/recv name no peer (CPU trace profiled without record_shapes?): the pipeline is every rank "
               f"with send/recv, {ranks}; stage order from {why}")
        pipes.append((None, positions, False, how, False))
    results = []
    for pg, positions, ring, how, peered in pipes:
        order = [rk[0] for rk in positions]
        rk_all = [r for rk in positions for r in rk if r in rbs]
        stage_of = {r: s for s, rk in enumerate(positions) for r in rk}
        p = len(positions)
        ests = [ps.from_pp_annotations(rk_all, rbs), ps.from_gpipe_annotations(rk_all, rbs),
                ps.from_send_labels(rk_all, rbs) if len(positions[0]) == 1 else None]
        if peered:
            ests.append(ps.from_transfers(order, ring, _fwd_counts(members, order, rbs),
                                          _direction_orders(members, order, ring)))
        p_conf = 0.95 if peered else 0.6
        if not peered and ests[2] is not None and ests[2].confidence >= ps.BASE_CONFIDENCE["send_labels"]:
            p_conf = 0.8  # one first and one last stage per pipeline and every middle stage as expected
        inf = ps.combine(p, p_conf, how, ests, stage_of)
        results.append({"pg": pg, "positions": positions, "ring": ring, "inf": inf})
    head = results[0]
    inf = head["inf"]
    p, m, v = inf.p, inf.m, inf.v
    theo = theoretical_bubble(inf.schedule, p, m, v)
    stage_ranks = [sorted({r for res in results if len(res["positions"]) > s for r in res["positions"][s]})
                   for s in range(p)]
    per_stage = []
    for res in results:
        per_stage += stage_bubbles(res["positions"], rbs, theo)
    per_stage.sort(key=lambda x: (x["step"], x["stage"], x["rank"]))
    own = _own_time(job, per_stage)
    rates = [x["bubble_rate"] for x in per_stage]
    same = all((r["inf"].p, r["inf"].m, r["inf"].v, r["inf"].schedule) == (p, m, v, inf.schedule) for r in results)
    evidence = f"{len(results)} pipeline(s); {inf.evidence[0]}; p={p} m={m} v={v} {inf.schedule} (confidence " \
               f"{inf.confidence:.2f})"
    if not same:
        evidence += "; pipelines disagree: " + "; ".join(
            f"{[rk[0] for rk in r['positions']]}: p={r['inf'].p} m={r['inf'].m} v={r['inf'].v} {r['inf'].schedule}"
            for r in results)
    coarse = COARSE_SCHEDULE.get(inf.schedule, "interleaved" if (v or 1) > 1 else "1f1b")
    strag = [x for x in (stage_straggler(job, res["positions"], rbs) for res in results) if x is not None]
    strag = max(strag, key=lambda x: (x["delay_share"], -x["rank"])) if strag else None
    return {"detected": True, "p": p, "m": m, "v": v, "schedule": coarse, "stage_ranks": stage_ranks,
            "per_stage": per_stage, "mean_bubble_rate": float(np.mean(rates)) if rates else None,
            "theoretical_bubble": theo, "evidence": evidence, "bubble_window": "stage0_span",
            "stage_straggler": strag, "mean_own_idle_share": own,
            "inference": inf.to_dict(),
            "pipelines": [{"process_group": r["pg"], "stages": [rk[0] for rk in r["positions"]],
                           "stage_ranks": r["positions"], "p": r["inf"].p, "m": r["inf"].m, "v": r["inf"].v,
                           "schedule": COARSE_SCHEDULE.get(r["inf"].schedule, coarse),
                           "inferred_schedule": r["inf"].schedule, "confidence": round(r["inf"].confidence, 3)}
                          for r in results]}
