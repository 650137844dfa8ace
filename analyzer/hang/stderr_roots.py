"""Roots read from stderr alone: a job that never formed, the debug wrapper's own mismatch report, ranks that
neither timed out nor failed while the others timed out, call-site outliers, and timeouts with no culprit.
"""
from __future__ import annotations

import re
from collections import Counter

from analyzer.hang.diagnosis import HangDiagnosis
from analyzer.hang.evidence import failed_itself, failure_evidence, group_desc
from analyzer.hang.inputs import HangInputs
from analyzer.hang.stderr_facts import StderrFacts
from rules.phrases import ranks_text


def rendezvous_root(facts: StderrFacts) -> HangDiagnosis:
    """The job never formed: a port in use, a store that could not be reached, a rendezvous that timed out."""
    first = facts.rendezvous[0]
    kinds = sorted({x["kind"] for x in facts.rendezvous})
    what = {"rendezvous_eaddrinuse": "the rendezvous port was already in use (EADDRINUSE)",
            "rendezvous_refused": "the ranks could not connect to the rendezvous store (MASTER_ADDR:MASTER_PORT "
                                  "refused or timed out)",
            "store_timeout": "the rendezvous store timed out before every rank joined",
            "rendezvous_timeout": "the rendezvous timed out before every node joined (a node never started, or "
                                  "could not reach the rendezvous endpoint)",
            "rendezvous_error": "the rendezvous failed"}
    return HangDiagnosis(kind="rendezvous_failure", process_group="", pg_desc="", seq=None, op="",
                         culprit_ranks=[], waiting_ranks=[], confidence=0.9, source="stderr",
                         cause="; ".join(what.get(k, k) for k in kinds) + (f" ({first['peer']})" if first.get("peer", -1)
                                                                            not in (-1, "") else ""),
                         evidence=[(x["file"], x["line"], x["text"]) for x in facts.rendezvous[:4]])


_ASPECT = {"Op type": "mismatched_op", "Tensor shape": "mismatched_size", "Tensor dtype": "mismatched_dtype"}



def detail_mismatch(inp: HangInputs, facts: StderrFacts) -> HangDiagnosis | None:
    """TORCH_DISTRIBUTED_DEBUG=DETAIL reports 'Rank A is running X, but Rank B is running Y' on each rank: the op
    every report gives each rank, then a majority (the fingerprint numbers collectives from 0, dumps from 1)."""
    reps = facts.mismatch_reports
    if not reps:
        return None
    ops: dict[int, str] = {}
    values: dict[int, str] = {}  # each rank's value of the first aspect that differs (its own, then its peer's)
    kind, aspect = "mismatched_op", ""
    for x in reps:
        r, peer = int(x.get("rank", -1)), int(x.get("peer", -1))
        m = re.search(r"(Op type|Tensor shape|Tensor dtype)s?:\s*(\S+?)\s*vs\s*(\S+)", x.get("reason", ""), re.I)
        if m:
            kind = _ASPECT.get(m.group(1).capitalize(), kind)
            aspect = aspect or m.group(1).lower()
            if r >= 0:
                values.setdefault(r, m.group(2))
            if peer >= 0:
                values.setdefault(peer, m.group(3))
        if r >= 0 and x.get("op"):
            ops.setdefault(r, str(x["op"]).lower())
        if peer >= 0 and m and m.group(1).lower() == "op type":
            ops.setdefault(peer, m.group(3).lower())  # a peer's op only where the op is what differs
    # the majority is taken over the aspect that differs: the ops, or the shapes / dtypes of one op's calls
    compared = values if values and aspect not in ("", "op type") else ops
    if len(compared) < 2:
        return None
    from analyzer.hang.matching import majority
    _, odd, tie = majority(compared)
    seq = max((int(x.get("seq", -1)) for x in reps), default=-1)
    op = Counter(ops.values()).most_common(1)[0][0] if ops else ""
    cause = ("the debug wrapper (TORCH_DISTRIBUTED_DEBUG=DETAIL) compared the ranks' calls: "
             + ", ".join(f"rank {r}: {o}" for r, o in sorted(ops.items())))
    sizes: dict[int, int] = {}
    dtypes: dict[int, str] = {}
    if values and aspect not in ("", "op type"):
        # the values of a shape or dtype are not ops: they go under the aspect that differs
        ops = {r: op for r in values} if op else {}
        if aspect == "tensor shape":
            sizes = {r: int(v) for r, v in values.items() if v.isdigit()}
            what = "elements"
        else:
            dtypes = dict(values)
            what = "dtype"
        cause = ("the debug wrapper (TORCH_DISTRIBUTED_DEBUG=DETAIL) compared the ranks' calls of "
                 + (op or "a collective") + f": {what} "
                 + ", ".join(f"rank {r}: {v}" for r, v in sorted(values.items())))
    return HangDiagnosis(kind=kind, process_group="", pg_desc="", seq=seq + 1 if seq >= 0 else None,
                         op=op, culprit_ranks=odd, waiting_ranks=[], ops=ops, sizes=sizes, dtypes=dtypes,
                         tie=tie, confidence=0.45 if tie else 0.85, source="stderr", cause=cause,
                         evidence=[(x["file"], x["line"], x["text"][:400]) for x in reps[:3]])



