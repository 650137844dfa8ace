"""The merged timeline written as a stream (analyzer/render/timeline.py, timeline_parts.py): the k longest of a
class found from per-chunk histograms exactly as one stable sort picks them, hand-built ranks thinned to exact
counts, and the same bytes whether the ranks and the member table are asked whole or a piece at a time."""
from __future__ import annotations

import gzip
import io
import pickle
from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pytest

import analyzer
from analyzer.cross_rank.member_parts import partition_cuts
from analyzer.render import timeline as tl
from analyzer.render import timeline_parts as tp
from analyzer.report.views import RankEvents, TimelineInput
from tests.trace_event_rules import violations

ROOT = Path(__file__).resolve().parents[1]
REPORT = {"tool": {"version": "t"}, "verdict": "ok", "findings": []}


def _select(chunks: list[np.ndarray], k: int) -> np.ndarray:
    """The mask Sel gives over the concatenated chunks (rounds of histograms, then the ties per chunk)."""
    n = sum(len(c) for c in chunks)
    allv = np.concatenate(chunks) if chunks else np.zeros(0, np.int64)
    s = tl.Sel(n, k, (int(allv.min()), int(allv.max())) if n else None)
    rounds = 0
    while not s.found:
        s.feed(sum(tp.hist(c, s.window()) for c in chunks))
        rounds += 1
        assert rounds < 80
    if s.partial:
        s.ties([int((c == s.dstar).sum()) for c in chunks])
    return np.concatenate([tp.keep_mask(c, s.spec(i)) for i, c in enumerate(chunks)])


@pytest.mark.parametrize("bins", [2, 3, 4096])
def test_the_k_longest_across_chunks_are_the_stable_sorts_pick(monkeypatch, bins):
    monkeypatch.setattr(tl, "BINS", bins)
    rng = np.random.default_rng(7)
    for case in range(30):
        sizes = rng.integers(0, 9, size=rng.integers(1, 6))
        hi = [3, 50, 10 ** 12][case % 3]  # many ties; a wide range (many rounds); negative durations too
        chunks = [rng.integers(-2, hi, size=int(n)).astype(np.int64) for n in sizes]
        d = np.concatenate(chunks)
        for k in range(0, len(d) + 2):
            want = np.zeros(len(d), bool)
            want[np.argsort(-d, kind="stable")[:k]] = True
            assert (_select(chunks, k) == want).all(), (case, k, chunks)


def test_ties_go_to_the_first_rank_first():
    # 5, then four 3s (three on chunk 0, one on chunk 1): keeping 3 takes chunk 0's first two 3s
    got = _select([np.array([3, 5, 3, 3]), np.array([3, 1])], 3)
    assert got.tolist() == [True, True, True, False, False, False]


# ---- hand-built ranks


def _rank(r: int, kernels: list[tuple[str, int, int]], step: tuple[int, int]) -> RankEvents:
    act = pd.DataFrame({"start": [s for _, s, _ in kernels], "end": [e for _, _, e in kernels],
                        "stream": 7, "kind": "compute", "name": [n for n, _, _ in kernels],
                        "launch_start": -1, "launch_tid": -1, "correlation": np.arange(len(kernels))})
    steps = pd.DataFrame({"step": [1], "start": [step[0]], "end": [step[1]]})
    cc = pd.DataFrame({"start": pd.Series([], dtype=np.int64), "end": pd.Series([], dtype=np.int64),
                       "tid": pd.Series([], dtype=np.int64), "name": pd.Series([], dtype=object)})
    return RankEvents(r, None, 0, act, steps, cc, "gpu")


def _members(rows: list[tuple]) -> pd.DataFrame:
    """(instance, rank, start, end, wait_ns) rows of one allreduce per instance in group 0."""
    return pd.DataFrame({
        "instance": [x[0] for x in rows], "process_group": "0", "seq": [x[0] for x in rows], "kind": "collective",
        "op": "allreduce", "rank": [x[1] for x in rows], "src": -1, "dst": -1, "bytes": 1024.0,
        "wait_us": [x[4] / 1000.0 for x in rows], "last_rank": 2.0, "start_ns": [x[2] for x in rows],
        "end_ns": [x[3] for x in rows]})


def _two_ranks() -> TimelineInput:
    """Rank 0: 5, 3, 3, 3 µs kernels and 30 of 1 µs; rank 1: 3, 3, 2 µs and 30 of 1 µs."""
    fill = [(f"f{{r}}_{i}", 100_000 + 2000 * i, 101_000 + 2000 * i) for i in range(30)]
    r0 = _rank(0, [("k0a", 0, 5000), ("k0b", 10_000, 13_000), ("k0c", 20_000, 23_000), ("k0d", 30_000, 33_000)]
               + [(n.format(r=0), s, e) for n, s, e in fill], (0, 200_000))
    r1 = _rank(1, [("k1a", 1000, 4000), ("k1b", 11_000, 14_000), ("k1c", 21_000, 23_000)]
               + [(n.format(r=1), s, e) for n, s, e in fill], (500, 200_000))
    return TimelineInput(True, "ok", [r0, r1])


