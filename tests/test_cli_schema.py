"""The --format json output of several fixtures validates against docs/report.schema.json."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from analyzer.cli import main
from tests.schemas.mini_jsonschema import errors

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((ROOT / "docs/report.schema.json").read_text())
FIXTURES = ["fixtures/corpus/param-dlrm_kineto", "fixtures/real-cpu/pp-1f1b", "fixtures/real-cpu-hang/missing_rank",
            "fixtures/sim/tp_pp_dp_1f1b_straggler", "fixtures/sim/hang_mismatched_size"]


@pytest.mark.slow
@pytest.mark.parametrize("fixture", FIXTURES)
def test_json_output_validates(fixture, tmp_path):
    out = tmp_path / "r.json"
    assert main([str(ROOT / fixture), "--format", "json", "-o", str(out), "-q", "--jobs", "1"]) in (0, 1)
    report = json.loads(out.read_text())
    assert errors(report, SCHEMA) == []
    assert report["schema_version"] == 1
