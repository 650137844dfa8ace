"""What one pipeline rank did in each step: its compute split into forward / backward blocks, its transfers, and
the schedule's own annotations — the per-rank evidence the schedule inference and the bubble are built from.

Everything here is on the rank's own clock and needs no other rank. A stage's work is its `compute` activity (GPU
kernels, or CPU ops on the training thread) and its collectives (TP all-reduce, EP all-to-all, DP reduction: work of
the stage, not waiting on its neighbours), minus the optimizer (`Optimizer.*` annotations), which no pipeline theory
counts; its send/recv are what it waits on. A compute op belongs to step k when its time key lies in the step's
window: the CPU op's start, or for a GPU kernel the start of the runtime call that launched it (a kernel runs after
its step's CPU window when the host runs ahead). Labels: F (forward) or B (backward, including zero-bubble I and W)
from, in order of trust, the schedule's annotations (`PP:<stage><F|I|B|W><mb>` of torch.distributed.pipelining's
schedule runtime, `Forward i` / `Backward i` of ScheduleGPipe), then on CPU traces the autograd engine (an op inside
`autograd::engine::evaluate_function: …` is backward), else unknown. Blocks are the runs of compute between two of
the rank's transfers with one label; blocks below `TINY_SHARE` of the step's large blocks (micro-batch split ops,
`detach_`, `ones_like` before a loss backward) are left out of the order.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import pandas as pd

from analyzer.rank import intervals as iv

#: torch.distributed.pipelining `_Action` names as the schedule runtime records them: `PP:` + str(action).
PP_ACTION = re.compile(r"^PP:(\d+)(F|I|B|W|SEND_F|RECV_F|SEND_B|RECV_B|UNSHARD|RESHARD|REDUCE_GRAD)(\d*)$")
#: ScheduleGPipe's (and _ScheduleForwardOnly's) per-micro-batch record_function names.
GPIPE_ACTION = re.compile(r"^(Forward|Backward) (\d+)$")
#: CPU ops the autograd engine runs for backward nodes (every PyTorch since 1.8).
ENGINE_PREFIX = "autograd::engine::evaluate_function:"
#: Compute inside these annotations is the optimizer, not pipeline work.
OPTIMIZER_PREFIX = "Optimizer."
#: A block whose busy time is below this share of the step's 90th-percentile block is left out of the order.
TINY_SHARE = 0.1

UNKNOWN, FWD, BWD = 0, 1, 2
LETTER = {UNKNOWN: "?", FWD: "F", BWD: "B"}


@dataclass
class StepBlocks:
    """One rank's pipeline work in one step (times in the rank's own ns)."""

    step: int
    busy_ns: int                    # |∪ work| in the step: compute and collectives, optimizer excluded
    first_ns: Optional[int]         # first work start, last work end (None without any)
    last_ns: Optional[int]
    order: str                      # labels of the step's blocks in time order ("FFFBFB…", "?" unknown)
    first_block_ns: Optional[int]   # start of the step's first block (stage 0: its first forward)
    n_send: int
    n_recv: int
    send_labels: str                # per send in time order: label of the block before it
    send_peers: np.ndarray          # per send: peer rank from the trace (−1 unknown)
    recv_peers: np.ndarray
    send_starts: np.ndarray
    recv_starts: np.ndarray
    actions: list = field(default_factory=list)   # [(kind F|I|B|W, stage or None, mb)] in time order
    off_schedule_ns: int = 0        # work beyond the step's typical micro-batch blocks (see off_schedule_work)


@dataclass
class RankBlocks:
    """Every complete step of one rank, plus what its trace says about labels and peers."""

    rank: int
    device_type: str
    steps: dict[int, StepBlocks]
    labelled_by: str                # "annotations" | "autograd" | "none"
    peers_given: float              # share of send/recv rows whose peer the trace names
    pp_stages: list[int]            # global stage indices named by PP: annotations (sorted)
    gpipe_annotations: bool         # Forward i / Backward i present


def complete_steps(trace: Any) -> pd.DataFrame:
    """The trace's steps, without the ones a cut-off (salvaged) file lost part of: a step is kept when it ends
    before the last event that survived."""
    st = trace.steps
    if not len(st) or not getattr(trace, "salvage", None):
        return st
    a = trace.activity
    last = int(a["end"].max()) if len(a) else None
    if len(trace.annotations):
        last = max(last or 0, int(trace.annotations["end"].max()))
    if last is None:
        return st.iloc[:0]
    return st[st["end"].to_numpy() <= last]


def step_windows(trace: Any) -> pd.DataFrame:
    """The windows a pipeline step is measured in: the complete ProfilerStep windows; without any, iterations cut
    at the end of each `Optimizer.step` annotation (numbered 0, 1, …; what follows the last one is dropped);
    without those either, the whole trace as step −1."""
    st = complete_steps(trace)
    if len(trace.steps):
        return st
    ann = trace.annotations
    opt = ann[ann["name"].astype(str).str.startswith(OPTIMIZER_PREFIX + "step")] if len(ann) else ann
    a = trace.activity
    if not len(a):
        return st
    lo = int(a["start"].min())
    if len(opt):
        ends = np.sort(opt["end"].to_numpy())
        starts = np.r_[lo, ends[:-1]]
        return pd.DataFrame({"step": np.arange(len(ends)), "start": starts, "end": ends})
    return pd.DataFrame({"step": [-1], "start": [lo], "end": [int(a["end"].max()) + 1]})


def _inside(t: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Index of the interval of a disjoint sorted set containing each t, or −1."""
    if not len(starts):
        return np.full(len(t), -1, np.int64)
    k = np.searchsorted(starts, t, side="right") - 1
    ok = (k >= 0) & (t < ends[np.maximum(k, 0)])
    return np.where(ok, k, -1)


