"""Hang post-mortem: match calls per process group, find where each rank is blocked, follow chains to the head.

Sources (best first): Flight Recorder entries and pg_status, NCCL COLL `opCount` per communicator, watchdog
`SeqNum` / last enqueued / last completed, and stderr (who died, how, and who timed out waiting for whom).
Stages: inputs (tables) → matching (divergences) → waits (blocking points, wait-for graph) → verdict (roots).
docs/hang-analysis.md gives the exact rules.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

import numpy as np

from analyzer.hang import job_end, log_failures, matching, named_ranks, nccl_errors, ras, verdict, waits
from analyzer.hang.diagnosis import KIND_ALIASES, HangDiagnosis, HangReport  # noqa: F401  (public names)
from analyzer.hang.inputs import HangInputs, gather
from analyzer.hang.stderr_facts import add_log_errors, stderr_facts
from parsers.table import Table


def _tail(path: str, n: int = 3) -> list[tuple[int, str]]:
    """Last n non-empty lines of a text file with 1-based line numbers (evidence for a crashed/stalled rank)."""
    try:
        with open(path, "rb") as fh:
            lines = fh.read(4 << 20).decode("utf-8", "replace").splitlines()
    except OSError:
        return []
    out = [(i + 1, s.strip()) for i, s in enumerate(lines) if s.strip()]
    return out[-n:]


def _add_log_tails(inp: HangInputs, d: HangDiagnosis, rank_logs: dict[int, str], quoted: set[str]) -> None:
    """Quote a culprit's own last log lines (a file that belongs to that rank only), unless already quoted."""
    for r in d.culprit_ranks:
        if r not in rank_logs or str(rank_logs[r]) in quoted:
            continue
        path = str(rank_logs[r])
        d.evidence[0:0] = [(path, ln, f"rank {r} last log line: {text}") for ln, text in _tail(path)]


TABLE_COLUMNS = ["process_group", "pg_desc", "rank", "last_seen_seq", "last_op", "source", "last_enqueued",
                 "last_started", "last_completed", "p2p_enqueued", "p2p_completed", "space"]
_TABLE_INTS = ("rank", "last_seen_seq", "last_enqueued", "last_started", "last_completed", "p2p_enqueued",
               "p2p_completed")


def _tables(inp: HangInputs) -> Table:
    """Per group, per rank: last collective seen, last enqueued / completed (translated) and the last op."""
    rows: dict[tuple, dict] = {}
    c = inp.calls[inp.calls["kind"] == "coll"]
    for (g, r), x in c.groups(["group", "rank"]):
        last = x.sort_values("seq").row(-1)
        rows[(g, int(r))] = dict(process_group=g, pg_desc=inp.groups[g].desc if g in inp.groups else "", rank=int(r),
                                 last_seen_seq=int(last["seq"]), last_op=str(last["op"]), source=str(last["source"]))
    # the translated status of each (group, rank), the first source in name order when several give one
    st = inp.progress.sort_values("source").drop_duplicates(["group", "rank"])
    for x in st.records():
        row = rows.setdefault((x["group"], int(x["rank"])), dict(process_group=x["group"], rank=int(x["rank"])))
        row.update(last_enqueued=x["coll_enqueued"], last_started=x["raw_started"],
                   last_completed=x["coll_completed"], p2p_enqueued=x["p2p_enqueued"],
                   p2p_completed=x["p2p_completed"], space=x["space"])
    out = [{c: r.get(c, -1 if c in _TABLE_INTS else "") for c in TABLE_COLUMNS} for _, r in sorted(rows.items())]
    for r in out:
        for col in ("pg_desc", "last_op", "source", "space"):
            r[col] = str(r[col])
    return Table.from_records(out, TABLE_COLUMNS, {c: (np.int64 if c in _TABLE_INTS else object)
                                                   for c in TABLE_COLUMNS})


def _group_key(k: str) -> tuple:
    return (k.startswith("nccl:"), len(k), k)


