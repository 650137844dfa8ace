"""Rule engine, registry, configuration and the text commands (--list-rules, --explain, README table)."""
from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from rules.config import ConfigError, RuleConfig, add_cli_arguments, build_config, find_config_file, \
    handle_info_commands
from rules.describe import explain, list_rules, markdown_table
from rules.engine import attach_consequences, collect_findings, merge_duplicates
from rules.finding import Evidence, Finding, Subject
from rules.catalog import sorted_rules
from rules.registry import RULES, THRESHOLDS


def test_every_rule_is_documented_and_explainable():
    rules = sorted_rules()
    assert len(rules) >= 20
    for r in rules:
        assert r.doc and r.fix and r.confirm, r.id
        text = explain(r.id)
        flat = " ".join(text.replace("\n         ", " ").split())  # the card wraps its lines
        assert text.startswith(f"{r.id}: {r.title}") and " ".join(r.summary.split()) in flat and "fix:" in text
        for t in r.thresholds:
            assert f"{t.name} = " in text


def test_explain_shows_configured_threshold_and_default():
    text = explain("COMM001", {"dp_overlap_min": 0.8})
    assert "dp_overlap_min = 0.8 (fraction, default 0.9)" in text


def test_list_and_markdown_table_have_one_line_per_rule():
    assert len(list_rules().splitlines()) == len(RULES)
    md = markdown_table().splitlines()
    assert md[0] == "| id | severity | title |" and len(md) == len(RULES) + 2
    assert "| `HANG001` | error | Mismatched collective (op, size, dtype or order) |" in md


def _args(argv):
    p = argparse.ArgumentParser()
    add_cli_arguments(p)
    return p.parse_args(argv)


def test_info_commands(capsys):
    assert handle_info_commands(_args([])) is None
    assert handle_info_commands(_args(["--list-rules"])) == 0
    assert "HANG001" in capsys.readouterr().out
    assert handle_info_commands(_args(["--explain", "net001", "--isolated"])) == 0
    assert "TP degree" in capsys.readouterr().out
    assert handle_info_commands(_args(["--explain", "NOPE1"])) == 2
    assert "no rule 'NOPE1'" in capsys.readouterr().err


def test_selection_longest_prefix_wins():
    cfg = RuleConfig(select=["ALL"], ignore=["COMM"])
    assert cfg.enabled("HANG001") and not cfg.enabled("COMM001")
    cfg = RuleConfig(select=["COMM001"], ignore=["COMM"])
    assert cfg.enabled("COMM001") and not cfg.enabled("COMM002") and not cfg.enabled("HANG001")
    cfg = RuleConfig(select=["NET"], ignore=["NET002"])
    assert cfg.enabled("NET001") and not cfg.enabled("NET002")


def test_cli_values_and_errors(tmp_path):
    cfg = build_config(select=["hang,NET"], ignore=["NET002"], thresholds=["dp-overlap-min=0.5"], start=tmp_path,
                       isolated=True)
    assert cfg.select == ["HANG", "NET"] and cfg.ignore == ["NET002"] and cfg.thresholds == {"dp_overlap_min": 0.5}
    with pytest.raises(ConfigError, match="unknown threshold 'nope'"):
        build_config(thresholds=["nope=1"], isolated=True)
    with pytest.raises(ConfigError, match="needs a number"):
        build_config(thresholds=["dp_overlap_min=abc"], isolated=True)
    with pytest.raises(ConfigError, match="expected NAME=VALUE"):
        build_config(thresholds=["dp_overlap_min"], isolated=True)
    with pytest.raises(ConfigError, match="unknown rule selector 'XYZ'"):
        build_config(select=["XYZ"], isolated=True)


