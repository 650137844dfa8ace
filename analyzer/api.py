"""The Python API: ``analyzer.load("traces/")`` → an :class:`Analysis` with the report and its tables.

The command line is a thin layer over it (analyzer/cli.py). Documented with a worked example in docs/api.md;
every call shown there runs as a test (tests/test_api_docs.py).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional, Union

if TYPE_CHECKING:
    import pandas as pd


PathLike = Union[str, "os.PathLike[str]"]


class InputPathError(FileNotFoundError):
    """A path given to load() does not exist (a typo): nothing is analysed."""

    def __init__(self, missing: list[str]):
        self.missing = missing
        super().__init__(f"no such file or folder: {', '.join(missing)}")


@dataclass(repr=False)
class Analysis:
    """One analysed job. Tables are pandas DataFrames built on first use; times are µs, bandwidths GB/s,
    shares fractions 0-1, and "aligned" times have each rank's clock offset applied (docs/api.md)."""

    job: Any
    report: dict
    fail_on: str = "error"
    _cache: dict = field(default_factory=dict, repr=False)
    #: whether load() started the job's engine (then close() stops it)
    _owns_engine: bool = field(default=False, repr=False)

    def __repr__(self) -> str:
        """A few lines for a notebook or a REPL: verdict, headline numbers, the top findings (the tables and the
        whole report stay behind their attributes)."""
        from analyzer.render.notebook import analysis_repr
        return analysis_repr(self.report)

    def _repr_html_(self) -> str:
        """What Jupyter shows for an Analysis: the same summary as a small HTML table (escaped)."""
        from analyzer.render.notebook import analysis_repr_html
        return analysis_repr_html(self.report)

    def _get(self, key: str, build: Callable[[], Any]) -> Any:
        if key not in self._cache:
            self._cache[key] = build()
        return self._cache[key]

    @property
    def analysed(self) -> bool:
        """False when no input could be read at all (the report's verdict says why)."""
        return bool(self.report.get("analysed", True))

    @property
    def verdict(self) -> str:
        return str(self.report.get("verdict", ""))

    @property
    def steps(self) -> pd.DataFrame:
        """Per rank and step: step time, compute, comm, overlap, exposed comm, idle, memcpy (µs), shares, and the
        step window on the aligned clock (start_us, end_us)."""
        from analyzer.report.views import steps_frame
        return self._get("steps", lambda: steps_frame(self.job, self.report))

    @property
    def collectives(self) -> pd.DataFrame:
        """Per collective instance and member rank: group, seq, op, bytes, aligned start/end, wait, member
        duration, the instance's transfer time and bus bandwidth."""
        from analyzer.report.views import collectives_frame
        return self._get("collectives", lambda: collectives_frame(self.job, self.report))

    @property
    def ranks(self) -> pd.DataFrame:
        """Per rank: file, host, GPU, summed metrics and shares, straggler statistics."""
        from analyzer.report.views import ranks_frame
        return self._get("ranks", lambda: ranks_frame(self.report))

    @property
    def groups(self) -> pd.DataFrame:
        """Per process group: ranks, size, hosts, span, inferred role with its evidence, op counts."""
        from analyzer.report.views import groups_frame
        return self._get("groups", lambda: groups_frame(self.report))

    @property
    def mesh(self) -> Any:
        """The job's shape (analyzer.layout.Mesh): dimensions with sizes and roles, each rank's coordinate, each
        group's dimension and role with evidence; ``pp_neighbours(rank)``, ``tp_partners(rank)``,
        ``dp_peers(rank)``, ``dimension_of(group)``, ``shape_text()``, ``to_dict()`` (the report's ``mesh``)."""
        from analyzer.layout import mesh_of
        return mesh_of(self.job)

    @property
    def kernels(self) -> pd.DataFrame:
        """Per rank and kernel name (HTA's kernel breakdown, inside the step windows): kind, count, total /
        mean / min / max / std µs, share of the rank's kernel time."""
        from analyzer.report.views import kernels_frame
        return self._get("kernels", lambda: kernels_frame(self.job))

    @property
    def idle(self) -> pd.DataFrame:
        """Per rank and step: idle µs split into host_wait, peer_wait (host in a collective call: waiting on
        other ranks), kernel_wait (launch latency) and other; the parts add up to idle_us."""
        from analyzer.report.views import idle_frame
        return self._get("idle", lambda: idle_frame(self.job))

    @property
    def memory(self) -> pd.DataFrame:
        """Per rank, device and traced step: allocated at the step's start and end, peak allocated, reserved then
        and the step's peak reserved (bytes), the operator of the peak, event count, device capacity (profile_memory
        traces; empty without memory events)."""
        from analyzer.report.memory import memory_frame
        return self._get("memory", lambda: memory_frame(self.report.get("memory") or {}))

    @property
    def findings(self) -> list[dict]:
        """The ranked findings (root causes; what each explains is under its ``consequences``)."""
        return list(self.report.get("findings") or [])

    @property
    def findings_table(self) -> pd.DataFrame:
        """The findings as a table: one row each, subject fields as columns."""
        from analyzer.report.views import findings_frame
        return findings_frame(self.report)

    def render(self, fmt: str = "text", fail_on: Optional[str] = None, color: bool = False,
               verbose: bool = False) -> str:
        """The report as text, json, markdown, html, junit, sarif or github annotations."""
        from analyzer.render.formats import render
        return render(fmt, self.report, self.job, fail_on or self.fail_on, color, verbose)

    def timeline_input(self):
        """What the merged timeline draws: each rank's events on the aligned clock, and the collective members."""
        from analyzer.report.views import timeline_input
        return self._get("timeline_input", lambda: timeline_input(self.job, self.report))

    def timeline_source(self):
        """What write_timeline streams from: each rank's events kept where it was read (views.TimelineSource)."""
        from analyzer.report.views import timeline_source
        return timeline_source(self.job, self.report)

    def write_timeline(self, path: PathLike, max_events: Optional[int] = None) -> dict:
        """Write one Chrome/Perfetto trace of every rank on the aligned clock (``.gz`` compresses), streamed
        rank by rank; returns its metadata (event counts, what was thinned)."""
        from analyzer.render.timeline import DEFAULT_MAX_EVENTS, write_timeline
        return write_timeline(path, self.report, self.timeline_source(),
                              DEFAULT_MAX_EVENTS if max_events is None else max_events)

    def close(self) -> None:
        """Stop the engine this analysis started (a Dask LocalCluster; the pool's scratch folder). The report
        stays; figures and the timeline, which read ranks back through the engine, need it open."""
        eng = getattr(self.job, "engine", None)
        if eng is not None and self._owns_engine:
            eng.close()

    def __enter__(self) -> "Analysis":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def failing(self, fail_on: Optional[str] = None) -> list[dict]:
        """The findings at or above ``fail_on`` (error | warning | never)."""
        from analyzer.render.common import failing
        return failing(self.report, fail_on or self.fail_on)


