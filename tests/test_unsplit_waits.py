"""Collective time with no known wait/transfer split (issue #22): when a traced rank's collectives are missing
(its trace was cut off mid-write), the others' spans in those collectives hold the wait for it and the transfer
together. Booking that time as transfer made the cut straggler's victims read as "exposed communication" (COMM001
first, the fix "lower bucket_cap_mb"); it is now reported as unsplit, counted neither as waiting nor as exposed
communication, and said so in the report."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import analyzer
from analyzer.cross_rank.collectives import instance_frame, mark_wait_known, unknown_iids
from analyzer.rank import intervals as iv
from analyzer.report.waits import split_times

BED = Path(__file__).resolve().parent.parent / "fixtures" / "real-cpu-perf-2"
_spec = importlib.util.spec_from_file_location("perf_bed2_judge_unsplit", BED / "judge.py")
judge = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(judge)
_spec = importlib.util.spec_from_file_location("perf_bed2_score_cuts", BED / "score_cuts.py")
score_cuts = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(score_cuts)


def _cut(src: Path, rank: int, fraction: float, into: Path) -> Path:
    """The run's traces in ``into`` with one rank's JSON cut at ``fraction`` of its bytes (the bed's helper)."""
    return score_cuts.cut_copy(src, rank, fraction, into / "cut")


def _members(iid: int, ranks: list[int], starts: list[int], ends: list[int]) -> pd.DataFrame:
    return pd.DataFrame({"iid": iid, "rank": ranks, "start": starts, "end": ends, "op": "allreduce",
                         "nelems": 1000, "dtype": "Float", "process_group": "0", "kind": "collective", "seq": iid,
                         "src": -1, "dst": -1, "step": 1})


def test_an_instance_lacking_a_traced_rank_has_no_known_wait_but_one_lacking_an_untraced_rank_keeps_it():
    m = pd.concat([_members(0, [0, 1, 2, 3], [0, 10, 20, 30], [100, 100, 100, 100]),
                   _members(1, [1, 2, 3], [200, 210, 220], [300, 300, 300])], ignore_index=True)
    expected = {("collective", "0"): [0, 1, 2, 3]}
    inst, _ = instance_frame(m, {}, expected)
    traced = inst.copy()
    mark_wait_known(traced, expected, [0, 1, 2, 3])
    assert traced["wait_known"].tolist() == [True, False]
    assert unknown_iids(traced).tolist() == [1]
    assert np.isnan(traced["busbw_gbps"].iloc[1]) and not np.isnan(traced["busbw_gbps"].iloc[0])
    subset = inst.copy()  # rank 0 was never traced: nothing says it was late, the span after rank 3 is transfer
    mark_wait_known(subset, expected, [1, 2, 3])
    assert subset["wait_known"].tolist() == [True, True] and len(unknown_iids(subset)) == 0


def test_the_split_of_one_window_with_an_unsplit_span_is_exact():
    class Lanes:
        comm = iv.as_intervals(np.array([0]), np.array([100]))
        compute = iv.as_intervals(np.array([50]), np.array([80]))
    # wait [0, 20) for the present members, then [20, 100) with an absent member: unsplit
    w, ew, t, tov, u, eu = split_times(Lanes(), (np.array([0]), np.array([100]), np.array([0]), np.array([20]),
                                                 np.array([20]), np.array([100])))
    assert (w.tolist(), ew.tolist(), t.tolist(), tov.tolist(), u.tolist(), eu.tolist()) == \
        ([20], [20], [0], [0], [80], [50])
    # no unsplit interval: the rest is transfer, as before
    w, ew, t, tov, u, eu = split_times(Lanes(), (np.array([0]), np.array([100]), np.array([0]), np.array([20]),
                                                 np.empty(0, np.int64), np.empty(0, np.int64)))
    assert (t.tolist(), tov.tolist(), u.tolist()) == ([80], [30], [0])


def _length_outside(spans: list, holes: list) -> int:
    """|union(spans) minus union(holes)| in ns, by a sweep over the edges (no interval library)."""
    edges = sorted([(s, 0, 1) for s, e in spans] + [(e, 0, -1) for s, e in spans]
                   + [(s, 1, 1) for s, e in holes] + [(e, 1, -1) for s, e in holes])
    depth, total, last = [0, 0], 0, None
    for t, kind, d in edges:
        if last is not None and depth[0] > 0 and depth[1] == 0:
            total += t - last
        depth[kind] += d
        last = t
    return total


@pytest.mark.slow
def test_a_cut_straggler_is_not_read_as_exposed_communication(tmp_path: Path) -> None:
    """ddp4-compute-40 with the straggler's (rank 2's) trace cut at 50 %: the cut loses a whole thread, so none
    of its collectives are kept, and nothing left says it was late. The others' spans in the collectives it is
    missing from were read as transfer: COMM001 first at 36.7 % exposed data-parallel communication, the fix
    "send less". Now that time is unsplit: no warning at all, the report says how much is unsplit and why, and
    no healthy rank is named."""
    folder = _cut(BED / "ddp4-compute-40", 2, 0.5, tmp_path)
    a = analyzer.load(folder)
    rep = a.report
    assert judge.first_warning(a.findings) is None, judge.describe(judge.first_warning(a.findings))
    wu = rep["cross_rank"]["collectives"]["wait_unknown"]
    assert wu["ranks_missing"] == [2] and wu["why"] == {"2": "collectives_lost"} and wu["groups"] == ["0"]
    col = a.collectives
    assert wu["instances"] == col.loc[~col["wait_known"], "instance"].nunique() > 0
    dp = next(r for r in rep["cross_rank"]["roles"] if r["role"] == "dp")
    assert dp["exposed_comm_share"] == pytest.approx(0.0, abs=0.01) and dp["unsplit_share"] > 0.4
    # each rank's comm = wait + transfer + unsplit, step by step
    for row in rep["metrics"]["per_step"]:
        assert row["comm_us"] == pytest.approx(row["wait_us"] + row["transfer_us"] + row["unsplit_us"], abs=1.0)
    # cross-check against the member table, by a plain sweep: each rank's unsplit time is the time its members of
    # the compared steps' instances lacking rank 2 spend after the last present arrival, outside its waits (gloo's
    # spans of one rank overlap: DDP queues the next bucket's all-reduce before the last one ends)
    steps = {row["step"] for row in rep["metrics"]["per_step"]}
    mine = col[col["step"].isin(steps)]
    for r in rep["metrics"]["per_rank"]:
        m = mine[mine["rank"] == r["rank"]]
        wait = [(s, s + w) for s, w in zip(m["start_ns"], (m["wait_us"] * 1e3).round().astype(np.int64))]
        rest = [(s + w, e) for s, w, e, k in zip(m["start_ns"], (m["wait_us"] * 1e3).round().astype(np.int64),
                                                m["end_ns"], m["wait_known"]) if not k]
        assert r["unsplit_us"] == pytest.approx(_length_outside(rest, wait) / 1e3, rel=0.01), r["rank"]
    ev = [e["text"] for f in a.findings if f["id"] == "INPUT002" for e in f["evidence"]]
    assert any(t.startswith("unsplit: the other ranks spend") and "rank 2 is missing from" in t for t in ev), ev
    load5 = next(f for f in a.findings if f["id"] == "LOAD005")
    assert load5["title"].startswith("Rank 2 has no step left to compare: it is left out, and the other ranks")
    assert "every rank has" not in load5["title"]
    a.close()


@pytest.mark.slow
def test_a_cut_healthy_rank_leaves_the_straggler_named(tmp_path: Path) -> None:
    """The same run with a healthy rank (rank 0) cut instead: the straggler (rank 2, compute) is still in the
    folder and is still the first warning; the instances lacking rank 0 keep the others' known waits for rank 2."""
    folder = _cut(BED / "ddp4-compute-40", 0, 0.5, tmp_path)
    a = analyzer.load(folder)
    t = json.loads((BED / "ddp4-compute-40" / "truth.json").read_text())
    ok, why = judge.judge(t, a.findings)
    assert ok, why
    assert a.report["cross_rank"]["collectives"]["wait_unknown"]["ranks_missing"] == [0]
    a.close()


@pytest.mark.slow
def test_a_cut_rank_s_operator_count_does_not_make_its_peers_look_busier(tmp_path: Path) -> None:
    """ddp3-accum4-clean with rank 0 cut: its operator count, short of the threads the cut lost, was the peers'
    median for the two whole ranks, so both read ~12 operators per step "more work" and rank 1 was named a
    compute straggler on a clean run. A cut rank's count is left out of the comparison."""
    folder = _cut(BED / "ddp3-accum4-clean", 0, 0.5, tmp_path)
    a = analyzer.load(folder)
    assert judge.first_warning(a.findings) is None, judge.describe(judge.first_warning(a.findings))
    per = {p["rank"]: p for p in a.report["cross_rank"]["stragglers"]["per_rank"]}
    assert 0 not in per or per[0].get("more_compute_ops") is None
    assert all(abs(per[r]["more_compute_ops"]) < 1 for r in (1, 2)), per
    a.close()


def test_a_rank_whose_collectives_a_cut_lost_may_belong_to_a_group_known_only_from_its_rows():
    """Without pg names and with several groups declared, the rows are grouped by stream order and a group's
    members are the ranks that have rows in it: a rank whose collectives the cut lost entirely has none, so its
    absence looked like not being a member, the instances looked whole, and the others' wait for it was transfer."""
    from types import SimpleNamespace

    from analyzer.cross_rank.collectives import assign_keys, maybe_members
    from analyzer.load.damage import CutDamage
    long = {"pg_name": np.array(["", "", ""], dtype=object), "pg_ranks": np.array(["", "", ""], dtype=object),
            "device_type": np.array(["cpu"] * 3, dtype=object), "stream": np.array([0, 0, 0]),
            "rank": np.array([0, 2, 3])}
    declared = {"1": SimpleNamespace(ranks=[0, 1]), "2": SimpleNamespace(ranks=[2, 3])}
    keys = assign_keys(long, declared)
    assert keys.members == {"order": [0, 2, 3]} and keys.inferred == frozenset({"order"})
    lost = CutDamage(rank=1, path="rank1.json", cut_at_ns=0, cut_thread=7, lost_threads=[9])
    kept = CutDamage(rank=1, path="rank1.json", cut_at_ns=0, cut_thread=7, lost_threads=[])
    traces = {r: None for r in range(4)}
    assert maybe_members(keys, SimpleNamespace(damage={1: lost}, traces=traces)) == {"order": [1]}
    # its rows up to the cut say where it is
    assert maybe_members(keys, SimpleNamespace(damage={1: kept}, traces=traces)) == {}
    # a group of only some of the other ranks (a pair) is not given the lost rank: which pair it was in is unknown
    pair = type(keys)({"order": [0, 2, 3], "pair": [0, 2]}, keys.method, frozenset({"order", "pair"}))
    assert maybe_members(pair, SimpleNamespace(damage={1: lost}, traces=traces)) == {"order": [1]}
    m = _members(0, [0, 2, 3], [0, 10, 20], [100, 100, 100]).assign(process_group="order")
    expected = {("collective", "order"): [0, 2, 3]}
    inst, _ = instance_frame(m, {}, expected)
    mark_wait_known(inst, expected, [0, 1, 2, 3], {"order": [1]})
    assert inst["wait_known"].tolist() == [False]
    mark_wait_known(inst, expected, [0, 1, 2, 3])
    assert inst["wait_known"].tolist() == [True]


def test_role_times_books_a_flagged_member_s_rest_as_unsplit():
    """role_times (run where a rank's interval sets are kept): two members of one role, [0, 100) with its wait
    ending at 20 and flagged unsplit, and [200, 300) with no wait, not flagged; compute [50, 80) and [250, 260)."""
    from analyzer.cross_rank.roles import role_times

    class Lanes:
        compute = iv.as_intervals(np.array([50, 250]), np.array([80, 260]))
    s, e, w = np.array([0, 200]), np.array([100, 300]), np.array([20, 200])
    (role, comm, ov, wait, uns, exp_uns), = role_times(Lanes(), (np.array([0]), np.array([400]),
                                                                 [("dp", s, e, w, np.array([True, False]))]))
    assert (role, comm, wait, uns, exp_uns, ov) == ("dp", 200.0, 20.0, 80.0, 50.0, 10.0)
    (_, comm, ov, wait, uns, exp_uns), = role_times(Lanes(), (np.array([0]), np.array([400]), [("dp", s, e, w)]))
    assert (wait, uns, exp_uns, ov) == (20.0, 0.0, 0.0, 40.0)  # no flags: the rest is transfer, as before


@pytest.mark.slow
def test_partitions_kept_by_the_engine_give_the_same_unsplit_report(tmp_path: Path, monkeypatch) -> None:
    """The member partitions answer each question where they are kept (a pool's workers here, partitions of a
    few instances each), with the slice of the unknown instances in each one's range: the report is the one the
    whole member table gives."""
    from analyzer.cross_rank import collectives as co
    folder = _cut(BED / "ddp4-compute-40", 2, 0.5, tmp_path)
    whole = analyzer.load(folder)
    want = whole.report
    whole.close()
    monkeypatch.setattr(co, "PARTITION_ROWS", 20)
    parted = analyzer.load(folder, jobs=2)
    got = parted.report
    assert parted.job.cache[("cross_rank", None)].parts.remote
    parted.close()
    for key in ("wait_unknown", "per_rank_wait"):
        assert got["cross_rank"]["collectives"][key] == want["cross_rank"]["collectives"][key]
    assert got["cross_rank"]["roles"] == want["cross_rank"]["roles"]
    assert got["metrics"]["per_rank"] == want["metrics"]["per_rank"]


@pytest.mark.slow
def test_a_healthy_rank_cut_out_of_exposed_fsdp_communication_gives_a_range_not_silence(tmp_path: Path) -> None:
    """fsdp4-clean-medium (the first real bed) warns COMM001 at 13.1 % exposed FSDP communication. With rank 1's
    trace cut its collectives are lost, so none of that time can be told from waiting for rank 1: COMM001 is an
    info with the range (0 % known, up to the exposed unsplit share), not silence and not a warning; and the text,
    Markdown and HTML reports show the unsplit column."""
    src = Path(__file__).resolve().parent.parent / "fixtures" / "real-cpu-perf" / "fsdp4-clean-medium"
    a = analyzer.load(_cut(src, 1, 0.8, tmp_path))
    assert judge.first_warning(a.findings) is None
    comm = next(f for f in a.findings if f["id"] == "COMM001")
    fsdp = next(r for r in a.report["cross_rank"]["roles"] if r["role"] == "fsdp")
    top = fsdp["exposed_comm_share"] + fsdp["exposed_unsplit_share"]
    assert comm["severity"] == "info" and 0.10 <= top <= 0.20
    assert comm["title"] == (f"Exposed FSDP (fsdp) communication is {100 * fsdp['exposed_comm_share']:.1f}% to "
                             f"{100 * top:.1f}% of step time: rank 1 is missing from its collectives, so its wait "
                             "and the transfer cannot be told apart")
    assert "unsplit ms" in a.render("text")
    assert "unsplit ms/step" in a.render("markdown") and "unsplit ms/step" in a.render("html")
    a.close()
