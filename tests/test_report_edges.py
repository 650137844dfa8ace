"""What a user meets at the edges of a report (issue 23): the report says what it describes, output paths are
checked before any input is read, the Analysis shows itself briefly in a notebook, CI paths map to the
repository, and ``--threshold`` takes percentages. Every test takes the user's path: the CLI on a folder (in a
subprocess where the environment matters), the API in a fresh interpreter."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from analyzer.cli import main

ROOT = Path(__file__).resolve().parents[1]
GPU8 = ROOT / "fixtures/sim/tp_dp_clean"                # 8 GPU ranks on 2 hosts, NCCL logs
CPU4 = ROOT / "fixtures/real-cpu/ddp-clean"              # a real 4-rank gloo run on one host
FR = ROOT / "fixtures/real-cpu-failures/exception_conv_forward"  # Flight Recorder dumps and a torchrun log
EPOCH = "1764547200"  # 2025-12-01T00:00:00Z
BROWSER = next((b for b in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if b), None)


def _cli(args: list[str], env: dict | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if k not in ("GITHUB_WORKSPACE", "SOURCE_DATE_EPOCH")}
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "analyzer", *args, "-q", "--jobs", "1"], capture_output=True,
                          text=True, env=e, cwd=cwd, timeout=300)


# ---- 2. the report says what it describes ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def gpu8_reports(tmp_path_factory):
    out = tmp_path_factory.mktemp("about")
    p = _cli([str(GPU8), "--json", str(out / "r.json"), "--markdown", str(out / "r.md"), "--html",
              str(out / "r.html"), "-o", str(out / "r.txt")], {"SOURCE_DATE_EPOCH": EPOCH})
    assert p.returncode in (0, 1), p.stderr
    return {k: (out / f"r.{k}").read_text() for k in ("json", "md", "html", "txt")}


@pytest.mark.slow
def test_every_format_names_the_job_its_date_versions_hardware_and_the_analysis(gpu8_reports):
    about = json.loads(gpu8_reports["json"])["about"]
    assert about["inputs"] == [str(GPU8)]
    assert about["job"] == {"label": "tp_dp_clean", "backend": "nccl", "world_size": 8,
                            "world_size_source": "the profiler traces' distributedInfo", "ranks_traced": 8,
                            "hosts": 2, "host_names": ["trn-node-00", "trn-node-01"], "nccl_processes": 8,
                            "collected_at": "2024-11-29T07:59:59Z",
                            "collected_from": "the profiler traces' wall-clock timestamps"}
    assert about["software"] == {"nccl": "2.21.5"}  # the traces do not say which PyTorch: no "torch" key
    assert about["hardware"] == {"gpu": "NVIDIA H100 80GB HBM3", "device_type": "gpu"}
    assert about["analysed_at"] == "2025-12-01T00:00:00Z" and about["analyzer"]["name"] == "analyze"
    for fmt in ("txt", "md", "html"):
        doc = gpu8_reports[fmt].replace("\\_", "_")
        for want in ("tp_dp_clean", "2024-11-29T07:59:59Z", "NCCL 2.21.5", "NVIDIA H100 80GB HBM3",
                     "2 host(s)", "2025-12-01T00:00:00Z", str(GPU8).replace("\\_", "_")):
            assert want in doc, (fmt, want)
    title = gpu8_reports["html"].split("<title>")[1].split("</title>")[0]
    assert title == "analyze: tp_dp_clean: " + json.loads(gpu8_reports["json"])["verdict"]


@pytest.fixture(scope="module")
def cpu4_json():
    p = _cli([str(CPU4), "--format", "json"], {"SOURCE_DATE_EPOCH": EPOCH})
    assert p.returncode in (0, 1), p.stderr
    return p.stdout


@pytest.mark.slow
def test_source_date_epoch_makes_the_report_reproducible(cpu4_json):
    assert _cli([str(CPU4), "--format", "json"], {"SOURCE_DATE_EPOCH": EPOCH}).stdout == cpu4_json


@pytest.mark.slow
def test_what_the_inputs_do_not_tell_is_left_out(cpu4_json):
    about = json.loads(cpu4_json)["about"]
    assert "software" not in about and about["hardware"] == {"device_type": "cpu"}  # no GPU, no NCCL in a gloo run
    assert about["job"]["backend"] == "gloo" and about["job"]["host_names"] == ["vm"]
    p = _cli([str(FR), "--format", "json"], {"SOURCE_DATE_EPOCH": EPOCH})
    about = json.loads(p.stdout)["about"]
    assert about["software"] == {"flight_recorder": "2.10"} and about["job"]["flight_recorder_dumps"] == 3
    assert "collected_at" not in about["job"] and "hardware" not in about
    # no trace states the world size: it is inferred (the dumps' pg_config), and the report says from what
    assert about["job"]["world_size"] == 4 and "pg_config" in about["job"]["world_size_source"]


def test_the_analysis_time_is_now_unless_source_date_epoch_says_otherwise():
    from datetime import datetime, timezone
    from analyzer.report.about import analysis_time
    for env in ({}, {"SOURCE_DATE_EPOCH": "not a number"}):
        when = datetime.strptime(analysis_time(env), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
        assert abs((datetime.now(timezone.utc) - when).total_seconds()) < 5
    assert analysis_time({"SOURCE_DATE_EPOCH": EPOCH}) == "2025-12-01T00:00:00Z"


@pytest.mark.skipif(BROWSER is None, reason="no Chromium/Chrome installed")
def test_the_browser_shows_the_job_in_the_title(gpu8_reports, tmp_path):
    page = tmp_path / "r.html"
    page.write_text(gpu8_reports["html"])
    dom = subprocess.run([BROWSER, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'p'}",
                          "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120).stdout
    assert "<title>analyze: tp_dp_clean: " in dom and "2024-11-29T07:59:59Z" in dom


# ---- 6. output destinations are checked before any input is read ----------------------------------------------

@pytest.mark.parametrize("opt", ["-o", "--html", "--json", "--markdown", "--junit", "--sarif", "--github",
                                 "--timeline"])
def test_a_bad_output_path_fails_before_the_analysis(opt, tmp_path, capsys, monkeypatch):
    import analyzer.api
    monkeypatch.setattr(analyzer.api, "load", lambda *a, **k: pytest.fail("the inputs were read"))
    missing = tmp_path / "nonexistent" / "r.out"
    assert main([str(GPU8), "-q", opt, str(missing)]) == 2
    cap = capsys.readouterr()
    assert cap.out == ""
    assert cap.err.strip() == (f"analyze: error: {opt} {missing}: cannot write there: {missing.parent} does not exist")
    assert main([str(GPU8), "-q", opt, str(tmp_path)]) == 2  # a folder given as the file
    cap = capsys.readouterr()
    assert cap.out == "" and f"{opt} {tmp_path}: is a folder" in cap.err
    assert not missing.parent.exists()


def test_every_bad_destination_is_named_at_once(tmp_path, capsys):
    assert main([str(GPU8), "-q", "--html", str(tmp_path), "--timeline", str(tmp_path / "x" / "t.json"),
                 "--sarif", str(tmp_path / "ok.sarif")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and err[0].startswith("analyze: error: --html") and "--timeline" in err[1]
    assert not (tmp_path / "ok.sarif").exists()


# ---- 7. a notebook-sized Analysis -----------------------------------------------------------------------------

def _fresh(code: str) -> str:
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stderr
    return p.stdout


@pytest.mark.slow
def test_an_analysis_shows_a_few_lines_in_a_repl_and_a_notebook():
    out = json.loads(_fresh(
        "import json, analyzer\n"
        f"a = analyzer.load({str(CPU4)!r})\n"
        "print(json.dumps({'repr': repr(a), 'html': a._repr_html_(), 'verdict': a.verdict,\n"
        "                  'steps': len(a.steps), 'findings': [f['id'] for f in a.findings]}))\n"))
    r, h = out["repr"], out["html"]
    assert len(r) < 1500 and len(r.splitlines()) <= 12 and len(h) < 4000
    assert r.startswith(f"<Analysis of ddp-clean: {out['verdict']}>")
    assert "ranks 4 of world size 4" in r and "mean step 33.953 ms" in r and "comm share 69.3%" in r
    assert out["findings"] and all(fid in r and fid in h for fid in out["findings"][:5])
    assert out["verdict"] in h and "<table>" in h and "<script" not in h
    assert out["steps"] == 16  # the tables are still there, behind their attributes


@pytest.mark.slow  # a 64-rank job in a fresh interpreter
def test_a_64_rank_analysis_repr_stays_short():
    out = _fresh("import analyzer\n"
                 f"a = analyzer.load({str(ROOT / 'fixtures/sim/ddp_64_clean')!r})\n"
                 "print(len(repr(a)), len(a._repr_html_()), len(a.report['ranks']))\n").split()
    assert int(out[0]) < 1500 and int(out[1]) < 4000 and int(out[2]) == 64


# ---- 8. CI paths map to the repository ------------------------------------------------------------------------

def _sarif_uris(log: dict) -> list[dict]:
    run = log["runs"][0]
    return [a["location"] for a in run["artifacts"]] + [
        loc["physicalLocation"]["artifactLocation"] for r in run["results"] for loc in r.get("locations", [])]


@pytest.mark.slow
def test_sarif_and_github_paths_are_relative_to_the_repository_for_an_absolute_input(tmp_path):
    sarif = tmp_path / "r.sarif"
    p = _cli([str(CPU4.resolve()), "--sarif", str(sarif), "--format", "github"])
    log = json.loads(sarif.read_text())
    run = log["runs"][0]
    assert run["originalUriBaseIds"]["SRCROOT"]["uri"] == ROOT.as_uri() + "/"
    locs = _sarif_uris(log)
    assert locs and all(loc["uriBaseId"] == "SRCROOT" and loc["uri"].startswith("fixtures/real-cpu/ddp-clean/")
                        for loc in locs)
    files = [ln.split("file=")[1].split(",")[0] for ln in p.stdout.splitlines() if "file=" in ln]
    assert files and all(f.startswith("fixtures/real-cpu/ddp-clean/") for f in files)


def test_github_workspace_is_the_base_and_a_path_outside_stays_absolute(tmp_path, monkeypatch, capsys):
    outside = tmp_path / "run"
    shutil.copytree(CPU4, outside)
    monkeypatch.setenv("GITHUB_WORKSPACE", str(tmp_path))
    sarif = tmp_path / "r.sarif"
    main([str(outside.resolve()), "-q", "--jobs", "1", "--format", "github", "--sarif", str(sarif)])
    files = [ln.split("file=")[1].split(",")[0] for ln in capsys.readouterr().out.splitlines() if "file=" in ln]
    assert files and all(f.startswith("run/rank") for f in files)
    log = json.loads(sarif.read_text())
    assert log["runs"][0]["originalUriBaseIds"]["SRCROOT"]["uri"] == tmp_path.resolve().as_uri() + "/"
    assert all(loc["uri"].startswith("run/") and loc["uriBaseId"] == "SRCROOT" for loc in _sarif_uris(log))
    monkeypatch.setenv("GITHUB_WORKSPACE", str(ROOT / "docs"))  # the traces lie outside it: absolute file URIs
    main([str(outside), "-q", "--jobs", "1", "--sarif", str(sarif), "-o", str(tmp_path / "r.txt")])
    locs = _sarif_uris(json.loads(sarif.read_text()))
    assert locs and all("uriBaseId" not in loc and loc["uri"].startswith("file:///") for loc in locs)


# ---- 9. --threshold takes a percentage as --regression-threshold does ------------------------------------------

def test_threshold_takes_a_percentage_and_refuses_one_for_a_count(capsys):
    assert main(["--threshold", "idle_share_max=50%", "--explain", "LOAD003"]) == 0
    assert "idle_share_max = 0.5 (fraction, default 0.15)" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main([str(CPU4), "-q", "--threshold", "busbw_min_bytes=50%"])
    assert exc.value.code == 2 and "busbw_min_bytes is in bytes, not a fraction" in capsys.readouterr().err


@pytest.mark.slow  # two analyses
def test_a_percentage_threshold_decides_as_the_fraction_does(tmp_path):
    ids = {}
    for value in ("99%", "15%"):  # 99 % read as 0.99 (not 99, refused as a fraction; not 0.0099, which fires)
        out = tmp_path / f"{value[:-1]}.json"
        assert main([str(ROOT / "fixtures/sim/data_loader_stall"), "-q", "--jobs", "1", "--threshold",
                     f"idle_share_max={value}", "--json", str(out), "-o", str(tmp_path / "r.txt")]) in (0, 1)
        ids[value] = [f["id"] for f in json.loads(out.read_text())["findings"]]
    assert "LOAD003" not in ids["99%"] and "LOAD003" in ids["15%"]


def test_the_torchrun_run_id_comes_from_its_log_dir_layout(tmp_path, capsys):
    src = ROOT / "fixtures/stderr/real-cpu/local_ranks_filter/logs"
    shutil.copytree(src / "none_5tte9pyl", tmp_path / "logs" / "llama-ft-42_5tte9pyl")
    out = tmp_path / "r.json"
    main([str(tmp_path / "logs"), "-q", "--jobs", "1", "--json", str(out), "-o", str(tmp_path / "r.txt")])
    assert json.loads(out.read_text())["about"]["job"]["run_id"] == "llama-ft-42"
    assert "(run llama-ft-42)" in (tmp_path / "r.txt").read_text()
    main([str(src), "-q", "--jobs", "1", "--json", str(out), "-o", str(tmp_path / "r.txt")])
    assert "run_id" not in json.loads(out.read_text())["about"]["job"]  # 'none': torchrun's default, no id
