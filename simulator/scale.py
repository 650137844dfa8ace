"""Scale mode: hundreds of ranks, tens to hundreds of MB per rank, streamed so memory stays small.

One step of a DDP job is simulated for every rank; the writer then repeats that step, shifted by the job's step
period, until a rank's uncompressed JSON reaches the requested size. Every repetition is a real ProfilerStep with
fresh correlation ids, so the per-step truth is the simulated step's truth shifted in time.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import orjson

from simulator.job import Job, dump_expected
from simulator import truth
from simulator.write_kineto import KinetoWriter


def _shift(ev: dict, k: int, dt_us_ns: int, id_step: int) -> dict:
    e = dict(ev)
    if "ts" in e and e.get("ph") != "M":
        e["ts"] = (round(e["ts"] * 1000) + k * dt_us_ns) / 1000
    if "id" in e:
        e["id"] = e["id"] + k * id_step
    a = e.get("args")
    if a and ("correlation" in a or "External id" in a):
        a = dict(a)
        for key in ("correlation", "External id"):
            if key in a:
                a[key] = a[key] + k * id_step
        e["args"] = a
    if e.get("name", "").startswith("ProfilerStep#"):
        e["name"] = f"ProfilerStep#{int(e['name'][13:]) + k}"
    return e


def write_scale(ranks: int, mb_per_rank: float, out: Path, gpus_per_host: int = 8, seed: int = 0,
                steps: int | None = None) -> None:
    """Write `ranks` gzip traces of about `mb_per_rank` MB (uncompressed JSON) each, plus expected.json; with
    ``steps``, every rank holds exactly that many steps instead (whatever their size), so that a benchmark over
    the number of ranks holds the work per rank constant (a rank's step grows a little with the world size)."""
    if steps is not None and steps < 1:
        raise ValueError(f"--steps {steps} must be at least 1")
    if ranks % gpus_per_host:
        raise ValueError(f"--ranks {ranks} must be a multiple of --gpus-per-host {gpus_per_host}")
    out.mkdir(parents=True, exist_ok=True)
    cfg = {"name": f"scale_{ranks}", "seed": seed, "hosts": ranks // gpus_per_host, "gpus_per_host": gpus_per_host,
           "steps": 1, "model": {"layers": 8}, "schedule": {"kind": "ddp", "bucket_mb": 16}, "nccl": {"log": "none"}}
    job = Job(cfg)
    period = max(s.steps[0][2] for s in job.eng.st) - min(s.steps[0][1] for s in job.eng.st) + 1_000_000
    rows = truth.step_metrics(job.eng, job.local)
    target = int(mb_per_rank * 1e6)
    reps = 1
    for r in range(ranks):
        w = KinetoWriter(job, r)
        head = json.dumps(w.header())[:-1].encode()
        meta, body = [], []
        for ev in w.events():
            (meta if ev.get("ph") == "M" else body).append(ev)
        step_bytes = sum(len(orjson.dumps(e)) + 2 for e in body)
        reps = steps if steps is not None else max(1, -(-(target - len(head)) // step_bytes))
        with open(out / f"rank{r}.pt.trace.json.gz", "wb") as raw, \
                gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="", compresslevel=1) as gz:
            gz.write(head + b', "traceEvents": [\n')
            gz.write(b",\n".join(orjson.dumps(e) for e in meta))
            for k in range(reps):
                gz.write(b",\n" + b",\n".join(orjson.dumps(_shift(e, k, period, 10_000_000)) for e in body))
            gz.write(b"\n]}\n")
    exp = {"scenario": cfg["name"], "world_size": ranks, "steps_per_rank": reps, "step_period_ns": period,
           "clock_offsets_ns": {str(r): job.offset(r) for r in range(ranks)},
           "note": "step k of a rank = the first step shifted by k * step_period_ns; metrics are identical",
           "rank_step_metrics": rows}
    (out / "expected.json").write_text(dump_expected(exp))
