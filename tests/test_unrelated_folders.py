"""Issue 30, item 6: a folder of files that are not traces or logs (a copy of some of /usr/share/doc, a package of
site-packages) gives no finding above info and exit 2 ("nothing was analysed"). Two kinds of file used to be taken
for a job's: a test runner's compressed log with caught Python tracebacks in its middle (read as a rank's stderr:
"a process failed") and JSON documents that mention "entries" and "version" (node.js's API docs, read as failed
Flight Recorder dumps). Hand-built look-alikes always run; copies of this machine's files where it has them.
"""
from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path

import pytest

from analyzer.cli import main
from parsers.discover import classify
from parsers.flight_recorder import looks_like_fr_dump

TEST_LOG = ("0:05:27 load avg: 0.41 [217/415/1] test_minidom passed\n"
            "0:06:30 load avg: 0.42 [223/415/1] test_multiprocessing_fork passed (1 min 2 sec)\n"
            "Traceback (most recent call last):\n"
            '  File "/build/python3.11/Lib/multiprocessing/resource_tracker.py", line 209, in main\n'
            "    cache[rtype].remove(name)\n"
            "KeyError: '/psm_5b5cf872'\n"
            "0:07:36 load avg: 0.19 [224/415/1] test_multiprocessing_forkserver passed (1 min 5 sec)\n"
            "0:07:37 load avg: 0.19 [225/415/1] test_netrc passed\n"
            "0:07:38 load avg: 0.19 [226/415/1] test_nis skipped\n"
            "== Tests result: SUCCESS ==\n")
NODE_DOC = {"type": "module", "source": "doc/api/buffer.md", "introduced_in": "v0.1.90",
            "modules": [{"textRaw": "Buffer", "entries": [1, 2], "version": "v20"}], "version": "v20"}


def _run(folder: Path, tmp_path: Path) -> tuple[int, dict | None]:
    out = tmp_path / "r.json"
    code = main([str(folder), "--format", "json", "-q", "-o", str(out), "--jobs", "1"])
    return code, (json.loads(out.read_text()) if out.exists() else None)


def test_look_alikes_are_not_a_job(tmp_path: Path) -> None:
    docs = tmp_path / "doc"
    (docs / "python3.11").mkdir(parents=True)
    (docs / "nodejs" / "api").mkdir(parents=True)
    (docs / "python3.11" / "test_results.gz").write_bytes(gzip.compress(TEST_LOG.encode()))
    (docs / "nodejs" / "api" / "buffer.json.gz").write_bytes(gzip.compress(json.dumps(NODE_DOC, indent=2).encode()))
    (docs / "nodejs" / "api" / "buffer.json").write_text(json.dumps(NODE_DOC, indent=2))
    why = classify(docs / "python3.11" / "test_results.gz").reason
    assert "not a rank's log" in why
    assert not looks_like_fr_dump(json.dumps(NODE_DOC, indent=2).encode())
    code, rep = _run(docs, tmp_path)
    assert code == 2 and (rep is None or not [f for f in rep.get("findings") or [] if f["severity"] != "info"])


def test_a_kept_traceback_of_a_failed_rank_is_still_read(tmp_path: Path) -> None:
    """The same traceback at the end of the file (the process died of it), or in a rank's own file, is a rank's."""
    end = tmp_path / "end"
    end.mkdir()
    (end / "train.log").write_text(TEST_LOG.split("0:07:36")[0])
    assert _run(end, tmp_path)[0] == 1
    named = tmp_path / "named"
    named.mkdir()
    (named / "rank3.log").write_text(TEST_LOG)
    assert classify(named / "rank3.log").kind == "stderr"


def test_a_json_dump_still_looks_like_one() -> None:
    for first in ("version", "comm_lib_version", "pg_config", "entries"):
        doc = {first: "2.10", "pg_config": {}, "pg_status": {}, "entries": []}
        assert looks_like_fr_dump(json.dumps(doc).encode()), first


def _copy(src: Path, dst: Path, limit: int = 40) -> int:
    n = 0
    for p in sorted(src.rglob("*")):
        if n >= limit:
            break
        if p.is_file() and not p.is_symlink() and p.stat().st_size < 2_000_000:
            q = dst / p.relative_to(src)
            q.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, q)
            n += 1
    return n


@pytest.mark.parametrize("src", ["/usr/share/doc/python3.11", "/usr/share/doc/nodejs", "/usr/share/doc/dpkg"])
def test_a_copy_of_this_machines_docs_is_not_a_job(tmp_path: Path, src: str) -> None:
    if not Path(src).is_dir():
        pytest.skip(f"{src} is not on this machine")
    folder = tmp_path / "copy"
    if not _copy(Path(src), folder):
        pytest.skip(f"{src} holds no plain file")
    code, rep = _run(folder, tmp_path)
    assert code == 2 and (rep is None or not [f for f in rep.get("findings") or [] if f["severity"] != "info"])


@pytest.mark.parametrize("pkg", ["pytest", "numpy/lib", "_pytest"])
def test_a_copy_of_a_site_packages_package_is_not_a_job(tmp_path: Path, pkg: str) -> None:
    site = next((Path(p) for p in sys.path if p.endswith("site-packages") and (Path(p) / pkg).is_dir()), None)
    if site is None:
        pytest.skip(f"{pkg} is not installed as a folder")
    folder = tmp_path / "copy"
    if not _copy(site / pkg, folder):
        pytest.skip("nothing to copy")
    code, rep = _run(folder, tmp_path)
    assert code == 2 and (rep is None or not [f for f in rep.get("findings") or [] if f["severity"] != "info"])
