"""What NCCL's RAS reports say about a hang, and how it joins the Flight Recorder's verdict.

RAS (parsers/nccl_ras.py) counts the operations each rank of a communicator has *launched*: when most ranks
launched up to operation N and a few only up to N − k, those few never entered the collective the others wait
in (they are behind: stuck elsewhere, or gone); a rank that launched *more* than the rest issued something the
others did not, or the others are stuck before it — RAS alone cannot tell which, so that is a tie. Dead and
unreachable processes are named by pid and node. RAS counts launches, not completions, so "RUNNING OK" never
clears a hang (NVIDIA/nccl#1730): it only ever adds evidence.

Communicator ranks become global ranks through the NCCL logs' `ncclCommInitRank` lines (comm hash, comm rank,
global rank, pid) or, for a communicator as large as the world, rank for rank (the default group's
communicator); a rank that cannot be mapped is named by its communicator rank, pid and node, never guessed.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from analyzer.hang.diagnosis import FIX, HangDiagnosis


@dataclass
class RasFact:
    """One thing a RAS report says: ranks behind / ahead in a communicator's operation count, dead or missing
    processes, or ranks that reported an error; with the global ranks it maps to where the inputs show them."""

    kind: str  # behind | ahead | dead | missing | error
    file: str
    line: int | None
    comm_hash: str = ""
    comm_size: int = -1
    op: str = ""
    launched: int = -1
    majority_launched: int = -1
    majority_ranks: int = 0
    comm_ranks: list[int] = field(default_factory=list)
    ranks: list[int] = field(default_factory=list)  # global ranks, where every named comm rank could be mapped
    processes: list[str] = field(default_factory=list)  # "process P on node H" where the report names them
    text: str = ""
    quote: str = ""  # the report's own line, where it has one


def _norm_hash(h: Any) -> str:
    return str(h or "").lower().removeprefix("0x").lstrip("0")


def rank_maps(nccl_logs: Iterable[Any]) -> tuple[dict[tuple[str, int], int], dict[int, int]]:
    """(comm hash, comm rank) → global rank, and pid → global rank (pids seen once), from NCCL logs."""
    by_comm: dict[tuple[str, int], int] = {}
    pid_rank: dict[int, set[int]] = {}
    for log in nccl_logs:
        comms = getattr(log, "communicators", None)
        if comms is not None and len(comms):
            for c in comms.records():
                g = c.get("global_rank", -1)
                if g is None or int(g) < 0:
                    continue
                if c.get("comm_id") and int(c.get("rank", -1)) >= 0:
                    by_comm[(_norm_hash(c["comm_id"]), int(c["rank"]))] = int(g)
                if int(c.get("pid", -1)) > 0:
                    pid_rank.setdefault(int(c["pid"]), set()).add(int(g))
        procs = getattr(log, "processes", None)
        if procs is not None and len(procs):
            for p in procs.records():
                if int(p.get("pid", -1)) > 0 and int(p.get("rank", -1)) >= 0:
                    pid_rank.setdefault(int(p["pid"]), set()).add(int(p["rank"]))
    return by_comm, {pid: next(iter(rs)) for pid, rs in pid_rank.items() if len(rs) == 1}


def _global(comm_hash: str, comm_size: int, comm_rank: int, pid: int, world_size: int | None,
            by_comm: dict, pid_rank: dict) -> int | None:
    if (_norm_hash(comm_hash), comm_rank) in by_comm:
        return by_comm[(_norm_hash(comm_hash), comm_rank)]
    if pid > 0 and pid in pid_rank:
        return pid_rank[pid]
    if world_size and comm_size == world_size and 0 <= comm_rank < world_size:
        return comm_rank  # the world communicator: comm ranks are the global ranks
    return None


def _who(rows: list[dict]) -> list[str]:
    return [f"process {r['pid']} on node {r['host']}" for r in rows if int(r.get("pid", -1)) > 0]


def ras_facts(reports: Iterable[Any], world_size: int | None, nccl_logs: Iterable[Any] = ()) -> list[RasFact]:
    """Every report's behind / ahead cohorts, dead and missing processes and error ranks, as RasFacts."""
    by_comm, pid_rank = rank_maps(nccl_logs)
    facts: list[RasFact] = []
    for rep in reports:
        ws = world_size or (rep.job or {}).get("gpus") or _processes(rep)
        sizes = {c["comm"]: int(c["size"]) for c in rep.comms.records()}
        ranks = rep.ranks.records()
        for (comm, op), cohort in _grouped(rep.cohorts.records(), ("comm", "op")):
            if len(cohort) < 2:
                continue
            major = max(cohort, key=lambda c: (c["n_ranks"], c["launched"]))
            for c in cohort:
                if c is major or c["launched"] == major["launched"]:
                    continue
                named = [r for r in ranks if r["comm"] == comm and r["context"] == "count" and r["op"] == op
                         and r["launched"] == c["launched"]]
                kind = "behind" if c["launched"] < major["launched"] else "ahead"
                facts.append(_fact(kind, rep, c, major, sizes.get(comm, -1), named, ws, by_comm, pid_rank))
        for r in ranks:
            if r["context"] == "error" and r["error"] and "Remote process error" not in r["error"]:
                facts.append(_fact("error", rep, r, None, sizes.get(r["comm"], -1), [r], ws, by_comm, pid_rank))
        missing = [r for r in ranks if r["context"] == "missing"]
        for comm, rows in _grouped(missing, ("comm",)):
            dead = [r for r in rows if r["status"] == "DEAD"]
            if dead:
                facts.append(_fact("dead", rep, dead[0], None, sizes.get(comm[0], -1), dead, ws, by_comm, pid_rank))
        for state in ("dead", "missing"):
            procs = [p for p in rep.processes.records() if p["state"] == state]
            if procs:
                f = RasFact(state, rep.path, int(procs[0]["line"]), processes=_who(procs))
                mapped = [pid_rank.get(int(p["pid"])) for p in procs]
                f.ranks = sorted(m for m in mapped if m is not None) if all(m is not None for m in mapped) else []
                f.text = (f"NCCL RAS: {len(procs)} job process(es) {'considered dead' if state == 'dead' else 'did not answer'}"
                          f": {', '.join(f.processes)}" + (f" (rank(s) {', '.join(map(str, f.ranks))})" if f.ranks
                                                           else ""))
                facts.append(f)
        for e in rep.events.records():
            if e["event"] in ("PEER_DEAD", "PEER_TIMEOUT_DEAD") and int(e["pid"]) > 0:
                g = pid_rank.get(int(e["pid"]))
                facts.append(RasFact("dead", rep.path, int(e["line"]), processes=[f"process {e['pid']} on node "
                                                                                    f"{e['host']}"],
                                     ranks=[g] if g is not None else [],
                                     text=f"NCCL RAS monitor at {e['time']}: {e['event']} {e['details']}"))
    return facts


