"""A run that needs no figure and no cluster imports neither: the fixed cost of a small CI job (benchmarks/startup.py)."""
from __future__ import annotations

import pytest

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HANG = ROOT / "fixtures" / "real-cpu-failures" / "stderr_only_size_abort"

_PROBE = """
import sys
from analyzer.cli import main
code = main([sys.argv[1], "--format", "json", "-o", sys.argv[2], "-q"])
heavy = sorted({m.split(".")[0] for m in sys.modules} & {"matplotlib", "dask", "distributed", "PIL"})
print(code, ",".join(heavy) or "-")
"""


@pytest.mark.slow
def test_json_on_a_hang_folder_imports_no_matplotlib_and_no_dask(tmp_path):
    r = subprocess.run([sys.executable, "-c", _PROBE, str(HANG), str(tmp_path / "r.json")], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    code, heavy = r.stdout.split()
    assert code == "1" and heavy == "-", r.stdout  # a finding (exit 1), and nothing heavy imported for it
    assert (tmp_path / "r.json").stat().st_size > 1000
