"""The guide values scaling efficiency is judged against (docs/scaling.md, "Thresholds"); no imports, so the CLI
can name them in its help without loading the analysis."""

#: ≥ 0.85 at 8 ranks is good, ≥ 0.6 at 64 acceptable; override with --scaling-threshold NAME=VALUE
DEFAULT_THRESHOLDS = {"efficiency_good_at_8": 0.85, "efficiency_acceptable_at_64": 0.6}
