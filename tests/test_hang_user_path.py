"""Every real failure folder under fixtures/, analysed the way a user runs `analyze DIR` (tests/hang_user_path.py:
`analyzer.load(folder)`, nothing from expected.json handed in; only the assertions read it):

- the world size is inferred from the folder (the dumps' pg_config, the largest rank seen) and the report says
  from what; `--world-size` / `load(world_size=)` override it;
- no folder that shows a failure gets verdict OK;
- the first finding names the culprit exactly, or is an honest tie / unknown below 0.5 that says why;
- no finding blames a healthy rank at confidence >= 0.5.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import analyzer
from analyzer.load.world import infer_world_size
from parsers.launch_config import size_statements
from tests import hang_user_path as up

CASES = up.cases()  # the held-out cases of bed 3 too: analysed once the code was frozen
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
# folders whose inputs state no size and name no rank: a rendezvous that failed before any rank printed
NO_SIZE_SHOWN = {"rdzv_eaddrinuse", "rdzv_missing_node"}


def _id(p: Path) -> str:
    return f"{p.parent.name}/{p.name}"


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=_id)
def test_a_failure_is_never_ok(case: Path) -> None:
    u = up.analysed(case)
    if up.shows_failure(u.exp):
        assert not u.verdict.startswith("OK"), (u.verdict, [d.kind for d in u.diagnoses])


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=_id)
def test_first_finding_is_the_culprit_or_an_honest_tie(case: Path) -> None:
    got = up.score(case)
    assert got in ("right", "tie") or (got == "unseen" and not up.shows_failure(up.analysed(case).exp)), (
        got, up.first_finding(case))
    top = up.analysed(case).top
    if got == "tie" and top is not None:
        assert top.confidence < 0.5 and top.cause


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=_id)
def test_no_healthy_rank_is_blamed(case: Path) -> None:
    assert not up.blames_healthy(up.analysed(case))


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=_id)
def test_the_world_size_is_inferred_and_its_source_said(case: Path) -> None:
    job = up.analysed(case).report["job"]
    if case.name in NO_SIZE_SHOWN:
        assert job["world_size"] is None and job["world_size_source"] == ""
        return
    assert job["world_size"] == up.analysed(case).exp["world_size"]
    assert job["world_size_source"]


@pytest.mark.slow
def test_the_two_folders_the_issue_names() -> None:
    """json_dumps_missing_rank read OK (rank 4, no dump, dropped out of the world); the MoE case blamed the
    healthy receivers 3 and 5 at 0.9. pg_config's world entry and the `[default5]:` prefix show the size."""
    u = up.analysed(FIXTURES / "real-cpu-failures" / "json_dumps_missing_rank")
    assert u.verdict.startswith("FAIL") and (u.top.kind, u.top.culprit_ranks) == ("missing_rank", [4])
    assert u.report["job"]["world_size_source"].endswith("the world entry '' lists ranks 0-4")
    u = up.analysed(FIXTURES / "real-cpu-failures-2" / "moe_ep_replicas_skipped_split_exchange_wrapped")
    assert (u.top.culprit_ranks, u.top.process_group, u.top.seq) == ([4], "2", 46)
    assert u.report["job"]["world_size"] == 6
    assert u.report["job"]["world_size_source"].startswith("at least: the largest rank seen is 5")


def test_world_size_override_through_the_cli(tmp_path: Path, capsys) -> None:
    """--world-size N is what the analysis uses, and the report says it was given."""
    from analyzer.cli import main
    out = tmp_path / "r.json"
    case = FIXTURES / "real-cpu-hang" / "missing_rank"
    assert main([str(case), "--world-size", "6", "--jobs", "1", "-q", "--json", str(out)]) == 1
    job = json.loads(out.read_text())["job"]
    assert (job["world_size"], job["world_size_source"]) == (6, "given (--world-size)")
    with pytest.raises(SystemExit) as exc:
        main([str(case), "--world-size", "0", "-q"])
    assert exc.value.code == 2 and "--world-size: must be at least 1" in capsys.readouterr().err
    with pytest.raises(ValueError, match="world_size"):
        analyzer.load(case, world_size=-3)


