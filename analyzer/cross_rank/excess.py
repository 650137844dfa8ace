"""Consistent excess: whether a rank's own work per step (compute, or the host time before its first compute)
exceeds its peers' consistently, beyond the machine's noise — the noise-robust evidence a straggler is named by
(docs/cross-rank.md, "Consistent excess"); used by stragglers.py (collectives) and pipeline_stragglers.py (stages).

Split out of stragglers.py (which re-exports these names): the per-step excess over the peers' median as a share of
the step, its effect size, spread, the peers' noise and z (:func:`consistency_table`), and on CPU-only jobs the
work test — the ranks of one job run the same operators, so a compute excess without more of them is the host's
contention (:func:`_same_work_is_contention`), and more of them is the rank's own work (:func:`_more_work`).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from analyzer.rank.profile import profile_of
from analyzer.rank.summary import first_activity_gaps

#: Consistent excess: at least this share of the steps (and ≥ MIN_STEPS steps) show an excess above zero …
SIGN_FRAC = 0.8
MIN_STEPS = 3
#: … its median per-step excess is at least this share of the step, exceeds its own spread (1.4826 × MAD) and
#: stands ``Z_MIN`` standard errors above the other ranks' noise (never taken below ``NOISE_FLOOR``); on CPU-only
#: jobs a compute excess also needs more work (``MORE_OPS_MIN``).
EXCESS_MIN = 0.05
Z_MIN = 3.0
NOISE_FLOOR = 0.002
SPREAD_K = 1.0


def first_activity_gap(job: Any) -> pd.DataFrame:
    """Per rank and step: time from the step's start to its first device activity (host-side/data-loading gap),
    as each rank's summary computed it where the rank was parsed (analyzer/rank/summary.py).

    Only the steps the metrics keep (a cut-off trace's damaged steps are left out).
    """
    rows = []
    sm = job.step_metrics
    kept = set(zip(sm["rank"], sm["step"])) if sm is not None and len(sm) else set()
    for r, t in job.traces.items():
        g = t.first_gaps if hasattr(t, "first_gaps") else first_activity_gaps(t)  # a full trace: computed here
        if g is None or not len(g):
            continue
        df = g.assign(rank=r)[["rank", "step", "gap_ns"]]
        rows.append(df[[(r, int(x)) in kept for x in df["step"]]])
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame({"rank": [], "step": [], "gap_ns": []})


def host_idle_time(job: Any) -> pd.DataFrame:
    """Per rank and step: its host/idle time, the part of the step decomposition (compute, host/idle, wait,
    transfer) that is neither its traced work nor a collective — ``host_ns``, the larger of the host gap before
    its first compute (:func:`first_activity_gap`: data loading ops and Python before the step's work) and the
    step's idle time (no op at all: a sleep, a checkpoint's file writes, Python between ops, wherever in the step).

    Why both: a data loader's ops fill the leading gap but are not idle; a sleep or a torch.save after the
    optimizer is idle but not before the first compute. A shared host's contention makes ops run longer; it
    does not make one rank idle for tens of ms while its peers are not (the real CPU runs: a rank sleeping 40 ms
    a step idles 21-25 % of it, its peers 0.5-2.6 %), so this excess is the rank's own whatever the noise."""
    gaps = first_activity_gap(job)
    sm = job.step_metrics
    pipeline = any(getattr(t, "blocks", None) is not None for t in (getattr(job, "traces", None) or {}).values())
    if pipeline or sm is None or not len(sm) or "idle_ns" not in sm:  # a stage's idle time is its bubble
        return gaps.rename(columns={"gap_ns": "host_ns"})
    idle = sm[["rank", "step", "idle_ns"]]
    both = idle.merge(gaps, on=["rank", "step"], how="outer")
    both["host_ns"] = np.fmax(both["gap_ns"].to_numpy(float), both["idle_ns"].to_numpy(float))
    return both[["rank", "step", "host_ns"]].dropna()


def _per_step_excess(df: pd.DataFrame, col: str, step_ref: pd.Series) -> pd.DataFrame:
    """steps × ranks: each rank's value minus the median of the other ranks' in that step, over the step's
    median step time (``step_ref``: step → ns). Steps some rank lacks are left out (compare only what all have)."""
    if df is None or not len(df) or col not in df:
        return pd.DataFrame()
    piv = df[df["step"] >= 0].pivot_table(index="step", columns="rank", values=col, aggfunc="sum").dropna()
    if piv.shape[1] < 2 or not len(piv):
        return pd.DataFrame()
    vals = piv.to_numpy(float)
    others = median_of_others(vals)
    ref = step_ref.reindex(piv.index).to_numpy(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = (vals - others) / ref[:, None]
    return pd.DataFrame(out, index=piv.index, columns=piv.columns).dropna()


def excess_consistency(job: Any) -> pd.DataFrame:
    """Per rank: how consistently its own work (compute per step, or the host gap before its first compute)
    exceeds its peers' median — rank, excess_kind, excess_steps, excess_steps_above, excess_share (the median
    over steps of the excess as a share of the step: a robust effect size), excess_spread (1.4826 × the
    median absolute deviation of its own shares over the steps), excess_noise (the same scale over the other
    ranks' shares: the noise a healthy rank shows on this machine), excess_z (effect / (noise / √steps)) and
    consistent: ≥ ``MIN_STEPS`` steps, ≥ ``SIGN_FRAC`` of them above zero (a sign test), effect ≥
    ``EXCESS_MIN``, ≥ ``SPREAD_K`` × its own spread, and ≥ ``Z_MIN`` standard errors of the peers' noise.

    Why: on a contended machine the arrival order and the hold-up share are noise-driven (two ranks split a
    20 % straggler's hold-ups 0.57 / 0.43), while the straggler's own extra work shows in every step. The
    peers' noise is the floor: CPU compute swings ±3-15 % from rank to rank on a shared machine (a healthy
    rank can exceed its peers by 5 % in 3 of 3 steps), the host gap before the first compute by < 0.1 %. Of
    compute and host, the kind that passes (else the one with the larger z) is kept.
    """
    sm = job.step_metrics
    if sm is None or not len(sm) or "step_time_ns" not in sm:
        return pd.DataFrame({c: [] for c in CONSISTENCY_COLUMNS})
    ref = sm[sm["step"] >= 0].groupby("step")["step_time_ns"].median()
    out = consistency_table((("compute", sm, "compute_ns"), ("host", host_idle_time(job), "host_ns")), ref)
    return _same_work_is_contention(job, out)


#: On CPU-only traces a compute excess is the rank's own only when it runs at least this many more compute
#: operators per step than its peers' median (more work); the same operators running longer are core contention.
MORE_OPS_MIN = 0.5


def compute_ops_per_step(job: Any) -> dict[int, float]:
    """Per rank: its outermost compute operators (kernels on a GPU trace) per step, from the profile rows each
    rank's summary computed where it was parsed (analyzer/rank/profile.py); ranks without them are left out, and
    so are ranks whose trace was cut off mid-write (analyzer/load/damage.py): their counts miss the operators of
    the threads and steps the cut lost, and as the peers' median they would make every whole rank look busier."""
    out = {}
    damaged = set(getattr(job, "damage", None) or {})
    for r, t in (getattr(job, "traces", None) or {}).items():
        if r in damaged:
            continue
        try:
            got = profile_of(t) if hasattr(t, "profile") or hasattr(t, "activity") else None
        except (AttributeError, KeyError, TypeError):  # a hand-built stand-in without names or steps
            got = None
        if got is None:
            continue
        rows = got[0]
        out[int(r)] = float(rows.loc[rows["kind"].astype(str) == "compute", "per_step_n"].sum())
    return out


def median_of_others(vals: np.ndarray) -> np.ndarray:
    """Per row and column: the median of the row's other values (rows without NaN, two columns or more).

    From each row sorted once: leaving out the value at sorted position p shifts the positions from p on by one,
    so the others' middle value(s) are read from the sorted row at the middle position or the one after. Exactly
    what ``np.median`` of the row without that column gives (the mean of two middles as ``np.median`` takes it),
    in steps × ranks memory rather than the steps × ranks × ranks of masking each column in turn."""
    n_rows, n = vals.shape
    order = np.argsort(vals, axis=1, kind="stable")
    s = np.take_along_axis(vals, order, axis=1)
    pos = np.empty_like(order)
    np.put_along_axis(pos, order, np.arange(n)[None, :].repeat(n_rows, axis=0), axis=1)
    m = n - 1  # values left

    def left(k: int) -> np.ndarray:  # the k-th smallest of the others, for every column's removal
        return np.where(k < pos, s[:, [k]], s[:, [min(k + 1, n - 1)]])
    if m % 2:
        return left((m - 1) // 2)
    return np.mean(np.stack([left(m // 2 - 1), left(m // 2)]), axis=0)


def _more_ops(ops: dict[int, float]) -> dict[int, tuple[float, float]]:
    """Per rank: (its compute operators per step minus the median of the other ranks', that median)."""
    ranks = list(ops)
    v = np.array([ops[r] for r in ranks], dtype=np.float64)
    med = median_of_others(v[None, :])[0]
    return {r: (float(v[i] - med[i]), float(med[i])) for i, r in enumerate(ranks)}


#: More work: at least this share more compute operators per step than the peers' median (and MORE_OPS_MIN).
MORE_WORK_SHARE = 0.02


def _more_work(inst: pd.DataFrame, stats: pd.DataFrame) -> pd.Series:
    """Per stats row: the rank runs more compute operators per step than its peers (``more_ops`` ≥
    ``MORE_OPS_MIN`` and ≥ ``MORE_WORK_SHARE`` of the peers' count, ``more_ops_share`` set), on a CPU-only job
    without send/recv. Its own extra work then stands as the cause of the delay it imposes even where the host's
    noise hides it in the compute times (a 15 % FSDP2 compute straggler: +234 operators per step over its peers'
    106, its compute time within their ±50 ms swings). Not for pipelines, whose stages run different operators
    by design, nor GPU traces (see :func:`_same_work_is_contention`)."""
    no = pd.Series(False, index=stats.index)
    stats["more_ops_share"] = np.nan
    if "more_ops" not in stats or stats["more_ops"].isna().all():
        return no
    if inst is not None and len(inst) and (inst["kind"] == "p2p").any():
        return no
    base = stats["more_ops_base"]  # the peers' median count, from the same pass as more_ops
    stats["more_ops_share"] = stats["more_ops"] / base.where(base > 0)
    return (stats["more_ops"] >= MORE_OPS_MIN) & (stats["more_ops_share"] >= MORE_WORK_SHARE)


def _one_host(traces: dict) -> bool:
    """Do all ranks' traces name the same host (or none names one)? Ranks sharing a host share its cores."""
    hosts = {str(h) for t in traces.values() if (h := (getattr(t, "meta", None) or {}).get("host"))}
    return len(hosts) <= 1


def _same_work_is_contention(job: Any, cons: pd.DataFrame) -> pd.DataFrame:
    """On a CPU-only job, a compute excess without more work is not consistent: ``more_ops`` per rank (its compute
    operators per step minus its peers' median, which is ``more_ops_base``) and ``consistent`` False for a
    compute excess with ``more_ops < MORE_OPS_MIN``.

    Why: ranks of one data-, tensor- or FSDP-parallel job run the same operators every step (the real CPU runs:
    91.0 per step on every rank of every clean DDP run), so a rank doing more work (an extra forward, a metric,
    logging) runs more of them (+30 to +300 per step for the injected 10-40 % compute stragglers), while the rank
    a shared host's scheduler slows runs the same ones longer (`real-cpu-perf-2/ddp4-clean`'s rank 2: +14 % compute
    in 5 of 5 steps, 91.0 operators like its peers). A GPU running the same kernels slower is a real straggler (a
    throttled or faulty device): GPU traces are not touched; nor are ranks on different hosts, where a node slower
    at the same work (a slower CPU, a noisy neighbour) is the job's straggler, not its own host's scheduling.
    """
    traces = getattr(job, "traces", None) or {}
    if not len(cons) or not traces or not all(getattr(t, "device_type", "gpu") == "cpu" for t in traces.values()):
        return cons
    if not _one_host(traces):
        return cons
    ops = compute_ops_per_step(job)
    if len(ops) < 2:
        return cons
    more = _more_ops(ops)
    cons = cons.copy()
    cons["more_ops"] = cons["rank"].map({r: d for r, (d, _) in more.items()})
    cons["more_ops_base"] = cons["rank"].map({r: m for r, (_, m) in more.items()})
    same = (cons["excess_kind"] == "compute") & cons["more_ops"].notna() & (cons["more_ops"] < MORE_OPS_MIN)
    cons.loc[same, "consistent"] = False
    return cons


CONSISTENCY_COLUMNS = ["rank", "excess_kind", "excess_steps", "excess_steps_above", "excess_share",
                       "excess_spread", "excess_noise", "excess_z", "consistent", "periodic_steps"]

#: Periodic host work (a checkpoint every k-th step): a host/idle excess of at least this share of the step …
PERIODIC_MIN = 0.10
#: … standing this many of the peers' noise scales above it, in ≥ 2 steps but not in the steps between.
PERIODIC_Z = 5.0


def consistency_table(sources: tuple, ref: pd.Series) -> pd.DataFrame:
    """:func:`excess_consistency` for any per-(rank, step) measures: ``sources`` = ((kind, frame, column), …),
    each frame with rank, step and the column (ns); ``ref``: step → the step's median step time (ns). One row
    per rank, the kind that passes (else the one with the larger z)."""
    cols = CONSISTENCY_COLUMNS
    rows = []
    for kind, df, col in sources:
        ex = _per_step_excess(df, col, ref)
        if not len(ex) or ex.shape[1] < 2:
            continue
        a = ex.to_numpy(float)
        n, k = a.shape
        eff = np.median(a, axis=0)
        spread = 1.4826 * np.median(np.abs(a - eff), axis=0)
        noise = np.empty(k)
        for j in range(k):  # k ranks, a few steps each: small
            o = np.delete(a, j, axis=1).ravel()
            # two ranks: the other's excess is this one's deficit, so the noise is the difference's own spread
            noise[j] = spread[j] if k == 2 else 1.4826 * np.median(np.abs(o - np.median(o)))
        noise = np.maximum(noise, NOISE_FLOOR)
        z = eff / (noise / np.sqrt(n))
        above = (a > 0).sum(axis=0)
        ok = (n >= MIN_STEPS) & (above >= np.ceil(SIGN_FRAC * n)) & (eff >= EXCESS_MIN) & \
            (eff >= SPREAD_K * spread) & (z >= Z_MIN)
        # host work on some steps only: the steps whose excess is material and far above the peers' noise
        big = (a >= PERIODIC_MIN) & (a >= PERIODIC_Z * noise[None, :])
        steps = ex.index.to_numpy(np.int64)
        periodic = [tuple(int(x) for x in steps[big[:, j]])
                    if kind == "host" and not ok[j] and n >= MIN_STEPS and 2 <= big[:, j].sum() < n else ()
                    for j in range(k)]
        # its part of the rank's step decomposition: the periodic excess averaged over all steps
        per_mean = np.where(big, a, 0.0).sum(axis=0) / n
        rows.append(pd.DataFrame({"rank": ex.columns.to_numpy(np.int64), "excess_kind": kind, "excess_steps": n,
                                  "excess_steps_above": above.astype(np.int64), "excess_share": eff,
                                  "excess_spread": spread, "excess_noise": noise, "excess_z": z,
                                  "consistent": ok, "periodic_steps": periodic, "_per_mean": per_mean}))
    if not rows:
        return pd.DataFrame({c: [] for c in cols})
    both = pd.concat(rows, ignore_index=True)
    both["_periodic"] = both["periodic_steps"].map(len) > 0
    # host work on some steps that outweighs a consistent compute excess (averaged over the steps) names the rank's
    # excess: a checkpoint's state_dict/detach ops add compute operators, its file writes the larger time
    comp = both[both["excess_kind"] == "compute"].set_index("rank")["excess_share"]
    mine = both["_periodic"] & (both["_per_mean"] >= both["rank"].map(comp).fillna(-np.inf))
    both.loc[mine, "_periodic"] = True
    drop = both["rank"].isin(both.loc[mine, "rank"]) & (both["excess_kind"] == "compute")
    both = both[~drop]
    # of two consistent kinds, the larger part of the rank's step decomposition names it
    both = both.sort_values(["rank", "consistent", "_periodic", "excess_share"],
                            ascending=[True, False, False, False], kind="stable")
    return both.drop_duplicates("rank")[cols].reset_index(drop=True)
