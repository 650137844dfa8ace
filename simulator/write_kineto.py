"""Per-rank Kineto (PyTorch profiler) trace JSON, gzip, in the modern or the older format."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

from simulator.cost import DTYPE_BYTES
from simulator.names import KINETO_COLL, KINETO_DTYPE, kernel_name


def _ts(ns: int, old: bool):
    return ns // 1000 if old else ns / 1000


class KinetoWriter:
    """Streams one rank's events to `rank<r>.pt.trace.json.gz`, byte-for-byte deterministic."""

    def __init__(self, job, rank: int):
        self.job, self.rank = job, rank
        self.old = job.cfg["trace"]["format"] == "old"

    def header(self) -> dict:
        job, r = self.job, self.rank
        cfg = job.cfg
        props = [{"id": i, "name": cfg["gpu_name"], "totalGlobalMem": 85031714816, "computeMajor": 9,
                  "computeMinor": 0, "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,
                  "regsPerBlock": 65536, "warpSize": 32, "sharedMemPerBlock": 49152, "numSms": 132,
                  "regsPerMultiprocessor": 65536, "sharedMemPerBlockOptin": 232448,
                  "sharedMemPerMultiprocessor": 233472} for i in range(cfg["gpus_per_host"])]
        groups = job.topo.groups_of(r)
        dist = {"backend": "nccl", "rank": r, "world_size": job.topo.world}
        if not self.old:
            dist["pg_count"] = len(groups)
            dist["pg_config"] = [{"pg_name": g.name, "pg_desc": g.desc, "backend_config": "cuda:nccl",
                                  "pg_size": len(g.ranks), "ranks": g.ranks} for g in groups]
            dist["nccl_version"] = cfg["nccl"]["version"]
        head = {"schemaVersion": 1, "deviceProperties": props, "distributedInfo": dist,
                "record_shapes": 0, "with_stack": 0, "profile_memory": 1 if cfg["trace"].get("memory") else 0,
                "traceName": f"/workspace/traces/rank{r}.pt.trace.json", "displayTimeUnit": "ms"}
        if not self.old:
            head["baseTimeNanoseconds"] = str(job.base_ns[r])
            head["host_name"] = job.hostname(r)
            head["cupti_version"] = 24
            head["cuda_runtime_version"] = 12040
            head["cuda_driver_version"] = 12040
        else:
            head["host_name"] = job.hostname(r)
        return head

    def events(self):
        """Yield event dicts in time order per track (metadata first)."""
        job, r, old = self.job, self.rank, self.old
        dev, pid, tid = job.topo.local(r), job.pids[r], job.pids[r]
        st = job.eng.st[r]
        rel = (lambda t: job.local(r, t) // 1000) if old else (lambda t: (job.local(r, t) - job.base_ns[r]) / 1000)
        t0 = rel(min([x[1] for x in st.kernels] + [x[2] for x in st.cpu_spans] + [st.steps[0][1]]))
        yield {"name": "process_name", "ph": "M", "ts": t0, "pid": pid, "tid": 0, "args": {"name": "python3.11"}}
        yield {"name": "process_labels", "ph": "M", "ts": t0, "pid": pid, "tid": 0, "args": {"labels": "CPU"}}
        yield {"name": "process_name", "ph": "M", "ts": t0, "pid": dev, "tid": 0, "args": {"name": "python3.11"}}
        yield {"name": "process_labels", "ph": "M", "ts": t0, "pid": dev, "tid": 0, "args": {"labels": f"GPU {dev}"}}
        yield {"name": "process_sort_index", "ph": "M", "ts": t0, "pid": dev, "tid": 0,
               "args": {"sort_index": 16777216 + dev}}
        streams = sorted({k[3] for k in st.kernels})
        for s_ in streams:
            yield {"name": "thread_name", "ph": "M", "ts": t0, "pid": dev, "tid": s_, "args": {"name": f"stream {s_} "}}
        yield {"name": "thread_name", "ph": "M", "ts": t0, "pid": pid, "tid": tid,
               "args": {"name": f"thread {tid} (pt_main_thread)"}}
        ext = 1
        for step, ws, we in st.steps:
            yield {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": pid, "tid": tid,
                   "ts": rel(ws), "dur": _ts(we - ws, old), "args": {"External id": ext, "Record function id": 0}}
            ext += 1
        if job.cfg["trace"].get("memory"):
            from simulator.memory import memory_events
            yield from memory_events(job, r, st.steps, rel, pid, tid, dev)
        comm_spans = iter([c for c in st.cpu_spans if c[1] == "record_param_comms"])
        for cat, name, a, b in st.cpu_spans:
            if name == "record_param_comms":
                continue
            ev = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": rel(a), "dur": _ts(b - a, old),
                  "args": {"External id": ext}}
            if cat == "cuda_runtime":
                ev["args"].update({"cbid": 165, "correlation": 900000 + ext})
            yield ev
            ext += 1
        corr = 1000 + r
        launch_dur = job.eng.launch_dur
        for kind, start, end, stream, name, launch, info in st.kernels:
            corr += 2
            ext += 1
            args = {"External id": ext, "device": dev, "context": 1, "stream": stream, "correlation": corr}
            if kind == "comm":
                c = name
                end = end.end
                es = DTYPE_BYTES[c.dtype]
                kname = kernel_name(c.op, c.dtype, max(c.in_n, c.out_n) * es, old)
                g = job.pg[c.pg]
                comm_args = {"Collective name": KINETO_COLL[c.op], "In msg nelems": c.in_n,
                             "Out msg nelems": c.out_n, "Group size": len(g.ranks), "dtype": KINETO_DTYPE[c.dtype],
                             "In split size": "[]", "Out split size": "[]", "Process Group Name": g.name,
                             "Process Group Description": g.desc,
                             "Process Group Ranks": "[" + ", ".join(map(str, g.ranks)) + "]"}
                cs, ce = next(comm_spans)[2:]
                cpu_args = {"External id": ext, "Record function id": 0}
                if not old:
                    cpu_args.update(comm_args)
                    stride = g.ranks[1] - g.ranks[0] if len(g.ranks) > 1 else 1
                    cpu_args.update({"Global rank start": g.ranks[0], "Global rank stride": stride})
                yield {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": pid, "tid": tid,
                       "ts": rel(cs), "dur": _ts(ce - cs, old), "args": cpu_args}
                args.update({"registers per thread": 96, "shared memory": 0, "grid": [16, 1, 1], "block": [640, 1, 1]})
                if not old:
                    args.update(comm_args)
                rt = "cudaLaunchKernelExC" if not old else "cudaLaunchKernel"
                cat = "kernel"
            elif kind == "memcpy":
                kname = name
                args.update({"bytes": info, "memory bandwidth (GB/s)": round(info / max(1, end - start), 6)})
                rt = "cudaMemcpyAsync"
                cat = "gpu_memcpy"
            else:
                kname = name
                args.update({"registers per thread": 128, "shared memory": 49152, "grid": [132, 1, 1],
                             "block": [256, 1, 1]})
                rt = "cudaLaunchKernel"
                cat = "kernel"
            yield {"ph": "X", "cat": "cuda_runtime", "name": rt, "pid": pid, "tid": tid, "ts": rel(launch),
                   "dur": _ts(launch_dur, old), "args": {"External id": ext, "cbid": 211, "correlation": corr}}
            if not old:
                yield {"ph": "s", "id": corr, "pid": pid, "tid": tid, "ts": rel(launch), "cat": "ac2g", "name": "ac2g"}
                yield {"ph": "f", "id": corr, "pid": dev, "tid": stream, "ts": rel(start), "cat": "ac2g",
                       "name": "ac2g", "bp": "e"}
            yield {"ph": "X", "cat": cat, "name": kname, "pid": dev, "tid": stream, "ts": rel(start),
                   "dur": _ts(end - start, old), "args": args}

    def write(self, path: Path) -> None:
        head = self.header()
        body = json.dumps(head)[:-1]
        with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as gz:
            gz.write(body.encode())
            gz.write(b', "traceEvents": [\n')
            first = True
            for ev in self.events():
                gz.write((b"" if first else b",\n") + json.dumps(ev).encode())
                first = False
            gz.write(b"\n]}\n")
