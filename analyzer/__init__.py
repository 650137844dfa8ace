"""Distributed-training trace analyzer: traces, NCCL logs and dumps in, ranked diagnoses out.

``analyzer.load("traces/")`` returns an Analysis (tables, findings, report, render); see docs/api.md.
"""

__version__ = "0.1.0"


def load(paths, **options):
    """Analyse one job from trace files and folders: see analyzer.api.load and docs/api.md."""
    from analyzer.api import load as _load
    return _load(paths, **options)


__all__ = ["load", "__version__"]
