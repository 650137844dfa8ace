"""What a report describes: the inputs, the job (as far as the inputs tell), when and with which analyzer.

A report attached to a ticket must say which job it is. This module gathers only what the inputs state — the
traces' ``distributedInfo``, host names, GPU names and ``baseTimeNanoseconds``, the NCCL logs' host:pid and
version banners, the Flight Recorder dumps' format version and ``pg_config``, the torchrun log-dir layout's run id
— and leaves out what they do not (nothing is guessed). ``analysed_at`` is the time of the analysis, or
``SOURCE_DATE_EPOCH`` when set (reproducible output: the convention of reproducible-builds.org). Docs:
docs/json-schema.md, "about".
"""
from __future__ import annotations

import os
import re
import time
from collections import Counter
from datetime import datetime, timezone
from typing import Any, Iterable, Optional

from analyzer import __version__
from parsers.kineto_values import base_time_ns

#: Timestamps at or past this (2001-09-09 in ns since the epoch) are wall-clock; smaller ones are boot-relative.
EPOCH_NS = 10**18
#: Host names listed in full at most; more are counted.
MAX_HOSTS_LISTED = 8
#: torchrun's log-dir layout: <log_dir>/<run_id>_<8 random chars>/attempt_<n>/<local_rank>/{stdout,stderr}.log
_RUN_DIR = re.compile(r"(?:^|[/\\])([A-Za-z0-9][A-Za-z0-9._-]{0,63})_[a-z0-9_]{8}[/\\]attempt_\d{1,6}[/\\]")
_ISO = "%Y-%m-%dT%H:%M:%SZ"


def iso_utc(seconds: float) -> str:
    """'2026-12-02T00:47:15Z' for seconds since the epoch."""
    return datetime.fromtimestamp(seconds, tz=timezone.utc).strftime(_ISO)


def analysis_time(env: Optional[dict] = None) -> str:
    """Now, or SOURCE_DATE_EPOCH (whole seconds since the epoch) when it is set and valid, as ISO-8601 UTC."""
    env = os.environ if env is None else env
    raw = str(env.get("SOURCE_DATE_EPOCH", "") or "").strip()
    if raw.isdigit():
        return iso_utc(int(raw))
    return iso_utc(time.time())


def _one(values: Iterable[Any]) -> Optional[str]:
    """The most common non-empty text among ``values`` (None when there is none)."""
    c = Counter(str(v).strip() for v in values if v not in (None, "") and str(v).strip())
    return c.most_common(1)[0][0] if c else None


def _all(values: Iterable[Any]) -> list[str]:
    return sorted({str(v).strip() for v in values if v not in (None, "") and str(v).strip()})


def _run_id(paths: Iterable[str]) -> Optional[str]:
    """torchrun's run id from the log-dir layout of the files read ('none', the static default, is no id)."""
    ids = []
    for p in paths:
        m = _RUN_DIR.search(p)
        if m and m.group(1) != "none":
            ids.append(m.group(1))
    return _one(ids)


def _collected(job: Any) -> tuple[Optional[str], Optional[str]]:
    """(ISO-8601 UTC time of the earliest recorded event, what says so) from wall-clock trace times."""
    starts = []
    for t in job.traces.values():
        base = base_time_ns((t.meta or {}).get("base_time_ns"))  # None when absent or out of range
        start = t.activity_start
        if start is not None and int(start) >= EPOCH_NS:  # the trace's own times are epoch ns
            starts.append(int(start))
        elif base is not None and base >= EPOCH_NS:
            starts.append(base)
    if not starts:
        return None, None
    return iso_utc(min(starts) / 1e9), "the profiler traces' wall-clock timestamps"


def about_section(job: Any, paths: list[str], label: Optional[str] = None,
                  env: Optional[dict] = None) -> dict:
    """The report's ``about`` block (docs/json-schema.md): keys the inputs do not tell are absent."""
    traces = list(job.traces.values())
    metas = [t.meta or {} for t in traces]
    logs = list(getattr(job, "nccl_logs", []) or [])
    dumps = list(getattr(job, "fr_dumps", []) or [])
    stderr_logs = list(getattr(job, "stderr_logs", []) or [])
    procs = [lg.processes for lg in logs if getattr(lg, "processes", None) is not None and len(lg.processes)]

    hosts = _all(m.get("host") for m in metas)
    if not hosts:
        hosts = _all(h for p in procs for h in p["host"])
    nccl = _one([m.get("nccl_version") for m in metas]
                + [v for p in procs if "version" in p for v in p["version"]]
                + [getattr(d, "comm_lib_version", "") for d in dumps]
                + [v for lg in stderr_logs if len(lg.events) and "nccl_version" in lg.events
                   for v in lg.events["nccl_version"]]
                + [r.nccl_version for r in getattr(job, "ras_reports", []) or []])
    collected, collected_from = _collected(job)
    job_info: dict[str, Any] = {}
    if label:
        job_info["label"] = label
    run_id = _run_id([f.path for f in job.files])
    if run_id:
        job_info["run_id"] = run_id
    backend = _one(m.get("backend") for m in metas) or _one(getattr(d, "backend", "") for d in dumps)
    if backend:
        job_info["backend"] = backend
    if job.world_size:
        job_info["world_size"] = int(job.world_size)
        if getattr(job, "world_size_source", ""):
            job_info["world_size_source"] = str(job.world_size_source)
    if traces:
        job_info["ranks_traced"] = len(traces)
    if hosts:
        job_info["hosts"] = len(hosts)
        job_info["host_names"] = hosts[:MAX_HOSTS_LISTED]
    if procs:
        job_info["nccl_processes"] = int(sum(len(p) for p in procs))  # host:pid pairs seen in the NCCL logs
    if dumps:
        job_info["flight_recorder_dumps"] = len(dumps)
        groups = _dump_groups(dumps)
        if groups:
            job_info["process_groups"] = len(groups)
    if collected:
        job_info["collected_at"] = collected
        job_info["collected_from"] = collected_from
    software: dict[str, str] = {}
    if nccl:
        software["nccl"] = nccl
    frv = _one(getattr(d, "version", "") for d in dumps)
    if frv:
        software["flight_recorder"] = frv
    gpu = _one(m.get("gpu_name") for m in metas)
    hardware: dict[str, Any] = {}
    if gpu:
        hardware["gpu"] = gpu
    dev = _one(m.get("device_type") for m in metas)
    if dev:
        hardware["device_type"] = dev
    out: dict[str, Any] = {"inputs": [os.fspath(p) for p in paths]}
    out["job"] = job_info
    if software:
        out["software"] = software
    if hardware:
        out["hardware"] = hardware
    out["analysed_at"] = analysis_time(env)
    out["analyzer"] = {"name": "analyze", "version": __version__}
    return out


def _dump_groups(dumps: list) -> set[str]:
    """The process groups the Flight Recorder dumps know of, from every source: pg_config's keys and the groups
    their entries were recorded in (gloo's pg_config lists only the world, as '', while its entries name every
    group: '' is then the world group "0")."""
    names = {str(k) for d in dumps for k in (getattr(d, "pg_config", None) or {})}
    for d in dumps:
        e = getattr(d, "entries", None)
        if e is not None and len(e) and "pg_name" in e.columns:
            names |= {str(x) for x in e["pg_name"]}
    if "" in names and len(names) > 1:
        names.discard("")
    return names
