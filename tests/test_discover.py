"""File discovery classifies by content, not by name."""
import gzip
import pickle

from parsers.discover import FR_DUMP, KINETO, NCCL_LOG, UNKNOWN, classify, discover
from tests import kineto_builder as kb
from tests.conftest import CORPUS


def test_corpus_traces_are_kineto():
    files, problems = discover([CORPUS])
    kinds = {f.path: f.kind for f in files}
    assert not problems
    assert sum(1 for p, k in kinds.items() if p.endswith(".json.gz") and k == KINETO) == 19
    assert all(k == UNKNOWN for p, k in kinds.items() if p.endswith(".md"))


def test_content_beats_name(tmp_path):
    log = tmp_path / "trace.json"      # a log named like a trace
    log.write_text("node1:123:456 [0] NCCL INFO NCCL version 2.18.3+cuda12.2\n")
    trace = tmp_path / "output.log"    # a trace named like a log
    kb.write(trace, kb.trace([kb.kernel(0, 1)]))
    gz = kb.write(tmp_path / "x.bin", kb.trace([kb.kernel(0, 1)]), gz=True)
    fr = tmp_path / "nccl_trace_rank_3"
    fr.write_bytes(pickle.dumps({"version": "2.5", "pg_config": {}, "entries": []}))
    frj = tmp_path / "dump.json"
    frj.write_text('{"version": "2.5", "pg_config": {}, "entries": []}')
    wd = tmp_path / "stderr.txt"
    wd.write_text("[rank1]:[E1129 08:11:59.1 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective "
                  "operation timeout: WorkNCCL(SeqNum=4, OpType=ALLREDUCE) ran for 600012 milliseconds\n")
    assert classify(log).kind == NCCL_LOG
    assert classify(trace).kind == KINETO
    assert classify(gz).kind == KINETO
    assert classify(fr).kind == FR_DUMP
    assert classify(frj).kind == FR_DUMP
    assert classify(wd).kind == NCCL_LOG


def test_unknown_files_say_why(tmp_path):
    (tmp_path / "empty.json").write_bytes(b"")
    (tmp_path / "cfg.json").write_text('{"lr": 0.1}')
    (tmp_path / "img.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00")
    (tmp_path / ".hidden.json").write_text("{}")
    files, _ = discover([tmp_path])
    why = {f.path.rsplit("/", 1)[-1]: f.reason for f in files}
    assert why == {"cfg.json": "JSON, but neither a profiler trace nor a Flight Recorder dump",
                   "empty.json": "empty file", "img.png": "binary data, not a trace"}
