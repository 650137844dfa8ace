"""The hostile-input classes of issues #24 and #34, each as a seeded folder builder, and the way they are judged:
the real command in a subprocess under a 2 GB address-space limit and 20 s of CPU (60 s of wall clock: on a shared
machine the wall clock measures the neighbours), which must exit as a diagnosis (0/1/2), never as a crash (3), a
MemoryError, a signal, a traceback or a library warning, with every CI-facing output clean.

`python -m tests.fuzz.hostile_cases N SEED` runs N mixed cases (the campaign; CI runs a handful, see
tests/test_hostile_files.py).
"""
from __future__ import annotations

import gzip
import os
import random
import re
import resource
import shutil
import struct
import subprocess
import sys
from pathlib import Path

from tests.fuzz import mutators as mu

ROOT = mu.ROOT
ADDRESS_SPACE = 2 << 30
#: CPU seconds a case may use (the command and its workers): what the input costs, whatever else the machine
#: runs; a run that blocks without using CPU is ended by the wall-clock limit
TIME_LIMIT_S = 20.0
WALL_LIMIT_S = 3 * TIME_LIMIT_S
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


# ------------------------------------------------------------------------------------------ issue #34 classes
STRAGGLER = mu.FIXTURES / "real-cpu" / "ddp-straggler"


def _edit_trace(p: Path, fn) -> None:
    """Rewrite a gzip trace through ``fn(doc)`` (the document as a dict; json writes integers beyond int64)."""
    import json
    doc = json.loads(gzip.decompress(p.read_bytes()))
    fn(doc)
    p.write_bytes(gzip.compress(json.dumps(doc).encode(), compresslevel=1))


def case_base_time_out_of_range(d: Path, rng: random.Random) -> Path:
    """Every rank's baseTimeNanoseconds beyond int64 or any date (2^63, 1e21, 1e300, ...), its ts made
    boot-relative so the report's collection time must read the base; run with --timeline and --html."""
    _copy(STRAGGLER, d)
    values = [2**63 + rng.randrange(1000), 1e21, 1e300, -1e300, 2**64, 10**30, "9" * 40]
    for p in sorted(d.glob("*.pt.trace.json.gz")):
        def bad(doc, v=rng.choice(values)):
            doc["baseTimeNanoseconds"] = v
            t0 = min(e["ts"] for e in doc["traceEvents"] if isinstance(e.get("ts"), (int, float)))
            for e in doc["traceEvents"]:
                if isinstance(e.get("ts"), (int, float)):
                    e["ts"] -= t0
        _edit_trace(p, bad)
    return d


def case_no_complete_step(d: Path, rng: random.Random) -> Path:
    """Two ranks, one cut off before its first step ends (no instance seen by two ranks); --html, --timeline."""
    d.mkdir(parents=True)
    for r in (0, 1):
        shutil.copy(STRAGGLER / f"rank{r}.pt.trace.json.gz", d)
    p = d / "rank1.pt.trace.json.gz"
    data = gzip.decompress(p.read_bytes())
    p.write_bytes(gzip.compress(data[:int(len(data) * rng.uniform(0.003, 0.25))], compresslevel=1))
    return d


def big_group_dump(src: Path, n: int) -> bytes:
    """A real dump whose process groups list ranks 0..n-1."""
    import pickle
    from parsers.safe_unpickle import safe_loads
    obj = safe_loads(src.read_bytes())
    for v in obj["pg_config"].values():
        v["ranks"] = str(list(range(n)))
    return pickle.dumps(obj, protocol=2)


def case_huge_group(d: Path, rng: random.Random) -> Path:
    """The gloo size abort whose dumps' group lists 16,384 or 100,000 ranks (lookups must stay linear)."""
    _copy(HANG, d)
    n = rng.choice([16384, 100000])
    for p in sorted(d.glob("nccl_trace_rank_*")):
        p.write_bytes(big_group_dump(p, n))
    return d


EMPTY_TRACES = [b'{"traceEvents": []}', b'{"traceEvents":[]}\n', b'{"traceEvents": [], "deviceProperties": []}',
                b'{"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "x"}}]}',
                b'{"schemaVersion": 1, "traceEvents": [], "distributedInfo": {"rank": 0}}']


def case_many_empty_traces(d: Path, rng: random.Random) -> Path:
    """4000 empty or metadata-only traces: rejecting each must cost far less than analysing a real one."""
    d.mkdir(parents=True)
    for i in range(4000):
        (d / f"rank{i}.pt.trace.json").write_bytes(rng.choice(EMPTY_TRACES))
    return d


def case_duplicate_dump_ranks(d: Path, rng: random.Random) -> Path:
    """The gloo size abort with rank 0's dump also written as JSON, and rank 2's pickle claiming rank 0."""
    import json
    import pickle
    from parsers.safe_unpickle import safe_loads
    _copy(HANG, d)
    zero = safe_loads((d / "nccl_trace_rank_0").read_bytes())
    (d / "nccl_trace_rank_0.json").write_text(json.dumps(zero, default=str), encoding="utf-8")
    two = safe_loads((d / "nccl_trace_rank_2").read_bytes())
    two["rank"] = 0
    if rng.random() < 0.5:
        (d / "nccl_trace_rank_2").write_bytes(pickle.dumps(two, protocol=rng.choice([2, 4])))
    else:
        (d / "nccl_trace_rank_2").unlink()
        (d / "nccl_trace_rank_2.json").write_text(json.dumps(two, default=str), encoding="utf-8")
    return d