def _kernels(doc: dict) -> list[str]:
    return [e["name"] for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "compute"]


def test_a_hand_built_pair_of_ranks_is_thinned_to_the_exact_kernels():
    full = tl.build_timeline(REPORT, _two_ranks())
    o = full["otherData"]
    assert o["thinned"] == "" and o["events"] == len(full["traceEvents"]) == 4 + 2 * 4 + 2 + 67
    # 4 process metadata, 4 of the 6 tracks (CPU, steps, stream 7 per rank; the CPU tracks unused), 2 steps
    big0, big1 = ["k0a", "k0b", "k0c", "k0d"], ["k1a", "k1b", "k1c"]
    f0, f1 = [f"f0_{i}" for i in range(30)], [f"f1_{i}" for i in range(30)]
    assert _kernels(full) == big0 + f0 + big1 + f1
    # 50 events: the budget counts every track (12 events), the 4 process events and a note: room for the 2 steps
    # and 31 kernels: the 7 longer ones, then 24 of the 1 µs ties, rank 0's first
    d = tl.build_timeline(REPORT, _two_ranks(), max_events=50)
    assert _kernels(d) == big0 + f0[:24] + big1
    o = d["otherData"]
    assert o["activity_events_left_out"] == 36 and o["shortest_activity_kept_us"] == 1.0 and o["ranks_drawn"] == 2
    assert o["thinned"] == "36 of 67 GPU/CPU activity events left out: the shortest (kept those of at least 1.000 µs)"
    assert o["events"] == len(d["traceEvents"]) == 4 + 2 * 4 + 1 + 2 + 31
    assert _kernels(tl.build_timeline(REPORT, _two_ranks(), max_events=57)) == big0 + f0 + big1 + f1[:1]
    # under the ranks' own tracks (25 events a rank): one rank drawn, its events whole
    one = tl.build_timeline(REPORT, _two_ranks(), max_events=49)
    assert one["otherData"]["ranks_left_out"] == [1] and _kernels(one) == big0 + f0


def _three_with_collectives() -> TimelineInput:
    tin = TimelineInput(True, "ok", [_rank(r, [(f"k{r}", 100 * r, 100 * r + 2000)], (0, 90_000)) for r in range(3)])
    rows = []
    for i, t in enumerate((10_000, 40_000)):  # instance 0: arrivals 2, 0, 1 (rank 1 last); instance 1: 0, 1, 2
        order = [2, 0, 1] if i == 0 else [0, 1, 2]
        for k, r in enumerate(order):
            rows.append((i, r, t + 1000 * k, t + 5000, 1000 * (2 - k)))
    # rank 0's two slices of instance 2 overlap without nesting: the second goes to a lane of its own
    rows += [(2, 0, 60_000, 66_000, 0), (3, 0, 62_000, 68_000, 0)]
    tin.members = _members(sorted(rows))
    return tin


def test_hand_built_collectives_flow_in_arrival_order_and_thin_to_exact_counts():
    doc = tl.build_timeline(REPORT, _three_with_collectives())
    assert violations(doc) == []
    ev = doc["traceEvents"]
    flows = [(e["ph"], e["id"], e["pid"]) for e in ev if e["ph"] in ("s", "f")]
    assert flows == [("s", 1, 2), ("f", 1, 0), ("s", 2, 0), ("f", 2, 1),  # instance 0: 2 → 0 → 1
                     ("s", 3, 0), ("f", 3, 1), ("s", 4, 1), ("f", 4, 2)]  # instance 1: 0 → 1 → 2
    waits = [(e["pid"], e["dur"]) for e in ev if e["ph"] == "X" and e["cat"] == "wait"]
    assert sorted(waits) == [(0, 1.0), (0, 2.0), (1, 1.0), (2, 2.0)]
    lane = [e["tid"] for e in ev if e["ph"] == "X" and e["cat"] == "collective" and e["pid"] == 0]
    assert lane == [tl.TID_GROUP0, tl.TID_GROUP0, tl.TID_GROUP0, tl.TID_GROUP0 + tl.LANE]
    o = doc["otherData"]
    assert o["flows"] == 4 and o["collective_members"] == 8 and o["thinned"] == ""
    # 100 events: under the ranks' own tracks (107 budgeted): ranks 0 and 2 drawn, the flows join them alone
    two = tl.build_timeline(REPORT, _three_with_collectives(), max_events=100)
    assert two["otherData"]["ranks_left_out"] == [1] and two["otherData"]["collective_members"] == 6
    assert [(e["ph"], e["id"], e["pid"]) for e in two["traceEvents"] if e["ph"] in ("s", "f")] == \
        [("s", 1, 2), ("f", 1, 0), ("s", 2, 0), ("f", 2, 2)]
    assert violations(two) == []


