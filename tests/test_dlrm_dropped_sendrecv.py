"""Issue #29 item 10: one SendRecv kernel removed from one rank of the real DLRM job (an all-to-all that rank did
not run) is named among the first two findings — SYNC001 on that rank and that all-to-all — on the user's path."""
from __future__ import annotations

import gzip
import json
import shutil

import pytest

import analyzer
from tests.conftest import CORPUS

pytestmark = pytest.mark.slow  # loads the 8-rank real job


def _drop_sendrecv(dst, rank: int, k: int) -> None:
    """Copy the DLRM job to ``dst`` and delete the k-th SendRecv kernel of ``rank``'s trace."""
    shutil.copytree(CORPUS / "param-dlrm_kineto", dst)
    f = next(dst.glob(f"worker{rank}_*"))
    t = json.loads(gzip.open(f).read())
    ev = t["traceEvents"]
    idx = [i for i, e in enumerate(ev) if e.get("ph") == "X" and e.get("cat") == "kernel"
           and "SendRecv" in e.get("name", "")]
    del ev[idx[k]]
    with gzip.open(f, "wt") as out:
        json.dump(t, out)


@pytest.mark.parametrize("rank,k", [(0, 0), (3, 2), (7, 4)])
def test_a_dropped_sendrecv_is_among_the_first_two_findings(tmp_path, rank, k):
    d = tmp_path / "dlrm"
    _drop_sendrecv(d, rank, k)
    found = analyzer.load(str(d)).findings
    top = [f for f in found[:2] if f["id"] == "SYNC001"]
    assert top, [(f["id"], f["title"]) for f in found[:3]]
    assert top[0]["subject"]["ranks"] == [rank] and str(top[0]["subject"]["collective"]).startswith("alltoall")
