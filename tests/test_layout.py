"""The layout stage (analyzer/layout): the job's mesh from group names, structure and send/recv peers, on real
composed runs (fixtures/real-cpu-composed-dev, truth by construction), the simulated 3-D job, and hand-built
cases; the parser's typed pg_config table and Kineto's Seq / Comms Id."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

import analyzer
from analyzer.layout.names import dimension_of_desc
from analyzer.layout.structure import partitions, peer_fit
from parsers.kineto import load_trace

DEV = Path(__file__).resolve().parent.parent / "fixtures" / "real-cpu-composed-dev"
SIM = Path(__file__).resolve().parent.parent / "fixtures" / "sim"


def _truth(run: str) -> dict:
    return json.loads((DEV / run / "truth.json").read_text())


def test_pg_config_table_from_a_real_trace():
    t = load_trace(str(DEV / "ppdp-1f1b-named" / "rank0.pt.trace.json.gz"))
    pg = t.process_groups
    assert pg[["pg_name", "pg_desc", "pg_size"]].values.tolist() == [["0", "default_pg", 4], ["1", "mesh_pp", 2],
                                                                     ["3", "mesh_dp", 2]]
    assert pg["ranks"].tolist() == [(0, 1, 2, 3), (0, 2), (0, 1)]
    assert set(pg["backend_config"]) == {"cpu:gloo,cuda:gloo"}
    assert t.meta["pg_count"] == 5


def test_seq_and_comms_id_on_collective_kernels(tmp_path):
    args = {"Collective name": "allreduce", "In msg nelems": 16, "Out msg nelems": 16, "dtype": "Float",
            "Process Group Name": "3", "Process Group Ranks": "[0, 1]", "Group size": 2, "Seq": 7,
            "Comms Id": 123456789012345}
    doc = {"distributedInfo": {"rank": 0, "world_size": 2, "backend": "nccl"}, "traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "pid": 0, "tid": 7,
         "ts": 10.0, "dur": 5.0, "args": {"stream": 7, "device": 0, "correlation": 1, **args}},
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "pid": 0, "tid": 7,
         "ts": 20.0, "dur": 5.0, "args": {"stream": 7, "device": 0, "correlation": 2,
                                          **{**args, "Seq": "8", "Comms Id": None}}}]}
    p = tmp_path / "rank0.pt.trace.json"
    p.write_text(json.dumps(doc))
    c = load_trace(str(p)).collectives
    assert c["seq"].tolist() == [7, 8]
    assert c["comms_id"].tolist() == ["123456789012345", ""]


@pytest.mark.parametrize("desc,want", [
    ("mesh_dp", ("dp", "dp", False)), ("mesh_tp", ("tp", "tp", False)), ("mesh_pp", ("pp", "pp", False)),
    ("mesh_dp_shard", ("dp_shard", "fsdp", False)), ("mesh_dp_shard_cp", ("dp_shard_cp", "fsdp", True)),
    ("TENSOR_MODEL_PARALLEL_GROUP", ("tp", "tp", False)), ("PIPELINE_MODEL_PARALLEL_GROUP", ("pp", "pp", False)),
    ("DATA_PARALLEL_GROUP", ("dp", "dp", False)), ("EXPERT_MODEL_PARALLEL_GROUP", ("ep", "ep", False)),
    ("default_pg", ("world", "world", False)), ("undefined", None), ("", None), ("my_group", None)])
def test_what_a_group_description_names(desc, want):
    assert dimension_of_desc(desc) == want


def test_partitions_split_two_dimensions_of_one_size():
    groups = {"1": [0, 2], "2": [1, 3], "3": [0, 1], "4": [2, 3], "0": [0, 1, 2, 3], "5": [0, 3]}
    assert sorted(map(sorted, partitions(groups, 4))) == [["1", "2"], ["3", "4"]]


def test_group_local_peers_fit_only_their_dimension():
    # pp [0,2],[1,3]: stage 0 (ranks 0, 1) sends to group rank 1, stage 1 (2, 3) receives from group rank 0
    rank = np.array([0, 1, 2, 3, 2, 3, 0, 1])
    op = np.array(["send", "send", "recv", "recv", "send", "send", "recv", "recv"])
    peer = np.array([1, 1, 0, 0, 0, 0, 1, 1])
    assert peer_fit(rank, op, peer, None, 4) is None  # rank 1 "sends to 1": itself
    pp = {0: [0, 2], 2: [0, 2], 1: [1, 3], 3: [1, 3]}
    dp = {0: [0, 1], 1: [0, 1], 2: [2, 3], 3: [2, 3]}
    assert peer_fit(rank, op, peer, pp, 4).tolist() == [2, 3, 0, 1, 0, 1, 2, 3]
    assert peer_fit(rank, op, peer, dp, 4) is None


def _dims(mesh) -> dict:
    return {d.name: (d.role, d.size, sorted(d.groups)) for d in mesh.dims}


@pytest.mark.parametrize("run", ["dptp-fsdp-named", "ppdp-1f1b-named", "ppdp-1f1b-unnamed", "dptp-manual-unnamed",
                                 "ppdp-alt-gpipe-named", "epdp-imbalance-r1"])
def test_mesh_exact_on_real_composed_runs(run):
    truth = _truth(run)
    with analyzer.load(DEV / run) as a:
        mesh = a.mesh
        assert mesh.exact
        assert {d.name: d.size for d in mesh.dims} == truth["mesh"]
        assert {d.name: sorted(d.groups) for d in mesh.dims} == {k: sorted(v) for k, v in truth["groups"].items()}
        role = truth.get("roles") or {k: k for k in truth["mesh"]}
        assert {d.name: d.role for d in mesh.dims} == role
        assert [d.name for d in mesh.dims] == list(truth["mesh"])  # outermost first, as the mesh was made
        rep = a.report
        assert rep["mesh"]["shape"] == truth["mesh"]
        roles = {tuple(g["ranks"]): g["role"] for g in rep["cross_rank"]["process_groups"]}
        for dim, groups in truth["groups"].items():
            for g in groups:
                assert roles.get(tuple(g)) == role[dim], (g, roles)
        if "pipeline" in truth:
            t, pipe = truth["pipeline"], rep["cross_rank"]["pipeline"]
            assert (pipe["p"], pipe["m"], pipe["v"], pipe["schedule"]) == (t["p"], t["m"], t["v"], t["schedule"])
            assert pipe["stage_ranks"] == t["stage_ranks"]
            assert sorted(x["stages"] for x in pipe["pipelines"]) == sorted(truth["groups"]["pp"])
            assert all((x["p"], x["m"]) == (t["p"], t["m"]) for x in pipe["pipelines"])
            for g in truth["groups"]["pp"]:
                assert mesh.pp_neighbours(g[0]) == (None, g[1]) and mesh.pp_neighbours(g[1]) == (g[0], None)
            for g in truth["groups"]["dp"]:
                assert mesh.dp_peers(g[0]) == [g[1]]
        for dim in ("tp", "ep"):
            for g in truth["groups"].get(dim, []):
                assert mesh.partners(g[1], role[dim]) == [g[0]]


def test_named_mesh_in_every_header():
    with analyzer.load(DEV / "dptp-fsdp-named") as a:
        text = a.render("text")
        assert "job shape: dp=2 × tp=2 (from pg_desc mesh_dp, mesh_tp)" in text
        assert "dp=2 × tp=2 (from pg\\_desc mesh\\_dp, mesh\\_tp)" in a.render("markdown")
        assert "job shape: dp=2 × tp=2 (from pg_desc mesh_dp, mesh_tp)" in a.render("html")
        assert a.mesh.coords == {0: {"dp": 0, "tp": 0}, 1: {"dp": 0, "tp": 1}, 2: {"dp": 1, "tp": 0},
                                 3: {"dp": 1, "tp": 1}}


def test_unnamed_pipeline_dimension_from_send_recv_peers():
    with analyzer.load(DEV / "ppdp-1f1b-unnamed") as a:
        m = a.mesh
        assert m.p2p_peers == "local:pp"
        assert m.dim("pp").source == "p2p" and m.dim("dp").source == "traffic"
        assert m.shape_text() == "pp=2 × dp=2 (from pp: p2p; dp: traffic)"


@pytest.mark.slow
@pytest.mark.parametrize("run", ["tp_pp_dp_1f1b_clean", "tp_pp_dp_1f1b_straggler"])
def test_mesh_exact_on_the_simulated_3d_job(run):
    with analyzer.load(SIM / run) as a:
        m = a.mesh
        assert m.exact and m.source == "pg_desc"
        assert {d.name: d.size for d in m.dims} == {"pp": 4, "dp": 2, "tp": 2}
        assert m.tp_partners(0) == [1] and m.dp_peers(0) == [2] and m.pp_neighbours(4) == (0, 8)
        pipe = a.report["cross_rank"]["pipeline"]
        assert pipe["p"] == 4


# --- expert-parallel load (analyzer/cross_rank/expert_load.py, MOE001) --------------------------------------------

def test_alltoall_sizes_from_gloo_split_sizes():
    from parsers.kineto_collectives import alltoall_sizes
    from parsers.kineto_events import ShapeArgs
    a = ShapeArgs(concrete_inputs=["", "", "", "[96, 96]", "[32, 96]", "False", "-1"])
    a.input_dims = [[192, 64], [128, 64]]
    assert alltoall_sizes(a) == (128 * 64, 192 * 64)  # sent 32 + 96 rows, received 96 + 96 rows of 64
    a.concrete_inputs = ["", "", "", "[]", "[]", "False", "-1"]  # even split: the tensors' own sizes
    a.input_dims = [[2], [2]]
    assert alltoall_sizes(a) == (2, 2)
    a.input_dims = None
    assert alltoall_sizes(a) is None


@pytest.mark.parametrize("folder,hot,group_ranks", [(DEV / "epdp-imbalance-r1", 1, [0, 1]),
                                                    (SIM / "moe_imbalance", 3, None)])
def test_the_overloaded_expert_is_named_with_its_factor(folder, hot, group_ranks):
    with analyzer.load(folder) as a:
        loads = a.report["cross_rank"]["expert_load"]
        g = next(x for x in loads if not x["balanced"])
        assert g["hot_rank"] == hot and round(g["factor"], 2) == 3.0
        if group_ranks:
            assert g["ranks"] == group_ranks
            assert [x["balanced"] for x in loads if x is not g] == [True]  # the other ep group routes evenly
        moe = next(f for f in a.findings if f["id"] == "MOE001")
        assert moe["severity"] == "warning" and moe["subject"]["ranks"] == [hot]
        assert f"Rank {hot}'s experts receive 3.0×" in moe["title"]
        if group_ranks is None:  # the simulated job has nothing else wrong: MOE001 comes first
            assert next(f for f in a.findings if f["severity"] in ("error", "warning"))["id"] == "MOE001"


def test_balanced_routing_raises_no_moe_finding():
    with analyzer.load(SIM / "moe_clean") as a:
        loads = a.report["cross_rank"]["expert_load"]
        assert loads and all(x["balanced"] and x["factor"] == 1.0 for x in loads)
        assert not [f for f in a.findings if f["id"] == "MOE001"]
