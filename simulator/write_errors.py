"""PyTorch ProcessGroupNCCL stderr (watchdog timeout family) and Flight Recorder dumps (JSON / pickle)."""
from __future__ import annotations

import datetime as _dt

from simulator.names import DDP_FRAMES, FR_NAME, KINETO_DTYPE, OPTYPE


def glog_time(ns: int) -> str:
    """glog's `MMDD HH:MM:SS.nnnnnnnnn` (UTC here, no year)."""
    d = _dt.datetime.fromtimestamp(ns // 10**9, _dt.timezone.utc)
    return d.strftime("%m%d %H:%M:%S") + f".{ns % 10**9:09d}"


def pg_prefix(g, grank: int) -> str:
    return f"[PG ID {g.name} PG GUID {g.name}({g.desc}) Rank {grank}]"


def watchdog_lines(job, rank: int, pending: dict, enq: int, comp: int, fire_local: int, ran_ms: int) -> list[str]:
    """The lines PyTorch ≥2.4 prints on stderr when the watchdog times out one work item."""
    g = job.pg[pending["call"].pg]
    c = pending["call"]
    grank = g.ranks.index(rank)
    seq = c.seq
    pre = f"[default{job.topo.local(rank)}]:" if job.cfg["nccl"]["launcher"] == "torchrun" else ""
    to = job.cfg["nccl"]["timeout_ms"]
    work = (f"WorkNCCL(SeqNum={seq}, OpType={OPTYPE[c.op]}, NumelIn={c.in_n}, NumelOut={c.out_n}, "
            f"Timeout(ms)={to})")
    t = [glog_time(fire_local + i * 137_000) for i in range(6)]
    pp = pg_prefix(g, grank)
    return [
        f"{pre}[rank{rank}]:[E{t[0]} ProcessGroupNCCL.cpp:632] [Rank {grank}] Watchdog caught collective operation "
        f"timeout: {work} ran for {ran_ms} milliseconds before timing out.",
        f"{pre}[rank{rank}]:[E{t[1]} ProcessGroupNCCL.cpp:2168] {pp} failure detected by watchdog at work sequence id: "
        f"{seq} PG status: last enqueued work: {enq}, last completed work: {comp}",
        f"{pre}[rank{rank}]:[E{t[2]} ProcessGroupNCCL.cpp:667] Stack trace of the failed collective: ",
        f"{pre}#0 {DDP_FRAMES[c.op][0]} from /usr/local/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py:{DDP_FRAMES[c.op][1]}",
        f"{pre}#1 train_step from /workspace/train.py:142",
        f"{pre}[rank{rank}]:[E{t[3]} ProcessGroupNCCL.cpp:681] [Rank {grank}] Some NCCL operations have failed or timed "
        "out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on "
        "corrupted/incomplete data.",
        f"{pre}[rank{rank}]:[E{t[4]} ProcessGroupNCCL.cpp:697] [Rank {grank}] To avoid data inconsistency, we are taking "
        "the entire process down.",
        f"{pre}[rank{rank}]:[F{t[5]} ProcessGroupNCCL.cpp:1556] {pp} Process group watchdog thread terminated with "
        f"exception: [Rank {grank}] Watchdog caught collective operation timeout: {work} ran for {ran_ms} "
        "milliseconds before timing out.",
    ]


def crash_lines(job, rank: int, when_local: int) -> list[str]:
    """What a rank that died (illegal memory access) leaves on stderr: a Python traceback, no dump."""
    pre = f"[default{job.topo.local(rank)}]:" if job.cfg["nccl"]["launcher"] == "torchrun" else ""
    return [pre + x for x in (
        "Traceback (most recent call last):",
        '  File "/workspace/train.py", line 212, in <module>',
        "    main()",
        '  File "/workspace/train.py", line 188, in main',
        "    loss.backward()",
        '  File "/usr/local/lib/python3.11/site-packages/torch/_tensor.py", line 581, in backward',
        "    torch.autograd.backward(",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might "
        "be incorrect.",
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
        "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
        "",
    )]


def fr_dump(job, rank: int, records: list[dict]) -> dict:
    """Flight Recorder dump (version 2.5) from one rank's enqueue log, plain types only, keyed as PyTorch keys it.

    `pg_id` is the rank-local creation index of the group (non-members create none, so it differs across
    ranks); `pg_status` is keyed by that pg_id and holds the number of the last work enqueued / started /
    completed in that group in the work's own counter (collective or P2P), as ProcessGroupNCCL does; `op_id`
    counts both per group.
    """
    groups = sorted(job.topo.groups_of(rank), key=lambda g: int(g.name))
    local = {g.name: i for i, g in enumerate(groups)}
    to = job.cfg["nccl"]["timeout_ms"]
    entries = []
    seqc: dict = {}
    p2pc: dict = {}
    opc: dict = {}
    status = {str(local[g.name]): {"last_enqueued_collective": -1, "last_started_collective": -1,
                                   "last_completed_collective": -1} for g in groups}
    for rid, e in enumerate(records):
        c = e["call"]
        g = job.pg[c.pg]
        opc[c.pg] = opc.get(c.pg, 0) + 1
        if c.is_p2p:
            p2pc[c.pg] = c.seq
            me, peer = g.ranks.index(rank), g.ranks.index(c.peer)
            pname = f"nccl:send {me}->{peer}" if c.op == "send" else f"nccl:recv {me}<-{peer}"
        else:
            seqc[c.pg] = c.seq
            pname = FR_NAME[c.op]
        st = e["state"]
        fn, line = DDP_FRAMES[c.op]
        ins, outs = [[c.in_n]], [[c.out_n]]
        entries.append({
            "frames": [{"name": fn, "filename": "/usr/local/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py",
                        "line": line},
                       {"name": "train_step", "filename": "/workspace/train.py", "line": 142},
                       {"name": "main", "filename": "/workspace/train.py", "line": 188}],
            "record_id": rid, "pg_id": local[c.pg], "process_group": [g.name, g.desc],
            "collective_seq_id": seqc.get(c.pg, 0), "p2p_seq_id": p2pc.get(c.pg, 0), "op_id": opc[c.pg],
            "profiling_name": pname, "time_created_ns": e["created"],
            "input_sizes": ins, "input_dtypes": [KINETO_DTYPE[c.dtype]],
            "output_sizes": outs, "output_dtypes": [KINETO_DTYPE[c.dtype]],
            "state": st, "time_discovered_started_ns": e.get("started"),
            "time_discovered_completed_ns": e.get("completed"), "retired": st == "completed",
            "timeout_ms": to, "is_p2p": c.is_p2p,
        })
        s = status[str(local[c.pg])]
        s["last_enqueued_collective"] = c.seq
        if st in ("started", "completed"):
            s["last_started_collective"] = c.seq
        if st == "completed":
            s["last_completed_collective"] = c.seq
    buf = job.cfg["flight_recorder"]["buffer"]
    return {"version": "2.5",
            "pg_config": {g.name: {"name": g.name, "desc": g.desc, "ranks": "[" + ", ".join(map(str, g.ranks)) + "]"}
                          for g in groups}, "comm_lib_version": "2.21.5",
            "pg_status": status, "entries": entries[-buf:]}