def _processes(rep: Any) -> int | None:
    """The job's process count where a JSON report lists every process (one GPU each): members and missing."""
    if rep.format != "json":
        return None
    procs = {(r["host"], int(r["pid"])) for r in rep.ranks.records() if int(r["pid"]) > 0}
    return len(procs) or None


def _grouped(rows: list[dict], keys: tuple[str, ...]) -> list[tuple[tuple, list[dict]]]:
    out: dict[tuple, list[dict]] = {}
    for r in rows:
        out.setdefault(tuple(r[k] for k in keys), []).append(r)
    return list(out.items())


def _fact(kind: str, rep: Any, row: dict, major: dict | None, size: int, named: list[dict], ws, by_comm,
          pid_rank) -> RasFact:
    f = RasFact(kind, rep.path, int(row["line"]) if int(row.get("line", -1)) > 0 else None,
                comm_hash=str(row.get("comm_hash", "")), comm_size=size, op=str(row.get("op", "")),
                launched=int(row.get("launched", -1)),
                majority_launched=int(major["launched"]) if major else -1,
                majority_ranks=int(major["n_ranks"]) if major else 0,
                comm_ranks=sorted(int(r["rank"]) for r in named), processes=_who(named),
                quote=str(row.get("text", "") or ""))
    mapped = [_global(f.comm_hash, size, int(r["rank"]), int(r.get("pid", -1)), ws, by_comm, pid_rank)
              for r in named]
    if named and all(m is not None for m in mapped) and (kind not in ("behind", "ahead")
                                                          or len(named) == int(row["n_ranks"])):
        f.ranks = sorted(set(m for m in mapped if m is not None))
    comm = f"communicator {f.comm_hash}" + (f" ({size} ranks)" if size > 0 else "")
    who = (f"rank(s) {', '.join(map(str, f.ranks))}" if f.ranks else
           f"communicator rank(s) {', '.join(map(str, f.comm_ranks))}" if f.comm_ranks else
           f"{row.get('n_ranks', '?')} rank(s) the report does not list")
    where = f" ({'; '.join(f.processes)})" if f.processes else ""
    if kind in ("behind", "ahead"):
        n_minor = int(row["n_ranks"])
        launched = (f"launched {f.op} operations up to #{f.launched}" if f.launched > 0
                    else f"launched no {f.op} operation")
        f.text = (f"NCCL RAS, {comm}: {who}{where} {launched} while {f.majority_ranks} rank(s) launched up to "
                  f"#{f.majority_launched}" + (" (behind: they never entered the collective the others wait in)"
                                               if kind == "behind" else
                                               f" ({n_minor} rank(s) ahead of the rest: RAS alone cannot tell an "
                                               f"extra collective from the others being stuck)"))
    elif kind == "error":
        f.text = f"NCCL RAS, {comm}: {who}{where} reported {row['error']}"
    else:
        f.text = f"NCCL RAS, {comm}: {who}{where} considered dead (unreachable over the RAS network)"
    return f


