"""Hang post-mortem: match collectives across ranks per process group, classify the first divergence, rank causes.

Sources (best first): Flight Recorder `collective_seq_id`, NCCL COLL `opCount` per communicator, watchdog
`SeqNum` / last enqueued / last completed. See docs/hang-analysis.md for the exact rules.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from analyzer.hang.inputs import Group, HangInputs, gather

Evidence = tuple[str, "int | None", str]
KIND_ALIASES = {"stalled_rank": "lagging_rank", "skipped_rank": "missing_rank"}  # other tools' names → ours
KIND_RANK = {"mismatched_op": 0, "order_mismatch": 0, "extra_collective": 0, "skipped_collective": 0,
             "mismatched_size": 1, "mismatched_dtype": 1, "crashed_rank": 2, "nccl_error": 2, "missing_rank": 3,
             "lagging_rank": 3, "watchdog_timeout": 5}
SOURCE_RANK = {"flight_recorder": 0, "watchdog": 1, "nccl_log": 2}
FIX = {
    "mismatched_op": "Make every rank of the group issue the same collective at this point: look for a collective "
                     "inside a rank-dependent branch (if rank == …) at the culprit's stack frame.",
    "order_mismatch": "Issue collectives in the same order on every rank (e.g. iterate parameters/buckets in a "
                      "deterministic order; do not order by dict/set iteration or by rank-dependent conditions).",
    "extra_collective": "Remove the collective only the culprit rank issues, or make the other ranks issue it too.",
    "skipped_collective": "The culprit skipped a collective the others issued; make the collective unconditional "
                          "(or the skip collective on every rank).",
    "mismatched_size": "Pass tensors of the same shape on every rank; for an uneven last batch use "
                       "DataLoader(drop_last=True) / DistributedSampler(drop_last=True) or pad the batch.",
    "mismatched_dtype": "Cast to one dtype before the collective on every rank (mixed-precision settings differ?).",
    "missing_rank": "The culprit never joined this collective: check its log for where it went (an uneven number of "
                    "batches → drop_last=True / join(); an early exit or exception on that rank).",
    "lagging_rank": "The culprit stopped issuing work (stalled): look at its last log lines and stack (data loader, "
                    "I/O, deadlock, GPU hang); py-spy dump on a live job shows where it sits.",
    "crashed_rank": "The culprit died (no dump, no further log): read its last log lines / exit code for the "
                    "exception or signal, fix that, and restart.",
    "nccl_error": "Fix the NCCL/network error on the culprit rank (see its last WARN lines), then restart.",
    "watchdog_timeout": "No cross-rank divergence was visible: check for a slow or stuck rank outside collectives, "
                        "or raise the timeout if the work is legitimately long.",
}


@dataclass
class HangDiagnosis:
    """One explanation of a hang: where ranks diverge, who is responsible, who waits, evidence and fix."""

    kind: str
    process_group: str
    pg_desc: str
    seq: int | None
    op: str
    culprit_ranks: list[int]
    waiting_ranks: list[int]
    ops: dict[int, str] = field(default_factory=dict)
    sizes: dict[int, int] = field(default_factory=dict)
    dtypes: dict[int, str] = field(default_factory=dict)
    evidence: list[Evidence] = field(default_factory=list)
    cause: str = ""
    fix: str = ""
    source: str = ""
    blocked_by: str = ""
    confidence: float = 0.5


@dataclass
class HangReport:
    """Ranked diagnoses (most likely root cause first), per-group per-rank progress tables, groups, warnings."""

    diagnoses: list[HangDiagnosis]
    tables: pd.DataFrame
    groups: pd.DataFrame
    seqs: pd.DataFrame
    warnings: list[str] = field(default_factory=list)


def _majority(values: dict[int, Any]) -> tuple[Any, list[int]]:
    """Most common value and the ranks that differ from it (ties: the value the lowest rank holds wins)."""
    counts = Counter(values.values())
    best = max(counts.values())
    ref = next(v for r, v in sorted(values.items()) if counts[v] == best)
    return ref, sorted(r for r, v in values.items() if v != ref)


def _aligned(a: list[str], b: list[str]) -> bool:
    """True when two op sequences agree on their common, non-empty prefix."""
    n = min(len(a), len(b))
    return n > 0 and a[:n] == b[:n]


def _tail(path: str, n: int = 3) -> list[tuple[int, str]]:
    """Last n non-empty lines of a text file with 1-based line numbers (evidence for a crashed/stalled rank)."""
    try:
        with open(path, "rb") as fh:
            lines = fh.read(4 << 20).decode("utf-8", "replace").splitlines()
    except OSError:
        return []
    out = [(i + 1, s.strip()) for i, s in enumerate(lines) if s.strip()]
    return out[-n:]


class _GroupView:
    """One group's per-rank sequences and status, with the progress numbers the rules compare."""

    def __init__(self, g: Group, seqs: pd.DataFrame, status: pd.DataFrame, failed_ranks: set[int] = frozenset()
                 ) -> None:
        self.g = g
        self.failed_ranks = set(failed_ranks)
        self.rows = {int(r): df.set_index("seq", drop=False) for r, df in seqs.groupby("rank")}
        self.status = {int(r.rank): r for r in status.itertuples(index=False)}
        self.present = sorted(set(self.rows) | set(self.status))
        self.min_seq = {r: int(df["seq"].min()) for r, df in self.rows.items()}
        self.max_enq = {}
        for r in self.present:
            m = int(self.rows[r]["seq"].max()) if r in self.rows else -1
            st = self.status.get(r)
            self.max_enq[r] = max(m, int(st.last_enqueued) if st is not None else -1)

    def sigs_from(self, r: int, s: int) -> list[tuple]:
        """(op, numel, dtype) signatures of rank r's collectives from seq s on."""
        df = self.rows.get(r)
        if df is None:
            return []
        df = df[df["seq"] >= s]
        return list(zip(df["op"], df["numel_in"], df["dtype"]))


