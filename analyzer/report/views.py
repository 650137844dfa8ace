"""Tables of an analysed job for Python users and renderers: one row per rank-step, collective member, rank,
group, kernel name, idle part; and the aligned per-rank events the merged timeline draws.

Every number is the report's own (same definition, same unit: µs, GB/s, fractions); times marked "aligned"
have the rank's clock offset applied (docs/cross-rank.md). Renderers get what they need from here, never from
the cross-rank stage directly.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import pandas as pd

from analyzer.load.job import Job


def _us(df: pd.DataFrame) -> pd.DataFrame:
    """*_ns columns → *_us floats (µs), in place of the originals."""
    out = df.copy()
    for c in list(out.columns):
        if c.endswith("_ns"):
            out[c[:-3] + "_us"] = out.pop(c).astype(float) / 1000.0
    return out


def offsets_ns(report: dict) -> tuple[dict[int, int], bool]:
    """Per-rank clock offsets (ns to add) from report.cross_rank.alignment; (offsets, aligned?)."""
    al = (report.get("cross_rank") or {}).get("alignment") or {}
    rows = al.get("offsets") or []
    if al.get("status") not in ("ok", "single_rank") or not rows:
        return {}, False
    return {int(r["rank"]): int(round((r.get("offset_us") or 0.0) * 1000)) for r in rows}, True


def cross_rank_of(job: Job, report: dict):
    """The CrossRank the report was built from (computed once per job: analyzer/cross_rank/section.py)."""
    from analyzer.cross_rank.section import analyse
    gpn = ((report.get("cross_rank") or {}).get("hosts") or {}).get("gpus_per_node")
    return analyse(job, gpn)


_cross_rank = cross_rank_of


def cross_rank_tables(job: Job, report: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(instances, members) of the very matching the report was built from (aligned ns; docs/cross-rank.md)."""
    cr = _cross_rank(job, report)
    return cr.instances, cr.members


def steps_frame(job: Job, report: dict) -> pd.DataFrame:
    """One row per rank and step: the report's per-step metrics (µs) plus the window on the aligned clock."""
    rows = pd.DataFrame((report.get("metrics") or {}).get("per_step") or [])
    if rows.empty or job.step_metrics is None or job.step_metrics.empty:
        return rows
    offs, _ = offsets_ns(report)
    sm = job.step_metrics[["rank", "step", "start", "end"]].copy()
    shift = sm["rank"].map(lambda r: offs.get(int(r), 0)).to_numpy(dtype=np.int64)
    sm["start_ns"] = sm.pop("start").to_numpy() + shift
    sm["end_ns"] = sm.pop("end").to_numpy() + shift
    sm["start_us"] = sm["start_ns"] / 1000.0
    sm["end_us"] = sm["end_ns"] / 1000.0
    return rows.merge(sm, on=["rank", "step"], how="left")


def collectives_frame(job: Job, report: dict) -> pd.DataFrame:
    """One row per collective instance and member rank: group, seq, op, bytes, aligned start/end, the member's
    own duration split into its wait (for the last member to arrive) and its transfer (the rest), the
    instance's transfer time and bus bandwidth (what the report aggregates)."""
    if not job.traces:
        return pd.DataFrame()
    cr = _cross_rank(job, report)
    m, inst = cr.members, cr.instances
    if m is None or not len(m) or inst is None or not len(inst):
        return pd.DataFrame()
    keep = ["instance", "n_members", "group_size", "complete", "wait_known", "bytes", "transfer_ns", "busbw_gbps",
            "algbw_gbps", "last_rank", "arrival_skew_ns"]
    keep = [c for c in keep if c in inst]
    out = m.merge(inst[keep], left_on="iid", right_on="instance", how="left").drop(columns=["instance"])
    out = out.rename(columns={"iid": "instance", "duration_ns": "member_duration_ns"})
    out["bytes"] = out["bytes"].where(out["bytes"] >= 0)
    exact = {c + "_ns": out[c].to_numpy(dtype=np.int64) for c in ("start", "end")}
    for c in ("start", "end"):
        out[c + "_us"] = out.pop(c).astype(float) / 1000.0
    cols = ["instance", "process_group", "seq", "kind", "op", "rank", "stream", "step", "src", "dst", "dtype", "nelems",
            "bytes",
            "start_us", "end_us", "wait_us", "member_transfer_us", "member_duration_us", "transfer_us", "busbw_gbps",
            "algbw_gbps",
            "n_members", "group_size", "complete", "wait_known", "last_rank", "arrival_skew_us"]
    out = _us(out)
    for c, v in exact.items():  # epoch-scale µs floats keep ~0.25 µs; the integer ns are exact
        out[c] = v
    cols += ["start_ns", "end_ns"]
    return out[[c for c in cols if c in out.columns]].sort_values(["instance", "rank"]).reset_index(drop=True)


