"""Benchmark `analyze` against the naive floor (orjson.loads of the files) and HTA, on the same inputs.

    python benchmarks/run.py [--quick] [--repeat N] [--sets NAME,...] [--no-hta] [--out results.json]

Every measurement runs in a fresh subprocess through benchmarks/measure.py (wall, CPU, peak RSS of the
largest process and of the whole process tree). Timings are repeated and the median is reported, because
the machine may be shared. Simulated jobs are written to bench-data/ (git-ignored) by the simulator's scale
mode when it exists, else by benchmarks/gen_traces.py; delete bench-data/ afterwards.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
HTA_PY = Path(os.environ.get("HTA_PYTHON", str(Path.home() / ".venvs/hta/bin/python")))
DATA = ROOT / "bench-data"

CORPUS_SETS = {
    "dlrm-8 (real, 8 ranks)": ROOT / "fixtures/corpus/param-dlrm_kineto",
    "trace_filter-2 (real, 2 ranks)": ROOT / "fixtures/corpus/hta-trace_filter",
    "df_index_resolver (real, 1 rank)": ROOT / "fixtures/corpus/hta-single_rank/df_index_resolver",
}
#: name → (ranks, MB per rank, gzip)
SIM_SETS = {"sim-8x20": (8, 20, False), "sim-8x200": (8, 200, False), "sim-256x20": (256, 20, True)}
QUICK_SIM_SETS = {"sim-8x20": (8, 20, False), "sim-32x5": (32, 5, True)}


def trace_files(folder: Path) -> list[Path]:
    """The trace files of a set (the simulator's expected.json answer key is not a trace)."""
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz"))
                  and p.name != "expected.json")


def inflated_size(p: Path) -> int:
    """Uncompressed size of a trace file (gzip ISIZE trailer; exact below 4 GiB)."""
    if p.name.endswith(".gz"):
        with open(p, "rb") as fh:
            fh.seek(-4, os.SEEK_END)
            return struct.unpack("<I", fh.read(4))[0]
    return p.stat().st_size


def ensure_sim(name: str, spec: tuple[int, int, bool]) -> Path:
    """Write a simulated job once (simulator scale mode if available, else gen_traces.py)."""
    ranks, mb, gz = spec
    out = DATA / name
    if out.exists() and len(trace_files(out)) == ranks:
        return out
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    sim = subprocess.run([PY, "-m", "simulator", "scale", "--ranks", str(ranks), "--mb-per-rank", str(mb),
                          "--out", str(out)], cwd=ROOT, capture_output=True, text=True)
    if sim.returncode != 0 or len(trace_files(out)) != ranks:
        cmd = [PY, str(ROOT / "benchmarks/gen_traces.py"), "--ranks", str(ranks), "--mb-per-rank", str(mb),
               "--out", str(out)] + (["--gzip"] if gz else [])
        subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
        how = "benchmarks/gen_traces.py"
    else:
        how = "simulator scale"
    print(f"  wrote {name} with {how} in {time.perf_counter() - t0:.0f} s", flush=True)
    return out


def measure(cmd: list[str], repeat: int) -> dict:
    """Median wall/CPU and the largest peak RSS over ``repeat`` fresh runs of ``cmd``."""
    runs = []
    for _ in range(repeat):
        out = subprocess.run([PY, str(ROOT / "benchmarks/measure.py"), "--", *cmd], cwd=ROOT,
                             capture_output=True, text=True, check=True)
        r = json.loads(out.stdout)
        if r["rc"] != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({r['rc']}): {r['stderr']}")
        runs.append(r)
    return {
        "wall_s": statistics.median(r["wall_s"] for r in runs),
        "wall_all": [round(r["wall_s"], 2) for r in runs],
        "cpu_s": statistics.median(r["cpu_s"] for r in runs),
        "max_rss_mb": max(r["max_rss_mb"] for r in runs),
        "tree_rss_mb": max(r["tree_rss_mb"] for r in runs),
        "note": runs[-1]["stderr"].strip().splitlines()[-1] if runs[-1]["stderr"].strip() else "",
    }


def hta_available() -> bool:
    if not HTA_PY.exists():
        return False
    return subprocess.run([str(HTA_PY), "-c", "import hta.trace_analysis"], capture_output=True).returncode == 0


def bench_set(name: str, folder: Path, repeat: int, hta: bool, hta_repeat: int) -> dict:
    files = trace_files(folder)
    sizes = [inflated_size(p) for p in files]
    res = {"set": name, "ranks": len(files), "inflated_mb": sum(sizes) / 1e6,
           "largest_rank_mb": max(sizes) / 1e6, "on_disk_mb": sum(p.stat().st_size for p in files) / 1e6}
    print(f"{name}: {len(files)} files, {res['inflated_mb']:.1f} MB inflated", flush=True)
    analyze = [PY, "-m", "analyzer", str(folder), "--format", "json", "-o", os.devnull, "-q"]
    res["analyze_jobs1"] = measure(analyze + ["--jobs", "1"], repeat)
    res["analyze_default"] = measure(analyze, repeat)
    res["orjson_floor"] = measure([PY, str(ROOT / "benchmarks/floor.py"), *map(str, files)], repeat)
    if hta:
        try:
            res["hta"] = measure([str(HTA_PY), str(ROOT / "benchmarks/hta_run.py"), str(folder)], hta_repeat)
        except RuntimeError as exc:
            res["hta_error"] = str(exc)[-300:]
            print(f"  HTA failed: {res['hta_error']}", flush=True)
    a, f = res["analyze_jobs1"], res["orjson_floor"]
    res["ratio_vs_floor"] = a["wall_s"] / f["wall_s"]
    res["rss_per_largest_rank"] = a["max_rss_mb"] / (res["largest_rank_mb"] / 1.048576)
    if "hta" in res:
        res["hta_speedup_jobs1"] = res["hta"]["wall_s"] / a["wall_s"]
        res["hta_speedup_default"] = res["hta"]["wall_s"] / res["analyze_default"]["wall_s"]
    print("  " + summary_line(res), flush=True)
    return res


