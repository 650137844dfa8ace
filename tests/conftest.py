"""Shared fixtures: paths to the bundled data."""
from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
CORPUS = FIXTURES / "corpus"


@pytest.fixture
def corpus() -> Path:
    return CORPUS
