"""Communication share, overlap and exposed communication per process-group role (DP, FSDP, TP, EP, PP).

For each rank, the communication of the groups of one role is the union of that rank's collective / send-recv
intervals in those groups (back on the rank's own clock); it is clipped to the rank's step windows and intersected
with the rank's compute exactly as the job-wide metrics are (docs/metrics.md). Sums over ranks and steps give the
role's shares (time-weighted). A group that spans the whole world is judged by the traffic it carries (all-reduce →
DP, all-to-all → EP, …), not as "world".
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
import pandas as pd

from analyzer.cross_rank.member_parts import as_parts
from analyzer.cross_rank.topology import infer_role
from analyzer.load.job import ask_ranks
from analyzer.rank import intervals as iv
from analyzer.rank.metrics import step_windows

ROLE_ORDER = ("dp", "fsdp", "tp", "ep", "pp", "unknown")


def role_times(lanes: Any, arg: tuple) -> list[tuple[str, float, float, float, float, float]]:
    """Run where a rank's interval sets are kept: per role, the rank's communication time (the union of the
    role's intervals ``(role, start, end[, wait_end, unsplit])`` on the rank's own clock) inside its step windows
    ``lo``/``hi``, the part of its transfer (the time outside the waits [start, wait_end) and outside the unsplit
    rest [wait_end, end) of the members flagged ``unsplit``) overlapped by the rank's compute, the wait, the
    unsplit time and the part of it no compute overlaps."""
    lo, hi, roles = arg
    compute = lanes.compute if lanes is not None else iv.empty()
    out = []
    for role, s, e, *w in roles:
        comm = iv.union(s, e)
        # the waits for the last member (``w``: each member's wait end) are no transfer (analyzer/report/waits.py)
        wait = iv.intersect(iv.union(s, w[0]), comm) if w else iv.empty()
        unsplit = iv.difference(iv.intersect(iv.union(w[0][w[1]], e[w[1]]), comm), wait) \
            if w and len(w) > 1 and w[1].any() else iv.empty()
        transfer = iv.difference(iv.difference(comm, wait), unsplit)
        ov = iv.intersect(transfer, compute)
        out.append((role, float(iv.clipped_lengths(comm, lo, hi).sum()), float(iv.clipped_lengths(ov, lo, hi).sum()),
                    float(iv.clipped_lengths(wait, lo, hi).sum()), float(iv.clipped_lengths(unsplit, lo, hi).sum()),
                    float(iv.clipped_lengths(iv.difference(unsplit, compute), lo, hi).sum())))
    return out


def _windows(job: Any, rank: int, trace: Any) -> tuple:
    """The rank's step windows as the job's step metrics keep them (without the steps a cut damaged or that
    other ranks lack: analyzer/report/coverage.py), else the trace's own."""
    sm = getattr(job, "step_metrics", None)
    if sm is not None and len(sm) and "start" in sm:
        rows = sm[sm["rank"] == rank]
        if len(rows):
            return (rows["step"].to_numpy(), rows["start"].to_numpy(np.int64), rows["end"].to_numpy(np.int64),
                    bool(rows["whole_trace"].any()) if "whole_trace" in rows else False)
    return step_windows(trace)


def _role_columns(part: pd.DataFrame, unknown: Any) -> pd.DataFrame:
    """Run where a member partition is: the columns role_metrics reads, and ``unsplit``: the member is in one of
    the instances ``unknown`` (sorted ids, or None) whose waits are known only in part (waits.py)."""
    out = part[[c for c in ("process_group", "rank", "start", "end", "kind", "wait_ns") if c in part]]
    if unknown is not None and "iid" in part:
        out = out.assign(unsplit=np.isin(part["iid"].to_numpy(np.int64), unknown))
    return out


