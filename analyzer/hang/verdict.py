"""From divergences, blocking points, wait edges and stderr facts to ranked root-cause diagnoses.

Roots, strongest evidence first:
1. a rank whose stderr shows an origin failure (a gloo size check, an exception in user code, out of memory,
   a CUDA error, a fatal signal); the waits on it (edges to it, or to a rank that left no dump) are its effect;
2. a group whose members issued incompatible calls at one sequence number (op, size, dtype, order) — decided by
   majority; a tie stays a tie (all suspects, confidence below 0.5) unless stderr names one of them;
3. ranks that wait for each other (a cycle of the wait-for graph): across two groups an order inversion;
4. ranks whose own work stopped completing while their peers completed it (device stalled);
5. ranks others wait for that are not waiting themselves (stopped issuing work: stalled or never joined);
6. ranks that left no record at all, with the reason when stderr gives one.
Every other blocked rank is a consequence: its wait is listed in `explains` of the root at the head of its chain.

The roots themselves are built by placement (mismatches, chain heads, stderr origins), size_abort, deadlocks,
p2p_roots and stderr_roots; this module orders them and ties each blocked rank to the root at the head of its chain.
"""
from __future__ import annotations

from parsers.table import Table, isin

from analyzer.hang import p2p
from analyzer.hang.deadlocks import cycle_diag, stuck_pair_root
from analyzer.hang.diagnosis import FIX, HangDiagnosis
from analyzer.hang.evidence import ev_row, explains_for, failed_itself, group_desc, op_at, wait_text, waiters_of
from analyzer.hang.inputs import HangInputs
from analyzer.hang.matching import Divergence
from analyzer.hang.p2p_roots import p2p_roots
from analyzer.hang.placement import (best_group, chain_heads, failed_where_others_passed, from_divergence, origin_kind,
                                     refine_by_call_site, root_at)
from analyzer.hang.size_abort import decide_size_abort, dtype_from_abort, size_abort, size_abort_majorities
from analyzer.hang.stderr_facts import StderrFacts, origin_sentence, origin_time
from analyzer.hang.stderr_roots import (call_site_outliers, detail_mismatch, rendezvous_root, silent_members,
                                        timeouts_only)
from analyzer.hang.waits import RankStates, cycles
from rules.phrases import per_rank_text, ranks_text


KIND_ORDER = {"mismatched_op": 0, "order_mismatch": 0, "extra_collective": 0, "skipped_collective": 0,
              "mismatched_size": 0, "mismatched_dtype": 0, "crashed_rank": 1, "nccl_error": 1, "order_inversion": 2,
              "deadlock": 2, "p2p_mismatch": 2, "device_stalled": 3, "stuck_p2p": 4, "lagging_rank": 5,
              "missing_rank": 5, "rendezvous_failure": 1, "stopped_externally": 1, "watchdog_timeout": 9}



