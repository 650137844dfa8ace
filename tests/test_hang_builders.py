"""Builders of hand-made Flight Recorder dumps and stand-in NCCL logs for the hang tests (plus their self-checks)."""
from __future__ import annotations

import json
import pickle
from dataclasses import dataclass, field
from pathlib import Path


from parsers.flight_recorder import load_dump
from parsers.table import Table

WD_COLS = ["rank", "global_rank", "pg_id", "pg_guid", "pg_desc", "kind", "seq", "op_type", "numel_in", "numel_out",
           "timeout_ms", "ran_for_ms", "message", "line"]
COLL_COLS = ["host", "pid", "comm", "op", "op_count", "count", "datatype", "red_op", "root", "nranks", "line",
             "comm_id", "rank"]
PROC_COLS = ["host", "pid", "cuda_dev", "nccl_version", "launcher_rank", "rank", "rank_source"]
COMM_COLS = ["host", "pid", "comm", "comm_id", "rank", "nranks", "nnodes", "local_ranks", "cuda_dev", "bus_id",
             "nvml_dev", "parent", "split_color", "split_key", "line"]

DT = {"f32": "Float", "f16": "Half", "bf16": "BFloat16"}


def entry(pg: str, seq: int, op: str = "all_reduce", numel: int = 16, dtype: str = "f32", desc: str | None = None,
          record_id: int = 0, state: str = "scheduled", frame: str = "train.py") -> dict:
    """One Flight Recorder entry as PyTorch writes it (pickle flavour)."""
    out_sizes = [[numel * 4]] if op == "all_gather" else [[numel]]
    return {
        "record_id": record_id, "pg_id": int(pg), "process_group": (pg, desc or ("default_pg" if pg == "0" else f"pg{pg}")),
        "collective_seq_id": seq, "p2p_seq_id": 0, "op_id": seq, "profiling_name": f"nccl:{op}",
        "time_created_ns": 1_000_000_000 + record_id * 1000, "input_sizes": [[numel]],
        "input_dtypes": [DT[dtype]], "output_sizes": out_sizes, "output_dtypes": [DT[dtype]], "state": state,
        "time_discovered_started_ns": None, "time_discovered_completed_ns": None, "retired": False,
        "timeout_ms": 600000, "is_p2p": False,
        "frames": [{"name": op, "filename": "/x/site-packages/torch/distributed/distributed_c10d.py", "line": 1},
                   {"name": "step", "filename": frame, "line": 40 + seq}],
    }


def dump_dict(rank: int, seqs: list[tuple], world: int = 4, status: dict | None = None,
              pg_config: dict | None = None, waits_in_last: bool = True) -> dict:
    """A whole dump; seqs are (pg, seq, op, numel, dtype) tuples in call order.

    Default pg_status, as PyTorch writes it (keyed by pg_id; here pg_id = group name): every group completed
    what it enqueued except the group of the rank's last call, which it still waits in (`waits_in_last`).
    """
    entries = [entry(*s, record_id=i) for i, s in enumerate(seqs)]
    if status is None:
        status = {}
        for e in entries:
            pg = e["process_group"][0]
            st = status.setdefault(pg, {"last_enqueued_collective": -1, "last_started_collective": -1,
                                        "last_completed_collective": -1})
            st["last_enqueued_collective"] = max(st["last_enqueued_collective"], e["collective_seq_id"])
            st["last_completed_collective"] = st["last_enqueued_collective"]
        if entries and (blocked := entries[-1]["process_group"][0]) in status and waits_in_last:
            status[blocked]["last_completed_collective"] -= 1  # still waiting in its last call
    if pg_config is None:
        pg_config = {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(world)))}}
    return {"version": "2.5", "pg_config": pg_config, "pg_status": status, "entries": entries, "rank": rank}


