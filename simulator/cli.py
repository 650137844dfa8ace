"""Command line: `run` one scenario, `regenerate` the committed library, `scale` a big benchmark job."""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from simulator.config import load_scenario
from simulator.job import Job, write_job

SCENARIO_FILES = ("scenario.json", "scenario.toml")


def scenario_file(folder: Path) -> Path | None:
    for n in SCENARIO_FILES:
        if (folder / n).is_file():
            return folder / n
    return None


def run_scenario(path: Path, out: Path) -> dict:
    """Simulate one scenario file and write its artefacts into `out` (old generated files removed first)."""
    cfg = load_scenario(path)
    if out.exists():
        for p in out.iterdir():
            if p.name not in SCENARIO_FILES and p.is_file():
                p.unlink()
    return write_job(Job(cfg), out)


def regenerate(root: Path) -> int:
    """Re-run every `<root>/<scenario>/scenario.{json,toml}` in place."""
    n = 0
    for d in sorted(p for p in root.iterdir() if p.is_dir()):
        f = scenario_file(d)
        if f is None:
            continue
        run_scenario(f, d)
        n += 1
        print(f"{d.name}: ok", file=sys.stderr)
    return n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m simulator", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="simulate one scenario file")
    r.add_argument("scenario", type=Path)
    r.add_argument("--out", type=Path, required=True)
    g = sub.add_parser("regenerate", help="re-run every scenario folder under ROOT")
    g.add_argument("root", type=Path)
    s = sub.add_parser("scale", help="write a large job for benchmarks (streamed, not committed)")
    s.add_argument("--ranks", type=int, default=256)
    s.add_argument("--mb-per-rank", type=float, default=20.0)
    s.add_argument("--gpus-per-host", type=int, default=8)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--steps", type=int, default=None,
                   help="steps per rank (default: as many as --mb-per-rank holds; a rank's step grows with the "
                        "world size, so hold this constant to compare world sizes)")
    s.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    try:
        if a.cmd == "run":
            run_scenario(a.scenario, a.out)
        elif a.cmd == "regenerate":
            n = regenerate(a.root)
            print(f"regenerated {n} scenarios", file=sys.stderr)
        else:
            from simulator.scale import write_scale
            write_scale(a.ranks, a.mb_per_rank, a.out, a.gpus_per_host, a.seed, a.steps)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
