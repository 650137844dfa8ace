"""Ctrl-C on the user's path: a real SIGINT to the command's process group (as a terminal sends it) while the
workers run. One line on stderr, exit 130, no report file left behind, no process of the group left running —
with the built-in pool and with a Dask LocalCluster (docs/exit-codes.md)."""
from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
JOB = ROOT / "fixtures/sim/ddp_64_clean"
pytestmark = [pytest.mark.slow, pytest.mark.skipif(sys.platform == "win32" or not os.path.exists("/proc"),
                                                   reason="process groups and /proc")]


def _children(pid: int) -> list[str]:
    return [c for f in glob.glob(f"/proc/{pid}/task/*/children") for c in open(f).read().split()]


def _live_in_group(pgid: int) -> list[str]:
    """Processes of the group still alive (a zombie has exited: only its parent, here init, has to reap it)."""
    out = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            fields = open(stat).read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append(stat.split("/")[2])
    return out


def _interrupt(tmp_path: Path, extra: list[str], children: int, after: float = 0.0):
    outs = [tmp_path / "r.html", tmp_path / "r.json", tmp_path / "t.json.gz"]
    cmd = [sys.executable, "-m", "analyzer", str(JOB), "--jobs", "2", "--html", str(outs[0]), "--json",
           str(outs[1]), "--timeline", str(outs[2]), *extra]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    t0 = time.monotonic()
    while len(_children(p.pid)) < children and p.poll() is None and time.monotonic() - t0 < 120:
        time.sleep(0.02)
    assert p.poll() is None, "the run ended before its workers started"
    time.sleep(after)
    os.killpg(p.pid, signal.SIGINT)
    out, err = p.communicate(timeout=120)
    left = _live_in_group(p.pid)
    for _ in range(50):  # processes the run ends (a Dask worker, the resource tracker) may take a moment
        if not left:
            break
        time.sleep(0.1)
        left = _live_in_group(p.pid)
    return p.returncode, out, err, [o for o in outs if o.exists()], left


@pytest.mark.parametrize("after", [0.0, 1.0])
def test_ctrl_c_with_the_pool_says_one_line(tmp_path, after, monkeypatch):
    monkeypatch.setenv("ANALYZE_POOL_BYTES", "0")  # the pool even for this small job (it pays from ~48 MB)
    code, out, err, files, left = _interrupt(tmp_path, [], children=2, after=after)
    assert (code, err, out, files, left) == (130, "analyze: interrupted\n", "", [], [])


@pytest.mark.parametrize("after", [0.0, 2.0])
def test_ctrl_c_with_dask_local_says_one_line(tmp_path, after):
    pytest.importorskip("distributed")
    import socket
    busy = socket.socket()  # port 8787 (the scheduler's HTTP server) taken, as by another cluster: still one line
    try:
        busy.bind(("", 8787))
        busy.listen()
    except OSError:
        pass  # already taken
    # after 0: while the cluster starts (its workers are being spawned); later: while they parse
    try:
        code, out, err, files, left = _interrupt(tmp_path, ["--dask", "local"], children=1 if not after else 3,
                                                 after=after)
    finally:
        busy.close()
    assert (code, err, out, files, left) == (130, "analyze: interrupted\n", "", [], [])
