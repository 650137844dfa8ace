"""Bytes per element of the dtype names PyTorch writes (Kineto's `dtype` arg, Flight Recorder dtypes, lower-cased).

One table for the trace path (analyzer/cross_rank/collectives.py) and the hang path (analyzer/hang/size_abort.py),
kept in a module of its own so that the hang path reads it without importing the trace path's modules.
"""
from __future__ import annotations

DTYPE_BYTES = {
    "float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2, "bfloat16": 2,
    "int": 4, "int32": 4, "long": 8, "int64": 8, "short": 2, "int16": 2, "char": 1, "int8": 1, "byte": 1,
    "uint8": 1, "bool": 1, "complexfloat": 8, "complexdouble": 16, "complexhalf": 4, "float8_e4m3fn": 1,
    "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1, "uint16": 2, "uint32": 4, "uint64": 8,
}
