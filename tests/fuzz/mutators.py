"""Seeded, structure-aware mutators over the real fixtures: what a dying job, a bad disk or an attacker leaves.

Byte-level: truncation, byte flips, inserted/deleted/duplicated ranges, huge lines of pathological characters,
odd encodings (BOM, invalid UTF-8, NUL), gzip and damaged gzip. Structure-aware: JSON values swapped for other
types, extreme numbers, deep nesting, huge and hostile strings, removed keys; NCCL/stderr lines with hostile
tokens; Flight Recorder pickles re-pickled at every protocol after the same object mutations, plus memo bombs.
Every choice comes from one `random.Random`, so a seed reproduces an example exactly.
"""
from __future__ import annotations

import gzip
import pickle
import random
import re
from pathlib import Path
from typing import Any, Callable

import orjson

from parsers.safe_unpickle import safe_loads

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"

#: Strings that try to steer a terminal, a CI log, a Markdown/HTML/XML reader or an encoder.
HOSTILE = [
    "pg\n::error file=x.py,line=1::pwned", "\r::warning::forged", "  ::set-output name=x::y", "##[error]v1 command",
    "\x1b[31mred\x1b[0m", "\x1b]8;;http://evil\x07link\x1b]8;;\x07", "\x1b]0;title\x07", "\x9b31m", "\x07bell\x00nul",
    "lone \ud800 surrogate", "\udcff undecodable byte", "nonchar \ufffe\uffff", "bidi \u202eevil\u202c",
    "<script>alert(1)</script>", "a|b|c", "`code` *em* _u_ [l](http://x)", "&amp; &lt;", "]]>", "%0A%25",
    "line\u2028sep", "x\u2028::error::ls", "x\u2029::error::ps", "x\x85::error::nel", "x\x0b::error::vt",
    "x\x1e::error::rs", "tab\tsep", "x" * 5000, "\\", '"', "}, {", "]", "NCCL INFO", "a:1:2 NCCL WARN x",
]
#: Numbers at and beyond every boundary the parsers convert to.
EXTREME = [0, -1, 2**31, 2**63 - 1, 2**63, -2**63 - 1, 2**64, 10**30, 1e20, -1e20, 1e308, -1e308, 5e-324, 0.5,
           True, False, None, 10**400]
#: Characters whose long runs broke linear-time patterns or scanners.
RUNS = ["[", ":", "a", "0", " ", "\\", '"', "{", "}, {", "[1]x", ":1:1 ", "nccl", "NCCL error: ", "(", "\x00", "\xff"]


#: An example is cut to this size (the mutators could otherwise compound to gigabytes: the test, not the parser,
#: would be slow). Huge-input behaviour is measured by benchmarks/adversarial.py.
MAX_EXAMPLE_BYTES = 4 << 20


def read_fixture(rel: str) -> bytes:
    data = (FIXTURES / rel).read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


# ---------------------------------------------------------------------------------------- byte level
def truncate(rng: random.Random, b: bytes) -> bytes:
    return b[:rng.randrange(len(b) + 1)]


def flip(rng: random.Random, b: bytes) -> bytes:
    x = bytearray(b)
    for _ in range(rng.choice([1, 1, 2, 8, 64])):
        if x:
            i = rng.randrange(len(x))
            x[i] ^= 1 << rng.randrange(8) if rng.random() < 0.7 else rng.randrange(256)
    return bytes(x)


def insert(rng: random.Random, b: bytes) -> bytes:
    i = rng.randrange(len(b) + 1)
    junk = rng.choice([bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64))), b"NaN", b"\x00" * 100,
                       b"\xef\xbb\xbf", b"\xff\xfe", b"\n", b"\r\n", b"}", b"]", b"[", b"{", b",", b'"'])
    return b[:i] + junk + b[i:]


def delete(rng: random.Random, b: bytes) -> bytes:
    if not b:
        return b
    i = rng.randrange(len(b))
    return b[:i] + b[i + rng.randrange(1, 200):]


def duplicate(rng: random.Random, b: bytes) -> bytes:
    if not b:
        return b
    i = rng.randrange(len(b))
    j = min(len(b), i + rng.randrange(1, 4000))
    return b[:j] + b[i:j] * rng.randrange(1, 4) + b[j:]


