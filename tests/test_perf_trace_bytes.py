"""The streaming byte layer: BlockReader gives the whole-file reader's bytes; scan_array finds exact cuts."""
from __future__ import annotations

import gzip

import pytest

from parsers.errors import InputError
from parsers.trace_bytes import BlockReader, read_trace_bytes, scan_array


def test_scan_array_respects_strings_escapes_and_nesting():
    data = b'{"traceEvents": [{"n": "}, {"}, {"a": [{"b": 1}], "q": "\\"}"}, {"cut'
    open_at = data.index(b"[")
    cut, close = scan_array(data, open_at)
    assert data[cut - 1:cut] == b"}" and data[:cut].endswith(b'"\\"}"}')
    assert close == -1
    closed = data[:cut] + b"] , \"x\": [1]}"
    cut2, close2 = scan_array(closed, open_at)
    assert (cut2, close2) == (cut, cut)


def test_scan_array_empty_and_unfinished():
    assert scan_array(b"[]", 0) == (1, 1)
    assert scan_array(b'[{"a": 1', 0) == (1, -1)


@pytest.mark.parametrize("block", [1, 7, 1 << 16])
def test_block_reader_matches_whole_file_reader(tmp_path, block):
    payload = b'{"traceEvents": [' + b",".join(b'{"i": %d}' % i for i in range(3000)) + b"]}"
    cases = {
        "plain.json": payload,
        "one.json.gz": gzip.compress(payload),
        "two.json.gz": gzip.compress(payload[:5000]) + gzip.compress(payload[5000:]) + b"tail",
        "cut.json.gz": gzip.compress(payload)[:-100],
    }
    for name, blob in cases.items():
        p = tmp_path / name
        p.write_bytes(blob)
        want = read_trace_bytes(p)
        r = BlockReader(p, block_bytes=block)
        got = b"".join(r.blocks())
        assert got == want.data, name
        assert (r.gzip_truncated, r.gzip_error, r.total) == (want.gzip_truncated, want.gzip_error, len(want.data))


def test_block_reader_stops_at_corrupt_deflate_and_bounds_size(tmp_path):
    p = tmp_path / "bad.json.gz"
    p.write_bytes(b"\x1f\x8b\x08\x00garbage-garbage-garbage")
    r = BlockReader(p)
    assert b"".join(r.blocks()) == b""  # corrupt deflate ends the stream where it is, it does not raise
    assert r.gzip_truncated and "gzip data corrupt" in r.gzip_error and "compressed byte 0" in r.gzip_error
    big = tmp_path / "big.json.gz"
    big.write_bytes(gzip.compress(b" " * 10000))
    with pytest.raises(InputError, match="inflates to more than 1000 bytes"):
        b"".join(BlockReader(big, block_bytes=100, max_bytes=1000).blocks())
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    with pytest.raises(InputError, match="empty file"):
        BlockReader(empty)
