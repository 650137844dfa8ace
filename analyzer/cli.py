"""The `analyze` command: read a run folder, analyse it, write the report in one or more formats, exit by severity."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Callable, Optional

from analyzer import __version__

FORMATS = ("text", "json", "markdown", "html", "junit", "sarif", "github")
EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2

EXAMPLES = """\
examples:
  analyze traces/                           summary, ranked findings and tables on the terminal
  analyze traces/ --format json -o r.json   the report as JSON (schema: docs/json-schema.md)
  analyze traces/ --html r.html --markdown r.md --junit r.xml --sarif r.sarif
                                            several formats at once, one file each (text still on stdout)
  analyze traces/ --format github           GitHub Actions annotations (::error file=...::...)
  analyze traces/ --baseline main-traces/   compare with an earlier run; a slowdown fails the run
  analyze traces/ --fail-on warning         exit 1 on warnings too (default: errors only)

exit codes (docs/exit-codes.md):
  0  no finding reaches --fail-on (default error; warning; never)
  1  at least one finding reaches --fail-on
  2  usage error, an output file could not be written, the baseline could not be read,
     or no input could be read
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
    out.add_argument("--format", choices=FORMATS, default="text", help="format of stdout / -o (default text)")
    out.add_argument("-o", "--output", metavar="FILE", help="write the --format output to FILE instead of stdout")
    for fmt in FORMATS:
        out.add_argument(f"--{fmt}", dest=f"out_{fmt}", metavar="FILE",
                         help=f"also write the {fmt} report to FILE")
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
                   help="worker processes for parsing (default: all cores)")
    p.add_argument("--gpus-per-node", type=_positive_int, default=None,
                   help="hosts from rank // N when neither traces nor logs name them (as TraceLens does)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress output on stderr")
    p.add_argument("--version", action="version", version=f"analyze {__version__}")
    from rules.config import add_cli_arguments
    add_cli_arguments(p)
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
        name = os.path.basename(path)[-40:]
        end = "\n" if i >= n else ""
        stream.write(f"\r\033[Kreading {i}/{n} {name}{end}")
        stream.flush()
    return progress


def render(fmt: str, report: dict, job: Any = None, fail_on: str = "error", color: bool = False) -> str:
    """The report in one format."""
    if fmt == "json":
        from analyzer.render.json_out import render_json
        return render_json(report)
    if fmt == "markdown":
        from analyzer.render.markdown import render_markdown
        return render_markdown(report)
    if fmt == "html":
        from analyzer.render.html import render_html
        return render_html(report, job)
    if fmt == "junit":
        from analyzer.render.common import registry_rules
        from analyzer.render.junit import render_junit
        return render_junit(report, fail_on, registry_rules())
    if fmt == "sarif":
        from analyzer.render.common import registry_rules
        from analyzer.render.sarif import render_sarif
        return render_sarif(report, registry_rules())
    if fmt == "github":
        from analyzer.render.github import render_github
        return render_github(report)
    from analyzer.render.text import render_text
    return render_text(report, color=color)


def _targets(args: argparse.Namespace) -> list[tuple[str, Optional[str]]]:
    """(format, file or None for stdout) for every output asked for."""
    targets: list[tuple[str, Optional[str]]] = [(args.format, args.output)]
    for fmt in FORMATS:
        path = getattr(args, f"out_{fmt}")
        if path:
            targets.append((fmt, path))
    return targets


def main(argv: Optional[list[str]] = None) -> int:
    """Run the command; returns the exit code (docs/exit-codes.md)."""
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
    from analyzer.report.baseline import BaselineError, apply_baseline, load_baseline, parse_threshold
    thresholds = {}
    for t in args.regression_threshold:
        try:
            name, value = parse_threshold(t)
        except ValueError as exc:
            print(f"analyze: error: --regression-threshold: {exc}", file=sys.stderr)
            return EXIT_USAGE
        thresholds[name] = value
    from analyzer.report.assemble import Options, run_analysis
    from analyzer.load.job import load_job

    options = Options(gpus_per_node=args.gpus_per_node, rule_config=config_from_args(args))
    job = load_job(args.paths, jobs=args.jobs, progress=progress_printer(args.quiet))
    report = run_analysis(job, options)
    usable = bool(job.traces or job.nccl_logs or job.fr_dumps or job.stderr_logs)
    if args.baseline and usable:
        try:
            base = load_baseline(args.baseline, lambda p: run_analysis(load_job(p, jobs=args.jobs), options))
        except BaselineError as exc:
            print(f"analyze: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        apply_baseline(report, base, args.baseline, thresholds)
        cfg = options.rule_config
        if cfg is not None and hasattr(cfg, "enabled"):  # --select / --ignore cover the BASE rules too
            from analyzer.report.assemble import verdict
            report["findings"] = [f for f in report["findings"] if cfg.enabled(str(f.get("id", "")))]
            report["verdict"] = verdict(report["findings"])

    code = EXIT_OK
    for fmt, path in _targets(args):
        color = path is None and fmt == "text" and use_color(args.color, sys.stdout)
        text = render(fmt, report, job, args.fail_on, color)
        if path is None or path == "-":  # "-" is stdout, as in every Unix tool
            sys.stdout.write(text)
            continue
        try:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as exc:
            print(f"analyze: error: cannot write {path}: {exc.strerror or exc}", file=sys.stderr)
            code = EXIT_USAGE
    if not usable:
        print("analyze: no input could be read", file=sys.stderr)
        return EXIT_USAGE
    if code:
        return code
    from analyzer.render.common import failing
    return EXIT_FINDINGS if failing(report, args.fail_on) else EXIT_OK
