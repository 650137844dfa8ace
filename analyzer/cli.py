"""The `analyze` command: read a run folder, analyse it, write the report in one or more formats, exit by severity."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Callable, Optional

from analyzer import __version__

from analyzer.render.formats import FORMATS  # noqa: E402  (re-exported: analyzer.cli.FORMATS)
EXIT_OK, EXIT_FINDINGS, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3

EXAMPLES = """\
examples:
  analyze traces/                           summary, ranked findings and tables on the terminal
  analyze traces/ --format json -o r.json   the report as JSON (schema: docs/json-schema.md)
  analyze traces/ --html r.html --markdown r.md --junit r.xml --sarif r.sarif
                                            several formats at once, one file each (text still on stdout)
  analyze traces/ --json - | jq .verdict    one document on stdout (the text report steps aside)
  analyze traces/ --timeline merged.json.gz every rank on one aligned timeline (Perfetto / chrome://tracing)
  analyze runs/ --job run2                  the inputs hold several jobs: pick one
  analyze traces/ --format github           GitHub Actions annotations (::error file=...::...)
  analyze traces/ --baseline main-traces/   compare with an earlier run; a slowdown fails the run
  analyze traces/ --fail-on warning         exit 1 on warnings too (default: errors only)
  analyze --compare runs/w8 runs/w32 runs/w64   scaling efficiency across runs and where it went (docs/scaling.md)

exit codes (docs/exit-codes.md):
  0  no finding reaches --fail-on (default error; warning; never)
  1  at least one finding reaches --fail-on
  2  usage error (also: a path that does not exist), an output file could not be written,
     the baseline could not be read, or nothing could be analysed
  3  internal error: a bug in analyze (never a finding); stderr says so
"""


def _positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (a worker count, GPUs per node)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (rule options are added by rules.config)."""
    p = argparse.ArgumentParser(
        prog="analyze",
        description="Diagnose a distributed training job from what its ranks left behind: PyTorch profiler "
                    "traces, NCCL debug logs, watchdog stderr and Flight Recorder dumps.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="*", help="files or folders (searched recursively)")
    out = p.add_argument_group("output")
    out.add_argument("--format", choices=FORMATS, default=None, help="format of stdout / -o (default text)")
    out.add_argument("-o", "--output", metavar="FILE", help="write the --format output to FILE instead of stdout")
    for fmt in FORMATS:
        out.add_argument(f"--{fmt}", dest=f"out_{fmt}", metavar="FILE",
                         help=f"also write the {fmt} report to FILE")
    out.add_argument("--timeline", metavar="FILE",
                     help="also write one Chrome/Perfetto trace of every rank on the aligned clock "
                          "(FILE.json or FILE.json.gz; open in ui.perfetto.dev or chrome://tracing)")
    from analyzer.render.timeline_limit import DEFAULT_MAX_EVENTS
    out.add_argument("--timeline-max-events", type=_positive_int, default=None, metavar="N",
                     help=f"at most N events in the timeline, metadata included (default {DEFAULT_MAX_EVENTS:,}): "
                          "past it ranks are sampled and the shortest events left out, and the file says what")
    out.add_argument("-v", "--verbose", action="store_true",
                     help="list every skipped input file (default: counts by reason and the first few)")
    out.add_argument("--fail-on", choices=("error", "warning", "never"), default="error",
                     help="lowest finding severity that makes the exit code 1 (default error)")
    out.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                     help="colour the text output: auto = only on a terminal and without NO_COLOR (default)")
    base = p.add_argument_group("baseline")
    base.add_argument("--baseline", metavar="DIR_OR_JSON",
                      help="compare against an earlier run: its trace folder or a saved --format json report")
    base.add_argument("--regression-threshold", metavar="NAME=VALUE", action="append", default=[],
                      help="override a regression threshold, e.g. step_time=0.1 or busbw=20%% "
                           "(defaults in docs/json-schema.md)")
    p.add_argument("--jobs", type=_positive_int, default=None,
                   help="at most this many worker processes for parsing (default: all cores; fewer, or none, when the input "
                        "is too small to pay for them: docs/performance.md); with --dask local, the cluster's workers")
    p.add_argument("--dask", metavar="local|ADDRESS", default=None,
                   help="run the per-rank work on Dask (optional extra: pip install '.[dask]'): 'local' starts a "
                        "LocalCluster of --jobs workers; tcp://host:8786 uses a running scheduler whose workers "
                        "read the traces by path (default: $ANALYZE_DASK_SCHEDULER, else local processes; "
                        "docs/scale.md)")
    p.add_argument("--job", metavar="LABEL",
                   help="when the inputs hold several jobs: analyse this one (its label or number as listed, "
                        "or its folder; default: the one with the most ranks)")
    p.add_argument("--world-size", type=_positive_int, default=None, metavar="N",
                   help="the job's world size, when the inputs do not show it (by default it is inferred from "
                        "dumps, logs and stderr, and the report says from what)")
    p.add_argument("--gpus-per-node", type=_positive_int, default=None,
                   help="hosts from rank // N when neither traces nor logs name them (as TraceLens does)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress output on stderr")
    p.add_argument("--version", action="version", version=f"analyze {__version__}")
    from rules.config import add_cli_arguments
    add_cli_arguments(p)
    from analyzer.scaling.cli_compare import add_compare_arguments
    add_compare_arguments(p)
    return p


def use_color(choice: str, stream: Any) -> bool:
    """Colour on a TTY only, never with NO_COLOR set (https://no-color.org), unless forced."""
    if choice == "always":
        return True
    if choice == "never" or os.environ.get("NO_COLOR"):
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


def progress_printer(quiet: bool, stream: Any = None) -> Optional[Callable[[int, int, str], None]]:
    """A `progress(i, n, path)` callback drawing one updating line on a TTY stderr; None in CI or with --quiet."""
    stream = stream or sys.stderr
    if quiet or os.environ.get("CI") or not getattr(stream, "isatty", lambda: False)():
        return None

    def progress(i: int, n: int, path: str) -> None:
        name = _one_line(os.path.basename(path))[-40:]  # a file name must not steer the terminal
        end = "\n" if i >= n else ""
        stream.write(f"\r\033[Kreading {i}/{n} {name}{end}")
        stream.flush()
    return progress


def render(fmt: str, report: dict, job: Any = None, fail_on: str = "error", color: bool = False,
           verbose: bool = False) -> str:
    """The report in one format (kept here for callers of the old name; see analyzer.render.formats)."""
    from analyzer.render.formats import render as _render
    return _render(fmt, report, job, fail_on, color, verbose)


class UsageError(Exception):
    """Bad combination of options: message on stderr, exit code 2, no report."""


def _targets(args: argparse.Namespace) -> list[tuple[str, Optional[str]]]:
    """(format, file or None for stdout) for every output asked for; exactly one document per stream.

    The default text report goes to stdout only when nothing else was sent there: ``--html -`` alone writes
    just the HTML. The same format asked for twice on stdout is written once; two different documents on
    stdout are a usage error.
    """
    main_fmt = args.format or "text"
    explicit = [(fmt, getattr(args, f"out_{fmt}")) for fmt in FORMATS if getattr(args, f"out_{fmt}")]
    main_asked = args.output is not None or args.format is not None
    targets: list[tuple[str, Optional[str]]] = []
    to_stdout = [fmt for fmt, path in explicit if path == "-"] + (["timeline"] if args.timeline == "-" else [])
    if main_asked or not to_stdout:
        targets.append((main_fmt, None if args.output in (None, "-") else args.output))
    targets += [(fmt, None if path == "-" else path) for fmt, path in explicit]
    seen, out = set(), []
    for t in targets:
        if t not in seen:
            seen.add(t)
            out.append(t)
    docs = sorted({fmt for fmt, path in out if path is None})
    if args.timeline == "-":
        docs.append("timeline")
    if len(docs) > 1:
        raise UsageError(f"{' and '.join(docs)} would both go to stdout; send all but one to a file")
    return out


def _destinations(args: argparse.Namespace, targets: list[tuple[str, Optional[str]]]) -> list[tuple[str, str]]:
    """(option as typed, file) for every output file asked for (stdout, '-', left out)."""
    out = []
    for fmt, path in targets:
        if path is None:
            continue
        explicit = getattr(args, f"out_{fmt}", None)
        out.append((f"--{fmt}" if explicit == path else "-o", path))
    if args.timeline not in (None, "-"):
        out.append(("--timeline", args.timeline))
    return out


def check_outputs(destinations: list[tuple[str, str]]) -> list[str]:
    """One message per output file that could not be written, found before any input is read (a typo in
    ``--html`` must not cost the whole analysis first): a folder given as a file, a folder that does not exist,
    a folder or file without write permission. Nothing is created."""
    bad = []
    for opt, path in destinations:
        shown = _one_line(path)
        if not path.strip():
            bad.append(f"{opt}: empty file name")
        elif os.path.isdir(path):
            bad.append(f"{opt} {shown}: is a folder; give a file name inside it")
        else:
            parent = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(parent):
                what = "is not a folder" if os.path.exists(parent) else "does not exist"
                bad.append(f"{opt} {shown}: cannot write there: {_one_line(parent)} {what}")
            elif os.path.exists(path) and not os.access(path, os.W_OK):
                bad.append(f"{opt} {shown}: cannot write there: the file is not writable")
            elif not os.path.exists(path) and not os.access(parent, os.W_OK | os.X_OK):
                bad.append(f"{opt} {shown}: cannot write there: no permission to create files in "
                           f"{_one_line(parent)}")
    return bad


def _reports_asked(args: argparse.Namespace) -> bool:
    """Did the user ask for a report document (a file, a format, a stream) beyond the default text?"""
    return (args.output is not None or args.format is not None or args.timeline is not None
            or any(getattr(args, f"out_{fmt}") for fmt in FORMATS))


class _Stdout:
    """Writes documents to stdout; a reader that went away (``| head``) ends the writing quietly."""

    def __init__(self) -> None:
        self.closed = False

    def write(self, text: str) -> None:
        if self.closed:
            return
        try:
            write_stdout(text)
            sys.stdout.flush()
        except BrokenPipeError:
            self.closed = True
            try:  # Python flushes stdout again at exit: point it at /dev/null so that stays quiet too
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())
            except (OSError, ValueError, AttributeError):
                pass


