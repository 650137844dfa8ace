"""Scaling with ranks: time and parent / worker peak memory of the pool and of Dask, and the fitted growth.

    python benchmarks/scale.py [--sizes 64,256,1024,4096] [--mb 2] [--jobs 2] [--engines pool,dask]
                               [--outputs json] [--sim] [--steps 40] [--out results.json]

``--outputs json,html,timeline`` measures each output on its own (one fresh process per size, engine and output:
the report written as ``analyze --format json -o r.json``, ``--format html -o r.html`` or ``--timeline t.json.gz``
write it) and prints the parent's peak per extra rank for each. ``--sim`` takes the job from the simulator's own
``python -m simulator scale`` (bench-data/sim-<ranks>x<mb>/) instead of benchmarks/gen_traces.py; ``--steps N``
takes it with N steps in every rank (bench-data/sim-<ranks>xNsteps/) whatever the ranks' size, so the work per
rank is held constant across sizes, and prints the growth per extra rank-step as well.

Each size is a simulated job written once by benchmarks/gen_traces.py to bench-data/scale-<ranks>x<mb>/
(git-ignored; delete it afterwards). Each run is a fresh child process that analyses the job and renders the
JSON report as `--output` writes it; it reports its own peak RSS (the parent: what holds every rank's compact results and the
cross-rank stage), its RSS once the report is written with the analysis still open ("kept": what a notebook
holds), and the largest child's (a pool or Dask worker; Dask's scheduler runs in the parent). The
growth per extra rank is a least-squares line through the sizes, printed with the extrapolation to 4096 and
16,384 ranks (docs/performance.md, "Past one machine").
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "bench-data"


def ensure_job(ranks: int, mb: float, jobs: int) -> Path:
    """The simulated job of ``ranks`` × ``mb`` MB (written once)."""
    out = DATA / f"scale-{ranks}x{mb:g}"
    if out.exists() and len(list(out.glob("rank*.pt.trace.json"))) == ranks:
        return out
    t0 = time.perf_counter()
    subprocess.run([sys.executable, str(ROOT / "benchmarks/gen_traces.py"), "--ranks", str(ranks),
                    "--mb-per-rank", str(mb), "--out", str(out), "--jobs", str(jobs)], check=True,
                   stdout=subprocess.DEVNULL)
    print(f"  (wrote {out.name} in {time.perf_counter() - t0:.0f} s)", flush=True)
    return out


def ensure_sim_job(ranks: int, mb: float, steps: int | None = None) -> Path:
    """The simulator's own scale job of ``ranks`` × ``mb`` MB, or of ``ranks`` × ``steps`` steps
    (``python -m simulator scale``; written once)."""
    out = DATA / (f"sim-{ranks}x{mb:g}" if steps is None else f"sim-{ranks}x{steps}steps")
    if out.exists() and len(list(out.glob("rank*.pt.trace.json*"))) == ranks:
        return out
    t0 = time.perf_counter()
    size = ["--mb-per-rank", str(mb)] if steps is None else ["--steps", str(steps)]
    subprocess.run([sys.executable, "-m", "simulator", "scale", "--ranks", str(ranks), *size,
                    "--out", str(out)], check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    print(f"  (wrote {out.name} in {time.perf_counter() - t0:.0f} s)", flush=True)
    return out


def write_output(a, output: str) -> int:
    """Write one output the way the command line does (to a scratch file); the bytes written."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        if output == "json":  # `analyze --format json --output r.json`: bytes straight to the file
            from analyzer.render.json_out import write_json
            with open(os.path.join(tmp, "r.json"), "wb") as fh:
                return write_json(a.report, fh)
        if output == "timeline":  # `analyze --timeline t.json.gz`
            from analyzer.render.timeline import DEFAULT_MAX_EVENTS, write_timeline
            path = os.path.join(tmp, "t.json.gz")
            write_timeline(path, a.report, a.timeline_source(), DEFAULT_MAX_EVENTS)  # streamed, as the CLI does
            return os.path.getsize(path)
        if output == "html":  # `analyze --format html --output r.html`: written a piece at a time
            from analyzer.render.html import write_html
            with open(os.path.join(tmp, "r.html"), "w", encoding="utf-8") as fh:
                write_html(a.report, a.job, fh)
            return os.path.getsize(os.path.join(tmp, "r.html"))
        from analyzer.render.sanitize import guard_ci_lines  # `analyze --format FMT --output r.FMT`
        text = guard_ci_lines(a.render(output))
        with open(os.path.join(tmp, "r." + output), "w", encoding="utf-8") as fh:
            fh.write(text)
        return len(text.encode())


