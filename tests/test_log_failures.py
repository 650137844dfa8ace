"""Issue #21: no input that shows a failure gets verdict OK, even when no line says which rank it was (a bare
traceback someone kept, torchrun's "failed (exitcode: -9)", a lost peer). Hand-built one-file folders, through the
CLI; the finding names no rank (nothing tells which) and says whether the process failed itself or noticed a peer."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from analyzer.cli import main

CASES = {
    "cuda_error": ("Traceback (most recent call last):\n  File \"/home/u/train.py\", line 10, in <module>\n"
                   "    loss.backward()\nRuntimeError: CUDA error: an illegal memory access was encountered\n",
                   "A process failed", 0.5, "illegal memory access"),
    "user_exception": ("Traceback (most recent call last):\n  File \"/home/u/train.py\", line 10, in <module>\n"
                       "    x = batch[\"label\"]\nKeyError: 'label'\n", "A process failed", 0.5,
                       "KeyError: 'label' (at /home/u/train.py:10)"),
    "lost_peer": ("Traceback (most recent call last):\n  File \"/home/u/train.py\", line 10, in <module>\n"
                  "    dist.all_reduce(t)\nRuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] "
                  "Connection closed by peer [10.0.0.2]:5623\n", "A process lost a peer", 0.3, "[10.0.0.2]:5623"),
    "sigkill": ("E1201 09:03:19.123000 4242 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: "
                "-9) local_rank: 2 (pid: 777) of binary: /usr/bin/python\n", "A process failed", 0.5,
                "exitcode: -9"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_failure_without_a_rank_is_not_ok(tmp_path, name):
    text, title, conf, shown = CASES[name]
    folder = tmp_path / name
    folder.mkdir()
    (folder / "train.log").write_text(text)
    out = tmp_path / "r.json"
    assert main([str(folder), "--format", "json", "-q", "-o", str(out), "--jobs", "1"]) == 1
    rep = json.loads(out.read_text())
    assert rep["verdict"].startswith("FAIL")
    first = rep["findings"][0]
    assert first["title"].startswith(title) and first["subject"]["ranks"] == []
    assert first["confidence"] == conf
    assert any(shown in e["text"] and e["file"] and e["line"] for e in first["evidence"])


def test_a_clean_log_stays_ok(tmp_path):
    folder = tmp_path / "clean"
    folder.mkdir()
    (folder / "train.log").write_text(
        "W1201 09:00:00.000000 42 torch/distributed/run.py:793] Setting OMP_NUM_THREADS environment variable for "
        "each process to be 1 in default\nrank 0: epoch 1 loss 0.25\nrank 0: done\n")
    out = tmp_path / "r.json"
    code = main([str(folder), "--format", "json", "-q", "-o", str(out), "--jobs", "1"])
    rep = json.loads(out.read_text())
    assert code == 0 and rep["verdict"].startswith("OK") and not rep["findings"]


REAL = Path(__file__).resolve().parents[1] / "fixtures" / "stderr" / "real-cpu"


def _first(folder: Path, tmp_path: Path) -> dict:
    out = tmp_path / "r.json"
    assert main([str(folder), "--format", "json", "-q", "-o", str(out), "--jobs", "1"]) == 1
    return json.loads(out.read_text())["findings"][0]


def test_a_rank_that_exits_with_its_own_code_is_named(tmp_path):
    """Real capture: rank 1 os._exit(3) with no traceback; torchrun's table names it; the others lost it."""
    first = _first(REAL / "exit_code_rank", tmp_path)
    assert first["subject"]["ranks"] == [1] and first["confidence"] == 0.6
    assert "ranks 0, 2 wait in a collective" in [e["text"] for e in first["evidence"]]


def test_a_launcher_killed_from_outside_names_no_rank(tmp_path):
    """Real capture: torchrun itself got SIGTERM (scancel, a time limit): no rank failed on its own."""
    out = tmp_path / "r.json"
    # its own kind (issue 30): a warning, not an error — nothing in the job failed
    assert main([str(REAL / "sigterm_agent"), "--format", "json", "-q", "-o", str(out), "--jobs", "1"]) == 0
    first = json.loads(out.read_text())["findings"][0]
    assert first["title"].startswith("The job was stopped from outside") and first["subject"]["ranks"] == []
    assert (first["id"], first["severity"]) == ("HANG008", "warning")
