"""parsers/torch_stderr on real torchrun + gloo captures (fixtures/stderr/real-cpu): the facts known by construction."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from parsers.torch_stderr import parse_stderr
from tests.tables import pandas_tables

parse_stderr = pandas_tables(parse_stderr)  # the tables as DataFrames (tests/tables.py)

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "stderr" / "real-cpu"
CASES = sorted(p.name for p in REAL.iterdir() if (p / "expected.json").exists())
WITH_TABLE = [c for c in CASES if c not in ("eaddrinuse", "connect_wrong_port", "missing_node", "sigterm_agent")]


def load(case: str):
    exp = json.loads((REAL / case / "expected.json").read_text())
    return parse_stderr(REAL / case / "torchrun.log"), exp


def stream_tbs(log, rank: int):
    t = log.tracebacks
    return t[(t["rank"] == rank) & (t["source"] == "stream")]


def test_every_case_is_here():
    assert len(CASES) == 21


@pytest.mark.parametrize("case", CASES)
def test_clean_captures_parse_without_warnings(case):
    log, _ = load(case)
    assert log.warnings == []
    assert (log.events["line"] >= 1).all() and (log.events["line"] <= log.n_lines).all()


@pytest.mark.parametrize("case", [c for c in CASES if "exc_type" in json.loads((REAL / c / "expected.json").read_text())
                                  and "culprit" in json.loads((REAL / c / "expected.json").read_text())])
def test_the_culprit_raised_what_it_was_made_to_raise(case):
    log, exp = load(case)
    tb = stream_tbs(log, exp["culprit"])
    if case == "redirects_logdir":  # the workers' stderr went to files: the console has only torchrun's table
        tb = log.tracebacks[(log.tracebacks["rank"] == exp["culprit"]) & (log.tracebacks["source"] == "failure_table")]
    final = tb[~tb["chained"]] if "cause_exc_type" not in exp else tb[tb["chained"]]
    assert len(final) == 1
    row = final.iloc[0]
    assert row["exc_type"] == exp["exc_type"] or row["exc_type"].endswith("." + exp["exc_type"])
    if "message" in exp:
        assert row["message"] == exp["message"]
    if "cause_exc_type" in exp:  # the fault line is in the cause; the final traceback re-raises from it
        cause = tb[~tb["chained"]].iloc[0]
        assert cause["exc_type"] == exp["cause_exc_type"] and cause["line"] < row["line"]
        row = cause
    if "user_func" in exp:
        assert (row["user_file"].endswith("/workload.py"), row["user_func"], row["user_line"]) == \
            (True, exp["user_func"], exp["user_line"])
    ev = log.events
    assert ((ev["kind"] == "exception") & (ev["rank"] == exp["culprit"])).any() or case == "redirects_logdir"


@pytest.mark.parametrize("case", WITH_TABLE)
def test_the_failure_table_lists_every_rank_once_per_launcher(case):
    log, exp = load(case)
    f = log.failures
    assert sorted(f["rank"]) == list(range(exp["world"]))
    assert (f.groupby("label", observed=True)["root_cause"].sum() == 1).all()
    assert (f["pid"] > 0).all() and (f["host"] == "localhost").all()
    # every child_failed line names a pid that the table maps to the same rank
    child = log.events[log.events["kind"] == "child_failed"]
    assert len(child) == f["label"].nunique()
    for r in child.itertuples():
        assert f[(f["pid"] == r.pid)]["rank"].tolist() == [r.rank]
    # torchrun SIGTERMs the others after the first failure it reaps: every -15 in the table was sent one
    # (a rank may still exit on its own first), and the root cause never is
    sent = set(log.events[log.events["kind"] == "sigterm_sent"]["rank"])
    assert set(f[f["exitcode"] == -15]["rank"]) <= sent
    assert not sent & set(f[f["root_cause"]]["rank"])


@pytest.mark.parametrize("case", [c for c in CASES if "exitcode" in json.loads((REAL / c / "expected.json").read_text())])
def test_exit_codes_and_signals_of_the_culprit(case):
    log, exp = load(case)
    row = log.failures[log.failures["rank"] == exp["culprit"]].iloc[0]
    assert (row["exitcode"], row["signal"], bool(row["root_cause"])) == (exp["exitcode"], exp["signal"], True)


def test_gloo_size_mismatch_abort_has_no_rank_prefix():
    log, exp = load("gloo_size_mismatch")
    ev = log.events
    mism = ev[ev["kind"] == "gloo_size_mismatch"].iloc[0]
    # gloo aborts from C++: std::terminate writes no [rankN]: tag, so the line's rank is unknown …
    assert mism["rank"] == -1 and mism["bytes_a"] > mism["bytes_b"] > 0 and mism["where"].endswith(".cc:" +
                                                                                                      mism["where"].split(":")[-1])
    assert ((ev["kind"] == "signal") & (ev["line"] == mism["line"] - 1) & (ev["code"] == 6)).any()
    # … and torchrun's table is where the SIGABRT rank is written
    assert log.failures[log.failures["signal"] == "SIGABRT"]["rank"].tolist() == [exp["culprit"]]


def test_missing_rank_is_not_torchruns_root_cause():
    log, exp = load("gloo_timeout_missing_rank")
    absent = exp["absent"]
    ev = log.events
    timed_out = ev[ev["kind"].isin(["recv_timeout", "send_timeout"])]
    assert sorted(timed_out["rank"]) == [r for r in range(exp["world"]) if r != absent]
    assert set(timed_out["timeout_ms"]) == {exp["timeout_ms"]}
    assert stream_tbs(log, absent).empty
    root = log.failures[log.failures["root_cause"]].iloc[0]
    assert root["rank"] != absent  # torchrun names the first rank it reaped, not the rank that never came
    assert log.failures[log.failures["rank"] == absent]["signal"].tolist() == ["SIGTERM"]


@pytest.mark.parametrize("case", ["p2p_recv_timeout", "p2p_send_timeout"])
def test_p2p_timeouts(case):
    log, exp = load(case)
    ev = log.events[log.events["kind"] == exp["kind"]]
    assert ev[["rank", "timeout_ms"]].values.tolist() == [[exp["culprit"], exp["timeout_ms"]]]
    # torch 2.13's gloo names neither peer nor tag in its timeout text
    assert ev.iloc[0]["peer"] == "" and ev.iloc[0]["tag"] == -1


def test_sigkill_and_exit_code_leave_connection_errors_on_the_others():
    for case in ("sigkill_rank", "exit_code_rank"):
        log, exp = load(case)
        ev = log.events[log.events["kind"].isin(["connection_reset", "connection_closed"])]
        assert sorted(ev["rank"]) == [r for r in range(exp["world"]) if r != exp["culprit"]]
        assert stream_tbs(log, exp["culprit"]).empty  # it died without a Python traceback


def test_allgather_invalid_size():
    log, exp = load("allgather_invalid_size")
    ev = log.events[log.events["kind"] == "gloo_invalid_tensor_size"]
    assert ev[["rank", "op", "reason"]].values.tolist() == [[exp["culprit"], "allgather",
                                                             "index 0: expected (3), got (16)"]]


def test_monitored_barrier_names_the_late_rank():
    log, exp = load("monitored_barrier")
    ev = log.events[(log.events["kind"] == "monitored_barrier") & (log.events["reason"] == "failed to pass")]
    assert set(ev["rank"]) == {exp["reporter"]} and set(ev["peer_rank"]) == {exp["late"]}
    assert set(ev["timeout_ms"]) == {2000}


def test_collective_mismatch_detail():
    log, exp = load("collective_mismatch_detail")
    ev = log.events[log.events["kind"] == "collective_mismatch"]
    assert sorted(ev["rank"]) == list(range(exp["world"]))
    # the first collective after init_process_group: its fingerprint counts from 0 (Flight Recorder from 1)
    assert set(ev["op"]) == {"ALLREDUCE"} and set(ev["seq"]) == {0}
    odd = ev[ev["rank"] == exp["odd"]].iloc[0]
    assert odd["reason"] == "Tensor Tensor shapes: 8vs 16"
    assert (ev[ev["rank"] != exp["odd"]]["peer_rank"] == exp["odd"]).all()


def test_store_and_rendezvous_failures():
    log, exp = load("store_get_timeout")
    st = log.events[(log.events["kind"] == "store_timeout") & (log.events["rank"] == exp["culprit"])]
    assert exp["timeout_ms"] in set(st["timeout_ms"]) and st["reason"].str.contains("checkpoint_done").any()

    log, exp = load("eaddrinuse")
    port = re.search(r"--master_port (\d+)", exp["command"]).group(1)
    ev = log.events[log.events["kind"] == "rendezvous_eaddrinuse"]
    assert ev["peer"].tolist() == [port] and (ev["exc_type"] == exp["exc_type"]).all()

    log, exp = load("connect_wrong_port")
    port = re.search(r"--master_port (\d+)", exp["command"]).group(1)
    ev = log.events[log.events["kind"] == "rendezvous_refused"]
    assert set(ev["peer"]) == {f"127.0.0.1:{port}"} and set(ev["timeout_ms"]) == {exp["timeout_ms"]}
    assert log.tracebacks["exc_type"].tolist() == [exp["exc_type"]]

    log, exp = load("missing_node")
    ev = log.events[log.events["kind"] == "store_timeout"]
    assert ev["reason"].tolist() == [f"{exp['joined']}/{exp['expected_clients']} clients joined"]


def test_sigterm_to_the_launcher():
    log, _ = load("sigterm_agent")
    sig = log.events[log.events["kind"] == "signal"]
    assert set(sig["code"]) == {15} and set(sig["rank"]) == {-1}
    assert log.tracebacks["exc_type"].tolist() == ["torch.distributed.elastic.multiprocessing.api.SignalException"]
    assert log.failures.empty


def test_two_nodes_labelled_by_srun():
    log, exp = load("two_nodes_srun_label")
    assert log.ranks == list(range(exp["world"]))
    assert sorted(log.failures["label"].unique()) == ["0", "1"]
    # each node's table maps its own local ranks; the culprit's traceback is on its global rank
    tb = log.tracebacks[log.tracebacks["source"] == "stream"]
    assert tb[tb["exc_type"] == "ValueError"]["rank"].tolist() == [exp["culprit"]]
    assert sorted(tb[tb["exc_type"] == "RuntimeError"]["rank"]) == [r for r in range(4) if r != exp["culprit"]]
    for r in tb[tb["rank"] >= 0].itertuples():
        row = log.failures[(log.failures["label"] == r.label) & (log.failures["rank"] == r.rank)]
        assert row["local_rank"].tolist() == [r.local_rank]


def test_tee_filter_shows_only_the_filtered_rank():
    log, exp = load("local_ranks_filter")
    tb = log.tracebacks[(log.tracebacks["source"] == "stream") & (log.tracebacks["rank"] >= 0)]
    assert tb["rank"].tolist() == [exp["culprit"]]
    assert sorted(log.failures["rank"]) == list(range(exp["world"]))


@pytest.mark.parametrize("case", ["record_tee_logdir", "redirects_logdir"])
def test_record_puts_the_childs_traceback_in_the_table(case):
    log, exp = load(case)
    row = log.failures[log.failures["rank"] == exp["culprit"]].iloc[0]
    assert row["exc_type"] == exp["exc_type"] and row["error_file"].endswith(f"/{exp['culprit']}/error.json")
    tb = log.tracebacks[(log.tracebacks["source"] == "failure_table") & (log.tracebacks["rank"] == exp["culprit"])]
    assert tb[["user_func", "user_line"]].values.tolist() == [[exp["user_func"], exp["user_line"]]]


@pytest.mark.parametrize("case", ["record_tee_logdir", "redirects_logdir", "local_ranks_filter"])
def test_log_dir_files_are_single_rank_files(case):
    _, exp = load(case)
    files = sorted((REAL / case / "logs").rglob("stderr.log"))
    assert len(files) == exp["world"]
    for f in files:
        log = parse_stderr(f)
        local = int(f.parent.name)
        assert log.rank == local  # one node: local rank == global rank
        tb = log.tracebacks
        assert set(tb["rank"]) == {local} and set(tb["local_rank"]) == {local}
        assert (tb["exc_type"] == exp["exc_type"]).any() == (local == exp["culprit"])
