"""Rule configuration: --select/--ignore/--threshold on the command line and [tool.analyze] in pyproject.toml
or analyze.toml (found from the current directory upwards), as linters such as ruff do."""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

CONFIG_FILES = ("analyze.toml", "pyproject.toml")


class ConfigError(ValueError):
    """A configuration value that cannot be used (unknown rule, unknown threshold, bad number, bad file)."""


@dataclass
class RuleConfig:
    """Which rules run and with which thresholds."""

    select: list[str] = field(default_factory=lambda: ["ALL"])
    ignore: list[str] = field(default_factory=list)
    thresholds: dict[str, float] = field(default_factory=dict)
    source: Optional[str] = None
    #: extra communication-kernel patterns ({pattern, op, family}; parsers/comm_kernels.py), from comm-kernels
    comm_kernels: list[dict] = field(default_factory=list)

    def enabled(self, rule_id: str) -> bool:
        """Longest matching selector decides (ruff-like); a tie goes to ignore; 'ALL' matches everything."""
        def best(sel: list[str]) -> int:
            lens = [0 if s == "ALL" else len(s) for s in sel if s == "ALL" or rule_id.startswith(s)]
            return max(lens) if lens else -1
        s, i = best(self.select), best(self.ignore)
        return s >= 0 and s > i


def _split(values: Optional[Iterable[str]]) -> list[str]:
    """Comma/space separated selectors from repeated options or a TOML list, upper-cased."""
    out: list[str] = []
    for v in values or []:
        out.extend(x.strip().upper() for x in str(v).replace(",", " ").split() if x.strip())
    return out


def _check_selectors(sel: list[str], where: str) -> None:
    """Every selector must be ALL or a prefix of at least one rule id."""
    from rules.catalog import load_all
    ids = load_all()
    for s in sel:
        if s != "ALL" and not any(i.startswith(s) for i in ids):
            fams = sorted({r.family for r in ids.values()})
            raise ConfigError(f"{where}: unknown rule selector {s!r} (families: {', '.join(fams)}; "
                              "see analyze --list-rules)")


def _parse_threshold(name: str, value: Any, where: str) -> tuple[str, float]:
    """Validate one threshold name and value."""
    from rules.catalog import load_all
    from rules.registry import THRESHOLDS
    load_all()
    key = str(name).strip().lower().replace("-", "_")
    if key not in THRESHOLDS:
        raise ConfigError(f"{where}: unknown threshold {name!r} (known: {', '.join(sorted(THRESHOLDS))})")
    if isinstance(value, bool):
        raise ConfigError(f"{where}: threshold {key} needs a number, got {value!r}")
    percent = isinstance(value, str) and value.strip().endswith("%")
    if percent and THRESHOLDS[key].unit != "fraction":
        raise ConfigError(f"{where}: threshold {key} is in {THRESHOLDS[key].unit}, not a fraction: "
                          f"'%' does not apply, got {value!r}")
    try:
        num = float(value.strip()[:-1]) / 100 if percent else float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: threshold {key} needs a number, got {value!r}") from None
    if not (-float("inf") < num < float("inf")):
        raise ConfigError(f"{where}: threshold {key} must be a finite number, got {value!r}")
    if num < 0:
        raise ConfigError(f"{where}: threshold {key} must not be negative, got {value!r}")
    if THRESHOLDS[key].unit == "fraction" and num > 1:
        raise ConfigError(f"{where}: threshold {key} is a fraction between 0 and 1, got {value!r}")
    return key, num


def find_config_file(start: Optional[Path] = None) -> Optional[Path]:
    """analyze.toml, or a pyproject.toml holding [tool.analyze], in `start` (default cwd) or the nearest parent."""
    here = Path(start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        a = d / "analyze.toml"
        if a.is_file():
            return a
        p = d / "pyproject.toml"
        if p.is_file() and "analyze" in (_read_toml(p).get("tool") or {}):
            return p
    return None


def _read_toml(path: Path) -> dict:
    """Parse a TOML file with tomllib (Python ≥ 3.11) or tomli; errors name the file."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ImportError:
            raise ConfigError(f"{path}: reading TOML needs Python ≥ 3.11 or the tomli package") from None
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None


def load_config_file(path: Path) -> RuleConfig:
    """RuleConfig from [tool.analyze] (pyproject.toml / analyze.toml) or the top level of analyze.toml."""
    data = _read_toml(path)
    table = (data.get("tool") or {}).get("analyze")
    if table is None:
        table = data if path.name == "analyze.toml" else {}
    where = f"{path} [tool.analyze]" if path.name == "pyproject.toml" else str(path)
    cfg = RuleConfig(source=str(path))
    known = {"select", "ignore", "extend-select", "extend_select", "thresholds", "comm-kernels", "comm_kernels",
             "scaling"}  # [tool.analyze.scaling]: the --compare guide values, read by analyzer/scaling/cli_compare.py
    extra = sorted(set(table) - known)
    if extra:
        raise ConfigError(f"{where}: unknown key(s) {extra} (known: select, ignore, extend-select, thresholds, "
                          "comm-kernels, scaling)")
    if "select" in table:
        cfg.select = _split(_as_list(table["select"], where, "select"))
    cfg.select += _split(_as_list(table.get("extend-select", table.get("extend_select", [])), where, "extend-select"))
    cfg.ignore = _split(_as_list(table.get("ignore", []), where, "ignore"))
    _check_selectors(cfg.select + cfg.ignore, where)
    th = table.get("thresholds", {})
    if not isinstance(th, dict):
        raise ConfigError(f"{where}: thresholds must be a table of NAME = number")
    cfg.thresholds = dict(_parse_threshold(k, v, where) for k, v in th.items())
    cfg.comm_kernels = _comm_kernels(table.get("comm-kernels", table.get("comm_kernels", [])), where)
    return cfg


def _comm_kernels(value: Any, where: str) -> list[dict]:
    """The user's communication-kernel patterns: an array of tables {pattern, op?, family?}, validated."""
    from parsers.comm_kernels import user_families
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list):
        raise ConfigError(f"{where}: comm-kernels must be an array of tables "
                          "([[tool.analyze.comm-kernels]] pattern = \"...\", op = \"allreduce\")")
    try:
        user_families(value)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return [dict(v) for v in value]


