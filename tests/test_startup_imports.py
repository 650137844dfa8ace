"""A run that needs no table library, no figure and no cluster imports none of them: the fixed cost of a small CI
job (benchmarks/startup.py, docs/performance.md "Start-up").

The hang path (stderr, NCCL logs, Flight Recorder dumps) works on parsers/table.py tables; pandas is the trace
path's, matplotlib the HTML figures', Dask the --dask engine's. Run as the user runs it: the CLI in a fresh
process on a real folder, with nothing told about what the folder holds.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FAILURES = ROOT / "fixtures" / "real-cpu-failures"

_PROBE = """
import sys
from analyzer.cli import main
code = main([sys.argv[1], "--format", sys.argv[3], "-o", sys.argv[2], "-q"])
heavy = sorted({m.split(".")[0] for m in sys.modules} & {"pandas", "matplotlib", "dask", "distributed", "PIL",
                                                         "pyarrow", "scipy"})
print(code, ",".join(heavy) or "-")
"""


@pytest.mark.parametrize("folder, fmt", [
    ("stderr_only_size_abort", "json"),    # torchrun's log of a gloo size abort, nothing else
    ("size_coalescing_manager", "json"),   # a Flight Recorder dump and the launcher's log
    ("size_coalescing_manager", "text"),
])
def test_a_hang_folder_imports_no_pandas_matplotlib_or_dask(tmp_path, folder, fmt):
    out = tmp_path / f"r.{fmt}"
    r = subprocess.run([sys.executable, "-c", _PROBE, str(FAILURES / folder), str(out), fmt], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    code, heavy = r.stdout.split()
    assert code == "1" and heavy == "-", r.stdout  # a finding (exit 1), and nothing heavy imported for it
    assert out.stat().st_size > 1000
    if fmt == "json":
        import json
        report = json.loads(out.read_text())
        assert report["hang"]["diagnoses"], "the hang analysis ran and found the abort"
