"""Input and trust rules: unreadable, salvaged, duplicate and missing inputs; clocks too far apart to trust."""
from __future__ import annotations

from typing import Iterator

from rules.context import Context
from rules.finding import Evidence, Finding, Subject
from rules.registry import Threshold, rule
from rules.util import num, ranks_text, unsplit_text


def _files(ctx: Context, status: str) -> list[dict]:
    """Input file records with this status."""
    return [f for f in (ctx.report.get("inputs") or {}).get("files") or [] if f.get("status") == status]


@rule("INPUT001", "Input files could not be read", "warning",
      confirm="Each file is listed with the reason (evidence); `analyze FILE` on one of them repeats it.",
      fix="Re-collect the files (the job may have been killed while writing), or remove them from the input.")
def unreadable(ctx: Context) -> Iterator[Finding]:
    """Some input files could not be read at all; the analysis covers the rest.

    Numbers and diagnoses involving the ranks of those files are missing or partial.
    """
    bad = _files(ctx, "failed")
    if bad:
        yield Finding(title=f"{len(bad)} input file(s) could not be read", confidence=1.0,
                      evidence=[Evidence(f"{f.get('path')}: {f.get('message')}", f.get("path"), None)
                                for f in bad[:10]],
                      subject=Subject(ranks=sorted({int(f['rank']) for f in bad if f.get("rank") is not None})))


@rule("INPUT002", "Input files were cut off and salvaged", "info",
      confirm="The file's message says how many bytes/events were recovered; the report's ranks[].cut says "
              "where the trace stopped, which threads it lost and which steps were left out.",
      fix="Nothing to do unless the missing tail matters: let the profiler finish writing (stop the job after "
          "prof.stop() / export_chrome_trace returns).")
def salvaged(ctx: Context) -> Iterator[Finding]:
    """Some traces were truncated (killed mid-write) and only their readable part was analysed.

    A trace is written thread by thread, so the cut loses the rest of the thread it fell in and every
    thread written after it: the step at the cut and the later ones are left out of the metrics, and every
    step when a whole thread was lost (analyzer/load/damage.py); the evidence says which, per rank.
    """
    bad = _files(ctx, "salvaged")
    if not bad:
        return
    ev = [Evidence(f"{f.get('path')}: {f.get('message')}", f.get("path"), None) for f in bad[:10]]
    for r in ctx.report.get("ranks") or []:
        cut = r.get("cut") or {}
        if not cut:
            continue
        by_reason: dict[str, list] = {}
        for x in cut.get("excluded_steps") or []:
            by_reason.setdefault(x["reason"], []).append(x["step"])
        lost = cut.get("lost_steps") or []
        parts = [f"step{'s' if len(v) > 1 else ''} {', '.join(map(str, v))} ({k})" for k, v in by_reason.items()]
        text = f"rank {r.get('rank')}: left out of the metrics: " + "; ".join(parts) if parts else \
            f"rank {r.get('rank')}: no step left out"
        if lost:
            text += f"; step{'s' if len(lost) > 1 else ''} {', '.join(map(str, lost))} of the other ranks lost"
        if cut.get("lost_threads"):
            text += "; its collectives are left out of the cross-rank matching (a whole thread was lost)"
        ev.append(Evidence(text))
    line = unsplit_text(ctx.cross, num(ctx.summary.get("unsplit_share")))
    if line:
        ev.append(Evidence(line))
    yield Finding(title=f"{len(bad)} truncated file(s) were salvaged (partial data)", confidence=1.0,
                  evidence=ev, subject=Subject(ranks=sorted({int(f['rank']) for f in bad if f.get("rank") is not None})))


@rule("INPUT003", "Ranks missing from the inputs", "info",
      confirm="Compare the ranks read (report job.ranks) with the world size the traces declare.",
      fix="Profile (or collect) every rank for cross-rank numbers that cover the whole job; with a subset, "
          "straggler and spread findings describe only the ranks present.")
