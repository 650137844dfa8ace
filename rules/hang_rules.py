"""Hang post-mortem rules: read the `hang` section (analyzer/hang/analysis.py) and the watchdog timeouts of the `nccl` section."""
from __future__ import annotations

import re
from typing import Iterator

from rules.context import Context
from rules.finding import Evidence, Finding, Subject
from rules.registry import rule
from rules.util import ranks_text

MISMATCH_KINDS = ("mismatched_op", "order_mismatch", "extra_collective", "skipped_collective",
                  "mismatched_size", "mismatched_dtype")
ABSENT_KINDS = ("missing_rank", "lagging_rank", "crashed_rank")
DEADLOCK_KINDS = ("order_inversion", "deadlock", "stuck_p2p", "p2p_mismatch")
ROOT_KINDS = MISMATCH_KINDS + ABSENT_KINDS + DEADLOCK_KINDS + ("nccl_error", "device_stalled", "rendezvous_failure",
                                                               "stopped_externally")
HANG_CONSEQUENCES = ("HANG", "NCCL001", "INPUT003")
WORDS = {
    "mismatched_op": "called a different collective", "order_mismatch": "issued collectives in a different order",
    "extra_collective": "issued an extra collective", "skipped_collective": "skipped a collective",
    "mismatched_size": "passed a different element count", "mismatched_dtype": "passed a different dtype",
    "missing_rank": "never joined the collective", "lagging_rank": "stalled before the collective",
    "crashed_rank": "crashed before the collective", "nccl_error": "hit an NCCL error",
    "device_stalled": "stopped completing their GPU work", "order_inversion": "entered two process groups in "
    "the opposite order (deadlock)", "deadlock": "wait for each other (deadlock)",
    "stuck_p2p": "are stuck in a send/recv with each other", "p2p_mismatch": "posted a send/recv with no match",
    "rendezvous_failure": "could not form the job (rendezvous failed)",
}
def _no_culprit_title(kind: str, cause: str, waiting: list[int]) -> str:
    """The title of a diagnosis that names no rank, for the kinds where "Collectives timed out" would be wrong."""
    if kind == "nccl_error":
        classes = list(dict.fromkeys(re.findall(r"\bnccl[A-Z][A-Za-z]{2,40}\b", cause)))
        what = f"NCCL error ({', '.join(classes[:2])})" if classes else "NCCL error"
        if waiting:
            return f"{what} seen by {ranks_text(waiting)}; the failing side is not named in the inputs"
        return f"{what} on a rank the inputs do not name"
    if kind == "rendezvous_failure":
        return "The job could not form (rendezvous failed)"
    if kind == "stopped_externally":
        return "The job was stopped from outside (no rank failed)"
    if kind == "crashed_rank":
        if "stopped from outside" in cause:
            return "The job was stopped from outside (the launcher received a signal)"
        return ("A process failed; the inputs do not say which rank" if "failing on its own" in cause else
                "A process lost a peer (it exited, crashed or stalled); the inputs do not say which")
    return ""


#: "rank N " at the start of an evidence line
_RANK_FIRST = re.compile(r"rank (\d{1,7}) ")
TIE_WORDS = {"mismatched_op": "op", "mismatched_size": "element count", "mismatched_dtype": "dtype"}