def _as_list(v: Any, where: str, key: str) -> list:
    """A TOML value that must be a list of strings (a single string is accepted)."""
    if isinstance(v, str):
        return [v]
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise ConfigError(f"{where}: {key} must be a list of rule ids or prefixes")
    return v


def build_config(select: Optional[list[str]] = None, ignore: Optional[list[str]] = None,
                 thresholds: Optional[list[str]] = None, config_path: Optional[str] = None,
                 isolated: bool = False, start: Optional[Path] = None) -> RuleConfig:
    """Merge the config file (unless isolated) with command-line values: --select replaces, --ignore and
    --threshold add to / override the file's."""
    cfg = RuleConfig()
    if config_path:
        cfg = load_config_file(Path(config_path))
    elif not isolated:
        found = find_config_file(start)
        if found is not None:
            cfg = load_config_file(found)
    sel, ign = _split(select), _split(ignore)
    _check_selectors(sel + ign, "command line")
    if sel:
        cfg.select = sel
    cfg.ignore = cfg.ignore + ign
    for item in thresholds or []:
        name, eq, value = str(item).partition("=")
        if not eq:
            raise ConfigError(f"--threshold {item!r}: expected NAME=VALUE")
        k, v = _parse_threshold(name, value, "--threshold")
        cfg.thresholds[k] = v
    return cfg


def add_cli_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the rule-related options (--select, --ignore, --threshold, --config, --isolated, --list-rules, --explain)."""
    g = parser.add_argument_group("rules")
    g.add_argument("--select", action="append", metavar="IDS",
                   help="run only these rules (ids or prefixes, comma-separated, e.g. HANG,NET002; default ALL)")
    g.add_argument("--ignore", action="append", metavar="IDS", help="skip these rules (ids or prefixes)")
    g.add_argument("--threshold", action="append", metavar="NAME=VALUE",
                   help="override a rule threshold, e.g. idle_share_max=0.2 or idle_share_max=20%% (repeatable; "
                        "names in analyze --explain ID)")
    g.add_argument("--config", metavar="FILE", help="read [tool.analyze] from this file instead of searching "
                                                   "analyze.toml / pyproject.toml from the current folder upwards")
    g.add_argument("--isolated", action="store_true", help="ignore configuration files")
    g.add_argument("--list-rules", action="store_true", help="list the rules and exit")
    g.add_argument("--explain", metavar="ID", help="print a rule's rationale, thresholds and fix, and exit")


def _fail(msg: str) -> None:
    """Usage-style error: message on stderr, exit code 2."""
    print(f"analyze: error: {msg}", file=sys.stderr)
    raise SystemExit(2)


def config_from_args(args: argparse.Namespace) -> RuleConfig:
    """The RuleConfig for this run; a bad value exits with code 2 and a message naming it."""
    try:
        return build_config(getattr(args, "select", None), getattr(args, "ignore", None),
                            getattr(args, "threshold", None), getattr(args, "config", None),
                            bool(getattr(args, "isolated", False)))
    except ConfigError as exc:
        _fail(str(exc))
        raise  # unreachable


def handle_info_commands(args: argparse.Namespace) -> int | None:
    """--list-rules / --explain: print and return an exit code; None when neither was asked for."""
    from rules.describe import explain, list_rules
    from rules.catalog import get_rule
    if getattr(args, "list_rules", False):
        sys.stdout.write(list_rules())
        return 0
    rid = getattr(args, "explain", None)
    if rid:
        if get_rule(rid) is None:
            from rules.catalog import sorted_rules
            print(f"analyze: error: no rule {rid!r}; known: {', '.join(r.id for r in sorted_rules())}",
                  file=sys.stderr)
            return 2
        cfg = config_from_args(args)
        sys.stdout.write(explain(rid, cfg.thresholds))
        return 0
    return None
