"""Shared fixtures: paths to the bundled data."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

# Reports carry the time of the analysis (about.analysed_at); tests that compare two reports (engines, CLI and
# API) would differ when a second ticks between them. SOURCE_DATE_EPOCH fixes it, as for reproducible builds.
os.environ.setdefault("SOURCE_DATE_EPOCH", "1764547200")

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
CORPUS = FIXTURES / "corpus"


@pytest.fixture
def corpus() -> Path:
    return CORPUS


def pytest_addoption(parser):
    parser.addoption("--fuzz-examples", type=int, default=None,
                     help="examples per input kind for tests/fuzz (default: $FUZZ_EXAMPLES or the CI size)")
    parser.addoption("--fuzz-seed", type=int, default=None, help="seed of tests/fuzz (default: $FUZZ_SEED or 0)")