def _first_divergence(v: _GroupView) -> HangDiagnosis | None:
    """Walk seqs in order; return the first where members disagree (op, size, dtype) or some never arrive."""
    all_seqs = sorted(set().union(*[set(df["seq"]) for df in v.rows.values()])) if v.rows else []
    for s in all_seqs:
        have = {r: v.rows[r].loc[s] for r in v.rows if s in v.rows[r].index}
        have = {r: (x.iloc[0] if isinstance(x, pd.DataFrame) else x) for r, x in have.items()}
        lack = [r for r in v.present if r not in have and v.max_enq[r] < s and v.min_seq.get(r, 0) <= s]
        ops = {r: x["op"] for r, x in have.items()}
        d = _mk(v, s, have)
        ref_op, odd = _majority(ops)
        if odd:
            d.kind, d.op = "mismatched_op", ref_op
            d.culprit_ranks = odd
            d.cause = (f"rank(s) {odd} called {sorted({d.ops[r] for r in odd})} where the others called {ref_op}: "
                       "likely a collective inside a rank-dependent branch")
            _refine_by_alignment(v, s, d)
            return d
        sizes = {r: int(x["numel_in"]) for r, x in have.items() if int(x["numel_in"]) >= 0}
        if len(set(sizes.values())) > 1:
            _, d.culprit_ranks = _majority(sizes)
            d.kind = "mismatched_size"
            d.cause = ("same collective with different element counts: typically an uneven last batch or a "
                       "rank-dependent shape")
            _refine_by_alignment(v, s, d)
            return d
        dts = {r: str(x["dtype"]) for r, x in have.items() if str(x["dtype"])}
        if len(set(dts.values())) > 1:
            _, d.culprit_ranks = _majority(dts)
            d.kind = "mismatched_dtype"
            d.cause = "same collective with different dtypes on different ranks"
            return d
        if lack and have:
            lag = {r: max(v.max_enq[h] for h in have) - v.max_enq[r] for r in lack}
            stalled = [r for r in lack if lag[r] >= 2 or _own_work_stuck(v, r)]
            d.kind = "lagging_rank" if stalled else "missing_rank"
            if all(r in v.failed_ranks for r in lack):
                d.kind = "crashed_rank"
            d.culprit_ranks = sorted(lack)
            last = {r: v.max_enq[r] for r in lack}
            d.seq = min(s, min(last.values()) + 1)  # the first collective the culprit never issued
            d.cause = (f"rank(s) {sorted(lack)} never reached seq {s} (last enqueued {last}) while "
                       f"{sorted(have)} wait in it: " + ("a rank that stalled earlier" if stalled else
                                                         "the collective sits behind a rank-dependent branch or an "
                                                         "uneven number of batches"))
            if d.kind == "crashed_rank":
                d.cause = (f"rank(s) {sorted(lack)} stopped at seq {last} and their logs end in errors (no dump "
                           f"from them): they crashed while {sorted(have)} wait in seq {d.seq}")
            return d
    return _status_lag(v)


