"""The cross-rank stage in bounded pieces (docs/scale.md): instance partitions give the same tables as one pass,
and clock alignment on a sample of instances still finds the simulator's true offsets."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analyzer.cross_rank import collectives as co
from analyzer.cross_rank import section as sec
from analyzer.cross_rank.desync import EXTRA_SEQ, _all_agree
from analyzer.load.job import load_job

pytestmark = pytest.mark.slow  # loads real or 64+ rank folders: outside the everyday loop

ROOT = Path(__file__).resolve().parent.parent
SIM = ROOT / "fixtures" / "sim"
SCENARIOS = sorted(p.parent.name for p in SIM.glob("*/expected.json") if list(p.parent.glob("rank*.pt.trace.json*")))
#: real CPU runs: send/recv pairs of two pipeline schedules, FSDP's all-gathers and reduce-scatters
REAL = [ROOT / "fixtures" / "real-cpu" / "pp-1f1b", ROOT / "fixtures" / "real-cpu-pipes" / "pp4-m12-loopedbfs-medium8",
        ROOT / "fixtures" / "real-cpu-perf" / "fsdp4-clean-medium"]


@lru_cache(maxsize=None)
def _job(folder: Path):
    return load_job([folder], jobs=1)


def _analyse(folder: Path):
    """The job (loaded once per folder) and a fresh cross-rank analysis under the module constants now set."""
    job = _job(folder)
    return job, sec._analyse(job, None)


@lru_cache(maxsize=None)
def _whole(folder: Path):
    """One pass with the default constants (read-only: shared by the tests)."""
    return _analyse(folder)


@pytest.mark.parametrize("folder", [SIM / n for n in SCENARIOS] + REAL,
                         ids=lambda p: p.name)
def test_instance_partitions_equal_one_pass(folder, monkeypatch):
    _, whole = _whole(folder)
    n = len(whole.members)
    if n < 4:
        pytest.skip("too few member rows to partition")
    monkeypatch.setattr(co, "PARTITION_ROWS", max(1, n // 7))
    _, parted = _analyse(folder)
    # built by the job's engine (one worker: serially, each partition kept as a pickle), in waves of two
    assert parted.parts.remote and len(parted.parts.parts) >= 7 and not whole.parts.remote
    pd.testing.assert_frame_equal(parted.instances, whole.instances)
    pd.testing.assert_frame_equal(parted.members, whole.members)
    assert parted.unmatched_rows == whole.unmatched_rows


def test_member_parts_answer_per_partition():
    from analyzer.cross_rank.member_parts import MemberParts, as_parts, partition_cuts
    assert partition_cuts(np.array([0, 0, 0, 1, 1, 2, 2, 2, 2]), 2) == [0, 3, 5, 9]
    assert partition_cuts(np.array([0, 0, 1]), 5) == [0, 3]
    a = pd.DataFrame({"iid": [0, 0, 1], "rank": [0, 1, 0], "wait_ns": [5, 0, 2]})
    b = pd.DataFrame({"iid": [3, 3, 4], "rank": [0, 1, 1], "wait_ns": [0, 7, 1]})
    parts = MemberParts([a, b], [(0, 2), (3, 5)], 6)
    assert parts.in_range(np.array([1, 2, 3, 4, 9])) == [(0, 1), (2, 4)]  # (no partition holds iid 2)
    assert parts.map(lambda p, k: int(p["wait_ns"].sum()) * k, [1, 10]) == [7, 80]
    pd.testing.assert_frame_equal(parts.frame(), pd.concat([a, b], ignore_index=True))
    got = parts.frame(lambda p, r: p[p["rank"] == r], [1, 1])
    assert got["wait_ns"].tolist() == [0, 7, 1] and got.index.tolist() == [0, 1, 2]
    assert as_parts(a).bounds == [(0, 2)] and len(as_parts(a)) == 3 and as_parts(parts) is parts
    empty = as_parts(pd.DataFrame({"iid": [], "rank": []}))
    assert len(empty) == 0 and empty.map(lambda p, x: 1) == [] and list(empty.frame().columns) == ["iid", "rank"]


def test_straggler_statistics_add_up_over_partitions():
    """per_rank_stats asks each partition for its members' counts and sums: exact numbers, split or not."""
    from analyzer.cross_rank import stragglers as sg
    from analyzer.cross_rank.member_parts import MemberParts
    m = pd.DataFrame({"iid": [0, 0, 0, 1, 1, 2, 2, 2, 2], "rank": [0, 1, 2, 0, 1, 0, 1, 2, 3],
                      "start": [10, 30, 20, 100, 140, 200, 260, 210, 220], "end": [50] * 3 + [150] * 2 + [300] * 4})
    for k, v in {"op": "allreduce", "dtype": "float", "process_group": "0", "kind": "collective"}.items():
        m[k] = v
    m["nelems"], m["seq"], m["src"], m["dst"], m["step"], m["stream"] = 4, m["iid"], -1, -1, 0, 7
    m["start"], m["end"] = m["start"] * 1000, m["end"] * 1000  # µs apart: every last arrival is decided
    inst, mem = co.instance_frame(m, {}, {("collective", "0"): [0, 1, 2, 3]}, owned=True)
    whole = sg.per_rank_stats(inst, mem)
    split = sg.per_rank_stats(inst, MemberParts([mem.iloc[:3], mem.iloc[3:5], mem.iloc[5:]],
                                                [(0, 1), (1, 2), (2, 3)], len(mem)))
    pd.testing.assert_frame_equal(split, whole)
    by = whole.set_index("rank")
    # waits: iid 0 latest start 30 → 20, 0, 10; iid 1 → 40, 0; iid 2 latest 260 → 60, 0, 50, 40
    assert by["wait_suffered_ns"].to_dict() == {0: 120_000, 1: 0, 2: 60_000, 3: 40_000}
    assert by["n_instances"].to_dict() == {0: 3, 1: 3, 2: 2, 3: 1}
    assert by["times_last"].to_dict() == {0: 0, 1: 3, 2: 0, 3: 0}  # rank 1 arrived last each time
    assert by["n_decided"].to_dict() == {0: 3, 1: 3, 2: 2, 3: 1}
    assert by["wait_imposed_ns"].to_dict() == {0: 0, 1: 30_000 + 40_000 + 150_000, 2: 0, 3: 0}
    assert by["mean_group"].to_dict() == {0: 4.0, 1: 4.0, 2: 4.0, 3: 4.0}