def test_config_file_found_upwards_and_merged_with_cli(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')  # no [tool.analyze]: not a config
    assert find_config_file(tmp_path) is None
    (tmp_path / "pyproject.toml").write_text(
        '[tool.analyze]\nselect = ["ALL"]\nignore = ["PIPE"]\n[tool.analyze.thresholds]\nstep_spread_max = 0.1\n')
    sub = tmp_path / "a" / "b"
    sub.mkdir(parents=True)
    assert find_config_file(sub) == tmp_path / "pyproject.toml"
    cfg = build_config(ignore=["COMM003"], thresholds=["idle_share_max=0.3"], start=sub)
    assert cfg.ignore == ["PIPE", "COMM003"] and not cfg.enabled("PIPE001") and cfg.enabled("PIPE") is False
    assert cfg.thresholds == {"step_spread_max": 0.1, "idle_share_max": 0.3}
    (sub / "analyze.toml").write_text('select = ["HANG"]\n')  # nearer file wins
    cfg = build_config(start=sub)
    assert cfg.select == ["HANG"] and cfg.source == str(sub / "analyze.toml")
    assert build_config(start=sub, isolated=True).source is None


def test_bad_config_file_names_file(tmp_path):
    bad = tmp_path / "analyze.toml"
    bad.write_text("select = [\n")
    with pytest.raises(ConfigError, match="analyze.toml: not valid TOML"):
        build_config(start=tmp_path)
    bad.write_text('colour = "red"\n')
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['colour'\]"):
        build_config(start=tmp_path)


def test_config_from_args_exits_2_on_bad_value(capsys):
    from rules.config import config_from_args
    with pytest.raises(SystemExit) as exc:
        config_from_args(_args(["--threshold", "zzz=1", "--isolated"]))
    assert exc.value.code == 2 and "unknown threshold 'zzz'" in capsys.readouterr().err


def test_thresholds_registered_with_units_and_docs():
    for t in THRESHOLDS.values():
        assert t.unit and t.doc


def _f(id, sev, cost=None, conf=0.5, ranks=(), pg=None, involved=()):
    return Finding(id=id, title=id, severity=sev, confidence=conf, cost=cost,
                   subject=Subject(ranks=list(ranks), process_group=pg), involved=set(involved))


def test_subject_json_form():
    s = Subject(ranks=[3], process_group="0", collective={"op": "allreduce", "seq": 5}).to_dict()
    assert s == {"ranks": [3], "process_group": "0", "step": None, "collective": "allreduce#5", "op": "allreduce",
                 "seq": 5}
    assert Subject().to_dict()["collective"] is None


def test_merge_duplicates_keeps_one_with_all_evidence():
    a = _f("NET004", "warning", cost=0.1, ranks=[1], pg="3")
    a.evidence = [Evidence("x")]
    b = _f("NET004", "warning", cost=0.3, conf=0.9, ranks=[1], pg="3")
    b.evidence = [Evidence("x"), Evidence("y", "f.log", 7)]
    out = merge_duplicates([a, b, _f("NET004", "warning", ranks=[2], pg="3")])
    assert len(out) == 2 and [e.text for e in out[0].evidence] == ["x", "y"]
    assert out[0].cost == 0.3 and out[0].confidence == 0.9


def test_ranking_and_consequences():
    strag = _f("LOAD001", "warning", cost=0.2, ranks=[5], involved=range(8))
    spread = _f("LOAD002", "warning", cost=0.05, ranks=[5])
    comm = _f("COMM001", "warning", cost=0.5, ranks=[0, 1, 2])
    other = _f("NET001", "warning", cost=0.1, ranks=[9], involved=[9])
    info = _f("INPUT003", "info", cost=None, conf=1.0)
    ranked = sorted([info, spread, comm, other, strag], key=Finding.sort_key)
    assert [f.id for f in ranked] == ["COMM001", "LOAD001", "NET001", "LOAD002", "INPUT003"]
    out = attach_consequences(ranked)
    assert [f.id for f in out] == ["LOAD001", "NET001", "INPUT003"]
    assert [c["id"] for c in out[0].consequences] == ["COMM001", "LOAD002"]


def test_consequence_needs_same_ranks():
    strag = _f("LOAD001", "warning", cost=0.2, ranks=[5], involved=[5])
    comm = _f("COMM001", "warning", cost=0.5, ranks=[0, 1])
    assert [f.id for f in attach_consequences([comm, strag])] == ["COMM001", "LOAD001"]


def test_error_severity_first_and_rule_failure_is_reported():
    report = {"hang": {"diagnoses": [{"kind": "mismatched_op", "process_group": "0", "seq": 4, "op": "allreduce",
                                      "culprit_ranks": [2], "waiting_ranks": [0, 1], "evidence": []}]},
              "job": {"summary": {"overlap_coverage": 0.0, "exposed_comm_share": 0.5, "comm_share": 0.5},
                      "ranks": [0, 1, 2]},
              "cross_rank": {"process_groups": "not a list"}}
    found = collect_findings(report)
    assert found[0].id == "HANG001" and found[0].severity == "error"
    assert any("failed and was skipped" in w for w in report.get("warnings", []))
    with pytest.raises(Exception):
        collect_findings(dict(report, warnings=[]), strict=True)


def test_select_ignore_applied_by_engine():
    report = {"inputs": {"files": [{"path": "a", "status": "failed", "message": "bad"}]},
              "job": {"missing_ranks": [3], "world_size": 4, "ranks": [0, 1, 2]}}
    ids = {f.id for f in collect_findings(report)}
    assert {"INPUT001", "INPUT003"} <= ids
    ids = {f.id for f in collect_findings(report, RuleConfig(ignore=["INPUT001"]))}
    assert "INPUT001" not in ids and "INPUT003" in ids


def test_readme_rule_table_matches_registry():
    from rules.readme import END, START
    readme = Path(__file__).resolve().parents[1] / "README.md"
    text = readme.read_text(encoding="utf-8") if readme.exists() else ""
    if START not in text or END not in text:
        pytest.skip("README.md has no rules markers yet")
    between = text.split(START, 1)[1].split(END, 1)[0]
    assert between.strip() == markdown_table().strip()


def test_network_finding_does_not_swallow_a_compute_straggler():
    """NET002 (sockets) slows every rank alike; a rank that computes longer is its own root cause."""
    net = _f("NET002", "warning", cost=0.5, ranks=list(range(8)), involved=range(8))
    compute = _f("LOAD001", "warning", cost=0.2, ranks=[5], involved=range(8))
    compute.extra["attribution"] = "compute"
    link = _f("LOAD001", "warning", cost=0.2, ranks=[5], involved=range(8))
    link.extra["attribution"] = "link"
    assert [f.id for f in attach_consequences([net, compute])] == ["NET002", "LOAD001"]
    out = attach_consequences([net, link])
    assert [f.id for f in out] == ["NET002"] and out[0].consequences[0]["id"] == "LOAD001"


def test_rules_doc_holds_the_generated_table_thresholds_and_catalog():
    """docs/rules.md never drifts from the registry: its table, thresholds and per-rule sections are generated."""
    from rules.describe import rules_doc_sections
    doc = (Path(__file__).resolve().parent.parent / "docs/rules.md").read_text(encoding="utf-8")
    for heading, body in rules_doc_sections().items():
        assert heading + "\n" in doc
        assert body.strip() in doc, f"docs/rules.md section {heading} is stale: regenerate it from rules.describe"
