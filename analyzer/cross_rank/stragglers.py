"""Who the job waits for: how long each rank alone held the others up, the waits it imposed, step spread, why.

A collective instance with a clear last arrival (later than the second-latest member by more than ``TIE_NS``)
was held up by its last member alone over [second-latest start, its start]. Per rank and step:
- ``longest``: its longest such hold-up in the step (lateness that persists over several overlapped collectives,
  e.g. DDP buckets, is counted once);
- ``exposed``: the median over the other members of the time inside its hold-ups during which they ran no
  compute (blocking collectives, e.g. tensor-parallel ones, add up here);
- the delay it caused the step = the larger of the two.
``delay_share`` is its mean delay per step over the median step time; ``holdup_share`` its part of all ranks'
delays. A rank is named the straggler when its delay share is at least ``MATERIAL_SHARE`` and its hold-up
share at least ``SHARE_MIN`` (the job waits for it, not for whoever the noise makes late), over at least 3
decided collectives — or, on a noisy machine where the hold-ups split between ranks, when its own work is
consistently longer (:func:`excess_consistency`: its compute or host time exceeds its peers' median in most
of ≥ 3 steps, by a robust effect size well above its spread) and it still causes a material delay with at
least ``SHARE_CONSISTENT`` of the hold-ups. Arrival counts (times last) are supporting evidence only. Send/recv are left out: in a
pipeline the receiver waiting for the sender is the schedule, not a straggler.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
import pandas as pd

from analyzer.cross_rank.member_parts import as_parts
from analyzer.load.job import ask_ranks
from rules.phrases import ranks_text
from analyzer.rank import intervals as iv
# the consistent-excess machinery lives in excess.py; its names stay importable from here
from analyzer.cross_rank.excess import (CONSISTENCY_COLUMNS, EXCESS_MIN, MIN_STEPS, MORE_OPS_MIN,  # noqa: F401
                                        MORE_WORK_SHARE, NOISE_FLOOR, SIGN_FRAC, SPREAD_K, Z_MIN, _more_work,
                                        _per_step_excess, _same_work_is_contention, compute_ops_per_step,
                                        consistency_table, excess_consistency, first_activity_gap,
                                        host_idle_time, median_of_others)

TIE_NS = 1_000
#: Delay a straggler must cause, as a share of the median step (tuned on the real CPU runs, docs/cross-rank.md).
MATERIAL_SHARE = 0.05
#: Part of all ranks' hold-up delay a straggler must cause.
SHARE_MIN = 0.75
#: With a consistent excess of its own work, the hold-up share a straggler needs (noise splits the hold-ups).
SHARE_CONSISTENT = 0.4
#: … and it must delay the others materially (≥ MATERIAL_SHARE of the step) in at least this share of steps.
DELAY_STEPS_FRAC = 0.5
#: A straggler named by its hold-ups alone whose own work shows no consistent excess although it could (≥ 3
#: ranks, ≥ MIN_STEPS steps) and no link difference either: its confidence is capped here ("may be").
UNEXPLAINED_CAP = 0.45
#: Attribution needs the rank's excess (compute or pre-kernel host gap) to explain this share of its delay.
EXPLAINS = 0.25


def _rank_networks(nccl_logs: list) -> dict[int, set[str]]:
    """Per global rank, what NCCL says it moves inter-node data over: selected network and NET/* transports."""
    out: dict[int, set[str]] = {}
    for log in nccl_logs:
        procs = getattr(log, "processes", None)
        if procs is None or not len(procs):
            continue
        rank_of = {(h, p): int(r) for h, p, r in zip(procs["host"], procs["pid"], procs["rank"]) if int(r) >= 0}
        net = getattr(log, "networks", None)
        if net is not None and len(net):
            sel = net[net["role"] == "selected"]
            for h, p, n in zip(sel["host"], sel["pid"], sel["network"]):
                if (h, p) in rank_of and str(n):
                    out.setdefault(rank_of[(h, p)], set()).add(f"network {n}")
        conn = getattr(log, "connections", None)
        if conn is not None and len(conn):
            nets = conn[np.char.startswith(np.asarray(conn["transport"]).astype(str), "NET/")]
            for h, p, t in zip(nets["host"], nets["pid"], nets["transport"]):
                if (h, p) in rank_of:
                    out.setdefault(rank_of[(h, p)], set()).add(str(t))
    return out


def link_difference(nccl_logs: list, rank: int) -> Optional[str]:
    """Evidence that ``rank`` talks over a different (slower) path than most ranks, from the NCCL logs; else None.

    A slow link cannot be seen in collective timings (every member of a ring ends together), but NCCL says which
    network and transports each rank set up: a rank on sockets among ranks on InfiniBand is a link straggler.
    """
    nets = _rank_networks(nccl_logs)
    mine = nets.get(rank)
    others = [v for r, v in nets.items() if r != rank]
    if not mine or not others:
        return None
    common = max(others.count(v) for v in others)
    majority = next(v for v in others if others.count(v) == common)
    if mine == majority or common * 2 <= len(others):
        return None
    return (f"NCCL on rank {rank} uses {', '.join(sorted(mine))} while most ranks ({common} of {len(others)}) use "
            f"{', '.join(sorted(majority))}")


def _stats_part(part: pd.DataFrame, arg: tuple) -> tuple:
    """Run where a member partition is: per member rank, rows in the instances ``ci`` (sorted ids, with their
    group sizes ``size``), rows in the decided ones ``counted`` (sorted ids), their wait, their group sizes."""
    ci, size, counted = arg
    iid, rank_of = part["iid"].to_numpy(), part["rank"].to_numpy()
    sel = np.flatnonzero(np.isin(iid, ci))
    c_rank = rank_of[sel]
    ranks, inv = np.unique(c_rank, return_inverse=True)
    decided = np.isin(iid[sel], counted)
    wait = np.zeros(len(ranks), np.int64)
    np.add.at(wait, inv, part["wait_ns"].to_numpy()[sel])
    gsize = np.zeros(len(ranks), np.int64)
    np.add.at(gsize, inv, size[np.searchsorted(ci, iid[sel])] if len(sel) else np.empty(0, np.int64))
    return (np.unique(rank_of), ranks, np.bincount(inv, minlength=len(ranks)),
            np.bincount(inv[decided], minlength=len(ranks)), wait, gsize)


def per_rank_stats(inst: pd.DataFrame, members: Any) -> pd.DataFrame:
    """rank, n_instances, times_last, pct_last, wait_imposed_ns, wait_suffered_ns, delay_caused_ns, mean_group.

    ``members``: the member table or its partitions (member_parts.py), asked where they are."""
    parts = as_parts(members)
    ci = inst[(inst["kind"] == "collective") & (inst["n_members"] >= 2)] if len(inst) else inst
    counted = ci[ci["last_delay_ns"] > TIE_NS] if len(ci) else ci
    ci_sorted = ci.sort_values("instance") if len(ci) else ci
    ci_ids = ci_sorted["instance"].to_numpy(np.int64) if len(ci) else np.empty(0, np.int64)
    sizes = ci_sorted["group_size"].to_numpy(np.int64) if len(ci) else np.empty(0, np.int64)
    counted_ids = np.sort(counted["instance"].to_numpy(np.int64)) if len(counted) else np.empty(0, np.int64)
    args = []
    for (a, b), (c, d) in zip(parts.in_range(ci_ids), parts.in_range(counted_ids)):
        args.append((ci_ids[a:b], sizes[a:b], counted_ids[c:d]))
    got = parts.map(_stats_part, args)
    ranks = np.unique(np.concatenate([g[0] for g in got])) if got else np.empty(0, np.int64)
    per = pd.DataFrame({"rank": np.concatenate([g[1] for g in got]) if got else np.empty(0, np.int64),
                        **{k: np.concatenate([g[i] for g in got]) if got else np.empty(0, np.int64)
                           for i, k in enumerate(("n", "decided", "wait", "gsize"), 2)}})
    per = per.groupby("rank").sum()
    out = pd.DataFrame({"rank": ranks})
    out["n_instances"] = out["rank"].map(per["n"]).fillna(0).astype(np.int64)
    out["times_last"] = out["rank"].map(counted.groupby("last_rank").size() if len(counted) else {}) \
        .fillna(0).astype(np.int64)
    # instances with a clear last arrival (ties — members queued behind one earlier transfer — tell nothing)
    out["n_decided"] = out["rank"].map(per["decided"]).fillna(0).astype(np.int64)
    out["pct_last"] = np.where(out["n_decided"] > 0, out["times_last"] / out["n_decided"].clip(lower=1), 0.0)
    out["wait_imposed_ns"] = out["rank"].map(counted.groupby("last_rank")["total_wait_ns"].sum()
                                             if len(counted) else {}).fillna(0)
    out["delay_caused_ns"] = out["rank"].map(counted.groupby("last_rank")["last_delay_ns"].sum()
                                             if len(counted) else {}).fillna(0)
    out["wait_suffered_ns"] = out["rank"].map(per["wait"]).fillna(0)
    out["mean_group"] = out["rank"].map(per["gsize"] / per["n"]).fillna(0)
    return out.sort_values(["wait_imposed_ns", "times_last", "rank"], ascending=[False, False, True],
                           kind="stable").reset_index(drop=True)


def step_spread(step_metrics: pd.DataFrame, waited_for: Optional[dict] = None) -> list[dict]:
    """Per step across ranks: min/median/max step time, (max−min)/median, slowest and fastest rank.

    ``slowest_rank`` is the rank the step waited for (``waited_for``: step → rank, from the hold-ups) when the
    cross-rank analysis found one, else the rank with the longest step; ``longest_rank`` is always the latter
    (in synchronous training every rank's step lasts about as long, so the longest is mostly noise).
    """
    sm = step_metrics
    if sm is None or not len(sm):
        return []
    waited_for = waited_for or {}
    out = []
    for step, g in sm.groupby("step", sort=True):
        t = g["step_time_ns"].to_numpy()
        med = float(np.median(t))
        longest = int(g["rank"].iloc[int(np.argmax(t))])
        waited = waited_for.get(int(step))
        if waited is not None and int(waited) not in set(g["rank"].astype(int)):
            waited = None  # the rank the step waited for must be one compared in it (not a cut trace's lost step)
        out.append({"step": int(step), "min_us": float(t.min()) / 1e3, "median_us": med / 1e3,
                    "max_us": float(t.max()) / 1e3, "spread": (float(t.max() - t.min()) / med) if med > 0 else None,
                    "slowest_rank": int(longest if waited is None else waited), "longest_rank": longest,
                    "fastest_rank": int(g["rank"].iloc[int(np.argmin(t))])})
    return out


def damaged_steps(job: Any) -> dict[int, list[int]]:
    """Per rank whose trace was cut off mid-write (analyzer/load/damage.py): the steps it does not fully have —
    the step at the cut, the ones past it (or every step, when a whole thread was lost) and the steps its file
    lost. Those (rank, step) pairs are left out of every cross-rank comparison of step times and hold-ups."""
    out = {}
    for r, d in (getattr(job, "damage", None) or {}).items():
        steps = sorted(set(int(s) for s in d.excluded) | set(int(s) for s in d.lost_steps))
        if steps:
            out[int(r)] = steps
    return out


def _without_damaged(per: pd.DataFrame, bad: dict[int, list[int]]) -> pd.DataFrame:
    """The per-(rank, step) hold-up rows without the steps a cut rank does not fully have: its collectives
    there are a remnant (those after the cut are lost), so its lateness or earliness in them means nothing."""
    if not bad or not len(per):
        return per
    pairs = pd.MultiIndex.from_tuples([(r, s) for r, steps in bad.items() for s in steps])
    keys = pd.MultiIndex.from_arrays([per["rank"].astype(np.int64), per["step"].astype(np.int64)])
    return per[~keys.isin(pairs)].reset_index(drop=True)


def _excess(df: pd.DataFrame, col: str, rank: int) -> float:
    """Median over steps of (rank's value − median of the other ranks' values); NaN when no step has both (the
    rank's steps are numbered apart from the others')."""
    if df is None or not len(df) or col not in df:
        return 0.0
    piv = df.pivot_table(index="step", columns="rank", values=col, aggfunc="sum")
    if rank not in piv.columns or piv.shape[1] < 2:
        return 0.0
    others = piv.drop(columns=[rank]).median(axis=1)
    d = (piv[rank] - others).to_numpy(float)
    d = d[~np.isnan(d)]
    return float(np.median(d)) if len(d) else float("nan")


def compute_inside(lanes: Any, windows: tuple) -> np.ndarray:
    """Run where a rank's interval sets are kept: its compute time inside each [lo, hi) window (own clock)."""
    lo, hi = windows
    return iv.clipped_lengths(lanes.compute if lanes is not None else iv.empty(), lo, hi)


def holdups(inst: pd.DataFrame) -> pd.DataFrame:
    """Instances held up by one member: instance, process_group, step, rank (the last), lo (second-latest
    start), hi (its start)."""
    if inst is None or not len(inst):
        return pd.DataFrame({"instance": [], "process_group": [], "step": [], "rank": [], "lo": [], "hi": []})
    ci = inst[(inst["kind"] == "collective") & (inst["n_members"] >= 2) & (inst["last_delay_ns"] > TIE_NS)]
    return pd.DataFrame({"instance": ci["instance"].to_numpy(), "process_group": ci["process_group"].to_numpy(),
                         "step": ci["step"].to_numpy().astype(np.int64),
                         "rank": ci["last_rank"].to_numpy().astype(np.int64),
                         "lo": (ci["start_max"] - ci["last_delay_ns"]).to_numpy().astype(np.int64),
                         "hi": ci["start_max"].to_numpy().astype(np.int64)})


def _merge_windows(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Union of the [lo, hi) windows within each key: one row per merged block (keys, lo, hi), blocks in
    (keys, lo) order. One sort of plain arrays: no sorted copy of the table, no grouped aggregation."""
    n = len(df)
    cols = [df[k].to_numpy() for k in keys]
    lo, hi = df["lo"].to_numpy(), df["hi"].to_numpy()
    if not n:
        return pd.DataFrame({**{k: c for k, c in zip(keys, cols)}, "lo": lo, "hi": hi})
    codes = [pd.factorize(c, sort=True)[0] for c in cols]
    order = np.lexsort([lo] + codes[::-1])  # by keys[0], keys[1], …, then lo (stable)
    new = np.zeros(n, bool)
    new[0] = True
    for c in codes:
        cs = c[order]
        new[1:] |= cs[1:] != cs[:-1]
    del codes
    run = pd.Series(hi[order]).groupby(np.cumsum(new)).cummax().to_numpy()  # latest end so far, per key
    lo_s = lo[order]
    start = new
    start[1:] |= lo_s[1:] > run[:-1]  # a window after everything before it in its key opens a block
    first = np.flatnonzero(start)
    last = np.append(first[1:], n) - 1
    return pd.DataFrame({**{k: c[order[first]] for k, c in zip(keys, cols)}, "lo": lo_s[first], "hi": run[last]})


def _exposed(job: Any, hold: pd.DataFrame, members: Any, offset_of: dict, keys: list[str]) -> pd.DataFrame:
    """Per (keys…, member): time inside the holder's hold-ups when that member ran no compute (its own clock)."""
    # the members of held-up instances other than the holder, asked of the member partitions where they are
    # (only these pairs travel: no copy of the member table, 10,000 ranks × thousands of collectives)
    h = hold.sort_values("instance", kind="stable").reset_index(drop=True)
    h_inst = h["instance"].to_numpy(np.int64)
    holder = h["rank"].to_numpy(np.int64)
    mp = as_parts(members)
    spans = mp.in_range(h_inst)
    got = mp.map(_hits_part, [(h_inst[a:b], holder[a:b], a) for a, b in spans]) if len(h_inst) else []
    at = np.concatenate([g[0] for g in got]) if got else np.empty(0, np.int64)
    member = np.concatenate([g[1] for g in got]) if got else np.empty(0, np.int64)
    del got
    if not len(at):
        return pd.DataFrame({**{k: [] for k in keys}, "member": [], "exposed_ns": []})
    ranks, per_rank = np.unique(member, return_counts=True)
    off = np.array([offset_of.get(int(r), 0) for r in ranks], dtype=np.int64)
    # members in partitions of about PARTITION_ROWS rows (whole members: each one's windows are its own), so the
    # window union's memory stays that of one partition however large the job
    cuts = _partition(per_rank, PARTITION_ROWS)
    by_member = np.argsort(member, kind="stable") if len(cuts) > 2 else np.arange(len(member))
    row_cut = np.append(0, np.cumsum(per_rank))
    parts = []
    for a, b in zip(cuts[:-1], cuts[1:]):
        sel = by_member[row_cut[a]:row_cut[b]]
        parts.append(_exposed_part(job, h, keys, at[sel], member[sel], ranks[a:b], off[a:b]))
    return pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]  # rows by partition


def _hits_part(part: pd.DataFrame, arg: tuple) -> tuple[np.ndarray, np.ndarray]:
    """Run where a member partition is: for its members of the held-up instances ``h_inst`` (sorted; held up
    by ``holder``) other than the holder, the hold-up's index (``first`` + position) and the member's rank."""
    h_inst, holder, first = arg
    iid, member = part["iid"].to_numpy(), part["rank"].to_numpy()
    if not len(h_inst):
        return np.empty(0, np.int64), np.empty(0, np.int64)
    at = np.minimum(np.searchsorted(h_inst, iid), len(h_inst) - 1)
    hit = np.flatnonzero(h_inst[at] == iid)
    at, member = at[hit], member[hit]
    other = member != holder[at]
    return at[other] + first, member[other]


#: The exposure of hold-ups is worked out over partitions of about this many member rows (whole members).
PARTITION_ROWS = 1 << 16


def _partition(counts: np.ndarray, size: int) -> list[int]:
    """Cut points over consecutive items with ``counts`` rows each: every part holds about ``size`` rows (at
    least one item)."""
    cuts, acc = [0], 0
    for i, c in enumerate(counts):
        if acc and acc + c > size:
            cuts.append(i)
            acc = 0
        acc += int(c)
    cuts.append(len(counts))
    return cuts


def _exposed_part(job: Any, h: pd.DataFrame, keys: list[str], at: np.ndarray, member: np.ndarray,
                  ranks: np.ndarray, off: np.ndarray) -> pd.DataFrame:
    """:func:`_exposed` for the members ``ranks`` (sorted; ``off``: their clock offsets) and their rows."""
    shift = off[np.searchsorted(ranks, member)]
    j = pd.DataFrame({**{k: h[k].to_numpy()[at] for k in keys}, "member": member,
                      "lo": h["lo"].to_numpy()[at] - shift, "hi": h["hi"].to_numpy()[at] - shift})
    del shift
    blocks = _merge_windows(j, ["member"] + keys)
    del j
    exposed = np.zeros(len(blocks), dtype=np.int64)
    bm = blocks["member"].to_numpy()
    lo, hi = blocks["lo"].to_numpy(), blocks["hi"].to_numpy()
    by_member = np.argsort(bm, kind="stable")  # one sort, then each member's rows are a slice (not ranks × rows)
    members_sorted, first = np.unique(bm[by_member], return_index=True)
    bounds = np.append(first, len(bm))
    sels = {int(r): by_member[bounds[i]:bounds[i + 1]] for i, r in enumerate(members_sorted)
            if int(r) in job.traces}
    # measured where each rank was parsed (one engine call per partition; a rank's compute set never comes here)
    inside = ask_ranks(job, compute_inside, {r: (lo[sel], hi[sel]) for r, sel in sels.items()})
    for r, sel in sels.items():  # each member's compute on its own clock (measured where the rank is)
        got = inside.get(r)
        exposed[sel] = (hi[sel] - lo[sel]) - (got if got is not None else 0)
    blocks["exposed_ns"] = exposed
    return blocks.groupby(keys + ["member"], as_index=False)["exposed_ns"].sum()


def step_delays(job: Any, inst: pd.DataFrame, members: Any, offset_of: Optional[dict] = None,
                by_group: bool = False) -> pd.DataFrame:
    """Per (rank, step) — and process group with ``by_group`` — where it held the others up: longest_ns,
    exposed_ns and delay_ns (the larger).

    Outside every step window (step −1: traces without ProfilerStep, collectives between steps) only the
    exposed part counts: a longest hold-up means nothing without a step to compare it with.
    """
    keys = ["rank", "process_group", "step"] if by_group else ["rank", "step"]
    hold = holdups(inst)
    if not len(hold):
        return pd.DataFrame({**{k: [] for k in keys}, "longest_ns": [], "exposed_ns": [], "delay_ns": []})
    longest = hold.assign(d=hold["hi"] - hold["lo"]).groupby(keys)["d"].max().rename("longest_ns")
    ex = _exposed(job, hold, members, offset_of or {}, keys)
    exposed = ex.groupby(keys)["exposed_ns"].median().rename("exposed_ns")
    out = pd.concat([longest, exposed], axis=1).fillna(0).reset_index()
    out["longest_ns"] = np.where(out["step"].to_numpy() < 0, 0, out["longest_ns"])
    out["delay_ns"] = np.maximum(out["longest_ns"], out["exposed_ns"])
    return out


def holdup_shares(per_group: pd.DataFrame) -> pd.Series:
    """Per rank: its share of all hold-up delay in the process group where it holds the others up most.

    Per group, not job-wide: a rank slowing its tensor-parallel partner owns that group's waiting even when
    the pipeline replica it slows then arrives late at every data-parallel all-reduce (each of those ranks
    then holds up its DP group; the straggler is the one that also holds up most elsewhere).
    """
    if not len(per_group):
        return pd.Series(dtype=float)
    g = per_group.groupby(["rank", "process_group"])["delay_ns"].sum()
    tot = g.groupby(level="process_group").transform("sum")
    share = (g / tot.where(tot > 0)).fillna(0.0)
    main = g.groupby(level="rank").idxmax()
    return pd.Series(share.loc[list(main)].to_numpy(), index=main.index)


def _median_step(job: Any, members: Any) -> tuple[float, int]:
    """Median step time (ns; the traced span without steps) and the number of steps."""
    sm = job.step_metrics
    steps = sorted(s for s in sm["step"].unique() if s >= 0) if sm is not None and len(sm) else []
    if steps:
        return float(sm[sm["step"] >= 0].groupby("step")["step_time_ns"].median().median()), len(steps)
    if sm is not None and len(sm):
        return float(sm["step_time_ns"].median()), 1
    spans = [s for s in as_parts(members).map(_span_part) if s is not None]
    return (float(max(e for _, e in spans) - min(b for b, _ in spans)) if spans else float("nan")), 1


def _span_part(part: pd.DataFrame, _arg: Any) -> Optional[tuple[int, int]]:
    """Run where a member partition is: its earliest start and latest end."""
    return (int(part["start"].min()), int(part["end"].max())) if len(part) else None


def analyse(job: Any, inst: pd.DataFrame, members: Any, offset_of: Optional[dict] = None) -> dict:
    """The `stragglers` section (docs/cross-rank.md) plus internal numbers for the summary. ``members``: the
    member table or its partitions (member_parts.py)."""
    members = as_parts(members)
    stats = per_rank_stats(inst, members)
    sm = job.step_metrics
    med_step, n_steps = _median_step(job, members)
    bad = damaged_steps(job)
    per = _without_damaged(step_delays(job, inst, members, offset_of), bad)
    by_rank = per.groupby("rank")["delay_ns"].sum() if len(per) else pd.Series(dtype=float)
    stats["delay_ns_per_step"] = stats["rank"].map(by_rank).fillna(0.0) / n_steps
    stats["delay_share"] = stats["delay_ns_per_step"] / med_step if med_step and med_step > 0 else 0.0
    shares = holdup_shares(_without_damaged(step_delays(job, inst, members, offset_of, by_group=True), bad))
    stats["holdup_share"] = stats["rank"].map(shares).fillna(0.0)
    top = per.loc[per.groupby("step")["delay_ns"].idxmax()] if len(per) else per
    held = top["rank"].value_counts() if len(top) else pd.Series(dtype=int)
    stats["steps_held"] = stats["rank"].map(held).fillna(0).astype(np.int64)
    cons = excess_consistency(job)
    stats = stats.merge(cons, on="rank", how="left")
    stats["consistent"] = stats["consistent"].eq(True)  # ranks without per-step metrics: not consistent
    stats["periodic_steps"] = [tuple(p) if isinstance(p, tuple) else () for p in stats["periodic_steps"]] \
        if "periodic_steps" in stats else [()] * len(stats)
    periodic = stats["periodic_steps"].map(len) > 0
    material = (stats["delay_share"] >= MATERIAL_SHARE) & (stats["n_decided"] >= 3)
    stats["by_share"] = material & (stats["holdup_share"] >= SHARE_MIN)
    # the wait it imposes must recur too: a material delay in at least half of the steps
    step_ref = sm[sm["step"] >= 0].groupby("step")["step_time_ns"].median() if sm is not None and len(sm) else None
    if len(per) and step_ref is not None and len(step_ref):
        pr = per[per["step"] >= 0]
        hit = pr[pr["delay_ns"].to_numpy() >= MATERIAL_SHARE * pr["step"].map(step_ref).fillna(np.inf).to_numpy()]
        stats["steps_delaying"] = stats["rank"].map(hit.groupby("rank")["step"].nunique()).fillna(0).astype(np.int64)
    else:
        stats["steps_delaying"] = 0
    n_ref = len(step_ref) if step_ref is not None else 0
    need = max(1, np.ceil(DELAY_STEPS_FRAC * n_ref))
    # host work on some steps only delays the others on about as many steps
    recurs = stats["steps_delaying"] >= np.where(periodic, np.minimum(need, stats["periodic_steps"].map(len)), need)
    stats["more_work"] = _more_work(inst, stats)
    stats["by_excess"] = material & (stats["consistent"] | stats["more_work"] | periodic) & \
        (stats["holdup_share"] >= SHARE_CONSISTENT) & recurs
    stats["qualifies"] = stats["by_share"] | stats["by_excess"]
    stats = stats.sort_values(["delay_ns_per_step", "wait_imposed_ns", "rank"], ascending=[False, False, True],
                              kind="stable").reset_index(drop=True)
    straggler: Optional[int] = None
    attribution, confidence = "unknown", 0.0
    evidence = "no rank alone holds the others up for a material share of the step"
    cand = stats[stats["qualifies"]]
    if len(cand) > 1 and cand["more_work"].any() and not (cand["consistent"] & ~cand["more_work"]).any():
        # a rank with more work of its own comes before ranks whose same work merely ran longer (in a composed
        # job each TP pair waits for its slower rank: the one that runs extra operators is the cause, the other
        # pair's lateness the shared host's)
        cand = pd.concat([cand[cand["more_work"]], cand[~cand["more_work"]]])
    own_host = _own_host_excess(stats, cand)
    if own_host is not None:  # the hold-ups name a rank only as a "may be" (or none): the rank idling on its own
        cand = pd.concat([stats[stats["rank"] == own_host], cand[cand["rank"] != own_host]])
    if len(cand):
        row = cand.iloc[0]
        straggler = int(row["rank"])
        delay = float(row["delay_ns_per_step"])
        comp = _excess(sm, "compute_ns", straggler)
        gap = _excess(host_idle_time(job), "host_ns", straggler)
        n_held = max(1, int((top["step"] >= 0).sum()) if len(top) else 1)
        parts = [f"the others waited for rank {straggler} alone {delay / 1e3:.1f} µs per step "
                 f"({row['delay_share']:.1%} of the median step; {row['holdup_share']:.0%} of all such waiting, "
                 f"the longest hold-up in {int(row['steps_held'])} of {n_held} steps); it arrived last in "
                 f"{int(row['times_last'])} of the {int(row['n_decided'])} collectives it joined that had a "
                 f"clear last arrival and imposed {row['wait_imposed_ns'] / 1e3:.1f} µs of waiting in all"]
        cpu = bool(getattr(job, "traces", None)) and all(
            getattr(t, "device_type", "gpu") == "cpu" for t in job.traces.values())
        kind = str(row["excess_kind"]) if bool(row["consistent"]) else None  # a consistent excess says which
        steps_p = tuple(row["periodic_steps"])
        if steps_p and kind is None:
            kind = "host"
        work = bool(row["more_work"]) and kind != "host"
        if kind == "compute" or work or (kind is None and comp >= gap and comp >= EXPLAINS * delay and comp > 0):
            attribution = "compute"
            if comp > 0 or not work:
                parts.append(f"its compute per step is {comp / 1e3:.1f} µs above the other ranks' median")
            if work:
                parts.append(f"it runs {float(row['more_ops']):.1f} more compute operators per step than its peers' "
                             f"median (+{float(row['more_ops_share']):.0%}: the ranks of one job run the same "
                             "operators, so this is work of its own, whatever the host's noise does to the "
                             "durations)")
        elif kind == "host" or (kind is None and gap > comp and gap >= EXPLAINS * delay):
            attribution = "host"
            if steps_p:
                parts.append(f"host-side work on steps {', '.join(str(x) for x in steps_p)} only: its host/idle "
                             "time (no op running, or before its first compute) exceeds its peers' by ≥ "
                             f"{PERIODIC_MIN_TXT} of those steps and not in the others — periodic work such as a "
                             "checkpoint (torch.save), evaluation or logging every few steps")
            parts.append(f"its host/idle time (before its first compute, or with no op running) exceeds the other "
                         f"ranks' by {gap / 1e3:.1f} µs per step (median; host-side work outside the traced compute: "
                         "data loading, logging, Python, sleeping, file I/O)" if cpu else
                         f"its first kernel of a step starts {gap / 1e3:.1f} µs later than the other ranks' "
                         "(data loading / host-side work before the step's GPU work)")
        else:
            parts.append(f"neither its compute (+{comp / 1e3:.1f} µs) nor its host gap (+{gap / 1e3:.1f} µs) "
                         "explains the delay")
            link = link_difference(getattr(job, "nccl_logs", []), straggler)
            if link:
                attribution = "link"
                parts.append(link)
        if pd.notna(row.get("excess_kind")):
            parts.append(_excess_text(row))
        close = cand[(cand["rank"] != straggler) & (cand["delay_ns_per_step"] >= 0.5 * delay)]
        if len(close):  # its lateness spreads (a slowed pipeline replica arrives late everywhere) or two are slow
            shown = sorted(int(x) for x in close["rank"])
            parts.append(f"{ranks_text(shown[:8])}{' …' if len(shown) > 8 else ''} also hold up their groups, by up to "
                         f"{close['delay_ns_per_step'].max() / 1e3:.1f} µs per step")
        margin = 0.5 * min(1.0, float(row["delay_share"]) / (2 * MATERIAL_SHARE)) + \
            0.5 * min(1.0, max(0.0, float(row["holdup_share"]) - SHARE_MIN) / (1 - SHARE_MIN))
        runner = min(1.0, float(close["delay_ns_per_step"].max()) / delay) if len(close) and delay > 0 else 0.0
        confidence = round(margin * min(1.0, int(row["steps_held"]) / n_held) * max(0.5, 1.0 - runner), 3)
        testable = pd.notna(row.get("excess_kind")) and int(row.get("excess_steps") or 0) >= MIN_STEPS
        if bool(row["more_work"]) and not bool(row["consistent"]):
            # more work of its own and a recurring, material delay: as sure as the delay and its share say
            confidence = max(confidence, round((0.5 * min(1.0, float(row["delay_share"]) / (2 * MATERIAL_SHARE))
                                                + 0.5 * min(1.0, float(row["holdup_share"])))
                                               * min(1.0, int(row["steps_delaying"]) / max(1, n_ref)), 3))
        elif testable and not bool(row["consistent"]) and attribution != "link":
            # the job waits for it, but nothing it does stands out of the machine's noise: on a shared machine
            # the scheduler alone can make a healthy rank the last one step after step
            confidence = min(confidence, UNEXPLAINED_CAP)
            parts.append("neither its compute nor its host time exceeds its peers' consistently, beyond the "
                         "other ranks' noise: its lateness may be the machine's (CPU contention, the scheduler)")
        if bool(row["consistent"]):
            confidence = max(confidence, excess_confidence(
                max(float(row["delay_share"]), float(row["excess_share"]) if straggler == own_host else 0.0),
                float(row["excess_z"]), int(row["excess_steps_above"]), int(row["excess_steps"])))
        elif steps_p:  # periodic host work: as sure as the delay, over the steps it happens on
            confidence = max(confidence, round(0.5 * min(1.0, float(row["delay_share"]) / (2 * MATERIAL_SHARE))
                                               + 0.5 * min(1.0, float(row["holdup_share"])), 3))
        evidence = "; ".join(parts)

    per_step = []
    ci = inst[(inst["kind"] == "collective") & (inst["last_delay_ns"] > TIE_NS)] if len(inst) else inst
    step_med = sm[sm["step"] >= 0].groupby("step")["step_time_ns"].median() if sm is not None and len(sm) else {}
    for _, r in top.sort_values("step").iterrows():
        g = ci[ci["step"] == r["step"]]
        ref = float(step_med.get(int(r["step"]), med_step)) if len(step_med) else med_step
        per_step.append({"step": int(r["step"]), "slowest_rank": int(r["rank"]), "delay_us": float(r["delay_ns"]) / 1e3,
                         "material": bool(ref > 0 and r["delay_ns"] >= MATERIAL_SHARE * ref),
                         "last_arrivals": {str(int(k)): int(v) for k, v in g["last_rank"].value_counts().items()}})
    return {
        "per_rank": [{"rank": int(r.rank), "times_last": int(r.times_last), "pct_last": float(r.pct_last),
                      "wait_imposed_us": float(r.wait_imposed_ns) / 1e3,
                      "wait_suffered_us": float(r.wait_suffered_ns) / 1e3,
                      "delay_caused_us": float(r.delay_caused_ns) / 1e3,
                      "delay_per_step_us": float(r.delay_ns_per_step) / 1e3, "delay_share": float(r.delay_share),
                      "holdup_share": float(r.holdup_share), "steps_held": int(r.steps_held),
                      "n_instances": int(r.n_instances), "n_decided": int(r.n_decided),
                      "steps_delaying": int(r.steps_delaying), "more_work": bool(r.more_work),
                      "own_host_excess": own_host is not None and int(r.rank) == own_host,
                      **_excess_fields(r)} for r in stats.itertuples()],
        "straggler": straggler, "confidence": confidence, "attribution": attribution, "evidence": evidence,
        "per_step": per_step,
        "damaged_left_out": [{"rank": r, "steps": steps} for r, steps in sorted(bad.items())],
        "thresholds": {"tie_us": TIE_NS / 1e3, "material_delay_share": MATERIAL_SHARE,
                       "holdup_share_min": SHARE_MIN, "holdup_share_consistent": SHARE_CONSISTENT,
                       "excess_min": EXCESS_MIN, "sign_frac": SIGN_FRAC, "excess_z_min": Z_MIN},
    }


PERIODIC_MIN_TXT = "10 %"


def _own_host_excess(stats: pd.DataFrame, cand: pd.DataFrame) -> Optional[int]:
    """The rank to name ahead of the hold-ups: one whose host/idle time exceeds its peers' consistently (the
    excess test, by ≥ EXCESS_MIN of the step) when the hold-ups name nobody, or only a rank with no consistent
    excess, more work or periodic host work of its own (a "may be": the shared host's scheduler). A guard for a
    shared host's noise must not outweigh a one-rank idle excess: contention makes ops run longer, it does not
    leave one rank with no op running for a tenth of every step while its peers have none. None otherwise."""
    if "excess_kind" not in stats or not len(stats):
        return None
    host = stats[(stats["excess_kind"] == "host") & stats["consistent"]]
    if not len(host):
        return None
    if len(cand):
        top = cand.iloc[0]
        explained = bool(top["consistent"]) or bool(top["more_work"]) or len(top["periodic_steps"]) > 0
        if explained or int(top["rank"]) in set(host["rank"]):
            return None
    return int(host.sort_values("excess_share", ascending=False).iloc[0]["rank"])


def excess_confidence(delay_share: float, z: float, above: int, n: int) -> float:
    """Confidence of a straggler named by its consistent excess: half from the delay margin (min(1, delay share
    / 2 × MATERIAL_SHARE)), half from the excess over the noise (min(1, z / 2 × Z_MIN)), times the share of
    steps with an excess."""
    a = min(1.0, max(0.0, delay_share) / (2 * MATERIAL_SHARE))
    b = min(1.0, max(0.0, z) / (2 * Z_MIN))
    return round((0.5 * a + 0.5 * b) * (above / n if n else 0.0), 3)


def _excess_text(row: Any) -> str:
    """'its compute exceeds its peers' median in 3 of 3 steps by 16.1 % of the step (median; spread ±6.5 %;
    the other ranks' noise ±7.6 %, so 3.7 standard errors)'."""
    what = "compute" if row["excess_kind"] == "compute" else "host/idle time"
    return (f"its {what} exceeds its peers' median in {int(row['excess_steps_above'])} of "
            f"{int(row['excess_steps'])} steps by {float(row['excess_share']):.1%} of the step (median; spread "
            f"±{float(row['excess_spread']):.1%}; the other ranks' noise ±{float(row['excess_noise']):.1%}, so "
            f"{float(row['excess_z']):.1f} standard errors)"
            + (f", but it runs the same compute operators per step as its peers ({float(row['more_ops']):+.1f}): "
               "the same work run longer, as a shared host's contention does, not more work"
               if row["excess_kind"] == "compute" and pd.notna(row.get("more_ops"))
               and float(row["more_ops"]) < MORE_OPS_MIN else ""))


def _excess_fields(r: Any) -> dict:
    """The per-rank excess columns for the section (None where the rank has no per-step metrics)."""
    more = getattr(r, "more_ops", None)
    more = None if more is None or pd.isna(more) else float(more)
    if pd.isna(getattr(r, "excess_kind", None)):
        return {"excess_kind": None, "excess_steps": None, "excess_steps_above": None, "excess_share": None,
                "excess_spread": None, "excess_noise": None, "excess_z": None, "consistent_excess": False,
                "excess_confidence": None, "more_compute_ops": more, "periodic_steps": []}
    return {"excess_kind": str(r.excess_kind), "excess_steps": int(r.excess_steps),
            "excess_steps_above": int(r.excess_steps_above), "excess_share": float(r.excess_share),
            "excess_spread": float(r.excess_spread), "excess_noise": float(r.excess_noise),
            "excess_z": float(r.excess_z), "consistent_excess": bool(r.consistent),
            "periodic_steps": [int(x) for x in (getattr(r, "periodic_steps", None) or ())],
            # what LOAD001 is sure of when this excess names the rank (the rules read it, never the formula)
            "excess_confidence": excess_confidence(float(r.delay_share), float(r.excess_z),
                                                   int(r.excess_steps_above), int(r.excess_steps)),
            "more_compute_ops": more}