def build(inp: HangInputs, st: RankStates, edges: Table, divs: list[Divergence],
          facts: StderrFacts, lates: list[Divergence] = ()) -> tuple[list[HangDiagnosis], dict[int, str]]:
    """Ranked root diagnoses and the reason each rank without a dump has none (module docstring)."""
    diags: list[HangDiagnosis] = []
    claimed: set[int] = set()
    # a rank that died in a send/recv (stderr) is not waiting in the collective its dump ends with: that wait is
    # stale (gloo records no send/recv, so the dump's last entry is an older collective)
    blocked_p2p = p2p.blocked_directions(facts)
    if blocked_p2p and len(edges):
        edges = edges[~(isin(edges["waiter"], list(blocked_p2p)) & (edges["kind"] == "coll"))]
    world = set(inp.world) | set(facts.ranks)
    no_dump = _no_dump_reasons(inp, facts, world)
    if facts.rendezvous and not inp.dumps and not any(f.timed_out for f in facts.ranks.values()):
        diags.append(rendezvous_root(facts))
    # 1-2: mismatches at a shared sequence number, ties broken only by a suspect's own error; the debug wrapper's
    # own comparison (TORCH_DISTRIBUTED_DEBUG=DETAIL) when no dump shows it
    if not divs and (x := detail_mismatch(inp, facts)) is not None:
        diags.append(x)
        claimed |= set(x.culprit_ranks)
    div_groups = {d.group: d for d in divs}
    for d in divs:
        x = from_divergence(inp, d, facts)
        diags.append(x)
        claimed |= set(x.culprit_ranks)
    # origin failures in stderr that no mismatch already explains (a gloo size abort inside a group that shows a
    # divergence is that divergence seen from the receiving side)
    explained = {r for r in facts.origin_ranks() if size_abort(facts, r) and any(
        r in (inp.groups[d.group].members or ()) for d in divs if d.group in inp.groups)}
    for x in size_abort_majorities(inp, facts, claimed | explained):
        diags.append(x)
        claimed |= set(x.culprit_ranks)
        explained |= set(x.waiting_ranks)
    origins = [r for r in facts.origin_ranks() if r not in claimed and r not in explained]
    by_kind: dict[tuple[str, str], list[int]] = {}
    for r in origins:  # one diagnosis per kind of failure (out of memory, a GPU error, an exception, ...)
        o = facts.ranks[r].origin
        by_kind.setdefault((origin_kind(o), o.get("kind", "")), []).append(r)
    claimed |= explained
    when: dict[int, float] = {}  # id(diagnosis) → when its first rank failed (several roots: the first is first)
    clusters = [(kind, c) for (kind, _), ranks in by_kind.items() for c in _time_clusters(facts, ranks)]
    first_at = min((t for _, c in clusters if (t := _cluster_time(facts, c)) is not None), default=None)
    for kind, ranks in clusters:
        o = facts.ranks[ranks[0]].origin
        cause = "; ".join(origin_sentence(r, facts.ranks[r].origin) for r in ranks[:4])
        t = _cluster_time(facts, ranks)
        if t is not None and first_at is not None and t - first_at >= SEPARATE_S:
            cause += (f" — a separate failure {t - first_at:.0f} s after the first one (torchrun's failure times): "
                      "its own error, not an effect of the first")
        nodump = [r for r in ranks if r not in inp.dumps]
        if nodump and inp.dumps:
            cause += f" ({ranks_text(nodump)} left no Flight Recorder dump)"
        x = root_at(inp, st, edges, kind, ranks, cause, 0.9 if o["kind"] != "signal" else 0.8, facts)
        decide_size_abort(inp, facts, x)  # an aborted receiver is the culprit only if the sizes say so
        refine_by_call_site(inp, st, edges, facts, x)
        if kind == "mismatched_size":
            dtype_from_abort(inp, facts, x)
        diags.append(x)
        if t is not None:
            when[id(x)] = t
        claimed |= set(ranks)
    # 3: ranks that wait for each other
    for comp in cycles(edges):
        if set(comp) & claimed:
            continue
        diags.append(cycle_diag(inp, st, edges, comp))
        claimed |= set(comp)
    # 4: device stalls not explained by an earlier mismatch in the same group
    stalled = [r for r, v in sorted(st.device_stalled.items()) if r not in claimed
               and not any(s["group"] in div_groups and s["seq"] >= div_groups[s["group"]].seq for s in v)]
    if stalled:
        strong = [r for r in stalled if len(st.device_stalled[r]) >= 2 or
                  any(s["peers_completed"] - s["completed"] >= 2 for s in st.device_stalled[r])]
        conf = 0.85 if strong and len(strong) == len(stalled) else 0.6
        cause = "; ".join(f"rank {r} completed only up to seq {s['completed']} in group {s['group']} "
                          f"({group_desc(inp, s['group'])}) while its peers completed {s['peers_completed']}"
                          for r in stalled for s in st.device_stalled[r][:2])
        diags.append(root_at(inp, st, edges, "device_stalled", stalled,
                           "their own work stopped completing though their peers finished the same collectives: "
                           + cause, conf, facts))
        claimed |= set(stalled)
    # send/recv that no dump records (gloo): a rank that broke its own P2P pattern, or ranks that died in a P2P
    for x in p2p_roots(inp, facts, blocked_p2p, claimed):
        diags.append(x)
        claimed |= set(x.culprit_ranks)
        extra = [dict(waiter=r, target=c, group=x.process_group, seq=-1, kind="p2p", op=blocked_p2p.get(r, ""),
                      absent=False, unknown=False, created_ns=-1)
                 for r in blocked_p2p if r not in x.culprit_ranks for c in x.culprit_ranks]
        if extra:
            edges = Table.concat([edges, Table.from_records(extra, edges.columns)])
    claimed |= {r for r in blocked_p2p if any(r in (d.culprit_ranks + d.waiting_ranks) for d in diags)}
    # late arrivals: everyone issued the call, but one rank only after the others' timeout had run out
    for la in lates:
        if set(la.culprits) & claimed:
            continue
        d = HangDiagnosis(kind="lagging_rank", process_group=la.group, pg_desc=group_desc(inp, la.group), seq=la.seq,
                          op=op_at(inp, la.group, la.seq), culprit_ranks=la.culprits, waiting_ranks=[],
                          confidence=0.8, source="flight_recorder", cause=la.cause,
                          evidence=[ev_row(r) for r in la.rows])
        d.waiting_ranks = sorted(set(la.present) - set(la.culprits))
        diags.append(d)
        claimed |= set(d.culprit_ranks)
    # 5-6: heads of chains that are not blocked themselves
    heads = chain_heads(edges, st, claimed | set(blocked_p2p))
    origin_roots = [d for d in diags if (set(d.culprit_ranks) | set(d.waiting_ranks)) & set(facts.origin_ranks())]
    for kind, ranks in heads.items():
        conf = {"lagging_rank": 0.75, "missing_rank": 0.75, "crashed_rank": 0.6, "unknown_rank": 0.45}[kind]
        if kind in ("lagging_rank", "missing_rank") and origin_roots and all(_lost_a_peer(facts, r) for r in ranks):
            # they died inside their last call noticing a peer's failure (connection closed / reset by peer)
            # while another rank's own failure is known: they did not stop on their own, they are its victims
            claimed |= set(ranks)
            continue
        silent = [r for r in ranks if kind == "crashed_rank" and r in facts.seen and not failed_itself(facts, r)]
        if silent and len(silent) == len(ranks):
            kind, conf = "missing_rank", 0.7
            termed = [r for r in ranks if facts.ranks.get(r) and "SIGTERM" in facts.ranks[r].how]
            cause = (f"{ranks_text(ranks)} left no dump, and their own output shows no error of their own"
                     + (f" ({ranks_text(termed)} only stopped by the launcher's SIGTERM)" if termed else "")
                     + f": they never joined the collective the others {wait_text(st, edges, ranks)} (they left "
                     "their loop early — fewer batches than the others — or are stuck outside collectives)")
        elif kind == "crashed_rank":
            why = {r: no_dump.get(r, "") for r in ranks}
            where = wait_text(st, edges, ranks)
            cause = (f"{ranks_text(ranks)} left no Flight Recorder dump or record while the others {where}: "
                     + "; ".join(f"rank {r}: {w}" for r, w in why.items() if w)) if any(why.values()) else \
                (f"{ranks_text(ranks)} left no Flight Recorder dump or record while the others {where}: they most "
                 "likely crashed or were killed before they could dump (or their dumps are not in the folder)")
        elif kind == "unknown_rank":
            kind = "missing_rank"
            cause = (f"the others wait at a collective every rank with a record issued; {ranks_text(ranks)} left records "
                     "but none of this group, so they are the only candidates (not proven)")
        elif (x := failed_where_others_passed(inp, st, edges, facts, ranks)) is not None:
            diags.append(x)
            claimed |= set(ranks)
            continue
        else:
            g, seq, _ = best_group(inp, st, edges, ranks)
            lag = {r: st.enqueued.get((g, r), -1) for r in ranks}
            cause = (f"{ranks_text(ranks)} stopped issuing collectives (last enqueued in group {g}: "
                     f"{per_rank_text(lag)}) while others wait for them at seq {seq}; they are not waiting in any "
                     "collective themselves")
        diags.append(root_at(inp, st, edges, kind, ranks, cause, conf, facts))
        claimed |= set(ranks)
    for r in sorted(st.blocked):
        if r not in claimed and (p := stuck_pair_root(inp, st, r)) is not None:
            diags.append(p)
            claimed |= set(p.culprit_ranks)
    if not diags:
        diags.extend(silent_members(inp, facts, blocked_p2p))
    if not diags:
        diags.extend(call_site_outliers(inp, facts))
    if not diags:
        diags.extend(timeouts_only(inp, facts))
    inp.warnings.extend(_quiet_absent(inp, st, edges))
    reach: dict[int, int] = {}
    for d in diags:
        culprits = set(d.culprit_ranks)
        waiting = (set(d.waiting_ranks) | waiters_of(edges, culprits) | _group_waiters(inp, d)) - culprits
        reach[id(d)] = len(waiting)
        d.waiting_ranks = _members_only(inp, d.process_group, waiting)
        d.explains = [x for x in explains_for(edges, culprits, inp)
                      if not (x["process_group"] == d.process_group and x["seq"] == d.seq)]
        d.fix = d.fix or FIX.get(d.kind, "")
    diags.sort(key=lambda d: (_order(d), when.get(id(d), float("inf")), -reach[id(d)], -d.confidence,
                              d.seq if d.seq is not None else 1 << 62, d.process_group))
    return diags, no_dump



