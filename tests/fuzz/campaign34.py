"""The #34 mutation campaign over fresh real inputs: fixtures/real-cpu-hostile4 (a 3-rank gloo run whose traces
carry memory events and Python stacks, ending in a real hang with Flight Recorder dumps as pickles and as JSON).

Each case copies the bed, damages one to three of its files with the suite's mutators (tests/fuzz/mutators.py)
and the round-4 classes (tests/fuzz/hostile_cases.py), runs the command as a user does (every CI-facing
output, sometimes --html and --timeline) and judges it as the suite does (hostile_cases.judge: 2 GB, 20 s of CPU,
exit 0/1/2, no traceback, no library warning) and for silent loss of a rank (a rank whose trace is absent from the
report must have its file listed as failed or skipped, with the reason).

`python -m tests.fuzz.campaign34 N SEED [FOLDER ...]` runs N cases (every other one over each FOLDER given: another
real folder, e.g. one with torchrun's log-dir layout and restarts, whose files are mutated by kind) and prints a
summary; tests/test_hostile_round4.py runs a few.
"""
from __future__ import annotations

import gzip
import json
import random
import re
import shutil
import sys
from pathlib import Path

from tests.fuzz import hostile_cases as hc
from tests.fuzz import mutators as mu

BED = mu.FIXTURES / "real-cpu-hostile4"
RANKS = (0, 1, 2)


def _gz(p: Path, data: bytes, rng: random.Random) -> None:
    p.write_bytes(gzip.compress(data, compresslevel=1) if rng.random() < 0.7 else data)


def _inflated(p: Path) -> bytes:
    """The file's JSON text (a rank damaged twice may be plain or broken gzip by now: its bytes as they are)."""
    raw = p.read_bytes()
    try:
        return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    except (OSError, EOFError):
        return raw