def huge_run(rng: random.Random, b: bytes) -> bytes:
    run = rng.choice(RUNS).encode("utf-8", "surrogatepass") if True else b""
    n = rng.choice([1000, 20000, 70000, 200000])
    i = rng.randrange(len(b) + 1)
    return b[:i] + run * (n // len(run)) + b[i:]


def bom(rng: random.Random, b: bytes) -> bytes:
    return b"\xef\xbb\xbf" + b


def as_gzip(rng: random.Random, b: bytes) -> bytes:
    z = gzip.compress(b, compresslevel=rng.choice([1, 6, 9]))
    how = rng.choice(["plain", "cut", "flip", "members", "garbage", "trailing"])
    if how == "cut":
        z = z[:rng.randrange(len(z) + 1)]
    elif how == "flip" and len(z) > 20:
        x = bytearray(z)
        x[rng.randrange(10, len(x))] ^= 0xFF
        z = bytes(x)
    elif how in ("members", "garbage"):
        k = rng.randrange(len(b) + 1)
        z = gzip.compress(b[:k]) + (b"GARBAGE\x00" * rng.randrange(1, 20) if how == "garbage" else b"") \
            + gzip.compress(b[k:])
    elif how == "trailing":
        z += bytes(rng.randrange(256) for _ in range(rng.randrange(1, 50)))
    return z


def deflate_bomb(rng: random.Random, b: bytes) -> bytes:
    return gzip.compress(b"\x00" * (1 << 24))  # 16 MB of zeros in ~16 KB: more than 200x its size


BYTE_MUTATIONS: list[Callable[[random.Random, bytes], bytes]] = [
    truncate, flip, insert, delete, duplicate, huge_run, bom, as_gzip]


# ---------------------------------------------------------------------------------------- JSON structure
def _nodes(obj: Any, max_depth: int = 24, limit: int = 5000) -> list[tuple]:
    """Paths of the object's nodes (iterative, shallow nodes only: a mutated object may already be deep)."""
    out, stack = [], [((), obj)]
    while stack and len(out) < limit:
        path, o = stack.pop()
        out.append(path)
        if len(path) >= max_depth:
            continue
        if isinstance(o, dict):
            stack.extend((path + (k,), v) for k, v in list(o.items())[:200])
        elif isinstance(o, list):
            stack.extend((path + (i,), v) for i, v in enumerate(o[:400]))
    return out


def _set(obj: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    cur = obj
    for k in path[:-1]:
        cur = cur[k]
    cur[path[-1]] = value
    return obj


def hostile_value(rng: random.Random) -> Any:
    kind = rng.randrange(7)
    if kind == 0:
        return rng.choice(HOSTILE)
    if kind == 1:
        return rng.choice(EXTREME)
    if kind == 2:  # deep nesting: a marker the writers expand (no recursive serialiser survives 3000 levels)
        return f"@@DEEP:{rng.choice([50, 200, 1100, 3000])}:{rng.choice('ld')}@@"
    if kind == 3:
        return rng.choice(HOSTILE) * rng.choice([10, 1000])
    if kind == 4:
        return [rng.choice(EXTREME) for _ in range(rng.randrange(5))]
    if kind == 5:
        return {rng.choice(HOSTILE): rng.choice(EXTREME)}
    return rng.choice([{}, [], "", None])


def mutate_object(rng: random.Random, obj: Any, n: int) -> Any:
    """``n`` random structural edits of a decoded JSON / pickle object (in place where possible)."""
    for _ in range(n):
        nodes = _nodes(obj)
        path = rng.choice(nodes[1:] or nodes)
        op = rng.randrange(4)
        try:
            if op == 3 and path:  # delete the key / element
                parent = obj
                for k in path[:-1]:
                    parent = parent[k]
                del parent[path[-1]]
            elif op == 2 and path and isinstance(path[-1], str):  # rename a key to a hostile one
                parent = obj
                for k in path[:-1]:
                    parent = parent[k]
                parent[rng.choice(HOSTILE)] = parent.pop(path[-1])
            else:
                obj = _set(obj, path, hostile_value(rng))
        except (KeyError, IndexError, TypeError):
            pass
    return obj


_DEEP = re.compile(r'"@@DEEP:(\d+):([ld])@@"')


def _deep_objects(obj: Any) -> Any:
    """Expand the deep-nesting markers into real nested lists/dicts (at most 800 levels: pickle recurses)."""
    if isinstance(obj, str) and obj.startswith("@@DEEP:"):
        n, k = obj[7:-2].split(":")
        v: Any = 1
        for _ in range(min(int(n), 800)):
            v = [v] if k == "l" else {"a": v}
        return v
    if isinstance(obj, dict):
        return {k: _deep_objects(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_deep_objects(v) for v in obj]
    return obj


def _dump_json(rng: random.Random, obj: Any) -> bytes:
    """JSON text that may hold what orjson refuses to write: lone surrogates, NaN, 1e400, 20-digit integers."""
    try:
        text = orjson.dumps(obj, default=str).decode()
    except (TypeError, orjson.JSONEncodeError):
        import json
        text = json.dumps(obj, default=str, ensure_ascii=True)  # writes "\ud800" escapes and huge integers
    text = _DEEP.sub(lambda m: ("[" * int(m.group(1)) + "1" + "]" * int(m.group(1))) if m.group(2) == "l" else
                     ('{"a":' * int(m.group(1)) + "1" + "}" * int(m.group(1))), text)
    if rng.random() < 0.2:
        text = text.replace('"ts": ', '"ts": NaN, "x": ', 1).replace('"ts":', '"ts":NaN,"x":', 1)
    if rng.random() < 0.1:
        text = text.replace('"dur":', '"dur":1e400,"y":', 1)
    return text.encode("utf-8", "surrogatepass")


def mutate_json(rng: random.Random, data: bytes) -> bytes:
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return flip(rng, data)
    return _dump_json(rng, mutate_object(rng, obj, rng.choice([1, 2, 5, 20])))


# ---------------------------------------------------------------------------------------- text logs
def mutate_lines(rng: random.Random, data: bytes) -> bytes:
    lines = data.split(b"\n")
    for _ in range(rng.choice([1, 3, 10])):
        if not lines:
            break
        i = rng.randrange(len(lines))
        words = lines[i].split(b" ")
        j = rng.randrange(len(words))
        tok = rng.choice(HOSTILE + [str(x) for x in EXTREME]).encode("utf-8", "surrogatepass")
        what = rng.randrange(4)
        if what == 0:
            words[j] = tok
        elif what == 1:
            words.insert(j, tok)
        elif what == 2:
            words[j] = (words[j] * rng.choice([2, 100, 5000]))[:200_000]
        else:
            lines.insert(i, (lines[i] * rng.choice([2, 50]))[:400_000])
        lines[i] = b" ".join(words)
    return b"\n".join(lines)


# ---------------------------------------------------------------------------------------- pickles
def memo_bomb(rng: random.Random, data: bytes) -> bytes:
    idx = rng.choice([2**20, 2**28, 2**31 - 1, 2**32 - 1])
    return b"\x80\x02}r" + idx.to_bytes(4, "little") + b"."


def mark_flood(rng: random.Random, data: bytes) -> bytes:
    return data[:rng.randrange(2, max(3, len(data)))] + b"(" * rng.choice([1000, 50000])


#: Opcodes whose argument length the file states (1, 4 or 8 bytes of prefix): a prefix past the end of the data
#: must be refused before the unpickler allocates it (parsers/safe_unpickle.py).
LENGTH_OPCODES = [(b"\x8e", 8), (b"\x8d", 8), (b"\x96", 8), (b"\x8b", 4), (b"B", 4), (b"X", 4), (b"T", 4),
                  (b"C", 1), (b"\x8c", 1), (b"\x8a", 1)]


def length_lie(rng: random.Random, data: bytes) -> bytes:
    """A length-prefixed opcode announcing up to 2**64 - 1 bytes, spliced in with a few bytes after it."""
    op, w = rng.choice(LENGTH_OPCODES)
    n = rng.choice([(1 << (8 * w)) - 1, (1 << (8 * w - 1)) - 1, 1 << (8 * w - 2), 1 << 31 if w > 4 else 255])
    i = rng.randrange(2, max(3, len(data)))
    return data[:i] + op + min(n, (1 << (8 * w)) - 1).to_bytes(w, "little") + data[i:i + rng.randrange(64)]


def mutate_pickle(rng: random.Random, data: bytes) -> bytes:
    try:
        obj = safe_loads(data)
    except Exception:  # noqa: BLE001 - a fixture the restricted unpickler refuses: mutate its bytes
        return flip(rng, data)
    obj = _deep_objects(mutate_object(rng, obj, rng.choice([1, 2, 5, 20])))
    try:
        return pickle.dumps(obj, protocol=rng.randrange(0, pickle.HIGHEST_PROTOCOL + 1))
    except (RecursionError, ValueError, TypeError):
        return data


def mutate(rng: random.Random, data: bytes, kind: str) -> bytes:
    """One example of damaged input of ``kind`` (trace | log | stderr | fr_pickle | fr_json | ras) from a clean
    fixture."""
    structural = {"trace": [mutate_json], "fr_json": [mutate_json], "log": [mutate_lines], "stderr": [mutate_lines],
                  "fr_pickle": [mutate_pickle, memo_bomb, mark_flood, length_lie],
                  "ras": [mutate_json] if data.lstrip()[:1] == b"{" else [mutate_lines]}[kind]
    out = data
    for _ in range(rng.choice([1, 1, 2, 3])):
        op = rng.choice(structural * 3 + BYTE_MUTATIONS)
        if op is as_gzip and kind.startswith("fr"):
            op = flip
        out = op(rng, out)[:MAX_EXAMPLE_BYTES]
        if out[:2] == b"\x1f\x8b":
            break  # a compressed file is the last step (bytes mutated after would only be a flip)
    if kind == "trace" and rng.random() < 0.02:
        out = deflate_bomb(rng, out)
    return out


#: Names a hostile folder may give its files (control characters, CI commands, undecodable bytes).
HOSTILE_NAMES = ["rank0.json", "rank0\n::error file=x::y.json", "\x1b[31mrank1\x1b[0m.json", "rank\udcff2.json",
                 "r##[error]k3.json", "rank 4 <b>.json", "rank5|x`y`.json", "rank6\u202e.json", "rank7\ufffe.json"]


def hostile_name(rng: random.Random, kind: str) -> str:
    base = rng.choice(HOSTILE_NAMES)
    stem = base[:-5]
    return {"trace": stem + rng.choice([".json", ".pt.trace.json"]), "log": stem.replace("rank", "nccl_rank") + ".log",
            "fr_pickle": "nccl_trace_rank_" + stem[4:] if rng.random() < 0.5 else "nccl_trace_rank_0",
            "fr_json": "nccl_trace_" + stem + ".json", "stderr": stem + rng.choice([".stderr", ".err", "-stderr.log"]),
            "ras": stem + rng.choice(["-ncclras.txt", ".ras.json", "_ras.log"])}[kind]


#: The clean seeds of each kind (small real and simulated fixtures).
SEEDS = {
    "trace": ["real-cpu/ddp-straggler/rank0.pt.trace.json.gz", "sim/ddp_clean/rank0.pt.trace.json.gz",
              "sim/tp_dp_clean/rank1.pt.trace.json.gz"],
    "log": ["nccl_logs/real_public_lines.log", "sim/ddp_clean/nccl_rank0.log", "real-cpu-hang/mismatched_op/rank0.stderr",
            "nccl_logs/synthetic_2x2_nccl2.21_hang.log"],
    "stderr": ["stderr/gpu-shapes/cuda_oom.log", "stderr/gpu-shapes/nccl_errors.log",
               "stderr/real-cpu/exit_code_rank/torchrun.log",
               "stderr/gpu-shapes/cuda_device_assert.log",
               "real-cpu-hang/size_mismatch_abort/rank0.stderr"],
    "fr_pickle": ["real-cpu-hang/mismatched_op/nccl_trace_rank_0", "real-cpu-hang/missing_rank/nccl_trace_rank_3"],
    "fr_json": ["sim/hang_mismatched_op/nccl_trace_rank_0.json", "sim/hang_stalled_rank/nccl_trace_rank_1.json"],
    "ras": ["nccl_ras/stalled8_text/ncclras_status.txt", "nccl_ras/ahead16_text/ras.log",
            "nccl_ras/dead4_json/ras_status.json", "nccl_ras/monitor_dead/ncclras_monitor.log"],
}