def analyze_hang(dumps: Iterable[Any] = (), logs: Iterable[Any] = (), world_size: int | None = None,
                 rank_logs: dict[int, str | Path] | None = None, stderr_logs: Iterable[Any] = (),
                 ras_reports: Iterable[Any] = ()) -> HangReport:
    """Diagnose a hang or crash from FR dumps, NCCL/watchdog logs and stderr; ranked, root cause first.

    `rank_logs` optionally maps a rank to a file that holds only that rank's output, so that culprits get their
    last lines as evidence; `stderr_logs` are parsed stderr files (parsers/torch_stderr.py); `ras_reports` saved
    NCCL RAS reports (parsers/nccl_ras.py), joined with the rest by analyzer/hang/ras.py. Without
    `world_size` it is inferred from these inputs (analyzer/load/world.py).
    """
    dumps, logs, stderr_logs, ras_reports = list(dumps), list(logs), list(stderr_logs), list(ras_reports)
    if world_size is None:  # what the inputs show: a dump's world entry, the largest rank of any of them
        from analyzer.load.world import infer_world_size
        world_size = infer_world_size(dumps=dumps, stderr_logs=stderr_logs, nccl_logs=logs).size
    inp = gather(dumps, logs, world_size)
    facts = stderr_facts(stderr_logs)
    add_log_errors(facts, inp.errors)
    inp.world |= {r for r in facts.ranks if r < (world_size or 1 << 20)}
    divs = [d for key in sorted(inp.groups, key=_group_key) if (d := matching.group_divergence(inp, key))]
    lates = matching.late_arrivals(inp, skip={d.group for d in divs})
    st = waits.rank_states(inp, {(d.group, d.seq): d.culprits for d in divs + lates})
    edges = waits.wait_edges(st)
    diags, no_dump = verdict.build(inp, st, edges, divs, facts, lates)
    member_lists = [(str(g.key), sorted(g.members)) for g in inp.groups.values() if g.members]
    diags = nccl_errors.apply(named_ranks.apply(diags, stderr_logs, member_lists), stderr_logs)  # stderr that names it outright
    diags = named_ranks.apply_stated_views(diags, stderr_logs, set(inp.world))  # DDP's model check: the odd rank
    diags = log_failures.apply(diags, stderr_logs)  # a log that shows a failure never reads as OK
    diags = job_end.apply(diags, inp, facts, stderr_logs)  # a job that finished, or was stopped from outside
    quoted = {e[0] for d in diags for e in d.evidence}
    for d in diags:
        if d.kind in ("crashed_rank", "lagging_rank", "missing_rank", "nccl_error", "device_stalled"):
            _add_log_tails(inp, d, {int(k): str(v) for k, v in (rank_logs or {}).items()}, quoted)
    ras_facts = ras.ras_facts(ras_reports, world_size, logs)
    diags = ras.apply(diags, ras_facts)  # RAS's launch counts, dead processes and errors join the verdict
    groups = Table.from_records([dict(process_group=g.key, pg_desc=g.desc, members=sorted(g.members or []),
                                      member_source=g.member_source, source=g.source) for g in inp.groups.values()],
                                ["process_group", "pg_desc", "members", "member_source", "source"],
                                {"members": object})
    warnings = list(inp.warnings) + [w for d in dumps + logs + stderr_logs + ras_reports
                                     for w in getattr(d, "warnings", [])]
    for r, f in sorted(inp.dumps.items()):
        if f.entries == 0:
            warnings.append(f"{f.path}: rank {r}'s dump holds no entries (empty buffer): it recorded no collective")
    return HangReport(diagnoses=diags, tables=_tables(inp), groups=groups, seqs=inp.calls, warnings=warnings,
                      ranks_without_dump=no_dump, waits=edges,
                      ras=ras.summary(ras_reports, ras_facts) if ras_reports else {})


def load_and_analyze(paths: Iterable[str | Path], world_size: int | None = None) -> HangReport:
    """Convenience: read dumps (and logs via parsers.nccl_log) from paths, skipping unreadable ones with a warning."""
    from parsers.errors import InputError
    from parsers.flight_recorder import load_dump, looks_like_fr_dump

    dumps, logs, warnings = [], [], []
    for p in paths:
        try:
            with open(p, "rb") as fh:
                head = fh.read(4096)
        except OSError as exc:
            warnings.append(f"{p}: cannot open: {exc.strerror or exc}")
            continue
        try:
            if looks_like_fr_dump(head) or head[:1] == b"\x80":
                dumps.append(load_dump(p))
            else:
                from parsers.nccl_log import parse_nccl_log

                logs.append(parse_nccl_log(p))
        except InputError as exc:
            warnings.append(str(exc))
    rep = analyze_hang(dumps, logs, world_size)
    rep.warnings[:0] = warnings
    return rep
