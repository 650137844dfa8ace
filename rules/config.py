"""Rule configuration from the command line and [tool.analyze] in pyproject.toml / analyze.toml (placeholder)."""
from __future__ import annotations

import argparse
from typing import Any


def add_cli_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the rule-related options (--select, --ignore, --list-rules, --explain, thresholds)."""


def config_from_args(args: argparse.Namespace) -> Any:
    """The RuleConfig for this run (None → defaults)."""
    return None


def handle_info_commands(args: argparse.Namespace) -> int | None:
    """--list-rules / --explain: print and return an exit code; None when neither was asked for."""
    return None