def _one_rank_many_collectives() -> TimelineInput:
    """One rank, 12 single-member allreduces of 5, 3, 3, 3, 1, 1, 1, 1, 2, 2, 3, 5 µs, each waiting 1 µs."""
    tin = TimelineInput(True, "ok", [_rank(0, [("k", 0, 100)], (0, 200_000))])
    durs = [5, 3, 3, 3, 1, 1, 1, 1, 2, 2, 3, 5]
    tin.members = _members([(i, 0, 10_000 * i, 10_000 * i + 1000 * d, 1000) for i, d in enumerate(durs)])
    return tin


def test_collectives_are_thinned_to_the_longest_ties_by_position():
    d = tl.build_timeline(REPORT, _one_rank_many_collectives(), max_events=20)
    # 20 events: 2 process, 10 track (CPU, steps, stream, group 0, waits) budgeted, a note: room for the step and 6
    coll = [e["args"]["seq"] for e in d["traceEvents"] if e["ph"] == "X" and e["cat"] == "collective"]
    assert coll == [0, 1, 2, 3, 10, 11]  # the two of 5 µs and the four of 3 µs
    o = d["otherData"]
    assert "6 collectives left out (the shortest)" in o["thinned"] and "12 waits left out" in o["thinned"]
    assert not [e for e in d["traceEvents"] if e["ph"] == "X" and e["cat"] in ("wait", "compute")]
    d = tl.build_timeline(REPORT, _one_rank_many_collectives(), max_events=24)
    assert len([e for e in d["traceEvents"] if e["ph"] == "X" and e["cat"] == "collective"]) == 10
    assert [e["args"]["seq"] for e in d["traceEvents"] if e["ph"] == "X" and e["cat"] == "collective"] == \
        [0, 1, 2, 3, 4, 5, 8, 9, 10, 11]  # the 1 µs ties: the first two (4, 5) of four


class _Pieces(tl.TimelineTables):
    """The in-memory tables asked as an engine would ask them: the member table in partitions of whole
    instances, every side through a pickle."""

    def __init__(self, tin: TimelineInput, rows: int):
        super().__init__(tin)
        m = tin.members
        cuts = partition_cuts(m["instance"].to_numpy(), rows) if len(m) else [0]
        self.parts = [m.iloc[a:b].reset_index(drop=True) for a, b in zip(cuts[:-1], cuts[1:])]

    @property
    def n_parts(self) -> int:
        return len(self.parts)

    def ask(self, fn, positions, args):
        return [fn(pickle.loads(pickle.dumps(self._sides[i])), a) for i, a in zip(positions, args)]

    def ask_parts(self, fn, args, which):
        return [fn(pickle.loads(pickle.dumps(self.parts[i])), args[i]) for i in which]


def _small_pieces(monkeypatch, **sizes):
    """Every question asked a piece at a time (and the thresholds found 2 bins at a time)."""
    for name, v in {"BINS": 2, "WRITE_CHUNK": 1, "COUNT_CHUNK": 2, "WRITE_ROWS": 1, "LANE_ROWS": 1, **sizes}.items():
        monkeypatch.setattr(tl, name, v)


def _bytes(tin, limit) -> bytes:
    buf = io.BytesIO()
    tl.stream_timeline(REPORT, tin, buf.write, limit)
    return buf.getvalue()


CASES = [(_two_ranks, [49, 50, 57]), (_three_with_collectives, [100, 107]), (_one_rank_many_collectives, [20, 24])]


def test_pieces_give_the_same_bytes(monkeypatch):
    whole = {(make, lim): _bytes(make(), lim) for make, lims in CASES for lim in lims}
    _small_pieces(monkeypatch, BINS=3)
    for (make, lim), want in whole.items():
        got = _bytes(_Pieces(make(), 1), lim)
        assert got == want, (make.__name__, lim)
        doc = orjson.loads(got)
        assert len(doc["traceEvents"]) == doc["otherData"]["events"] <= lim and violations(doc) == []


@pytest.mark.slow  # loads a 16-rank fixture and re-reads every rank
def test_a_fixture_in_pieces_gives_the_same_bytes(monkeypatch):
    a = analyzer.load(ROOT / "fixtures/sim/tp_pp_dp_1f1b_straggler", jobs=1)
    tin = a.timeline_input()
    whole = {3000: _bytes(tin, 3000)}  # 7 of 16 ranks drawn, CPU ops thinned
    assert _bytes(a.timeline_source(), 3000) == whole[3000]  # what the CLI streams from: the same file
    _small_pieces(monkeypatch, BINS=16, WRITE_CHUNK=3, COUNT_CHUNK=5, WRITE_ROWS=50, LANE_ROWS=200)
    for lim, want in whole.items():
        assert _bytes(_Pieces(tin, 97), lim) == want, lim


def test_the_gzip_file_is_one_member_of_the_whole_document(tmp_path):
    p = tmp_path / "t.json.gz"
    meta = tl.write_timeline(p, REPORT, _three_with_collectives())
    raw = _bytes(_three_with_collectives(), tl.DEFAULT_MAX_EVENTS)
    assert p.read_bytes() == gzip.compress(raw, compresslevel=6, mtime=0)
    assert meta == orjson.loads(raw)["otherData"]
