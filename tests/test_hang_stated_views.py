"""Issue 30, items 1, 2 and 4 on hand-built stderr (the real runs are in tests/test_hang_failures4.py): DDP's model
check read by majority, independent crashes split by torchrun's failure times, a finished job's caught traceback,
a job stopped from outside. Numbers and ranks are set by hand, so each assertion can fail."""
from __future__ import annotations

from analyzer.hang.analysis import analyze_hang
from analyzer.hang.named_ranks import model_check
from parsers.torch_stderr import parse_stderr_lines


def _log(text: str):
    return parse_stderr_lines(text.splitlines(), "torchrun.log")


def _raise(rank: int, msg: str) -> str:
    return (f"[rank{rank}]: Traceback (most recent call last):\n"
            f'[rank{rank}]:   File "/home/u/train.py", line 40, in <module>\n'
            f"[rank{rank}]:     model = DDP(model)\n"
            f"[rank{rank}]: RuntimeError: {msg}\n")


def test_param_count_statements_name_the_odd_rank_by_majority():
    text = "".join(_raise(r, f"DDP expects same model across all ranks, but Rank {r} has {n} params, while rank "
                             f"{o} has inconsistent {m} params.")
                   for r, n, o, m in ((0, 4, 3, 6), (1, 4, 3, 6), (2, 4, 3, 6), (3, 6, 0, 4)))
    mc = model_check([_log(text)], {0, 1, 2, 3})
    assert (mc.odd, mc.tie, mc.values) == ([3], False, {0: "4", 1: "4", 2: "4", 3: "6"})
    d = analyze_hang(stderr_logs=[_log(text)], world_size=4).diagnoses
    assert [(x.kind, x.culprit_ranks, x.confidence) for x in d] == [("mismatched_size", [3], 0.9)]


def test_shape_statements_against_rank_0():
    one = _raise(2, "[2]: params[0] in this process with sizes [17, 8] appears not to match sizes of the same param "
                    "in process 0.")
    assert model_check([_log(one)], {0, 1, 2, 3}).odd == [2]
    two = one + _raise(1, "[1]: params[0] in this process with sizes [17, 8] appears not to match sizes of the same "
                          "param in process 0.")
    assert model_check([_log(two)], {0, 1, 2}).odd == [0]  # ranks 1 and 2 both differ from rank 0: rank 0 is odd
    tie = model_check([_log(one)], {0, 1, 2, 3} - {1, 3})
    assert tie.tie and tie.odd == [0, 2]


TABLE = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-12-06_04:18:{t3:02d}
  host      : localhost
  rank      : 3 (local_rank: 3)
  exitcode  : 1 (pid: 18068)
  error_file: /tmp/e/3/error.json
  traceback : Traceback (most recent call last):
    KeyError: 'lr'
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-06_04:18:27
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 18066)
  error_file: /tmp/e/1/error.json
  traceback : Traceback (most recent call last):
    ValueError: bad sample
============================================================
"""


def _crashes(t3: int) -> list[list[int]]:
    text = _raise(1, "bad sample").replace("RuntimeError", "ValueError") + \
        _raise(3, "'lr'").replace("RuntimeError", "KeyError") + TABLE.format(t3=t3)
    return [d.culprit_ranks for d in analyze_hang(stderr_logs=[_log(text)], world_size=4).diagnoses]


def test_crashes_a_second_apart_are_two_findings_first_first():
    assert _crashes(29) == [[1], [3]]
    assert _crashes(27) == [[1, 3]]  # the same second: one finding, as before


def test_a_launcher_signal_with_no_failure_is_a_stop_from_outside():
    text = ("step 7 loss 0.93\n"
            "W1206 04:27:34.185000 30765 torch/distributed/elastic/agent/server/api.py:753] Received 15 death "
            "signal, shutting down workers\n"
            "torch.distributed.elastic.multiprocessing.api.SignalException: Process 30765 got signal: 15\n")
    d = analyze_hang(stderr_logs=[_log(text)], world_size=2).diagnoses
    assert [(x.kind, x.culprit_ranks) for x in d] == [("stopped_externally", [])]


def test_a_hang_stopped_from_outside_keeps_the_hang_as_its_root(tmp_path):
    """The dumps show rank 1 missing from the collective ranks 0 and 2 wait in; then the scheduler stopped it."""
    from tests.test_hang_fr_semantics import cfg, ent, status, write
    from parsers.flight_recorder import load_dump
    c = cfg(**{"0": ("default_pg", range(3))})
    dumps = []
    for r, n in ((0, 3), (1, 2), (2, 3)):
        es = [ent(i, i, "0", "default_pg", i + 1, ins=((4,),)) for i in range(n)]
        dumps.append(load_dump(write(tmp_path, r, es, c, {"0": status(n, n - 1)})))
    text = ("W1206 04:27:34.185000 30765 torch/distributed/elastic/agent/server/api.py:753] Received 15 death "
            "signal, shutting down workers\n")
    d = analyze_hang(dumps, stderr_logs=[_log(text)], world_size=3).diagnoses
    assert d[0].culprit_ranks == [1] and d[-1].kind == "stopped_externally" and d[-1].confidence == 0.5