def case_gzip_flip(d: Path, rng: random.Random) -> Path:
    """One flipped bit inside a rank's deflate stream, past its first events (the rank must be salvaged)."""
    _copy(STRAGGLER, d)
    p = d / f"rank{rng.randrange(4)}.pt.trace.json.gz"
    z = bytearray(p.read_bytes())
    z[rng.randrange(len(z) // 5, len(z) - 8)] ^= 1 << rng.randrange(8)
    p.write_bytes(bytes(z))
    return d


def case_lone_surrogate(d: Path, rng: random.Random) -> Path:
    """A lone escaped UTF-16 surrogate in a rank's host_name and in one of its thread names."""
    _copy(STRAGGLER, d)
    p = d / f"rank{rng.randrange(4)}.pt.trace.json.gz"
    data = gzip.decompress(p.read_bytes())
    lone = rng.choice([b"\\ud800", b"\\udfff", b"\\udbff"])
    data = data.replace(b'"host_name": "', b'"host_name": "' + lone, 1)
    data = data.replace(b'"name": "thread ', b'"name": "' + lone + b'thread ', 1)
    p.write_bytes(gzip.compress(data, compresslevel=1))
    return d


def case_all_nan_slice(d: Path, rng: random.Random) -> Path:
    """The straggler's steps numbered apart from the others' (no step in common: medians over empty slices)."""
    import re
    _copy(STRAGGLER, d)
    p = d / "rank2.pt.trace.json.gz"
    k = rng.choice([100, 1000, 10**6])
    data = re.sub(rb"ProfilerStep#(\d+)", lambda m: b"ProfilerStep#" + str(int(m.group(1)) + k).encode(),
                  gzip.decompress(p.read_bytes()))
    p.write_bytes(gzip.compress(data, compresslevel=1))
    return d


#: extra outputs a class is run with (the renderers that crashed on it)
CLASS_OUTPUTS = {"base_time_out_of_range": ("--timeline", "--html"), "no_complete_step": ("--timeline", "--html")}

CLASSES = {"huge_pickle_lengths": case_huge_pickle_lengths, "huge_number_in_log": case_huge_number_in_log,
           "zero_duration_pipeline_rank": case_zero_duration_pipeline_rank, "line_separators": case_line_separators,
           "non_finite_trace": case_non_finite_trace, "mixed": case_mixed,
           "base_time_out_of_range": case_base_time_out_of_range, "no_complete_step": case_no_complete_step,
           "huge_group": case_huge_group, "many_empty_traces": case_many_empty_traces,
           "duplicate_dump_ranks": case_duplicate_dump_ranks, "gzip_flip": case_gzip_flip,
           "lone_surrogate": case_lone_surrogate, "all_nan_slice": case_all_nan_slice}


# ------------------------------------------------------------------------------------------ the judge
def _limit() -> None:
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def run_cli(folder: Path, out: Path, timeout: float = WALL_LIMIT_S,
            extra: tuple[str, ...] = ()) -> tuple[int, str, float, dict[str, str]]:
    """The command on `folder` as a user runs it, every CI-facing output written (and ``extra``: '--html',
    '--timeline' write those too): (exit code, stderr, CPU seconds, {format: text}). Exit code -9 / 124 mean
    killed by the memory limit / the wall-clock limit (``timeout``, which ends a run that blocks)."""
    out.mkdir(parents=True, exist_ok=True)
    names = {"json": "r.json", "github": "r.gh", "junit": "r.xml", "sarif": "r.sarif", "text": "r.txt"}
    cmd = [sys.executable, "-m", "analyzer", str(folder), "-q", "--jobs", "1", "--format", "text",
           "-o", str(out / names["text"]), "--json", str(out / names["json"]), "--github", str(out / names["github"]),
           "--junit", str(out / names["junit"]), "--sarif", str(out / names["sarif"])]
    for opt in extra:
        cmd += [opt, str(out / f"{opt.strip('-')}.html")]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
                           preexec_fn=_limit)
        code, err = r.returncode, r.stderr
    except subprocess.TimeoutExpired as exc:
        code, err = 124, (exc.stderr or b"").decode("utf-8", "replace") if isinstance(exc.stderr, bytes) else ""
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    took = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    docs = {f: (out / n).read_text(encoding="utf-8") for f, n in names.items() if (out / n).exists()}
    return code, err, took, docs


def judge(where: str, code: int, err: str, took: float, docs: dict[str, str]) -> None:
    """Raise AssertionError unless the run was a diagnosis within the limits, with clean CI-facing outputs."""
    from tests.fuzz.checks import CHECKS
    assert code != 124, f"{where}: ran past the {WALL_LIMIT_S:.0f} s wall-clock limit (blocked?)"
    assert took <= TIME_LIMIT_S, f"{where}: {took:.1f} s of CPU, more than {TIME_LIMIT_S:.0f} s"
    assert code in (0, 1, 2), f"{where}: exit {code} after {took:.1f} s: {err[-1500:]}"
    assert "Traceback" not in err and "MemoryError" not in err, f"{where}: {err[-1500:]}"
    # stderr carries the tool's own messages only: no library's RuntimeWarning / FutureWarning / ...
    assert not re.search(r"\w+Warning: ", err), f"{where}: a library warning on stderr: {err[-1500:]}"
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
