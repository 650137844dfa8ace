"""load_job(paths) → Job: discover inputs, parse every rank (in parallel workers), report what was read."""
from __future__ import annotations

import os
from functools import partial
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from analyzer.load.damage import CutDamage, assess_job, drop_excluded
from analyzer.load.engine import Engine, LocalEngine
from parsers.discover import FR_DUMP, KINETO, MEMORY_SNAPSHOT, NCCL_LOG, NCCL_RAS, STDERR, discover, known_non_input
from parsers.errors import EmptyInput, InputError
from parsers.table import Table

if TYPE_CHECKING:  # the trace path's modules (pandas) are imported where traces are read, not for logs alone
    import pandas as pd

    from analyzer.rank.summary import RankLanes, RankSummary

READ, SALVAGED, SKIPPED, FAILED = "read", "salvaged", "skipped", "failed"
#: marks a worker's answer for a trace that holds nothing to analyse (listed as skipped, not failed)
EMPTY = "\x00empty\x00"


@dataclass
class FileRecord:
    """What happened to one input file."""

    path: str
    kind: str
    status: str  # read | salvaged | skipped | failed
    message: str = ""
    rank: Optional[int] = None


@dataclass
class Job:
    """Everything read from one run folder: per-rank summaries and metrics, logs, dumps, and the input report.

    ``traces`` holds one compact RankSummary per rank (analyzer/rank/summary.py), never a rank's activity table;
    :meth:`lanes` and :meth:`full_trace` read more of a rank back when a renderer needs it (docs/scale.md).
    """

    files: list[FileRecord]
    traces: dict[int, RankSummary]
    #: per rank and step (a pandas DataFrame); an empty Table when the job has no traces (parsers/table.py)
    step_metrics: "pd.DataFrame | Table"
    nccl_logs: list[Any] = field(default_factory=list)
    fr_dumps: list[Any] = field(default_factory=list)
    world_size: Optional[int] = None
    missing_ranks: list[int] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: one NcclRas (parsers/nccl_ras.py) per saved NCCL RAS report
    ras_reports: list[Any] = field(default_factory=list)
    #: one StderrLog (parsers/torch_stderr.py) per stderr file, and per NCCL log that also holds stderr lines
    stderr_logs: list[Any] = field(default_factory=list)
    #: the CUDA caching allocator's snapshots (parsers/memory_snapshot.py), for the memory section
    memory_snapshots: list[Any] = field(default_factory=list)
    #: the jobs found among the traces when there were several (docs/api.md): label, ranks, selected, ...
    jobs: list[dict] = field(default_factory=list)
    #: traces cut off mid-write: what each lost and which of its steps the metrics leave out (analyzer/load/damage.py)
    damage: dict[int, CutDamage] = field(default_factory=dict)
    #: results of expensive analyses of this job, computed once (e.g. the cross-rank matching for the report and its plots)
    cache: dict = field(default_factory=dict, repr=False, compare=False)
    #: where the per-rank work ran, and per rank the handle of its interval sets kept there (RankLanes)
    engine: Any = field(default=None, repr=False, compare=False)
    lane_handles: dict = field(default_factory=dict, repr=False, compare=False)
    #: where world_size came from, in words (analyzer/load/world.py); "" when nothing showed it
    world_size_source: str = ""
    #: files passed over without a line: documentation, scripts, a fixture's ground truth (parsers/discover.py)
    ignored: list[str] = field(default_factory=list)

    @property
    def ranks(self) -> list[int]:
        return sorted(self.traces)

    def lanes(self, windows: dict[int, tuple[int, int]]) -> dict[int, dict]:
        """Per rank: its compute / comm / memcpy interval sets clipped to the window (lo, hi) given for it (own
        clock), read from where the rank was parsed (ranks held as full traces are left out)."""
        return self.on_ranks(_clip_lanes, windows, full_traces=False)

    def on_ranks(self, fn: Callable[[Optional[RankLanes], Any], Any], args: dict[int, Any],
                 full_traces: bool = True) -> dict[int, Any]:
        """Per rank in ``args``: ``fn(lanes, arg)`` run where the rank's interval sets (RankLanes) are kept, all
        in one engine call; only the answers travel. ``fn`` must be a module-level function (it is pickled).
        A rank held as a full trace (jobs built in Python) is answered here from its activity."""
        out: dict[int, Any] = {}
        far = [r for r in args if r in self.lane_handles]
        if full_traces and args:
            from analyzer.rank.summary import RankSummary
        for r in args if full_traces else ():
            t = self.traces.get(r)
            if r not in self.lane_handles and t is not None and not isinstance(t, RankSummary):
                out[r] = _answer_here(t, fn, args[r])
        if far and self.engine is not None:
            got = self.engine.query(fn, [self.lane_handles[r] for r in far], [args[r] for r in far])
            out.update(zip(far, got))
        return out

    def full_trace(self, rank: int):
        """The rank's whole KinetoTrace, parsed again from its file (for callers that need every event)."""
        return self.traces[rank].full()

    def count(self, status: str) -> int:
        return sum(1 for f in self.files if f.status == status)