def write_dumps(tmp: Path, per_rank: dict[int, list[tuple]], fmt: str = "pickle", **kw) -> list[Path]:
    """Write one dump per rank as nccl_trace_rank_<r> (pickle) or .json; return the paths.

    Without an explicit status, a rank waits in its last call only if some other rank of the world did not issue
    that call (a collective completes once every member issued it).
    """
    paths = []
    world = kw.get("world", 4)
    last = {r: max((s[1] for s in seqs if s[0] == seqs[-1][0]), default=-1) for r, seqs in per_rank.items() if seqs}
    for r, seqs in per_rank.items():
        extra = {}
        if "status" not in kw and seqs:
            g, s = seqs[-1][0], last[r]
            extra["waits_in_last"] = any(o not in per_rank or max((x[1] for x in per_rank[o] if x[0] == g),
                                                                   default=-1) < s for o in range(world))
        d = dump_dict(r, seqs, **extra, **{k: (v[r] if isinstance(v, dict) and r in v else v) for k, v in kw.items()})
        if fmt == "json":
            p = tmp / f"nccl_trace_rank_{r}.json"
            p.write_text(json.dumps(d))
        else:
            p = tmp / f"nccl_trace_rank_{r}"
            p.write_bytes(pickle.dumps(d, protocol=2))
        paths.append(p)
    return paths


def load_all(paths: list[Path]) -> list:
    """load_dump over paths."""
    return [load_dump(p) for p in paths]


@dataclass
class StandInLog:
    """The attributes of parsers.nccl_log.NcclLog the hang analysis reads."""

    path: str
    processes: Table = field(default_factory=lambda: Table.empty_of(PROC_COLS))
    communicators: Table = field(default_factory=lambda: Table.empty_of(COMM_COLS))
    colls: Table = field(default_factory=lambda: Table.empty_of(COLL_COLS))
    warns: Table = field(default_factory=Table)
    watchdog: Table = field(default_factory=lambda: Table.empty_of(WD_COLS))


def wd_log(path: Path, rank: int, rows: list[dict]) -> StandInLog:
    """A stand-in watchdog log of one rank: rows give kind, seq and optional op/numel/pg; the text file is written too."""
    full = []
    lines = []
    for i, r in enumerate(rows, 1):
        row = dict(rank=rank, global_rank=rank, pg_id=r.get("pg", 0), pg_guid="", pg_desc=r.get("desc", "default_pg"),
                   kind=r["kind"], seq=r.get("seq", -1), op_type=r.get("op", ""), numel_in=r.get("numel", -1),
                   numel_out=r.get("numel", -1), timeout_ms=600000, ran_for_ms=-1,
                   message=r.get("message", f"{r['kind']} {r.get('seq', -1)} {r.get('op', '')}"), line=i)
        full.append(row)
        lines.append(row["message"])
    path.write_text("\n".join(lines) + "\n")
    return StandInLog(path=str(path), watchdog=Table.from_records(full, WD_COLS))


def coll_log(path: Path, rank: int, comm_id: str, ops: list[tuple[str, int, int, int]], nranks: int = 4) -> StandInLog:
    """A stand-in NCCL INFO log of one rank: Init line of one communicator, then COLL (op, opCount, count, dtype)."""
    host, pid, comm = f"node{rank // 8}", 1000 + rank, "0x55aa"
    procs = Table.from_records([[host, pid, rank % 8, "2.21.5", rank, rank, "init"]], PROC_COLS)
    comms = Table.from_records([[host, pid, comm, comm_id, rank, nranks, 1, nranks, rank, "1000", rank, "", -1, -1, 1]],
                               COMM_COLS)
    colls = Table.from_records([[host, pid, comm, op, oc, cnt, dt, 0, 0, nranks, 2 + i, comm_id, rank]
                                for i, (op, oc, cnt, dt) in enumerate(ops)], COLL_COLS)
    path.write_text("\n".join(f"{op}: opCount {oc:x} count {cnt}" for op, oc, cnt, _ in ops) + "\n")
    return StandInLog(path=str(path), processes=procs, communicators=comms, colls=colls)


def test_builder_dump_roundtrip(tmp_path: Path) -> None:
    """A built dump reads back with the seqs, ops and numels that were put in."""
    [p] = write_dumps(tmp_path, {2: [("0", 1, "all_reduce", 8, "f32"), ("0", 2, "all_gather", 8, "f16")]})
    d = load_dump(p)
    assert d.rank == 2 and d.rank_source == "dump"
    assert list(d.entries["collective_seq_id"]) == [1, 2]
    assert list(d.entries["op"]) == ["allreduce", "allgather"]
    assert list(d.entries["output_numel"]) == [8, 32]
    assert list(d.entries["input_dtypes"]) == ["Float", "Half"]
    assert d.pg_config == {"0": {"desc": "default_pg", "ranks": [0, 1, 2, 3]}}
    assert d.pg_status["0"] == {"last_enqueued": 2, "last_started": -1, "last_completed": 1}  # waits in its last
