"""Link class per group from the evidence and busbw judged against the class's nominal bandwidth, on the NCCL logs in
fixtures/nccl_logs (real public lines, and small made-up logs for the shapes no public copy was found of) plus
hand-built two-rank traces whose every number is chosen."""
from __future__ import annotations

from pathlib import Path

import pytest

from analyzer.cross_rank import links as lk
from analyzer.load.job import load_job
from analyzer.report.assemble import run_analysis
from parsers.nccl_log import parse_nccl_log
from tests import kineto_builder as kb

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "nccl_logs"
H100 = "NVIDIA H100 80GB HBM3"


def _ev(name: str) -> lk.LinkEvidence:
    return lk.log_evidence([parse_nccl_log(LOGS / f"{name}.log")])


# (log, span, GPU, expected class, nominal GB/s, words that must be in the causes)
CASES = [
    ("real_public_lines", "intra_node", H100, "nvlink", 450.0, []),
    ("real_public_lines", "inter_node", H100, "socket", None, []),
    ("real_public_lines", "intra_node", "NVIDIA L40S", "pcie", 31.5, []),
    ("synthetic_2x2_nccl2.21_hang", "inter_node", "NVIDIA A100-SXM4-80GB", "ib", 25.0, []),
    ("synthetic_2x2_nccl2.21_hang", "intra_node", "NVIDIA A100-SXM4-80GB", "nvlink", 300.0, []),
    ("synthetic_shm_p2p_disabled", "intra_node", H100, "shm", 31.5, ["NCCL_P2P_DISABLE=1", "SHM (host memory)"]),
    ("synthetic_ib_no_gdr", "inter_node", "NVIDIA A100-SXM4-80GB", "ib", 25.0,
     ["NCCL_NET_GDR_LEVEL=LOC", "NCCL_ALGO=Tree"]),
    ("synthetic_efa_ofi", "inter_node", H100, "efa", 12.5, []),
    ("synthetic_nvls_proto_ll", "intra_node", H100, "nvlink", 450.0, ["NCCL_PROTO=LL"]),
]


@pytest.mark.parametrize("log,span,gpu,cls,nominal,causes", CASES)
def test_link_class_and_causes_from_the_logs(log, span, gpu, cls, nominal, causes):
    ev = _ev(log)
    link = lk.classify(span, False, lk.gpu_of(gpu), ev)
    assert (link.link_class, link.nominal_gbps) == (cls, nominal)
    text = " | ".join(c[0] for c in lk.low_busbw_causes(link, ev))
    for word in causes:
        assert word in text
    if not causes:
        assert text == ""


def test_log_evidence_reads_transports_gdr_channels_and_nvls():
    real = _ev("real_public_lines")
    assert real.intra == {"P2P", "SHM"} and real.p2p_kinds == {"IPC", "CUMEM"} and real.nets == {"Socket"}
    assert real.gdr is None  # sockets: no GPUDirect question
    hang = _ev("synthetic_2x2_nccl2.21_hang")
    assert hang.nets == {"IB"} and hang.gdr is True
    nogdr = _ev("synthetic_ib_no_gdr")
    assert nogdr.gdr is False and nogdr.coll_channels == 1
    nvls = _ev("synthetic_nvls_proto_ll")
    assert nvls.nvls and nvls.coll_channels == 24
    shm = _ev("synthetic_shm_p2p_disabled")
    assert shm.env["NCCL_P2P_DISABLE"][0] == "1" and shm.env["NCCL_P2P_DISABLE"][2] == 2  # value, file:line
    # the log line of every fact
    assert any(t == "via SHM" and line == 8 for t, _, line in shm.facts)


def test_gpu_models():
    assert lk.gpu_of("NVIDIA A100-PCIE-40GB").fabric_gbps is None
    assert lk.gpu_of("NVIDIA A100-SXM4-80GB").fabric_gbps == 300.0
    assert lk.gpu_of("NVIDIA H100 PCIe").fabric_gbps is None
    assert lk.gpu_of("NVIDIA H100 80GB HBM3").fabric_gbps == 450.0
    assert lk.gpu_of("Tesla V100-SXM2-32GB").fabric_gbps == 150.0
    assert lk.gpu_of("NVIDIA B200").fabric_gbps == 900.0
    g = lk.gpu_of("AMD Instinct MI300X")
    assert (g.fabric, g.fabric_gbps) == ("xgmi", 448.0)
    assert lk.gpu_of("some future accelerator") is None


def test_expected_busbw_follows_nccls_ring_model():
    link = lk.Link("nvlink", 450.0, [])
    # 2 ranks, 64 MB all-reduce: α = 8.4 + 2·5.7 = 19.8 µs; 64e6 B at 450 GB/s = 142222 ns
    assert lk.expected_busbw(link, "allreduce", 2, 64e6, 1.0) == pytest.approx(64e6 / (19_800 + 64e6 / 450))
    # small messages are held to much less than the nominal rate
    assert lk.expected_busbw(link, "allreduce", 8, 1e6, 1.75) < 0.2 * 450
    assert lk.expected_busbw(lk.Link("socket", None, []), "allreduce", 2, 64e6, 1.0) is None