def _diag_finding(d: dict, ctx_no_dump: dict | None = None) -> Finding:
    """A Finding from one `hang.diagnoses` entry: subject = culprits at (group, seq); cost 1 (no progress)."""
    kind = str(d.get("kind") or "")
    culprits = sorted(int(r) for r in d.get("culprit_ranks") or [])
    waiting = sorted(int(r) for r in d.get("waiting_ranks") or [])
    pg = None if d.get("process_group") in (None, "") else str(d.get("process_group"))
    seq = d.get("seq")
    op = d.get("op") or None
    desc = f" ({d['pg_desc']})" if d.get("pg_desc") else ""
    if pg:
        where = f"process group {pg}{desc}" + (f", collective #{seq}" if seq is not None else "") + \
            (f" ({op})" if op else "")
    else:  # a post-mortem from stderr alone: no group or sequence number is known
        where = (f"{'an' if op[:1].lower() in 'aeiou' else 'a'} {op}") if op else "a collective"
    tie = bool(d.get("tie"))
    if tie and len(culprits) > 1:
        title = (f"{ranks_text(culprits).capitalize()} disagree ({TIE_WORDS.get(kind, kind.replace('_', ' '))}) in "
                 f"{where}; the evidence cannot tell which of them is wrong")
    elif culprits:
        title = f"{ranks_text(culprits).capitalize()} {WORDS.get(kind, kind)}" + \
            (f" in {where}" if pg else (f" ({op})" if op else ""))
    else:
        title = _no_culprit_title(kind, str(d.get("cause") or ""), waiting) or (
            f"Collectives timed out in {where}" if pg else
            f"{ranks_text(waiting).capitalize() if waiting else 'Ranks'} timed out in {where}; the inputs do not "
            "name the rank they waited for")
    ev = []
    if d.get("cause"):
        ev.append(Evidence(str(d["cause"])))
    is_culprit = set(culprits)
    for r, why in sorted((ctx_no_dump or {}).items(), key=lambda kv: int(kv[0])):
        if int(r) in is_culprit and why.split(": ", 1)[-1][:60] not in str(d.get("cause") or ""):
            ev.append(Evidence(f"rank {r} has no Flight Recorder dump: {why}"))
    if waiting:  # where the job stopped (a hang has no share of step time to give)
        ev.append(Evidence(f"{ranks_text(waiting)} wait in {where}"))
    elif (stood := _stopped_at(pg, desc, seq, op, culprits)):
        ev.append(Evidence(stood))
    for key, label in (("ops", "op"), ("sizes", "elements"), ("dtypes", "dtype")):
        vals = d.get(key) or {}
        if isinstance(vals, dict) and len(set(map(str, vals.values()))) > 1:
            ev.append(Evidence(f"{label} per rank: " + ", ".join(f"{r}: {v}" for r, v in sorted(
                vals.items(), key=lambda kv: int(kv[0])))))
    def culprit_first(e: object) -> int:
        text = str(e.get("text", "")) if isinstance(e, dict) else str(e[2]) if isinstance(e, (list, tuple)) else ""
        m = _RANK_FIRST.match(text)
        return 0 if m and int(m.group(1)) in is_culprit else 1

    for e in sorted(d.get("evidence") or [], key=culprit_first)[:8]:
        if isinstance(e, dict):
            ev.append(Evidence(str(e.get("text", "")), e.get("file"), e.get("line")))
        elif isinstance(e, (list, tuple)) and len(e) == 3:
            ev.append(Evidence(str(e[2]), e[0], e[1]))
    blocked = str(d.get("blocked_by") or "")
    conf = d.get("confidence")
    if conf is None:
        conf = 0.9 if kind in MISMATCH_KINDS else 0.7
    if tie:
        conf = min(float(conf), 0.45)
    # a hang has no share of step time: no step completes after it; the evidence says where the job stopped
    f = Finding(title=title, confidence=float(conf), evidence=ev,
                subject=Subject(ranks=culprits, process_group=pg,
                                collective={"op": op, "seq": None if seq is None else int(seq)}),
                cost=None, fix=str(d.get("fix") or ""),
                involved=set(culprits) | set(waiting), anchor=f"{pg}:{seq}", caused_by=blocked,
                extra={"kind": kind})
    if blocked:
        f.evidence.insert(0, Evidence(f"blocked by the divergence in group:seq {blocked}"))
    for x in d.get("explains") or []:
        xd = f" ({x['pg_desc']})" if x.get("pg_desc") else ""
        waiting = x.get("waiting") or []
        call = f"{x.get('op') or 'collective'}" + (f" #{x['seq']}" if x.get("seq") is not None and x["seq"] >= 0
                                                     else "")
        f.consequences.append({
            "id": "HANG002", "severity": "error", "ranks": [int(r) for r in waiting],
            "title": f"{ranks_text(waiting).capitalize()} {'waits' if len(waiting) == 1 else 'wait'} in process "
                     f"group {x['process_group']}{xd}, {call}, for {ranks_text(x.get('on') or [])}",
            "evidence": []})
        f.involved |= {int(r) for r in x.get("waiting") or []}
    return f


