"""The hostile-input classes of issue #24, each as a seeded folder builder, and the way they are judged: the real
command in a subprocess under a 2 GB address-space limit and a 20 s timeout, which must exit as a diagnosis
(0/1/2), never as a crash (3), a MemoryError, a signal or a traceback, with every CI-facing output clean.

`python -m tests.fuzz.hostile_cases N SEED` runs N mixed cases (the campaign; CI runs a handful, see
tests/test_hostile_files.py).
"""
from __future__ import annotations

import gzip
import os
import random
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

from tests.fuzz import mutators as mu

ROOT = mu.ROOT
ADDRESS_SPACE = 2 << 30
TIME_LIMIT_S = 20.0
HANG = mu.FIXTURES / "real-cpu-hang" / "size_mismatch_abort"
SIZE_ABORT = mu.FIXTURES / "real-cpu-failures" / "stderr_only_size_abort"
PIPE = mu.FIXTURES / "real-cpu" / "pp-gpipe"


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("expected.json", "facts.json"))
    return dst


# ------------------------------------------------------------------------------------------ one class each
#: (opcode, length-prefix width) of every opcode whose argument length the file itself states.
LENGTH_OPCODES = {"BINBYTES8": (b"\x8e", 8), "BINUNICODE8": (b"\x8d", 8), "BYTEARRAY8": (b"\x96", 8),
                  "LONG4": (b"\x8b", 4), "BINBYTES": (b"B", 4), "BINUNICODE": (b"X", 4), "BINSTRING": (b"T", 4),
                  "SHORT_BINBYTES": (b"C", 1), "SHORT_BINUNICODE": (b"\x8c", 1), "LONG1": (b"\x8a", 1)}


def huge_length_pickle(name: str, rng: random.Random) -> bytes:
    """A real dump's first part, then `name` with the largest length its prefix can state and a few bytes."""
    import pickletools
    data = mu.read_fixture("real-cpu-hang/size_mismatch_abort/nccl_trace_rank_0")
    op, w = LENGTH_OPCODES[name]
    ln = (1 << (8 * w)) - 1 if name not in ("LONG4", "BINSTRING") else (1 << 31) - 1
    cuts = [pos for o, _, pos in pickletools.genops(data) if o.name not in ("PROTO", "STOP")]
    return data[:rng.choice(cuts[1:])] + op + ln.to_bytes(w, "little") + b"abc"  # cut at an opcode boundary


def case_huge_pickle_lengths(d: Path, rng: random.Random) -> Path:
    _copy(HANG, d)
    for i, name in enumerate(LENGTH_OPCODES):
        (d / f"nccl_trace_rank_{i + 2}").write_bytes(huge_length_pickle(name, rng))
    return d


def case_huge_number_in_log(d: Path, rng: random.Random) -> Path:
    """The stderr-only gloo size abort with a size no int64 holds."""
    _copy(SIZE_ABORT, d)
    p = d / "torchrun.log"
    text = p.read_text(encoding="utf-8").replace("32 vs 16", "18446744073709551616 vs 8")
    p.write_text(text, encoding="utf-8")
    return d


def case_zero_duration_pipeline_rank(d: Path, rng: random.Random) -> Path:
    """A GPipe job whose rank 1 recorded every operator with dur 0 (a clock that did not tick)."""
    import orjson
    _copy(PIPE, d)
    p = d / "rank1.pt.trace.json.gz"
    doc = orjson.loads(gzip.decompress(p.read_bytes()))
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") == "cpu_op":
            e["dur"] = 0
    p.write_bytes(gzip.compress(orjson.dumps(doc), compresslevel=1))
    return d


SEPARATORS = ["\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\r", "\x1c", "\x1d", "\x1e", "\r\n"]


def case_line_separators(d: Path, rng: random.Random) -> Path:
    """Every line separator before a forged workflow command, inside the log line the finding quotes."""
    _copy(SIZE_ABORT, d)
    p = d / "torchrun.log"
    forged = "".join(f"{s}::error file=x.py,line=1::forged{i}" for i, s in enumerate(SEPARATORS))
    p.write_text(p.read_text(encoding="utf-8").replace("Is there a distributed", "Is" + forged + " there a distributed"),
                 encoding="utf-8")
    return d


