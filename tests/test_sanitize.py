"""Input text cannot steer a terminal, a CI log or a document reader, and cannot crash an output format."""
from __future__ import annotations

import os
import xml.etree.ElementTree as ET

import orjson
import pytest

from analyzer.cli import EXIT_INTERNAL, main
from analyzer.render import sanitize
from analyzer.render.github import render_github
from analyzer.render.json_out import render_json
from analyzer.render.junit import render_junit
from analyzer.render.markdown import render_markdown
from analyzer.render.sarif import file_uri, render_sarif
from analyzer.render.text import render_text
from tests.fuzz.checks import CHECKS

EVIL = ["pg\n::error file=x.py,line=1::pwned", "\x1b]8;;http://evil\x07x\x1b]8;;\x07", "\x1b[2J\x1b[31mred",
        "\x9b31m", "lone \ud800", "file \udcff.json", "\ufffe\uffff", "\u202eevil", "##[error]v1", "a\rb\u2028c",
        "<script>x</script>", "|`*_[]"]


@pytest.mark.parametrize("s", EVIL)
def test_text_is_one_clean_line_without_ci_commands(s):
    out = sanitize.text(s)
    assert "\n" not in out and "\r" not in out and "\x1b" not in out and "\x9b" not in out
    assert "##[" not in out and not out.lstrip().startswith("::")
    out.encode("utf-8")
    assert not any(c in out for c in "\ufffe\uffff\u202e\u2028")


def test_undecodable_file_name_bytes_are_shown_as_bytes():
    assert sanitize.clean("rank\udcff.json") == "rank\\xff.json"
    assert sanitize.clean("x\ud800y") == "x\ufffdy"
    assert file_uri("traces/rank\udcff.json") == "traces/rank%FF.json"


def test_markdown_html_xml_and_github_escaping():
    assert sanitize.markdown("a|b\n<i>") == "a\\|b &lt;i&gt;"
    assert sanitize.html('"<b>" \x1b[1m') == "&quot;&lt;b&gt;&quot; "
    ET.fromstring(f"<a b=\"{sanitize.html(EVIL[6])}\">{sanitize.html(''.join(EVIL))}</a>")
    assert sanitize.github_data("50%\r\nx") == "50%25%0D%0Ax"
    assert sanitize.github_property("a:b,c") == "a%3Ab%2Cc"


def test_json_keeps_data_but_not_surrogates_or_v1_commands():
    out = sanitize.dumps({"a\ud800": ["::1", "##[error]x", 10**30]})
    doc = orjson.loads(out)
    assert doc == {"a\ufffd": ["::1", "#\u200b#[error]x", str(10**30)]}  # an IPv6 "::1" stays as it was


def _report() -> dict:
    """A report whose every input-derived field is hostile."""
    evil = "".join(EVIL)
    finding = {"id": "HANG001", "title": evil, "severity": "error", "confidence": 0.9, "cost": 0.1,
               "subject": {"ranks": [0, 1], "process_group": evil, "step": None, "collective": evil},
               "evidence": [{"text": evil, "file": "logs/" + EVIL[5], "line": 3}, evil], "fix": evil,
               "consequences": []}
    return {"schema": "dtrace-analyzer/report", "tool": {"name": "analyze", "version": "0.1.0"},
            "verdict": "FAIL: 1 error(s)", "findings": [finding],
            "inputs": {"read": 1, "salvaged": 0, "skipped": 0, "failed": 1,
                       "files": [{"path": EVIL[5], "kind": "kineto", "status": "failed", "message": evil}]},
            "warnings": [evil], "job": {"ranks": [0, 1], "world_size": 2, "summary": {}},
            "hang": {"status": "hang", "diagnoses": [{"kind": evil, "process_group": evil, "seq": evil, "op": evil,
                                                      "culprit_ranks": [1], "waiting_ranks": [0], "cause": evil}]},
            "cross_rank": {"process_groups": [{"name": evil, "role": evil, "size": 2, "ranks": [0, 1],
                                               "span": evil, "ops": {evil: 3}}],
                           "collectives": {"by_group_op": [{"process_group": evil, "op": evil, "count": 1,
                                                            "link_class": evil}]}},
            "metrics": {"per_rank": [], "per_step": []}}


