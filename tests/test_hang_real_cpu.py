"""Real gloo hangs made with torch on the CPU (fixtures/real-cpu-hang, see make_hangs.py): culprit found, through
the user's path (`analyzer.load(folder)`, nothing from expected.json handed in; tests/hang_user_path.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests import hang_user_path

REAL = Path(__file__).resolve().parent.parent / "fixtures" / "real-cpu-hang"
CASES = ["mismatched_op", "missing_rank", "size_mismatch_abort"]


def _run(case: str):
    u = hang_user_path.analysed(REAL / case)
    return u.exp["faults"][0], u


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_real_hang_culprit(case: str) -> None:
    """The first diagnosis names the planted (kind, group, seq, rank) of each real run."""
    fault, rep = _run(case)
    top = rep.diagnoses[0]
    assert (top.kind, top.process_group, top.seq, top.culprit_ranks) == (
        fault["kind"], fault["process_group"], fault["seq"], fault["ranks"])


def test_real_mismatched_op_details() -> None:
    """Rank 2 called broadcast where ranks 0 and 1 called all_reduce; the branch's source line is cited."""
    _, rep = _run("mismatched_op")
    top = rep.diagnoses[0]
    assert top.ops == {0: "allreduce", 1: "allreduce", 2: "broadcast"} and top.waiting_ranks == [0, 1]
    assert top.pg_desc == "default_pg" and top.sizes == {0: 16, 1: 16, 2: 16}
    assert any("make_hangs.py:55 rank_main" in e[2] for e in top.evidence)


def test_real_crashed_rank_points_at_its_stderr() -> None:
    """Rank 1 aborted in gloo's size check without a dump (its stderr says so); the others agree at seq 3, so the
    rank without a dump passed the odd size. World size comes from the dumps' pg_config."""
    fault, rep = _run("size_mismatch_abort")
    top = rep.diagnoses[0]
    assert (top.kind, top.seq, top.culprit_ranks, top.waiting_ranks) == ("mismatched_size", 3, [1], [0, 2])
    assert rep.ranks_without_dump[1].startswith("died (SIGABRT)")
    assert rep.report["job"]["world_size"] == 3 and "pg_config" in rep.report["job"]["world_size_source"]
    tails = [e for e in top.evidence if e[0].endswith("rank1.stderr")]
    assert any("Received data size doesn't match expected size" in e[2] for e in tails)


@pytest.mark.slow
def test_real_missing_rank_table() -> None:
    """Per-rank progress: ranks 0-2 enqueued seq 6, rank 3 stopped at 5."""
    _, rep = _run("missing_rank")
    g = next(x for x in rep.report["hang"]["groups"] if x["process_group"] == "0")
    assert g["last_enqueued"] == {"0": 6, "1": 6, "2": 6, "3": 5}
