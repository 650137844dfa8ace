"""Distributed-training trace analyzer: traces, NCCL logs and dumps in, ranked diagnoses out.

``analyzer.load("traces/")`` returns an Analysis (tables, findings, report, render); see docs/api.md.
(``analyzer.load`` is also the load stage's package, made callable: analyzer/load/__init__.py.)
"""

__version__ = "0.1.0"

from analyzer import load  # noqa: E402  (callable: analyzer.load(paths, **options) → analyzer.api.load)



def compare(runs, **options):  # noqa: ANN001, ANN201 - documented in analyzer.api.compare
    """Compare several runs: scaling efficiency and where it went (analyzer.api.compare, docs/scaling.md)."""
    from analyzer.api import compare as _compare
    return _compare(runs, **options)


__all__ = ["compare", "load", "__version__"]