def _annotation_actions(ann: pd.DataFrame) -> pd.DataFrame:
    """Compute actions named by the schedule: kind (F/I/B/W), stage (−1 when the name has none), mb, start, end."""
    cols = {"kind": [], "stage": [], "mb": [], "start": [], "end": []}
    if not len(ann):
        return pd.DataFrame(cols)
    names = ann["name"].astype(str)
    pp = names.str.extract(PP_ACTION)
    is_pp = pp[1].isin(["F", "I", "B", "W"]).to_numpy() & (pp[2].fillna("") != "").to_numpy()
    gp = names.str.extract(GPIPE_ACTION)
    is_gp = gp[0].notna().to_numpy()
    out = pd.DataFrame({
        "kind": np.where(is_pp, pp[1].fillna(""), np.where(gp[0].to_numpy() == "Forward", "F", "B")),
        "stage": np.where(is_pp, pd.to_numeric(pp[0], errors="coerce").fillna(-1), -1).astype(np.int64),
        "mb": np.where(is_pp, pd.to_numeric(pp[2], errors="coerce").fillna(-1),
                       pd.to_numeric(gp[1], errors="coerce").fillna(-1)).astype(np.int64),
        "start": ann["start"].to_numpy(), "end": ann["end"].to_numpy()})
    keep = is_pp | is_gp
    return out[keep].sort_values("start", kind="stable").reset_index(drop=True)


def _labels(trace: Any, comp: pd.DataFrame, key: np.ndarray, actions: pd.DataFrame) -> tuple[np.ndarray, str]:
    """F/B label per compute op: annotations first, then (CPU) the autograd engine, else unknown."""
    lab = np.full(len(comp), UNKNOWN, np.int8)
    how = "none"
    if trace.device_type == "cpu" and len(comp):
        by_name = np.fromiter((str(n).startswith(ENGINE_PREFIX) for n in trace.names), bool, len(trace.names))
        eng = by_name[comp["name_id"].to_numpy()]
        if eng.any():
            u = iv.union(comp["start"].to_numpy()[eng], comp["end"].to_numpy()[eng])
            lab[:] = np.where(_inside(comp["start"].to_numpy(), *u) >= 0, BWD, FWD)
            how = "autograd"
    if len(actions):
        s, e = actions["start"].to_numpy(), actions["end"].to_numpy()
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
        kinds = actions["kind"].to_numpy()[order]
        # actions do not overlap one another on the schedule's thread; the innermost would win if they did
        k = np.searchsorted(s, key, side="right") - 1
        ok = (k >= 0) & (key < e[np.maximum(k, 0)])
        lab[ok] = np.where(kinds[k[ok]] == "F", FWD, BWD)
        if ok.any():
            how = "annotations"
    return lab, how


