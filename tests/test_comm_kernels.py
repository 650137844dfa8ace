"""Communication kernel families (parsers/comm_kernels.py): names from real traces and library sources, the DeepEP-
style step measured exactly, user patterns from [tool.analyze], and the documented table kept in step."""
from __future__ import annotations

from pathlib import Path

import pytest

from analyzer.load.job import load_job
from parsers.comm_kernels import DEFAULT_TABLE, FAMILIES, markdown_table, op_from_kernel_name, table_for
from parsers.kineto import load_trace
from rules.config import ConfigError, load_config_file
from tests import kineto_builder as kb

ROOT = Path(__file__).resolve().parents[1]
DEEPEP = ROOT / "fixtures" / "deepep" / "ep2_dualbatch"

# (kernel name, family, op): real names from corpus traces and public traces, else the library's source
NAMES = [
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "nccl", "allreduce"),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "nccl", "sendrecv"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "nccl", "allgather"),
    ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", "nccl", "unknown"),  # RCCL: op only in args
    ("ncclDevKernel_Generic_1", "nccl", "unknown"),
    ("ncclAllReduceRingLLKernel_sum_f32(CollectiveArgs)", "nccl", "allreduce"),  # NCCL <= 2.6
    ("ncclSymkDevKernel_AllReduce_AGxLLMC_R_sum_bf16", "nccl", "allreduce"),  # NCCL 2.27 symmetric
    ("mscclKernel_Sum_half_Simple_false(ncclDevComm*, mscclAlgo*, mscclWork*)", "msccl", "unknown"),
    ("void allreduce8<__nv_bfloat16>(__nv_bfloat16*, mscclpp::DeviceHandle<mscclpp::MemoryChannel>*, int)",
     "mscclpp", "allreduce"),
    ("void dpsk::ep::internode::dispatch<false, 8, true, 8>(int4*, float*)", "deepep", "alltoall"),
    ("void dpsk::ep::internode::cached_notify<false>(int, int)", "deepep", "alltoall"),
    ("void dpsk::ep::internode::combine_ll<3, 10, 7168, 9>(void*, void*)", "deepep", "alltoall"),
    ("void deep_ep::intranode::dispatch<8, 768, 6144>(int4*)", "deepep", "alltoall"),
    ("void deep_ep::internode_ll::combine<7168>(void*)", "deepep", "alltoall"),
    ("void deep_ep::intranode::barrier<8>(int**, int, int)", "deepep", "barrier"),
    ("void rdxn_float_sum_on_stream_kernel(int, float*)", "nvshmem", "allreduce"),
    ("void fcollect_on_stream_kernel<int>(int)", "nvshmem", "allgather"),
    ("void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*, unsigned long)",
     "symm_mem", "allreduce"),
    ("void c10d::symmetric_memory::(anonymous namespace)::two_shot_all_reduce_kernel<float, 8>(float**)",
     "symm_mem", "allreduce"),
    ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::Signal*, int)",
     "custom_allreduce", "allreduce"),
    ("aiter::cross_device_reduce_2stage<bf16,8,false>", "custom_allreduce", "allreduce"),
    ("void userbuffers_fp16_sum_inplace_gpu_rw_ag<2>(int, int, int, int, int, int, int, void**, int, unsigned long)",
     "userbuffers", "allgather"),
    ("void userbuffers_fp16_sum_inplace_gpu_rr_rs<2>(int, int, int, int, int, int, int, void**, int, unsigned long)",
     "userbuffers", "reducescatter"),
    ("void kuserbuffers_pushsend(int*, int*, int4*, int4*, int)", "userbuffers", "send"),
    ("oneccl_reduce_scatter_large_read<float, 4, 8>", "oneccl", "reducescatter"),
    ("oneccl_alltoall_write_aligned<float, 4>", "oneccl", "alltoall"),
]
COMPUTE = [
    "void dpsk::ep::cuda::get_dispatch_layout<256, 32, 8>(long const*, int*)",   # DeepEP layout: local
    "void deep_ep::internode::get_dispatch_layout<256, 32, 8>(long const*, int*)",
    "void cdpsk::ep::CUB_201102_SM_900::DeviceScanKernel<int>(int*)",            # not DeepEP (identifier boundary)
    "void dpsk::cuda::per_token_cast_to_fp8_with_channels<__nv_bfloat16, 128>(__nv_fp8_e4m3*)",
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float> >(int)",
    "volta_sgemm_128x32_nt",
    "void moe::dev::routing::routingIndicesHistogramKernel<int>(int)",
]


@pytest.mark.parametrize("name,family,op", NAMES)
def test_comm_families_by_name(name, family, op):
    assert DEFAULT_TABLE.match(name) == (family, op)


@pytest.mark.parametrize("name", COMPUTE)
def test_compute_kernels_stay_compute(name):
    assert DEFAULT_TABLE.match(name) is None