def ask_ranks(job: Any, fn: Callable[[Optional[RankLanes], Any], Any], args: dict[int, Any]) -> dict[int, Any]:
    """:meth:`Job.on_ranks` for any job object: one built in Python without an engine (full traces) is
    answered here from each trace's activity."""
    if hasattr(job, "on_ranks"):
        return job.on_ranks(fn, args)
    return {r: _answer_here(job.traces[r], fn, a) for r, a in args.items() if r in job.traces}


def _answer_here(trace: Any, fn: Callable[[Optional[RankLanes], Any], Any], arg: Any) -> Any:
    """``fn`` on a full trace's interval sets, computed in this process."""
    from analyzer.rank.metrics import kind_sets
    from analyzer.rank.summary import lanes_of
    return fn(lanes_of(kind_sets(trace)), arg)


def _parse_trace(path: str, comm_kernels: tuple = ()) -> tuple[tuple[Optional[RankSummary], str],
                                                                    Optional[RankLanes]]:
    """Worker: parse one trace and do all of its rank-local work; ((summary, error), lanes) — the summary
    travels back, the lanes stay with the worker's engine (analyzer/load/engine.py).

    ``comm_kernels``: the user's communication-kernel patterns ([tool.analyze] comm-kernels, already validated).
    """
    from analyzer.rank.summary import summarise
    from parsers.kineto import load_trace
    try:
        from parsers.comm_kernels import table_for
        trace = load_trace(path, comm_kernels=table_for(comm_kernels), refuse_empty=True)
    except EmptyInput as exc:
        return (None, EMPTY + exc.reason), None
    except InputError as exc:
        return (None, exc.reason), None
    except Exception as exc:  # a parser bug must not sink the other ranks
        return (None, f"internal error while parsing ({type(exc).__name__}: {exc})"), None
    try:
        summary, lanes = summarise(trace)
        summary.comm_kernels = comm_kernels  # a later re-read classifies kernels the same way
    except Exception as exc:  # noqa: BLE001 - an analysis bug on one rank must not sink the others
        return (None, f"internal error while summarising ({type(exc).__name__}: {exc})"), None
    return (summary, ""), lanes


def _clip_lanes(lanes: Optional[RankLanes], window: tuple[int, int]) -> dict:
    """Query run where a rank's lanes are kept: the sets clipped to one window."""
    if lanes is None:
        return {}
    return lanes.clipped(int(window[0]), int(window[1]))


def _parse_other(kind: str, path: str) -> tuple[Any, str]:
    """Parse an NCCL log or Flight Recorder dump with its parser; failures become messages."""
    try:
        if kind == NCCL_LOG:
            from parsers.nccl_log import parse_nccl_log
            return parse_nccl_log(path), ""
        if kind == NCCL_RAS:
            from parsers.nccl_ras import parse_ras
            return parse_ras(path), ""
        from parsers.flight_recorder import load_dump
        return load_dump(path), ""
    except InputError as exc:
        return None, exc.reason
    except Exception as exc:
        return None, f"internal error while parsing ({type(exc).__name__}: {exc})"