def _evidence(f: RasFact, own: bool = False) -> tuple[str, int | None, str]:
    """The fact as evidence: its sentence where it joins another diagnosis, the report's own line (when it has
    one) under a diagnosis whose cause already is that sentence."""
    return (f.file, f.line, f"NCCL RAS: {f.quote}" if own and f.quote else f.text)


def apply(diags: list[HangDiagnosis], facts: list[RasFact]) -> list[HangDiagnosis]:
    """Join RAS facts with the diagnoses the dumps and logs gave: evidence where they agree, a tie broken where RAS
    names one of its suspects as behind or dead, and RAS's own diagnoses where nothing else names a root."""
    if not facts:
        return diags
    used: set[int] = set()
    for d in diags:
        for i, f in enumerate(facts):
            if not f.ranks or f.kind == "ahead":
                continue
            if set(f.ranks) & set(d.culprit_ranks):
                d.evidence.insert(0, _evidence(f))  # independent corroboration: before the log tails
                used.add(i)
                if d.tie and f.kind in ("behind", "dead") and set(f.ranks) < set(d.culprit_ranks):
                    d.waiting_ranks = sorted(set(d.waiting_ranks) | (set(d.culprit_ranks) - set(f.ranks)))
                    d.culprit_ranks, d.tie = sorted(f.ranks), False
                    d.confidence = max(d.confidence, 0.7)
                    d.cause += f"; NCCL RAS names {', '.join(map(str, f.ranks))} of the suspects ({f.text})"
    named = {r for d in diags if not d.tie for r in d.culprit_ranks}
    out = list(diags)
    for i, f in enumerate(facts):
        if i in used:
            continue
        if f.ranks and set(f.ranks) <= named:
            continue
        d = _own_diagnosis(f)
        if d is not None:
            out.append(d)
    return out


_KIND = {"behind": "missing_rank", "dead": "crashed_rank", "error": "nccl_error", "ahead": "extra_collective",
         "missing": "lagging_rank"}


def _own_diagnosis(f: RasFact) -> HangDiagnosis | None:
    """A diagnosis from RAS alone: behind → never joined (0.7 when named), dead → crashed (0.75), error → NCCL
    error (0.6), ahead or an unnamed rank → a tie below 0.5 (RAS counts launches, it cannot see why)."""
    kind = _KIND[f.kind]
    named = bool(f.ranks)
    conf = {"behind": 0.7, "dead": 0.75, "error": 0.6, "missing": 0.45, "ahead": 0.35}[f.kind] if named else 0.3
    return HangDiagnosis(kind=kind, process_group=(f"nccl:0x{f.comm_hash}" if f.comm_hash else ""),
                         pg_desc="", seq=None,
                         op=f.op.lower(), culprit_ranks=list(f.ranks), waiting_ranks=[],
                         evidence=[_evidence(f, own=True)] if f.quote else [], cause=f.text, fix=FIX.get(kind, ""), source="nccl_ras",
                         confidence=conf, tie=f.kind == "ahead" or not named)


def summary(reports: Iterable[Any], facts: list[RasFact]) -> dict:
    """The `hang.ras` block of the report: what each RAS file held and the facts drawn from it."""
    reps = list(reports)
    return {"files": [{"path": r.path, "format": r.format, "nccl_version": r.nccl_version,
                       "communicators": len(r.comms) or len(r.groups), "timeouts": r.timeouts,
                       "job": dict(r.job)} for r in reps],
            "facts": [{"kind": f.kind, "communicator": f.comm_hash, "op": f.op, "launched": f.launched,
                       "majority_launched": f.majority_launched, "comm_ranks": f.comm_ranks, "ranks": f.ranks,
                       "processes": f.processes, "text": f.text, "file": f.file, "line": f.line} for f in facts]}