def missing_inputs(ctx: Context) -> Iterator[Finding]:
    """The traces declare a world larger than the ranks read: cross-rank numbers cover only a subset.

    Informational: profiling a subset of ranks is common. A rank that is missing because it crashed is
    diagnosed by the hang rules.
    """
    job = ctx.report.get("job") or {}
    missing = [int(r) for r in job.get("missing_ranks") or []]
    if missing:
        yield Finding(title=f"Traces of {len(missing)} of {job.get('world_size')} ranks are missing",
                      confidence=1.0, subject=Subject(ranks=missing),
                      evidence=[Evidence(f"read {ranks_text(job.get('ranks') or [])}; missing {ranks_text(missing)}")])


@rule("INPUT004", "Several files claim the same rank", "warning",
      confirm="The skipped files and the file kept for each rank are listed (evidence).",
      fix="Point the tool at one run's folder (traces of two runs mixed?) or rename files so each rank appears "
          "once.")
def duplicate_ranks(ctx: Context) -> Iterator[Finding]:
    """Two traces, or two Flight Recorder dumps, carry the same rank; only one was used (mixed runs in one folder?).
    A dump whose file name gives a rank no other dump claims is read as that rank instead, and listed too."""
    dup = [f for f in _files(ctx, "skipped") + _files(ctx, "read") if "duplicate rank" in str(f.get("message", ""))]
    if dup:
        n_skipped = sum(1 for f in dup if f.get("status") == "skipped")
        title = (f"{n_skipped} file(s) skipped as duplicate ranks" if n_skipped == len(dup) else
                 f"{len(dup)} file(s) claim a rank another file claims ({n_skipped} skipped, "
                 f"{len(dup) - n_skipped} read as the rank their file name gives)")
        yield Finding(title=title, confidence=1.0,
                      evidence=[Evidence(f"{f.get('path')}: {f.get('message')}", f.get("path"), None)
                                for f in dup[:10]],
                      subject=Subject(ranks=sorted({int(f['rank']) for f in dup if f.get("rank") is not None})))


@rule("CLOCK001", "Rank clocks could not be aligned well enough to trust cross-rank timings", "info",
      thresholds=(Threshold("clock_residual_max_us", 100.0, "µs",
                            "report when collective end times still disagree by more than this after alignment"),),
      confirm="The alignment section lists each rank's offset and residual; residuals near or above the waits "
              "being reported make those waits unreliable.",
      fix="Nothing in the job to fix: treat cross-rank waits, arrival order and straggler numbers with the "
          "stated uncertainty, or collect traces with synchronised clocks (NTP/PTP) and more collectives.")
def clock_trust(ctx: Context) -> Iterator[Finding]:
    """Per-rank clocks were not aligned (refused) or their residual is large: cross-rank waits are uncertain.

    Alignment assumes collectives end almost together on every participant; the residual is how far apart
    the aligned end times still are. Informational: it qualifies other findings, it is not a job problem.
    """
    a = ctx.cross.get("alignment") or {}
    status = a.get("status")
    resid = num(a.get("max_residual_us"))
    if status == "refused":
        yield Finding(title="Rank clocks could not be aligned: cross-rank timings are not trustworthy",
                      confidence=0.9, evidence=[Evidence(str(a.get("message") or "alignment refused"))])
    elif status == "ok" and resid is not None and resid > ctx.t("clock_residual_max_us"):
        worst = max(a.get("offsets") or [{}], key=lambda o: num(o.get("residual_us")) or 0)
        yield Finding(title=f"Clock alignment residual {resid:.0f} µs: cross-rank waits below that are uncertain",
                      confidence=0.8, subject=Subject(ranks=[int(worst["rank"])] if worst.get("rank") is not None
                                                      else []),
                      evidence=[Evidence(f"max residual {resid:.0f} µs (rank {worst.get('rank')}), max offset "
                                         f"{num(a.get('max_abs_offset_us')) or 0:.0f} µs")])


@rule("INPUT005", "The inputs hold several jobs; one was analysed", "warning",
      confirm="The report's inputs.jobs lists each job found (label, ranks, world size, start, how it was told "
              "apart); the other jobs' traces are listed as skipped.",
      fix="Point the tool at one run's folder, or choose the job with --job LABEL (or its number).")
