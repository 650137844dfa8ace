"""Collective placement: a rank that enters a collective at a different point of its step than its peers.

When the order of a group's collectives matches on every rank but one rank calls one of them elsewhere in its
step (a metrics all_reduce after its forward, the others before theirs), the waits run both ways: the others
wait for it at that collective, and it waits for them at the next ones (they start the work it already did).
Neither rank is a straggler and the loss is not communication; it is the placement.

Found in three steps, each on small answers:
1. **Call sites.** A collective instance's site is (process group, op, elements, its position among the
   group's collectives of its step); the same site recurs every step.
2. **Both-ways arrivals** (asked where the member partitions are, :func:`_offsets_part`). Per instance and
   member, its arrival offset d = its start − the median start of the other members, as a share of the step.
   A rank is a candidate when, at some sites, it is consistently late (d ≥ ``MATERIAL``) and at others
   consistently early (d ≤ −``MATERIAL``), in ≥ ``SIGN_FRAC`` of the steps: a straggler is late or on time,
   never early by as much as it was late.
3. **The site moved** (asked where each rank's compute is, :func:`compute_before`). At each of the
   candidate's sites, the compute it did in its step before entering, minus the median of its peers': the
   misplaced collective is where that differs by ≥ ``MATERIAL`` of the step (it entered after its forward,
   the others before theirs) — from at least ``SIGN_FRAC`` of the peers one by one, in ≥ ``SIGN_FRAC`` of the
   steps (with two peers their median is their mean: a healthy rank beside the misplaced one differs from it
   by half the shift, but not from the other healthy peer); at the other sites both have done the same work
   and only the waits differ.

Cost: the median over steps of the others' mean wait at the misplaced site (when the rank is late there) or
of its own wait there (when early), as a share of the median step.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
import pandas as pd

from analyzer.cross_rank.member_parts import as_parts
from analyzer.load.job import ask_ranks
from analyzer.rank import intervals as iv

#: Arrival offset (and compute-before-entry difference) that counts, as a share of the median step.
MATERIAL = 0.05
#: Share of the steps in which the offset must have the same sign (and at least MIN_STEPS steps).
SIGN_FRAC = 0.8
MIN_STEPS = 2
#: Peers measured for compute before entry (besides the candidate), per site.
PEERS = 8


def sites(inst: pd.DataFrame) -> pd.DataFrame:
    """Collective instances inside steps with ≥ 2 members: instance, process_group, op, nelems, step, index
    (position among the group's instances of the step, by sequence number), site (id of (group, op, nelems,
    index)), start_max, total_wait_ns, n_members, last_rank."""
    cols = ["instance", "process_group", "op", "nelems", "step", "index", "site", "start_max", "total_wait_ns",
            "n_members", "last_rank"]
    if inst is None or not len(inst):
        return pd.DataFrame({c: [] for c in cols})
    ci = inst[(inst["kind"] == "collective") & (inst["n_members"] >= 2) & (inst["step"] >= 0)]
    if not len(ci):
        return pd.DataFrame({c: [] for c in cols})
    ci = ci.sort_values(["process_group", "step", "seq", "instance"], kind="stable")
    idx = ci.groupby(["process_group", "step"], sort=False).cumcount().to_numpy()
    out = pd.DataFrame({"instance": ci["instance"].to_numpy(np.int64), "process_group": ci["process_group"].to_numpy(),
                        "op": ci["op"].astype(str).to_numpy(), "nelems": ci["nelems"].to_numpy(np.int64),
                        "step": ci["step"].to_numpy(np.int64), "index": idx.astype(np.int64)})
    out["site"] = pd.factorize(pd.MultiIndex.from_arrays([out["process_group"].astype(str), out["op"],
                                                          out["nelems"], out["index"]]))[0]
    for c in ("start_max", "total_wait_ns", "n_members", "last_rank"):
        out[c] = ci[c].to_numpy()
    return out.sort_values("instance", kind="stable").reset_index(drop=True)


def _offsets_part(part: pd.DataFrame, arg: tuple) -> tuple:
    """Run where a member partition is (whole instances): for its members of the instances ``iids`` (sorted)
    whose arrival offset from the other members' median start is at least ``thr`` ns either way: the
    instance, the rank, the offset and the member's wait. Only these rows travel back."""
    iids, thr = arg
    iid, rank, start = part["iid"].to_numpy(), part["rank"].to_numpy(), part["start"].to_numpy()
    sel = np.flatnonzero(np.isin(iid, iids))
    if not len(sel):
        return (np.empty(0, np.int64),) * 4
    iid, rank, start = iid[sel], rank[sel], start[sel].astype(np.int64)
    wait = part["wait_ns"].to_numpy()[sel]
    order = np.lexsort((start, iid))
    iid, rank, start, wait = iid[order], rank[order], start[order], wait[order]
    d = start - _median_of_others(iid, start)
    keep = np.abs(d) >= thr
    return iid[keep], rank[keep], d[keep], wait[keep]


