"""Every row of the reference's §0 version table: lines built from that version's NCCL format strings.

Values are made up (host `h`, pid 7); the message shapes are the format strings named in
shared/reference/nccl-log-formats.md §0/§2. Real lines are tested in test_nccl_log_real.py.
"""
from __future__ import annotations

import pytest

from parsers.nccl_log import parse_nccl_lines
from tests.tables import pandas_tables

parse_nccl_lines = pandas_tables(parse_nccl_lines)  # the tables as DataFrames (tests/tables.py)

P = "h:7:7 [0] NCCL INFO "
T = "h:7:9 [0] NCCL INFO "


def parse(*msgs: str):
    return parse_nccl_lines([m if m == "" or m.startswith(("h:", "[2025", "NCCL version")) else P + m for m in msgs])


def one(df):
    assert len(df) == 1, df
    return df.iloc[0]


def test_2_3_init_ring_connections_and_threads():
    log = parse("comm 0x1a rank 0 nranks 2", "Ring 00 :    0   1", "Ring 00 : 0[0] -> 1[1] via P2P/IPC",
                "Ring 01 : 1 -> 0 via NET/IB/0", "Using 256 threads", "Min Comp Cap 7",
                "comm 0x1a rank 0 nranks 2 - COMPLETE")
    c = one(log.communicators)
    assert (c["comm"], c["rank"], c["nranks"], bool(c["complete"])) == ("0x1a", 0, 2, True)
    assert list(log.connections["transport"]) == ["P2P/IPC", "NET/IB"]
    assert list(log.connections["comm"]) == ["0x1a", "0x1a"]  # pre-START era: conns belong to the next COMPLETE
    assert log.connections["detail"].iloc[1] == "/0"
    assert log.family_counts["ring_list"] == 1 and log.family_counts["known"] == 2
    assert log.processes["nccl_version_min"].iloc[0] == "2.3"


def test_2_4_init_nvmldev_trees_send_direction():
    log = parse("Trees [0] -1->0->1/-1/-1", "Ring 00 : 1 -> 0 [send] via NET/IB/0",
                "Using 256 threads, Min Comp Cap 7, Trees enabled up to size 469999",
                "CUDA Dev 0[0], IB NIC distance :  PHB", "NET/Plugin : No plugin found (libnccl-net.so).",
                "comm 0x2b rank 0 nranks 2 cudaDev 3 nvmlDev 5 - Init COMPLETE")
    c = one(log.communicators)
    assert (c["cuda_dev"], c["nvml_dev"], c["bus_id"]) == (3, 5, "")
    assert one(log.connections)["direction"] == "send"
    assert log.family_counts["trees"] == 1 and log.family_counts["known"] == 3
    assert log.processes["cuda_dev"].iloc[0] == 3  # Init cudaDev wins over the envelope [0]


def test_2_5_to_2_7_busid_twoway_trees_channels_network():
    log = parse("Trees [0] 1/-1/-1->0->-1|-1->0->1/-1/-1", "Channel 00/02 :    0   1",
                "threadThresholds 8/8/64 | 16/8/64 | 8/8/64", "Using network IB",
                "2 coll channels, 2 p2p channels, 2 p2p channels per peer",
                "Ring 00 : 0[1b000] -> 1[1c000] via P2P/IPC", "Channel 00 : 0[1b000] -> 1[1c000] via P2P/IPC",
                "Bootstrap : Using [0]eth0:10.0.0.1<0> [1]ib0:10.1.0.1<0>",
                "comm 0x3c rank 0 nranks 2 cudaDev 0 busId 1b000 - Init COMPLETE")
    assert one(log.communicators)["bus_id"] == "1b000"
    assert list(log.connections["src_dev"]) == ["1b000", "1b000"]
    boot = log.networks[log.networks["role"] == "bootstrap"]
    assert list(boot["interface"]) == ["eth0", "ib0"] and list(boot["address"]) == ["10.0.0.1", "10.1.0.1"]
    assert log.networks[log.networks["role"] == "selected"]["network"].tolist() == ["IB"]
    assert log.family_counts["trees"] == 1 and log.family_counts["ring_list"] == 1
    assert log.unrecognised == 0 and "other" not in log.family_counts