def role_metrics(job: Any, members: Any, offset_of: dict, role_of: dict[str, str],
                 n_steps: int, waits: bool = True, unknown_iids: Optional[np.ndarray] = None) -> list[dict]:
    """One row per role: groups, comm/wait/transfer/unsplit/overlap/exposed time and shares, collectives per step
    and mean bytes. ``waits``: split the members' waits off their transfer (False when the clocks are not
    aligned); ``unknown_iids``: the instances whose waits are known only in part (their members' time after the
    last present arrival is unsplit, neither wait nor transfer: analyzer/report/waits.py).

    The overlap with compute is measured where each rank was parsed (Job.on_ranks): only the rank's member
    intervals go there and two numbers per role come back, never a rank's compute set."""
    if members is None or not len(members):
        return []
    # the five columns this needs, fetched from the member partitions (not the member table)
    parts = as_parts(members)
    unknown = np.sort(np.asarray(unknown_iids, np.int64)) if unknown_iids is not None else np.empty(0, np.int64)
    members = parts.frame(_role_columns, parts.slices(unknown))
    unsplit = members["unsplit"].to_numpy(bool) if waits and "unsplit" in members else None
    role = members["process_group"].map(role_of).fillna("unknown").to_numpy(dtype=object)
    rank_of = members["rank"].to_numpy()
    start, end = members["start"].to_numpy(np.int64), members["end"].to_numpy(np.int64)
    wait_end = start + members["wait_ns"].to_numpy(np.int64) if waits and "wait_ns" in members else None
    coll = members["kind"].to_numpy() == "collective" if "kind" in members else np.ones(len(members), bool)
    by_rank = np.argsort(rank_of, kind="stable")  # each rank's rows keep their order
    ranks, first = np.unique(rank_of[by_rank], return_index=True)
    bounds = np.append(first, len(by_rank))
    acc: dict[str, dict] = {}
    args, facts = {}, {}
    for i, rank in enumerate(ranks):
        t = job.traces.get(int(rank))
        if t is None:
            continue
        steps, lo, hi, _ = _windows(job, int(rank), t)
        if not len(steps):
            continue
        rows = by_rank[bounds[i]:bounds[i + 1]]
        shift = int(offset_of.get(int(rank), 0))
        roles, calls = [], {}
        for name in pd.unique(role[rows]):  # in order of first appearance, as groupby(sort=False) gave them
            sel = rows[role[rows] == name]
            roles.append((str(name), start[sel] - shift, end[sel] - shift)
                         + (() if wait_end is None else (wait_end[sel] - shift,))
                         + (() if wait_end is None or unsplit is None else (unsplit[sel],)))
            calls[str(name)] = int(coll[sel].sum())
        args[int(rank)] = (lo, hi, roles)
        facts[int(rank)] = (float((hi - lo).sum()), calls)
    times = ask_ranks(job, role_times, args)
    for rank in args:  # in rank order, as the sums were always taken
        step_total, calls = facts[rank]
        for role, c, o, w, u, eu in times.get(rank) or role_times(None, args[rank]):
            a = acc.setdefault(role, {"comm": 0.0, "overlap": 0.0, "wait": 0.0, "unsplit": 0.0, "exposed_unsplit": 0.0,
                                      "step": 0.0, "ranks": set(), "calls": 0})
            a["exposed_unsplit"] += eu
            a["comm"] += c
            a["overlap"] += o
            a["wait"] += w
            a["unsplit"] += u
            a["step"] += step_total
            a["ranks"].add(rank)
            a["calls"] += calls[role]
    out = []
    groups_of: dict[str, list[str]] = {}
    for name, role in role_of.items():
        groups_of.setdefault(role, []).append(str(name))
    for role in sorted(acc, key=lambda r: (ROLE_ORDER.index(r) if r in ROLE_ORDER else len(ROLE_ORDER), r)):
        a = acc[role]
        if a["comm"] <= 0:
            continue
        n_ranks = len(a["ranks"]) or 1
        # exposed communication and overlap are the transfer's, not the waits' nor the unsplit time's
        transfer = a["comm"] - a["wait"] - a["unsplit"]
        out.append({
            "role": role, "groups": sorted(groups_of.get(role, [])), "ranks": sorted(a["ranks"]),
            "comm_us": a["comm"] / n_ranks / 1e3, "exposed_comm_us": (transfer - a["overlap"]) / n_ranks / 1e3,
            "wait_us": a["wait"] / n_ranks / 1e3, "transfer_us": transfer / n_ranks / 1e3,
            "unsplit_us": a["unsplit"] / n_ranks / 1e3,
            "unsplit_share": a["unsplit"] / a["step"] if a["step"] else None,
            # the most the exposed share could be above exposed_comm_share if all the unsplit time were transfer
            "exposed_unsplit_share": a["exposed_unsplit"] / a["step"] if a["step"] else None,
            "comm_share": a["comm"] / a["step"] if a["step"] else None,
            "transfer_share": transfer / a["step"] if a["step"] else None,
            "overlap_coverage": a["overlap"] / transfer if transfer > 0 else None,
            "exposed_comm_share": (transfer - a["overlap"]) / a["step"] if a["step"] else None,
            "collectives_per_step": a["calls"] / n_ranks / max(1, n_steps),
        })
    return out


