"""Every rule family; importing this module registers all rules."""
from rules import balance_rules, comm_rules, hang_rules, input_rules, network_rules, pipeline_rules  # noqa: F401