def case_non_finite_trace(d: Path, rng: random.Random) -> Path:
    """A real trace with NaN / Infinity literals in ts, dur and args (not JSON; PyTorch has written them)."""
    _copy(mu.FIXTURES / "real-cpu" / "ddp-straggler", d)
    p = d / "rank1.pt.trace.json.gz"
    data = gzip.decompress(p.read_bytes())
    for key, lit in ((b'"dur": ', b"NaN"), (b'"ts": ', b"Infinity"), (b'"dur": ', b"-Infinity"), (b'"ts": ', b"nan")):
        i = data.find(key, rng.randrange(len(data) // 4, len(data) // 2))
        if i < 0:
            key = key.replace(b" ", b"")
            i = data.find(key, len(data) // 3)
        j = data.index(b",", i)
        data = data[:i] + key + lit + data[j:]
    p.write_bytes(gzip.compress(data, compresslevel=1))
    return d


def odd_opcodes(rng: random.Random, data: bytes) -> bytes:
    """Opcodes a dump never holds (globals, reduce, frames and length prefixes that lie), spliced in."""
    junk = [b"c__builtin__\neval\n", b"R", b"b", b"\x81", b"\x92", b"\x93", b"\x95" + struct.pack("<Q", 1 << 60),
            b"\x94" * 50, b"(" * 500, b"h\xff", b"j" + struct.pack("<I", 1 << 31), b"0" * 20, b"P1\n", b"\x82\x01",
            b"p99999999999999999999\n", b"I" + b"9" * 5000 + b"\n", b"L" + b"9" * 5000 + b"L\n"]
    junk += [op + ((1 << (8 * w)) - 1).to_bytes(w, "little") for op, w in LENGTH_OPCODES.values()]
    x = data
    for _ in range(rng.choice([1, 3, 8])):
        i = rng.randrange(len(x) + 1)
        x = x[:i] + rng.choice(junk) + x[i:]
    return x


def two_member_gzip(rng: random.Random, data: bytes) -> bytes:
    k = rng.randrange(len(data) + 1)
    z = gzip.compress(data[:k], compresslevel=1) + gzip.compress(data[k:], compresslevel=1)
    return mu.flip(rng, z) if rng.random() < 0.5 else z


def splice(rng: random.Random, a: bytes, b: bytes) -> bytes:
    """Two logs cut mid-line and joined (two processes writing one file), several times over."""
    out = b""
    for _ in range(rng.choice([2, 5, 20])):
        src = a if rng.random() < 0.5 else b
        i = rng.randrange(len(src) + 1)
        out += src[i:i + rng.randrange(1, 20000)]
    return out


def case_mixed(d: Path, rng: random.Random) -> Path:
    """Bit flips + odd pickle opcodes + a two-member gzip trace + a spliced log, in one real hang folder."""
    _copy(HANG, d)
    for p in sorted(d.glob("nccl_trace_rank_*")):
        p.write_bytes(mu.flip(rng, odd_opcodes(rng, p.read_bytes())))
    trace = mu.read_fixture(rng.choice(mu.SEEDS["trace"]))
    (d / "rank0.pt.trace.json.gz").write_bytes(two_member_gzip(rng, mu.flip(rng, trace)))
    logs = [mu.read_fixture(s) for s in mu.SEEDS["stderr"] + mu.SEEDS["log"]]
    (d / "rank1.stderr").write_bytes(mu.flip(rng, splice(rng, rng.choice(logs), rng.choice(logs))))
    (d / "nccl_rank0.log").write_bytes(splice(rng, rng.choice(logs), rng.choice(logs)))
    return d


CLASSES = {"huge_pickle_lengths": case_huge_pickle_lengths, "huge_number_in_log": case_huge_number_in_log,
           "zero_duration_pipeline_rank": case_zero_duration_pipeline_rank, "line_separators": case_line_separators,
           "non_finite_trace": case_non_finite_trace, "mixed": case_mixed}


# ------------------------------------------------------------------------------------------ the judge
def _limit() -> None:
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def run_cli(folder: Path, out: Path, timeout: float = TIME_LIMIT_S) -> tuple[int, str, float, dict[str, str]]:
    """The command on `folder` as a user runs it, every CI-facing output written: (exit code, stderr, seconds,
    {format: text}). Exit code -9 / 124 mean killed by the memory limit / the timeout."""
    out.mkdir(parents=True, exist_ok=True)
    names = {"json": "r.json", "github": "r.gh", "junit": "r.xml", "sarif": "r.sarif", "text": "r.txt"}
    cmd = [sys.executable, "-m", "analyzer", str(folder), "-q", "--jobs", "1", "--format", "text",
           "-o", str(out / names["text"]), "--json", str(out / names["json"]), "--github", str(out / names["github"]),
           "--junit", str(out / names["junit"]), "--sarif", str(out / names["sarif"])]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    t0 = time.monotonic()
    try:
        r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
                           preexec_fn=_limit)
        code, err = r.returncode, r.stderr
    except subprocess.TimeoutExpired as exc:
        code, err = 124, (exc.stderr or b"").decode("utf-8", "replace") if isinstance(exc.stderr, bytes) else ""
    took = time.monotonic() - t0
    docs = {f: (out / n).read_text(encoding="utf-8") for f, n in names.items() if (out / n).exists()}
    return code, err, took, docs


def judge(where: str, code: int, err: str, took: float, docs: dict[str, str]) -> None:
    """Raise AssertionError unless the run was a diagnosis within the limits, with clean CI-facing outputs."""
    from tests.fuzz.checks import CHECKS
    assert code != 124, f"{where}: ran past {TIME_LIMIT_S:.0f} s"
    assert code in (0, 1, 2), f"{where}: exit {code} after {took:.1f} s: {err[-1500:]}"
    assert "Traceback" not in err and "MemoryError" not in err, f"{where}: {err[-1500:]}"
    assert set(docs) == {"json", "github", "junit", "sarif", "text"}, f"{where}: outputs missing: {sorted(docs)}"
    for fmt, text in docs.items():
        CHECKS[fmt](f"{where} --format {fmt}", text)  # lines split at every separator, not only LF


def main(argv: list[str]) -> int:
    import tempfile
    n, seed = (int(argv[0]) if argv else 20), (int(argv[1]) if len(argv) > 1 else 0)
    slow, bad = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(n):
            rng = random.Random(f"{seed}-mixed-{i}")
            d = case_mixed(Path(tmp) / f"case{i}", rng)
            code, err, took, docs = run_cli(d, Path(tmp) / f"out{i}")
            try:
                judge(f"seed {seed} mixed {i}", code, err, took, docs)
            except AssertionError as exc:
                bad += 1
                print(exc)
            slow.append((took, i))
            shutil.rmtree(d)
    slow.sort(reverse=True)
    print(f"{n} mixed cases, {bad} failed; slowest: " + ", ".join(f"#{i} {t:.1f} s" for t, i in slow[:5]))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