def _blocks(lab: np.ndarray, s: np.ndarray, e: np.ndarray, cuts: np.ndarray, cut_send: np.ndarray
            ) -> list[tuple[int, int, int, int]]:
    """(label, start, end, busy) of each run of one label between two transfers that is pipeline work.

    Left out: runs below TINY_SHARE of the 90th-percentile run of their label (split ops, `detach_`,
    `ones_like`); before the step's first transfer, all but the last run, and that one too unless the transfer
    is a send (stage 0's first forward feeds it; elsewhere the first transfer is the recv that feeds the first
    compute, and what precedes it is the step's data preparation); after the last transfer, all but the first
    run, and that one too unless the transfer is a recv (the last backward it feeds; after a send comes only
    gradient post-processing).
    """
    if not len(s):
        return []
    seg = np.searchsorted(cuts, s, side="right")
    brk = np.r_[0, np.flatnonzero((lab[1:] != lab[:-1]) | (seg[1:] != seg[:-1])) + 1, len(s)]
    runs = []
    for a, b in zip(brk[:-1], brk[1:]):
        u = iv.union(s[a:b], e[a:b])
        if not len(u[0]):
            continue  # only zero-duration ops (a clock that did not tick, a damaged trace): no work to order
        runs.append((int(lab[a]), int(u[0][0]), int(u[1][-1]), iv.total(u), int(seg[a])))
    busy = np.array([x[3] for x in runs], dtype=np.float64)
    labs = np.array([x[0] for x in runs])
    big = np.zeros(len(runs))
    for lb in np.unique(labs):
        big[labs == lb] = np.percentile(busy[labs == lb], 90)
    runs = [x for x, b in zip(runs, busy >= TINY_SHARE * big) if b]
    n = len(cuts)
    if n:
        lead = [x for x in runs if x[4] == 0]
        trail = [x for x in runs if x[4] == n]
        mid = [x for x in runs if 0 < x[4] < n]
        runs = (lead[-1:] if cut_send[0] else []) + mid + (trail[:1] if not cut_send[-1] else [])
    return [x[:4] for x in runs]


def off_schedule_work(busy_ns: int, blocks: list[tuple[int, int, int, int]]) -> int:
    """The step's work that is not its typical micro-batch work: its busy time minus, per block, the block's
    busy time capped at the median block of its label (F or B) in the step.

    Why: a stage that is heavy by partition (more layers) does more in *every* micro-batch block, so its median
    block grows and nothing is left over; a rank that does extra work once per step (a metric, a logging or
    checkpoint call, an extra forward before ``schedule.step``) lengthens one block or adds work between them,
    which stays here. Per-step excess of this over the other stages' is a straggler's own work (LOAD001); the
    heavy stage is PIPE001's. Data preparation before the first transfer also lands here (every stage has it).
    """
    if not blocks:
        return int(busy_ns)
    labs = np.array([b[0] for b in blocks])
    busy = np.array([b[3] for b in blocks], dtype=np.float64)
    cap = np.empty(len(blocks))
    for lb in np.unique(labs):
        cap[labs == lb] = np.median(busy[labs == lb])
    return int(max(0.0, busy_ns - np.minimum(busy, cap).sum()))