def test_2_8_single_trees_connected_single_bootstrap():
    log = parse("Trees [0] 1/-1/-1->0->-1 [1] -1/-1/-1->0->1", "Connected all rings", "Connected all trees",
                "Bootstrap : Using eth0:10.0.0.1<0>")
    assert log.family_counts == {"trees": 1, "known": 2, "bootstrap": 1}
    assert one(log.networks)["interface"] == "eth0"


def test_2_10_graph_ring_is_not_a_connection():
    log = parse("Ring 00 : 1 -> 0 -> 1", "Tree 0 : -1 -> 0 -> 1/-1/-1")
    assert log.family_counts == {"graph": 2} and len(log.connections) == 0


def test_2_12_7_net_conn_index_proxy_and_relaxed_ordering():
    log = parse("Channel 00/1 : 0[1b000] -> 1[1c000] [send] via NET/IB/0/GDRDMA",
                "Channel 01/0 : 2[1b000] -> 0[1b000] [receive] via NET/IB/1(3)/GDRDMA",
                "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.0.1<0>")
    c = log.connections
    assert list(c["conn_index"]) == [1, 0] and list(c["transport"]) == ["NET/IB", "NET/IB"]
    assert list(c["detail"]) == ["/0/GDRDMA", "/1(3)/GDRDMA"]
    devs = log.networks[log.networks["role"] == "net_device"]
    assert list(devs["detail"]) == ["IB/RO", "RoCE/RO"]


def test_2_13_cuda_driver_and_shm_direct():
    log = parse("cudaDriverVersion 12040", "Channel 00 : 0[1b000] -> 1[1c000] via SHM/direct/direct")
    assert one(log.connections)["transport"] == "SHM"
    assert log.processes["nccl_version_min"].iloc[0] == "2.13"


def test_2_14_p2p_conn_index_and_four_thresholds():
    log = parse("Channel 00/0 : 0[1b000] -> 1[1c000] via P2P/IPC/read", "threadThresholds 8/8/64 | 128/8/64 | 512 | 512")
    c = one(log.connections)
    assert (c["conn_index"], c["transport"], c["detail"]) == (0, "P2P/IPC", "/read")
    assert log.family_counts["known"] == 1


def test_2_16_commid_and_chunksize():
    log = parse("P2P Chunksize set to 131072",
                "comm 0x4d rank 1 nranks 4 cudaDev 1 busId 1c000 commId 0xabc123 - Init COMPLETE")
    assert one(log.communicators)["comm_id"] == "0xabc123"
    assert len(log.env) == 0 and log.family_counts["known"] == 1


def test_2_17_nvls_channels():
    log = parse("2 coll channels, 0 nvls channels, 2 p2p channels, 2 p2p channels per peer",
                "NVLS multicast support is not available on dev 0",
                "24 coll channels, 0 collnet channels, 16 nvls channels, 32 p2p channels, 32 p2p channels per peer",
                "2 coll channels, 2 p2p channels, 2 p2p channels per peer")
    assert log.family_counts == {"channels": 3, "known": 1}
    ch = log.channels
    assert ch[["coll", "collnet", "nvls", "p2p", "p2p_per_peer"]].values.tolist() == [
        [2, -1, 0, 2, 2], [24, 0, 16, 32, 32], [2, -1, -1, 2, 2]]  # -1: the version does not print that count


def test_2_18_1_cumem():
    log = parse("Channel 08/0 : 11[1c000] -> 10[1b000] via P2P/CUMEM/read")
    assert one(log.connections)["transport"] == "P2P/CUMEM"


def test_2_18_3_init_start_nvmldev_brackets():
    log = parse("comm 0x5e rank 0 nranks 2 cudaDev 0 nvmlDev 4 busId 9b000 commId 0xfeed - Init START",
                "Channel 00/0 : 0[4] -> 1[5] via P2P/CUMEM/read",
                "comm 0x5e rank 0 nranks 2 cudaDev 0 nvmlDev 4 busId 9b000 commId 0xfeed - Init COMPLETE")
    c = one(log.communicators)
    assert (c["nvml_dev"], c["bus_id"], c["comm_id"], bool(c["complete"]), c["line"]) == (4, "9b000", "0xfeed", True, 1)
    assert one(log.connections)["comm"] == "0x5e" and one(log.connections)["src_dev"] == "4"
    assert log.processes["nccl_version_min"].iloc[0] == "2.18.3"


