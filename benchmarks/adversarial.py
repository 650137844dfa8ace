"""Each parser on adversarial inputs at three sizes: time and peak memory as ratios to clean input of the size.

    python benchmarks/adversarial.py [--sizes 1,10,100] [--fr-max 10] [--only kineto,nccl_log,...]

Linear time shows as a time ratio that stays flat as the size grows (a quadratic input's ratio grows with the
size); bounded memory as a peak that does not grow with the input. Every measurement is one fresh subprocess
(wall time, peak RSS from getrusage); "extra MB" is the peak above an idle interpreter that imported the
parser. Inputs are written to bench-data/adversarial/ (git-ignored; deleted at the end unless --keep).
Flight Recorder dumps stop at --fr-max MB by default: PyTorch writes a few MB per rank, and a 100 MB pickle
takes minutes to turn into rows with or without damage.
"""
from __future__ import annotations

import argparse
import gzip
import json
import pickle
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "bench-data" / "adversarial"
MB = 1 << 20

_CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, {root!r})
kind, path = sys.argv[1], sys.argv[2]
from parsers.errors import InputError
if kind == "kineto":
    from parsers.kineto import load_trace as parse
elif kind == "nccl_log":
    from parsers.nccl_log import parse_nccl_log as parse
elif kind == "stderr":
    from parsers.torch_stderr import parse_stderr as parse
elif kind.startswith("fr"):
    from parsers.flight_recorder import load_dump as parse
else:
    from parsers.discover import classify as parse
from pathlib import Path
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
outcome = "read"
if path != "-":
    try:
        parse(Path(path))
    except InputError as exc:
        outcome = "refused: " + exc.reason[:80]
dt = time.perf_counter() - t
print(json.dumps({{"s": dt, "peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "base_kb": base,
                  "outcome": outcome}}))