def _status_lag(v: _GroupView) -> HangDiagnosis | None:
    """Without matching entries, a rank whose last enqueued seq (status lines) is below the group's is behind."""
    enq = {r: v.max_enq[r] for r in v.present if v.max_enq[r] >= 0}
    if len(enq) < 2 or len(set(enq.values())) < 2:
        return None
    top = max(enq.values())
    lack = sorted(r for r, e in enq.items() if e < top)
    s = min(enq[r] for r in lack) + 1
    d = _mk(v, s, {})
    d.kind = "lagging_rank" if any(top - enq[r] >= 2 or _own_work_stuck(v, r) for r in lack) else "missing_rank"
    d.culprit_ranks = lack
    d.source = str(next(iter(v.status.values())).source) if v.status else ""
    for r in v.present:
        st = v.status.get(r)
        if st is not None:
            d.evidence.append((str(st.file), None, f"rank {r} group {v.g.key}: last enqueued {st.last_enqueued}, "
                                                   f"last completed {st.last_completed}"))
    d.cause = f"rank(s) {lack} last enqueued {[enq[r] for r in lack]} while others reached {top}"
    return d


def _own_work_stuck(v: _GroupView, r: int) -> bool:
    """True when the rank's own status says it enqueued work it never completed in this group."""
    st = v.status.get(r)
    return st is not None and st.last_completed >= 0 and st.last_enqueued - st.last_completed >= 1 and \
        st.last_enqueued < max(v.max_enq.values())


def _mk(v: _GroupView, s: int, have: dict[int, Any]) -> HangDiagnosis:
    """A diagnosis skeleton at (group, seq) with per-rank ops/sizes/dtypes and evidence rows."""
    d = HangDiagnosis(kind="", process_group=v.g.key, pg_desc=v.g.desc, seq=int(s), op="", culprit_ranks=[],
                      waiting_ranks=[])
    for r, x in sorted(have.items()):
        d.ops[r], d.sizes[r], d.dtypes[r] = str(x["op"]), int(x["numel_in"]), str(x["dtype"])
        line = None if x["line"] is None or pd.isna(x["line"]) else int(x["line"])
        text = str(x["text"]) + (f" at {x['frame']}" if x["frame"] else "")
        d.evidence.append((str(x["file"]), line, text))
    d.source = str(next(iter(have.values()))["source"]) if have else ""
    d.op = Counter(d.ops.values()).most_common(1)[0][0] if d.ops else ""
    return d


def _refine_by_alignment(v: _GroupView, s: int, d: HangDiagnosis) -> None:
    """Tell a substitution from an order swap, an extra or a skipped collective by aligning (op, numel, dtype)."""
    good = [r for r in d.ops if r not in d.culprit_ranks]
    ref = v.sigs_from(good[0], s) if good else []
    bad = [v.sigs_from(r, s) for r in d.culprit_ranks]
    if not ref or not all(bad):
        return
    if all(_aligned(b[1:], ref[1:]) for b in bad):
        return  # one call replaced by another, the rest lines up: a plain mismatch
    if all(len(b) >= 2 and len(ref) >= 2 and b[0] == ref[1] and b[1] == ref[0] for b in bad):
        d.kind = "order_mismatch"
        d.cause = f"ranks issue the same collectives in a different order ({ref[:2]} vs {bad[0][:2]})"
    elif all(_aligned(b[1:], ref) for b in bad):
        d.kind = "extra_collective"
        d.cause = (f"rank(s) {d.culprit_ranks} issued an extra {bad[0][0][0]} of {bad[0][0][1]} elements that the "
                   "others did not (a collective in a rank-only branch, e.g. logging on rank 0)")
    elif all(_aligned(b, ref[1:]) or (ref[0] in b[1:]) for b in bad):
        d.kind = "skipped_collective"
        d.cause = (f"rank(s) {d.culprit_ranks} skipped the {ref[0][0]} of {ref[0][1]} elements the others wait in "
                   "and moved on to the next ones (a conditional collective, or an uneven number of buckets/batches)")