def _one_line(x: Any) -> str:
    from analyzer.render.sanitize import text
    return text(x)


def write_stdout(text: str) -> None:
    """Write to stdout whatever its encoding (a Latin-1 or ASCII terminal gets '?' for what it cannot show)."""
    try:
        sys.stdout.write(text)
    except UnicodeEncodeError:
        enc = getattr(sys.stdout, "encoding", None) or "ascii"
        sys.stdout.flush()
        data = text.encode(enc, "replace")
        buf = getattr(sys.stdout, "buffer", None)
        if buf is not None:
            buf.write(data)
            buf.flush()
        else:
            sys.stdout.write(data.decode(enc))


def main(argv: Optional[list[str]] = None) -> int:
    """Run the command; returns the exit code (docs/exit-codes.md). A crash is exit 3, never 1 ("findings")."""
    try:
        return _run(argv)
    except KeyboardInterrupt:
        print("analyze: interrupted", file=sys.stderr)
        return 130
    except (Exception, RecursionError, MemoryError) as exc:  # noqa: BLE001 - the exit code must say "crash"
        import traceback
        print(f"analyze: internal error ({type(exc).__name__}: {_one_line(str(exc))[:500]}). This is a bug in "
              f"analyze, not a finding about the job (exit code {EXIT_INTERNAL}); please report it with the "
              "traceback below.", file=sys.stderr)
        for line in traceback.format_exc().splitlines()[-40:]:
            print("  " + _one_line(line), file=sys.stderr)
        return EXIT_INTERNAL


