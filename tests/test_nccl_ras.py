"""NCCL RAS reports (parsers/nccl_ras.py, analyzer/hang/ras.py): the parser's tables from NCCL's own format
strings, and the verdict through the CLI, alone and joined with the Flight Recorder's."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from parsers.discover import NCCL_RAS, classify
from parsers.errors import InputError
from parsers.nccl_ras import looks_like_ras, parse_ras
from tests.conftest import FIXTURES

RAS = FIXTURES / "nccl_ras"


def _cli(folder, *extra) -> tuple[int, dict]:
    p = subprocess.run([sys.executable, "-m", "analyzer", str(folder), "--format", "json", *extra],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode in (0, 1), p.stderr
    return p.returncode, json.loads(p.stdout)


def test_text_report_tables():
    r = parse_ras(str(RAS / "stalled8_text" / "ncclras_status.txt"))
    assert (r.format, r.nccl_version) == ("text", "2.26.2")
    assert r.job == dict(nodes=2, processes_per_node=4, gpus_per_process=1, processes=8, gpus=8)
    g = r.groups.records()
    assert [(x["group"], x["comms"], x["ranks_per_comm"], x["status"], x["errors"]) for x in g] == \
        [(0, 1, 8, "RUNNING", "MISMATCH")]
    assert [(c["comm"], c["comm_hash"], c["size"], c["kind"]) for c in r.comms.records()] == \
        [("#0-0", "1a61d99272984251", 8, "MISMATCH")]
    assert sorted((c["op"], c["launched"], c["n_ranks"]) for c in r.cohorts.records()) == \
        [("AllReduce", 4, 1), ("AllReduce", 5, 7)]
    (rank,) = r.ranks.records()
    assert (rank["rank"], rank["launched"], rank["pid"], rank["host"], rank["gpu"]) == (2, 4, 63126, "10.0.0.1", "2")


def test_outliers_listed_under_their_count():
    r = parse_ras(str(RAS / "ahead16_text" / "ras.log"))
    assert [(x["group"], x["comms"], x["ranks_per_comm"]) for x in r.groups.records()] == [(0, 1, 16), (1, 8, 2)]
    assert sorted((x["rank"], x["launched"], x["pid"]) for x in r.ranks.records()) == \
        [(6, 213, 51206), (7, 213, 51207)]


def test_json_report_counts_and_missing_ranks():
    r = parse_ras(str(RAS / "dead4_json" / "ras_status.json"))
    assert (r.format, r.nccl_version, r.timeouts) == ("json", "2.28.9", 1)
    assert r.cohorts.empty  # every member launched the same counts
    missing = [x for x in r.ranks.records() if x["context"] == "missing"]
    assert [(x["rank"], x["pid"], x["status"]) for x in missing] == [(3, 73455, "DEAD")]


def test_json_mismatched_counts_make_cohorts(tmp_path):
    doc = json.loads((RAS / "dead4_json" / "ras_status.json").read_text())
    doc["communicators"][0]["ranks"][1]["collective_counts"]["AllReduce"] = 36
    p = tmp_path / "ras.json"
    p.write_text(json.dumps(doc))
    r = parse_ras(str(p))
    assert sorted((c["op"], c["launched"], c["n_ranks"]) for c in r.cohorts.records()) == \
        [("AllReduce", 36, 1), ("AllReduce", 37, 2)]
    assert r.comms.records()[0]["kind"] == "MISMATCH"


def test_classified_by_content_not_name(tmp_path):
    for f in ("stalled8_text/ncclras_status.txt", "ahead16_text/ras.log", "dead4_json/ras_status.json",
              "monitor_dead/ncclras_monitor.log"):
        assert classify(RAS / f).kind == NCCL_RAS, f
    plain = tmp_path / "notes.txt"
    plain.write_text("Job summary\n===========\nnothing else here, the quarterly numbers\n" * 3)
    assert classify(plain).kind != NCCL_RAS
    assert not looks_like_ras(b'{"communicators": [], "name": "x"}')


def test_unreadable_ras_is_an_input_error(tmp_path):
    p = tmp_path / "ras.json"
    p.write_text('{"communicators": 5, "nccl_version": "2.28.7", "communicators_count": 1}')
    with pytest.raises(InputError):
        parse_ras(str(p))


def test_hostile_numbers_and_lines_stay_bounded(tmp_path):
    p = tmp_path / "ras.txt"
    body = (RAS / "stalled8_text" / "ncclras_status.txt").read_text()
    body = body.replace("operation 5", "operation 99999999999999999999999").replace("Rank 2 has", "Rank 2\x1b[31m has")
    p.write_text(body + ("  " + "x" * 100000 + "\n") * 3)
    r = parse_ras(str(p))  # a count no job reaches reads as unknown (-1); the escape makes that line unmatched
    assert sorted(r.cohorts["launched"].tolist()) == [-1] and r.ranks.empty


def test_ras_alone_names_the_rank_behind():
    _, rep = _cli(RAS / "stalled8_text")
    (d,) = rep["hang"]["diagnoses"]
    assert (d["kind"], d["culprit_ranks"], d["source"], d["confidence"], d["tie"]) == \
        ("missing_rank", [2], "nccl_ras", 0.7, False)
    assert "launched AllReduce operations up to #4 while 7 rank(s) launched up to #5" in d["cause"]
    assert rep["findings"][0]["id"] == "HANG002"
    assert rep["hang"]["ras"]["files"][0]["nccl_version"] == "2.26.2"


def test_ranks_ahead_are_an_honest_tie():
    _, rep = _cli(RAS / "ahead16_text")
    (d,) = rep["hang"]["diagnoses"]
    assert d["tie"] and d["confidence"] < 0.5 and d["culprit_ranks"] == [6, 7]
    assert all(f.get("confidence", 0) < 0.5 for f in rep["findings"] if f.get("subject", {}).get("ranks"))


def test_json_dead_rank_is_the_crashed_one():
    _, rep = _cli(RAS / "dead4_json")
    (d,) = rep["hang"]["diagnoses"]
    assert (d["kind"], d["culprit_ranks"], d["confidence"]) == ("crashed_rank", [3], 0.75)
    assert "process 73455 on node 10.0.0.1" in d["cause"]


def test_monitor_dead_peer_without_a_rank_map_names_the_process_only():
    _, rep = _cli(RAS / "monitor_dead")
    (d,) = rep["hang"]["diagnoses"]
    assert d["culprit_ranks"] == [] and d["confidence"] < 0.5
    assert "Process 73455 on node 10.0.0.1" in d["cause"]


def test_joined_with_flight_recorder_dumps(tmp_path):
    """The same hang seen by FR dumps and NCCL logs (rank 2 stalled) and by RAS: one diagnosis, RAS as evidence."""
    for f in (FIXTURES / "sim" / "hang_stalled_rank").iterdir():
        shutil.copy(f, tmp_path / f.name)
    shutil.copy(RAS / "stalled8_text" / "ncclras_status.txt", tmp_path)
    _, rep = _cli(tmp_path)
    ds = rep["hang"]["diagnoses"]
    assert [d["culprit_ranks"] for d in ds] == [[2]]
    assert ds[0]["source"] != "nccl_ras"
    assert any("NCCL RAS" in e["text"] and "rank(s) 2" in e["text"] for e in ds[0]["evidence"][:2])


def test_ras_breaks_a_tie_it_can_see(tmp_path):
    """A tie between two suspects is decided when RAS shows one of them behind the rest."""
    from analyzer.hang.diagnosis import HangDiagnosis
    from analyzer.hang.ras import apply, ras_facts

    d = HangDiagnosis(kind="missing_rank", process_group="0", pg_desc="", seq=5, op="allreduce",
                      culprit_ranks=[2, 5], waiting_ranks=[0, 1, 3, 4, 6, 7], tie=True, confidence=0.4)
    rep = parse_ras(str(RAS / "stalled8_text" / "ncclras_status.txt"))
    (out,) = apply([d], ras_facts([rep], 8))
    assert (out.culprit_ranks, out.tie, out.confidence) == ([2], False, 0.7)
    assert 5 in out.waiting_ranks


def test_a_report_cut_before_its_warnings_says_so(tmp_path):
    """A report that stops in its communicators table lists no mismatch: unknown, not OK; the file says so."""
    full = (RAS / "stalled8_text" / "ncclras_status.txt").read_text()
    p = tmp_path / "ras.txt"
    p.write_text(full[:full.index("\nErrors\n")])
    r = parse_ras(str(p))
    assert r.cohorts.empty and len(r.groups) == 1
    assert any("stops before its Errors and Warnings section" in w for w in r.warnings)
    assert not parse_ras(str(RAS / "stalled8_text" / "ncclras_status.txt")).warnings
