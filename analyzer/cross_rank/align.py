"""Per-rank clock offsets from matched communication: members of one instance finish (almost) together.

Convention (same as the simulator's): ``aligned_ns = local_ns + offset_ns``; the reference rank's offset is 0.
Unknowns are *clock domains*: one per host when hosts are known (ranks on a host share its clock), else one
per rank. Estimation is robust: a maximum-count spanning tree of pairwise median end-time differences gives the
start, then alternating medians (instance centre = median of aligned ends; domain offset = median of
centre − end) refine it, so a few outlying instances cannot move an offset.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import pandas as pd

#: A domain needs at least this many matched instances (with another domain) to get an offset.
MIN_MATCHED = 3
#: Densest-window width used to find the offset between two ranks from unlabelled send/recv ends.
P2P_WINDOW_NS = 10_000
#: Width of the cluster that must hold the most end differences (true pairs are tighter than this).
P2P_FINE_NS = 2_000


@dataclass
class Alignment:
    """Offsets per rank (ns to add to local times), their residuals, and whether they could be estimated."""

    status: str                      # ok | refused | single_rank
    message: str
    reference_rank: Optional[int]
    offsets: pd.DataFrame            # rank, domain, offset_ns, residual_ns, n_matched
    offset_of: dict[int, int] = field(default_factory=dict)
    #: refused because these domains shared too few instances with the others (more instances could help)
    weak_domains: list = field(default_factory=list)

    def shift(self, ranks: np.ndarray) -> np.ndarray:
        """Offset (ns) of each rank in ``ranks`` (0 for unknown ranks)."""
        ranks = np.asarray(ranks)
        if not len(ranks):
            return np.empty(0, np.int64)
        lut = self.offset_of
        lo, hi = int(ranks.min()), int(ranks.max())
        if lo >= 0 and hi < (1 << 24):  # a table indexed by rank: no Python int per row (the member table's
            table = np.zeros(hi + 1, np.int64)  # millions of rows)
            for r, off in lut.items():
                if 0 <= int(r) <= hi:
                    table[int(r)] = off
            return table[ranks]
        uniq, inv = np.unique(ranks, return_inverse=True)
        return np.array([lut.get(int(r), 0) for r in uniq], dtype=np.int64)[inv.reshape(-1)]

    def to_dict(self) -> dict:
        rows = [{"rank": int(r.rank), "offset_us": r.offset_ns / 1000.0,
                 "residual_us": None if pd.isna(r.residual_ns) else r.residual_ns / 1000.0,
                 "n_matched": int(r.n_matched), "domain": r.domain} for r in self.offsets.itertuples()]
        offs = [abs(x["offset_us"]) for x in rows]
        res = [x["residual_us"] for x in rows if x["residual_us"] is not None]
        return {"status": self.status, "message": self.message, "reference_rank": self.reference_rank,
                "offsets": rows, "max_abs_offset_us": max(offs) if offs else None,
                "max_residual_us": max(res) if res else None}


def zero_alignment(ranks: list[int], domain_of: dict[int, str], status: str, message: str) -> Alignment:
    """Every offset 0 (raw clocks), with the reason."""
    df = pd.DataFrame({"rank": ranks, "domain": [domain_of.get(r, f"rank{r}") for r in ranks],
                       "offset_ns": np.zeros(len(ranks), np.int64), "residual_ns": np.full(len(ranks), np.nan),
                       "n_matched": np.zeros(len(ranks), np.int64)})
    return Alignment(status, message, ranks[0] if ranks else None, df, {r: 0 for r in ranks})


def estimate(obs: pd.DataFrame, ranks: list[int], domain_of: dict[int, str],
             reference_rank: Optional[int] = None, what: str = "collectives") -> Alignment:
    """Offsets from observations ``obs`` (columns obs, rank, t): rows of one obs happened at one true time."""
    ranks = sorted(ranks)
    if len(ranks) <= 1:
        return zero_alignment(ranks, domain_of, "single_rank", "one rank: nothing to align")
    doms = sorted({domain_of[r] for r in ranks})
    ref_rank = reference_rank if reference_rank in ranks else ranks[0]
    if len(doms) == 1:
        al = zero_alignment(ranks, domain_of, "ok", f"all ranks on one clock ({doms[0]}): offsets are 0")
        al.reference_rank = ref_rank
        if len(obs):
            _fill_residuals(al, obs, domain_of)
        return al
    dcode = {d: i for i, d in enumerate(doms)}
    o = obs[obs["rank"].isin(ranks)]
    dom = np.array([dcode[domain_of[int(r)]] for r in o["rank"]], dtype=np.int64) if len(o) else \
        np.empty(0, np.int64)
    # keep observations touching two or more domains: within one clock they carry no offset information
    key = pd.Series(dom, index=o.index)
    spread = key.groupby(o["obs"].to_numpy()).nunique()
    useful = o["obs"].map(spread).to_numpy() >= 2 if len(o) else np.zeros(0, bool)
    o = o[useful]
    dom = dom[useful]
    ref = dcode[domain_of[ref_rank]]
    if not len(o):
        return zero_alignment(ranks, domain_of, "refused",
                              f"no {what} matched across clock domains ({len(doms)} domains); raw clocks used")
    base = int(o["t"].min())
    t = (o["t"].to_numpy() - base).astype(np.float64)
    obs_id = pd.factorize(o["obs"].to_numpy())[0]
    offsets, reached = _spanning_init(obs_id, dom, t, len(doms), ref)
    offsets = _refine(obs_id, dom, t, offsets, ref, reached)
    n_obs = pd.Series(obs_id).groupby(dom).nunique().reindex(range(len(doms)), fill_value=0).to_numpy()
    weak = [d for i, d in enumerate(doms) if i != ref and (not reached[i] or n_obs[i] < MIN_MATCHED)]
    if weak:
        shown = ", ".join(weak[:8]) + (" …" if len(weak) > 8 else "")
        al = zero_alignment(ranks, domain_of, "refused",
                            f"too few {what} matched to align {len(weak)} clock domain(s) ({shown}); need "
                            f"{MIN_MATCHED} instances shared with the others; raw clocks used")
        al.weak_domains = weak
        return al
    off_ns = np.rint(offsets).astype(np.int64)
    per_rank = {r: int(off_ns[dcode[domain_of[r]]]) for r in ranks}
    df = pd.DataFrame({"rank": ranks, "domain": [domain_of[r] for r in ranks],
                       "offset_ns": [per_rank[r] for r in ranks]})
    al = Alignment("ok", f"{len(doms)} clock domains aligned on {int(np.unique(obs_id).size)} matched {what} "
                   f"(reference rank {ref_rank})", ref_rank, df, per_rank)
    _fill_residuals(al, obs, domain_of)
    return al


def _fill_residuals(al: Alignment, obs: pd.DataFrame, domain_of: dict[int, str]) -> None:
    """Per rank: median |aligned time − instance median| and the number of instances it took part in."""
    o = obs[obs["rank"].isin(al.offsets["rank"])]
    if len(o):
        o = o[o.groupby("obs")["rank"].transform("size").to_numpy() >= 2]
    if not len(o):  # no instance seen by two ranks (one rank cut before its first complete step): no residual
        al.offsets["residual_ns"] = np.nan
        al.offsets["n_matched"] = 0
        return
    x = (o["t"].to_numpy() - int(o["t"].min()) + al.shift(o["rank"].to_numpy())).astype(np.float64)
    centre = pd.Series(x).groupby(o["obs"].to_numpy()).transform("median").to_numpy()
    dev = pd.Series(np.abs(x - centre)).groupby(o["rank"].to_numpy())
    res = dev.median()
    cnt = dev.size()
    al.offsets["residual_ns"] = al.offsets["rank"].map(res).astype(float)
    al.offsets["n_matched"] = al.offsets["rank"].map(cnt).fillna(0).astype(np.int64)


def _spanning_init(obs_id: np.ndarray, dom: np.ndarray, t: np.ndarray, n: int, ref: int):
    """Offsets along a maximum-count spanning tree of per-pair median end differences (from ``ref``)."""
    df = pd.DataFrame({"obs": obs_id, "dom": dom, "t": t})
    anchor = df.sort_values(["obs", "dom"], kind="stable").drop_duplicates("obs")
    df = df.merge(anchor.rename(columns={"dom": "a", "t": "ta"}), on="obs")
    df = df[df["dom"] != df["a"]]
    # o_dom − o_a = t_a − t_dom for rows that happened together
    diff = (df["ta"] - df["t"]).groupby([df["a"].to_numpy(), df["dom"].to_numpy()])
    edges = pd.DataFrame({"val": diff.median(), "cnt": diff.size()}).reset_index()
    adj: dict[int, list[tuple[int, int, float]]] = {}
    for a, d, v, c in zip(edges.iloc[:, 0], edges.iloc[:, 1], edges["val"], edges["cnt"]):
        adj.setdefault(int(a), []).append((int(d), int(c), float(v)))
        adj.setdefault(int(d), []).append((int(a), int(c), -float(v)))
    off = np.zeros(n)
    reached = np.zeros(n, bool)
    reached[ref] = True
    heap = [(-c, ref, d, v) for d, c, v in adj.get(ref, [])]
    heapq.heapify(heap)
    while heap:
        _, src, dst, v = heapq.heappop(heap)
        if reached[dst]:
            continue
        reached[dst] = True
        off[dst] = off[src] + v
        for d2, c2, v2 in adj.get(dst, []):
            if not reached[d2]:
                heapq.heappush(heap, (-c2, dst, d2, v2))
    return off, reached


def _refine(obs_id, dom, t, off, ref, reached, iters: int = 30) -> np.ndarray:
    """Alternating medians: centre of each observation, then each domain's median shift to the centres."""
    keep = reached[dom]
    obs_id, dom, t = obs_id[keep], dom[keep], t[keep]
    if not len(t):
        return off
    for _ in range(iters):
        x = t + off[dom]
        centre = pd.Series(x).groupby(obs_id).transform("median").to_numpy()
        new = pd.Series(centre - t).groupby(dom).median()
        upd = off.copy()
        upd[new.index.to_numpy()] = new.to_numpy()
        upd[reached] -= upd[ref]
        moved = np.abs(upd - off)
        done = bool(np.isfinite(moved).any()) and float(np.nanmax(moved)) < 0.5  # (all NaN: not done, no warning)
        off = upd
        if done:
            break
    return off


