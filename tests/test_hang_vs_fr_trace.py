"""docs/hang-analysis.md's comparison with fr_trace is what the code says today on the real failure bed."""
from __future__ import annotations

import pytest

from pathlib import Path

from tests.hang_vs_fr_trace import BEGIN, END, readme_rows, table
from tests.test_hang_real_failures import analysed  # cached: the same analyses that test file runs

DOC = Path(__file__).resolve().parent.parent / "docs" / "hang-analysis.md"


def test_every_case_of_the_bed_is_in_the_table():
    assert len(readme_rows()) == 41


@pytest.mark.slow
def test_the_doc_table_is_the_generated_one():
    text = DOC.read_text()
    doc = text[text.index(BEGIN) + len(BEGIN):text.index(END)].strip()
    assert doc == table(analysed), "regenerate with: python -m tests.hang_vs_fr_trace"
