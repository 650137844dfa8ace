"""Host resolution order and role inference rules."""
from __future__ import annotations

from types import SimpleNamespace

import pandas as pd

from analyzer.cross_rank.topology import group_span, infer_role, parse_ranks, resolve_hosts


def _job(hosts, logs=()):
    traces = {r: SimpleNamespace(meta={"host": h}) for r, h in enumerate(hosts)}
    return SimpleNamespace(traces=traces, nccl_logs=list(logs))


def test_hosts_from_traces_first():
    h = resolve_hosts(_job(["a", "a", "b", "b"]), gpus_per_node=1)
    assert h.source == "trace" and h.rank_to_host == {0: "a", 1: "a", 2: "b", 3: "b"}


def test_hosts_from_nccl_logs_then_gpus_per_node():
    log = SimpleNamespace(processes=pd.DataFrame({"rank": [0, 1, 2], "host": ["x", "x", "y"]}))
    assert resolve_hosts(_job([None] * 3, [log])).rank_to_host == {0: "x", 1: "x", 2: "y"}
    h = resolve_hosts(_job([None] * 4), gpus_per_node=2)
    assert h.source == "gpus_per_node" and h.rank_to_host[3] == "node1"
    assert resolve_hosts(_job([None] * 4)).source == "none"


def test_span():
    h = resolve_hosts(_job(["a", "a", "b", "b"]))
    assert group_span([0, 1], h) == (["a"], "intra_node")
    assert group_span([1, 2], h) == (["a", "b"], "inter_node")


def test_parse_ranks():
    assert parse_ranks("[3, 1, 2]") == [1, 2, 3] and parse_ranks([0, 1]) == [0, 1] and parse_ranks("") == []


def test_roles():
    assert infer_role("0", [0, 1, 2, 3], 4, {"allreduce": 9}, 3, 0.5)[0] == "world"
    assert infer_role("5", [0, 2], 8, {"send": 10, "recv": 10}, 0, None)[0] == "pp"
    assert infer_role("5", [0, 2], 8, {"alltoall": 8, "allreduce": 1}, 3, 0.1)[0] == "ep"
    assert infer_role("5", [0, 2], 8, {"allgather": 8, "reducescatter": 4}, 4, 0.0)[0] == "fsdp"
    assert infer_role("5", [0, 1], 8, {"allgather": 8, "reducescatter": 8}, 8, 0.0)[0] == "tp"
    assert infer_role("5", [0, 1], 8, {"allreduce": 16}, 16, 0.05)[0] == "tp"
    assert infer_role("5", [0, 2], 8, {"allreduce": 3}, 3, 0.45)[0] == "dp"
    assert infer_role("5", [0, 2], 8, {}, 0, None)[0] == "unknown"