def _paths(paths: Union[PathLike, Iterable[PathLike]]) -> list[str]:
    if isinstance(paths, (str, os.PathLike)):
        return [os.fspath(paths)]
    return [os.fspath(p) for p in paths]


def check_paths(paths: list[str]) -> None:
    """Raise InputPathError when a path does not exist (a mistyped path must not yield a report)."""
    missing = [p for p in paths if not Path(p).exists()]
    if missing:
        raise InputPathError(missing)


def load(paths: Union[PathLike, Iterable[PathLike]], *, job: Optional[str] = None, jobs: Optional[int] = 1,
         gpus_per_node: Optional[int] = None, select: Optional[list[str]] = None,
         ignore: Optional[list[str]] = None, thresholds: Optional[dict[str, float]] = None,
         config: Optional[PathLike] = None, rule_config: Any = None, baseline: Optional[PathLike] = None,
         regression_thresholds: Optional[dict[str, float]] = None, fail_on: str = "error",
         progress: Optional[Callable[[int, int, str], None]] = None, dask: Optional[str] = None,
         engine: Any = None, world_size: Optional[int] = None) -> Analysis:
    """Read and analyse one job from trace files and folders.

    ``job``: which job when the inputs hold several (label, number or folder; default the one with the most
    ranks). ``jobs``: parser worker processes (default 1; the CLI uses every core). ``select`` / ``ignore`` /
    ``thresholds`` / ``config``: rule selection as with --select/--ignore/--threshold/--config (no config file
    is read unless ``config`` is given). ``baseline``: an earlier run's folder or saved JSON report.
    Raises InputPathError for a path that does not exist, ValueError for a ``job`` that matches none, and
    analyzer.report.baseline.BaselineError for an unreadable baseline.
    ``dask``: run the per-rank work on Dask — "local" (a LocalCluster of ``jobs`` workers) or a scheduler
    address (default $ANALYZE_DASK_SCHEDULER, else local processes); ``engine``: an engine of your own
    (analyzer.load.engine), left open. An engine this call starts is closed by :meth:`Analysis.close`.
    ``world_size``: the job's world size, when the inputs do not show it (a rank that left nothing is then
    still counted); by default it is inferred from the inputs and ``report["job"]["world_size_source"]`` says
    from what (docs/hang-analysis.md, "World size").
    """
    from analyzer.load.job import load_job
    from analyzer.load.jobs import OptionError
    from analyzer.report.assemble import Options, run_analysis

    ps = _paths(paths)
    check_paths(ps)
    if rule_config is None:
        from rules.config import build_config
        rule_config = build_config(select, ignore, [f"{k}={v}" for k, v in (thresholds or {}).items()],
                                   os.fspath(config) if config else None, isolated=config is None)
    options = Options(gpus_per_node=gpus_per_node, rule_config=rule_config)
    comm_kernels = getattr(rule_config, "comm_kernels", None)  # [tool.analyze] comm-kernels (docs/metrics.md)
    owns = engine is None
    if engine is None:
        from analyzer.load.engine import default_workers, make_engine
        engine = make_engine(default_workers() if jobs is None else max(1, jobs), dask)
    if world_size is not None and not (isinstance(world_size, int) and 0 < world_size <= 1 << 20):
        raise OptionError(f"world_size must be an integer in 1..{1 << 20}, not {world_size!r}")
    loaded = load_job(ps, jobs=jobs, progress=progress, select_job=job, comm_kernels=comm_kernels, engine=engine,
                      world_size=world_size)
    report = run_analysis(loaded, options)
    _add_about(report, loaded, ps)
    if baseline is not None and report.get("analysed", True):
        _apply_baseline(report, os.fspath(baseline), options, jobs, regression_thresholds or {})
    return Analysis(loaded, report, fail_on, _owns_engine=owns)