SEPARATE_S = 1.0  # origin failures this far apart in torchrun's failure times are separate roots


def _time_clusters(facts: StderrFacts, ranks: list[int]) -> list[list[int]]:
    """Ranks of one kind of failure split where torchrun's times put them SEPARATE_S or more apart (two ranks that
    raise their own errors a second apart are two findings, not one tie); one list when a time is missing."""
    times = {r: origin_time(facts, r) for r in ranks}
    if len(ranks) < 2 or any(t is None for t in times.values()):
        return [list(ranks)]
    out: list[list[int]] = []
    last = None
    for r in sorted(ranks, key=lambda q: (times[q], q)):
        if last is None or times[r] - last >= SEPARATE_S:
            out.append([])
        out[-1].append(r)
        last = times[r]
    return [sorted(c) for c in out]


def _cluster_time(facts: StderrFacts, ranks: list[int]) -> float | None:
    ts = [t for r in ranks if (t := origin_time(facts, r)) is not None]
    return min(ts) if ts and len(ts) == len(ranks) else None


def _order(d: HangDiagnosis) -> int:
    """Rank of a diagnosis kind; a rank that merely left nothing (no reason known) comes after visible laggards."""
    if d.kind == "crashed_rank" and d.confidence < 0.7:
        return 6
    return KIND_ORDER.get(d.kind, 8)



