"""Distributed-training trace analyzer: traces, NCCL logs and dumps in, ranked diagnoses out.

``analyzer.load("traces/")`` returns an Analysis (tables, findings, report, render); see docs/api.md.
(``analyzer.load`` is also the load stage's package, made callable: analyzer/load/__init__.py.)
"""

__version__ = "0.1.0"

from analyzer import load  # noqa: E402  (callable: analyzer.load(paths, **options) → analyzer.api.load)

__all__ = ["load", "__version__"]