def ranks_frame(report: dict) -> pd.DataFrame:
    """One row per rank: file, host, GPU, steps (numbers), n_steps, mean_step_time_us, total_<x>_us (summed
    over the steps), time-weighted shares and straggler statistics."""
    base = pd.DataFrame(report.get("ranks") or [])
    if base.empty:
        return base
    per = pd.DataFrame((report.get("metrics") or {}).get("per_rank") or [])
    if not per.empty:  # the report sums durations over the steps under the per-step names: say "total_"
        per = per.rename(columns={c: "total_" + c for c in per.columns
                                  if c.endswith("_us") and c != "mean_step_time_us"})
        per = per.rename(columns={"steps": "n_steps"})
        base = base.merge(per, on="rank", how="left")
    strag = pd.DataFrame(((report.get("cross_rank") or {}).get("stragglers") or {}).get("per_rank") or [])
    if not strag.empty:
        base = base.merge(strag, on="rank", how="left")
    return base


def groups_frame(report: dict) -> pd.DataFrame:
    """One row per process group: members, role (with evidence), span, hosts, op counts."""
    return pd.DataFrame((report.get("cross_rank") or {}).get("process_groups") or [])


def kernels_frame(job: Job) -> pd.DataFrame:
    """Per rank and activity name (kernel; CPU op in a gloo trace): count, total/mean/min/max/std µs, share."""
    from analyzer.rank.breakdown import KERNEL_COLUMNS
    parts = [t.kernels for t in job.traces.values() if t.kernels is not None]  # computed where each rank was parsed
    parts = [p for p in parts if len(p)]
    if not parts:
        return _us(pd.DataFrame({c: [] for c in KERNEL_COLUMNS}))
    return _us(pd.concat(parts, ignore_index=True))


def idle_frame(job: Job) -> pd.DataFrame:
    """Per rank and step: idle µs split into host_wait, peer_wait, kernel_wait and other (they add up)."""
    from analyzer.rank.breakdown import IDLE_COLUMNS
    parts = [t.idle for t in job.traces.values() if t.idle is not None]
    parts = [p for p in parts if len(p)]
    if not parts:
        return _us(pd.DataFrame({c: [] for c in IDLE_COLUMNS}))
    return _us(pd.concat(parts, ignore_index=True))


@dataclass
class RankEvents:
    """One rank's events for the merged timeline, all on the aligned clock (ns)."""

    rank: int
    host: Optional[str]
    offset_ns: int
    activity: pd.DataFrame          # start, end, stream, kind, name, launch_start, launch_tid, correlation
    steps: pd.DataFrame             # step, start, end
    cpu_comm: pd.DataFrame          # start, end, tid, name
    device_type: str = "gpu"
    #: CPU ops, annotations and runtime calls (parsers/kineto_host.py): start, end, tid, cat, name, correlation, args
    host_ops: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: a few arguments of each GPU kernel / memcpy / memset, by correlation id
    kernel_args: dict = field(default_factory=dict)


@dataclass
class TimelineInput:
    """What the merged-timeline writer draws, handed over by the report stage (render reads nothing else)."""

    aligned: bool
    alignment_status: str
    ranks: list[RankEvents] = field(default_factory=list)
    members: pd.DataFrame = field(default_factory=pd.DataFrame)  # collectives_frame rows (aligned µs)