def _lost_a_peer(facts: StderrFacts, r: int) -> bool:
    """The rank died of noticing someone else's failure: a lost connection (closed / reset by peer), no origin
    of its own."""
    f = facts.ranks.get(r)
    return bool(f and f.died and not f.origin and any(
        c.get("kind") in ("connection_closed", "connection_reset") or "by peer" in str(c.get("text", ""))
        for c in f.consequences))


def _members_only(inp: HangInputs, g: str, waiting: set[int]) -> list[int]:
    """The waiting ranks a diagnosis places in its group: only that group's members (from the dumps' group tables)
    when they are known. Ranks that wait elsewhere on the same root are listed under `explains` with their own
    group, never said to wait in a group they are not members of."""
    members = inp.groups[g].members if g in inp.groups else None
    return sorted(waiting & set(members)) if members else sorted(waiting)


def _group_waiters(inp: HangInputs, d: HangDiagnosis) -> set[int]:
    """For a mismatch: the other members present at that seq wait in it."""
    if d.kind in KIND_ORDER and KIND_ORDER[d.kind] == 0 and d.process_group in inp.groups:
        c = inp.calls[(inp.calls["group"] == d.process_group) & (inp.calls["seq"] == d.seq)]
        return set(int(r) for r in c["rank"])
    return set()



def _no_dump_reasons(inp: HangInputs, facts: StderrFacts, world: set[int]) -> dict[int, str]:
    """Every rank of the world without a dump, with why (from stderr) when it can be told."""
    if not inp.dumps:
        return {}
    out = {}
    for r in sorted(world - set(inp.dumps)):
        f = facts.ranks.get(r)
        if f is not None and (f.origin or f.died):
            what = f.origin["text"][:200] if f.origin else ""
            out[r] = f"died ({f.how or 'exit'})" + (f": {what}" if what else "")
        elif r in inp.log_ranks:
            out[r] = "no dump, but its NCCL/watchdog log is present"
        elif r in facts.seen:  # its own lines are among the inputs; torchrun lists no failure for it
            out[r] = "no dump; its own output is among the inputs and shows no error and no exit code of a failure"
        else:
            out[r] = "no dump and no stderr from it among the inputs"
    return out



def _quiet_absent(inp: HangInputs, st: RankStates, edges: Table) -> list[str]:
    """Warnings for groups whose members left no record while nobody present is seen waiting for them."""
    out = []
    awaited = set(int(t) for t in edges["target"]) if len(edges) else set()
    for key, g in sorted(inp.groups.items()):
        absent = sorted(m for m in g.members or () if m not in inp.dumps and m not in inp.log_ranks
                        and m not in awaited)
        present = sorted(m for m in g.members or () if (key, m) in st.enqueued)
        if absent and present and not any(b.group == key for b in st.blocked.values()):
            upto = ", ".join(f"rank {r} through seq {st.enqueued[(key, r)]}" for r in present)
            out.append(f"group {key} ({g.desc}): {ranks_text(absent)} left no Flight Recorder dump or record; the "
                       f"others completed every collective they issued ({upto}) and nothing timed out, so there is "
                       "no sign of a hang in this group")
    return out