def test_world_size_from_torchrun_info_lines() -> None:
    """A real torchrun (torch 2.13, LOGLEVEL=INFO, 3 processes, rank 2 raised) prints its launch config and
    the ranks it assigned: `nproc_per_node : 3`, `global_world_sizes=[3, 3, 3]`."""
    log = FIXTURES / "world-size" / "torchrun_info_3ranks" / "torchrun.log"
    rows = size_statements(log)
    kinds = {r["kind"]: r["value"] for r in rows}
    assert kinds["global_world_sizes"] == 3 and kinds["nproc_per_node"] == 3 and kinds["max_nodes"] == 1
    ws = infer_world_size(statements=[(str(log), r) for r in rows])
    assert ws.size == 3 and "global_world_sizes=[3, 3, 3]" in ws.source and not ws.lower_bound
    u = analyzer.load(log.parent)
    assert u.report["job"]["world_size"] == 3 and "global_world_sizes" in u.report["job"]["world_size_source"]
    assert not u.verdict.startswith("OK")


def test_world_size_rules() -> None:
    """nproc_per_node × nodes when min_nodes = max_nodes; a stated size below a rank seen gives way, with a
    warning; with nothing stated, the largest rank seen + 1 is a lower bound."""
    rows = [("a.log", dict(kind="nproc_per_node", value=4, line=3, text="nproc_per_node : 4")),
            ("a.log", dict(kind="min_nodes", value=2, line=1, text="min_nodes : 2")),
            ("a.log", dict(kind="max_nodes", value=2, line=2, text="max_nodes : 2"))]
    assert infer_world_size(statements=rows).size == 8

    class Log:
        path, ranks = "err.log", [0, 9]
    ws = infer_world_size(statements=rows, stderr_logs=[Log()])
    assert ws.size == 10 and "smaller than rank 9" in ws.warnings[0]
    ws = infer_world_size(stderr_logs=[Log()])
    assert (ws.size, ws.lower_bound) == (10, True) and ws.source.startswith("at least")
    assert infer_world_size(3, stderr_logs=[Log()]).size == 3  # the user's word is final


@pytest.mark.slow
def test_the_doc_table_is_the_generated_one() -> None:
    """docs/hang-analysis.md's table of the real failures is what the CLI path gives today (held-out cases
    included: they were analysed once the code was frozen)."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "hang-analysis.md").read_text()
    doc = text[text.index(up.BEGIN) + len(up.BEGIN):text.index(up.END)].strip()
    assert doc == up.table().strip(), "regenerate with: python -m tests.hang_user_path"


def _ranks_in(text: str) -> set[int]:
    out: set[int] = set()
    for part in re.findall(r"\d+-\d+|\d+", text):
        a, _, b = part.partition("-")
        out |= set(range(int(a), int(b or a) + 1))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=_id)
def test_evidence_states_no_more_than_the_inputs(case: Path) -> None:
    """Each finding's 'ranks … wait in process group G' lists only members of G (the true groups of the run), and
    a death is called a signal only when torchrun's table or a signal line says one (exit code 1 is not SIGHUP)."""
    u = up.analysed(case)
    groups = {str(k): set(v["ranks"]) for k, v in (u.exp.get("process_groups") or {}).items()}
    inputs = "".join(p.read_text(errors="replace") for p in case.rglob("*.log"))
    for f in u.report.get("findings") or []:
        for e in f.get("evidence") or []:
            text = str(e.get("text", ""))
            m = re.match(r"(ranks? [\d, -]+) wait in process group (\S+)", text)
            if m and m.group(2) in groups:
                assert _ranks_in(m.group(1)) <= groups[m.group(2)], (f["id"], text)
            for sig in re.findall(r"died \((SIG[A-Z]+)\)", text):
                assert sig in inputs, (f["id"], text)
    for r, why in u.ranks_without_dump.items():
        for sig in re.findall(r"died \((SIG[A-Z]+)\)", why):
            assert sig in inputs, (r, why)


def test_a_python_line_that_names_world_size_is_no_statement(tmp_path: Path) -> None:
    """torchrun's own traceback quotes `store, rank, world_size = next(rendezvous_iterator)`: no number, no size."""
    log = tmp_path / "torchrun.log"
    log.write_text("    store, rank, world_size = next(rendezvous_iterator)\n[default0]:WORLD_SIZE=4\n"
                   "I1202 api.py:553]   role_world_sizes=[4, 4]\n")
    assert [(r["kind"], r["value"], r["line"]) for r in size_statements(log)] == [("WORLD_SIZE", 4, 2)]