def _parse_snapshot(path: str) -> tuple[Any, str]:
    """Parse an allocator snapshot through the restricted unpickler; failures become messages."""
    try:
        from parsers.memory_snapshot import load_snapshot
        return load_snapshot(path), ""
    except InputError as exc:
        return None, exc.reason
    except Exception as exc:  # noqa: BLE001 - a parser bug must not sink the other files
        return None, f"internal error while parsing ({type(exc).__name__}: {exc})"


def _parse_stderr(path: str) -> tuple[Any, str]:
    """Worker: parse one stderr file (or the stderr lines of an NCCL log); failures become messages."""
    try:
        from parsers.torch_stderr import parse_stderr
        return parse_stderr(path), ""
    except InputError as exc:
        return None, exc.reason
    except Exception as exc:  # a parser bug must not sink the other files
        return None, f"internal error while parsing ({type(exc).__name__}: {exc})"


#: stderr warnings that mean part of the file's text was lost (the file is then "salvaged", not "read")
_STDERR_DAMAGE = ("cut to that length", "not UTF-8", "NUL bytes", "reading stopped")


def _load_stderr(found: list, engine: Engine, records: list[FileRecord], warnings: list[str]) -> list[Any]:
    """Parse stderr files, and NCCL logs for their stderr lines, in the worker pool; record the stderr files.

    An NCCL log keeps its one `nccl_log` record; its StderrLog joins `Job.stderr_logs` only when it found something.
    """
    paths = [f.path for f in found if f.kind == STDERR]
    also = [f.path for f in found if f.kind == NCCL_LOG]  # a combined log: NCCL lines and tracebacks together
    logs: list[Any] = []
    for i, (log, err) in enumerate(engine.map(_parse_stderr, paths + also)):
        path, own = (paths + also)[i], i < len(paths)
        if log is None:
            if own:
                records.append(FileRecord(path, STDERR, FAILED, err))
            else:
                warnings.append(f"{path}: its stderr lines could not be read ({err})")
            continue
        if not own and log.empty:
            continue
        logs.append(log)
        warnings.extend(log.warnings)
        if own:
            damaged = any(d in w for w in log.warnings for d in _STDERR_DAMAGE)
            records.append(FileRecord(path, STDERR, SALVAGED if damaged else READ, "; ".join(log.warnings[:1]),
                                      log.rank))
    return logs


def default_jobs() -> int:
    """Worker count: the machine's cores."""
    return max(1, os.cpu_count() or 1)