def _completed_all(v: _GroupView, r: int) -> bool:
    """True when rank r's own records say it completed every collective it issued in this group."""
    df = v.rows.get(r)
    if df is not None and not df["done"].map(lambda x: x is True or x is np.True_).all():
        return False
    st = v.status.get(r)
    if st is not None:
        return int(st.last_completed) >= 0 and int(st.last_completed) >= v.max_enq[r]
    return df is not None


def _timed_out(v: _GroupView, inp: HangInputs) -> bool:
    """True when a watchdog timeout was logged in this group or by one of its present ranks."""
    e = inp.errors
    if e.empty:
        return False
    t = e[e["kind"] == "timeout"]
    return bool(((t["group"].astype(str) == v.g.key) | t["rank"].isin(v.present)).any())


def _absent_rank_diag(v: _GroupView, absent: list[int], inp: HangInputs) -> HangDiagnosis | None:
    """Members with no data at all while the others wait: a crashed rank (no dump/log).

    The others' wait point is the first seq a waiting rank did not complete (status `last_completed + 1` of a
    rank that enqueued more than it completed), else the last seq they share. When every present rank completed
    everything it issued and nothing timed out, nobody is seen waiting: only a warning that members left no data.
    """
    if not v.rows:
        return None
    if all(_completed_all(v, r) for r in v.present) and not _timed_out(v, inp):
        upto = ", ".join(f"rank {r} through seq {v.max_enq[r]}" for r in v.present)
        inp.warnings.append(f"group {v.g.key} ({v.g.desc}): rank(s) {sorted(absent)} left no Flight Recorder dump "
                            f"or record; the others completed every collective they issued ({upto}) and nothing "
                            "timed out, so there is no sign of a hang in this group")
        return None
    last = {r: int(df["seq"].max()) for r, df in v.rows.items()}
    s = min(last.values())
    pending = [int(st.last_completed) + 1 for r, st in v.status.items()
               if int(st.last_completed) >= 0 and int(st.last_completed) < v.max_enq[r]]
    after = None  # the seq the waiting ranks completed last, when status says so
    if pending:
        s = min(pending)  # the first collective some waiting rank did not complete
        after = s - 1
    elif v.status and all(_completed_all(v, r) for r in v.present):
        after = min(int(st.last_completed) for st in v.status.values())
        s = after + 1  # everything recorded completed, yet ranks timed out: they wait in the next one
    while after is None and s not in set().union(*[set(df.index) for df in v.rows.values()]) \
            and s < max(last.values()):
        s += 1
    have = {r: v.rows[r].loc[s] for r in v.rows if s in v.rows[r].index}
    have = {r: (x.iloc[0] if isinstance(x, pd.DataFrame) else x) for r, x in have.items()}
    d = _mk(v, s, have)
    for r, st in sorted(v.status.items()):
        d.evidence.append((str(st.file), None, f"rank {r} group {v.g.key}: last enqueued {st.last_enqueued}, "
                                               f"last completed {st.last_completed}"))
    where = f"wait after seq {after}, at seq {s}" if after is not None else f"wait in seq {s}"
    err = (set(inp.errors["rank"]) if not inp.errors.empty else set()) | inp.warn_ranks
    alive = [r for r in absent if r in inp.log_ranks and r not in err]
    if alive and len(alive) == len(absent):
        d.kind, d.culprit_ranks = "missing_rank", sorted(absent)
        d.cause = (f"rank(s) {sorted(absent)} have logs but no record of this group's seq {s} while the others "
                   f"{where}: they never joined")
        return d
    d.kind, d.culprit_ranks = "crashed_rank", sorted(absent)
    d.cause = (f"rank(s) {sorted(absent)} left no Flight Recorder dump or record for this group while the others "
               f"{where}: they most likely crashed or were killed before they could dump")
    return d


