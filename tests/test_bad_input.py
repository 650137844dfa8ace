"""Bad input: each problem is reported with the file and the reason, and the other files are still analysed."""
import gzip

import pytest

from analyzer.job import load_job
from parsers.errors import InputError
from parsers.kineto import load_trace
from tests import kineto_builder as kb


def _good(tmp_path, rank=0, world=2):
    return kb.write(tmp_path / f"rank{rank}.json",
                    kb.trace([kb.step(1, 0, 100), kb.kernel(10, 20), kb.nccl(20, 30)], rank=rank, world_size=world))


def _many_events_doc(n=50, rank=1):
    ev = [kb.step(1, 0, 10_000)] + [kb.kernel(10 + 20 * i, 10) for i in range(n)]
    return kb.trace(ev, rank=rank, world_size=2)


def test_truncated_json_is_salvaged(tmp_path):
    full = kb.write(tmp_path / "full.json", _many_events_doc())
    data = full.read_bytes()
    cut = tmp_path / "rank1.json"
    cut.write_bytes(data[: int(len(data) * 0.6)])      # killed mid-write
    t = load_trace(cut)
    assert t.salvage is not None
    n_complete = t.salvage["events_recovered"]
    assert 20 < n_complete < 51
    assert len(t.activity) == n_complete - 1           # every complete kernel before the cut is kept
    assert "truncated trace salvaged" in t.warnings[0] and str(cut) in t.warnings[0]


def test_truncated_gzip_is_salvaged(tmp_path):
    doc = _many_events_doc(400)
    p = kb.write(tmp_path / "rank1.json.gz", doc, gz=True)
    blob = p.read_bytes()
    p.write_bytes(blob[: int(len(blob) * 0.7)])
    t = load_trace(p)
    assert t.salvage and "gzip" in t.salvage["reason"]
    assert 50 < len(t.activity) < 400


@pytest.mark.parametrize("content,reason", [
    (b"", "empty file"),
    (b"this is not json at all\n", "not JSON"),
    (b'{"traceEvents": "nope"', "not a readable trace"),
    (b"\x1f\x8b\x08\x00garbage", "gzip"),
])
def test_unreadable_files_raise_input_error_with_reason(tmp_path, content, reason):
    p = tmp_path / "rank0.json"
    p.write_bytes(content)
    with pytest.raises(InputError) as e:
        load_trace(p)
    assert reason in str(e.value) and str(p) in str(e.value)


def test_job_goes_on_past_bad_files(tmp_path):
    _good(tmp_path, 0)
    full = kb.write(tmp_path / "x" / "full.json", _many_events_doc())
    (tmp_path / "rank1.json").write_bytes(full.read_bytes()[:900])   # salvaged
    full.unlink()
    (tmp_path / "rank2.json").write_bytes(b"")                          # empty
    (tmp_path / "notes.txt").write_text("hello\n")                      # not a trace
    (tmp_path / "broken.json").write_bytes(b'{"traceEvents": [{"ph": "X", "ts": 1,')  # cut before any event ends
    (tmp_path / "blob.bin").write_bytes(bytes(range(256)) * 10)
    job = load_job([tmp_path], jobs=1)
    status = {f.path.split("/")[-1]: (f.status, f.message) for f in job.files}
    assert status["rank0.json"][0] == "read"
    assert status["rank1.json"][0] == "salvaged" and "kept" in status["rank1.json"][1]
    assert status["rank2.json"] == ("skipped", "not a trace: empty file")
    assert status["notes.txt"][0] == "skipped" and "without NCCL" in status["notes.txt"][1]
    assert status["blob.bin"][0] == "skipped" and "binary" in status["blob.bin"][1]
    assert status["broken.json"] == ("failed", "truncated before the first complete event "
                                     "(JSON ends mid-document (file cut off while being written))")
    assert job.ranks[:2] == [0, 1] and not job.step_metrics.empty


def test_duplicate_ranks_keep_first_and_say_so(tmp_path):
    _good(tmp_path, 0)
    kb.write(tmp_path / "again" / "copy_rank0.json", kb.trace([kb.kernel(0, 5)], rank=0))
    job = load_job([tmp_path], jobs=1)
    dup = [f for f in job.files if f.status == "skipped"]
    assert len(dup) == 1 and dup[0].message.startswith("duplicate rank 0: already read from")
    assert job.ranks == [0]


def test_missing_ranks_in_world(tmp_path):
    _good(tmp_path, 0, world=4)
    _good(tmp_path, 2, world=4)
    job = load_job([tmp_path], jobs=1)
    assert job.world_size == 4 and job.missing_ranks == [1, 3]


def test_nonexistent_path_is_reported(tmp_path):
    _good(tmp_path, 0)
    job = load_job([tmp_path, tmp_path / "nope"], jobs=1)
    assert any(f.status == "failed" and "no such file" in f.message for f in job.files)
    assert job.ranks == [0]
