"""The Kineto parser against a bare typed msgspec decode of the same fields, on the same files in the same run.

    python benchmarks/parser_vs_decode.py [FOLDER ...] [--repeat 3]

The floor reads each file and decodes it with the parser's own struct types (``parsers.kineto_events.TypedDoc``:
the same event fields and args), building nothing else. The parser (``load_trace``) also inflates, slices,
reduces every slice to columns and builds the tables. Printed: CPU seconds of each, the floor also with the garbage collector off (median over repeats,
interleaved so machine load hits both alike) and their ratio. Default input: the 8 × 20 MB simulated job
(written by benchmarks/gen_traces.py to bench-data/scale-8x20 once).
"""
from __future__ import annotations

import argparse
import gc
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _files(folders: list[str]) -> list[Path]:
    out = []
    for f in folders:
        p = Path(f)
        out += [p] if p.is_file() else sorted(x for x in p.rglob("*") if x.name.endswith((".json", ".json.gz"))
                                              and x.name != "expected.json")
    return out


def bare_decode(path: Path) -> int:
    """Read (inflate) and decode with the parser's typed structs; the number of events."""
    from parsers.kineto_decode import DOC_DECODER
    from parsers.trace_bytes import read_trace_bytes
    doc = DOC_DECODER.decode(read_trace_bytes(path).data)
    return len(doc.traceEvents or [])


def bare_decode_gc_off(path: Path) -> int:
    """The same decode with the garbage collector off (it otherwise scans the millions of new structs)."""
    gc.disable()
    try:
        return bare_decode(path)
    finally:
        gc.enable()


def parse(path: Path) -> int:
    from parsers.kineto import load_trace
    return len(load_trace(path).activity)


def cpu(fn, path: Path) -> float:
    gc.collect()
    t0 = time.process_time()
    fn(path)
    return time.process_time() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folders", nargs="*")
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args(argv)
    folders = a.folders
    if not folders:
        out = ROOT / "bench-data" / "scale-8x20"
        if len(list(out.glob("rank*.pt.trace.json"))) != 8:
            subprocess.run([sys.executable, str(ROOT / "benchmarks/gen_traces.py"), "--ranks", "8",
                            "--mb-per-rank", "20", "--out", str(out), "--jobs", "2"], check=True)
        folders = [str(out)]
    files = _files(folders)
    floor, floor_nogc, ours = [], [], []
    for _ in range(a.repeat):
        floor.append(sum(cpu(bare_decode, f) for f in files))
        floor_nogc.append(sum(cpu(bare_decode_gc_off, f) for f in files))
        ours.append(sum(cpu(parse, f) for f in files))
    mb = sum(f.stat().st_size for f in files) / 1e6
    f, g, o = statistics.median(floor), statistics.median(floor_nogc), statistics.median(ours)
    print(f"{len(files)} files, {mb:.0f} MB on disk: bare typed decode {f:.2f} s CPU ({g:.2f} s with gc off), "
          f"parser {o:.2f} s CPU; ratio {o / f:.2f} ({o / g:.2f} against gc off; goal <= 1.2)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