def _analyse_group(v: _GroupView, inp: HangInputs) -> list[HangDiagnosis]:
    """All diagnoses for one group (at most one divergence plus absent members)."""
    out = []
    d = _first_divergence(v)
    absent = sorted((v.g.members or set()) - set(v.present))
    if d is not None:
        out.append(d)
    elif absent:
        a = _absent_rank_diag(v, absent, inp)
        if a is not None:
            out.append(a)
    for x in out:
        x.waiting_ranks = sorted(set(v.present) - set(x.culprit_ranks))
        x.fix = FIX.get(x.kind, "")
        x.confidence = 0.9 if x.kind in ("mismatched_op", "mismatched_size", "mismatched_dtype", "order_mismatch",
                                          "extra_collective", "skipped_collective") else 0.7
    return out


def _error_diags(inp: HangInputs, diags: list[HangDiagnosis]) -> list[HangDiagnosis]:
    """NCCL errors on a rank (logs) become nccl_error diagnoses; timeouts with no divergence become watchdog_timeout."""
    out: list[HangDiagnosis] = []
    e = inp.errors
    if e.empty:
        return out
    errs = e[e["kind"].isin(["nccl_error", "dist_backend_error", "remote_error"])]
    timeouts = e[e["kind"] == "timeout"]
    timed_out = set(timeouts["rank"])
    for rank, df in errs.groupby("rank"):
        if rank in timed_out and "remote_error" in set(df["kind"]):
            continue  # a peer's failure seen from here; not this rank's own error
        first = df.iloc[0]
        g = inp.groups.get(str(first["group"]))
        out.append(HangDiagnosis(kind="nccl_error", process_group=str(first["group"]), pg_desc=g.desc if g else "",
                                 seq=int(first["seq"]) if int(first["seq"]) > 0 else None, op="",
                                 culprit_ranks=[int(rank)], waiting_ranks=sorted(timed_out - {rank}),
                                 evidence=[(str(r.file), int(r.line), str(r.text)) for r in df.head(3).itertuples()],
                                 cause=f"rank {rank} hit an NCCL error; its peers then wait for it",
                                 fix=FIX["nccl_error"], source="watchdog", confidence=0.7))
    if not diags and not out and not timeouts.empty:
        t = timeouts.sort_values("seq").iloc[0]
        g = inp.groups.get(str(t["group"]))
        out.append(HangDiagnosis(kind="watchdog_timeout", process_group=str(t["group"]), pg_desc=g.desc if g else "",
                                 seq=int(t["seq"]), op="", culprit_ranks=[], waiting_ranks=sorted(timed_out),
                                 evidence=[(str(r.file), int(r.line), str(r.text)) for r in
                                           timeouts.head(4).itertuples()],
                                 cause="collectives timed out, but every rank that reported agrees on op, size and "
                                       "sequence: the culprit left no trace here", fix=FIX["watchdog_timeout"],
                                 source="watchdog", confidence=0.3))
    return out


def _stuck_in(inp: HangInputs, rank: int) -> tuple[str, int] | None:
    """The (group, seq) of the last collective a rank issued across all groups (by its own record order)."""
    s = inp.seqs[(inp.seqs["rank"] == rank) & (inp.seqs["source"] != "nccl_log")]
    if s.empty:
        return None
    last = s.sort_values(["source", "order"]).groupby("source").tail(1).iloc[0]
    return str(last["group"]), int(last["seq"])


def _chain(inp: HangInputs, diags: list[HangDiagnosis]) -> None:
    """Wavefront: a culprit that is itself waiting in another group's divergence points at that group's root cause."""
    by_group = {d.process_group: d for d in diags}
    for d in diags:
        if d.kind not in ("missing_rank", "lagging_rank"):
            continue
        for r in d.culprit_ranks:
            where = _stuck_in(inp, r)
            if where is None or where[0] == d.process_group:
                continue
            other = by_group.get(where[0])
            if other is not None and other is not d and r in other.waiting_ranks:
                d.blocked_by = f"{other.process_group}:{other.seq}"
                d.cause += (f"; rank {r} is itself waiting in group {other.process_group} ({other.pg_desc}) seq "
                            f"{other.seq}, where rank(s) {other.culprit_ranks} are the cause")
                d.confidence = min(d.confidence, 0.4)


def _add_log_tails(inp: HangInputs, d: HangDiagnosis, rank_logs: dict[int, str]) -> None:
    """Point at the culprit ranks' last log lines (crashed / stalled / missing ranks)."""
    for r in d.culprit_ranks:
        paths = [str(rank_logs[r])] if r in rank_logs else [log.path for log in inp.log_ranks.get(r, [])[:1]]
        for path in paths:
            for ln, text in _tail(path):
                d.evidence.append((path, ln, f"rank {r} last log line: {text}"))


