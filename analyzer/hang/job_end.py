"""How the job ended when no rank failed on its own: it finished, or it was stopped from outside.

- **Finished**: no launcher line reports a failure (no failure table, no failed child, no signal) and every rank of
  the world left a Flight Recorder dump in which each of its groups stands at the same last sequence number as the
  group's other members, every call completed. A traceback such a job printed was caught (logged and handled: a
  retry, a missing checkpoint): it is no failure, and no finding is made of it.
- **Stopped from outside**: the launcher itself received a signal (a scheduler's time limit, `timeout`, scancel,
  preemption: torchrun's `SignalException: Process N got signal: 15`) or every rank was ended by SIGTERM, while no
  rank failed on its own and none timed out waiting for another. No rank is at fault; the finding says where every
  rank stood (its last sequence number per group), which is what a restart resumes from.
"""
from __future__ import annotations

from analyzer.hang.diagnosis import HangDiagnosis
from analyzer.hang.inputs import HangInputs
from analyzer.hang.stderr_facts import StderrFacts
from rules.phrases import ranks_text

KIND = "stopped_externally"
FIX = ("Nothing failed: the job was ended from outside (a time limit, preemption, a cancel). Resume it from its "
       "last checkpoint; if a time limit ended it, ask for more time or checkpoint more often.")


def _launcher_lines(logs: list) -> tuple[list[tuple], list[tuple]]:
    """(failure lines, launcher-signal lines) of torchrun's own output: its failure table and failed children,
    and a signal sent to the launcher itself."""
    fails, signals = [], []
    for log in logs:
        path = str(getattr(log, "path", ""))
        t = getattr(log, "failures", None)
        if t is not None and len(t):
            fails += [(path, int(x), "torchrun's failure table") for x in t["line"]]
        ev = getattr(log, "events", None)
        if ev is None or not len(ev):
            continue
        for kind, reason, line, text in zip(ev["kind"], ev["reason"], ev["line"], ev["text"]):
            if str(kind) == "signal" and "launcher" in str(reason):
                signals.append((path, int(line), str(text)))
            elif str(kind) == "child_failed":
                fails.append((path, int(line), str(text)))
    return fails, signals


def _where(inp: HangInputs) -> dict[str, dict[int, int]]:
    """Per group: each member's last recorded sequence number (Flight Recorder dumps)."""
    c = inp.calls
    if not len(c):
        return {}
    c = c[(c["kind"] == "coll") & (c["source"] == "flight_recorder")]
    out: dict[str, dict[int, int]] = {}
    for g, r, s in zip(c["group"], c["rank"], c["seq"]):
        d = out.setdefault(str(g), {})
        d[int(r)] = max(d.get(int(r), -1), int(s))
    return out


def _all_done(inp: HangInputs) -> bool:
    """Every recorded call completed, where the backend records completion (gloo's entries never say completed:
    there the equal last sequence numbers decide alone)."""
    c = inp.calls
    c = c[(c["kind"] == "coll") & (c["source"] == "flight_recorder")] if len(c) else c
    done = c["done"] == 1
    return bool(len(c)) and (bool(done.all()) or not bool(done.any()))


def finished(inp: HangInputs, facts: StderrFacts, logs: list) -> bool:
    """The job finished (module docstring): no launcher failure, and every rank's dump ends where its peers' do."""
    fails, signals = _launcher_lines(logs)
    if not logs or fails or signals or not inp.dumps:  # no log: nothing to neutralise, nothing says it ended
        return False
    if any(f.died and f.origin is not None and f.origin.get("kind") == "signal" for f in facts.ranks.values()):
        return False
    if any(f.timed_out for f in facts.ranks.values()):
        return False
    if set(inp.world) - set(inp.dumps):
        return False
    where = _where(inp)
    return bool(where) and _all_done(inp) and all(len(set(v.values())) == 1 for v in where.values())