def summary_line(r: dict) -> str:
    a1, ad, f = r["analyze_jobs1"], r["analyze_default"], r["orjson_floor"]
    s = (f"analyze --jobs 1 {a1['wall_s']:.2f} s ({a1['max_rss_mb']:.0f} MB), default jobs {ad['wall_s']:.2f} s "
         f"(tree {ad['tree_rss_mb']:.0f} MB); orjson floor {f['wall_s']:.2f} s ({f['max_rss_mb']:.0f} MB); "
         f"ratio {r['ratio_vs_floor']:.2f}; RSS/largest rank {r['rss_per_largest_rank']:.2f}")
    if "hta" in r:
        h = r["hta"]
        s += (f"; HTA {h['wall_s']:.1f} s (max {h['max_rss_mb']:.0f} MB, tree {h['tree_rss_mb']:.0f} MB) → "
              f"{r['hta_speedup_jobs1']:.1f}× (jobs 1) / {r['hta_speedup_default']:.1f}× (default)")
    return s


def markdown(results: list[dict]) -> str:
    """The results as the Markdown table of docs/performance.md."""
    out = ["| set | ranks | inflated MB (largest rank) | analyze --jobs 1: s / max RSS MB | analyze, default jobs: "
           "s / tree RSS MB | orjson floor: s / max RSS MB | ratio to floor (jobs 1) | RSS / largest rank "
           "(jobs 1) | HTA: s / max, tree RSS MB | HTA ÷ analyze (jobs 1 / default) |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        a1, ad, f = r["analyze_jobs1"], r["analyze_default"], r["orjson_floor"]
        h = r.get("hta")
        hta = (f"{h['wall_s']:.1f} / {h['max_rss_mb']:.0f}, {h['tree_rss_mb']:.0f}" if h else
               ("failed" if "hta_error" in r else "not run"))
        sp = f"{r['hta_speedup_jobs1']:.1f}× / {r['hta_speedup_default']:.1f}×" if h else "–"
        out.append(f"| {r['set']} | {r['ranks']} | {r['inflated_mb']:.0f} ({r['largest_rank_mb']:.1f}) | "
                   f"{a1['wall_s']:.2f} / {a1['max_rss_mb']:.0f} | {ad['wall_s']:.2f} / {ad['tree_rss_mb']:.0f} | "
                   f"{f['wall_s']:.2f} / {f['max_rss_mb']:.0f} | {r['ratio_vs_floor']:.2f} | "
                   f"{r['rss_per_largest_rank']:.2f} | {hta} | {sp} |")
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small simulated jobs only (minutes, not tens)")
    p.add_argument("--repeat", type=int, default=3, help="runs per measurement; the median is reported")
    p.add_argument("--sets", help="comma-separated set names (default: all)")
    p.add_argument("--no-hta", action="store_true")
    p.add_argument("--repeat-large", type=int, default=2, help="runs per measurement on sets over 1 GB")
    p.add_argument("--hta-max-mb", type=float, default=2000, help="skip HTA on sets larger than this (inflated)")
    p.add_argument("--hta-max-ranks", type=int, default=64, help="skip HTA on sets with more ranks")
    p.add_argument("--out", default=str(DATA / "results.json"))
    p.add_argument("--report", metavar="RESULTS_JSON", help="only print the Markdown table of saved results")
    a = p.parse_args(argv)
    if a.report:
        print(markdown(json.loads(Path(a.report).read_text())["results"]))
        return 0
    hta = not a.no_hta and hta_available()
    if not a.no_hta and not hta:
        print(f"HTA skipped: {HTA_PY} with holistictraceanalysis not found "
              "(python -m venv ~/.venvs/hta && ~/.venvs/hta/bin/pip install holistictraceanalysis==0.5.0; "
              "then HTA_PYTHON=~/.venvs/hta/bin/python)")
    print(f"machine: {os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f} at start", flush=True)
    sets = dict(CORPUS_SETS)
    for name, spec in (QUICK_SIM_SETS if a.quick else SIM_SETS).items():
        if a.sets and name not in a.sets.split(","):
            continue
        sets[name] = ensure_sim(name, spec)
    if a.sets:
        sets = {k: v for k, v in sets.items() if k in a.sets.split(",") or k.split(" ")[0] in a.sets.split(",")}
    results = []
    for name, folder in sets.items():
        files = trace_files(folder)
        mb = sum(inflated_size(f) for f in files) / 1e6
        run_hta = hta and mb <= a.hta_max_mb and len(files) <= a.hta_max_ranks
        if hta and not run_hta:
            print(f"{name}: HTA skipped (over --hta-max-mb {a.hta_max_mb:.0f} or --hta-max-ranks {a.hta_max_ranks})")
        rep = a.repeat_large if mb > 1000 else a.repeat
        results.append(bench_set(name, folder, rep, run_hta, 1 if mb > 200 else rep))
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps({"cores": os.cpu_count(), "load_end": os.getloadavg(),
                                       "results": results}, indent=1))
    print(f"\nresults written to {a.out}")
    for r in results:
        print(f"{r['set']}: {summary_line(r)}")
    print()
    print(markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