def _rank_events(summary: Any) -> tuple:
    """Worker: the tables of one rank the merged timeline draws, read again from its trace file."""
    t = summary.full()
    a = t.activity
    names = np.asarray(t.names, dtype=object)
    act = pd.DataFrame({
        "start": a["start"].to_numpy(), "end": a["end"].to_numpy(),
        "stream": a["stream"].to_numpy(), "kind": a["kind"].to_numpy().astype(str),
        "name": names[a["name_id"].to_numpy()] if len(a) else np.empty(0, object),
        "launch_start": a["launch_start"].to_numpy(),
        "launch_tid": a["launch_tid"].to_numpy() if "launch_tid" in a else np.full(len(a), -1, np.int64),
        "correlation": a["correlation"].to_numpy(),
    })
    from parsers.kineto_host import host_events
    host, kargs = host_events(t.path)
    return act, t.steps.copy(), t.cpu_comm.copy(), host, kargs


def _on_aligned_clock(read: tuple, off: int) -> tuple:
    """One rank's tables (``_rank_events``) shifted by its clock offset, in place."""
    act, st, cc, host, kargs = read
    act["start"] = act["start"].to_numpy() + off
    act["end"] = act["end"].to_numpy() + off
    ls = act["launch_start"].to_numpy()
    act["launch_start"] = np.where(ls >= 0, ls + off, -1)
    st["start"] += off
    st["end"] += off
    cc["start"] += off
    cc["end"] += off
    if len(host):
        host["start"] = host["start"].to_numpy() + off
        host["end"] = host["end"].to_numpy() + off
    return act, st, cc, host, kargs


def _timeline_placement(job: Job, report: dict) -> tuple[dict, bool, str, dict]:
    """(clock offsets, aligned?, alignment status, rank → host) the timeline draws the ranks with."""
    offs, aligned = offsets_ns(report)
    status = ((report.get("cross_rank") or {}).get("alignment") or {}).get("status") or "none"
    hosts = ((report.get("cross_rank") or {}).get("hosts") or {}).get("rank_to_host") or {}
    return offs, aligned, status, hosts


def timeline_input(job: Job, report: dict) -> TimelineInput:
    """The per-rank activity shifted onto the aligned clock, plus every collective member row.

    The activity is read again from each rank's file (through the job's engine, where the ranks were parsed):
    the analysis keeps only compact per-rank results (docs/scale.md). Everything comes back to this process:
    for a large job write the timeline from :func:`timeline_source` instead.
    """
    offs, aligned, status, hosts = _timeline_placement(job, report)
    ranks = []
    order = list(job.traces)
    engine = job.engine
    read = engine.map(_rank_events, [job.traces[r] for r in order]) if engine is not None else \
        [_rank_events(job.traces[r]) for r in order]
    for r, got in zip(order, read):
        t = job.traces[r]
        off = offs.get(int(r), 0)
        act, st, cc, host, kargs = _on_aligned_clock(got, off)
        ranks.append(RankEvents(int(r), hosts.get(str(r)) or t.meta.get("host"), off, act, st, cc, t.device_type,
                                host, kargs))
    return TimelineInput(aligned, status, ranks, collectives_frame(job, report))


def _timeline_rank(item: tuple) -> tuple[dict, dict]:
    """Worker: one rank's timeline side (its events, tracks and lanes; it stays here) and its summary (a few
    numbers; it travels), made by the writer's ``prepare_rank`` (analyzer/render/timeline_parts.py), which the
    writer hands in: the report stage does not import the renderers."""
    r, summary, off, host, want, prepare_rank = item
    act, st, cc, hops, kargs = _on_aligned_clock(_rank_events(summary), off)
    return prepare_rank(RankEvents(r, host, off, act, st, cc, summary.device_type, hops, kargs), want)


