"""Speed of parsers/torch_stderr on a synthetic 50 MB interleaved torchrun log, against a bare `for line in f` loop.

    python benchmarks/stderr_parse.py [--mb 50] [--repeat 3] [--hostile]

The log: 8 ranks tee'd by torchrun (`[defaultN]:` progress prints), NCCL INFO lines, c10d warnings, and at the end
every rank's traceback interleaved line by line, gloo errors and torchrun's failure table. `--hostile` also times a
file of 64 KiB lines built to make careless regexes backtrack. Prints MB/s of each and the ratio to the baseline,
measured in the same run (best of --repeat).
"""
from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from parsers.torch_stderr import parse_stderr  # noqa: E402

TAIL = """[default{r}]:[rank{r}]: Traceback (most recent call last):
[default{r}]:[rank{r}]:   File "/workspace/train.py", line 212, in <module>
[default{r}]:[rank{r}]:     main()
[default{r}]:[rank{r}]:   File "/workspace/train.py", line 171, in main
[default{r}]:[rank{r}]:     dist.all_reduce(grad)
[default{r}]:[rank{r}]:   File "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 3252, in all_reduce
[default{r}]:[rank{r}]:     work.wait()
[default{r}]:[rank{r}]: RuntimeError: [/p/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [10.0.0.{r}]:4{r}123. This is typically caused by a remote worker crashing.
"""


def synthetic(mb: float, seed: int = 0) -> bytes:
    """A combined torchrun log of about `mb` megabytes."""
    rnd = random.Random(seed)
    out, size, step = [], 0, 0
    target = int(mb * 1e6)
    while size < target:
        r = rnd.randrange(8)
        pick = rnd.random()
        if pick < 0.80:
            line = (f"[default{r}]:iteration {step:7d}/500000 | consumed samples: {step * 512:10d} | elapsed time per "
                    f"iteration (ms): {400 + rnd.random() * 20:.1f} | learning rate: 3.0E-04 | loss: "
                    f"{2 + rnd.random():.5f} |\n")
        elif pick < 0.97:
            line = (f"[default{r}]:gpu-node-1:{3300 + r}:{3400 + r} [{r}] NCCL INFO Channel {step % 32:02d}/32 : "
                    f"{r}[{r}] -> {(r + 1) % 8}[{(r + 1) % 8}] via P2P/IPC/read\n")
        else:
            line = (f"[default{r}]:[rank{r}]:[W1204 10:0{r}:14.8 ProcessGroupNCCL.cpp:4561] [PG ID 0 PG GUID 0"
                    f"(default_pg) Rank {r}]  using GPU {r} to perform barrier as devices used by this process are "
                    f"currently unknown.\n")
        out.append(line)
        size += len(line)
        step += 1
    tails = [TAIL.format(r=r).splitlines(keepends=True) for r in range(8)]
    for i in range(max(map(len, tails))):
        out.extend(t[i] for t in tails if i < len(t))
    return "".join(out).encode()


def hostile(mb: float) -> bytes:
    """Long lines that repeat the prefixes of our patterns without completing them."""
    pieces = [b"NCCL error in: " + b"a" * 65000, b"[rank1]:" * 8000, b"Rank 1 is running collective: "
              b"CollectiveFingerPrint(SequenceNumber=1, OpType=X" * 900 + b"Detected mismatch between collectives",
              b'  File "' + b"x" * 65000, b"CUDA out of memory. Tried to allocate " + b"1.00 GiB " * 7000,
              b"Timed out waiting " + b"9" * 65000, b"[" * 65000, b"Xid (" + b"0:" * 32000]
    out, size = [], 0
    while size < mb * 1e6:
        for p in pieces:
            out.append(p + b"\n")
            size += len(p) + 1
    return b"Traceback (most recent call last):\n" + b"".join(out)


def baseline(path: Path) -> int:
    n = 0
    with open(path, "rb") as fh:
        for _ in fh:
            n += 1
    return n


def best(fn, path: Path, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn(path)
        times.append(time.perf_counter() - t)
    return min(times)


def measure(label: str, data: bytes, repeat: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "torchrun.log"
        path.write_bytes(data)
        mb = len(data) / 1e6
        base, parse = best(baseline, path, repeat), best(parse_stderr, path, repeat)
        log = parse_stderr(path)
    print(f"{label}: {mb:.1f} MB, {log.n_lines} lines, {len(log.events)} events, {len(log.tracebacks)} tracebacks")
    print(f"  for line in f : {mb / base:8.1f} MB/s")
    print(f"  parse_stderr  : {mb / parse:8.1f} MB/s   ({parse / base:.1f}x the bare loop)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=50.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--hostile", action="store_true")
    args = ap.parse_args(argv)
    measure("interleaved torchrun log", synthetic(args.mb), args.repeat)
    if args.hostile:
        measure("hostile long lines", hostile(min(args.mb, 20.0)), args.repeat)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
