"""Every rule family; importing this module registers all rules."""
from rules import (balance_rules, baseline_rules, comm_rules, desync_rules, hang_rules, input_rules,  # noqa: F401
                   network_rules, pipeline_rules, placement_rules)