def load_job(paths: list[str | Path], jobs: Optional[int] = None,
             progress: Optional[Callable[[int, int, str], None]] = None, select_job: Optional[str] = None,
             comm_kernels: Optional[list[dict]] = None, engine: Optional[Engine] = None,
             world_size: Optional[int] = None) -> Job:
    """Read every input under ``paths``; never raises for bad files (they are reported in ``Job.files``).

    Per-file parsing runs on ``engine`` (analyzer/load/engine.py: the local pool of ``jobs`` processes by
    default, or Dask); the report is the same whichever runs it.

    When the traces belong to several jobs (analyzer/load/jobs.py) only one is analysed: ``select_job`` (a
    label, number or folder), else the one with the most ranks; the others' files are listed as skipped.
    Raises ValueError when ``select_job`` names none of them.

    ``comm_kernels``: extra communication-kernel patterns ({pattern, op, family} dicts, as in [tool.analyze]
    comm-kernels; parsers/comm_kernels.py), tried before the built-in families.

    ``world_size``: the user's world size (--world-size); otherwise it is inferred from the inputs
    (analyzer/load/world.py) and ``Job.world_size_source`` says from what.
    """
    found, problems = discover(paths)
    records: list[FileRecord] = [FileRecord(p, "unknown", FAILED, msg) for p, msg in problems]
    trace_paths = [f.path for f in found if f.kind == KINETO]
    ignored = [f.path for f in found if known_non_input(f)]  # README, scripts, a fixture's ground truth
    for f in found:
        if f.kind not in (KINETO, NCCL_LOG, NCCL_RAS, FR_DUMP, STDERR, MEMORY_SNAPSHOT) and not known_non_input(f):
            records.append(FileRecord(f.path, f.kind, SKIPPED, f.reason))

    if engine is None:
        engine = LocalEngine(default_jobs() if jobs is None else max(1, jobs))
    parse = partial(_parse_trace, comm_kernels=tuple(comm_kernels or ()))
    shared: list = []  # the job's SharedValues, made when the first trace arrives

    def receive(r: tuple) -> tuple:
        if not shared:
            from analyzer.rank.summary import SharedValues
            shared.append(SharedValues())
        return shared[0].share(r[0]), r[1]
    if trace_paths:  # imported before any worker is forked, so the workers share them (pandas, the parser)
        # instead of each importing them again; this process needs them anyway (summaries, cross-rank stage)
        from analyzer.rank import summary as _summary  # noqa: F401
        from parsers import kineto as _kineto  # noqa: F401
    results, handles = engine.map_keep(parse, trace_paths, progress, receive=receive)
    found_jobs, other_job, keep_folder = _split_jobs(trace_paths, results, select_job)
    traces: dict[int, RankSummary] = {}
    lane_handles: dict[int, Any] = {}
    metrics: list = []
    warnings: list[str] = []
    unranked: list[tuple[str, RankSummary, Any]] = []
    for path, (trace, err), handle in zip(trace_paths, results, handles):
        m = trace.step_metrics if trace is not None else None
        if trace is None:
            empty = err.startswith(EMPTY)
            records.append(FileRecord(path, KINETO, SKIPPED if empty else FAILED, err[len(EMPTY):] if empty else err))
            continue
        if path in other_job:
            records.append(FileRecord(path, KINETO, SKIPPED, other_job[path], trace.rank))
            continue
        warnings.extend(trace.warnings)
        status = SALVAGED if trace.salvage else READ
        msg = trace.warnings[0] if trace.salvage else ""
        if trace.rank is None:
            unranked.append((path, trace, handle))
            records.append(FileRecord(path, KINETO, status, msg))
            continue
        if trace.rank in traces:
            records.append(FileRecord(path, KINETO, SKIPPED,
                                      f"duplicate rank {trace.rank}: already read from {traces[trace.rank].path}",
                                      trace.rank))
            continue
        traces[trace.rank] = trace
        lane_handles[trace.rank] = handle
        metrics.append(m)
        records.append(FileRecord(path, KINETO, status, msg, trace.rank))
    for path, trace, handle in unranked:  # no rank anywhere: give the next free number and say so
        r = 0
        while r in traces:
            r += 1
        trace.renumber(r)
        traces[r] = trace
        lane_handles[r] = handle
        metrics.append(trace.step_metrics)
        warnings.append(f"{path}: no rank in the trace or its file name; numbered rank {r}")
        for rec in records:
            if rec.path == path:
                rec.rank = r

    logs, dumps, ras, snapshots = [], [], [], []
    for f in found:
        if f.kind == MEMORY_SNAPSHOT and (keep_folder is None or _under(f.path, keep_folder)):
            snap, err = _parse_snapshot(f.path)
            records.append(FileRecord(f.path, f.kind, FAILED, err) if snap is None else
                           FileRecord(f.path, f.kind, READ, "; ".join(snap.warnings[:1]), snap.rank))
            if snap is not None:
                snapshots.append(snap)
                warnings.extend(snap.warnings)
        if f.kind in (NCCL_LOG, NCCL_RAS, FR_DUMP):
            if keep_folder is not None and not _under(f.path, keep_folder):
                records.append(FileRecord(f.path, f.kind, SKIPPED, "in another job's folder; this run analyses "
                                          f"{keep_folder}"))
                continue
            value, err = _parse_other(f.kind, f.path)
            if value is None:
                records.append(FileRecord(f.path, f.kind, FAILED, err))
                continue
            (logs if f.kind == NCCL_LOG else ras if f.kind == NCCL_RAS else dumps).append(value)
            w = list(getattr(value, "warnings", []) or [])
            warnings.extend(w)
            records.append(FileRecord(f.path, f.kind, READ, "; ".join(w[:1]), getattr(value, "rank", None)))
    dumps = _one_dump_per_rank(dumps, records, warnings)

    mine = found
    if keep_folder is not None:  # another job's stderr files stay out (listed as skipped)
        mine = [f for f in found if _under(f.path, keep_folder)]
        records += [FileRecord(f.path, f.kind, SKIPPED, f"in another job's folder; this run analyses {keep_folder}")
                    for f in found if f.kind == STDERR and not _under(f.path, keep_folder)]
    stderr_logs = _load_stderr(mine, engine, records, warnings)

    worlds = {t.world_size for t in traces.values() if t.world_size}
    ws = _world_size(world_size, worlds, dumps, stderr_logs, logs)
    warnings.extend(ws.warnings)
    world = world_size or (max(worlds) if worlds else None)  # the ranks a trace is expected from
    missing = sorted(set(range(world)) - set(traces)) if world and traces else []
    records.sort(key=lambda r: r.path)
    step_metrics = _job_metrics(metrics)
    for t in traces.values():  # the job-wide table holds them now
        t.step_metrics = None
    damage = assess_job(traces)
    out = Job(records, dict(sorted(traces.items())), drop_excluded(step_metrics, damage), logs, dumps, ws.size,
              missing, warnings, stderr_logs=stderr_logs, damage=damage, engine=engine, lane_handles=lane_handles,
              world_size_source=ws.source)
    out.jobs = found_jobs
    out.ras_reports = ras
    out.ignored = ignored
    out.memory_snapshots = snapshots
    return out


