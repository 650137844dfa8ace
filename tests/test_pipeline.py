"""Pipeline pieces on hand-built inputs: one rank's labelled blocks, the schedule inference's sources and their
combination, the common-window bubble, the theory."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from analyzer.cross_rank import pipeline_schedule as ps
from analyzer.cross_rank.pipeline import bubble_rates, stage_bubbles, theoretical_bubble
from analyzer.cross_rank.pipeline_blocks import RankBlocks, StepBlocks, complete_steps, rank_blocks

ENGINE = "autograd::engine::evaluate_function: MmBackward0"


def test_bubble_rate_is_idle_share_of_first_to_last_compute():
    # step [0, 1000): compute [100,300) [250,400) [700,900); comm [400,700) is not compute
    act = pd.DataFrame({"start": [100, 250, 400, 700], "end": [300, 400, 700, 900],
                        "kind": ["compute", "compute", "comm", "compute"]})
    t = SimpleNamespace(activity=act, steps=pd.DataFrame({"step": [1], "start": [0], "end": [1000]}))
    b = bubble_rates(t).iloc[0]
    assert b["window_ns"] == 800 and b["busy_ns"] == 500
    assert b["bubble_rate"] == pytest.approx(1 - 500 / 800)


def _trace(ops, p2p, ann=(), device="cpu", steps=((2, 0, 1000),), salvage=None):
    """ops: (name, start, end[, launch]); p2p: (op, start, end, peer); ann: (name, start, end)."""
    rows = [(n, s, e, "compute", x[0] if x else -1) for n, s, e, *x in ops]
    rows += [("gloo:" + op, s, e, "comm", -1) for op, s, e, _ in p2p]
    order = sorted(range(len(rows)), key=lambda i: (rows[i][1], rows[i][2]))
    rows = [rows[i] for i in order]
    names = sorted({r[0] for r in rows})
    act = pd.DataFrame({"start": [r[1] for r in rows], "end": [r[2] for r in rows],
                        "kind": pd.Categorical([r[3] for r in rows], ["compute", "comm", "memcpy", "memset", "sync"]),
                        "name_id": [names.index(r[0]) for r in rows], "launch_start": [r[4] for r in rows]})
    pos = {i: order.index(len(ops) + j) for j, i in enumerate(range(len(p2p)))}
    coll = pd.DataFrame({"act_index": [pos[j] for j in range(len(p2p))], "start": [x[1] for x in p2p],
                         "end": [x[2] for x in p2p], "op": [x[0] for x in p2p], "peer": [x[3] for x in p2p]})
    annotations = pd.DataFrame({"name": [a[0] for a in ann], "start": [a[1] for a in ann],
                                "end": [a[2] for a in ann], "track": ["cpu"] * len(ann)})
    st = pd.DataFrame(list(steps), columns=["step", "start", "end"])
    return SimpleNamespace(activity=act, names=names, collectives=coll, annotations=annotations, steps=st,
                           device_type=device, salvage=salvage)


FIRST_STAGE_1F1B = dict(
    ops=[("aten::tensor_split", 0, 1),                 # micro-batch split: tiny, before the first forward
         ("aten::mm", 10, 110), ("aten::mm", 120, 220),   # F0, F1
         (ENGINE, 300, 500), ("aten::mm", 310, 490),       # B0 (engine op and its child)
         ("aten::mm", 505, 605),                           # F2
         (ENGINE, 700, 900),                               # B1
         ("aten::div_", 905, 910),                         # gradient scaling after the last backward
         ("aten::add_", 925, 985)],                        # the optimizer
    p2p=[("send", 115, 116, 1), ("send", 225, 226, 1), ("recv", 230, 300, 1), ("send", 610, 611, 1),
         ("recv", 615, 700, 1)],
    ann=[("Optimizer.step#SGD.step", 920, 990)])


def test_blocks_labels_and_sends_of_a_first_stage():
    rb = rank_blocks(0, _trace(**FIRST_STAGE_1F1B))
    sb = rb.steps[2]
    assert rb.labelled_by == "autograd" and rb.peers_given == 1.0
    assert sb.order == "FFBFB"                     # split, div_ and the optimizer are not pipeline blocks
    assert sb.send_labels == "FFF" and (sb.n_send, sb.n_recv) == (3, 2)
    assert sb.busy_ns == 1 + 100 + 100 + 200 + 100 + 200 + 5   # optimizer excluded, p2p spans are not work
    assert (sb.first_ns, sb.last_ns) == (0, 910)
    assert sb.first_block_ns == 0                  # the split has F's label: it joins the first forward block
    assert ps.send_label_counts(rb) == (3, 0)


def test_annotations_label_gpu_kernels_by_their_launch_time():
    # GPU kernels run late; their launch (CPU) time falls in the PP:<stage><kind><mb> annotation
    ops = [("gemm", 100, 200, 15), ("gemm", 300, 500, 215), ("gemm", 520, 600, 405)]
    ann = [("PP:0F0", 10, 20), ("PP:0F1", 210, 220), ("PP:4B0", 400, 410)]
    rb = rank_blocks(0, _trace(ops, [("send", 250, 251, 1), ("recv", 505, 515, 1)], ann, device="gpu"))
    sb = rb.steps[2]
    assert rb.labelled_by == "annotations" and rb.pp_stages == [0, 4] and not rb.gpipe_annotations
    assert sb.order == "FFB" and sb.send_labels == "F"
    assert sb.actions == [("F", 0, 0), ("F", 0, 1), ("B", 4, 0)]


def test_a_cut_trace_keeps_only_the_steps_that_ended_before_the_cut():
    t = _trace([("aten::mm", 10, 90), ("aten::mm", 110, 150)], [], steps=((2, 0, 100), (3, 100, 200)),
               salvage={"reason": "cut"})
    assert complete_steps(t)["step"].tolist() == [2]
    t.salvage = None
    assert complete_steps(t)["step"].tolist() == [2, 3]


def _rb(rank, counts=None, order="", stages=(), steps=None):
    steps = steps or {2: StepBlocks(2, 0, None, None, order, None, 0, 0, "", np.empty(0), np.empty(0),
                                    np.empty(0), np.empty(0))}
    if counts:
        for sb in steps.values():
            sb.n_send = sum(counts)
            sb.send_labels = "F" * counts[0] + "B" * counts[1]
    return RankBlocks(rank, "cpu", steps, "autograd", 1.0, list(stages), False)


def test_send_labels_give_m_and_v_without_peers():
    # p = 2, v = 2, m = 3: stage 0's rank sends v·m = 6 activations and (v−1)·m = 3 gradients per step
    rbs = {0: _rb(0, (6, 3)), 1: _rb(1, (3, 6))}
    e = ps.from_send_labels([0, 1], rbs)
    assert (e.m, e.v, e.confidence) == (3, 2, ps.BASE_CONFIDENCE["send_labels"])
    assert ps.first_stage_by_labels([0, 1], rbs) == [0]
    # p = 4, v = 1, m = 8
    rbs = {0: _rb(0, (8, 0)), 1: _rb(1, (8, 8)), 2: _rb(2, (8, 8)), 3: _rb(3, (0, 8))}
    assert (ps.from_send_labels([0, 1, 2, 3], rbs).m, ps.from_send_labels([0, 1, 2, 3], rbs).v) == (8, 1)
    # a middle stage that does not fit one pipeline: low confidence, said so
    rbs[1] = _rb(1, (8, 6))
    e = ps.from_send_labels([0, 1, 2, 3], rbs)
    assert e.m is None and e.confidence < 0.5 and "fit no pipeline" in e.evidence
    rbs[1] = _rb(1, (6, 6))                        # ends fit m = 8, a middle does not: m kept, trust lowered
    e = ps.from_send_labels([0, 1, 2, 3], rbs)
    assert (e.m, e.v) == (8, 1) and e.confidence < 0.5 and "inconsistent" in e.evidence


def test_transfers_between_two_ranks_only_bound_m_times_2v_minus_1():
    e = ps.from_transfers([0, 1], False, {(0, 1): 24}, {})
    assert (e.m, e.v, e.confidence) == (24, 1, ps.TWO_RANK_TRANSFER_CONFIDENCE)
    assert e.check(8, 2) and e.check(24, 1) and not e.check(8, 1)
    assert e.check(12, 2, "v")                    # V placement: stage 0's activations + the last stage's grads
    ring = ps.from_transfers([0, 1, 2, 3], True, {(0, 1): 16, (3, 0): 8}, {})
    assert (ring.m, ring.v) == (8, 2)
    chain = ps.from_transfers([0, 1, 2, 3], False, {(0, 1): 8}, {})
    assert (chain.m, chain.v, chain.confidence) == (8, 1, ps.BASE_CONFIDENCE["transfers"])


ORDERS_1F1B = {0: "FFFFBFBFBFBFBBBB", 1: "FFFBFBFBFBFBFBBB", 2: "FFBFBFBFBFBFBFBB", 3: "FBFBFBFBFBFBFBFB"}
ORDERS_GPIPE = {r: "F" * 8 + "B" * 8 for r in range(4)}
STAGE = {r: r for r in range(4)}


def test_schedule_from_the_order_of_forwards_and_backwards():
    assert ps.classify(ORDERS_1F1B, STAGE, 4, 8, 1)[:2] == ("1f1b", 0.9)
    assert ps.classify(ORDERS_GPIPE, STAGE, 4, 8, 1)[:2] == ("gpipe", 0.9)
    assert ps.classify(ORDERS_GPIPE, STAGE, 4, 8, 2)[0] == "looped_bfs"
    assert ps.classify(ORDERS_1F1B, STAGE, 4, 8, 2)[0] == "interleaved_1f1b"
    # m = 4 = p: 1F1B's first stage warms up with all 4 forwards; only the later stages interleave
    m4 = {0: "FFFFBBBB", 1: "FFFBFBBB", 2: "FFBFBFBB", 3: "FBFBFBFB"}
    assert ps.classify(m4, STAGE, 4, 4, 1)[:2] == ("1f1b", 0.9)
    # one rank interleaving where 1F1B would have three: still 1F1B, less sure
    odd = {**ORDERS_GPIPE, 3: "FFFFFFFBBBBBBBFB"}
    assert ps.classify(odd, STAGE, 4, 8, 1)[:2] == ("1f1b", 0.7)
    zb = {0: "FFFIWFIW", 1: "FIWFIWFI"}
    assert ps.classify(zb, {0: 0, 1: 1}, 2, 4, 2)[0] == "zero_bubble"
    assert ps.classify(zb, {0: 0, 1: 1}, 2, 4, 2, "v")[0] == "zbv"
    assert ps.classify({0: "FB", 1: "FB"}, {0: 0, 1: 1}, 2, 1, 1)[1] == 0.3   # one micro-batch tells nothing


def test_combine_raises_confidence_on_agreement_and_lowers_it_on_disagreement():
    pp = ps.Estimate("pp_annotations", 8, 2, 0.95, "PP", {0: "FB"}, n_stages=4)
    agree = ps.from_transfers([0, 1], False, {(0, 1): 24}, {})
    inf = ps.combine(2, 0.95, "graph", [pp, agree], {0: 0, 1: 1})
    assert (inf.m, inf.v) == (8, 2) and inf.confidence_by_key["m"] > 0.95
    assert inf.confidence_by_key["p"] > 0.95             # p·v = the stages the annotations name
    disagree = ps.from_transfers([0, 1], False, {(0, 1): 20}, {})
    inf = ps.combine(2, 0.95, "graph", [pp, disagree], {0: 0, 1: 1})
    assert inf.confidence_by_key["m"] == pytest.approx(0.95 * 0.7)
    assert any("disagrees" in e for e in inf.evidence)


def _steps(first, last, busy):
    return {2: StepBlocks(2, busy, first, last, "", first, 0, 0, "", np.empty(0), np.empty(0), np.empty(0),
                          np.empty(0))}


def test_every_stage_is_measured_over_stage_zeros_window():
    # stage 0 spans 0..1100 on its clock; stage 1's own work is staggered (starts earlier) but only lengths count
    rbs = {0: _rb(0, steps=_steps(0, 1100, 800)), 1: _rb(1, steps=_steps(-500, 400, 800)),
           2: _rb(2, steps=_steps(5000, 5550, 550))}
    rows = stage_bubbles([[0], [1], [2]], rbs, 0.3)
    got = {r["rank"]: r["bubble_rate"] for r in rows}
    assert got == pytest.approx({0: 1 - 800 / 1100, 1: 1 - 800 / 1100, 2: 1 - 550 / 1100})
    assert {r["window_us"] for r in rows} == {1.1}


def test_theoretical_bubble():
    assert theoretical_bubble("1f1b", 4, 8, 1) == pytest.approx(3 / 11)
    assert theoretical_bubble("gpipe", 4, 8, 2) == pytest.approx(3 / 11)          # one stage per rank
    assert theoretical_bubble("interleaved_1f1b", 4, 8, 2) == pytest.approx(3 / 19)
    assert theoretical_bubble("looped_bfs", 2, 8, 2) == pytest.approx(1 / 17)
    assert theoretical_bubble("zbv", 2, 4, 2) is None
    assert theoretical_bubble("1f1b", 4, None, 1) is None


def test_nccl_send_recv_kernels_name_their_peer(tmp_path):
    """PyTorch's NCCL metadata (`Src Rank` on a recv, `Dst Rank` on a send, global ranks) becomes the peer."""
    from parsers.kineto import load_trace
    from tests import kineto_builder as kb
    send = "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"
    ev = [kb.step(1, 0, 1000), kb.runtime(10, 5, 1), kb.runtime(20, 5, 2), kb.runtime(30, 5, 3),
          kb.kernel(100, 50, send, correlation=1, **{"Collective name": "send", "Dst Rank": 3}),
          kb.kernel(200, 50, send, correlation=2, **{"Collective name": "recv", "Src Rank": "1"}),
          kb.kernel(300, 50, send, correlation=3, **{"Collective name": "recv", "Src Rank": True})]
    t = load_trace(kb.write(tmp_path / "rank2.json", kb.trace(ev, rank=2, world_size=4)))
    c = t.collectives.sort_values("start")
    assert c["op"].tolist() == ["send", "recv", "recv"]
    assert c["peer"].tolist() == [3, 1, -1]


def test_off_schedule_work_is_what_the_typical_blocks_do_not_hold():
    """Busy time minus each block capped at its label's median block: a partition-heavy stage (every block
    longer) leaves nothing, a once-per-step extra (one block longer, or work between blocks) stays."""
    from analyzer.cross_rank.pipeline_blocks import off_schedule_work
    even = [(1, 0, 10, 10), (1, 20, 30, 10), (2, 40, 60, 20), (2, 70, 90, 20)]
    assert off_schedule_work(60, even) == 0
    heavy = [(1, 0, 20, 20), (1, 30, 50, 20), (2, 60, 100, 40), (2, 110, 150, 40)]
    assert off_schedule_work(120, heavy) == 0
    extra = [(1, 0, 25, 25), (1, 30, 40, 10), (1, 50, 60, 10), (2, 70, 90, 20), (2, 100, 120, 20)]
    assert off_schedule_work(85 + 7, extra) == 15 + 7   # 15 beyond the median forward, 7 outside every block
    assert off_schedule_work(33, []) == 33
