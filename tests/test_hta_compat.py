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
