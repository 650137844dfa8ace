"""The `analyze` command: read a run folder, analyse it, print or write the report."""
from __future__ import annotations

import argparse
import sys
from typing import Optional

from analyzer import __version__

EXAMPLES = """\
examples:
  analyze traces/                         per-rank, per-step metrics of every trace under traces/
  analyze traces/ --format json -o r.json the same as JSON (schema: docs/json-schema.md)
  analyze run-dir/ --jobs 4               parse with 4 worker processes
  analyze rank0.json.gz rank1.json.gz     named files work as well as folders

exit codes: 0 ok; 2 usage error or no input could be read
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="analyze",
        description="Diagnose a distributed training job from what its ranks left behind: PyTorch profiler "
                    "traces, NCCL debug logs, watchdog stderr and Flight Recorder dumps.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="*", help="files or folders (searched recursively)")
    p.add_argument("--format", choices=["text", "json"], default="text", help="output format (default text)")
    p.add_argument("-o", "--output", help="write the report to this file instead of stdout")
    p.add_argument("--jobs", type=int, default=None, help="worker processes for parsing (default: all cores)")
    p.add_argument("--gpus-per-node", type=int, default=None,
                   help="hosts from rank // N when neither traces nor logs name them (as TraceLens does)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress output on stderr")
    p.add_argument("--version", action="version", version=f"analyze {__version__}")
    from rules.config import add_cli_arguments
    add_cli_arguments(p)
    return p


def main(argv: Optional[list[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from rules.config import config_from_args, handle_info_commands
    info = handle_info_commands(args)
    if info is not None:
        return info
    if not args.paths:
        parser.print_usage(sys.stderr)
        print("analyze: error: give at least one file or folder", file=sys.stderr)
        return 2
    from analyzer.analysis import Options, run_analysis
    from analyzer.job import load_job
    from analyzer.render.json_out import render_json
    from analyzer.render.text import render_text

    job = load_job(args.paths, jobs=args.jobs)
    report = run_analysis(job, Options(gpus_per_node=args.gpus_per_node, rule_config=config_from_args(args)))
    text = render_json(report) if args.format == "json" else render_text(report)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text)
    usable = job.traces or job.nccl_logs or job.fr_dumps
    if not usable:
        print("analyze: no input could be read", file=sys.stderr)
        return 2
    return 0
