"""Build small Kineto traces by hand for tests: every number in them is chosen, so answers are exact."""
from __future__ import annotations

import gzip
from pathlib import Path
from typing import Optional

import orjson


def kernel(ts: float, dur: float, name: str = "sm80_xmma_gemm", stream: int = 7, device: int = 0,
           correlation: Optional[int] = None, cat: str = "kernel", **args) -> dict:
    """A GPU event (kernel / gpu_memcpy / gpu_memset) at ts µs lasting dur µs."""
    a = {"device": device, "stream": stream, **args}
    if correlation is not None:
        a["correlation"] = correlation
    return {"ph": "X", "cat": cat, "name": name, "pid": device, "tid": stream, "ts": ts, "dur": dur, "args": a}


def nccl(ts: float, dur: float, stream: int = 20, **args) -> dict:
    """An NCCL all-reduce kernel."""
    return kernel(ts, dur, "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
                  stream=stream, **args)


def runtime(ts: float, dur: float, correlation: int, tid: int = 100) -> dict:
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": tid, "ts": ts,
            "dur": dur, "args": {"correlation": correlation, "External id": correlation}}


def step(n: int, ts: float, dur: float, tid: int = 100) -> dict:
    return {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": 1, "tid": tid, "ts": ts,
            "dur": dur, "args": {}}


def trace(events: list[dict], rank: Optional[int] = 0, world_size: int = 2, **top) -> dict:
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}], **top}
    if rank is not None:
        doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world_size}
    doc["traceEvents"] = events
    return doc


def write(path: Path, doc: dict, gz: bool = False) -> Path:
    data = orjson.dumps(doc, option=orjson.OPT_INDENT_2)
    path.parent.mkdir(parents=True, exist_ok=True)
    if gz:
        path.write_bytes(gzip.compress(data, mtime=0))
    else:
        path.write_bytes(data)
    return path
