"""Issue #21.3: real public NCCL error logs (fixtures/stderr/public-nccl, source URL in each expected.json) through the
CLI on their folder: never verdict OK; the first finding names the NCCL error class with its meaning and fix, the
NCCL version and the far side of the failing connection; a rank that only noticed a remote error is no culprit."""
from __future__ import annotations

import functools
import json
import tempfile
from pathlib import Path

import pytest

from analyzer.cli import main
from analyzer.hang.nccl_errors import CLASSES

PUBLIC = Path(__file__).resolve().parents[1] / "fixtures" / "stderr" / "public-nccl"
CASES = sorted(p.parent.name for p in PUBLIC.glob("*/expected.json"))


@functools.lru_cache(maxsize=None)
def _report(case: str) -> tuple[int, dict]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        code = main([str(PUBLIC / case), "--format", "json", "-q", "-o", str(out), "--jobs", "1"])
        return code, json.loads(out.read_text())


def _exp(case: str) -> dict:
    return json.loads((PUBLIC / case / "expected.json").read_text())


def _text(f: dict) -> str:
    return " ".join([f["title"], f.get("fix") or ""] + [e["text"] for e in f["evidence"]])


def test_the_public_set_covers_every_error_class():
    assert len(CASES) >= 10
    classes = {_exp(c)["nccl_class"] for c in CASES} - {""}
    assert classes == set(CLASSES)
    assert all(_exp(c)["source"].startswith("https://github.com/") for c in CASES)
    for c in CASES:  # short excerpts only
        assert sum(p.stat().st_size for p in (PUBLIC / c).iterdir()) < 4096


@pytest.mark.parametrize("case", CASES)
def test_a_failure_log_is_never_ok(case):
    code, rep = _report(case)
    assert code == 1 and rep["verdict"].startswith("FAIL") and rep["findings"]
    assert rep["findings"][0]["severity"] == "error"


@pytest.mark.parametrize("case", [c for c in CASES if _exp(c)["nccl_class"]])
def test_first_finding_names_class_meaning_fix_version_and_peer(case):
    exp = _exp(case)
    _, rep = _report(case)
    first = rep["findings"][0]
    text = _text(first)
    meaning, fix, own = CLASSES[exp["nccl_class"]]
    assert first["id"] == "HANG003" and exp["nccl_class"] in text
    assert meaning in first["evidence"][0]["text"] and fix in first["fix"]
    assert f"NCCL {exp['nccl_version']}" in text
    if exp["peer"]:
        assert exp["peer"] in text and "far side" in text
    assert first["subject"]["ranks"] == exp["culprit_ranks"]
    for r in exp["noticing_ranks"]:  # the rank that printed a remote error only noticed it
        assert r not in first["subject"]["ranks"]
        assert first["title"].startswith("NCCL error") and f"rank {r}" in first["title"]
    if not exp["culprit_ranks"]:
        assert first["confidence"] <= 0.5  # no rank is named, so no culprit is claimed


def test_the_warn_log_names_the_peer():
    _, rep = _report("nccl_795_warn_broken_pipe")
    assert any("10.200.84.247<58355>" in _text(f) for f in rep["findings"])


def test_a_flattened_teardown_paragraph_is_read_as_its_parts():
    _, rep = _report("alpaca_207_flattened_ib")
    cause = rep["findings"][0]["evidence"][0]["text"]
    assert "IB completion error 12" in cause and "11.214.147.122:39138" in cause
    assert "ProcessGroupNCCL then took the process down" in cause


@pytest.mark.parametrize("case", [c for c in CASES if _exp(c)["nccl_class"] == "ncclRemoteError" and _exp(c)["noticing_ranks"]])
def test_a_rank_that_only_noticed_a_remote_error_has_no_origin_in_the_facts(case):
    """The failure facts themselves (before any diagnosis) keep a noticed remote error as the noticing rank's
    consequence, never its origin: no later stage has to undo a culprit that the facts made."""
    from analyzer.hang.stderr_facts import stderr_facts
    from parsers.torch_stderr import parse_stderr
    logs = [parse_stderr(p) for p in sorted((PUBLIC / case).iterdir()) if p.name != "expected.json"]
    facts = stderr_facts(logs)
    for r in _exp(case)["noticing_ranks"]:
        f = facts.ranks.get(r)
        assert f is not None and (f.origin is None or f.origin.get("kind") != "nccl_error"), (r, f and f.origin)
        assert any(c.get("kind") == "nccl_error" for c in f.consequences)


def test_an_internal_error_whose_last_error_is_a_closed_connection_is_no_origin_of_the_rank_that_printed_it():
    """nccl_1514's lines as rank 2 of a torchrun job prints them: the error line says only 'internal error', the
    last-error line after it that the remote peer closed the connection. The facts read the lines together: rank 2
    noticed a failure on the far side, so it is no origin (and the hang diagnosis names no culprit for it)."""
    from analyzer.hang.analysis import analyze_hang
    from analyzer.hang.stderr_facts import stderr_facts
    from parsers.torch_stderr import parse_stderr_lines
    text = (PUBLIC / "nccl_1514_internal_closed" / "log.txt").read_text().splitlines()[:4]
    log = parse_stderr_lines([f"[rank2]: {t}\n" for t in text], path="rank2.err")
    f = stderr_facts([log]).ranks[2]
    assert f.origin is None and "nccl_error" in [c["kind"] for c in f.consequences]
    rep = analyze_hang(stderr_logs=[log], world_size=4)
    assert all(2 not in d.culprit_ranks for d in rep.diagnoses)
    assert any(2 in d.waiting_ranks and d.kind == "nccl_error" for d in rep.diagnoses)