# --- which role a group plays, from what identifies it ---------------------------------------------------------------


def world_group_role(ops: dict[str, int]) -> str:
    """The role a world-spanning group is judged by, from the traffic it carries.

    Send/recv ≥ half → pp; all-to-all (or NCCL SendRecv kernels, how torchrec and DLRM build theirs) ≥ half → ep;
    parameter all-gathers at least as many as the gradient reductions (reduce-scatter, or all-reduce / 2 on gloo,
    which has no reduce-scatter) → fsdp; any all-reduce / reduce-scatter → dp. The "early in the step" TP test of
    infer_role is not used here: a DDP job's buffer broadcasts and a DLRM's embedding exchange also start early.
    """
    total = sum(ops.values())
    if not total:
        return "unknown"
    if (ops.get("send", 0) + ops.get("recv", 0)) / total >= 0.5:
        return "pp"
    if (ops.get("alltoall", 0) + ops.get("sendrecv", 0)) / total >= 0.5:
        return "ep"
    ag, rs, ar = ops.get("allgather", 0), ops.get("reducescatter", 0), ops.get("allreduce", 0)
    if ag and ag >= rs + ar / 2:
        return "fsdp"
    if ar or rs:
        return "dp"
    return "unknown"


#: A collective issued before this share of its step's compute is in the forward pass (a backward costs about
#: twice its forward, so the forward is the first third of the step's compute).
FORWARD_SHARE = 1 / 3
#: Of the (rank, step)s a group is active in, the share that must show the tensor-parallel pattern.
TP_STEP_SHARE = 0.5
#: reductions of the first forward reduction's payload per step that show the per-layer pattern on their own
RECUR_MIN = 4
_REDUCTIONS = ("allreduce", "reducescatter")
_SIZED = ("allreduce", "reducescatter", "allgather")


def group_role_facts(coll: Any) -> dict[str, dict]:
    """Per process group, what tells its role, from every member row (``coll``: a DataFrame or a dict of columns
    with rank, step, op, nelems, process_group, compute_before — the rank's share of the step's compute done
    before the row started, analyzer/rank/summary.py).

    Per (rank, step): the reductions (all-reduce / reduce-scatter), those issued in the forward (before
    FORWARD_SHARE of the step's compute) whose payload recurs later in the step (an all-reduce / reduce-scatter /
    all-gather of the same element count: the layer's activation, reduced in forward and backward — tensor
    parallelism per layer), and the share of the step's compute done before the first reduction. A step shows the
    tensor-parallel pattern when at least two such forward reductions recur, or one when it is half the step's
    reductions (a one-layer model). Gradient reduction (DP / FSDP) issues none in the forward; a metrics all-reduce
    or a loss all-reduce in the forward has a payload nothing later repeats. Vectorised over rows (groupby)."""
    need = ("rank", "step", "op", "nelems", "process_group", "compute_before")
    if coll is None or any(k not in coll for k in need) or not len(coll["rank"]):
        return {}
    step = np.asarray(coll["step"])
    op_code, op_names = pd.factorize(np.asarray(coll["op"]), use_na_sentinel=False)
    op_names = np.asarray([str(o) for o in op_names])  # what .astype(str) makes of each value
    keep = (step >= 0) & np.isin(op_names, _SIZED)[op_code]
    if not keep.any():
        return {}
    rows = np.flatnonzero(keep)
    # the groups in the order they first appear in the rows (as one table over every row would list them)
    first = dict.fromkeys(str(g) for g in pd.factorize(np.asarray(coll["process_group"])[rows])[1])
    rank = np.asarray(coll["rank"])[rows]
    # the rows in pieces of whole ranks (every (group, rank, step) lies in one piece), each in the rows' order:
    # the piece's tables take ~220 bytes a row: over every row at once they were the cross-rank stage's peak
    if len(rank) > 1 and (rank[1:] < rank[:-1]).any():  # (the rows come rank after rank: sorted already)
        order = np.argsort(rank, kind="stable")
        rows, rank = rows[order], rank[order]
        del order
    cuts = _rank_cuts(rank, ROLE_PIECE_ROWS)
    del rank
    pers, vcs = [], []
    for a, b in zip(cuts[:-1], cuts[1:]):
        per, vc = _role_rows(coll, np.sort(rows[a:b]), op_code, op_names)
        pers.append(per)
        vcs.append(vc)
    per = pd.concat(pers, ignore_index=True) if len(pers) > 1 else pers[0]
    vc = pd.concat(vcs, ignore_index=True).groupby(["g", "n"], sort=False)["c"].sum().reset_index() \
        if len(vcs) > 1 else vcs[0]
    vc = vc.sort_values(["g", "c", "n"], ascending=[True, False, True]).drop_duplicates("g")
    payload = dict(zip(vc["g"], vc["n"].astype(int)))
    out = {}
    by_group = dict(tuple(per.groupby("g", sort=False)))
    for g in first:
        sub = by_group.get(g)
        if sub is None:
            continue
        red_steps = sub[sub["n_red"] > 0]
        out[str(g)] = {
            "rank_steps": int(len(sub)),
            "tp_steps": int(sub["tp_step"].sum()),
            "reductions_per_step": float(sub["n_red"].median()),
            "forward_reductions_per_step": float(sub["n_early_red"].median()),
            "recurring_per_step": float(sub["n_pattern"].median()),
            "payload_known": bool((sub["known"] > 0).any()),
            "first_reduction_share": float(red_steps["first_red"].median()) if len(red_steps)
            and red_steps["first_red"].notna().any() else None,
            "activation_nelems": payload.get(str(g)),
        }
    return out