def test_partitions_cut_between_instances():
    """Every partition holds whole instances: an instance's members are never split (its wait is latest − own)."""
    m = pd.DataFrame({"iid": [0, 0, 0, 1, 1, 2, 2, 2, 2], "rank": [0, 1, 2, 0, 1, 0, 1, 2, 3],
                      "start": [10, 30, 20, 100, 140, 200, 260, 210, 220], "end": [50, 50, 50, 150, 150, 300, 300,
                                                                                 300, 300]})
    for k in ("op", "dtype", "process_group", "kind"):
        m[k] = {"op": "allreduce", "dtype": "float", "process_group": "0", "kind": "collective"}[k]
    m["nelems"], m["seq"], m["src"], m["dst"], m["step"], m["stream"] = 4, m["iid"], -1, -1, 0, 7
    inst, mem = co.instance_frames(m.copy(), {}, {}, partition_rows=2)
    whole_inst, whole_mem = co.instance_frame(m.copy(), {}, {}, owned=True)
    pd.testing.assert_frame_equal(inst, whole_inst)  # dtypes too: no empty last partition (the last instance
    pd.testing.assert_frame_equal(mem, whole_mem)    # alone outgrows a partition here)
    assert mem["wait_ns"].tolist() == [20, 0, 10, 40, 0, 60, 0, 50, 40]
    assert inst["last_rank"].tolist() == [1, 1, 1]
    assert inst["last_delay_ns"].tolist() == [10, 40, 40]
    assert inst["n_members"].tolist() == [3, 2, 4]


def test_alignment_sample_spreads_over_each_group():
    # group 0: 100 instances of 4 rows; group 1: 10 instances of 2 rows; one extra collective
    g = np.r_[np.zeros(400, np.int64), np.ones(20, np.int64), [1]]
    seq = np.r_[np.tile(np.arange(100), 4), np.tile(np.arange(10), 2), [EXTRA_SEQ]]
    assert sec.alignment_sample(g, seq, budget=len(seq)) is None  # within budget: every row
    keep = sec.alignment_sample(g, seq, budget=100)
    # group 0 keeps max(min(100, 64), ceil(100 * 100/421) = 24) = 64 instances → every 1st (stride 100 // 64 = 1)
    assert keep[:400].all()
    keep = sec.alignment_sample(np.r_[np.zeros(4000, np.int64)], np.tile(np.arange(1000), 4), budget=400)
    # 1000 instances: want max(64, 100) = 100 → stride 10 → seq 0, 10, …, 990 on every rank
    assert keep.sum() == 400 and set(np.tile(np.arange(1000), 4)[keep]) == set(range(0, 1000, 10))
    keep = sec.alignment_sample(g, seq, budget=10)
    assert not keep[-1]  # the extra collective joins no instance
    assert keep[400:420].all()  # the small group keeps all its 10 (< 64) instances


