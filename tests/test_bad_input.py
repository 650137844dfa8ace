"""Bad input: each problem is reported with the file and the reason, and the other files are still analysed."""
import gzip
import json

import pytest

from analyzer.load.job import load_job
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
    assert status["rank2.json"] == ("skipped", "empty file")
    assert status["notes.txt"] == ("skipped", "too small to be a trace (under 32 bytes)")
    assert status["blob.bin"][0] == "skipped" and "binary" in status["blob.bin"][1]
    assert status["broken.json"] == ("failed", "truncated before the first complete event "
                                     "(JSON ends mid-document (file cut off while being written))")
    assert job.ranks[:2] == [0, 1] and not job.step_metrics.empty


def test_duplicate_ranks_keep_first_and_say_so(tmp_path):
    _good(tmp_path, 0)
    kb.write(tmp_path / "copy_rank0.json", kb.trace([kb.kernel(0, 5)], rank=0))
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


def test_gzip_bomb_is_refused_by_ratio(tmp_path, monkeypatch):
    import parsers.trace_bytes as tb
    monkeypatch.setattr(tb, "MIN_INFLATE_BOUND", 1 << 20)
    p = tmp_path / "rank0.json.gz"
    p.write_bytes(gzip.compress(b'{"traceEvents": [' + b" " * (8 << 20), 9))   # ~8 KB inflating 1000x
    with pytest.raises(InputError, match="inflates to more than"):
        load_trace(p)


@pytest.mark.parametrize("dist,rank,warn", [
    ({"rank": -2, "world_size": 4}, 5, "not a plausible rank"),          # falls back to the file name
    ({"rank": True, "world_size": 4}, 5, "not a plausible rank"),
    ({"rank": 7, "world_size": 4}, 5, "not a plausible rank"),            # beyond the world
    ({"rank": 1, "world_size": 10**10}, 1, "not a plausible world size"),
])
def test_implausible_rank_or_world_size(tmp_path, dist, rank, warn):
    doc = kb.trace([kb.step(1, 0, 100), kb.kernel(10, 20)], rank=None)
    doc["distributedInfo"] = {"backend": "nccl", **dist}
    t = load_trace(kb.write(tmp_path / "trace_rank5.json", doc))
    assert t.rank == rank and any(warn in w for w in t.warnings)


def test_out_of_range_integers_lose_only_the_value(tmp_path):
    ev = [kb.step(10**20, 0, 5), kb.step(1, 0, 100), kb.kernel(10, 20, stream=2**63 + 5),
          kb.nccl(40, 10, **{"Collective name": "allreduce", "In msg nelems": 2**63 + 1}),
          kb.kernel(1e300, 1)]
    doc = kb.trace(ev, baseTimeNanoseconds=10**30)
    p = tmp_path / "rank0.json"
    p.write_text(json.dumps(doc))  # the stdlib writes integers beyond 64 bits, as a damaged file may hold
    t = load_trace(p)
    assert t.steps.step.tolist() == [1]
    assert t.activity.stream.tolist() == [-1, 20] and t.collectives.in_nelems.tolist() == [-1]
    assert any("baseTimeNanoseconds" in w for w in t.warnings)
    assert any("1 events with a non-numeric or out-of-range ts" in w for w in t.warnings)


def test_bad_utf8_and_malformed_events_keep_the_rest(tmp_path):
    good = kb.write(tmp_path / "x.json", kb.trace([kb.step(1, 0, 100), kb.kernel(10, 20, name="gemm_X"),
                                                   kb.nccl(40, 10)])).read_bytes()
    p = tmp_path / "rank0.json"
    p.write_bytes(good.replace(b"gemm_X", b"gemm_\xff").replace(b'"traceEvents": [', b'"traceEvents": [1, "x",'))
    t = load_trace(p)
    assert len(t.activity) == 2 and "gemm_\ufffd" in t.names
    assert any("invalid UTF-8 replaced" in w for w in t.warnings)
    assert any("2 trace events that are not event objects skipped" in w for w in t.warnings)


def test_many_unnamed_rccl_kernels_resolve_from_their_launching_op(tmp_path):
    """ncclDevKernel_Generic with no args: the op comes from the CPU span around the launch (indexed lookup)."""
    ev = []
    for i in range(3000):
        t0 = 100.0 * i
        ev += [{"ph": "X", "cat": "cpu_op", "name": "nccl:all_reduce", "pid": 1, "tid": 100, "ts": t0, "dur": 5,
                "args": {}},
               kb.runtime(t0 + 1, 1, correlation=i + 1),
               kb.kernel(t0 + 10, 20, "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", stream=20,
                         correlation=i + 1)]
    t = load_trace(kb.write(tmp_path / "rank0.json", kb.trace(ev)))
    assert (t.collectives.op == "allreduce").sum() == 3000
