"""The naive floor: gunzip and ``orjson.loads`` every trace file, one after the other, and nothing else.

    python benchmarks/floor.py FILE...
"""
from __future__ import annotations

import gzip
import sys

import orjson


def main(paths: list[str]) -> int:
    n = 0
    for p in paths:
        with open(p, "rb") as fh:
            data = fh.read()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        doc = orjson.loads(data)
        n += len(doc.get("traceEvents", ()))
        del doc, data
    print(n)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
