"""Bad and hostile input for parsers/torch_stderr: warnings, never exceptions; the guard loses no line."""
from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from parsers.errors import InputError
from parsers.torch_stderr import MAX_LINE, parse_stderr, parse_stderr_lines
from tests.tables import pandas_tables

parse_stderr = pandas_tables(parse_stderr)  # the tables as DataFrames (tests/tables.py)
parse_stderr_lines = pandas_tables(parse_stderr_lines)  # the tables as DataFrames (tests/tables.py)

FIX = Path(__file__).resolve().parents[1] / "fixtures"
STD = FIX / "stderr"
DAMAGED = STD / "damaged"
EXC = STD / "real-cpu" / "exception_rank1" / "torchrun.log"
TEXT_FILES = sorted(p for p in STD.rglob("*") if p.is_file() and p.suffix in (".log", ".txt", ".gz", ".bin")) + \
    sorted((FIX / "real-cpu-hang").rglob("*.stderr")) + [FIX / "sim" / "hang_crashed_rank" / "stderr_rank7.log"]


def same_tables(a, b) -> bool:
    return a.events.equals(b.events) and a.tracebacks.equals(b.tracebacks) and a.failures.equals(b.failures) \
        and a.ranks == b.ranks


@pytest.mark.parametrize("path", TEXT_FILES, ids=lambda p: str(p.relative_to(FIX)))
def test_the_guard_loses_nothing(path):
    assert same_tables(parse_stderr(path), parse_stderr(path, all_lines=True))


def test_crlf_and_gzip_give_the_same_tables():
    plain = parse_stderr(EXC)
    assert same_tables(parse_stderr(DAMAGED / "crlf.log"), plain)
    assert same_tables(parse_stderr(DAMAGED / "gloo_size_mismatch.log.gz"),
                       parse_stderr(STD / "real-cpu" / "gloo_size_mismatch" / "torchrun.log"))


def test_interleaved_workers_keep_their_tracebacks():
    merged = parse_stderr(DAMAGED / "interleaved_3ranks.log")
    cols = ["rank", "exc_type", "message", "user_file", "user_line", "user_func", "frames"]
    singles = [parse_stderr(p) for p in sorted((STD / "real-cpu" / "local_ranks_filter" / "logs").rglob("stderr.log"))]
    want = sorted(tuple(r) for s in singles for r in s.tracebacks[cols].astype(object).itertuples(index=False))
    assert sorted(tuple(r) for r in merged.tracebacks[cols].astype(object).itertuples(index=False)) == want


def test_huge_lines_are_cut_and_counted():
    log = parse_stderr(DAMAGED / "huge_lines.log")
    assert log.warnings == [f"{DAMAGED / 'huge_lines.log'}: 2 line(s) longer than {MAX_LINE // 1024} KiB cut to that "
                            "length (first at line 4)"]
    plain = parse_stderr(EXC)
    assert log.n_lines == plain.n_lines + 1  # the inserted line; the cut parts are no lines of their own
    assert log.tracebacks["exc_type"].tolist() == plain.tracebacks["exc_type"].tolist()
    assert log.tracebacks.iloc[0]["message"].startswith("loss is NaN at step 2 xxx")


def test_bytes_that_are_not_utf8():
    log = parse_stderr(DAMAGED / "non_utf8.log")
    assert log.warnings == [f"{DAMAGED / 'non_utf8.log'}: 2 line(s) with bytes that are not UTF-8, replaced "
                            "(first at line 1)"]
    assert log.tracebacks.iloc[0]["message"] == "loss is NaN \ufffd\ufffd at step 2"


def test_truncated_mid_line():
    log = parse_stderr(DAMAGED / "truncated_midline.log")
    assert any("no newline" in w for w in log.warnings)
    tb = log.tracebacks
    assert tb[tb["rank"] == 1]["exc_type"].tolist() == ["ValueError"]
    last = tb.iloc[-1]  # the file ends inside rank 0's exception line: its type is there, its message is cut
    assert (last["rank"], last["exc_type"], last["end_line"]) == (0, "RuntimeError", log.n_lines)
    assert last["message"] == "[/__w/pytorch/pyt"


def test_nul_bytes_binary_and_empty():
    nul = parse_stderr(DAMAGED / "nul_tail.log")
    assert any("NUL bytes" in w for w in nul.warnings) and same_tables(nul, parse_stderr(EXC))
    binary = parse_stderr(DAMAGED / "binary.bin")
    assert binary.events.empty and any("not UTF-8" in w for w in binary.warnings)
    empty = parse_stderr(DAMAGED / "empty.log")
    assert empty.n_lines == 0 and empty.events.empty and empty.warnings[0].endswith("empty file")


def test_damaged_gzip_keeps_what_inflated(tmp_path):
    log = parse_stderr(DAMAGED / "damaged_gzip.log.gz")
    assert any("reading stopped" in w for w in log.warnings)
    full = parse_stderr(STD / "real-cpu" / "gloo_size_mismatch" / "torchrun.log")
    assert 0 < log.n_lines < full.n_lines
    assert log.events["kind"].tolist() == full.events["kind"].tolist()[:len(log.events)]
    junk = tmp_path / "x.log.gz"
    junk.write_bytes(b"\x1f\x8b" + b"not a gzip at all")
    assert any("reading stopped" in w for w in parse_stderr(junk).warnings)


def test_unreadable_paths_raise_input_error(tmp_path):
    with pytest.raises(InputError):
        parse_stderr(tmp_path)  # a folder
    with pytest.raises(InputError):
        parse_stderr(tmp_path / "missing.log")


HOSTILE = [
    "NCCL error in: " + "a" * 65000,
    "[rank1]:" * 8000,
    "Rank 1 is running collective: CollectiveFingerPrint(SequenceNumber=1, OpType=X" * 800
    + "Detected mismatch between collectives",
    '  File "' + "x" * 65000,
    "CUDA out of memory. Tried to allocate " + "1.00 GiB " * 7000,
    "Timed out waiting " + "9" * 65000,
    "[" * 65000,
    "Xid (" + "0:" * 32000,
    "terminate called " + "'" * 65000,
    "Killed " * 9000,
    "Traceback (most recent call last):",
    "\x1b[" * 30000,
    "0: " * 20000,
    "Failures:",
    "[1]:",
    "  rank      : " + "1" * 60000,
    "  exitcode  : " + "-" * 60000,
]


def test_hostile_lines_give_rows_or_nothing_never_an_exception():
    log = parse_stderr_lines(HOSTILE)
    assert log.n_lines == len(HOSTILE)
    assert len(log.events) < 100
    assert (log.events["text"].str.len() <= 1000).all()


def test_in_memory_lines_as_str_or_bytes():
    a = parse_stderr_lines(["[rank1]: ValueError: x\n", "Killed\n"])
    b = parse_stderr_lines([b"[rank1]: ValueError: x", b"Killed"])
    assert same_tables(a, b) and a.events["kind"].tolist() == ["host_oom_kill"]


def test_gzip_of_a_huge_file_streams(tmp_path):
    p = tmp_path / "big.log.gz"
    body = b"".join(b"[default3]:step %d loss 2.3\n" % i for i in range(200000)) + \
        b"[default3]:[rank3]: RuntimeError: CUDA error: misaligned address\n"
    p.write_bytes(gzip.compress(body))
    log = parse_stderr(p)
    assert log.n_lines == 200001 and log.events[["line", "rank", "kind"]].values.tolist() == [
        [200001, 3, "cuda_error"]]