def damage_trace(p: Path, rng: random.Random) -> str:
    data = _inflated(p)
    what = rng.choice(["mutate", "mutate", "base_time", "surrogate", "gzip_flip", "cut", "steps", "empty"])
    if what == "mutate":
        data = mu.mutate(rng, data, "trace")
        p.write_bytes(data)  # gzip or not, as the mutator left it
        return what
    if what == "base_time":
        v = rng.choice([str(2**63 + 1), "1e21", "1e300", '"x"', "-1e300", "true", str(10**40)])
        data = data.replace(b'"baseTimeNanoseconds":', b'"baseTimeNanoseconds": ' + v.encode() + b', "old":', 1)
    elif what == "surrogate":
        for key in (b'"host_name": "', b'"name": "thread ', b'"name": "aten::'):
            if rng.random() < 0.6:
                data = data.replace(key, key + rng.choice([b"\\ud800", b"\\udfff"]), rng.choice([1, 5]))
    elif what == "gzip_flip":
        z = bytearray(gzip.compress(data, compresslevel=6))
        z[rng.randrange(len(z) // 10, len(z) - 8)] ^= 1 << rng.randrange(8)
        p.write_bytes(bytes(z))
        return what
    elif what == "cut":
        data = data[:int(len(data) * rng.uniform(0.001, 0.5))]
    elif what == "steps":
        k = rng.choice([100, 10**6])
        data = re.sub(rb"ProfilerStep#(\d+)", lambda m: b"ProfilerStep#" + str(int(m.group(1)) + k).encode(), data)
    elif what == "empty":
        data = rng.choice(hc.EMPTY_TRACES)
    _gz(p, data, rng)
    return what


def damage_dump(d: Path, rng: random.Random) -> str:
    r = rng.choice(RANKS)
    what = rng.choice(["mutate", "mutate_json", "both_formats", "relabel", "big_group"])
    p = d / f"nccl_trace_rank_{r}"
    if what == "mutate":
        p.write_bytes(mu.mutate(rng, p.read_bytes(), "fr_pickle"))
    elif what == "mutate_json":
        q = BED / "fr_json" / f"nccl_trace_rank_{r}.json"
        (d / q.name).write_bytes(mu.mutate(rng, q.read_bytes(), "fr_json"))
    elif what == "both_formats":
        shutil.copy(BED / "fr_json" / f"nccl_trace_rank_{r}.json", d)
    elif what == "relabel":  # a JSON dump of another rank claiming rank r
        other = rng.choice([x for x in RANKS if x != r])
        obj = json.loads((BED / "fr_json" / f"nccl_trace_rank_{other}.json").read_text())
        obj["rank"] = r
        (d / f"nccl_trace_rank_{other}.json").write_text(json.dumps(obj))
        (d / f"nccl_trace_rank_{other}").unlink()
    else:
        p.write_bytes(hc.big_group_dump(p, rng.choice([4096, 16384])))
    return f"dump:{what}"


def damage_log(d: Path, rng: random.Random) -> str:
    p = d / f"rank{rng.choice(RANKS)}.stderr"
    p.write_bytes(mu.mutate(rng, p.read_bytes(), "stderr"))
    return "stderr"


def build(d: Path, rng: random.Random) -> tuple[Path, list[str], set[int]]:
    """(folder, what was done, ranks whose trace was damaged)."""
    shutil.copytree(BED, d, ignore=shutil.ignore_patterns("fr_json", "make_run.py", "README.md", "torchrun.log"))
    done, hit = [], set()
    for _ in range(rng.choice([1, 1, 2, 3])):
        kind = rng.choice(["trace", "trace", "dump", "log"])
        if kind == "trace":
            r = rng.choice(RANKS)
            hit.add(r)
            done.append(f"rank{r}:" + damage_trace(d / f"rank{r}.pt.trace.json.gz", rng))
        elif kind == "dump":
            done.append(damage_dump(d, rng))
        else:
            done.append(damage_log(d, rng))
    return d, done, hit


def _kind(p: Path) -> str:
    """The mutator kind of a file of a foreign folder, from its name."""
    n = p.name
    if ".pt.trace." in n or n.endswith(".json.gz"):
        return "trace"
    if n.startswith("nccl_trace_rank_"):
        return "fr_json" if n.endswith(".json") else "fr_pickle"
    return "stderr"


def build_other(src: Path, d: Path, rng: random.Random) -> tuple[Path, list[str]]:
    """Another real folder (torchrun log-dir layouts, restarts, JSON dumps) with one to three files mutated."""
    shutil.copytree(src, d, ignore=shutil.ignore_patterns("expected.json", "facts.json", "*.py", "README.md"))
    files = sorted(p for p in d.rglob("*") if p.is_file())
    done = []
    for p in rng.sample(files, min(len(files), rng.choice([1, 1, 2, 3]))):
        raw = p.read_bytes()
        data = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
        p.write_bytes(mu.mutate(rng, data, _kind(p)))
        done.append(f"{p.relative_to(d)}:{_kind(p)}")
    return d, done


def silent_losses(doc: dict, d: Path) -> list[int]:
    """Ranks of the bed absent from the report whose trace file is not listed as failed/skipped with a reason."""
    have = {r["rank"] for r in doc.get("ranks") or []}
    files = {Path(f["path"]).name: f for f in doc["inputs"]["files"]}
    lost = []
    for r in RANKS:
        if r in have:
            continue
        f = files.get(f"rank{r}.pt.trace.json.gz")
        if f is None or f["status"] not in ("failed", "skipped") or not f.get("message"):
            lost.append(r)
    return lost


def run_case(tmp: Path, seed: int, i: int, other: Path | None = None) -> tuple[bool, str, float]:
    rng = random.Random(f"campaign34-{seed}-{i}")
    if other is None:
        d, done, _ = build(tmp / f"case{i}", rng)
    else:
        d, done = build_other(other, tmp / f"case{i}", rng)
    extra = ("--html", "--timeline") if rng.random() < 0.3 else ()
    code, err, cpu, docs = hc.run_cli(d, tmp / f"out{i}", extra=extra)  # the suite's limits (CPU, wall, memory)
    where = f"seed {seed} case {i} ({', '.join(done)}{' +html/timeline' if extra else ''}; {cpu:.1f} s CPU)"
    try:
        hc.judge(where, code, err, cpu, docs)
        lost = silent_losses(json.loads(docs["json"]), d) if other is None else []
        assert not lost, f"{where}: rank(s) {lost} lost without a failed/skipped record"
    except AssertionError as exc:
        return False, str(exc), cpu
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return True, where, cpu


def main(argv: list[str]) -> int:
    import tempfile
    n, seed = (int(argv[0]) if argv else 20), (int(argv[1]) if len(argv) > 1 else 0)
    others = [Path(a) for a in argv[2:]]  # other real folders to mutate, in turn with the bed
    bad, times = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(n):
            other = others[i % (len(others) + 1) - 1] if others and i % (len(others) + 1) else None
            ok, what, took = run_case(Path(tmp), seed, i, other)
            times.append(took)
            print(("ok   " if ok else "FAIL ") + f"{took:5.1f} s {what[:300]}", flush=True)
            if not ok:
                bad.append(what)
    print(f"{n} cases, {len(bad)} failed; CPU: slowest {max(times):.1f} s, median {sorted(times)[len(times) // 2]:.1f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
