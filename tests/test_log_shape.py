"""Issue #23.1: a line matters only in the context of a real log. Prose, code and configs that quote failure
messages (Markdown tables and fences, docstrings, string literals, YAML values) are not logs and make no finding;
a bare real log of two or three NCCL error lines is a log. Through the CLI on folders, as a user runs it."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from analyzer.cli import main
from parsers.discover import NCCL_LOG, STDERR, discover
from parsers.log_shape import judge

ROOT = Path(__file__).resolve().parents[1]

NCCL_SYSTEM = ("RuntimeError: NCCL error in: /pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:825, unhandled system error, "
               "NCCL version 2.7.8\nncclSystemError: System call (socket, malloc, munmap, etc) failed.\n")
NCCL_REMOTE = ("torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:268,"
               " remote process exited or there was a network error, NCCL version 2.21.5\n"
               "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.\n"
               "Last error:\nsocketProgressOpt: Call to recv from 10.1.2.3<33759> failed : Connection reset by peer\n")

MARKDOWN = f"""# Troubleshooting

| message | meaning |
|---|---|
| `RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:825, unhandled system error, NCCL version 2.7.8` | a socket call |
| `[rank1]: Traceback (most recent call last):` | rank 1 died |
| `Rank 1 failed to pass monitoredBarrier in 2000 ms` | rank 1 late |

When the job dies you may see:

```
{NCCL_REMOTE}[rank0]:[E1201 08:30:26.910654417 ProcessGroupGloo.cpp:67] [Rank 0]: Rank 1 failed to pass monitoredBarrier in 2000 ms
[rank0]: RuntimeError: [Rank 0]: Rank 1 failed to pass monitoredBarrier in 2000 ms
```

An indented block:

    torch.distributed.DistBackendError: NCCL error in: NCCLUtils.hpp:268, remote process exited, NCCL version 2.21.5
    ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.

The watchdog prints `Watchdog caught collective operation timeout` when a collective runs too long.
"""
PYTHON = '''"""Patterns we alert on.

Traceback (most recent call last):
RuntimeError: CUDA error: an illegal memory access was encountered
"""
import re

ALERTS = [
    "torch.distributed.DistBackendError: NCCL error in: x.cpp:1, unhandled system error, NCCL version 2.7.8",
    '[E ProcessGroupNCCL.cpp:455] Some NCCL operations have failed or timed out.',
    r"Signal 6 (SIGABRT) received by PID \\d+", '"', "[rank0]: Traceback (most recent call last):",
]
SAMPLE = """
[rank3]: Traceback (most recent call last):
[rank3]:   File "train.py", line 3, in <module>
[rank3]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:37, remote process exited, NCCL version 2.28.8
"""


def match(line: str) -> bool:
    # a comment quoting: ncclSystemError: System call (socket, malloc, munmap, etc) failed.
    return any(re.search(re.escape(a), line) for a in ALERTS)
'''
YAML = """alerts:
  - name: nccl
    pattern: "NCCL error in: .*ProcessGroupNCCL.cpp:825, unhandled system error, NCCL version 2.7.8"
  - name: oom
    pattern: 'CUDA out of memory. Tried to allocate 2.00 GiB'
  - name: watchdog
    match: Watchdog caught collective operation timeout
"""
TOML = """[alerts.nccl]
pattern = "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:825, unhandled system error, NCCL version 2.7.8"
[alerts.tb]
pattern = 'Traceback (most recent call last):'
"""
NOTES = """Meeting notes. The job printed "ncclRemoteError: A call failed" again and the
Watchdog caught collective operation timeout after 30 minutes; we think NCCL error handling is fine.
"""


def _run(folder: Path, tmp: Path) -> tuple[int, dict | None]:
    out = tmp / "report.json"
    code = main([str(folder), "--format", "json", "-q", "-o", str(out), "--jobs", "1"])
    return code, (json.loads(out.read_text()) if out.exists() and out.stat().st_size else None)


def _logs(folder: Path) -> list[str]:
    found, _ = discover([folder])
    return [f.path for f in found if f.kind in (NCCL_LOG, STDERR)]


@pytest.mark.parametrize("sub", ["docs", "tests", "parsers", "analyzer", "rules"])
def test_the_projects_own_prose_and_code_is_no_log(sub):
    """`analyze docs/` used to report HANG007 at 90 % from docs/stderr.md's table rows."""
    assert _logs(ROOT / sub) == []


def test_analyze_docs_makes_no_finding(tmp_path, capsys):
    code, rep = _run(ROOT / "docs", tmp_path)
    err = capsys.readouterr().err
    assert code == 2 and not (rep or {}).get("findings")  # nothing to analyse, so no finding of any severity
    assert "nothing was analysed" in err and "ERROR" not in err and "WARNING" not in err


def test_prose_code_and_configs_that_quote_failures_make_no_finding(tmp_path):
    folder = tmp_path / "texts"
    folder.mkdir()
    for name, text in (("guide.md", MARKDOWN), ("alerts.py", PYTHON), ("alerts.yaml", YAML), ("alerts.toml", TOML),
                       ("notes.txt", NOTES), ("README", MARKDOWN), ("guide.log", MARKDOWN)):
        (folder / name).write_text(text)
    assert _logs(folder) == []  # not even a `.log` name makes a Markdown file a log
    found, _ = discover([folder])
    reasons = {Path(f.path).name: f.reason for f in found}
    assert "quotes log lines" in reasons["guide.md"] and "source code" in reasons["alerts.py"]
    code, rep = _run(folder, tmp_path)
    assert code == 2 and not (rep or {}).get("findings")


def test_a_bare_log_of_two_nccl_lines_is_a_log(tmp_path):
    """The other side of the balance: a real log need not have launcher prefixes or tracebacks."""
    for i, text in enumerate((NCCL_SYSTEM, NCCL_REMOTE)):
        folder = tmp_path / f"job{i}"
        folder.mkdir()
        (folder / "error.txt").write_text(text)
        assert len(_logs(folder)) == 1
        code, rep = _run(folder, tmp_path)
        assert code == 1 and rep["verdict"].startswith("FAIL")
        first = rep["findings"][0]
        assert first["id"] == "HANG003" and ("ncclSystemError" if i == 0 else "ncclRemoteError") in first["title"]


def test_a_log_pasted_among_prose_outside_fences_still_counts_as_log():
    """Lines with a log's own shape, not outnumbered by quotations, make a log (an incident note with the raw log)."""
    text = "job 4242 died at 09:03, raw output below\n\n" + NCCL_REMOTE
    shape = judge(text)
    assert shape.is_log and shape.log == 2 and shape.quoted == 0


def test_quotations_are_counted_by_context():
    shape = judge(MARKDOWN)
    assert shape.log == 0 and shape.quoted >= 8 and not shape.is_log
    shape = judge(PYTHON)
    assert shape.source and shape.log == 0 and shape.quoted >= 6
