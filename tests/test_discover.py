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
    (tmp_path / "list.json").write_text("[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]")
    (tmp_path / "tool").write_bytes(b"\x7fELF\x02\x01\x01" + bytes(100))
    (tmp_path / "data.pkl").write_bytes(b"\x80\x04\x95\x0b\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\x01a\x94K\x01s.")
    (tmp_path / "blob").write_bytes(bytes(range(1, 9)) * 64)
    (tmp_path / "x.txt").write_text("ok\n")
    (tmp_path / "README.md").write_text("# A project\n\nSome words about it, long enough to not be tiny.\n")
    files, _ = discover([tmp_path])
    why = {f.path.rsplit("/", 1)[-1]: f.reason for f in files}
    assert why == {"cfg.json": "JSON object without traceEvents (not a profiler trace)",
                   "empty.json": "empty file", "img.png": "binary: a PNG image",
                   "list.json": "top-level JSON is a list, not a trace object",
                   "tool": "binary: an ELF executable or library",
                   "data.pkl": "binary: a Python pickle that is not a Flight Recorder dump",
                   "blob": "binary", "x.txt": "too small to be a trace (under 32 bytes)",
                   "README.md": "text, not a trace or log (no NCCL, watchdog or profiler content)"}