def _median_of_others(iid: np.ndarray, start: np.ndarray) -> np.ndarray:
    """For rows sorted by (iid, start): per row, the median start of the other rows of its instance (its own
    start where it is alone). Vectorised: dropping the row at sorted position j shifts the later ones down."""
    n_rows = len(iid)
    first = np.flatnonzero(np.r_[True, iid[1:] != iid[:-1]])
    size = np.diff(np.append(first, n_rows))
    a = np.repeat(first, size)            # the instance's first row
    n = np.repeat(size, size)
    j = np.arange(n_rows) - a             # position within the instance
    m = n - 1                             # number of others

    def other(k: np.ndarray) -> np.ndarray:
        return start[np.clip(a + k + (k >= j), 0, n_rows - 1)].astype(float)

    hi_k = m // 2
    lo_k = np.where(m % 2 == 1, hi_k, hi_k - 1)
    med = (other(np.maximum(lo_k, 0)) + other(hi_k)) / 2
    return np.where(m >= 1, med, start).astype(np.int64)


def compute_before(lanes: Any, windows: tuple) -> np.ndarray:
    """Run where a rank's interval sets are kept: its compute time inside each [lo, hi) window (own clock)."""
    lo, hi = windows
    return iv.clipped_lengths(lanes.compute if lanes is not None else iv.empty(), lo, hi)


def _step_starts(job: Any) -> dict:
    """(rank, step) → the step's start on the rank's own clock."""
    sm = job.step_metrics
    if sm is None or not len(sm) or "start" not in sm:
        return {}
    sm = sm[sm["step"] >= 0]
    return {(int(r), int(s)): int(t) for r, s, t in zip(sm["rank"], sm["step"], sm["start"])}


def _members_at(parts: Any, iids: np.ndarray, ranks: set) -> pd.DataFrame:
    """iid, rank, start (aligned) of the given ranks' members of the given instances."""
    got = parts.map(_starts_part, [(iids[a:b], np.array(sorted(ranks), np.int64)) for a, b in parts.in_range(iids)])
    cols = ("iid", "rank", "start")
    return pd.DataFrame({c: np.concatenate([g[i] for g in got]) if got else np.empty(0, np.int64)
                         for i, c in enumerate(cols)})


def _starts_part(part: pd.DataFrame, arg: tuple) -> tuple:
    """Run where a member partition is: iid, rank, start of the members of ``iids`` held by ``ranks``."""
    iids, ranks = arg
    iid, rank = part["iid"].to_numpy(), part["rank"].to_numpy()
    sel = np.flatnonzero(np.isin(iid, iids) & np.isin(rank, ranks))
    return iid[sel], rank[sel], part["start"].to_numpy()[sel]


def analyse(job: Any, inst: pd.DataFrame, members: Any, offset_of: Optional[dict] = None) -> dict:
    """The `placement` section: ``misplaced`` (list, worst first; see the module docstring) and thresholds."""
    out: dict[str, Any] = {"misplaced": [], "thresholds": {"material_share": MATERIAL, "sign_frac": SIGN_FRAC}}
    st = sites(inst)
    sm = job.step_metrics
    if not len(st) or sm is None or not len(sm):
        return out
    ref = sm[sm["step"] >= 0].groupby("step")["step_time_ns"].median()
    if not len(ref):
        return out
    med_step = float(ref.median())
    parts = as_parts(members)
    iids = st["instance"].to_numpy(np.int64)
    got = parts.map(_offsets_part, [(iids[a:b], int(MATERIAL * med_step)) for a, b in parts.in_range(iids)])
    big = pd.DataFrame({c: np.concatenate([g[i] for g in got]) if got else np.empty(0, np.int64)
                        for i, c in enumerate(("instance", "rank", "d", "wait"))})
    if not len(big):
        return out
    big = big.merge(st[["instance", "site", "step"]], on="instance")
    n_site_steps = st.groupby("site")["step"].nunique()
    big["sign"] = np.sign(big["d"])
    per = big.groupby(["rank", "site", "sign"]).agg(steps=("step", "nunique"), d=("d", "median"),
                                                    wait=("wait", "sum")).reset_index()
    need = np.maximum(MIN_STEPS, np.ceil(SIGN_FRAC * per["site"].map(n_site_steps).to_numpy()))
    per = per[per["steps"].to_numpy() >= need]
    found = []
    for r, g in per.groupby("rank"):
        if not ((g["sign"] > 0).any() and (g["sign"] < 0).any()):
            continue  # late everywhere it is off (a straggler) or early everywhere: not a placement
        hit = _moved_site(job, st, parts, int(r), g["site"].unique(), offset_of or {}, ref)
        if hit is None:
            continue
        site, diff, mine, peers, steps, consistent = hit
        s = st[st["site"] == site]
        row = s.iloc[0]
        late = bool(g.loc[g["site"] == site, "sign"].max() > 0) if (g["site"] == site).any() else diff > 0
        # the wait it made: the others' mean wait there when it comes late, its own wait there when early
        at = big[(big["rank"] == r) & (big["site"] == site)]
        if late:
            w = (s["total_wait_ns"] / (s["n_members"] - 1).clip(lower=1)).groupby(s["step"]).sum()
        else:
            w = at.groupby("step")["wait"].sum()
        lost = float(w.median()) if len(w) else 0.0
        back = big[(big["rank"] == r) & (big["site"] != site) & (big["sign"] != (1 if late else -1))]
        found.append({"rank": int(r), "process_group": str(row["process_group"]), "op": str(row["op"]),
                      "nelems": int(row["nelems"]), "index_in_step": int(row["index"]),
                      "n_in_step": int(st[(st["process_group"] == row["process_group"]) &
                                          (st["step"] == row["step"])].shape[0]),
                      "late": late, "steps": int(steps), "steps_consistent": int(consistent),
                      "compute_before_us": mine / 1e3, "peers_compute_before_us": peers / 1e3,
                      "compute_before_diff_share": diff / med_step,
                      "wait_per_step_us": lost / 1e3, "cost_share": lost / med_step,
                      "wait_back_per_step_us": (float(back.groupby("step")["wait"].max().median())
                                                if len(back) else 0.0) / 1e3,
                      "other_sites": sorted(int(x) for x in st.loc[st["site"].isin(
                          g.loc[g["site"] != site, "site"]), "index"].unique())})
    # two ranks that disagree at one site are one placement seen from both sides (with two ranks nothing else
    # tells which moved): the late arrival makes the others wait there (the cause), the early one waits (the effect)
    late_at = {(x["process_group"], x["op"], x["nelems"], x["index_in_step"]) for x in found if x["late"]}
    found = [x for x in found if x["late"] or (x["process_group"], x["op"], x["nelems"], x["index_in_step"])
             not in late_at]
    found.sort(key=lambda x: (-x["cost_share"], x["rank"]))
    out["misplaced"] = found
    return out