def p2p_pair_observations(p2p: pd.DataFrame, domain_of: dict[int, str],
                          window_ns: int = P2P_WINDOW_NS) -> pd.DataFrame:
    """Send/recv pairs found without peer labels (NCCL kernels name no peer).

    Between two clock domains every true pair has the same end-time difference (the offset between the
    clocks), whichever two ranks of the domains it joins, and (for one message size) the same transfer time;
    false pairings scatter in one or the other, and cannot have a member start after their common end. So for each pair of domains,
    pool send_a−recv_b and recv_a−send_b end differences over all their ranks sharing a process group and
    keep the densest window. Returns observations (obs, rank, t) for :func:`estimate`.
    """
    cols = {"obs": np.empty(0, np.int64), "rank": np.empty(0, np.int64), "t": np.empty(0, np.int64)}
    if not len(p2p):
        return pd.DataFrame(cols)
    p = p2p.assign(dom=p2p["rank"].map(domain_of))
    pooled: dict[tuple, list] = {}
    for _, g in p.groupby("process_group", sort=False):
        sends, recvs = g[g["op"] == "send"], g[g["op"] == "recv"]
        if not len(sends) or not len(recvs):
            continue
        # every send × recv of the group on different domains with the same element count
        x = sends[["rank", "dom", "start", "end", "nelems"]].merge(
            recvs[["rank", "dom", "start", "end", "nelems"]], on="nelems", suffixes=("_s", "_r"))
        # a send/recv that pairs with one on its own clock (same end, both started by then) is taken there
        same = x[(x["dom_s"] == x["dom_r"]) & (x["rank_s"] != x["rank_r"])
                 & ((x["end_s"] - x["end_r"]).abs() <= P2P_FINE_NS)
                 & (np.maximum(x["start_s"], x["start_r"]) <= np.minimum(x["end_s"], x["end_r"]) + P2P_FINE_NS)]
        taken_s = set(zip(same["rank_s"], same["end_s"]))
        taken_r = set(zip(same["rank_r"], same["end_r"]))
        x = x[x["dom_s"] != x["dom_r"]]
        if taken_s or taken_r:
            ks = pd.Series(list(zip(x["rank_s"], x["end_s"])), index=x.index).isin(taken_s)
            kr = pd.Series(list(zip(x["rank_r"], x["end_r"])), index=x.index).isin(taken_r)
            x = x[~ks & ~kr]
        # if the two ended together, both must have started by then (the later arrival starts the transfer)
        shift = x["end_s"].to_numpy() - x["end_r"].to_numpy()
        x = x[np.maximum(x["start_s"].to_numpy(), x["start_r"].to_numpy() + shift) <= x["end_s"].to_numpy() + P2P_FINE_NS]
        if not len(x):
            continue
        flip = x["dom_s"].to_numpy() > x["dom_r"].to_numpy()
        da = np.where(flip, x["dom_r"], x["dom_s"])
        db = np.where(flip, x["dom_s"], x["dom_r"])
        ra = np.where(flip, x["rank_r"], x["rank_s"])
        rb = np.where(flip, x["rank_s"], x["rank_r"])
        ta = np.where(flip, x["end_r"], x["end_s"])
        tb = np.where(flip, x["end_s"], x["end_r"])
        # transfer time if this were a true pair: common end − later start (constant for one size and link)
        tr = x["end_s"].to_numpy() - np.maximum(x["start_s"].to_numpy(),
                                                 x["start_r"].to_numpy() + x["end_s"].to_numpy() - x["end_r"].to_numpy())
        frame = pd.DataFrame({"da": da, "db": db, "ra": ra, "rb": rb, "ta": ta, "tb": tb,
                              "trbin": np.floor_divide(tr, 2 * P2P_FINE_NS)})
        for key, f in frame.groupby(["da", "db"], sort=False):
            pooled.setdefault(key, []).append(f)
    out, next_obs = [], 0
    for key, fs in pooled.items():
        f = pd.concat(fs, ignore_index=True)
        d = (f["ta"] - f["tb"]).to_numpy()
        # the offset is where one pair of ranks has its tightest, biggest cluster (true pairs end together;
        # periodic false ones scatter over many rank pairs); then every pair of the two domains near it counts
        best, centre = 0, 0.0
        for _, idx in f.groupby(["ra", "rb", "trbin"], sort=False).indices.items():
            ds = np.sort(d[idx])
            cnt = np.searchsorted(ds, ds + P2P_FINE_NS, side="right") - np.arange(len(ds))
            k = int(np.argmax(cnt))
            if cnt[k] > best:
                best, centre = int(cnt[k]), float(np.median(ds[k:k + cnt[k]]))
        if best < MIN_MATCHED:
            continue
        order = np.argsort(d, kind="stable")
        ds = d[order]
        lo, hi = np.searchsorted(ds, centre - window_ns / 2, "left"), np.searchsorted(ds, centre + window_ns / 2, "right")
        sel = order[lo:hi]
        n = len(sel)
        ids = np.arange(next_obs, next_obs + n)
        next_obs += n
        out.append(pd.DataFrame({"obs": np.r_[ids, ids], "rank": np.r_[f["ra"].to_numpy()[sel], f["rb"].to_numpy()[sel]],
                                 "t": np.r_[f["ta"].to_numpy()[sel], f["tb"].to_numpy()[sel]]}))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(cols)
