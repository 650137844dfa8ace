"""The hang post-mortem on every real failure folder, taken the user's way: `analyzer.load(folder)` (what `analyze
DIR` runs) with nothing from `expected.json` handed in. Only the scoring reads `expected.json`.

`analysed(folder)` is cached (one analysis per folder for every test that asks); `score(folder)` grades the first
finding: right (names exactly the culprit), tie (an honest tie / unknown below 0.5), wrong, or healthy (a finding
blames a healthy rank at confidence >= 0.5); `table()` is the table of docs/hang-analysis.md
(`python -m tests.hang_user_path` prints it).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import analyzer

ROOT = Path(__file__).resolve().parent.parent / "fixtures"
BEDS = ("real-cpu-failures", "real-cpu-failures-2", "real-cpu-failures-3", "real-cpu-failures-4", "real-cpu-hang",
        "corpus/nvrx-fr-moe16")
BEGIN, END = "<!-- user-path table: begin -->", "<!-- user-path table: end -->"


def cases(bed: str | None = None) -> list[Path]:
    """Every real failure folder (one with an expected.json) of one bed, or of all of them."""
    beds = [bed] if bed else list(BEDS)
    return [p.parent for b in beds for p in sorted((ROOT / b).glob("*/expected.json"))]


@dataclass
class UserPath:
    """What a user gets from one folder: the report's verdict, its hang section as objects, and the truth."""

    exp: dict
    report: dict
    diagnoses: list[Any]
    ranks_without_dump: dict[int, str]

    @property
    def verdict(self) -> str:
        return str(self.report.get("verdict", ""))

    @property
    def top(self) -> Any:
        return self.diagnoses[0] if self.diagnoses else None


def _diag(row: dict) -> SimpleNamespace:
    """One diagnosis of the report's JSON hang section with int rank keys again (as HangDiagnosis has them)."""
    d = dict(row)
    for key in ("ops", "sizes", "dtypes"):
        d[key] = {int(k): v for k, v in (row.get(key) or {}).items()}
    d["evidence"] = [(e["file"], e["line"], e["text"]) for e in row.get("evidence") or []]
    return SimpleNamespace(**d)


@lru_cache(maxsize=None)
def analysed(case: Path) -> UserPath:
    """The folder analysed as `analyze DIR` does (one parser process), with its ground truth beside it."""
    exp = json.loads((case / "expected.json").read_text())
    with analyzer.load(case, jobs=1) as a:
        report = a.report
    hang = report.get("hang") or {}
    return UserPath(exp, report, [_diag(x) for x in hang.get("diagnoses") or []],
                    {int(k): v for k, v in (hang.get("ranks_without_dump") or {}).items()})


def culprits(exp: dict) -> set[int]:
    return {int(r) for f in exp.get("faults") or [] for r in f.get("ranks") or []}


def healthy(exp: dict) -> set[int]:
    if "healthy_ranks" in exp:
        return {int(r) for r in exp["healthy_ranks"]}
    return set(range(int(exp.get("world_size") or 0))) - culprits(exp)


def blames_healthy(u: UserPath) -> list[tuple]:
    """Findings that name a healthy rank at confidence >= 0.5 (a tie says it cannot tell, so it is exempt)."""
    ok = healthy(u.exp)
    return [(d.kind, d.culprit_ranks, d.confidence) for d in u.diagnoses
            if d.confidence >= 0.5 and not d.tie and set(d.culprit_ranks) & ok]


def shows_failure(exp: dict) -> bool:
    """The job crashed, hung or never formed: its inputs show it (a job that finished with wrong results, e.g. a
    different reduce op on one rank, leaves nothing that says so)."""
    return exp.get("job_outcome") not in ("finished_ok", "finished", "finished_wrong_results") and bool(exp.get("faults"))