def rank_blocks(rank: int, trace: Any) -> RankBlocks:
    """Per complete step: pipeline compute, labelled blocks, transfers (see the module docstring)."""
    a, ann = trace.activity, trace.annotations
    coll = trace.collectives
    kind = a["kind"].to_numpy()
    is_p2p = np.zeros(len(a), bool)
    if len(coll):
        is_p2p[coll.loc[coll["op"].isin(["send", "recv"]), "act_index"].to_numpy()] = True
    # a stage's work: its compute and the collectives inside it (TP all-reduce, EP all-to-all, DP reduction);
    # its transfers to the neighbour stages are what it waits on, not work
    work = (kind == "compute") | ((kind == "comm") & ~is_p2p)
    gpu = trace.device_type != "cpu"
    key_all = a["start"].to_numpy()
    if gpu and "launch_start" in a:
        ls = a["launch_start"].to_numpy()
        key_all = np.where(ls >= 0, ls, key_all)
    cpu_ann = ann[ann["track"].to_numpy() == "cpu"] if len(ann) else ann
    opt = cpu_ann[cpu_ann["name"].astype(str).str.startswith(OPTIMIZER_PREFIX)] if len(cpu_ann) else cpu_ann
    if len(opt):
        work &= _inside(key_all, *iv.union(opt["start"].to_numpy(), opt["end"].to_numpy())) < 0
    wk, ws_all, we_all = key_all[work], a["start"].to_numpy()[work], a["end"].to_numpy()[work]
    comp_mask = work & (kind == "compute")
    comp, key = a[comp_mask], key_all[comp_mask]
    actions = _annotation_actions(cpu_ann)
    lab, how = _labels(trace, comp, key, actions)
    order = np.argsort(comp["start"].to_numpy(), kind="stable")
    cs, ce = comp["start"].to_numpy()[order], comp["end"].to_numpy()[order]
    ck, lab = key[order], lab[order]
    p2p = coll[coll["op"].isin(["send", "recv"])].sort_values("start", kind="stable") if len(coll) else coll
    peers_given = float((p2p["peer"].to_numpy() >= 0).mean()) if len(p2p) else 0.0
    steps = {}
    for st in step_windows(trace).itertuples(index=False):
        ws, we = int(st.start), int(st.end)
        sel = np.flatnonzero((ck >= ws) & (ck < we))
        s, e, lb = cs[sel], ce[sel], lab[sel]
        t = p2p[(p2p["start"].to_numpy() >= ws) & (p2p["start"].to_numpy() < we)] if len(p2p) else p2p
        cuts = t["start"].to_numpy() if len(t) else np.empty(0, np.int64)  # p2p is sorted by start
        blocks = _blocks(lb, s, e, cuts, t["op"].to_numpy() == "send" if len(t) else np.empty(0, bool))
        ww = (wk >= ws) & (wk < we)
        u = iv.union(ws_all[ww], we_all[ww])
        sends = t[t["op"].to_numpy() == "send"] if len(t) else t
        recvs = t[t["op"].to_numpy() == "recv"] if len(t) else t
        bstart = np.array([b[1] for b in blocks], dtype=np.int64)
        bl = np.array([b[0] for b in blocks], dtype=np.int64)
        if len(sends) and len(blocks):
            k = np.searchsorted(bstart, sends["start"].to_numpy(), side="left") - 1
            send_labels = "".join(LETTER[int(bl[i])] if i >= 0 else "?" for i in k)
        else:
            send_labels = "?" * len(sends)
        act = actions[(actions["start"].to_numpy() >= ws) & (actions["start"].to_numpy() < we)] if len(actions) \
            else actions
        steps[int(st.step)] = StepBlocks(
            step=int(st.step), busy_ns=iv.total(u), first_ns=int(u[0][0]) if len(u[0]) else None,
            last_ns=int(u[1][-1]) if len(u[0]) else None, order="".join(LETTER[b[0]] for b in blocks),
            first_block_ns=blocks[0][1] if blocks else None,
            n_send=len(sends), n_recv=len(recvs), send_labels=send_labels,
            send_peers=sends["peer"].to_numpy() if len(sends) else np.empty(0, np.int64),
            recv_peers=recvs["peer"].to_numpy() if len(recvs) else np.empty(0, np.int64),
            send_starts=sends["start"].to_numpy() if len(sends) else np.empty(0, np.int64),
            recv_starts=recvs["start"].to_numpy() if len(recvs) else np.empty(0, np.int64),
            actions=list(zip(act["kind"], act["stage"], act["mb"])) if len(act) else [],
            off_schedule_ns=off_schedule_work(iv.total(u), blocks))
    stages = sorted({int(x) for x in actions["stage"] if x >= 0}) if len(actions) else []
    gp = bool(len(actions)) and bool((actions["stage"] < 0).any())
    return RankBlocks(rank, trace.device_type, steps, how, peers_given, stages, gp)
