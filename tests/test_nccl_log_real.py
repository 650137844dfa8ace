"""NCCL / watchdog parser on real public lines (fixtures/nccl_logs/real_public_lines.log, URLs in its README)."""
from __future__ import annotations

from pathlib import Path

import pytest

from parsers.nccl_log import looks_like_nccl_log, parse_nccl_log
from tests.tables import pandas_tables

parse_nccl_log = pandas_tables(parse_nccl_log)  # the tables as DataFrames (tests/tables.py)

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "nccl_logs"


@pytest.fixture(scope="module")
def log():
    return parse_nccl_log(FIX / "real_public_lines.log")


def _row(df, line):
    rows = df[df["line"] == line]
    assert len(rows) == 1, rows
    return rows.iloc[0]


def test_counts_and_messages(log):
    assert log.n_lines == 38
    # only the docs line cut before `NCCL WARN` (line 38) is not classifiable
    assert log.unrecognised == 1
    assert any("line 27" in w and "cut off" in w for w in log.warnings)
    assert any("joined" in w and "line 24" in w for w in log.warnings)


def test_ray_banner_and_bootstrap(log):
    p = log.processes.set_index(["host", "pid"]).loc[("jamin-g2-cluster-a-0", 355353)]
    assert p["nccl_version"] == "2.14.3" and p["version_source"] == "launcher_pid"
    assert p["launcher"] == "ray" and p["cuda_dev"] == 0
    b = _row(log.networks, 2)
    assert (b["network"], b["interface"], b["address"], b["role"]) == ("Bootstrap", "ens4", "10.128.0.5", "bootstrap")


def test_net_ib_devices_and_oob(log):
    rows = log.networks[log.networks["line"] == 3]
    devs = rows[rows["role"] == "net_device"]
    assert list(devs["interface"]) == ["mlx5_0:1", "mlx5_1:1", "mlx5_2:1", "mlx5_3:1"]
    assert set(devs["network"]) == {"IB"}
    oob = rows[rows["role"] == "oob"].iloc[0]
    assert (oob["interface"], oob["address"]) == ("eth0", "10.10.6.118")


def test_nccl_tests_header_gives_rank(log):
    p = log.processes.set_index(["host", "pid"]).loc[("H20-GPU-05", 1789224)]
    assert (p["rank"], p["rank_source"], p["cuda_dev"]) == (0, "nccl_tests", 0)
    assert log.family_counts["known"] >= 1  # the NET/Plugin dlerror line


def test_env_integer_period_stripped(log):
    e = _row(log.env, 6)
    assert (e["host"], e["pid"], e["name"], e["value"]) == ("nodeb", 65671, "NCCL_IB_GID_INDEX", "3")


def test_init_complete_2_8(log):
    c = _row(log.communicators, 7)
    assert (c["comm"], c["rank"], c["nranks"], c["cuda_dev"], c["bus_id"]) == ("0x7f4b28006640", 14, 16, 6, "b1000")
    assert c["comm_id"] == "" and bool(c["complete"])
    p = log.processes.set_index(["host", "pid"]).loc[("machine-1", 16194)]
    assert (p["rank"], p["rank_source"]) == (14, "world_comm")


def test_ring_list_and_trees_recognised(log):
    assert log.family_counts["ring_list"] == 1 and log.family_counts["trees"] == 1


@pytest.mark.parametrize("line,src,dst,transport,detail,conn,direction,sdev,ddev", [
    (10, 3, 2, "P2P/IPC", "/read", -1, "", "50000", "4a000"),
    (11, 1, 2, "P2P/IPC", "/read", 0, "", "1", "2"),
    (12, 11, 10, "P2P/CUMEM", "", 0, "", "3", "2"),
    (13, 0, 1, "SHM", "/direct/direct", -1, "", "0", "1"),
    (14, 0, 8, "NET/Socket", "/0", 0, "receive", "0", "0"),
])
def test_connections(log, line, src, dst, transport, detail, conn, direction, sdev, ddev):
    c = _row(log.connections, line)
    assert (c["src_rank"], c["dst_rank"], c["transport"], c["detail"]) == (src, dst, transport, detail)
    assert (c["conn_index"], c["direction"], c["src_dev"], c["dst_dev"]) == (conn, direction, sdev, ddev)