def silent_members(inp: HangInputs, facts: StderrFacts, blocked_p2p: dict[int, str]) -> list[HangDiagnosis]:
    """Without dumps: some ranks timed out in collectives while the others of the world neither timed out nor
    failed (they were still running, or killed by the launcher): the silent ones are whom the others waited for."""
    timed = {r for r, f in facts.ranks.items() if f.timed_out and r not in blocked_p2p}
    world = set(inp.world) | facts.seen | set(facts.ranks)
    if inp.dumps or not timed or not world:
        return []
    silent = sorted(r for r in world - timed - set(blocked_p2p) if not failed_itself(facts, r))
    if not silent or len(silent) * 2 > len(world):
        return []
    apis = sorted({facts.ranks[r].blocked_in for r in timed if facts.ranks[r].blocked_in})
    ev = failure_evidence(facts, silent)
    for r in sorted(timed)[:3]:
        ev.extend((c["file"], c["line"], c["text"]) for c in facts.ranks[r].consequences[:1])
    return [HangDiagnosis(
        kind="lagging_rank", process_group="", pg_desc="", seq=None, op=apis[0] if len(apis) == 1 else "",
        culprit_ranks=silent, waiting_ranks=sorted(timed), confidence=0.65, source="stderr", evidence=ev,
        cause=(f"{ranks_text(sorted(timed))} timed out waiting in {', '.join(apis) or 'collectives'} while "
               f"{ranks_text(silent)} neither timed out nor failed (they were still running until the launcher stopped them): "
               "the others waited for them"))]



def call_sites(facts: StderrFacts) -> dict[str, list[int]]:
    """Where each rank that timed out without a failure of its own was waiting: its user-code stack (function:line,
    outermost first) and the API it waited in."""
    out: dict[str, list[int]] = {}
    for r, f in sorted(facts.ranks.items()):
        if f.timed_out and not f.origin and f.stack:
            site = " › ".join(f.stack.split(";"))
            last = f.stack.split(";")[-1].split(":")[0]
            out.setdefault(site if f.blocked_in in ("", last) else f"{site} in {f.blocked_in}", []).append(r)
    return out



def call_site_outliers(inp: HangInputs, facts: StderrFacts) -> list[HangDiagnosis]:
    """No dump shows the hang, but the ranks' tracebacks do: most ranks timed out at one call site and a few at
    another (a barrier after the loop, a send of their own). The few are not where the others wait for them: they
    are the suspects (a majority rule over call sites, as over ops in a dump)."""
    sites = call_sites(facts)
    if len(sites) < 2:
        return []
    ranked = sorted(sites.items(), key=lambda kv: -len(kv[1]))
    (main_site, main), rest = ranked[0], ranked[1:]
    odd = sorted(r for _, rs in rest for r in rs)
    if len(main) < 2 or len(main) <= len(odd) or len(ranked[1][1]) == len(main):
        return []
    p2p_only = all(facts.ranks[r].blocked_in_p2p for r in odd)
    if p2p_only and any(facts.ranks[r].p2p_direction != "send" for r in odd):
        return []  # blocked in a recv: it waits for a sender that went on; stderr does not say which (below)
    kind = "p2p_mismatch" if p2p_only else "missing_rank"
    where = "; ".join(f"{ranks_text(rs)} timed out at {site}" for site, rs in rest)
    cause = (f"no dump shows the hang, but the tracebacks do: {ranks_text(main)} timed out at one call site "
             f"({main_site}) while {where}: "
             + ("they were blocked in a send of their own that no receiver took (an extra send, or a receiver that "
                "skipped its recv)" if p2p_only else "they never joined the collective the others wait in")
             + " (a majority rule over the ranks' call sites; stderr only, so not proven)")
    ev = []
    for r in odd + main[:2]:
        ev.extend((c["file"], c["line"], c["text"]) for c in facts.ranks[r].consequences[:1])
    if p2p_only:
        return [_unmatched_send(inp, odd, main, main_site, where, ev, facts.ranks[main[0]].blocked_in)]
    return [HangDiagnosis(kind=kind, process_group="", pg_desc="", seq=None, op=facts.ranks[main[0]].blocked_in,
                          culprit_ranks=odd, waiting_ranks=sorted(main), evidence=ev, confidence=0.6,
                          source="stderr", cause=cause)]