def test_2_19_nondevice_plugin_is_not_a_network():
    log = parse("Using non-device net plugin version 0", "Using network Socket")
    assert log.networks["network"].tolist() == ["Socket"]


def test_2_20_comm_shape_collnet_channels_tuning():
    log = parse("comm 0x6f rank 3 nranks 8 cudaDev 3 nvmlDev 3 busId 3b000 commId 0x1 - Init START",
                "comm 0x6f rank 3 nRanks 8 nNodes 2 localRanks 4 localRank 3 MNNVL 0",
                "2 coll channels, 0 collnet channels, 0 nvls channels, 2 p2p channels, 2 p2p channels per peer",
                "1048576 Bytes -> Algo 1 proto 2 time 12.345000")
    c = one(log.communicators)
    assert (c["rank"], c["nranks"], c["nnodes"], c["local_ranks"]) == (3, 8, 2, 4)
    assert log.family_counts["tuning"] == 1


def test_2_21_function_prefix_and_split():
    log = parse("ncclCommInitRank comm 0x10 rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId 18000 commId 0xaa - Init COMPLETE",
                "ncclCommSplit comm 0x20 rank 1 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 parent 0x10 color 5 key 1 "
                "commId 0xbb - Init START", "TUNER/Plugin: Could not find: libnccl-tuner.so.")
    s = log.communicators.iloc[1]
    assert (s["init_fn"], s["parent"], s["split_color"], s["split_key"], s["comm_id"]) == ("ncclCommSplit", "0x10", 5, 1, "0xbb")
    assert log.communicators["init_fn"].iloc[0] == "ncclCommInitRank"


def test_2_22_prefixed_banner_timings_ccoff_plugin():
    log = parse(P + "NCCL version 2.22.3+cuda12.6", "Init timings: rank 0 nranks 2 total 0.52 (kernels 0.10, "
                "bootstrap 0.01, allgathers 0.00, topo 0.05, graphs 0.01, connections 0.30, rest 0.05)",
                "CC Off, workFifoBytes 1048576", "NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.")
    p = one(log.processes)
    assert (p["nccl_version"], p["version_source"]) == ("2.22.3", "banner")
    assert log.family_counts == {"version": 1, "known": 3}


def test_2_23_any_fn_split_without_commid_unpadded_ring():
    log = parse("ncclCommInitRankConfig comm 0x30 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 commId 0xcc - Init START",
                "ncclCommSplit comm 0x40 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 parent 0x30 color 1 key 0- Init START",
                "Init timings - ncclCommInitRankConfig: rank 0 nranks 2 total 0.50 (kernels 0.10, alloc 0.01, rest 0.39)",
                "Bootstrap timings total 0.000892 (create 0.000028, send 0.000125, recv 0.000242, ring 0.000083, delay 0.000000)",
                "Channel 00/02 : 0 1", "ncclAllReduce: 1048576 Bytes -> Algo 1 proto 2 time 12.3")
    c = log.communicators
    assert list(c["init_fn"]) == ["ncclCommInitRankConfig", "ncclCommSplit"]
    assert (c["comm_id"].iloc[1], c["parent"].iloc[1], c["split_color"].iloc[1]) == ("", "0x30", 1)
    assert log.family_counts["ring_list"] == 1 and log.family_counts["tuning"] == 1
    assert log.family_counts.get("bootstrap", 0) == 0  # "Bootstrap timings" is not an interface line


