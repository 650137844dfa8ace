"""Pipeline parallelism from matched send/recv: stage order, p, m, schedule, and measured vs ideal bubble.

Stage 0 is the rank whose first transfer is a send (activations leave it before anything arrives). Forward
transfers go stage s → s+1; in Megatron's interleaved schedule the last stage also sends forward to stage 0,
closing a ring: then v = c01 / (c01 − c_wrap) and m = c01 − c_wrap per step (c = forward transfers per step),
else m = c01. Schedule on stage 0: GPipe sends every forward before the first backward gradient arrives;
1F1B interleaves them in the steady state. Bubble (docs/metrics.md, docs/cross-rank.md): per rank and step, the share of the window from
its first to its last compute kernel starting in the step in which no compute runs; ideal (p−1)/(v·m+p−1).
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
import pandas as pd

from analyzer.rank import intervals as iv


def bubble_rates(trace: Any) -> pd.DataFrame:
    """step, window_ns, busy_ns, bubble_rate for one rank (compute kernels whose start lies in the step)."""
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


def _stage_order(ranks: list[int], edges: pd.DataFrame, first_op: dict[int, str]) -> tuple[list[int], bool]:
    """Ranks in stage order along the send/recv graph; True when it is a ring (interleaved)."""
    adj: dict[int, set] = {r: set() for r in ranks}
    for a, b in zip(edges["src"], edges["dst"]):
        if a != b:
            adj[int(a)].add(int(b))
            adj[int(b)].add(int(a))
    ring = len(ranks) >= 3 and all(len(v) == 2 for v in adj.values())
    ends = [r for r in ranks if len(adj[r]) <= 1]
    starts = [r for r in ranks if first_op.get(r) == "send"]
    pool = [r for r in starts if r in ends] or starts or ends or ranks
    s0 = min(pool)
    order, prev = [s0], None
    fwd = edges[edges["src"] == s0].sort_values("first_start")
    nxt: Optional[int] = int(fwd["dst"].iloc[0]) if len(fwd) else None
    while nxt is not None and nxt not in order:
        order.append(nxt)
        cand = sorted(adj[nxt] - set(order))
        nxt = cand[0] if cand else None
    return order, ring


def _schedule_votes(pm: pd.DataFrame, order: list[int]) -> tuple[int, int]:
    """(stage-steps run GPipe-style, stage-steps where a backward transfer precedes the last forward one).

    Per stage the transfers with one neighbour are used: the next stage (forward = send, backward = recv),
    or for the last stage the previous one (forward = recv, backward = send). With m <= p, 1F1B's first stage
    looks like GPipe, so every stage votes and one interleaving stage-step suffices.
    """
    gp = inter = 0
    for s, r in enumerate(order):
        if s + 1 < len(order):
            nb, fwd_op = order[s + 1], "send"
        else:
            nb, fwd_op = order[s - 1], "recv"
        ev = pm[(pm["rank"] == r) & (((pm["op"] == "send") & (pm["dst"] == nb)) |
                                     ((pm["op"] == "recv") & (pm["src"] == nb)))]
        for _, gs in ev.groupby("step"):
            ops = gs.sort_values(["start", "end"])["op"].to_numpy()
            is_f = ops == fwd_op
            if not is_f.any() or is_f.all():
                continue
            first_b = int(np.argmax(~is_f))
            last_f = int(len(is_f) - 1 - np.argmax(is_f[::-1]))
            if first_b < last_f:
                inter += 1
            else:
                gp += 1
    return gp, inter


def analyse(job: Any, inst: pd.DataFrame, members: pd.DataFrame) -> dict:
    """The `pipeline` section (docs/report-sections.md)."""
    p2p = inst[inst["kind"] == "p2p"]
    none = {"detected": False, "p": None, "m": None, "v": None, "schedule": "unknown", "stage_ranks": [],
            "per_stage": [], "mean_bubble_rate": None, "theoretical_bubble": None, "evidence": "no send/recv"}
    if not len(p2p):
        return none
    pm = members[members["iid"].isin(p2p["instance"])]
    first_op = pm.sort_values("start").groupby("rank")["op"].first().to_dict()
    pipes = []
    for pg, g in p2p.groupby("process_group", sort=False):
        edges = g.groupby(["src", "dst"]).agg(count=("instance", "size"), first_start=("start_min", "min"))
        edges = edges.reset_index()
        ranks = sorted(set(edges["src"]) | set(edges["dst"]))
        # connected components of this group's transfer graph (several pipelines may share one group)
        comp = {r: r for r in ranks}

        def find(x):
            while comp[x] != x:
                comp[x] = comp[comp[x]]
                x = comp[x]
            return x
        for a, b in zip(edges["src"], edges["dst"]):
            comp[find(int(a))] = find(int(b))
        for root in sorted({find(r) for r in ranks}):
            rs = [r for r in ranks if find(r) == root]
            e = edges[edges["src"].isin(rs)]
            order, ring = _stage_order(rs, e, first_op)
            pipes.append((pg, order, ring, g[g["src"].isin(rs)]))
    pipes = [x for x in pipes if len(x[1]) >= 2]
    if not pipes:
        return none
    results = []
    for pg, order, ring, g in pipes:
        p = len(order)
        steps = sorted(s for s in g["step"].unique())
        nsteps = max(1, len(steps))
        c01 = int(((g["src"] == order[0]) & (g["dst"] == order[1])).sum())
        cw = int(((g["src"] == order[-1]) & (g["dst"] == order[0])).sum()) if ring else 0
        per01 = c01 / nsteps
        m = int(round((c01 - cw) / nsteps)) if ring and c01 > cw else int(round(per01))
        v = int(round(c01 / max(1, c01 - cw))) if ring and c01 > cw else 1
        gp, inter = _schedule_votes(pm, order)
        sched = "unknown"
        if v > 1:
            sched = "interleaved"
        elif gp or inter:
            sched = "1f1b" if inter else "gpipe"
        results.append({"pg": pg, "order": order, "p": p, "m": m, "v": v, "schedule": sched, "ring": ring})
    head = results[0]
    p, m, v = head["p"], head["m"], head["v"]
    theo = (p - 1) / (v * m + p - 1) if m else None
    stage_ranks = [sorted({r["order"][s] for r in results if len(r["order"]) > s}) for s in range(p)]
    per_stage = []
    for s, rks in enumerate(stage_ranks):
        for r in rks:
            if r not in job.traces:
                continue
            b = bubble_rates(job.traces[r])
            for row in b.itertuples():
                per_stage.append({"stage": s, "rank": r, "step": int(row.step), "bubble_rate": float(row.bubble_rate),
                                  "window_us": row.window_ns / 1e3, "theoretical_bubble": theo})
    rates = [x["bubble_rate"] for x in per_stage if x["bubble_rate"] == x["bubble_rate"]]
    agree = all((r["p"], r["m"], r["v"], r["schedule"]) == (p, m, v, head["schedule"]) for r in results)
    evidence = (f"{len(results)} pipeline(s) over process group(s) {sorted({r['pg'] for r in results})}: stage order "
                f"{head['order']}{' (ring: interleaved chunks)' if head['ring'] else ''}; {m * v} forward "
                f"transfers per step from stage 0 to stage 1")
    if not agree:
        evidence += "; pipelines disagree: " + "; ".join(
            f"{r['order']}: p={r['p']} m={r['m']} v={r['v']} {r['schedule']}" for r in results)
    return {"detected": True, "p": p, "m": m, "v": v, "schedule": head["schedule"], "stage_ranks": stage_ranks,
            "per_stage": per_stage, "mean_bubble_rate": float(np.mean(rates)) if rates else None,
            "theoretical_bubble": theo, "evidence": evidence,
            "pipelines": [{"process_group": r["pg"], "stages": r["order"], "p": r["p"], "m": r["m"], "v": r["v"],
                           "schedule": r["schedule"]} for r in results]}