def _stood(inp: HangInputs) -> str:
    """'group 0 (default_pg): every rank at #42' / per rank where they differ."""
    parts = []
    for g, ranks in sorted(_where(inp).items(), key=lambda kv: (len(kv[0]), kv[0])):
        desc = inp.groups[g].desc if g in inp.groups and inp.groups[g].desc else ""
        name = f"group {g}" + (f" ({desc})" if desc else "")
        seqs = sorted(set(ranks.values()))
        if len(seqs) == 1:
            parts.append(f"{name}: {ranks_text(sorted(ranks))} at #{seqs[0]}")
        else:
            parts.append(f"{name}: " + ", ".join(f"rank {r} at #{s}" for r, s in sorted(ranks.items())))
    return "; ".join(parts[:6])


def stopped(inp: HangInputs, facts: StderrFacts, logs: list) -> HangDiagnosis | None:
    """A stopped_externally diagnosis, or None when the job was not stopped from outside (module docstring)."""
    _, signals = _launcher_lines(logs)
    ranks = facts.ranks
    if any(f.origin is not None for f in ranks.values()) or any(f.timed_out for f in ranks.values()):
        return None
    termed = sorted(r for r, f in ranks.items() if "SIGTERM" in f.how)
    everyone = set(inp.world) or set(ranks)
    if not signals and not (termed and set(termed) >= everyone):
        return None
    where = _stood(inp)
    behind = _behind(inp)
    if behind:  # a group whose members stand more than one call apart was not progressing together
        return None
    how = (f"the launcher itself received a signal ({signals[0][2][:160]})" if signals else
           f"every rank ({ranks_text(termed)}) was ended by SIGTERM")
    cause = (f"the job was stopped from outside: {how}, while no rank had failed on its own or was waiting for "
             "another (a scheduler's time limit, `timeout`, preemption or a cancel); no rank is at fault"
             + (f". Where every rank stood: {where}" if where else ""))
    ev = [(p, ln, t) for p, ln, t in signals[:2]]
    for r in termed[:4]:
        ev.extend(e for e in ranks[r].evidence[:1] if e not in ev)
    if not where:  # no dump: nothing shows the ranks progressing, only that none failed or timed out
        cause += ("; no Flight Recorder dump shows where the ranks stood, so a rank stuck outside collectives "
                  "until the stop cannot be ruled out")
    return HangDiagnosis(kind=KIND, process_group="", pg_desc="", seq=None, op="", culprit_ranks=[],
                         waiting_ranks=[], cause=cause, confidence=0.9 if where else 0.6, source="stderr",
                         evidence=ev[:6], fix=FIX)


def _behind(inp: HangInputs) -> list[str]:
    """Groups whose members' last sequence numbers differ by more than one (one call in flight is progress)."""
    return [g for g, v in _where(inp).items() if v and max(v.values()) - min(v.values()) > 1]


def apply(diags: list[HangDiagnosis], inp: HangInputs, facts: StderrFacts, logs: list) -> list[HangDiagnosis]:
    """Nothing when the job finished; the stopped_externally diagnosis in place of culprit-less or all-rank crash
    readings when it was stopped from outside; `diags` unchanged otherwise."""
    logs = list(logs)
    if finished(inp, facts, logs):  # what the dumps show stays; what a caught traceback suggested goes
        return [d for d in diags if not (d.source == "stderr" and d.kind in ("crashed_rank", "lagging_rank",
                                                                             "missing_rank", "watchdog_timeout"))]
    x = stopped(inp, facts, logs)
    if x is None:
        return diags
    if any(d.source != "stderr" and d.culprit_ranks and d.confidence >= 0.5 and not d.tie for d in diags):
        # the dumps show ranks waiting on a culprit: the job hung first and was stopped later; the hang stays
        # the root, the stop is what ended it
        x.cause = x.cause.replace("the job was stopped from outside:", "the hung job was then stopped from outside:")
        x.confidence = 0.5
        return diags + [x]
    keep = [d for d in diags if d.kind not in ("crashed_rank", "lagging_rank", "missing_rank", "watchdog_timeout")]
    return [x] + keep