def test_2_24_bootstrap_no_space_splitcount_pxn_tuning_ras():
    log = parse("Bootstrap: Using eth0:10.0.0.9<0>",
                "ncclCommSplit comm 0x50 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 parent 0x30 splitCount 1 "
                "color 7 key 0- Init START",
                "Connected all rings, use ring PXN 0 GDR 1",
                "AllReduce: 1048576 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..1}",
                "RAS client listening socket at 127.0.0.1<28028>")
    assert one(log.networks)["address"] == "10.0.0.9"
    assert one(log.communicators)["split_color"] == 7
    assert log.family_counts["tuning"] == 1 and len(log.colls) == 0


def test_2_26_warn_timestamp_prefix():
    log = parse("", "[2025-03-01 12:00:00] h:7:9 [0] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed "
                "by remote peer h2<5000>")
    w = one(log.warns)
    assert (w["timestamp"], w["src_file"], w["src_line"], w["tid"]) == ("2025-03-01 12:00:00", "misc/socket.cc", 50, 9)


def test_2_27_plugin_assignment_lines():
    log = parse("Assigned NET plugin IB to comm", "Initialized NET plugin IB",
                "Successfully loaded external plugin libnccl-net.so")
    assert log.family_counts == {"known": 3}


def test_2_28_new_ops():
    ops = ["AlltoAll", "Gather", "Scatter"]
    log = parse(*(f"{op}: opCount {i:x} sendbuff 0x1 recvbuff 0x2 count 8 datatype 7 op 0 root 0 comm 0x9 "
                  f"[nranks=4] stream 0x3" for i, op in enumerate(ops, 10)),
                "ENV/Plugin: Could not find: libnccl-env.so.")
    assert list(log.colls["op"]) == ops and list(log.colls["op_count"]) == [10, 11, 12]


def test_2_29_git_version_jobrank_childcount_signal_ops():
    log = parse("NCCL git version master abc1234",
                "[Rank 5] ncclCommInitRank comm 0x60 rank 1 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 commId 0xdd - Init START",
                "ncclCommSplit comm 0x70 rank 0 nranks 1 cudaDev 0 nvmlDev 0 busId 18000 parent 0x60 childCount 1 "
                "color 0 key 0- Init START",
                "PutSignal: opCount 3 sendbuff 0x1 recvbuff (nil) count 8 datatype 0 op 0 root 1 comm 0x60 [nranks=2] stream 0x3")
    c = log.communicators
    assert c["job_rank"].iloc[0] == 5 and c["parent"].iloc[1] == "0x60"
    coll = one(log.colls)
    assert (coll["op"], coll["root"], coll["comm_id"], coll["rank"]) == ("PutSignal", 1, "0xdd", 1)
    assert log.processes["nccl_version_min"].iloc[0] == "2.29"


def test_2_30_warn_with_function_name():
    log = parse("h:7:9 [0] misc/socket.cc:50 (socketProgress) NCCL WARN socketProgress: Connection closed")
    w = one(log.warns)
    assert (w["func"], w["src_file"], w["message"]) == ("socketProgress", "misc/socket.cc", "socketProgress: Connection closed")


def test_rccl_coll_suffix():
    log = parse("AllReduce: opCount 1f sendbuff 0x1 recvbuff 0x2 count 8 datatype 7 op 0 root 0 comm 0x9 "
                "[nranks=4] stream 0x3 task 0 globalrank 2")
    assert one(log.colls)["op_count"] == 31


@pytest.mark.parametrize("msg,transport,detail", [
    ("NET/IBext_v8/0/GDRDMA", "NET/IBext", "/0/GDRDMA"),
    ("NET/AWS Libfabric/0/GDRDMA", "NET/OFI", "/0/GDRDMA"),
    ("NET/Libfabric/1", "NET/OFI", "/1"),
    ("NET/FastSocket/0", "NET/FastSocket", "/0"),
    ("P2P/direct pointer/1", "P2P/direct", " pointer/1"),
    ("direct shared memory", "SHM", ""),
    ("P2P/IPC/read/CE", "P2P/IPC", "/read/CE"),
    ("P2P/indirect/1[1]", "P2P/indirect", "/1[1]"),
])
def test_transport_normalisation(msg, transport, detail):
    c = one(parse(f"Channel 00 : 0[0] -> 1[1] via {msg}").connections)
    assert (c["transport"], c["detail"]) == (transport, detail)