def _merge_same(diags: list[HangDiagnosis]) -> list[HangDiagnosis]:
    """Collapse diagnoses of the same kind, culprits and group from different sources (keep the best, merge evidence)."""
    seen: dict[tuple, HangDiagnosis] = {}
    out = []
    for d in diags:
        key = (d.kind, tuple(d.culprit_ranks), d.process_group)
        if key in seen:
            seen[key].evidence.extend(e for e in d.evidence if e not in seen[key].evidence)
            continue
        seen[key] = d
        out.append(d)
    return out


def _tables(inp: HangInputs) -> pd.DataFrame:
    """Per group, per rank: last enqueued / started / completed seq (status, else the last seq seen) and last op."""
    rows = []
    for g, df in inp.seqs.groupby("group"):
        for r, x in df.groupby("rank"):
            last = x.sort_values("seq").iloc[-1]
            rows.append(dict(process_group=g, pg_desc=inp.groups[g].desc if g in inp.groups else "", rank=int(r),
                             last_seen_seq=int(last["seq"]), last_op=str(last["op"]), source=str(last["source"])))
    t = pd.DataFrame(rows, columns=["process_group", "pg_desc", "rank", "last_seen_seq", "last_op", "source"])
    st = inp.status.rename(columns={"group": "process_group"})
    st = st.sort_values("source").drop_duplicates(["process_group", "rank"])[
        ["process_group", "rank", "last_enqueued", "last_started", "last_completed"]]
    t = t.merge(st, on=["process_group", "rank"], how="outer")
    for c in ("last_seen_seq", "last_enqueued", "last_started", "last_completed"):
        t[c] = t[c].fillna(-1).astype("int64")
    for c in ("pg_desc", "last_op", "source"):
        t[c] = t[c].fillna("").astype(str)
    return t.sort_values(["process_group", "rank"]).reset_index(drop=True)


def analyze_hang(dumps: Iterable[Any] = (), logs: Iterable[Any] = (), world_size: int | None = None,
                 rank_logs: dict[int, str | Path] | None = None) -> HangReport:
    """Diagnose a hang from Flight Recorder dumps and/or parsed NCCL/watchdog logs; ranked, root cause first.

    `rank_logs` optionally maps a rank to its own stderr file so that culprits get their last lines as evidence.
    """
    dumps, logs = list(dumps), list(logs)
    inp = gather(dumps, logs, world_size)
    diags: list[HangDiagnosis] = []
    errs = inp.errors[inp.errors["kind"].isin(["nccl_error", "dist_backend_error"])] if not inp.errors.empty else None
    failed = inp.warn_ranks | (set(errs["rank"]) if errs is not None else set())
    if dumps:  # with dumps, a rank that left none and whose log shows errors crashed
        failed -= inp.dump_ranks
    for key in sorted(inp.groups, key=lambda k: (k.startswith("nccl:"), len(k), k)):
        g = inp.groups[key]
        v = _GroupView(g, inp.seqs[inp.seqs["group"] == key], inp.status[inp.status["group"] == key], failed)
        diags.extend(_analyse_group(v, inp))
    _chain(inp, diags)
    diags.extend(_error_diags(inp, diags))
    for d in diags:
        if d.kind in ("crashed_rank", "lagging_rank", "missing_rank", "nccl_error"):
            _add_log_tails(inp, d, dict(rank_logs or {}))
    diags = _merge_same(diags)
    diags.sort(key=lambda d: (bool(d.blocked_by), KIND_RANK.get(d.kind, 9), SOURCE_RANK.get(d.source, 9),
                              -d.confidence, d.seq if d.seq is not None else 1 << 62, d.process_group))
    groups = pd.DataFrame([dict(process_group=g.key, pg_desc=g.desc, members=sorted(g.members or []),
                                member_source=g.member_source, source=g.source) for g in inp.groups.values()],
                          columns=["process_group", "pg_desc", "members", "member_source", "source"])
    warnings = list(inp.warnings) + [w for d in dumps + logs for w in getattr(d, "warnings", [])]
    return HangReport(diagnoses=diags, tables=_tables(inp), groups=groups, seqs=inp.seqs, warnings=warnings)


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
