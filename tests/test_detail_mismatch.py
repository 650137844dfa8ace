"""stderr_roots.detail_mismatch: the majority behind a TORCH_DISTRIBUTED_DEBUG=DETAIL mismatch is taken over the
aspect that differs (the ops, or the shapes / dtypes of one op's calls), never over a map that mixes op names
with shape values."""
from __future__ import annotations

from analyzer.hang.stderr_facts import StderrFacts
from analyzer.hang.stderr_roots import detail_mismatch


def _rep(rank: int, peer: int, reason: str, op: str = "ALLREDUCE") -> dict:
    return {"rank": rank, "peer": peer, "reason": reason, "op": op, "seq": 4, "file": f"rank{rank}.err",
            "line": 1, "text": f"[rank{rank}]: Detected mismatch between collectives on ranks. {reason}"}


def test_shapes_decide_when_the_ranks_that_report_run_the_same_op():
    """Ranks 0 and 2 hold 16 elements, rank 1 holds 8; rank 1 reports rank 0 first, then rank 0 reports rank 1
    and rank 2 reports rank 1. Every reporter runs ALLREDUCE: a map that took rank 0's entry from rank 1's report
    (its shape, 16) beside the others' op names made healthy rank 0 the odd one; over the shapes it is rank 1."""
    facts = StderrFacts(mismatch_reports=[_rep(1, 0, "Tensor shapes: 8vs16"), _rep(0, 1, "Tensor shapes: 16vs8"),
                                          _rep(2, 1, "Tensor shapes: 16vs8")])
    d = detail_mismatch(None, facts)
    assert d is not None and d.culprit_ranks == [1] and not d.tie
    assert d.sizes == {1: 8, 0: 16, 2: 16} and d.op == "allreduce" and d.ops == {0: "allreduce", 1: "allreduce",
                                                                                  2: "allreduce"}
    assert d.seq == 5 and d.confidence == 0.85


def test_two_ranks_that_differ_in_shape_are_an_honest_tie():
    facts = StderrFacts(mismatch_reports=[_rep(0, 1, "Tensor shapes: 16vs8"), _rep(1, 0, "Tensor shapes: 8vs16")])
    d = detail_mismatch(None, facts)
    assert d.tie and d.culprit_ranks == [0, 1] and d.confidence == 0.45


def test_op_types_decide_an_op_mismatch_and_a_peer_op_counts():
    """Rank 2 broadcasts where ranks 0 and 1 all-reduce; only rank 0 and rank 1 report (each naming rank 2's op)."""
    facts = StderrFacts(mismatch_reports=[_rep(0, 2, "Op type: ALLREDUCEvsBROADCAST"),
                                          _rep(1, 2, "Op type: ALLREDUCEvsBROADCAST")])
    d = detail_mismatch(None, facts)
    assert d.culprit_ranks == [2] and d.ops == {0: "allreduce", 1: "allreduce", 2: "broadcast"}