def child(folder: str, engine: str, jobs: int, output: str = "json") -> int:
    """One measured run (in a fresh process): analyse, write one output, print the numbers as one JSON line."""
    import resource
    t0 = time.perf_counter()
    import analyzer
    import analyzer.render.json_out  # noqa: F401  (imported before the baseline, as the CLI does)
    imported = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t1 = time.perf_counter()
    a = analyzer.load(folder, jobs=jobs, dask="local" if engine == "dask" else None)
    n_bytes = write_output(a, output)
    t2 = time.perf_counter()
    kept = _kept_mb()  # what the analysis keeps once the report is written (a notebook holds this)
    a.close()
    print(json.dumps({
        "output": output, "ranks": len(a.job.traces), "wall_s": t2 - t0, "analyse_s": t2 - t1, "report_bytes": n_bytes,
        "parent_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "parent_after_import_mb": imported, "parent_kept_mb": kept,
        "worker_peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
    return 0


def _kept_mb() -> float:
    """The parent's resident memory now, after a garbage collection and handing freed heap back to the OS
    (glibc's malloc_trim; without it freed memory stays resident and the number says little)."""
    import ctypes
    import gc
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def measure(folder: Path, engine: str, jobs: int, output: str = "json") -> dict:
    p = subprocess.run([sys.executable, __file__, "--child", str(folder), engine, str(jobs), output], cwd=ROOT,
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if p.returncode != 0:
        raise SystemExit(f"{engine} on {folder} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def fit(xs: list[int], ys: list[float]) -> tuple[float, float]:
    """Least-squares (slope, intercept) of ys over xs."""
    if len(xs) < 2:
        return float("nan"), float(ys[0]) if ys else float("nan")
    slope, icpt = np.polyfit(np.asarray(xs, float), np.asarray(ys, float), 1)
    return float(slope), float(icpt)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="64,256,1024,4096")
    p.add_argument("--mb", type=float, default=2.0, help="MB per rank")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--engines", default="pool,dask")
    p.add_argument("--outputs", default="json",
                   help="comma-separated outputs, each measured in its own run: json, html, timeline (or another "
                        "--format)")
    p.add_argument("--sim", action="store_true", help="the job from `python -m simulator scale`")
    p.add_argument("--steps", type=int, help="with --sim: this many steps in every rank (instead of --mb per rank), "
                                              "so the work per rank is the same at every size")
    p.add_argument("--out", help="also write the rows as JSON here")
    p.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        return child(a.child[0], a.child[1], int(a.child[2]), *(a.child[3:4] or ["json"]))
    sizes = [int(s) for s in a.sizes.split(",")]
    engines = a.engines.split(",")
    outputs = a.outputs.split(",")
    rows = []
    print(f"{'engine':6} {'output':8} {'ranks':>6} {'wall s':>8} {'s/rank':>7} {'parent MB':>10} {'kept MB':>8} "
          f"{'worker MB':>10}", flush=True)
    for n in sizes:
        folder = ensure_sim_job(n, a.mb, a.steps) if a.sim or a.steps else ensure_job(n, a.mb, a.jobs)
        for eng in engines:
            for out in outputs:
                r = {"engine": eng, "mb_per_rank": a.mb, "steps_per_rank": a.steps, "jobs": a.jobs,
                     **measure(folder, eng, a.jobs, out)}
                rows.append(r)
                print(f"{eng:6} {out:8} {n:>6} {r['wall_s']:>8.1f} {r['wall_s'] / n:>7.3f} "
                      f"{r['parent_peak_mb']:>10.1f} {r.get('parent_kept_mb', float('nan')):>8.0f} "
                      f"{r['worker_peak_mb']:>10.0f}", flush=True)
    print()
    for eng, out in ((e, o) for e in engines for o in outputs):
        rs = [r for r in rows if r["engine"] == eng and r["output"] == out]
        xs = [r["ranks"] for r in rs]
        mem, icpt = fit(xs, [r["parent_peak_mb"] for r in rs])
        sec, sec0 = fit(xs, [r["wall_s"] for r in rs])
        per = f"{a.mb:g} MB rank" if not a.steps else (f"rank of {a.steps} steps = {mem * 1024 / a.steps:.3f} KB "
                                                         f"per extra rank-step")
        print(f"{eng} {out}: parent peak {icpt:.0f} MB + {mem:.4f} MB per extra {per} "
              f"(4096 ranks: {icpt + 4096 * mem:.0f} MB; 16384: {icpt + 16384 * mem:.0f} MB); "
              f"time {sec0:.1f} s + {sec:.3f} s per rank with {a.jobs} workers; worker peak "
              f"{max(r['worker_peak_mb'] for r in rs):.0f} MB")
    if "pool" in engines and "dask" in engines:
        for n in sizes:
            pr = [r for r in rows if r["ranks"] == n and r["engine"] == "pool" and r["output"] == outputs[0]]
            dr = [r for r in rows if r["ranks"] == n and r["engine"] == "dask" and r["output"] == outputs[0]]
            if pr and dr:
                print(f"{n} ranks: Dask / pool time {dr[0]['wall_s'] / pr[0]['wall_s']:.2f}, parent memory "
                      f"{dr[0]['parent_peak_mb'] / pr[0]['parent_peak_mb']:.2f}")
    if a.out:
        Path(a.out).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