@pytest.mark.parametrize("name", SCENARIOS)
def test_sampled_alignment_finds_true_offsets(name, monkeypatch):
    truth = json.loads((SIM / name / "expected.json").read_text())
    true = {int(r): v for r, v in truth["clock_offsets_ns"].items()}
    _, full = _whole(SIM / name)
    rows = int(full.alignment.offsets["n_matched"].sum())
    monkeypatch.setattr(sec, "ALIGN_ROWS", max(8, rows // 5))
    monkeypatch.setattr(sec, "ALIGN_MIN_INSTANCES", 3)  # the fewest instances a clock domain may align on
    job, cr = _analyse(SIM / name)
    al = cr.alignment
    assert al.status == "ok", al.message
    sampled = int(al.offsets["n_matched"].sum())
    coll = full.instances[full.instances["kind"] == "collective"]
    longest = int(coll.groupby("process_group").size().max())
    # the alignment really read fewer rows, unless every group is too short to thin (at most 2 × 3 instances: a
    # thinned sample of 3-4 leaves a clock domain short and the caller falls back to every row, as documented)
    assert sampled < rows or longest <= 6, (sampled, rows, longest)
    for r in job.ranks:
        want = true[r] - true[al.reference_rank]
        assert abs(al.offset_of[r] - want) <= 5_000, (r, al.offset_of[r], want)


def test_all_agree():
    a = np.array
    assert _all_agree(a([0, 0, 1, 1]), a([0, 1, 0, 1]), a([3, 4, 3, 4]))
    assert not _all_agree(a([0, 0, 1, 1]), a([0, 1, 0, 1]), a([3, 4, 4, 3]))  # order differs
    assert not _all_agree(a([0, 0, 1]), a([0, 1, 0]), a([3, 4, 3]))  # counts differ
    assert not _all_agree(a([0, 0, 0, 1, 1, 2]), a([0, 1, 2, 0, 1, 0]), a([3, 3, 3, 3, 3, 3]))
    # rows in any order: judged by (rank, seq)
    assert _all_agree(a([1, 0, 1, 0]), a([1, 0, 0, 1]), a([4, 3, 3, 4]))
    assert not _all_agree(a([0, 0, 1, 1, 0, 0]), a([0, 1, 0, 1, 2, 3]), np.zeros(6, int))


def test_realign_does_not_depend_on_row_order():
    from analyzer.cross_rank.desync import realign
    rows = pd.DataFrame({"rank": [0, 0, 1, 1, 0, 0], "seq": [0, 1, 0, 1, 2, 3], "op": ["allreduce"] * 6,
                         "nelems": [8] * 6, "start": [0, 10, 0, 10, 20, 30], "end": [5, 15, 5, 15, 25, 35],
                         "step": [-1] * 6, "process_group": ["0"] * 6})
    shuffled = realign(rows, None)
    ordered = realign(rows.sort_values(["rank", "seq"]).reset_index(drop=True), None)
    assert shuffled[2] is True and ordered[2] is True  # rank 1 lacks two of rank 0's four: realigned
    assert sorted(shuffled[0]["seq"].tolist()) == sorted(ordered[0]["seq"].tolist())


@pytest.mark.parametrize("name", ["straggler_ddp", "tp_dp_clean", "tp_pp_dp_1f1b_straggler"])
@pytest.mark.parametrize("by_group", [False, True])
def test_exposed_partitions_equal_one_pass(name, by_group, monkeypatch):
    from analyzer.cross_rank import stragglers as sg
    job, cr = _whole(SIM / name)
    whole = sg.step_delays(job, cr.instances, cr.members, cr.alignment.offset_of, by_group=by_group)
    monkeypatch.setattr(sg, "PARTITION_ROWS", 7)
    parted = sg.step_delays(job, cr.instances, cr.members, cr.alignment.offset_of, by_group=by_group)
    assert len(whole) and (whole["exposed_ns"] > 0).any()
    pd.testing.assert_frame_equal(parted, whole)


def test_merge_windows_unions_per_key():
    from analyzer.cross_rank.stragglers import _merge_windows, _partition
    df = pd.DataFrame({"member": [1, 0, 0, 0, 1, 0], "step": [0, 0, 0, 1, 0, 0],
                       "lo": [5, 30, 10, 0, 1, 12], "hi": [8, 40, 20, 3, 6, 25]})
    got = _merge_windows(df, ["member", "step"])
    # member 0 step 0: [10,20) ∪ [12,25) = [10,25), then [30,40); step 1: [0,3); member 1: [1,6) ∪ [5,8) = [1,8)
    assert got.values.tolist() == [[0, 0, 10, 25], [0, 0, 30, 40], [0, 1, 0, 3], [1, 0, 1, 8]]
    assert _partition(np.array([3, 3, 3, 10, 1]), 6) == [0, 2, 3, 4, 5]


def _short_rank_job():
    """Ranks 0–3 (one clock each) ran 1000 all-reduces of group 0; rank 4 crashed after 10."""
    rank = np.r_[np.repeat(np.arange(4), 1000), np.full(10, 4)]
    seq = np.r_[np.tile(np.arange(1000), 4), np.arange(10)]
    offset = np.array([0, 7_000, -3_000, 12_000, 50_000])  # local = true − offset
    end = seq * 1_000_000 + 500_000 - offset[rank]
    coll = {"process_group": np.full(len(rank), "0", dtype=object), "seq": seq, "rank": rank, "end": end}
    return coll, list(range(5)), {r: f"rank{r}" for r in range(5)}, offset


def test_sample_keeps_the_instances_of_a_rank_that_stopped_early(monkeypatch):
    coll, ranks, domain_of, offset = _short_rank_job()
    keep = sec.alignment_sample(np.zeros(len(coll["seq"]), np.int64), coll["seq"], coll["rank"], budget=300)
    assert keep.sum() < len(keep) and keep[coll["rank"] == 4].all()  # all 10 of rank 4's, a sample of the rest
    monkeypatch.setattr(sec, "ALIGN_ROWS", 300)
    obs, al = sec._align_collectives(coll, ranks, domain_of)
    assert al.status == "ok" and "sampled" in al.message and len(obs) < len(coll["seq"])
    assert al.offset_of == {r: int(offset[r]) for r in ranks}


def test_a_sample_that_leaves_a_clock_short_falls_back_to_every_row(monkeypatch):
    coll, ranks, domain_of, offset = _short_rank_job()
    monkeypatch.setattr(sec, "ALIGN_ROWS", 300)
    monkeypatch.setattr(sec, "alignment_sample", lambda g, s, r=None, budget=None: r != 4)  # drops rank 4
    seen = []
    estimate = sec.al_mod.estimate
    monkeypatch.setattr(sec.al_mod, "estimate", lambda obs, *a, **k: seen.append(estimate(obs, *a, **k)) or seen[-1])
    obs, al = sec._align_collectives(coll, ranks, domain_of)
    assert seen[0].status == "refused" and seen[0].weak_domains == ["rank4"]  # the sample's verdict
    assert al.status == "ok" and len(obs) == len(coll["seq"])
    assert al.offset_of == {r: int(offset[r]) for r in ranks}


@pytest.mark.parametrize("folder", [SIM / "tp_pp_dp_1f1b_straggler", SIM / "ddp_clean_old_format"] + REAL,
                         ids=lambda p: p.name)
def test_split_rows_is_the_table_path(folder):
    """The column path (gather_columns → split_rows) gives the rows, order and sequence numbers of the
    DataFrame path (gather → collective_sequences / p2p_rows) that tests and notebooks use."""
    from analyzer.cross_rank.topology import declared_groups
    job = _job(folder)
    declared = declared_groups(job)
    long = co.gather(job)
    co.assign_keys(long, declared)
    want_coll, want_p2p = co.collective_sequences(long), co.p2p_rows(long)
    cols = co.gather_columns(job)
    co.assign_keys(cols, declared)
    coll, p2p = co.split_rows(cols)
    assert not cols  # consumed
    got = pd.DataFrame(coll)
    want = want_coll[list(coll)].reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want, check_dtype=False)
    pd.testing.assert_frame_equal(p2p.reset_index(drop=True), want_p2p.reset_index(drop=True), check_dtype=False)


def _gappy_members():
    """Member rows of five instances, cut into three partitions: iids 0-1 (group "0"; rank 2 absent from iid 1),
    5 (group "1" outside the steps; ranks 2, 3), 7-8 (send/recv only, ranks 0 → 3); no iid 2-4 or 6."""
    from analyzer.cross_rank.member_parts import MemberParts
    us = 1000
    m = pd.DataFrame({
        "iid": [0, 0, 0, 1, 1, 5, 5, 7, 7, 8, 8], "rank": [0, 1, 2, 0, 1, 2, 3, 0, 3, 0, 3],
        "start": [10, 30, 20, 100, 140, 260, 200, 300, 310, 400, 420],
        "end": [50, 50, 50, 150, 150, 300, 300, 350, 350, 450, 450],
        "op": ["allreduce"] * 7 + ["send", "recv"] * 2, "process_group": ["0"] * 5 + ["1"] * 2 + ["pp"] * 4,
        "kind": ["collective"] * 7 + ["p2p"] * 4, "step": [0] * 5 + [-1] * 2 + [1] * 4})
    m["start"], m["end"] = m["start"] * us, m["end"] * us
    m["nelems"], m["dtype"], m["seq"], m["stream"] = 4, "float", m["iid"], 7
    m["src"] = np.where(m["kind"] == "p2p", 0, -1)
    m["dst"] = np.where(m["kind"] == "p2p", 3, -1)
    expected = {("collective", "0"): [0, 1, 2], ("collective", "1"): [2, 3], ("p2p", "pp"): [0, 1]}
    inst, mem = co.instance_frame(m, {}, expected, owned=True)
    split = MemberParts([mem.iloc[:5], mem.iloc[5:7], mem.iloc[7:]], [(0, 2), (5, 6), (7, 9)], len(mem))
    return inst, mem, split


def test_member_questions_add_up_over_partitions_with_gaps_and_absent_ranks():
    """member_facts, the straggler statistics, the no-steps span and the pipeline's send/recv rows asked of
    partitions that miss ranks, groups and iids (one of them send/recv only) equal the whole table's."""
    from types import SimpleNamespace

    from analyzer.cross_rank import pipeline as pl
    from analyzer.cross_rank import stragglers as sg
    from analyzer.cross_rank.member_parts import MemberParts
    inst, mem, split = _gappy_members()
    assert split.in_range(np.array([1, 2, 3, 5, 6, 8])) == [(0, 1), (3, 4), (5, 6)]
    whole = sec.member_facts(SimpleNamespace(parts=MemberParts.of(mem)))
    parted = sec.member_facts(SimpleNamespace(parts=split))
    assert parted["ranks"] == whole["ranks"] == {"0": [0, 1, 2], "1": [2, 3], "pp": [0, 3]}
    ranks, total, rows = parted["wait"]
    # waits (µs): iid 0 → 20, 0, 10; iid 1 → 40, 0; iid 5 → rank 2 0, rank 3 60; iids 7, 8 → rank 0 10, 20
    assert ranks.tolist() == [0, 1, 2, 3] and total.tolist() == [90_000, 0, 10_000, 60_000]
    assert rows.tolist() == [4, 2, 2, 3]
    by = mem.groupby("rank")["wait_ns"].agg(["sum", "size"])
    assert [np.array_equal(a, b) for a, b in zip(whole["wait"], (by.index, by["sum"], by["size"]))] == [True] * 3
    assert parted["wait_in_steps"] == whole["wait_in_steps"] == 100_000  # iid 5 (step −1) left out
    pd.testing.assert_frame_equal(sg.per_rank_stats(inst, split), sg.per_rank_stats(inst, mem))
    no_steps = SimpleNamespace(step_metrics=pd.DataFrame())
    assert sg._median_step(no_steps, split) == sg._median_step(no_steps, mem) == (440_000.0, 1)
    p2p = split.frame(pl._p2p_rows)
    assert list(p2p.columns) == pl.P2P_COLUMNS and p2p["rank"].tolist() == [0, 3, 0, 3]
    pd.testing.assert_frame_equal(p2p, mem.loc[mem["kind"] == "p2p", pl.P2P_COLUMNS].reset_index(drop=True))
