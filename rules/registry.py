"""The one rule registry: `@rule(...)` registers a documented function that yields Findings."""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from rules.finding import SEVERITIES, Finding


@dataclass(frozen=True)
class Threshold:
    """A configurable number a rule compares against (set with --threshold NAME=VALUE or [tool.analyze.thresholds])."""

    name: str
    default: float
    unit: str
    doc: str
    #: where the default number comes from (a measurement, a source, or the reasoning), shown in docs/rules.md
    source: str = ""


@dataclass
class Rule:
    """A registered rule: metadata plus the function over a rules.context.Context."""

    id: str
    title: str
    severity: str
    func: Callable[[Any], Iterable[Finding]]
    thresholds: tuple[Threshold, ...] = ()
    explains: tuple[str, ...] = ()
    confirm: str = ""
    fix: str = ""
    family: str = ""

    @property
    def doc(self) -> str:
        """The rule's rationale: its function's docstring, dedented."""
        return inspect.cleandoc(self.func.__doc__ or "")

    @property
    def summary(self) -> str:
        """First line of the docstring."""
        return self.doc.splitlines()[0] if self.doc else self.title


RULES: dict[str, Rule] = {}
THRESHOLDS: dict[str, Threshold] = {}


def rule(id: str, title: str, severity: str, thresholds: Iterable[Threshold] = (), explains: Iterable[str] = (),
         confirm: str = "", fix: str = "") -> Callable:
    """Decorator registering a rule; `explains` lists rule ids (or prefixes) whose findings become consequences."""
    if severity not in SEVERITIES:
        raise ValueError(f"rule {id}: severity {severity!r} not in {SEVERITIES}")

    def deco(func: Callable) -> Callable:
        if id in RULES and RULES[id].func is not func:
            raise ValueError(f"rule id {id} registered twice")
        ths = tuple(thresholds)
        for t in ths:
            old = THRESHOLDS.get(t.name)
            if old is not None and old != t:
                raise ValueError(f"threshold {t.name} defined twice with different metadata")
            THRESHOLDS[t.name] = t
        family = id.rstrip("0123456789")
        RULES[id] = Rule(id, title, severity, func, ths, tuple(explains), confirm, fix, family)
        return func

    return deco
