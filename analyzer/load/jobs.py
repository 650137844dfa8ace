"""Tell apart the jobs whose traces share one input folder, so one run analyses one job.

Signals, strongest first: sibling sub-folders that each hold the same rank (two runs side by side, even identical
copies: a folder is a boundary the user made — per-host sub-folders with different ranks are one job); traces
that disagree on the world size; wall-clock windows that do not overlap and lie far apart (epoch timestamps only: ranks of one job profile the same steps). Docs: docs/api.md.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Optional

#: Two traces whose windows are further apart than this (and than 10× the longer one) are not one job.
JOB_GAP_NS = 300 * 10**9
#: Timestamps at or past this (2001-09-09 in ns since the epoch) are wall-clock; smaller ones are boot-relative.
EPOCH_NS = 10**18



class OptionError(ValueError):
    """An option the caller gave does not fit the inputs (--job naming none of the jobs found, a world size out of
    range): a usage error (exit 2). Any other ValueError raised while analysing is a bug, never one of these."""


@dataclass
class TraceInfo:
    """The facts about one parsed trace that tell its job."""

    path: str
    rank: Optional[int]
    world_size: Optional[int]
    start_ns: Optional[int]
    end_ns: Optional[int]


@dataclass
class JobGroup:
    """One job found in the inputs: its label, traces, and how it was told from the others."""

    label: str
    paths: list[str]
    ranks: list[int]
    world_size: Optional[int]
    start_ns: Optional[int]
    folder: Optional[str] = None
    told_by: list[str] = field(default_factory=list)

    def to_dict(self, selected: bool) -> dict:
        return {"label": self.label, "folder": self.folder, "ranks": sorted(set(self.ranks)),
                "world_size": self.world_size, "traces": len(self.paths), "start": _iso(self.start_ns),
                "told_by": list(self.told_by), "selected": selected}


def _iso(ns: Optional[int]) -> Optional[str]:
    if ns is None or ns < EPOCH_NS:
        return None
    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _dir(t: TraceInfo) -> str:
    return os.path.dirname(os.path.abspath(t.path))


def _top(root: str, d: str) -> str:
    """The first folder of ``d`` below ``root`` ('.' for ``root`` itself)."""
    rel = os.path.relpath(d, root)
    return "." if rel == os.curdir else rel.split(os.sep, 1)[0]


def _siblings(infos: list[TraceInfo], root: str) -> Optional[list[list[TraceInfo]]]:
    """The traces under ``root`` split into its sub-folders when two sibling sub-folders hold the same rank
    (``runs/run1`` and ``runs/run2``: two runs the user kept apart, even byte-identical copies), each split
    again the same way; traces directly in ``root`` then form a group of their own. None when no two sibling
    sub-folders share a rank (per-host sub-folders of one job)."""
    children: dict[str, list[TraceInfo]] = {}
    for t in infos:
        children.setdefault(_top(root, _dir(t)), []).append(t)
    subs = {k: v for k, v in children.items() if k != "."}
    if len(subs) < 2:
        return None
    owner: dict[int, str] = {}
    overlap = False
    for k in sorted(subs):
        for r in {t.rank for t in subs[k] if t.rank is not None}:
            if owner.setdefault(r, k) != k:
                overlap = True
    if not overlap:
        return None
    out: list[list[TraceInfo]] = []
    for k in sorted(subs):
        deeper = _siblings(subs[k], os.path.join(root, k))
        out += deeper if deeper is not None else [subs[k]]
    if "." in children:
        out.append(children["."])
    return out


def _by_folder(infos: list[TraceInfo]) -> list[list[TraceInfo]]:
    """Split by folder: sibling sub-folders that hold the same rank are separate jobs (the folder is a boundary the
    user made); otherwise one group per parent folder when some rank appears in more than one folder at different
    times (a copy in a sub-folder of the run itself, recorded at the same time, is a duplicate file); else one."""
    folders: dict[str, list[TraceInfo]] = {}
    for t in infos:
        folders.setdefault(_dir(t), []).append(t)
    if len(folders) < 2:
        return [infos]
    by_sibling = _siblings(infos, os.path.commonpath(sorted(folders)))
    if by_sibling is not None:
        return by_sibling
    seen: dict[int, TraceInfo] = {}
    clash = False
    for d, ts in folders.items():
        for t in ts:
            if t.rank is None:
                continue
            first = seen.setdefault(t.rank, t)
            # the same rank in another folder, recorded at another time: another run (an identical copy is a
            # duplicate file of this run, reported as such later)
            if _dir(first) != d and (first.start_ns != t.start_ns or t.start_ns is None):
                clash = True
    return [folders[d] for d in sorted(folders)] if clash else [infos]


def _by_world(group: list[TraceInfo]) -> list[list[TraceInfo]]:
    """Split by claimed world size; traces that claim none join the largest group."""
    sizes = sorted({t.world_size for t in group if t.world_size})
    if len(sizes) < 2:
        return [group]
    parts = {w: [t for t in group if t.world_size == w] for w in sizes}
    biggest = max(sizes, key=lambda w: (len(parts[w]), w))
    parts[biggest] += [t for t in group if not t.world_size]
    return [parts[w] for w in sizes]


def _by_time(group: list[TraceInfo]) -> list[list[TraceInfo]]:
    """Split where wall-clock windows leave a gap longer than JOB_GAP_NS and 10× the traces' length."""
    timed = [t for t in group if t.start_ns is not None and t.start_ns >= EPOCH_NS and t.end_ns is not None]
    if len(timed) < 2 or len(timed) < len(group):
        return [group]
    timed.sort(key=lambda t: t.start_ns)
    parts, cur, reach, longest = [], [timed[0]], timed[0].end_ns, timed[0].end_ns - timed[0].start_ns
    for t in timed[1:]:
        length = t.end_ns - t.start_ns
        gap = t.start_ns - reach
        if gap > JOB_GAP_NS and gap > 10 * max(longest, length):
            parts.append(cur)
            cur, reach, longest = [t], t.end_ns, length
            continue
        cur.append(t)
        reach = max(reach, t.end_ns)
        longest = max(longest, length)
    parts.append(cur)
    return parts


