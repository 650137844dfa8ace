"""Every rule family: importing this module registers all rules; the registry's lookups that need them all."""
from __future__ import annotations

from typing import Optional

from rules import (balance_rules, baseline_rules, comm_rules, desync_rules, hang_rules, input_rules,  # noqa: F401
                   memory_rules,
                   network_rules, pipeline_rules, placement_rules)
from rules.registry import RULES, Rule


def load_all() -> dict[str, Rule]:
    """The registry, every rule in it (importing this module imported the rule families, which registered them)."""
    return RULES


def get_rule(rule_id: str) -> Optional[Rule]:
    """The rule with this id (case-insensitive), or None."""
    load_all()
    return RULES.get(rule_id.upper())


def sorted_rules() -> list[Rule]:
    """All rules in id order."""
    return [RULES[k] for k in sorted(load_all())]