def _moved_site(job: Any, st: pd.DataFrame, parts: Any, rank: int, cand_sites: np.ndarray, offset_of: dict,
                ref: pd.Series) -> Optional[tuple]:
    """Of the rank's off sites, the one where its compute before entry differs most from its peers' (median
    over steps), when that is ≥ MATERIAL of the step in ≥ SIGN_FRAC of the steps: (site, median difference,
    its median compute before, the peers' median, steps, steps with the difference of that sign)."""
    s = st[st["site"].isin(cand_sites)]
    if not len(s):
        return None
    starts = _step_starts(job)
    peers_all: set = set()
    # the peers: the other members of those instances (a few of them)
    iids = s["instance"].to_numpy(np.int64)
    everyone = _members_at(parts, iids, set(job.traces))
    ranks_there = sorted(set(everyone["rank"].astype(int)) - {rank})
    peers_all = set(ranks_there[:PEERS])
    mem = everyone[everyone["rank"].isin(peers_all | {rank})].copy()
    mem = mem.merge(s[["instance", "site", "step"]], left_on="iid", right_on="instance")
    lo = np.array([starts.get((int(r), int(t)), -1) for r, t in zip(mem["rank"], mem["step"])], dtype=np.int64)
    shift = np.array([offset_of.get(int(r), 0) for r in mem["rank"]], dtype=np.int64)
    hi = mem["start"].to_numpy(np.int64) - shift  # the rank's own clock
    ok = (lo >= 0) & (hi >= lo)
    mem, lo, hi = mem[ok].reset_index(drop=True), lo[ok], hi[ok]
    if not len(mem):
        return None
    by = {int(r): np.flatnonzero(mem["rank"].to_numpy() == r) for r in mem["rank"].unique()}
    got = ask_ranks(job, compute_before, {r: (lo[i], hi[i]) for r, i in by.items() if r in job.traces})
    cb = np.zeros(len(mem), np.int64)
    for r, i in by.items():
        v = got.get(r)
        if v is not None:
            cb[i] = v
    mem["cb"] = cb
    best = None
    for site, g in mem.groupby("site"):
        mine = g[g["rank"] == rank].groupby("step")["cb"].first()
        each = g[g["rank"] != rank].pivot_table(index="step", columns="rank", values="cb", aggfunc="first")
        peers = each.median(axis=1)
        both = mine.index.intersection(peers.index)
        if len(both) < MIN_STEPS:
            continue
        diff = (mine.loc[both] - peers.loc[both]).to_numpy(float)
        refs = ref.reindex(both).to_numpy(float)
        med = float(np.median(diff))
        sign = 1 if med > 0 else -1
        # the rank that moved the call differs from (nearly) every peer, not only from their median: with two
        # peers the median is their mean, so a healthy rank beside the misplaced one would read half its shift
        vs = sign * (mine.loc[both].to_numpy(float)[:, None] - each.loc[both].to_numpy(float))
        margin = np.nanquantile(vs, 1 - SIGN_FRAC, axis=1, method="lower")
        consistent = int((margin >= MATERIAL * refs).sum())
        if abs(med) < MATERIAL * float(np.median(refs)) or consistent < max(MIN_STEPS, np.ceil(SIGN_FRAC * len(both))):
            continue
        if best is None or abs(med) > abs(best[1]):
            best = (int(site), med, float(mine.loc[both].median()), float(peers.loc[both].median()), len(both),
                    consistent)
    return best