"""


def measure(kind: str, path: Path | str) -> dict:
    code = _CHILD.format(root=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code, kind, str(path)], capture_output=True, text=True, check=True,
                         close_fds=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------- inputs
def _event(i: int, name: str = "") -> bytes:
    return (b'{"ph":"X","cat":"kernel","name":"%s","pid":0,"tid":7,"ts":%d.5,"dur":1.25,'
            b'"args":{"stream":7,"correlation":%d,"device":0}}' % ((name or f"gemm_{i % 13}").encode(), i, i))


def _trace(size: int, name: str = "", every: int = 0, bad: bytes = b"") -> bytes:
    parts, n, i = [b'{"schemaVersion":1,"traceEvents":['], 40, 0
    while n < size:
        e = _event(i, name)
        if every and i % every == every - 1:
            e = e.replace(b"gemm", bad)
        parts.append(e if i == 0 else b"," + e)
        n += len(e) + 1
        i += 1
    parts.append(b'],"traceName":"x"}')
    return b"".join(parts)


def kineto_inputs(size: int) -> dict[str, Callable[[], bytes]]:
    def nan_mid() -> bytes:
        d = _trace(size)
        k = d.index(b'"ts":', len(d) // 2)
        return d[:k] + b'"ts":NaN,' + d[k + 5:]

    def gzip_flip() -> bytes:
        z = bytearray(gzip.compress(_trace(size), 1))
        z[len(z) // 2] ^= 0xFF
        return bytes(z)
    return {
        "clean": lambda: _trace(size),
        "NaN mid-file": nan_mid,
        "zeros after [": lambda: b'{"traceEvents":[' + b"\0" * size,
        "junk, no boundary": lambda: b'{"traceEvents":[' + b"}x{," * (size // 4),
        "}, { in every name": lambda: _trace(size, name='k}, {\\"x'),
        "bad UTF-8 every 1000": lambda: _trace(size, every=1000, bad=b"\xff\xfe"),
        "flipped gzip byte": gzip_flip,
    }


_LOG_LINES = [
    b"node1:12:12 [0] NCCL INFO NCCL version 2.21.5+cuda12.4",
    b"node1:12:12 [0] NCCL INFO comm 0x5581 rank 0 nranks 8 cudaDev 0 nvmlDev 0 busId 1b000 commId 0x1 - Init START",
    b"node1:12:40 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
    b"node1:12:12 [0] NCCL INFO AllReduce: opCount 1a sendbuff 0x7f recvbuff 0x7f count 1024 datatype 7 op 0 "
    b"root 0 comm 0x5581 [nranks=8] stream 0x55",
    b"node1:12:12 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.0.0.1<0>",
    b"[rank0]:[E1201 07:00:00.000000 12 ProcessGroupNCCL.cpp:616] [PG ID 0 PG GUID 0(default_pg) Rank 0] "
    b"Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
    b"Timeout(ms)=600000) ran for 600010 milliseconds before timing out.",
]


def _repeat(lines: list[bytes], size: int) -> bytes:
    block = b"\n".join(lines) + b"\n"
    return block * (size // len(block) + 1)


def nccl_inputs(size: int) -> dict[str, Callable[[], bytes]]:
    n = 60000
    hostile = [b"h:1:1 [0] NCCL INFO NET/IB : Using " + b"[1]x" * (n // 4), b"a" * n + b" NCCL INFO x",
               b"h:1:1 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via P2P" + b" " * n + b"x",
               b":1:1 " * (n // 5) + b"NCCL INFO x", b"NCCL error: " * (n // 12), b"[PG 1 (" * (n // 7)]
    return {
        "clean": lambda: _repeat(_LOG_LINES, size),
        "60 KB pathological lines": lambda: _repeat(hostile, size),
        "one line, no newline": lambda: b"x:" * (size // 2),
        "a new process per line": lambda: b"".join(
            b"h%d:%d:1 [0] NCCL INFO comm 0x%x rank 0 nranks 2 cudaDev 0 - Init START\n" % (i, i, i)
            for i in range(size // 60)),
        "NET/IB without OOB": lambda: _repeat([b"h:1:1 [0] NCCL INFO NET/IB : Using " + b"[1]x" * 200], size),
    }


def stderr_inputs(size: int) -> dict[str, Callable[[], bytes]]:
    clean = (ROOT / "fixtures/stderr/gpu-shapes/nccl_errors.log").read_bytes().splitlines() + \
        (ROOT / "fixtures/stderr/gpu-shapes/cuda_oom.log").read_bytes().splitlines()
    n = 60000
    hostile = [b"Traceback (most recent call last):" * (n // 35), b"[rank1]:" * (n // 8), b"a." * (n // 2) + b"Error",
               b"RuntimeError: " + b"(" * n, b"  File \"" + b"x" * n, b"\x1b[31m" * (n // 5)]
    return {"clean": lambda: _repeat(clean, size), "60 KB pathological lines": lambda: _repeat(hostile, size),
            "one line, no newline": lambda: b"Error: " * (size // 7)}


def _dump(size: int) -> dict:
    e = {"record_id": 0, "pg_id": 0, "process_group": ["0", "default_pg"], "collective_seq_id": 1, "p2p_seq_id": 0,
         "op_id": 1, "profiling_name": "nccl:all_reduce", "time_created_ns": 1, "input_sizes": [[1024, 1024]],
         "output_sizes": [[1024, 1024]], "input_dtypes": ["Float"], "output_dtypes": ["Float"],
         "state": "completed", "timeout_ms": 600000, "is_p2p": False,
         "frames": [{"name": "forward", "filename": "/x/model.py", "line": 3}] * 4}
    n = max(1, size // 420)
    return {"version": "2.4", "rank": 0, "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0]"}},
            "pg_status": {}, "entries": [dict(e, record_id=i, collective_seq_id=i + 1) for i in range(n)]}


def fr_pickle_inputs(size: int) -> dict[str, Callable[[], bytes]]:
    return {
        "clean": lambda: pickle.dumps(_dump(size), protocol=4),
        "cut at 90% (salvage)": lambda: (lambda b: b[: int(len(b) * 0.9)])(pickle.dumps(_dump(size), protocol=2)),
        "MARK flood": lambda: b"\x80\x02" + b"(" * size,
        "protocol 0": lambda: pickle.dumps(_dump(size), protocol=0),
    }


def fr_json_inputs(size: int) -> dict[str, Callable[[], bytes]]:
    return {
        "clean": lambda: json.dumps(_dump(size)).encode(),
        "cut at 90% (salvage)": lambda: (lambda b: b[: int(len(b) * 0.9)])(json.dumps(_dump(size)).encode()),
        "lone surrogates": lambda: json.dumps(_dump(size)).replace("default_pg", "\\ud800").encode(),
    }


def discover_inputs(size: int) -> dict[str, Callable[[], bytes]]:
    return {"clean": lambda: _repeat(_LOG_LINES, size), "zeros": lambda: b"\0" * size,
            "base64": lambda: b"QUJD" * (size // 4), "colons": lambda: b":" * size}


KINDS = {"kineto": (kineto_inputs, ".json"), "nccl_log": (nccl_inputs, ".log"), "stderr": (stderr_inputs, ".log"),
         "fr_pickle": (fr_pickle_inputs, ""), "fr_json": (fr_json_inputs, ".json"), "discover": (discover_inputs, ".log")}


def make_in_child(kind: str, size: int, name: str, path: Path) -> None:
    """Write one input from a child process: the parent must stay small, because a child's peak RSS on Linux
    starts from its parent's at fork time (the measurement would count the parent's generated bytes)."""
    subprocess.run([sys.executable, __file__, "--make", kind, str(size), name, str(path)], check=True)


def main() -> None:
    if len(sys.argv) == 6 and sys.argv[1] == "--make":
        kind, size, name, path = sys.argv[2], int(sys.argv[3]), sys.argv[4], Path(sys.argv[5])
        path.write_bytes(KINDS[kind][0](size * MB)[name]())
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1,10,100", help="sizes in MB (default 1,10,100)")
    ap.add_argument("--fr-max", type=int, default=10, help="largest Flight Recorder dump in MB (default 10)")
    ap.add_argument("--only", default="", help="comma-separated kinds: " + ",".join(KINDS))
    ap.add_argument("--keep", action="store_true", help="keep bench-data/adversarial/")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    kinds = [k for k in KINDS if not args.only or k in args.only.split(",")]
    DATA.mkdir(parents=True, exist_ok=True)
    idle = measure("kineto", "-")
    print(f"idle interpreter with a parser imported: {idle['peak_kb'] // 1024} MB\n")
    print(f"{'parser':10} {'input':26} {'MB':>4} {'s':>7} {'time ratio':>10} {'peak MB':>8} {'extra MB':>8} "
          f"{'mem ratio':>9}  outcome")
    for kind in kinds:
        make, suffix = KINDS[kind]
        for size in sizes:
            if kind.startswith("fr") and size > args.fr_max:
                continue
            clean = None
            for name in make(size * MB):
                path = DATA / f"{kind}-{size}-{abs(hash(name)) % 10**6}{suffix}"
                if kind == "fr_pickle":
                    path = DATA / f"nccl_trace_rank_{size}_{abs(hash(name)) % 10**6}"
                make_in_child(kind, size, name, path)
                r = measure(kind, path)
                path.unlink()
                extra = max(1, r["peak_kb"] - idle["peak_kb"]) / 1024
                if clean is None:
                    clean = (r["s"], extra)
                print(f"{kind:10} {name:26} {size:>4} {r['s']:7.2f} {r['s'] / clean[0]:10.2f} "
                      f"{r['peak_kb'] / 1024:8.0f} {extra:8.0f} {extra / clean[1]:9.2f}  {r['outcome'][:60]}",
                      flush=True)
    if not args.keep:
        shutil.rmtree(DATA, ignore_errors=True)


if __name__ == "__main__":
    main()
