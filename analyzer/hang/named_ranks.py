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
`apply_stated_views` does the same for DDP's model verification, where every rank states its own view and the
majority names the odd rank (below).
"""
from __future__ import annotations

import re
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


# ----------------------------------------------------------------------------------------------------------------
# Statements in which each rank compares itself with another: DDP's model verification
# ----------------------------------------------------------------------------------------------------------------
#
# DistributedDataParallel's constructor verifies the model across the ranks (torch/csrc/distributed/c10d/
# reducer.cpp, verify_params_across_processes) before any training collective:
# - the parameter count, all-gathered: EVERY rank raises, each naming itself and the first rank that differs from it
#   ("DDP expects same model across all ranks, but Rank 0 has 4 params, while rank 1 has inconsistent 6 params.");
#   each statement gives two ranks' counts, and the count most ranks have is the model; the others are odd;
# - the shapes (and strides), against process 0's broadcast: only a rank whose parameter differs from rank 0's
#   raises ("[2]: params[0] in this process with sizes [17, 8] appears not to match sizes of the same param in
#   process 0."). The ranks that did not raise passed the check (they agree with rank 0); when more ranks raise
#   than agree with rank 0, rank 0 is the odd one.
# Every rank that raised did so because of the check: those exceptions are effects of the odd rank's model.

_DDP_COUNT = re.compile(r"DDP expects same model across all ranks, but Rank (\d{1,7}) has (\d{1,9}) params?, "
                        r"while rank (\d{1,7}) has inconsistent (\d{1,9}) params?")
_DDP_SHAPE = re.compile(r"(?:\[(\d{1,7})\]: )?params\[(\d{1,9})\] in this process with (sizes|strides) "
                        r"(\[[\d, ]{0,200}\]) appears not to match \3 of the same param in process 0")


@dataclass
class ModelCheck:
    """What DDP's model verification says, and the odd rank(s) by majority."""

    odd: list[int]
    speakers: list[int]                      # ranks that raised the check's error
    values: dict[int, str]                   # each rank's count or 'differs from rank 0' view
    what: str                                # 'parameter count' | 'parameter sizes' | 'parameter strides'
    tie: bool
    evidence: list[tuple[str, int | None, str]] = field(default_factory=list)


def _statements(logs: list) -> list[tuple[str, int, int, str]]:
    """(file, line, rank, message) of every exception line in the logs (tracebacks and torchrun's error files)."""
    out = []
    for log in logs:
        path = str(getattr(log, "path", ""))
        for name in ("tracebacks", "failures"):
            df = getattr(log, name, None)
            if df is None or not len(df) or "message" not in df.columns:
                continue
            lines = df["end_line"] if "end_line" in df.columns else df["line"]
            for r, ln, msg in zip(df["rank"], lines, df["message"]):
                if msg and ("DDP expects" in str(msg) or "appears not to match" in str(msg)):
                    out.append((path, int(ln) if int(ln) > 0 else None, int(r), str(msg)))
    return out


def model_check(logs: list, world: set[int]) -> ModelCheck | None:
    """The odd rank(s) of DDP's model verification, or None when no rank printed it."""
    counts: dict[int, str] = {}
    own: dict[int, str] = {}
    shape_speakers: dict[int, tuple] = {}
    ev: list[tuple[str, int | None, str]] = []
    seen: set[str] = set()
    for path, ln, r, msg in _statements(logs):
        if (m := _DDP_COUNT.search(msg)) is not None:
            me, n, other, k = int(m.group(1)), m.group(2), int(m.group(3)), m.group(4)
            own[me] = n
            counts.setdefault(other, k)
        elif (m := _DDP_SHAPE.search(msg)) is not None:
            me = int(m.group(1)) if m.group(1) is not None else r
            if me < 0:
                continue
            shape_speakers.setdefault(me, (m.group(3), m.group(2), m.group(4)))
        else:
            continue
        if m.group(0) not in seen:
            seen.add(m.group(0))
            ev.append((path, ln, m.group(0)[:300]))
    if own:
        values = {**counts, **own}  # a rank's own statement of its count beats another's report of it
        from analyzer.hang.matching import majority
        _, odd, tie = majority(values)
        if not odd and not tie:
            return None
        return ModelCheck(odd=odd, speakers=sorted(own), values=values, what="parameter count", tie=tie,
                          evidence=ev)
    if shape_speakers:
        speakers = sorted(shape_speakers)
        agree = sorted((set(world) | {0}) - set(speakers))  # passed the check: rank 0's model
        what = f"parameter {next(iter(shape_speakers.values()))[0]}"
        values = {r: "rank 0's" for r in agree} | {r: "not rank 0's" for r in speakers}
        if len(speakers) < len(agree):
            odd, tie = speakers, False
        elif len(speakers) > len(agree):
            odd, tie = agree, False
        else:
            odd, tie = sorted(values), True
        return ModelCheck(odd=odd, speakers=speakers, values=values, what=what, tie=tie, evidence=ev)
    return None


def model_check_diagnosis(mc: ModelCheck) -> HangDiagnosis:
    """A mismatched_size diagnosis (the model differs) naming the odd rank(s)."""
    if mc.what == "parameter count":
        views = ", ".join(f"rank {r}: {v}" for r, v in sorted(mc.values.items()))
        said = (f"DDP's model check (every rank compares its parameter count with the others' and raises) gives "
                f"the counts {views}")
    else:
        said = (f"DDP's model check compares every parameter's {mc.what.split()[-1]} with process 0's: "
                f"{ranks_text(mc.speakers)} raised that theirs differ from rank 0's, the others passed")
    if mc.tie:
        cause = (f"{said}; as many ranks agree with one model as with the other, so which side is wrong is not "
                 "known (a tie)")
    else:
        cause = (f"{said}: {ranks_text(mc.odd)} built a different model from the majority (a rank-dependent "
                 f"layer, config or checkpoint); the other ranks' errors are DDP refusing to start with "
                 f"{'them' if len(mc.odd) > 1 else 'it'} (PyTorch's own comparison)")
    return HangDiagnosis(kind="mismatched_size", process_group="0", pg_desc="default_pg", seq=None,
                         op="DDP model verification", culprit_ranks=list(mc.odd),
                         waiting_ranks=sorted(set(mc.values) - set(mc.odd)), evidence=mc.evidence[:4], cause=cause,
                         confidence=0.4 if mc.tie else CONFIDENCE, tie=mc.tie, source="stderr",
                         fix="Build the same model on every rank before wrapping it in DistributedDataParallel: "
                             "look for a rank-dependent layer, config value or checkpoint on the odd rank.")


def apply_stated_views(diags: list[HangDiagnosis], logs: list, world: set[int]) -> list[HangDiagnosis]:
    """The ranked diagnoses with DDP's model check merged in: its odd rank first; the crashes of the ranks that
    only raised the check's error (and of the odd rank itself) are that one finding, not failures of their own."""
    mc = model_check(list(logs), set(world))
    if mc is None:
        return diags
    mine = model_check_diagnosis(mc)
    involved = set(mc.speakers) | set(mc.odd)
    out = [mine]
    for d in diags:
        culprits = set(d.culprit_ranks)
        if d.kind in _INFERRED + ("mismatched_size", "mismatched_op") and culprits and culprits <= involved \
                or (d.kind in _INFERRED and not culprits):
            mine.evidence.extend(e for e in d.evidence[:1] if e not in mine.evidence)
            continue
        out.append(d)
    return out
