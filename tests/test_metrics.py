"""Per-step metrics: exact answers on hand-built traces, and a brute-force recomputation on real traces."""
import numpy as np
import pytest

from analyzer.rank.metrics import rank_step_metrics
from parsers.kineto import load_trace
from tests import kineto_builder as kb
from tests.conftest import CORPUS


def _hand_built(tmp_path):
    ev = [
        kb.step(1, 1000, 100), kb.step(2, 1100, 100),
        kb.kernel(900, 50),                       # before the first step: in no step
        kb.kernel(1010, 30, stream=7), kb.kernel(1030, 30, stream=8),   # compute on two streams: ∪ = 50
        kb.nccl(1050, 30),                        # comm; 10 µs under compute
        kb.kernel(1085, 5, "Memcpy HtoD (Pageable -> Device)", cat="gpu_memcpy"),
        kb.kernel(1090, 30),                      # crosses the step boundary: 10 + 20
        kb.nccl(1110, 40),                        # step 2 comm, 10 µs under compute
        kb.kernel(1160, 10),
    ]
    return kb.write(tmp_path / "rank0.json", kb.trace(ev))


def test_hand_built_steps_exact(tmp_path):
    m = rank_step_metrics(load_trace(_hand_built(tmp_path))).set_index("step")
    us = 1000
    s1, s2 = m.loc[1], m.loc[2]
    assert s1.step_time_ns == 100 * us and s2.step_time_ns == 100 * us
    assert (s1.compute_ns, s1.comm_ns, s1.overlap_ns, s1.exposed_comm_ns) == (60 * us, 30 * us, 10 * us, 20 * us)
    assert (s1.memcpy_ns, s1.busy_ns, s1.idle_ns) == (5 * us, 85 * us, 15 * us)
    assert s1.overlap_coverage == pytest.approx(1 / 3)
    assert s1.comm_share == pytest.approx(0.30) and s1.exposed_comm_share == pytest.approx(0.20)
    assert (s2.compute_ns, s2.comm_ns, s2.overlap_ns, s2.exposed_comm_ns) == (30 * us, 40 * us, 10 * us, 30 * us)
    assert (s2.busy_ns, s2.idle_ns, s2.memcpy_ns) == (60 * us, 40 * us, 0)
    assert s2.overlap_coverage == pytest.approx(0.25) and s2.comm_share == pytest.approx(0.40)
    assert not m.whole_trace.any()


def test_whole_trace_when_no_profiler_step(tmp_path):
    p = kb.write(tmp_path / "r.json", kb.trace([kb.kernel(0, 10), kb.nccl(5, 10), kb.kernel(30, 10)]))
    m = rank_step_metrics(load_trace(p))
    assert len(m) == 1 and m.whole_trace.iat[0] and m.step.iat[0] == -1
    r = m.iloc[0]
    assert (r.step_time_ns, r.compute_ns, r.comm_ns, r.overlap_ns, r.idle_ns) == (40000, 20000, 10000, 5000, 15000)
    assert r.overlap_coverage == pytest.approx(0.5)


def test_no_comm_gives_undefined_coverage(tmp_path):
    p = kb.write(tmp_path / "r.json", kb.trace([kb.step(1, 0, 100), kb.kernel(10, 10)]))
    r = rank_step_metrics(load_trace(p)).iloc[0]
    assert np.isnan(r.overlap_coverage) and r.comm_share == 0.0 and r.compute_ns == 10000


def test_nanosecond_fractions_kept_exactly(tmp_path):
    p = kb.write(tmp_path / "r.json", kb.trace([kb.step(1, 1000.0, 10.0), kb.kernel(1000.123, 0.877),
                                                kb.nccl(1001.5, 0.25)]))
    r = rank_step_metrics(load_trace(p)).iloc[0]
    assert r.compute_ns == 877 and r.comm_ns == 250 and r.overlap_ns == 0


# --- brute force on real traces ------------------------------------------------------------------

def _brute_union(pairs):
    out = []
    for s, e in sorted(pairs):
        if e <= s:
            continue
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def _clip(pairs, lo, hi):
    return [(max(s, lo), min(e, hi)) for s, e in pairs if min(e, hi) > max(s, lo)]


def _inter_len(a, b):
    i = j = total = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


@pytest.mark.parametrize("rel", [
    "param-dlrm_kineto/worker1_step_12.1694128201556.pt.trace.json.gz",
    "hta-single_rank/nccl_parser_config/nccl_data.json.gz",
    "hta-single_rank/trace_diff/control/control.json.gz",
    "tracelens-single_rank/mi300/resnet_act_checkpoint.json.gz",
])
def test_metrics_match_brute_force_on_real_traces(rel):
    t = load_trace(CORPUS / rel)
    m = rank_step_metrics(t)
    a = t.activity
    by_kind = {k: list(zip(g.start.tolist(), g.end.tolist())) for k, g in a.groupby("kind", observed=False)}
    allp = list(zip(a.start.tolist(), a.end.tolist()))
    assert len(m) == len(t.steps) > 0
    for row in m.itertuples():
        lo, hi = row.start, row.end
        comp = _brute_union(_clip(by_kind["compute"], lo, hi))
        comm = _brute_union(_clip(by_kind["comm"], lo, hi))
        mem = _brute_union(_clip(by_kind["memcpy"] + by_kind["memset"], lo, hi))
        busy = _brute_union(_clip(allp, lo, hi))
        length = lambda u: sum(e - s for s, e in u)
        assert row.compute_ns == length(comp)
        assert row.comm_ns == length(comm)
        assert row.overlap_ns == _inter_len(comm, comp)
        assert row.memcpy_ns == length(mem)
        assert row.idle_ns == (hi - lo) - length(busy)
