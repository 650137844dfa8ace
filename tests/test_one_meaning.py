"""Issue 23 item 3: one word, one meaning — the figure a rule decided on is shown next to it, under the name
docs/metrics.md gives it, in the text, Markdown, HTML and JSON reports alike.

Each case runs the CLI once on a committed folder (nothing from expected.json is passed in) and reads every
format it wrote; the numbers the texts show are recomputed from the JSON report's own tables.
"""
from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from statistics import median

import pytest

pytestmark = pytest.mark.slow  # loads real or 64+ rank folders: outside the everyday loop

ROOT = Path(__file__).resolve().parents[1]
STRAGGLER = ROOT / "fixtures/sim/tp_pp_dp_1f1b_straggler"
DLRM = ROOT / "fixtures/corpus/param-dlrm_kineto"


@functools.lru_cache(maxsize=None)
def _run(folder: Path) -> dict:
    """text (stdout), json, markdown and html of one CLI run on ``folder``."""
    with tempfile.TemporaryDirectory() as d:
        out = {k: Path(d) / f"r.{k}" for k in ("json", "md", "html")}
        p = subprocess.run([sys.executable, "-m", "analyzer", str(folder), "--json", str(out["json"]),
                            "--markdown", str(out["md"]), "--html", str(out["html"])],
                           capture_output=True, text=True, cwd=ROOT)
        assert p.returncode in (0, 1), p.stderr
        got = {k: v.read_text(encoding="utf-8") for k, v in out.items()}
    return {"text": p.stdout, "json": json.loads(got["json"]), "md": got["md"], "html": got["html"]}


def _findings(report: dict) -> list[dict]:
    """Every finding, the ones listed under a root cause included."""
    out = []
    for f in report["findings"]:
        out.append(f)
        out += f.get("consequences") or []
    return out


def _texts(f: dict) -> list[str]:
    """A finding's evidence lines (a root cause's consequences carry them as plain strings)."""
    return [e["text"] if isinstance(e, dict) else str(e) for e in f.get("evidence") or []]


def _one(report: dict, rid: str) -> dict:
    hits = [f for f in _findings(report) if f["id"] == rid]
    assert hits, f"no {rid} in {[f['id'] for f in _findings(report)]}"
    return hits[0]


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


@pytest.mark.slow
def test_load002_names_the_median_step_spread_and_the_worst_step_the_headline_shows():
    r = _run(STRAGGLER)
    rep = r["json"]
    spreads = [s["spread"] for s in rep["cross_rank"]["step_spread"] if s.get("spread") is not None]
    med, worst = median(spreads), max(spreads)
    assert _pct(worst) == _pct(rep["job"]["summary"]["max_step_time_spread"]) == "29.3%"
    title = _one(rep, "LOAD002")["title"]
    want = f"step spread {_pct(med)} (median over {len(spreads)} steps; worst step {_pct(worst)}; threshold 5.0%)"
    assert want in title and _pct(med) == "14.7%"
    for fmt in ("text", "md", "html"):  # the same words in every format, beside the headline's worst step
        assert want in r[fmt], fmt
        assert "worst-step spread" in r[fmt], fmt
        assert f"differs by {_pct(med)}" not in r[fmt], fmt


@pytest.mark.slow
def test_no_slowest_rank_the_step_waited_for_is_called_so():
    r = _run(STRAGGLER)
    ev = _texts(_one(r["json"], "LOAD002"))
    assert "rank the step waited for, per step: 9, 9" in ev and ev[0].endswith("rank the step waited for: 9"), ev
    waited = [s["slowest_rank"] for s in r["json"]["cross_rank"]["step_spread"]]
    # rank 9 is the one waited for, though its own step time is mid-range: the word must not say "slowest"
    own = {x["rank"]: x["mean_step_time_us"] for x in r["json"]["metrics"]["per_rank"]}
    assert waited == [9, 9] and own[9] < max(own.values())
    for fmt in ("text", "md", "html"):
        assert "slowest rank" not in r[fmt] and "is slowest in" not in r[fmt], fmt


@pytest.mark.slow
def test_wait_imposed_is_per_step_first_and_says_how_many_steps_it_sums():
    r = _run(STRAGGLER)
    row = next(x for x in r["json"]["cross_rank"]["stragglers"]["per_rank"] if x["rank"] == 9)
    n = len([s for s in r["json"]["cross_rank"]["stragglers"]["per_step"] if (s.get("step") or 0) >= 0])
    total = row["wait_imposed_us"] / 1000
    want = (f"summed over every rank that waited for it and every collective it was last in (so not comparable with "
            f"the delay above): {total / n:.2f} ms per step, {total:.2f} ms over {n} steps")
    assert n == 2 and want in " ".join(_texts(_one(r["json"], "LOAD001")))
    assert want in r["text"] and "ms in total" not in r["text"]
    # the per-rank table is "mean over steps": its wait-imposed column is per step too
    line = next(ln for ln in r["text"].splitlines() if re.match(r"\s+9\s+2\s+", ln))
    assert line.split()[-1] == f"{total / n:.3f}", line


@pytest.mark.slow
def test_net004_shows_measured_expected_efficiency_and_threshold():
    r = _run(STRAGGLER)
    f = _one(r["json"], "NET004")
    rows = [x for x in r["json"]["cross_rank"]["collectives"]["by_group_op"]
            if str(x["process_group"]) in {str(g) for g in ("9", "10", "11", "12", "13", "14", "15", "16")}]
    bw, exp = rows[0]["mean_busbw_gbps"], rows[0]["expected_busbw_gbps"]
    eff = f"{bw / exp:.0%}"
    assert f"busbw efficiency {eff} of the expected {exp:.0f} GB/s at 8.00 MB, threshold 80%" in f["title"]
    first = _texts(f)[0]
    assert first.startswith(f"measured busbw {bw:.1f} GB/s; expected busbw ~{exp:.0f} GB/s over nvlink")
    assert f"busbw efficiency {eff}, threshold busbw_min_frac 80%" in first and "datasheet" in first
    assert bw / exp < 0.8  # the figure shown is the one that made the rule fire
    for fmt in ("text", "md", "html"):  # the decision's line survives the short listings
        assert f"busbw efficiency {eff}" in r[fmt], fmt


@pytest.mark.slow
def test_a_role_a_finding_names_is_the_role_the_group_table_shows():
    r = _run(STRAGGLER)
    keys = set()
    for f in _findings(r["json"]):
        if f["id"] in ("COMM001", "COMM002"):
            for m in re.findall(r"-parallel \((\w+)\)|FSDP \((\w+)\)|pipeline \((\w+)\)", f["title"]):
                keys |= set(m) - {""}
    assert keys == {"tp"}
    roles = {g.get("judged_role") or g["role"] for g in r["json"]["cross_rank"]["process_groups"]}
    assert keys <= roles
    assert "exposed tensor-parallel (tp) communication" in r["text"]


def test_dlrm_all_to_all_keeps_its_name_and_the_world_group_shows_its_judged_role():
    r = _run(DLRM)
    g = r["json"]["cross_rank"]["process_groups"][0]
    assert (g["role"], g["judged_role"], g["ops"]) == ("world", "ep", {"alltoall": 5, "allreduce": 3})
    ops = sorted(x["op"] for x in r["json"]["cross_rank"]["collectives"]["by_group_op"])
    assert ops == ["allreduce", "alltoall"]
    for fmt in ("text", "md", "html"):
        assert "world (as ep)" in r[fmt], fmt
        assert "alltoall×5, allreduce×3" in r[fmt], fmt
        assert "sendrecv" not in r[fmt], fmt
