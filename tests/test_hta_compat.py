"""Overlap coverage against Holistic Trace Analysis 0.5.0's get_comm_comp_overlap, on HTA's own window.

Reference values were measured with holistictraceanalysis 0.5.0 (see docs/metrics.md); agreement within
0.5 percentage points proves our interval algebra and kernel handling against an independent implementation.
"""
import math

import pytest

from analyzer.rank.hta_compat import hta_overlap_pct
from parsers.kineto import load_trace
from tests.conftest import CORPUS

pytestmark = pytest.mark.slow  # loads real or 64+ rank folders: outside the everyday loop

HTA_OVERLAP_PCT = {
    "hta-single_rank/nccl_parser_config/nccl_data.json.gz": 14.31,
    "hta-trace_filter/sampled_rank-0.json.gz": 11.81,
    "hta-trace_filter/sampled_rank-1.json.gz": 20.05,
    "hta-single_rank/negative_queue_length_values_check/rank0.json.gz": 1.37,
    "hta-single_rank/trace_diff/control/control.json.gz": 47.03,
    "hta-single_rank/trace_diff/test/test.json.gz": 68.80,
    "hta-single_rank/df_index_resolver/df_index_resolver.json.gz": 0.00,
}


@pytest.mark.parametrize("rel,expected", sorted(HTA_OVERLAP_PCT.items()))
def test_overlap_matches_hta(rel, expected):
    assert hta_overlap_pct(load_trace(CORPUS / rel)) == pytest.approx(expected, abs=0.5)


def test_no_comm_kernels_is_nan_like_hta():
    t = load_trace(CORPUS / "hta-single_rank/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")
    assert math.isnan(hta_overlap_pct(t))


#: HTA 0.5.0's get_comm_comp_overlap on the real DLRM job (issue #29), ranks 0-2
HTA_DLRM_PCT = {0: 4.50, 1: 2.47, 2: 7.88}


@pytest.fixture(scope="module")
def dlrm():
    import analyzer
    return analyzer.load(str(CORPUS / "param-dlrm_kineto"))


def test_dlrm_hta_overlap_in_every_format(dlrm):
    """The user's path: HTA's overlap of communication kernels per rank, within 0.5 pp of HTA's own, beside the
    transfer's overlap (a different figure: the wait for late members split off), each named in every format."""
    per = {r["rank"]: r for r in dlrm.report["metrics"]["per_rank"]}
    for r, want in HTA_DLRM_PCT.items():
        assert 100 * per[r]["hta_overlap_coverage"] == pytest.approx(want, abs=0.5)
        assert 100 * per[r]["overlap_coverage"] > want + 1  # the transfer's: 10.0 / 4.2 / 13.6 %
    frame = dlrm.ranks.set_index("rank")
    assert 100 * frame.loc[0, "hta_overlap_coverage"] == pytest.approx(4.50, abs=0.5)
    s = dlrm.report["job"]["summary"]
    assert 0 < s["hta_overlap_coverage"] < s["overlap_coverage"]
    text = dlrm.render("text")
    assert "HTA overlap 3.4% (comm kernels)" in text and "of the transfer" in text
    row0 = next(l for l in text.splitlines() if l.strip().startswith("0 ") and "10.0%" in l)
    assert "4.5%" in row0
    for fmt in ("markdown", "html"):
        out = dlrm.render(fmt)
        assert "HTA overlap" in out and "4.5" in out and "transfer overlap %" in out


def test_gloo_traces_have_no_hta_figure():
    import analyzer
    rep = analyzer.load(str(CORPUS.parent / "real-cpu-perf-2" / "ddp4-clean")).report
    assert rep["job"]["summary"]["hta_overlap_coverage"] is None
    assert all(r.get("hta_overlap_coverage") is None for r in rep["metrics"]["per_rank"])
    text = analyzer.load(str(CORPUS.parent / "real-cpu-perf-2" / "ddp4-clean")).render("text")
    assert "HTA overlap" not in text and "HTA ovl" not in text  # (the time breakdown still cites HTA's definitions)
