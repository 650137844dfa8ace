"""The job's world size from what the inputs hold, and where it came from.

A post-mortem folder rarely holds a profiler trace (the only input that states the world size outright), yet the
world size decides who is missing: a rank that left no dump and no line is invisible unless the world is known.
Sources, strongest first (the first that gives a size is used; the rest only check it):

1. the user's `--world-size N` / `analyzer.load(..., world_size=N)`;
2. the profiler traces' `distributedInfo.world_size`;
3. a Flight Recorder dump's `pg_config`: the default group's members (gloo's single `''` entry lists the world);
4. a launcher's or program's own statement: torchrun's `global_world_sizes=[…]`, `WORLD_SIZE=N`,
   `nproc_per_node` × nodes (`min_nodes == max_nodes`, or `group_world_size`), a printed `world_size: N`
   (parsers/launch_config.py);
5. a lower bound: the largest rank seen anywhere + 1 — dumps and their group tables, stderr's `[rankN]:` /
   `[defaultN]:` prefixes and torchrun's failure table, NCCL logs' ranks and communicator sizes.

A stated size smaller than a rank that was seen is wrong for this job: the larger number is used, with a warning.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

MAX_WORLD = 1 << 20


@dataclass
class WorldSize:
    """The world size (None when nothing shows one), one line saying where it came from, and whether it is only
    a lower bound (the largest rank seen + 1)."""

    size: Optional[int]
    source: str = ""
    lower_bound: bool = False
    warnings: list[str] = field(default_factory=list)


def _ranks_text(ranks: Iterable[int]) -> str:
    r = sorted(set(ranks))
    return f"{r[0]}-{r[-1]}" if len(r) > 2 and r == list(range(r[0], r[-1] + 1)) else ", ".join(map(str, r))


def _dump_world(dumps: Iterable[Any]) -> tuple[Optional[int], str, int, str]:
    """(size from a default group's pg_config, its source line, largest rank any group table or dump names,
    where that rank was seen)."""
    best, src, top, top_where = None, "", -1, ""
    for d in dumps:
        path = str(getattr(d, "path", ""))
        r = getattr(d, "rank", None)
        if isinstance(r, int) and not isinstance(r, bool) and 0 <= r < MAX_WORLD and r > top:
            top, top_where = r, f"{path} (its rank)"
        for name, cfg in (getattr(d, "pg_config", None) or {}).items():
            ranks = cfg.get("ranks") if isinstance(cfg, dict) else None
            if not ranks:
                continue
            ranks = [x for x in ranks if isinstance(x, int) and 0 <= x < MAX_WORLD]
            if not ranks:
                continue
            if max(ranks) > top:
                top, top_where = max(ranks), f"{path} (pg_config group {name!r})"
            default = name in ("", "0") or (isinstance(cfg, dict) and cfg.get("desc") == "default_pg")
            if default and (best is None or len(ranks) > best):
                best = len(ranks)
                label = "the world entry ''" if name == "" else f"default group {name!r}"
                src = f"Flight Recorder pg_config of {path}: {label} lists ranks {_ranks_text(ranks)}"
    return best, src, top, top_where


def _stated(statements: list[tuple[str, dict]]) -> tuple[Optional[int], str]:
    """A launcher's / program's statement of the size: global_world_sizes, WORLD_SIZE, nproc_per_node × nodes,
    world_size — the first kind present, its largest value."""
    by: dict[str, list[tuple[str, dict]]] = {}
    for path, row in statements:
        by.setdefault(row["kind"], []).append((path, row))

    def top(kind: str) -> tuple[str, dict]:
        return max(by[kind], key=lambda pr: pr[1]["value"])

    for kind in ("global_world_sizes", "WORLD_SIZE"):
        if kind in by:
            path, row = top(kind)
            return row["value"], f"{path}:{row['line']}: {row['text']}"
    if "nproc_per_node" in by:
        path, row = top("nproc_per_node")
        nodes, how = None, ""
        if "group_world_size" in by:
            p2, n = top("group_world_size")
            nodes, how = n["value"], f"{p2}:{n['line']}: {n['text']}"
        elif "min_nodes" in by and "max_nodes" in by:
            lo, hi = top("min_nodes")[1], top("max_nodes")[1]
            if lo["value"] == hi["value"]:
                nodes, how = hi["value"], f"min_nodes = max_nodes = {hi['value']}"
        if nodes:
            return row["value"] * nodes, (f"{path}:{row['line']}: {row['text']} × {nodes} node(s) ({how})")
    if "world_size" in by:
        path, row = top("world_size")
        return row["value"], f"{path}:{row['line']}: {row['text']}"
    return None, ""


def _seen_elsewhere(stderr_logs: Iterable[Any], nccl_logs: Iterable[Any]) -> tuple[int, str]:
    """Largest rank in stderr (tags, prefixes, failure tables) and NCCL logs (ranks, communicator sizes - 1)."""
    top, where = -1, ""
    for log in stderr_logs:
        for r in getattr(log, "ranks", ()) or ():
            if 0 <= int(r) < MAX_WORLD and int(r) > top:
                top, where = int(r), f"{getattr(log, 'path', '')} (rank {int(r)}'s lines)"
    for log in nccl_logs:
        comms = getattr(log, "communicators", None)
        if comms is None or not len(comms):
            continue
        for col, off in (("rank", 0), ("nranks", 1)):
            if col in comms.columns:
                vals = [int(v) for v in comms[col] if v == v and 0 <= int(v) < MAX_WORLD + off]
                if vals and max(vals) - off > top:
                    top = max(vals) - off
                    where = (f"{getattr(log, 'path', '')} (a communicator of {max(vals)} ranks)" if off else
                             f"{getattr(log, 'path', '')} (rank {max(vals)})")
    return top, where


def infer_world_size(override: Optional[int] = None, trace_worlds: Iterable[int] = (), dumps: Iterable[Any] = (),
                     stderr_logs: Iterable[Any] = (), nccl_logs: Iterable[Any] = (),
                     statements: Iterable[tuple[str, dict]] = ()) -> WorldSize:
    """The world size and its source (module docstring). `statements`: (file, row) pairs from
    parsers.launch_config.size_statements."""
    dumps, stderr_logs, nccl_logs = list(dumps), list(stderr_logs), list(nccl_logs)
    warnings: list[str] = []
    d_size, d_src, d_top, d_where = _dump_world(dumps)
    s_top, s_where = _seen_elsewhere(stderr_logs, nccl_logs)
    top, top_where = (d_top, d_where) if d_top >= s_top else (s_top, s_where)
    worlds = sorted({int(w) for w in trace_worlds if w})
    if override:
        return WorldSize(int(override), "given (--world-size)")
    size, src = None, ""
    if worlds:
        size, src = worlds[-1], "the profiler traces' distributedInfo"
        if len(worlds) > 1:
            warnings.append(f"traces disagree on the world size: {worlds}; using {size}")
    elif d_size:
        size, src = d_size, d_src
    else:
        size, src = _stated(list(statements))
    if size and top >= size:
        warnings.append(f"world size {size} ({src}) is smaller than rank {top} seen in {top_where}; "
                        f"using {top + 1}")
        size, src = top + 1, f"rank {top} seen in {top_where}, above the stated size"
    if size:
        return WorldSize(size, src, False, warnings)
    if top >= 0:
        return WorldSize(top + 1, f"at least: the largest rank seen is {top}, in {top_where}", True, warnings)
    return WorldSize(None, "", False, warnings)
