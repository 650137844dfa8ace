"""The report's `nccl` section built from parsed NCCL/watchdog logs (fixtures/nccl_logs, a simulated job)."""
from __future__ import annotations

from pathlib import Path

from analyzer.load.job import Job, load_job
from analyzer.report.nccl_section import nccl_section

ROOT = Path(__file__).resolve().parents[1]
SYN = ROOT / "fixtures/nccl_logs/synthetic_2x2_nccl2.21_hang.log"


def test_no_logs_gives_empty_section():
    assert nccl_section(Job(files=[], traces={}, step_metrics=None)) == {}


def test_synthetic_hang_log():
    s = nccl_section(load_job([str(SYN)], jobs=1))
    assert s["versions"] == ["2.21.5"] and s["hosts"] == ["node-a", "node-b"]
    assert [(p["host"], p["pid"], p["rank"]) for p in s["processes"]] == [
        ("node-a", 1001, 0), ("node-a", 1002, 1), ("node-b", 2001, 2), ("node-b", 2002, 3)]
    assert s["logs"][0]["lines"] == 108
    env = {(e["name"], e["value"], e["host"]) for e in s["env"]}
    assert env == {("NCCL_SOCKET_IFNAME", "eth0", "node-a"), ("NCCL_SOCKET_IFNAME", "eth0", "node-b"),
                   ("NCCL_IB_DISABLE", "0", "node-a"), ("NCCL_IB_DISABLE", "0", "node-b")}
    ib = [n for n in s["networks"] if n["network"] == "IB" and n["role"] == "net_device"]
    assert {n["interface"] for n in ib} == {"mlx5_0:1", "mlx5_1:1"} and ib[0]["line"] == 18
    assert [(w["rank"], w["src_file"], w["result_code"], w["line"]) for w in s["warns"]] == [
        (2, "misc/socket.cc", 6, 100)]
    assert [(t["rank"], t["process_group"], t["seq"], t["op"], t["timeout_ms"], t["line"]) for t in s["timeouts"]] \
        == [(0, "0", 3, "allreduce", 600000, 103), (1, "0", 3, "allreduce", 600000, 105),
            (2, "0", 3, "allreduce", 600000, 107)]
    world = [t for t in s["transports"] if t["comm_id"] == "0x9f3c2a1b4d5e6f70"]
    assert {(t["rank"], t["transport"]) for t in world} >= {(0, "NET/IB"), (0, "P2P/CUMEM"), (3, "NET/IB")}
    assert all(t["nranks"] == 4 and t["count"] >= 1 for t in world)


def test_timeout_takes_process_group_from_status_line():
    d = ROOT / "fixtures/sim/hang_tp_dp_mismatched_size"
    s = nccl_section(load_job([str(d / "stderr_rank0.log"), str(d / "stderr_rank5.log")], jobs=1))
    got = sorted((t["rank"], t["process_group"], t["seq"]) for t in s["timeouts"])
    assert got == [(0, "5", 1), (5, "3", 6)]
