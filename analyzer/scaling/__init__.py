"""Across runs: the scaling comparison of several finished per-run reports (docs/scaling.md).

A stage after the report stage: it reads reports (or rows saved by ``--record``), never traces. Entry points:
``analyzer.scaling.session.compare`` (``analyzer.compare``), ``rows.run_row``, ``compare.compare_rows``; nothing is
imported here, so that the CLI's start-up stays light.
"""
