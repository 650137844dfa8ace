"""Size and seed of the fuzz run: small in CI (under two minutes in all), any size behind an option.

`python -m pytest tests/fuzz --fuzz-examples 2000 --fuzz-seed 7` (or FUZZ_EXAMPLES / FUZZ_SEED) runs longer.
"""
from __future__ import annotations

import os

import pytest

#: Examples per input kind in the default (CI) run.
CI_PARSER_EXAMPLES = 60
CI_REPORT_EXAMPLES = 6


@pytest.fixture(scope="session")
def fuzz_size(request) -> tuple[int, int]:
    """(parser examples, end-to-end report examples) per input kind."""
    n = request.config.getoption("--fuzz-examples") or (int(os.environ["FUZZ_EXAMPLES"])
                                                         if os.environ.get("FUZZ_EXAMPLES") else None)
    if n is None:
        return CI_PARSER_EXAMPLES, CI_REPORT_EXAMPLES
    return n, max(1, n // 8)


@pytest.fixture(scope="session")
def fuzz_seed(request) -> int:
    s = request.config.getoption("--fuzz-seed")
    return s if s is not None else int(os.environ.get("FUZZ_SEED", "0"))