def job_label(loaded: Any, paths: list[str]) -> Optional[str]:
    """What to call the job in a title: the chosen job's label when the inputs held several, else the folder
    given (or the folder holding the files given)."""
    sel = next((j for j in getattr(loaded, "jobs", None) or [] if j.get("selected")), None)
    if sel is not None and sel.get("label"):
        return str(sel["label"])
    dirs = [os.path.abspath(p) if os.path.isdir(p) else os.path.dirname(os.path.abspath(p)) for p in paths]
    if not dirs:
        return None
    try:
        common = os.path.commonpath(dirs)
    except ValueError:  # different drives
        return None
    return os.path.basename(common.rstrip(os.sep)) or common


def _add_about(report: dict, loaded: Any, paths: list[str]) -> None:
    """The report's ``about`` block (inputs, job identity, versions, when analysed): analyzer/report/about.py.
    Kept in the JSON right after ``tool`` so a reader of the file meets it first."""
    from analyzer.report.about import about_section
    about = about_section(loaded, paths, job_label(loaded, paths))
    items = list(report.items())
    at = next((i + 1 for i, (k, _) in enumerate(items) if k == "tool"), len(items))
    report.clear()
    report.update(items[:at] + [("about", about)] + items[at:])


def _apply_baseline(report: dict, source: str, options: Any, jobs: Optional[int], thresholds: dict) -> None:
    """Compare with the baseline run (findings BASE00x); --select/--ignore cover those rules too."""
    from analyzer.load.job import load_job
    from analyzer.report.assemble import run_analysis, verdict
    from analyzer.report.baseline import apply_baseline, load_baseline
    kernels = getattr(options.rule_config, "comm_kernels", None)
    base = load_baseline(source, lambda p: run_analysis(load_job(p, jobs=jobs, comm_kernels=kernels), options))
    apply_baseline(report, base, source, thresholds)
    cfg = options.rule_config
    if cfg is not None and hasattr(cfg, "enabled"):
        report["findings"] = [f for f in report["findings"] if cfg.enabled(str(f.get("id", "")))]
        report["verdict"] = verdict(report["findings"])


__all__ = ["load", "Analysis", "InputPathError", "check_paths"]


def compare(runs: Iterable[PathLike], **options: Any) -> Any:
    """Compare several runs (folders or --record files): scaling efficiency, its factors, the table of every
    configuration (analyzer.scaling.session.compare; docs/scaling.md)."""
    from analyzer.scaling.session import compare as _compare
    return _compare(runs, loader=load, check_paths=check_paths, **options)