def test_every_renderer_on_hostile_fields_gives_parseable_inert_output():
    from analyzer.render.html import render_html
    r = _report()
    outs = {"text": render_text(r), "json": render_json(r), "markdown": render_markdown(r), "html": render_html(r),
            "junit": render_junit(r, "error", []), "sarif": render_sarif(r, []), "github": render_github(r)}
    for fmt, out in outs.items():
        CHECKS[fmt](fmt, out)
    assert "file \\xff.json" in outs["text"]  # the undecodable byte is named, not dropped


def test_a_crash_exits_3_and_says_so(tmp_path, monkeypatch, capsys):
    import analyzer.api as api

    def boom(*a, **k):
        raise KeyError("\x1b[31mkaboom\n::error::x")
    monkeypatch.setattr(api, "load", boom)
    (tmp_path / "rank0.json").write_bytes(b'{"traceEvents": []}')
    code = main([str(tmp_path), "-q", "--jobs", "1"])
    err = capsys.readouterr().err
    assert code == EXIT_INTERNAL == 3
    assert "internal error (KeyError" in err and "not a finding" in err
    assert "\x1b" not in err and not any(line.lstrip().startswith("::") for line in err.splitlines())


def test_a_saved_baseline_of_any_shape_is_compared_or_ignored(tmp_path, capsys):
    from tests.kineto_builder import kernel, step, trace
    run = tmp_path / "run"
    run.mkdir()
    (run / "rank0.json").write_bytes(orjson.dumps(trace([step(1, 0, 10), kernel(1, 2)], rank=0)))
    for body in ({"schema": "dtrace-analyzer/report", "job": 3},
                 {"schema": "dtrace-analyzer/report", "job": {"summary": {"mean_step_time_us": "fast"}},
                  "metrics": {"per_step": [1, {"comm_us": None}]}, "cross_rank": {"collectives": []}},
                 {"job": 3}):
        b = tmp_path / "base.json"
        b.write_bytes(orjson.dumps(body))
        code = main([str(run), "-q", "--jobs", "1", "--baseline", str(b), "--format", "json", "-o",
                     str(tmp_path / "r.json")])
        assert code in (0, 2), capsys.readouterr().err
        assert code != EXIT_INTERNAL


def test_file_names_with_undecodable_bytes_in_json_and_sarif(tmp_path):
    from tests.kineto_builder import kernel, step, trace
    name = os.fsdecode(b"rank0-\xff.json")
    (tmp_path / name).write_bytes(orjson.dumps(trace([step(1, 0, 10), kernel(1, 2)], rank=0)))
    (tmp_path / os.fsdecode(b"bad-\xfe.json")).write_bytes(b"{not json")
    for fmt in ("json", "sarif", "text", "junit", "markdown", "github"):
        out = tmp_path / f"r.{fmt}"
        assert main([str(tmp_path), "-q", "--jobs", "1", "--format", fmt, "-o", str(out)]) in (0, 1)
        CHECKS[fmt](fmt, out.read_text(encoding="utf-8"))


@pytest.mark.parametrize("fmt", ["text", "json", "markdown", "html", "junit", "sarif", "github"])
def test_lone_surrogates_from_dumps_reach_no_encoder(fmt, tmp_path):
    """A lone surrogate in a pickle string and in a cut-off JSON dump: every format writes, valid and inert."""
    import pickle

    from tests.test_hostile_files import DUMP
    bad = dict(DUMP, pg_config={"0": {"name": "0", "desc": "pg \ud800\n::error::x", "ranks": "[0, 1]"}})
    bad["entries"] = [dict(e, profiling_name="nccl:all_reduce", process_group=["0", "pg \udc80 \x1b[31m"])
                      for e in DUMP["entries"]]
    (tmp_path / "nccl_trace_rank_1").write_bytes(pickle.dumps(bad, protocol=4))
    text = orjson.dumps(dict(DUMP, rank=0), option=orjson.OPT_INDENT_2).decode().replace("default_pg", "\\ud800")
    (tmp_path / "nccl_trace_rank_0.json").write_text(text[: len(text) * 2 // 3], encoding="utf-8")
    out = tmp_path / f"r.{fmt}"
    assert main([str(tmp_path), "-q", "--jobs", "1", "--format", fmt, "-o", str(out)]) in (0, 1)
    CHECKS[fmt](fmt, out.read_text(encoding="utf-8"))