#: group_role_facts works through the rows in pieces of whole ranks of about this many rows.
ROLE_PIECE_ROWS = 1 << 14


def _rank_cuts(rank: np.ndarray, rows: int) -> list[int]:
    """Cut points of ``rank`` (sorted) into pieces of about ``rows`` rows, never inside one rank's rows."""
    starts = np.flatnonzero(np.r_[True, rank[1:] != rank[:-1]])  # where each rank's rows begin
    cuts = [0]
    for s in starts[1:].tolist():
        if s - cuts[-1] >= rows:
            cuts.append(s)
    return cuts + [len(rank)]


def _role_rows(coll: Any, idx: np.ndarray, op_code: np.ndarray, op_names: np.ndarray) -> tuple:
    """group_role_facts' tables for the rows ``idx`` (whole ranks): per (group, rank, step) its counts, and per
    (group, payload) how many recurring forward reductions carry it."""
    step = np.asarray(coll["step"])[idx]
    op = op_names[op_code[idx]]
    df = pd.DataFrame({"g": np.asarray(coll["process_group"])[idx].astype(str), "rank": np.asarray(coll["rank"])[idx],
                       "step": step, "op": op, "n": np.asarray(coll["nelems"], np.int64)[idx],
                       "cb": np.asarray(coll["compute_before"], np.float64)[idx]})
    df["red"] = df["op"].isin(_REDUCTIONS)
    df["early"] = df["cb"] < FORWARD_SHARE  # NaN (a step with no compute) is not early
    key = ["g", "rank", "step"]
    late = df[~df["early"] & (df["n"] > 0)][key + ["n"]].drop_duplicates()
    late["later"] = True
    df = df.merge(late, on=key + ["n"], how="left")
    df["later"] = df["later"].fillna(False).astype(bool)
    df["pattern"] = df["red"] & df["early"] & df["later"] & (df["n"] > 0)
    df["red_cb"] = df["cb"].where(df["red"])
    df["known"] = df["red"] & (df["n"] > 0)
    df["early_red"] = df["red"] & df["early"]
    per = df.groupby(key, sort=False).agg(n_red=("red", "sum"), n_pattern=("pattern", "sum"),
                                          n_early_red=("early_red", "sum"), first_red=("red_cb", "min"),
                                          known=("known", "sum")).reset_index()
    # or: the step's first reduction comes in the forward and its payload makes at least RECUR_MIN and half of
    # the step's reductions (a CPU forward can be more than a third of the step: DTensor's later forward
    # reductions then fall past FORWARD_SHARE, but every one is the same activation)
    red = df[df["red"] & (df["n"] > 0) & df["cb"].notna()]
    first = red.sort_values("cb", kind="stable").drop_duplicates(key)[key + ["n", "cb"]]
    first = first[first["cb"] < FORWARD_SHARE].rename(columns={"n": "first_n"})[key + ["first_n"]]
    same = red.merge(first, on=key)
    same = same[same["n"] == same["first_n"]].groupby(key).size().rename("n_same").reset_index()
    per = per.merge(same, on=key, how="left")
    per["n_same"] = per["n_same"].fillna(0).astype(int)
    per["tp_step"] = ((per["n_pattern"] >= 2) | ((per["n_pattern"] >= 1) & (2 * per["n_pattern"] >= per["n_red"]))
                      | ((per["n_same"] >= RECUR_MIN) & (2 * per["n_same"] >= per["n_red"])))
    # the most common recurring payload per group (value_counts sorts by count; ties: the smaller size)
    vc = df[df["pattern"]].groupby(["g", "n"]).size().reset_index(name="c")
    return per, vc