def _pair(tmp: Path, hosts: tuple[str, str], gpu: str, transfer_us: float) -> Path:
    """Two ranks, one step of 20 ms; a 64 MB (16e6 float) all-reduce on group 0 lasting transfer_us on both."""
    d = tmp / "traces"
    for r in (0, 1):
        ar = kb.kernel(6000, transfer_us, "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, "
                       "ncclWork*)", stream=20, **{"Collective name": "allreduce", "In msg nelems": 16_000_000,
                                                   "Out msg nelems": 16_000_000, "dtype": "Float",
                                                   "Process Group Name": "0", "Process Group Ranks": "[0, 1]",
                                                   "Group size": 2})
        doc = kb.trace([kb.step(1, 0, 20000), kb.kernel(0, 5000, "sm90_gemm"), ar], rank=r, world_size=2,
                       host_name=hosts[r])
        doc["deviceProperties"] = [{"id": 0, "name": gpu}]
        kb.write(d / f"rank{r}.json", doc)
    return d


def _net004(rep: dict) -> list[dict]:
    return [f for f in rep["findings"] if f["id"] == "NET004"]


def test_shm_because_p2p_disabled_is_reported_with_its_cause(tmp_path):
    d = _pair(tmp_path, ("node-a", "node-a"), H100, 10_000)   # 64e6 B in 10 ms: 6.4 GB/s
    rep = run_analysis(load_job([d, LOGS / "synthetic_shm_p2p_disabled.log"], jobs=1))
    row = rep["cross_rank"]["collectives"]["by_group_op"][0]
    assert row["link_class"] == "shm" and row["nominal_busbw_gbps"] == 31.5
    assert row["mean_busbw_gbps"] == pytest.approx(6.4)
    assert row["expected_busbw_gbps"] == pytest.approx(64e6 / (19_800 + 64e6 / 31.5))
    f = _net004(rep)[0]
    text = " ".join(e["text"] for e in f["evidence"])
    assert "NCCL_P2P_DISABLE=1" in text and "shm" in f["title"]
    cause = next(e for e in f["evidence"] if "NCCL_P2P_DISABLE" in e["text"])
    assert cause["file"].endswith("synthetic_shm_p2p_disabled.log") and cause["line"] == 2
    assert "P2P" in f["fix"]


def test_fast_enough_transfer_is_not_reported(tmp_path):
    d = _pair(tmp_path, ("node-a", "node-a"), H100, 2_200)   # 29.1 GB/s ≥ 0.8 × 31.2
    rep = run_analysis(load_job([d, LOGS / "synthetic_shm_p2p_disabled.log"], jobs=1))
    assert _net004(rep) == []


def test_pcie_box_gets_the_pcie_verdict_not_nvlink(tmp_path):
    d = _pair(tmp_path, ("node-a", "node-a"), "NVIDIA L40S", 10_000)
    rep = run_analysis(load_job([d], jobs=1))
    f = _net004(rep)[0]
    assert "over pcie" in f["title"] and "PCIe" in f["fix"] and "NVLink:" not in f["fix"]
    # the same speed on an NVLink machine is judged against NVLink
    d2 = _pair(tmp_path / "h100", ("node-a", "node-a"), H100, 10_000)
    f2 = _net004(run_analysis(load_job([d2], jobs=1)))[0]
    assert "over nvlink" in f2["title"] and f2["fix"].startswith("NVLink")


def test_ib_without_gpudirect_rdma(tmp_path):
    d = _pair(tmp_path, ("node-a", "node-b"), "NVIDIA A100-SXM4-80GB", 10_000)
    rep = run_analysis(load_job([d, LOGS / "synthetic_ib_no_gdr.log"], jobs=1))
    row = rep["cross_rank"]["collectives"]["by_group_op"][0]
    assert row["link_class"] == "ib" and row["nominal_busbw_gbps"] == 25.0
    f = _net004(rep)[0]
    text = " ".join(e["text"] for e in f["evidence"])
    assert "NCCL_NET_GDR_LEVEL=LOC" in text and "NCCL_ALGO=Tree" in text
    links = rep["cross_rank"]["links"]
    assert links["gdr"] is False and links["coll_channels"] == 1


@pytest.mark.parametrize("value,allowed", [("LL", {"ll"}), ("^LL", {"ll128", "simple"}),
                                           ("LL,LL128", {"ll", "ll128"}), ("simple", {"simple"})])
def test_nccl_proto_values_are_read_as_nccl_reads_them(value, allowed):
    """NCCL_PROTO is a list of allowed protocols, or '^' and the excluded ones ('^LL': everything but LL)."""
    from analyzer.cross_rank.links import _protocols
    assert _protocols(value) == allowed