def _unmatched_send(inp: HangInputs, senders: list[int], main: list[int], main_site: str, where: str, ev: list,
                    api: str) -> HangDiagnosis:
    """Ranks blocked in a send of their own while the others wait in a collective: the send had no receiver.
    Either the sender sent one too many (an extra send) or its receiver skipped the recv and went on into the
    collective — the same picture in stderr, so a tie below 0.5: the senders and whoever they send to (the
    smallest known group holding them other than the world, else every rank) are the suspects."""
    homes = sorted((g for g in inp.groups.values() if g.members and set(senders) <= set(g.members)
                    and g.key != "0" and g.desc != "default_pg"), key=lambda g: (len(g.members), g.key))
    peers = sorted(set(homes[0].members) - set(senders)) if homes else sorted(main)
    scope = f"the other members of group {homes[0].key} ({homes[0].desc})" if homes else "any of the others"
    src = senders[0] if len(senders) == 1 else None
    cause = (f"no dump shows the hang, but the tracebacks do: {ranks_text(main)} timed out at one call site "
             f"({main_site}) while {where}, blocked in a send of their own that no receiver took. Either "
             f"{ranks_text(senders)} sent one too many (an extra send) or {'its' if src is not None else 'their'} "
             f"receiver — {scope} — skipped its recv and went on into the collective: stderr shows the same in "
             "both cases, so the sender is not blamed")
    return HangDiagnosis(kind="p2p_mismatch", process_group="", pg_desc="", seq=None, op=api,
                         culprit_ranks=sorted(set(senders) | set(peers)), waiting_ranks=[], evidence=ev,
                         confidence=0.45, tie=True, source="stderr", cause=cause,
                         p2p={"src": src, "dst": None, "tag": None})



def timeouts_only(inp: HangInputs, facts: StderrFacts) -> list[HangDiagnosis]:
    """Ranks timed out but nothing says who is to blame: one watchdog_timeout diagnosis with no culprit."""
    e = inp.errors[inp.errors["kind"] == "timeout"] if len(inp.errors) else inp.errors
    timed = sorted(set(int(r) for r in e["rank"])) if len(e) else []
    timed += [r for r, f in sorted(facts.ranks.items()) if f.timed_out and r not in timed]
    if not timed:
        return []
    g = str(e.sort_values("seq")["group"][0]) if len(e) else ""
    seq = int(e.sort_values("seq")["seq"][0]) if len(e) else None
    ev = [(str(x.file), int(x.line), str(x.text)) for x in e[0:4].itertuples()] if len(e) else []
    for r in timed[:4]:
        ev.extend(c_ev for c in facts.ranks[r].consequences[:1] if r in facts.ranks
                  for c_ev in [(c["file"], c["line"], c["text"])]) if r in facts.ranks else None
    return [HangDiagnosis(kind="watchdog_timeout", process_group=g, pg_desc=group_desc(inp, g), seq=seq, op="",
                          culprit_ranks=[], waiting_ranks=timed, evidence=ev, confidence=0.3,
                          source="watchdog" if len(e) else "stderr",
                          cause=timeouts_cause(facts))]



def timeouts_cause(facts: StderrFacts) -> str:
    sites = call_sites(facts)
    recv = [r for r, f in sorted(facts.ranks.items()) if f.timed_out and f.blocked_in_p2p and f.p2p_direction == "recv"]
    if len(sites) >= 2 and recv:
        return (f"collectives timed out while {ranks_text(recv)} waited in a recv of {'their' if len(recv) > 1 else 'its'} "
                "own (" + "; ".join(f"{ranks_text(rs)} at {site}" for site, rs in sites.items()) + "): a rank that "
                "should have sent to them went on without sending; stderr does not say which")
    if len(sites) >= 2:
        return ("collectives timed out at different call sites (" + "; ".join(
            f"{ranks_text(rs)} at {site}" for site, rs in sites.items()) + ") with no majority to tell the odd ranks "
            "from the rest: the evidence here cannot name a culprit")
    return ("collectives timed out, but every rank that reported agrees on op, size and sequence and none is seen "
            "behind: the culprit left no trace here")