def group_jobs(infos: list[TraceInfo]) -> list[JobGroup]:
    """The jobs among the traces (one group when nothing tells them apart), in a stable order."""
    if not infos:
        return []
    groups: list[tuple[list[TraceInfo], list[str]]] = [(infos, [])]
    for split, why in ((_by_folder, "sub-folder"), (_by_world, "world size"), (_by_time, "start time")):
        nxt = []
        for g, told in groups:
            parts = split(g)
            nxt += [(p, told + [why] if len(parts) > 1 else told) for p in parts]
        groups = nxt
    if len(groups) == 1:
        g = groups[0][0]
        return [_group("job", g, [])]
    folders = {os.path.dirname(os.path.abspath(t.path)) for g, _ in groups for t in g}
    common = os.path.commonpath(sorted(folders)) if folders else ""
    out = []
    for g, told in groups:
        out.append(_group("", g, told))
    by_folder = all(j.folder for j in out) and len({j.folder for j in out}) == len(out)
    for j in out:
        bits = []
        if by_folder:  # each job in its own folder: the folder names it (what users pass to --job)
            j.label = os.path.relpath(j.folder, common) if common and j.folder != common else \
                (os.path.basename(j.folder) or j.folder)
            continue
        if "sub-folder" in j.told_by and j.folder:
            bits.append(os.path.relpath(j.folder, common) if common and j.folder != common else
                        os.path.basename(j.folder) or j.folder)
        if "world size" in j.told_by and j.world_size:
            bits.append(f"world{j.world_size}")
        if "start time" in j.told_by and j.start_ns:
            bits.append(_iso(j.start_ns).replace(" UTC", "").replace(" ", "T"))
        j.label = "/".join(bits) or "job"
    labels = [j.label for j in out]
    for i, j in enumerate(out):  # labels must be unique: number the repeats
        if labels.count(j.label) > 1:
            j.label = f"{j.label}#{labels[:i + 1].count(j.label)}"
    return sorted(out, key=lambda j: j.label)


def _group(label: str, g: list[TraceInfo], told: list[str]) -> JobGroup:
    worlds = [t.world_size for t in g if t.world_size]
    starts = [t.start_ns for t in g if t.start_ns is not None]
    folders = sorted({_dir(t) for t in g})
    # a job split off by folder lives in the folder holding all its traces (run1/ of run1/host0, run1/host1)
    folder = folders[0] if len(folders) == 1 else (os.path.commonpath(folders) if "sub-folder" in told else None)
    return JobGroup(label, [t.path for t in g], [t.rank for t in g if t.rank is not None],
                    max(worlds) if worlds else None, min(starts) if starts else None, folder, told)


def choose(jobs: list[JobGroup], wanted: Optional[str]) -> JobGroup:
    """The job to analyse: ``wanted`` (a label, a 1-based number, or a folder), else the one with the most
    ranks, then the latest start. Raises ValueError naming the choices when ``wanted`` matches none."""
    if wanted is not None and str(wanted).strip():
        w = str(wanted).strip()
        if w.isdigit() and 1 <= int(w) <= len(jobs):
            return jobs[int(w) - 1]
        for j in jobs:
            if w == j.label or (j.folder and os.path.abspath(w) == j.folder):
                return j
        hits = [j for j in jobs if w in j.label]
        if len(hits) == 1:
            return hits[0]
        raise OptionError(f"--job {w!r} matches {'several' if hits else 'none'} of the jobs found: "
                         + ", ".join(f"{i}. {j.label}" for i, j in enumerate(jobs, 1)))
    return max(jobs, key=lambda j: (len(set(j.ranks)), j.start_ns or 0, -jobs.index(j)))