def _run(argv: Optional[list[str]] = None) -> int:
    """The command itself (`main` turns a crash into exit 3)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    from rules.config import config_from_args, handle_info_commands
    info = handle_info_commands(args)
    if info is not None:
        return info
    if not args.paths:
        parser.print_usage(sys.stderr)
        print("analyze: error: give at least one file or folder", file=sys.stderr)
        return EXIT_USAGE
    if args.compare:
        from analyzer.scaling.cli_compare import run_compare
        return run_compare(args, write_stdout)
    from analyzer.api import InputPathError, check_paths
    try:
        check_paths(args.paths)
        targets = _targets(args)
    except InputPathError as exc:
        print(f"analyze: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except UsageError as exc:
        print(f"analyze: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    bad_outputs = check_outputs(_destinations(args, targets))
    if bad_outputs:
        for msg in bad_outputs:
            print(f"analyze: error: {msg}", file=sys.stderr)
        return EXIT_USAGE
    from analyzer.report.baseline import parse_threshold
    thresholds = {}
    for t in args.regression_threshold:
        try:
            name, value = parse_threshold(t)
        except ValueError as exc:
            print(f"analyze: error: --regression-threshold: {exc}", file=sys.stderr)
            return EXIT_USAGE
        thresholds[name] = value
    from analyzer.load.engine import DaskUnavailable, default_workers, make_engine
    try:
        engine = make_engine(args.jobs or default_workers(), args.dask)
    except DaskUnavailable as exc:
        print(f"analyze: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (OSError, TimeoutError, ValueError) as exc:  # no scheduler at that address
        print(f"analyze: error: --dask {args.dask or ''}: cannot reach the Dask scheduler: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return _analyse_and_write(args, thresholds, engine, targets, config_from_args)
    finally:
        engine.close()


def _analyse_and_write(args: argparse.Namespace, thresholds: dict, engine: Any, targets: list,
                       config_from_args: Callable) -> int:
    """Analyse, write every output asked for, and return the exit code (the engine stays up until the end:
    the HTML figures and the timeline read the ranks back through it)."""
    from analyzer.api import load
    from analyzer.load.jobs import OptionError
    from analyzer.report.baseline import BaselineError
    try:
        analysis = load(args.paths, job=args.job, jobs=args.jobs, gpus_per_node=args.gpus_per_node,
                        rule_config=config_from_args(args), baseline=args.baseline,
                        regression_thresholds=thresholds, fail_on=args.fail_on,
                        progress=progress_printer(args.quiet), engine=engine, world_size=args.world_size)
    except BaselineError as exc:
        print(f"analyze: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except OptionError as exc:  # --job naming none of the jobs found; any other ValueError is a crash (exit 3)
        print(f"analyze: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    report = analysis.report
    if not analysis.analysed:
        print(f"analyze: error: nothing was analysed: {report.get('nothing_analysed', '')}", file=sys.stderr)
        if not _reports_asked(args):
            return EXIT_USAGE
    code = EXIT_OK
    out = _Stdout()
    if not analysis.analysed and args.output is None and args.format is None:
        # the default text report was not asked for: stderr has said why, the reports asked for say so too
        targets = [t for t in targets if t != ("text", None)]
    for fmt, path in targets:
        if fmt == "json" and path is not None:  # bytes straight to the file (no text copy of a large report)
            code = _write_json(analysis.report, path) or code
            continue
        if fmt == "html" and path is not None:  # written a piece at a time (analyzer/render/html.py)
            code = _write_html(analysis, path) or code
            continue
        color = path is None and fmt == "text" and use_color(args.color, sys.stdout)
        text = analysis.render(fmt, args.fail_on, color, args.verbose)
        if fmt != "github":  # only the annotations format may hold workflow commands
            from analyzer.render.sanitize import guard_ci_lines
            text = guard_ci_lines(text)
        if path is None:
            out.write(text)
            continue
        try:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as exc:
            print(f"analyze: error: cannot write {_one_line(path)}: {_one_line(exc.strerror or exc)}",
                  file=sys.stderr)
            code = EXIT_USAGE
    if args.timeline is not None and analysis.analysed:
        code = _write_timeline(analysis, args, out) or code
    if not analysis.analysed:
        return EXIT_USAGE
    if code:
        return code
    return EXIT_FINDINGS if analysis.failing(args.fail_on) else EXIT_OK


def _write_html(analysis: Any, path: str) -> int:
    """Write the HTML report to ``path`` as it is made (guarded as :func:`guard_ci_lines` guards a document);
    EXIT_USAGE (said on stderr) when the file cannot be written."""
    from analyzer.render.html import write_html
    existed = os.path.exists(path)
    try:
        with open(path, "w", encoding="utf-8") as fh:
            try:
                write_html(analysis.report, analysis.job, fh)
            except BaseException:
                fh.truncate(0)  # never a partial page
                _drop_new(path, existed)
                raise
    except OSError as exc:
        print(f"analyze: error: cannot write {_one_line(path)}: {_one_line(exc.strerror or exc)}", file=sys.stderr)
        return EXIT_USAGE
    return 0


def _drop_new(path: str, existed: bool) -> None:
    """Remove a report file this run created and could not finish (Ctrl-C, a crash): no empty file is left."""
    if not existed:
        try:
            os.unlink(path)
        except OSError:
            pass


def _write_json(report: dict, path: str) -> int:
    """Write the JSON report to ``path``; EXIT_USAGE (said on stderr) when the file cannot be written. Its
    strings went through the sanitiser and JSON text cannot start a line with one, so no CI guard is needed."""
    from analyzer.render.json_out import write_json
    existed = os.path.exists(path)
    try:
        with open(path, "wb") as fh:
            try:
                write_json(report, fh)
            except BaseException:
                fh.truncate(0)  # never a partial document a CI step could read as the report
                _drop_new(path, existed)
                raise
    except OSError as exc:
        print(f"analyze: error: cannot write {_one_line(path)}: {_one_line(exc.strerror or exc)}", file=sys.stderr)
        return EXIT_USAGE
    return 0


def _write_timeline(analysis: Any, args: argparse.Namespace, out: _Stdout) -> int:
    """--timeline FILE: the merged Chrome/Perfetto trace; '-' writes it (uncompressed) to stdout."""
    from analyzer.render.timeline import DEFAULT_MAX_EVENTS, timeline_json, write_timeline
    limit = args.timeline_max_events or DEFAULT_MAX_EVENTS
    try:
        if args.timeline == "-":
            out.write(timeline_json(analysis.report, analysis.timeline_source(), limit)[0])
            return 0
        meta = write_timeline(args.timeline, analysis.report, analysis.timeline_source(), limit)
    except OSError as exc:
        print(f"analyze: error: cannot write {args.timeline}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE
    if not args.quiet and meta.get("thinned"):
        print(f"analyze: timeline {args.timeline}: {meta['thinned']}", file=sys.stderr)
    return 0