def test_redacted_host_kept(log):
    assert _row(log.connections, 14)["host"] == "<cluster_name>"


def test_coll_with_markdown_quote_and_trailing_space(log):
    c = _row(log.colls, 15)
    assert (c["host"], c["pid"], c["op"], c["op_count"], c["count"], c["datatype"]) == (
        "ip-172-31-54-74", 30125, "AllReduce", 0, 33554432, 7)
    assert (c["red_op"], c["root"], c["nranks"], c["comm"], c["stream"]) == (0, 0, 1, "0x5631f0816b40", "0x5631f0021140")


def test_warn_with_error_chain(log):
    w = _row(log.warns, 17)
    assert (w["host"], w["pid"], w["tid"], w["src_file"], w["src_line"]) == ("user", 16901, 16967, "misc/socket.cc", 441)
    assert w["message"] == "socketFinalizeAccept: wrong type 4 != 3"
    assert w["chain"] == "misc/socket.cc:561 -> 3" and w["result_code"] == 3


def test_warn_with_bazel_path(log):
    w = _row(log.warns, 19)
    assert w["src_file"] == "external/nccl_archive/src/misc/ibvwrap.cc" and w["src_line"] == 63
    assert w["message"] == "Failed to open libibverbs.so[.1]"


def test_nccl_tests_failure(log):
    w = _row(log.warns, 23)
    assert (w["host"], w["src_file"], w["src_line"], w["level"]) == ("host3", "common.cu", 1125, "TEST_FAILURE")


def test_k9s_box_line(log):
    n = _row(log.networks, 22)
    assert (n["host"], n["pid"], n["network"], n["role"]) == ("task-7702-xt59c", 73, "IB", "selected")


def test_bare_banners_of_different_versions_not_assigned(log):
    # three different versions in one file: no process gets a guessed "file" version
    assert "file" not in set(log.processes["version_source"])


def test_old_watchdog_wrapped_over_two_lines(log):
    w = _row(log.watchdog, 24)
    assert (w["kind"], w["rank"], w["seq"], w["op_type"], w["timeout_ms"], w["ran_for_ms"]) == (
        "timeout", 1, 49, "ALLREDUCE", 18000000, 18005607)
    assert (w["numel_in"], w["numel_out"]) == (-1, -1)
    assert 25 not in set(log.watchdog["line"])


def test_new_watchdog_fragment(log):
    w = _row(log.watchdog, 26)
    assert (w["kind"], w["seq"], w["numel_in"], w["numel_out"], w["timeout_ms"], w["ran_for_ms"]) == (
        "timeout", 5, 1, 1, 600000, 600013)


def test_ray_with_ip_cut_watchdog(log):
    w = _row(log.watchdog, 27)
    assert (w["kind"], w["rank"], w["global_rank"], w["pid"], w["seq"]) == ("timeout", 62, 62, 833, -1)
    assert w["timestamp"] == "809 14:59:33.656957424" and w["severity"] == "E"


def test_tqdm_glued_watchdog(log):
    w = _row(log.watchdog, 28)
    assert (w["kind"], w["rank"], w["global_rank"], w["launcher_rank"]) == ("timeout", 5, 5, -1)


@pytest.mark.parametrize("line,kinds,version", [
    (29, ["nccl_error"], "2.4.8"),
    (30, ["nccl_error", "error_detail"], "2.17.1"),
    (31, ["dist_backend_error"], "2.18.5"),
    (32, ["remote_error"], ""),
    (33, ["watchdog_started"], ""),
    (34, ["pg_init"], ""),
    (35, ["pg_option"], ""),
    (37, ["nccl_error"], "2.7.8"),
])
def test_pytorch_error_lines(log, line, kinds, version):
    rows = log.watchdog[log.watchdog["line"] == line]
    assert list(rows["kind"]) == kinds
    assert set(rows["nccl_version"]) == {version}


def test_pg_option_timeout(log):
    assert _row(log.watchdog, 36)["timeout_ms"] == 600000


def test_sniffer_on_fixture():
    assert looks_like_nccl_log((FIX / "real_public_lines.log").read_bytes())