def test_op_from_kernel_name_is_the_tables_op_and_unknown_for_compute():
    """The op alone, as the frozen reference parser (benchmarks/reference_kineto.py) asks for it."""
    assert op_from_kernel_name(NAMES[0][0]) == "allreduce"
    assert op_from_kernel_name("userbuffers_fp16_sum_inplace_gpu_rr_rs<2>") == "reducescatter"
    assert op_from_kernel_name("ncclDevKernel_Generic_1") == "unknown"  # RCCL: comm, but the name says no op
    assert op_from_kernel_name(COMPUTE[-1]) == "unknown"


def test_deepep_style_step_exact_comm_share_and_overlap():
    """Hand-made DeepSeek-style EP step (fixtures/deepep/make_fixture.py): every number is chosen."""
    t = load_trace(DEEPEP / "rank0.pt.trace.json")
    fam = t.collectives["family"].value_counts().to_dict()
    assert fam == {"deepep": 7}
    assert set(t.collectives["op"]) == {"alltoall"}
    job = load_job([DEEPEP], jobs=1)
    m = job.step_metrics
    assert list(m["comm_ns"]) == [590_000, 590_000]
    assert list(m["overlap_ns"]) == [540_000, 540_000]
    assert m["comm_share"].tolist() == pytest.approx([0.59, 0.59])
    assert m["overlap_coverage"].tolist() == pytest.approx([540 / 590] * 2)
    assert m["exposed_comm_share"].tolist() == pytest.approx([0.05, 0.05])


def test_b200_corpus_symm_mem_allreduce_is_comm():
    """TraceLens' real B200 vLLM trace: 73 multimem all-reduces (symm_mem) and one NCCL all-gather."""
    t = load_trace(ROOT / "fixtures/corpus/tracelens-single_rank/b200/eager_trace.json.gz")
    c = t.collectives
    assert c.groupby(["family", "op"]).size().to_dict() == {("nccl", "allgather"): 1, ("symm_mem", "allreduce"): 73}


def test_mi300_rccl_generic_is_comm_with_op_from_launcher():
    t = load_trace(ROOT / "fixtures/corpus/tracelens-single_rank/mi300/resnet_act_checkpoint.json.gz")
    c = t.collectives
    assert len(c) == 17 and set(c["family"]) == {"nccl"}
    assert (c["op"] == "allreduce").sum() == 6 and (c["op"] == "broadcast").sum() == 6


def test_user_pattern_from_config_makes_kernel_comm(tmp_path):
    cfg_file = tmp_path / "analyze.toml"
    cfg_file.write_text('[[comm-kernels]]\npattern = "my_fused_allreduce"\nop = "allreduce"\nfamily = "inhouse"\n')
    cfg = load_config_file(cfg_file)
    assert cfg.comm_kernels == [{"pattern": "my_fused_allreduce", "op": "allreduce", "family": "inhouse"}]
    doc = kb.trace([kb.step(1, 0, 100), kb.kernel(0, 50, "gemm"), kb.kernel(40, 30, "void my_fused_allreduce<8>(int)",
                                                                           stream=9)])
    p = kb.write(tmp_path / "t" / "rank0.json", doc)
    plain = load_job([p.parent], jobs=1).step_metrics.iloc[0]
    assert plain["comm_ns"] == 0
    job = load_job([p.parent], jobs=1, comm_kernels=cfg.comm_kernels)
    row = job.step_metrics.iloc[0]
    assert row["comm_ns"] == 30_000 and row["overlap_ns"] == 10_000
    c = job.traces[0].collectives
    assert c[["family", "op"]].values.tolist() == [["inhouse", "allreduce"]]


@pytest.mark.parametrize("body,msg", [
    ('[[comm-kernels]]\npattern = "(unclosed"\n', "not a regular expression"),
    ('[[comm-kernels]]\npattern = "x"\nop = "allreducee"\n', "is not one of"),
    ('[[comm-kernels]]\nop = "allreduce"\n', "needs a non-empty string 'pattern'"),
    ('[[comm-kernels]]\npattern = "x"\ncolour = "red"\n', "unknown key"),
    ('comm-kernels = 3\n', "must be an array of tables"),
])
def test_bad_user_patterns_are_config_errors_naming_the_file(tmp_path, body, msg):
    f = tmp_path / "analyze.toml"
    f.write_text(body)
    with pytest.raises(ConfigError) as e:
        load_config_file(f)
    assert str(f) in str(e.value) and msg in str(e.value)


def test_user_patterns_come_first():
    t = table_for([{"pattern": "ncclDevKernel_Generic", "op": "allreduce", "family": "rccl-ar"}])
    assert t.match("ncclDevKernel_Generic(x)") == ("rccl-ar", "allreduce")
    assert t.match("ncclDevKernel_AllGather_RING_LL(x)") == ("nccl", "allgather")


def test_documented_table_matches_the_code():
    text = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    from rules.readme import COMM_END, COMM_START
    a, b = text.index(COMM_START) + len(COMM_START), text.index(COMM_END)
    assert text[a:b].strip() == markdown_table().strip()
    assert len(FAMILIES) == text[a:b].count("\n| `")
