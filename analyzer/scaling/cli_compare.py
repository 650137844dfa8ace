"""The command line of the scaling comparison: ``analyze --compare RUN [RUN ...]`` (docs/scaling.md)."""
from __future__ import annotations

import argparse
import sys
from typing import Any

from analyzer.scaling.thresholds import DEFAULT_THRESHOLDS

EXIT_OK, EXIT_USAGE = 0, 2


def add_compare_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("scaling across runs (docs/scaling.md)")
    g.add_argument("--compare", action="store_true",
                   help="compare the runs given (run folders or --record files): scaling efficiency and its factors")
    g.add_argument("--batch-per-rank", type=float, default=None, metavar="N",
                   help="samples per rank and step of the analysed folders (throughput in samples/s)")
    g.add_argument("--scaling", choices=("weak", "strong"), default=None,
                   help="say the series is weak or strong scaling instead of inferring it")
    g.add_argument("--record", metavar="FILE", default=None,
                   help="append one row per analysed run to FILE (.csv, else JSON lines); a run already there "
                        "is not added again")
    g.add_argument("--scaling-threshold", action="append", default=[], metavar="NAME=VALUE",
                   help=f"guide value, e.g. efficiency_good_at_8=0.9 (known: {', '.join(DEFAULT_THRESHOLDS)})")


def _file_thresholds(args: argparse.Namespace) -> list[str]:
    """``[tool.analyze.scaling]`` (pyproject.toml / analyze.toml, found as the rules' config is) as NAME=VALUE."""
    from pathlib import Path

    from rules.config import _read_toml, find_config_file
    if getattr(args, "isolated", False):
        return []
    path = Path(args.config) if getattr(args, "config", None) else find_config_file()
    if path is None:
        return []
    data = _read_toml(path)
    table = (data.get("tool") or {}).get("analyze")
    if table is None:
        table = data if path.name == "analyze.toml" else {}
    scaling = table.get("scaling") or {}
    if not isinstance(scaling, dict):
        raise ValueError(f"{path}: [tool.analyze.scaling] must be a table of NAME = number")
    return [f"{k}={v}" for k, v in scaling.items()]


def _thresholds(items: list[str]) -> dict:
    out = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or name not in DEFAULT_THRESHOLDS:
            raise ValueError(f"--scaling-threshold {item!r}: expected NAME=VALUE with NAME one of "
                             f"{', '.join(DEFAULT_THRESHOLDS)}")
        v = float(value.rstrip("%")) / (100 if value.endswith("%") else 1)
        if not 0 < v <= 1:
            raise ValueError(f"--scaling-threshold {item!r}: an efficiency between 0 and 1")
        out[name] = v
    return out


def run_compare(args: argparse.Namespace, write_stdout: Any) -> int:
    """Analyse and compare the runs, write the comparison (--format text/markdown/json, -o FILE)."""
    from analyzer.api import InputPathError, compare
    from analyzer.scaling.record import RecordError
    from rules.config import ConfigError
    fmt = args.format or "text"
    if fmt not in ("text", "markdown", "json", "html"):
        print(f"analyze: error: --compare writes text, markdown, json or html, not {fmt}", file=sys.stderr)
        return EXIT_USAGE
    try:
        th = _thresholds(_file_thresholds(args) + args.scaling_threshold)
        comp = compare(args.paths, batch_per_rank=args.batch_per_rank, scaling=args.scaling, thresholds=th,
                       record=args.record, jobs=args.jobs or 1,
                       load_options={"world_size": args.world_size, "gpus_per_node": args.gpus_per_node})
    except (InputPathError, RecordError, ConfigError, ValueError) as exc:
        print(f"analyze: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for extra in ("markdown", "json", "html"):  # --html FILE, --markdown FILE, --json FILE beside the main one
        path = getattr(args, f"out_{extra}", None)
        if path and path != "-":
            with open(path, "w", encoding="utf-8") as f:
                f.write(comp.render(extra))
    text = comp.render(fmt)
    if args.output and args.output != "-":
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        write_stdout(text)
    if comp.recorded is not None and not args.quiet:
        print(f"analyze: {comp.recorded} new row(s) recorded in {args.record}", file=sys.stderr)
    return EXIT_OK
