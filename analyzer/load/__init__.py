"""The load stage: discovery, per-rank parsing, jobs told apart, the input report (analyzer.load.job).

The package is also what ``analyzer.load`` names, and the public API promises ``analyzer.load("traces/")``:
so the package is callable, and calling it is analyzer.api.load (docs/api.md).
"""
import sys
import types


class _CallableStage(types.ModuleType):
    """This package's module type: calling it analyses a job (``analyzer.load(paths, **options)``)."""

    def __call__(self, paths, **options):
        from analyzer.api import load
        return load(paths, **options)


sys.modules[__name__].__class__ = _CallableStage