def several_jobs(ctx: Context) -> Iterator[Finding]:
    """Traces of different jobs sit under the input paths (two runs in sub-folders, different world sizes, or
    wall-clock windows far apart). Mixing them would match collectives across jobs, so only one is analysed.
    """
    jobs = (ctx.report.get("inputs") or {}).get("jobs") or []
    if len(jobs) < 2:
        return
    sel = next((j for j in jobs if j.get("selected")), jobs[0])
    ev = []
    for i, j in enumerate(jobs, 1):
        bits = [f"{j.get('traces')} trace(s)", ranks_text(j.get('ranks') or [])]
        if j.get("world_size"):
            bits.append(f"world size {j['world_size']}")
        if j.get("start"):
            bits.append(f"started {j['start']}")
        mark = " (analysed)" if j is sel else ""
        ev.append(Evidence(f"job {i}: {j.get('label')}{mark}: " + ", ".join(bits), j.get("folder"), None))
    told = sorted({w for j in jobs for w in j.get("told_by") or []})
    ev.append(Evidence(f"told apart by {', '.join(told)}; choose another with --job LABEL or --job NUMBER"))
    yield Finding(title=f"The inputs hold {len(jobs)} jobs; only {sel.get('label')} was analysed", confidence=0.9,
                  evidence=ev)


#: Process-group backends that run their collectives on an accelerator (NCCL/RCCL on GPUs, XCCL on Intel
#: GPUs, HCCL on Ascend NPUs).
_DEVICE_BACKENDS = ("nccl", "rccl", "xccl", "hccl")


@rule("INPUT006", "GPU job traced without its GPU activity", "warning",
      explains=("COMM001", "COMM002"),  # their numbers are the CPU side's (launches, gloo-like spans), not the job's
      confirm="The trace's header says `distributedInfo.backend: nccl` (or lists GPUs in `deviceProperties`) but "
              "it holds no kernel, memcpy, memset or CUDA runtime event: the profiler recorded the CPU only.",
      fix="Profile the GPU too: torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], "
          "…) (or leave `activities` unset); check that CUPTI is available in the container (libcupti on the "
          "library path, not disabled by the driver / NVreg_RestrictProfilingToAdminUsers).")
def gpu_not_recorded(ctx: Context) -> Iterator[Finding]:
    """The job ran on GPUs but its traces hold only CPU events: the GPU side was not recorded.

    Detected per rank from the header: a collective backend that runs on the accelerator (nccl, rccl, xccl,
    hccl; warning) or GPUs in `deviceProperties` with another backend (info: a CPU job on a GPU host looks
    the same), and no GPU event at all. Compute, communication, overlap and idle are then measured on CPU
    operators (their launch cost, not the kernels' time), so no GPU-side number in the report describes the
    job; cross-rank order and counts of collectives still hold.
    """
    rows = [r for r in ctx.report.get("ranks") or [] if r.get("device_type") == "cpu"]
    nccl = [r for r in rows if any(b in str(r.get("backend") or "").lower() for b in _DEVICE_BACKENDS)]
    gpus = [r for r in rows if r.get("gpu")]
    hit = nccl or gpus
    if not hit:
        return
    first = hit[0]
    said = [f"backend {first.get('backend')}"] + ([f"GPU {first.get('gpu')}"] if first.get("gpu") else [])
    ev = [Evidence(f"{ranks_text([int(r['rank']) for r in hit])}: {', '.join(said)} in the header, but no GPU "
                   "event (kernel, memcpy, memset, CUDA runtime) in the trace", first.get("file"), None),
          Evidence("the metrics below are CPU-side: compute is CPU operator time, communication and overlap "
                   "cover only what the CPU recorded")]
    yield Finding(title=f"The GPU side was not recorded: {ranks_text([int(r['rank']) for r in hit])} of a "
                        f"{'GPU (' + str(first.get('backend')) + ')' if nccl else 'GPU host'} job traced "
                        "without GPU activity",
                  severity="warning" if nccl else "info", confidence=0.95 if nccl else 0.5,
                  evidence=ev, subject=Subject(ranks=sorted(int(r["rank"]) for r in hit)))
