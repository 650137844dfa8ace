"""The post-mortem on the third real failure bed (fixtures/real-cpu-failures-3: gloo size aborts, monitored_barrier,
P2P rings and pipelines), taken the user's way: `analyzer.load(folder)` on each case folder with nothing from
expected.json passed in (no world size, no groups); only the assertions read expected.json.

Per case:
- (a) the verdict is not OK: every case is a failed job;
- (b) no diagnosis blames a healthy rank at confidence >= 0.5 unless it says it is a tie;
- (c) the first diagnosis names the planted culprit exactly, or is an honest tie (containing the culprit) or an
  unknown (no culprit named) below 0.5.
And per item of issue 21 the bed was made for:
- item 2: on a stderr-only copy of a size abort nothing names the sender, so no diagnosis names a culprit at
  confidence >= 0.5 (the aborted rank is a receiver; whether its buffer or its peer's data is the odd one is not
  in the logs);
- item 4: `monitored_barrier` names the ranks that did not arrive (or, on the others, the rank they could not
  hear from): the first diagnosis names exactly those, at confidence >= 0.5;
- item 5: where gloo records no P2P, the first diagnosis of a P2P fault is narrowed to the stuck pair (its culprit
  ranks lie within the planted transfer's src and dst) and includes the culprit.

What the analysis still gets wrong is marked xfail(strict=True) per case and assertion, with the reason: XFAIL_*
below (a fix that makes one pass must remove its entry). The held-out cases (`"held_out": true`) are for measuring
only; do not tune on them.
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import pytest

import analyzer

BED = Path(__file__).resolve().parent.parent / "fixtures" / "real-cpu-failures-3"
CASES = sorted(p.parent for p in BED.glob("*/expected.json"))
pytestmark = pytest.mark.slow  # one analyzer.load per case folder (cached), about a second of CPU each

# case -> why the analysis still fails that assertion (strict: a fix that makes it pass must remove the entry).
# Every item-2 and item-4 case that failed when the bed was made passes since the receiver-side size reading and
# the monitored_barrier reader landed; what is left is the one ring whose stuck pair the inputs hardly show.
XFAIL_VERDICT: dict[str, str] = {}
XFAIL_HEALTHY: dict[str, str] = {}
XFAIL_FIRST: dict[str, str] = {}
XFAIL_STDERR_SIZE: dict[str, str] = {}
XFAIL_MONITORED: dict[str, str] = {}
XFAIL_P2P: dict[str, str] = {
    "cp_ring_missing_irecv": "item 5: the context-parallel groups are not in the dumps, so the tie stays wider "
                             "than the pair 3 -> 4 (rank 4 left its irecv out and went on to the all_reduce)",
}


@lru_cache(maxsize=None)
def analysed(case: Path) -> tuple[dict, str, list[dict]]:
    """(expected.json, the verdict, the hang diagnoses, root causes first) of `analyzer.load(case)`."""
    a = analyzer.load(str(case))
    return json.loads((case / "expected.json").read_text()), a.verdict, list(a.report["hang"]["diagnoses"])


def _culprits(exp: dict) -> set[int]:
    return {r for f in exp["faults"] for r in f["ranks"]}


def _params(xfail: dict[str, str]):
    return [pytest.param(c, id=c.name, marks=pytest.mark.xfail(strict=True, reason=xfail[c.name]))
            if c.name in xfail else pytest.param(c, id=c.name) for c in CASES]


def _cases(pick) -> list[Path]:
    return [c for c in CASES if pick(analysed_truth(c), c.name)]


def _params_of(cases: list[Path], xfail: dict[str, str]):
    return [pytest.param(c, id=c.name, marks=pytest.mark.xfail(strict=True, reason=xfail[c.name]))
            if c.name in xfail else pytest.param(c, id=c.name) for c in cases]


def test_the_bed_is_there():
    assert len(CASES) >= 15
    names = {c.name for c in CASES}
    for xfail in (XFAIL_VERDICT, XFAIL_HEALTHY, XFAIL_FIRST, XFAIL_STDERR_SIZE, XFAIL_MONITORED, XFAIL_P2P):
        assert set(xfail) <= names
    held = [c for c in CASES if analysed_truth(c)["held_out"]]
    assert 0.25 <= len(held) / len(CASES) <= 0.45


def analysed_truth(case: Path) -> dict:
    return json.loads((case / "expected.json").read_text())


@pytest.mark.parametrize("case", _params(XFAIL_VERDICT))
def test_the_verdict_is_not_ok(case: Path) -> None:
    _, verdict, diagnoses = analysed(case)
    assert not verdict.startswith("OK"), verdict
    assert diagnoses, "a failed job with no hang diagnosis"


@pytest.mark.parametrize("case", _params(XFAIL_HEALTHY))
def test_no_healthy_rank_is_blamed(case: Path) -> None:
    exp, _, diagnoses = analysed(case)
    culprits = _culprits(exp)
    wrong = [(d["kind"], d["culprit_ranks"], d["confidence"]) for d in diagnoses
             if d["confidence"] >= 0.5 and not d.get("tie") and set(d["culprit_ranks"]) - culprits]
    assert not wrong


@pytest.mark.parametrize("case", _params(XFAIL_FIRST))
def test_first_diagnosis_names_the_culprit(case: Path) -> None:
    exp, _, diagnoses = analysed(case)
    assert diagnoses
    top, culprits = diagnoses[0], _culprits(exp)
    named = set(top["culprit_ranks"])
    exact = named == culprits
    honest_tie = bool(top.get("tie")) and culprits <= named and top["confidence"] < 0.5
    unknown = not named and top["confidence"] < 0.5
    assert exact or honest_tie or unknown, (top["kind"], top["culprit_ranks"], top["confidence"], top.get("tie"))


STDERR_SIZE = _cases(lambda e, n: n.endswith("_stderr_only") and e["faults"][0]["kind"] == "mismatched_size")
MONITORED = _cases(lambda e, n: e["faults"][0]["op"] == "monitored_barrier")
P2P = _cases(lambda e, n: e["faults"][0]["kind"] == "p2p_mismatch")


@pytest.mark.parametrize("case", _params_of(STDERR_SIZE, XFAIL_STDERR_SIZE))
def test_a_size_abort_on_stderr_alone_names_no_culprit_above_half(case: Path) -> None:
    _, _, diagnoses = analysed(case)
    sure = [(d["kind"], d["culprit_ranks"], d["confidence"]) for d in diagnoses
            if d["culprit_ranks"] and d["confidence"] >= 0.5]
    assert not sure


@pytest.mark.parametrize("case", _params_of(MONITORED, XFAIL_MONITORED))
def test_monitored_barrier_names_who_did_not_arrive(case: Path) -> None:
    exp, _, diagnoses = analysed(case)
    top = diagnoses[0]
    assert set(top["culprit_ranks"]) == _culprits(exp) and top["confidence"] >= 0.5, \
        (top["kind"], top["culprit_ranks"], top["confidence"])


@pytest.mark.parametrize("case", _params_of(P2P, XFAIL_P2P))
def test_p2p_is_narrowed_to_the_stuck_pair(case: Path) -> None:
    exp, _, diagnoses = analysed(case)
    top, fault = diagnoses[0], exp["faults"][0]
    pair = {fault["p2p"]["src"], fault["p2p"]["dst"]}
    named = set(top["culprit_ranks"])
    assert set(fault["ranks"]) <= named <= pair, (top["kind"], top["culprit_ranks"], top["confidence"])
