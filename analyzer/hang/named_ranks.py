"""Ranks that PyTorch names outright in stderr: `dist.monitored_barrier`'s "Rank 2 failed to pass monitoredBarrier
in 2000 ms" (and "Ranks 1, 3 failed to pass …" with wait_all_ranks=True).

monitored_barrier runs on the group's rank 0: every other rank sends to it and waits for its ack; rank 0 waits for
each one up to the timeout and names the ranks that did not arrive. The named rank is the culprit (late, stuck
elsewhere, or it never called the barrier); rank 0, which printed the line, and the ranks that "successfully reached
monitoredBarrier, but received errors while waiting for send/recv from rank 0" are the ones that waited. This is
PyTorch's own comparison, so it outranks any inference from who timed out (analyzer/hang/verdict.py's
`_silent_members`, `_timeouts_only`).

The ranks in these messages are the group's ranks, not global ones: on a sub-group, global rank 1 prints
"[Rank 0]: Rank 2 failed to pass monitoredBarrier" about global rank 3. The reporter is always the group's rank 0,
so a reporter whose global rank (its launcher prefix) is not its rank in the message, or not 0, shows a sub-group;
the named ranks are then translated through the one group (from the dumps' group tables) whose member list puts
the reporter at that index. With no such group, no rank is named above 0.5 (`group_ranks`).

`apply(diags, logs, groups)` merges the finding into the verdict's ranked list (analyzer/hang/analysis.py calls it).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from parsers.table import Table

from analyzer.hang.diagnosis import FIX, HangDiagnosis
from rules.phrases import ranks_text

#: diagnosis kinds that only infer a culprit from who timed out; PyTorch's named rank replaces them
_INFERRED = ("lagging_rank", "missing_rank", "crashed_rank", "watchdog_timeout", "p2p_mismatch")
CONFIDENCE = 0.9


@dataclass
class BarrierReport:
    """What the monitored_barrier lines of the inputs say."""

    late: list[int] = field(default_factory=list)           # ranks named as failing to pass
    reporters: list[int] = field(default_factory=list)      # ranks that printed the naming line (the group's rank 0)
    reached: list[int] = field(default_factory=list)        # ranks that reached it and lost rank 0
    timeout_ms: int = -1
    evidence: list[tuple[str, int | None, str]] = field(default_factory=list)
    group: str = ""                                         # the sub-group the names were translated through
    local: list[int] = field(default_factory=list)          # the names as printed, when they are group ranks
    unresolved: bool = False                                # group ranks of a sub-group no input lists


def group_ranks(reporter: int, code: int, groups: list[tuple[str, list[int]]]) -> tuple[str, list[int]] | None:
    """The group whose sorted members put global `reporter` at index `code` (its rank in the message), if one."""
    hits = [(k, m) for k, m in groups if 0 <= code < len(m) and m[code] == reporter]
    whole = [h for h in hits if h[1] == list(range(len(h[1])))]
    if whole and reporter == code:  # the message's numbering is the global one: nothing to translate
        return None
    sub = [h for h in hits if h not in whole]
    return sub[0] if len({tuple(m) for _, m in sub}) == 1 else ("", [])


def _events(logs: list) -> Table:
    frames = []
    for log in logs:
        ev = getattr(log, "events", None)
        if ev is not None and len(ev):
            sel = ev[ev["kind"].astype(str) == "monitored_barrier"]
            if len(sel):
                frames.append(sel.with_columns(file=str(getattr(log, "path", ""))))
    return Table.concat(frames) if frames else Table()


def barrier_report(logs: list, groups: list[tuple[str, list[int]]] = ()) -> BarrierReport | None:
    """The late ranks named by monitored_barrier lines (global ranks), or None when no line names one."""
    ev = _events(logs)
    if ev.empty:
        return None
    named = ev[(ev["reason"].astype(str) == "failed to pass") & (ev["peer_rank"] >= 0)]
    if named.empty:
        return None
    rep = BarrierReport()
    rep.late = sorted({int(r) for r in named["peer_rank"]})
    who = [int(r) if r >= 0 else int(c) for r, c in zip(named["rank"], named["code"])]
    rep.reporters = sorted({r for r in who if r >= 0} - set(rep.late))
    reached = ev[ev["reason"].astype(str) == "received errors from the peer"]
    rep.reached = sorted({int(r) for r in reached["rank"] if r >= 0} - set(rep.late))
    rep.timeout_ms = int(named["timeout_ms"].max())
    _to_global(rep, named, ev, list(groups))
    seen = set()
    for x in named.sort_values("line").itertuples(index=False):
        if x.text in seen:
            continue
        seen.add(x.text)
        rep.evidence.append((str(x.file), int(x.line), str(x.text)))
    return rep


def _to_global(rep: BarrierReport, named: Table, ev: Table, groups: list) -> None:
    """Translate group ranks to global ones when the reporter shows a sub-group (see the module docstring)."""
    g = [int(r) for r in named["rank"] if r >= 0]
    if not g:
        return
    reporter = g[0]
    codes = [int(c) for c in named["code"] if c >= 0] if "code" in named.columns else []
    code = codes[0] if codes else 0
    if reporter == code:
        return
    found = group_ranks(reporter, code, groups)
    if found is None:
        return
    key, members = found
    rep.local = list(rep.late)
    rep.reporters = [reporter]
    if not members or any(r >= len(members) for r in rep.late):
        rep.unresolved, rep.late = True, []
        return
    rep.group = key
    rep.late = sorted(members[r] for r in rep.local)
    rep.reached = sorted(set(rep.reached) - set(rep.late) - {reporter})


def diagnosis(rep: BarrierReport) -> HangDiagnosis:
    """A missing_rank diagnosis naming the late ranks."""
    late = ranks_text(rep.late)
    by = ranks_text(rep.reporters) if rep.reporters else "the group's rank 0"
    within = f" within {rep.timeout_ms} ms" if rep.timeout_ms >= 0 else ""
    reached = (f"; {ranks_text(rep.reached)} reached the barrier and then lost {by} when it gave up"
               if rep.reached else "")
    printed = ", ".join(str(r) for r in rep.local)
    if rep.unresolved:
        cause = (f"{by}'s dist.monitored_barrier names group rank(s) {printed} as failing to pass{within}; {by} is "
                 f"not that group's rank 0 in the world's numbering, so these are ranks of a sub-group whose members "
                 f"no input lists: which global ranks they are is unknown{reached}")
        return HangDiagnosis(kind="missing_rank", process_group="", pg_desc="", seq=None, op="monitored_barrier",
                             culprit_ranks=[], waiting_ranks=sorted(set(rep.reporters) | set(rep.reached)),
                             evidence=rep.evidence[:4], cause=cause, confidence=0.4, source="stderr",
                             fix=FIX["missing_rank"])
    via = (f" (group rank(s) {printed} of process group {rep.group}, whose rank 0 is {by}: the message counts "
           f"the group's ranks)" if rep.group else "")
    cause = (f"{by}'s dist.monitored_barrier names {late}{via} as failing to pass{within}: "
             f"{'they' if len(rep.late) > 1 else 'it'} arrived late, stalled before it or never called it "
             f"(PyTorch's own check, not an inference){reached}")
    return HangDiagnosis(kind="missing_rank", process_group=rep.group, pg_desc="", seq=None, op="monitored_barrier",
                         culprit_ranks=list(rep.late), waiting_ranks=sorted(set(rep.reporters) | set(rep.reached)),
                         evidence=rep.evidence[:4], cause=cause, confidence=CONFIDENCE, source="stderr",
                         fix=FIX["missing_rank"])


def apply(diags: list[HangDiagnosis], logs: list,
          groups: list[tuple[str, list[int]]] = ()) -> list[HangDiagnosis]:
    """The ranked diagnoses with monitored_barrier's named ranks merged in.

    A diagnosis that names the same ranks gets the line as evidence and at least this confidence; inferred ones
    (who timed out, who stayed silent) that name other ranks or none are replaced; one that shows a failure of the
    named rank's own (an exception, a crash) stays first, with the barrier line added.
    """
    rep = barrier_report(list(logs), groups)
    if rep is None:
        return diags
    if rep.unresolved:
        return diags + [diagnosis(rep)]
    late = set(rep.late)
    mine = diagnosis(rep)
    out: list[HangDiagnosis] = []
    merged = False
    for d in diags:
        culprits = set(d.culprit_ranks)
        if culprits and culprits <= late and d.confidence >= 0.8 and not d.tie:
            d.evidence[0:0] = [e for e in rep.evidence[:2] if e not in d.evidence]
            d.confidence = max(d.confidence, CONFIDENCE)
            merged = True
            out.append(d)
        elif d.kind in _INFERRED and d.source == "stderr" and (d.confidence < 0.7 or culprits <= late):
            mine.evidence.extend(e for e in d.evidence[:2] if e not in mine.evidence)
        else:
            out.append(d)
    if not merged:
        out.insert(0 if not out or out[0].confidence < CONFIDENCE else 1, mine)
    return out