def _one_dump_per_rank(dumps: list, records: list[FileRecord], warnings: list[str]) -> list:
    """The dumps kept (analyzer/load/dump_ranks.py); the records of the others say why (INPUT004)."""
    from analyzer.load.dump_ranks import one_dump_per_rank
    kept, renumbered, skipped = one_dump_per_rank(dumps)
    by_path = {rec.path: rec for rec in records}
    for (d, why), status in [(x, READ) for x in renumbered] + [(x, SKIPPED) for x in skipped]:
        rec = by_path.get(str(d.path))
        if rec is not None:
            rec.message, rec.rank, rec.status = why, d.rank, status
        warnings.append(f"{d.path}: {why}")
    return kept


def _job_metrics(metrics: list) -> "pd.DataFrame | Table":
    """The ranks' step metrics as one table sorted by rank and step; an empty Table without traces (no pandas)."""
    if not metrics:
        return Table()
    import pandas as pd
    return pd.concat(metrics, ignore_index=True).sort_values(["rank", "step"], kind="stable").reset_index(drop=True)


def _world_size(override: Optional[int], trace_worlds: set, dumps: list, stderr_logs: list, logs: list):
    """The world size and its source (analyzer/load/world.py), from every input read, stated sizes included."""
    from analyzer.load.world import infer_world_size
    from parsers.launch_config import size_statements
    statements = [] if override or trace_worlds else [
        (str(x.path), row) for x in stderr_logs for row in size_statements(str(x.path))]
    return infer_world_size(override, trace_worlds, dumps, stderr_logs, logs, statements)


def _under(path: str, folder: str) -> bool:
    p = os.path.abspath(path)
    return p == folder or p.startswith(folder.rstrip(os.sep) + os.sep)


def _split_jobs(paths: list[str], results: list, wanted: Optional[str]) -> tuple[list[dict], dict[str, str],
                                                                                 Optional[str]]:
    """(the jobs found as dicts, {path of a trace of another job: why skipped}, folder of the chosen job when
    jobs were told apart by sub-folder) — empty when the traces are one job."""
    from analyzer.load.jobs import OptionError, TraceInfo, choose, group_jobs
    infos = []
    for path, (trace, _) in zip(paths, results):
        if trace is None:
            continue
        infos.append(TraceInfo(path, trace.rank, trace.world_size, trace.activity_start, trace.activity_end))
    groups = group_jobs(infos)
    if len(groups) < 2:
        if wanted is not None and str(wanted).strip() not in ("", "1", "job"):
            raise OptionError(f"--job {wanted!r}: the inputs hold one job only")
        return [], {}, None
    sel = choose(groups, wanted)
    why = ", ".join(sorted({w for g in groups for w in g.told_by}))
    skipped = {p: f"belongs to another job ({g.label}; told apart by {why}); this run analyses {sel.label} "
                  f"(choose with --job)" for g in groups if g is not sel for p in g.paths}
    folder = sel.folder if "sub-folder" in sel.told_by else None
    return [g.to_dict(g is sel) for g in groups], skipped, folder