def _stopped_at(pg: str | None, desc: str, seq, op, culprits: list[int]) -> str:
    """'the job stopped at process group 2 (TP), collective #7 (all_reduce), at rank 3' (no rank waits there)."""
    if not pg or seq is None:
        return ""
    return (f"the job stopped at process group {pg}{desc}, collective #{seq}" + (f" ({op})" if op else "")
            + (f", at {ranks_text(culprits)}" if culprits else ""))


def _diags(ctx: Context, kinds: tuple[str, ...]) -> Iterator[Finding]:
    """Findings for the hang diagnoses of the given kinds, in the hang section's order.

    The first unblocked diagnosis of the section is the hang's root: every rank that timed out or printed
    an NCCL WARN is stuck behind it, so those ranks count as involved (their findings become consequences).
    """
    diags = [d for d in ctx.hang.get("diagnoses") or [] if isinstance(d, dict)]
    root = next((i for i, d in enumerate(diags) if not d.get("blocked_by") and d.get("kind") in ROOT_KINDS), None)
    no_dump = ctx.hang.get("ranks_without_dump") or {}
    for i, d in enumerate(diags):
        if d.get("kind") not in kinds:
            continue
        f = _diag_finding(d, no_dump)
        if i == root:
            stuck = ctx.nccl.get("timeouts") or []
            f.involved |= {int(t["rank"]) for t in stuck if t.get("rank") is not None and int(t["rank"]) >= 0}
            f.involved |= {int(w["rank"]) for w in ctx.nccl.get("warns") or []
                           if w.get("rank") is not None and int(w["rank"]) >= 0}
        yield f


@rule("HANG001", "Mismatched collective (op, size, dtype or order)", "error", explains=HANG_CONSEQUENCES,
      confirm="Compare the culprit's Flight Recorder entry (or NCCL COLL line) at this sequence number with a "
              "waiting rank's: op, element count and dtype differ. The stack frame of the entry shows the call site.",
      fix="Make every rank of the group issue the same collective with the same shape and dtype at this point: "
          "look for collectives inside rank-dependent branches, uneven last batches (drop_last=True), and "
          "per-rank dtype/autocast settings.")
def mismatched_collective(ctx: Context) -> Iterator[Finding]:
    """Ranks of one process group disagree at the same collective: the job hangs until the watchdog fires.

    NCCL matches collectives purely by order within a communicator. If one rank calls all_gather where the
    others call all_reduce, or passes a different element count or dtype, or issues the collectives in a
    different order (an extra or a skipped call), the ranks wait for each other forever (or corrupt data).
    The hang section compares, per process group and sequence number, what every rank issued (Flight
    Recorder `collective_seq_id`, NCCL `opCount`, watchdog `SeqNum`) and names the first divergence.
    """
    yield from _diags(ctx, MISMATCH_KINDS)


@rule("HANG002", "Rank missing from a collective (never joined, stalled or crashed)", "error",
      explains=HANG_CONSEQUENCES,
      confirm="The culprit's last enqueued sequence number (Flight Recorder / watchdog 'last enqueued') is below "
              "the group's; its own log ends early (crash) or shows it blocked elsewhere (py-spy dump on a live job).",
      fix="Find out where the culprit went: its last log lines and exit code (crash), its stack (stall: data "
          "loader, I/O, deadlock), or a rank-dependent branch / uneven number of batches (never joined: "
          "drop_last=True or Join context manager).")