def score(case: Path) -> str:
    """right | tie | wrong | healthy | OK (a failure given verdict OK) | unseen (the job finished and nothing in
    the inputs shows its fault, and no finding claims one) — the first finding against the truth."""
    u = analysed(case)
    if blames_healthy(u):
        return "healthy"
    if shows_failure(u.exp) and u.verdict.startswith("OK"):
        return "OK"
    faults = u.exp.get("faults") or []
    top = u.top
    if u.exp.get("job_outcome") == "stopped_externally":  # its own kind, naming no rank
        named = [d for d in u.diagnoses if d.culprit_ranks and d.confidence >= 0.5]
        return "right" if top is not None and top.kind == "stopped_externally" and not named else "wrong"
    if not faults:
        return "right" if not [d for d in u.diagnoses if d.confidence >= 0.5] else "wrong"
    if top is None:
        return "unseen" if not shows_failure(u.exp) else "wrong"
    if faults[0]["kind"] == "rendezvous_failure":
        return "right" if top.kind == "rendezvous_failure" else "wrong"
    want = [sorted(int(r) for r in f["ranks"]) for f in faults]
    if top.culprit_ranks in want and not top.tie and top.confidence >= 0.5:
        return "right"
    if top.confidence < 0.5 and (top.tie or not top.culprit_ranks) and top.cause:
        return "tie" if not top.culprit_ranks or set(want[0]) <= set(top.culprit_ranks) else "wrong"
    return "wrong"


def first_finding(case: Path) -> str:
    top = analysed(case).top
    if top is None:
        return "no finding"
    who = ",".join(map(str, top.culprit_ranks)) or "no culprit"
    where = f" `{top.process_group}`:{top.seq}" if top.process_group and top.seq is not None else ""
    return f"{top.kind} {who}{where} ({top.confidence:.2f}{', tie' if top.tie else ''})"


def source_kind(src: str) -> str:
    """The world size's source in two words (the report's sentence names files, which differ per machine)."""
    for key, word in (("given", "given"), ("profiler traces", "traces"), ("pg_config", "pg_config"),
                      ("at least", "largest rank + 1"), ("above the stated size", "largest rank + 1")):
        if key in src:
            return word
    return "launcher log" if src else "not shown"


def _truth(exp: dict) -> str:
    f = (exp.get("faults") or [{}])[0]
    return f"{f.get('kind', 'none')} {','.join(map(str, f.get('ranks') or [])) or '-'}"


def held_out(case: Path) -> bool:
    """A case of the newest bed kept out of tuning (its expected.json says so)."""
    return case.parent.name in ("real-cpu-failures-3", "real-cpu-failures-4") and \
        bool(analysed_truth(case).get("held_out"))


def analysed_truth(case: Path) -> dict:
    return json.loads((case / "expected.json").read_text())


def table(beds: tuple[str, ...] = BEDS, include_held_out: bool = True) -> str:
    """Per real failure folder: the planted fault, the world size the analysis inferred and from what, the first
    finding through the user's path and its score; the tally per bed (held-out cases counted apart).
    `include_held_out=False` leaves the held-out cases unanalysed (while tuning)."""
    out = ["| bed | case | planted | world size (from) | first finding | score |", "|---|---|---|---|---|---|"]
    tally: dict[tuple[str, bool], dict[str, int]] = {}
    for bed in beds:
        for case in cases(bed):
            if not include_held_out and held_out(case):
                continue
            u = analysed(case)
            job = u.report.get("job") or {}
            ws = f"{job.get('world_size') or '-'} ({source_kind(job.get('world_size_source') or '')})"
            s = score(case)
            held = held_out(case)
            tally.setdefault((bed, held), {}).setdefault(s, 0)
            tally[(bed, held)][s] += 1
            out.append(f"| {bed} | `{case.name}` | {_truth(u.exp)} | {ws} | {first_finding(case)} | {s} |")
    out.append("")
    for (bed, held), t in sorted(tally.items()):
        n = sum(t.values())
        out.append(f"- {bed}{' (held out)' if held else ''}: {n} cases — " + ", ".join(
            f"{k} {t.get(k, 0)}" for k in ("right", "tie", "unseen", "wrong", "healthy", "OK")))
    return "\n".join(out)


if __name__ == "__main__":
    import sys
    args = [a for a in sys.argv[1:] if a != "--tuning"]
    print(table(tuple(args) or BEDS, include_held_out="--tuning" not in sys.argv))
