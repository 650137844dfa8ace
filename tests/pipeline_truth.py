"""Independent pipeline-bubble measurement straight from trace JSON (stdlib only, none of the project's parsers),
to cross-check analyzer/cross_rank/pipeline.py: per step k, W(k) = stage 0's first-to-last work, and each
stage's bubble = 1 − |∪ its work in its own step k| / |W(k)| (docs/metrics.md, "Pipeline bubble").

Work: CPU traces — `cpu_op` events on the thread holding `ProfilerStep#`, except `c10d::*` / `gloo:*` / `nccl:*`
names, and except those inside an `Optimizer.*` annotation; GPU traces — `kernel` events except send/recv ones
(`Collective name` send / recv), assigned to a step by the start of the runtime call that launched them."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

COMM_PREFIXES = ("c10d::", "gloo:", "nccl:")


def _union_length(iv: list[tuple[float, float]]) -> tuple[float, float, float]:
    """(covered length, first start, last end) of a list of intervals."""
    iv = sorted(iv)
    total, cur_s, cur_e = 0.0, None, None
    for s, e in iv:
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total, iv[0][0], max(e for _, e in iv)


def _events(path: Path) -> list[dict]:
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)
    return [e for e in doc["traceEvents"] if e.get("ph") == "X"]


def work_per_step(path: Path) -> dict[int, tuple[float, float, float]]:
    """Step number -> (|∪ work| µs, first start, last end) of one rank's trace."""
    ev = _events(path)
    steps = {int(e["name"].split("#")[1]): (e["ts"], e["ts"] + e["dur"]) for e in ev
             if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("cat") == "user_annotation"}
    gpu = any(e.get("cat") == "kernel" for e in ev)
    items = []  # (key time, start, end)
    if gpu:
        launch = {e["args"]["correlation"]: e["ts"] for e in ev if e.get("cat") == "cuda_runtime"
                  and "correlation" in e.get("args", {})}
        for e in ev:
            if e.get("cat") != "kernel" or e.get("args", {}).get("Collective name") in ("send", "recv"):
                continue
            items.append((launch.get(e["args"].get("correlation"), e["ts"]), e["ts"], e["ts"] + e["dur"]))
    else:
        tid = next(e["tid"] for e in ev if str(e.get("name", "")).startswith("ProfilerStep#"))
        opt = [(e["ts"], e["ts"] + e["dur"]) for e in ev if str(e.get("name", "")).startswith("Optimizer.")]
        for e in ev:
            if e.get("cat") != "cpu_op" or e["tid"] != tid or str(e["name"]).startswith(COMM_PREFIXES):
                continue
            if any(a <= e["ts"] < b for a, b in opt):
                continue
            items.append((e["ts"], e["ts"], e["ts"] + e["dur"]))
    out = {}
    for k, (a, b) in steps.items():
        iv = [(s, e) for t, s, e in items if a <= t < b]
        if iv:
            out[k] = _union_length(iv)
    return out


def bubbles(folder: Path, pipelines: list[list[int]]) -> dict[tuple[int, int], float]:
    """(rank, step) -> bubble for pipelines given as rank lists in stage order."""
    per = {r: work_per_step(next(folder.glob(f"rank{r}.pt.trace.json*"))) for pipe in pipelines for r in pipe}
    out = {}
    for pipe in pipelines:
        for k, (_, lo, hi) in per[pipe[0]].items():
            for r in pipe:
                if k in per[r]:
                    out[(r, k)] = max(0.0, 1.0 - per[r][k][0] / (hi - lo))
    return out