def missing_rank(ctx: Context) -> Iterator[Finding]:
    """Some ranks never reached a collective that the rest of the group is waiting in.

    A rank that crashed (no dump, log ends), stalled (alive, last enqueued seq behind the group) or took a
    different code path leaves its peers blocked in the collective. When the culprit is itself waiting in
    another group's divergence, the finding is marked as blocked by that one and listed under it.
    """
    yield from _diags(ctx, ABSENT_KINDS)


@rule("HANG003", "NCCL error on a rank", "error", explains=("HANG004", "NCCL001"),
      confirm="Read the culprit's WARN lines and the ProcessGroupNCCL error text quoted as evidence.",
      fix="Fix the NCCL/network error on the culprit rank (see its WARN lines: NIC, cable, driver, firewall, "
          "NCCL_SOCKET_IFNAME / NCCL_IB_HCA pointing at the wrong device), then restart.")
def nccl_error(ctx: Context) -> Iterator[Finding]:
    """A rank reported an NCCL error (ncclSystemError, ncclRemoteError, …); its peers then time out.

    Errors come from the watchdog/ProcessGroupNCCL lines gathered by the hang analysis and from stderr's
    `NCCL error in: …` lines with the class line and NCCL's `Last error:` after them (analyzer/hang/nccl_errors.py):
    the finding gives the class, what it means and its fix, the NCCL version and the far side of the failing
    connection. A system / CUDA / internal / usage / argument error is the printing rank's own failure; a remote
    error makes the printing rank a victim (the culprit is at the peer address). Lines without a rank tag still
    make a finding, naming no rank.
    """
    yield from _diags(ctx, ("nccl_error",))


@rule("HANG004", "Collective watchdog timeout", "error",
      confirm="The watchdog line names the timed-out work (SeqNum, OpType, Timeout(ms)); compare the last "
              "enqueued/completed sequence numbers of every rank of that group.",
      fix="Find the rank that did not arrive (gather Flight Recorder dumps: TORCH_NCCL_TRACE_BUFFER_SIZE>0 and "
          "TORCH_NCCL_DUMP_ON_TIMEOUT=1, plus every rank's stderr); raise the timeout (init_process_group("
          "timeout=...)) only if the work is legitimately that long.")
def watchdog_timeout(ctx: Context) -> Iterator[Finding]:
    """The ProcessGroupNCCL watchdog aborted a collective that ran past its timeout.

    A timeout is the symptom of a hang, not its cause: when the hang analysis finds the divergence
    (HANG001/HANG002/HANG003), the timeouts of the waiting ranks are listed under it. Alone, it means no
    cross-rank divergence was visible in the inputs (the culprit left no record).
    """
    have = set()
    for f in _diags(ctx, ("watchdog_timeout",)):
        have.add(f.subject.process_group)
        yield f
    groups: dict[tuple, list[dict]] = {}
    for t in ctx.nccl.get("timeouts") or []:
        groups.setdefault((str(t.get("process_group")), t.get("seq")), []).append(t)
    for (pg, seq), rows in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
        if pg in have:
            continue
        ranks = sorted({int(r["rank"]) for r in rows if r.get("rank") is not None and int(r["rank"]) >= 0})
        if not ranks:
            continue
        op = next((r.get("op") for r in rows if r.get("op")), None)
        ms = next((r.get("timeout_ms") for r in rows if r.get("timeout_ms")), None)
        ev = [Evidence(str(r.get("text", ""))[:300], r.get("file"), r.get("line")) for r in rows[:6]]
        if ms:
            ev.insert(0, Evidence(f"timeout {ms} ms on {ranks_text(ranks)}"))
        yield Finding(title=f"Watchdog timeout on {ranks_text(ranks)} in process group {pg}, collective #{seq}"
                            + (f" ({op})" if op else ""),
                      confidence=0.9, evidence=ev, cost=None,
                      subject=Subject(ranks=ranks, process_group=pg, collective={"op": op, "seq": seq}),
                      extra={"kind": "watchdog_timeout"})


