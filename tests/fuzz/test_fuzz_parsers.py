"""Each parser on damaged and hostile input of its kind: it returns tables or raises InputError, nothing else.

The examples come from tests/fuzz/mutators.py, seeded: a failure message names the seed and example number,
and `--fuzz-seed S` with enough `--fuzz-examples` reproduces it.
"""
from __future__ import annotations

import random

import pytest

from parsers.discover import classify
from parsers.errors import InputError
from parsers.flight_recorder import load_dump
from parsers.kineto import load_trace
from parsers.nccl_log import parse_nccl_log
from parsers.nccl_ras import parse_ras
from parsers.torch_stderr import parse_stderr
from tests.fuzz import mutators as mu

PARSERS = {"trace": load_trace, "log": parse_nccl_log, "stderr": parse_stderr, "fr_pickle": load_dump,
           "fr_json": load_dump, "ras": parse_ras}


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(PARSERS))
def test_parser_never_raises_anything_but_input_error(kind, tmp_path, fuzz_size, fuzz_seed):
    seeds = [mu.read_fixture(s) for s in mu.SEEDS[kind]]
    rng = random.Random(f"{fuzz_seed}-{kind}")
    outcomes = {"read": 0, "refused": 0}
    for i in range(fuzz_size[0]):
        data = mu.mutate(rng, rng.choice(seeds), kind)
        path = tmp_path / f"{i}-{mu.hostile_name(rng, kind)}"
        path.write_bytes(data)
        try:
            classify(path)
            result = PARSERS[kind](path)
            outcomes["read"] += 1
            for w in getattr(result, "warnings", []):
                assert isinstance(w, str)
        except InputError as exc:
            assert exc.reason and str(path) in str(exc)
            outcomes["refused"] += 1
        except BaseException as exc:
            raise AssertionError(f"seed {fuzz_seed} {kind} example {i}: {type(exc).__name__}: {exc}") from exc
        finally:
            path.unlink()
    assert outcomes["read"] > 0  # the mutations leave readable files too, or the test proves little