class TimelineSource:
    """What the merged timeline is written from without bringing the ranks' events here: each rank's events
    are read again and kept where it was parsed (the job's engine), the member table stays in its partitions;
    the writer (analyzer/render/timeline.py) asks both questions whose answers are small, then the JSON text
    of one chunk of ranks or one partition at a time."""

    def __init__(self, job: Job, report: dict):
        self.job = job
        self.offs, self.aligned, self.alignment_status, self.hosts = _timeline_placement(job, report)
        cr = cross_rank_of(job, report)
        self.parts, self.inst = cr.parts, cr.instances
        self._order = list(job.traces)
        self._handles: list = []
        self._local: Optional[list] = None

    def rank_ids(self) -> list[int]:
        return [int(r) for r in self._order]

    def prepare(self, want: set, prepare_rank: Any) -> list[dict]:
        """Each rank's side made (and kept) by ``prepare_rank(events, wanted)`` where it is read; the summaries, in
        rank order."""
        items = [(int(r), self.job.traces[r], self.offs.get(int(r), 0),
                  self.hosts.get(str(r)) or self.job.traces[r].meta.get("host"), int(r) in want, prepare_rank)
                 for r in self._order]
        engine = self.job.engine
        if engine is None:
            got = [_timeline_rank(it) for it in items]
            self._local = [s for _, s in got]
            return [c for c, _ in got]
        compact, self._handles = engine.map_keep(_timeline_rank, items)
        return compact

    def ask(self, fn: Any, positions: list[int], args: list) -> list:
        """``fn(side, arg)`` for the ranks at ``positions`` (in rank order), run where their sides are."""
        if self._local is not None:
            return [fn(self._local[i], a) for i, a in zip(positions, args)]
        return self.job.engine.query(fn, [self._handles[i] for i in positions], args)

    def close(self) -> None:
        """Drop the ranks' sides (the pool's pickles are removed; Dask releases its futures with the handles):
        a timeline's sides are as large as the traces' events, and the engine keeps the analysis open."""
        for h in self._handles:
            if isinstance(h, str) and os.path.basename(h).endswith(".pkl"):
                try:
                    os.remove(h)
                except OSError:
                    pass
        self._handles, self._local = [], None

    @property
    def n_parts(self) -> int:
        return len(self.parts.parts) if len(self.parts) else 0

    def ask_parts(self, fn: Any, args: list, which: list[int]) -> list:
        """``fn(partition, arg)`` for the member partitions ``which``, each told its instances' bytes and last
        rank (what collectives_frame joins), run where the partitions are."""
        inst = self.inst
        a = []
        for i in which:
            lo, hi = self.parts.bounds[i]
            if inst is None or not len(inst):
                sl = pd.DataFrame({"instance": [], "bytes": [], "last_rank": []})
            else:
                iid = inst["instance"].to_numpy()
                sl = inst.loc[(iid >= lo) & (iid < hi), ["instance", "bytes", "last_rank"]]
            a.append({**args[i], "inst": sl})
        handles = [self.parts.parts[i] for i in which]
        if self.parts.engine is None:
            return [fn(p, x) for p, x in zip(handles, a)]
        return self.parts.engine.query(fn, handles, a)


def timeline_source(job: Job, report: dict) -> TimelineSource:
    """The merged timeline's source for :func:`analyzer.render.timeline.write_timeline` (streamed: this process
    holds a few numbers per rank, never the ranks' events)."""
    return TimelineSource(job, report)


def findings_frame(report: dict) -> pd.DataFrame:
    """One row per finding: rank in the list, id, severity, title, subject fields, cost, confidence."""
    rows = []
    for i, f in enumerate(report.get("findings") or [], 1):
        s = f.get("subject") or {}
        rows.append({"rank_in_report": i, "id": f.get("id"), "severity": f.get("severity"), "title": f.get("title"),
                     "ranks": list(s.get("ranks") or []), "process_group": s.get("process_group"),
                     "step": s.get("step"), "op": s.get("op"), "seq": s.get("seq"), "cost": f.get("cost"),
                     "confidence": f.get("confidence"),
                     "consequences": [c.get("id") for c in f.get("consequences") or []]})
    return pd.DataFrame(rows)


__all__ = ["steps_frame", "collectives_frame", "ranks_frame", "groups_frame", "kernels_frame", "idle_frame",
           "timeline_input", "timeline_source", "TimelineInput", "TimelineSource", "RankEvents", "offsets_ns",
           "findings_frame"]