@rule("HANG005", "Deadlock: ranks wait for each other (order inversion between groups, or a send/recv cycle)",
      "error", explains=HANG_CONSEQUENCES,
      confirm="Each culprit's blocking call (its oldest incomplete Flight Recorder entry) is in a different group "
              "(or a send/recv to the other); each waits for a call the other never issued.",
      fix="Use process groups (and send/recv pairs) in one fixed order on every rank: rank A entering group X then "
          "Y while rank B enters Y then X deadlocks; pair sends with receives (even ranks send first) or use "
          "batch_isend_irecv.")
def deadlock(ctx: Context) -> Iterator[Finding]:
    """Ranks that wait for each other, so no amount of waiting ends it.

    The hang analysis builds a wait-for graph from every rank's blocking point (its oldest call that did not
    complete, or its last call where completion is not reported): a rank waits for the members that never issued
    that call, or for its send/recv peer. A cycle is a deadlock; across two groups it is an order inversion, and
    the rank whose order breaks its own recorded history (and the other ranks') is named. With no such evidence
    it is reported as a tie between the ranks of the cycle.
    """
    yield from _diags(ctx, DEADLOCK_KINDS)


@rule("HANG006", "A rank's GPU work stopped completing", "error", explains=HANG_CONSEQUENCES,
      confirm="Compare the culprit's last completed sequence number with its peers' in the same group (Flight "
              "Recorder pg_status / entry states): the peers completed collectives the culprit took part in but "
              "never saw complete.",
      fix="Check that rank's GPU: dmesg / nvidia-smi -q for Xid and ECC errors, a hung kernel, a CUDA error in its "
          "stderr; drain or replace the node, then restart from the last checkpoint.")
def device_stalled(ctx: Context) -> Iterator[Finding]:
    """Peers completed collectives that this rank issued but never saw complete: its own work stopped.

    A collective completes on a member only when every member's part ran, so when a rank's last completed
    sequence number stays below what its peers completed, its own GPU stream (or the thread that polls it) has
    stopped — a GPU error, a hung kernel or a dead progress thread on that rank. Everything waiting on it
    elsewhere (other pipeline stages, data-parallel peers) is listed as consequences. gloo reports no
    completion, so this is judged only for NCCL groups.
    """
    yield from _diags(ctx, ("device_stalled",))


@rule("HANG007", "The job could not form (rendezvous / store failure)", "error", explains=("HANG004",),
      confirm="The stderr lines quoted: an address already in use, a refused connection to MASTER_ADDR:PORT, or a "
              "store that timed out before every rank joined.",
      fix="Pick a free MASTER_PORT (or let torchrun choose with --rdzv-endpoint=host:0), check MASTER_ADDR, "
          "firewalls and that every node starts within the rendezvous timeout.")
def rendezvous_failure(ctx: Context) -> Iterator[Finding]:
    """The ranks never formed a job: the rendezvous store could not be created or reached.

    Read from torchrun / c10d stderr (EADDRINUSE, connection refused, store timeouts). No collective ran, so no
    dump or trace exists; without this rule such a run would read as 'no input'.
    """
    yield from _diags(ctx, ("rendezvous_failure",))


@rule("HANG008", "The job was stopped from outside (no rank failed)", "warning",
      confirm="torchrun's log shows the launcher itself receiving a signal (SignalException: Process N got signal: "
              "15), or every rank ended by SIGTERM, with no rank's own error and no timeout before it; the Flight "
              "Recorder dumps show every rank of a group at the same (or the next) collective.",
      fix="Nothing in the job failed: it was ended by a time limit, preemption or a cancel. Resume from the last "
          "checkpoint; ask for more time or checkpoint more often if a time limit ended it.")
def stopped_externally(ctx: Context) -> Iterator[Finding]:
    """A scheduler's time limit, `timeout`, preemption or a user's cancel ended a job whose ranks were progressing.

    No rank is at fault, so the finding names none: it says where every rank stood (its last sequence number per
    process group), which a restart resumes from (analyzer/hang/job_end.py).
    """
    yield from _diags(ctx, ("stopped_externally",))
