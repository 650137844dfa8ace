"""The comparison table of docs/hang-analysis.md ("Compared with fr_trace"): per real failure case, the planted
fault, this tool's first finding, torchrun's root-cause pick and PyTorch's own analyzer (fr_trace) as the failure
bed's README records it. `python -m tests.hang_vs_fr_trace` prints the table; a test keeps the doc equal to it."""
from __future__ import annotations

import re
from pathlib import Path

from tests import hang_user_path

BED = Path(__file__).resolve().parent.parent / "fixtures" / "real-cpu-failures"
BEGIN, END = "<!-- fr_trace table: begin -->", "<!-- fr_trace table: end -->"


def readme_rows() -> dict[str, dict[str, str]]:
    """The failure bed README's case table: case → column → cell text."""
    lines = [x for x in (BED / "README.md").read_text().splitlines() if x.startswith("| ")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    out = {}
    for line in lines[1:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == len(head) and (m := re.fullmatch(r"`([^`]+)`", cells[0])):
            out[m.group(1)] = dict(zip(head, cells))
    return out


def analyse(case: Path):
    """(expected.json, what `analyze DIR` gives) of one case folder: the user's path, nothing handed in."""
    u = hang_user_path.analysed(case)
    return u.exp, u


def ours(case: Path, analysed=analyse) -> str:
    """This tool's first finding, in a few words."""
    _, rep = analysed(case)
    if not rep.diagnoses:
        return "no finding"
    d = rep.diagnoses[0]
    who = ",".join(map(str, d.culprit_ranks)) or "no culprit"
    where = f" `{d.process_group}`:{d.seq}" if d.process_group and d.seq is not None else ""
    return f"{d.kind} {who}{where} ({d.confidence:.2f}{', tie' if d.tie else ''})"


def verdict(planted: str, culprit: str, mine: str) -> str:
    """✓ when the first finding names exactly the planted culprit(s) (or, with none planted, blames nobody)."""
    want = set(culprit.replace(";", ",").split(",")) - {"-", ""}
    m = re.match(r"\S+ ([\d,]+|no culprit)", mine)
    got = set(m.group(1).split(",")) - {"no culprit"} if m else set()
    return "✓" if got == want and "tie" not in mine else ("tie" if "tie" in mine and want <= got else "✗")


def table(analysed=analyse) -> str:
    rows = readme_rows()
    out = ["| case | planted | culprit | this tool's first finding | | torchrun root cause | fr_trace as is | "
           "fr_trace given pg_config |", "|---|---|---|---|---|---|---|---|"]
    for name in sorted(rows):
        r = rows[name]
        mine = ours(BED / name, analysed)
        out.append(f"| `{name}` | {r['kind']} | {r['culprit']} | {mine} | {verdict(r['kind'], r['culprit'], mine)} "
                   f"| {r['torchrun root cause']} | {r['fr_trace as is']} | {r['fr_trace given pg_config']} |")
    return "\n".join(out)


if __name__ == "__main__":
    print(table())