def _tp_pattern(facts: Optional[dict]) -> bool:
    return bool(facts) and facts["rank_steps"] > 0 and facts["tp_steps"] >= TP_STEP_SHARE * facts["rank_steps"]


def _tp_evidence(f: dict) -> str:
    size = f"{f['activation_nelems']:,} elements" if f.get("activation_nelems") else "the same size"
    return (f"{f['reductions_per_step']:.0f} reductions per step, {f['forward_reductions_per_step']:.0f} of them in "
            f"the forward pass (before {FORWARD_SHARE:.0%} of the step's compute) and the same payloads ({size}) "
            f"again later in the step: activations reduced per layer in forward and backward "
            f"({f['tp_steps']} of {f['rank_steps']} rank-steps) — tensor parallelism")


def _dp_evidence(f: dict) -> str:
    first = f.get("first_reduction_share")
    where = f"; the first after {first:.0%} of the step's compute" if first is not None else ""
    fwd = f.get("forward_reductions_per_step") or 0
    none = ("none in the forward pass" if not fwd else
            f"{fwd:.0f} in the forward pass whose payload nothing later repeats (a metric or loss, not a layer)")
    return f"{none}{where}: gradient-sized reductions after the backward"


def judge_role(name: str, ranks: list[int], world: int, ops: dict[str, int], per_step: float,
               first_pos: Optional[float], facts: Optional[dict]) -> tuple[str, str, str]:
    """(role, judged_role, evidence) of one process group.

    ``role`` is topology.infer_role's (``world`` for the default group); ``judged_role`` what the group does. Send /
    recv and all-to-all keep their roles (pp, ep). Otherwise the group is tensor-parallel when its reductions show
    the per-layer pattern of ``group_role_facts`` (DTensor's Colwise/Rowwise all-reduces, Megatron's, sequence
    parallelism's reduce-scatters) in most of its rank-steps — whether or not it spans the world, and whether or
    not its first collective comes early. A group with known payloads and no such pattern is not judged TP on an
    early first collective alone (a metrics all-reduce before the forward is not a layer). The evidence names
    what was seen."""
    role, evidence = infer_role(name, ranks, world, ops, per_step, first_pos)
    judged = world_group_role(ops) if role == "world" else role
    if judged in ("pp", "ep"):
        return role, judged, evidence
    if _tp_pattern(facts):
        ev = _tp_evidence(facts)
        if role == "world":
            return role, "tp", f"{evidence}; {ev}"
        return "tp", "tp", ev
    if not (facts and facts.get("payload_known") and facts.get("reductions_per_step")):
        return role, judged, evidence
    if role == "tp" and not (ops.get("allgather", 0) and ops.get("reducescatter", 0)):
        # only the early-first-collective test said TP, and the payloads show no layer pattern: gradient reduction
        role = judged = "dp"
        return role, judged, f"gradient reduction: {per_step:.1f} collectives per step; {_dp_evidence(facts)}"
    if judged in ("dp", "fsdp"):
        evidence = f"{evidence}; {_dp_evidence(facts)}"
    return role, judged, evidence
