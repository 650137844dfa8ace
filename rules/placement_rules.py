"""Placement rules: a rank calls a collective at a different point of its step than the other members."""
from __future__ import annotations

from typing import Iterator

from rules.context import Context
from rules.finding import Evidence, Finding, Subject
from rules.registry import Threshold, rule
from rules.util import num, pct

#: What the others' waits at a misplaced collective also show up as.
PLACEMENT_EFFECTS = ("LOAD001", "LOAD002", "COMM001", "COMM002", "COMM003")


def _ordinal(i: int) -> str:
    """0 → '1st', 1 → '2nd', …"""
    n = i + 1
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


@rule("SYNC002", "A collective is called at a different point of the step on one rank", "warning",
      thresholds=(Threshold("placement_cost_min", 0.05, "fraction",
                            "report when the wait the misplaced collective causes per step is at least this share "
                            "of the median step (the section finds a placement from 5 % of the step up: the "
                            "rank's arrival offset both ways and its compute before entering)",
                            source="the straggler rules' materiality (straggler_cost_min): a misplaced metrics "
                                   "all-reduce after a forward costs 18-29 % of the step on the real runs "
                                   "(fixtures/real-cpu-perf-2 ddp4-misplaced-*), clean runs show no placement"),),
      explains=PLACEMENT_EFFECTS,
      confirm="In the named rank's trace the collective starts after work (its forward, say) that the other "
              "members do after it; on the others that collective's span is long (they wait), and at the "
              "following collectives the named rank's spans are long (it waits for them).",
      fix="Issue the collective at the same point of the step on every rank (e.g. the metrics / loss all_reduce "
          "after the forward everywhere, or once after the optimizer step); look for a rank-dependent branch "
          "(`if rank == 0:` logging, an eval or checkpoint hook) that moves it. Rank-0-only work belongs after "
          "the step's last collective, or in a side thread.")
def misplaced_collective(ctx: Context) -> Iterator[Finding]:
    """One rank enters a collective at another point of its step than its peers: the waits run both ways.

    The order of the group's collectives matches, so nothing hangs and no desync shows, but a rank that
    all-reduces its metrics after its forward while the others do it before theirs makes them wait a forward
    there, then waits for them at the next collectives (they now do the forward it already did): about a
    forward lost per step, seen as exposed communication by every rank. Found by the cross-rank placement
    analysis (docs/cross-rank.md, "Collective placement"): the rank is consistently late at some of the
    group's collectives and early at others (a straggler is never early), and at the named one the compute it
    did before entering differs from its peers' by ≥ 5 % of the step. The call site is (group, op, element
    count, position among the group's collectives of the step): the traces name no source line. Cost: the
    median over steps of the others' mean wait there (its own, when it comes early), over the median step.
    Not when the compute between is extra work (more compute operators per step, cross_rank.stragglers
    more_work) of the rank that enters later: that rank is a straggler (LOAD001), and in a two-rank group (a TP
    pair) its partner only looks misplaced.
    """
    work = {int(x["rank"]): bool(x.get("more_work")) for x in (ctx.cross.get("stragglers") or {}).get("per_rank") or []
            if x.get("rank") is not None}
    members = {str(g.get("name")): [int(x) for x in g.get("ranks") or []] for g in ctx.groups()}
    for m in (ctx.cross.get("placement") or {}).get("misplaced") or []:
        cost = num(m.get("cost_share")) or 0.0
        if cost < ctx.t("placement_cost_min"):
            continue
        r, pg, op = int(m["rank"]), str(m["process_group"]), str(m["op"])
        idx, n = int(m["index_in_step"]), int(m.get("n_in_step") or 0)
        late = bool(m.get("late"))
        mine, peers = num(m.get("compute_before_us")) or 0.0, num(m.get("peers_compute_before_us")) or 0.0
        others = [q for q in members.get(pg, []) if q != r]
        if (mine > peers and work.get(r)) or (mine < peers and not work.get(r) and any(work.get(q) for q in others)):
            continue  # the compute between is extra work of the later rank's own (more operators): a straggler
            # (LOAD001), not a collective called elsewhere in the step (in a TP pair either rank looks misplaced)
        steps, cons = int(m.get("steps") or 0), int(m.get("steps_consistent") or 0)
        site = f"the {_ordinal(idx)} of {n} collectives of group {pg} in each step ({op}, {m.get('nelems')} elements)"
        ev = [Evidence(f"rank {r} enters {site} after {mine / 1000:.2f} ms of compute in its step, its peers after "
                       f"{peers / 1000:.2f} ms (median; {cons} of {steps} steps differ by ≥ 5 % of the step)"),
              Evidence((f"the others wait for it there {(num(m.get('wait_per_step_us')) or 0) / 1000:.2f} ms per "
                        f"step ({pct(cost)} of the step)" if late else
                        f"it waits for the others there {(num(m.get('wait_per_step_us')) or 0) / 1000:.2f} ms per "
                        f"step ({pct(cost)} of the step)")
                       + f" (threshold placement_cost_min {pct(ctx.t('placement_cost_min'))})"
                       + f"; at the group's other collectives it is {'early' if late else 'late'} and "
                       + (f"waits up to {(num(m.get('wait_back_per_step_us')) or 0) / 1000:.2f} ms per step for them"
                          if late else "they wait for it")
                       + ": the waits run both ways, so no rank is a straggler")]
        title = (f"Rank {r} calls the {_ordinal(idx)} collective of group {pg}'s step ({op}) "
                 f"{'after' if mine > peers else 'before'} work its peers do "
                 f"{'after' if mine > peers else 'before'} it: its placement makes the ranks wait for each other")
        yield Finding(title=title, confidence=min(0.9, 0.5 + 0.4 * cons / max(1, steps)), cost=min(1.0, cost),
                      evidence=ev, subject=Subject(ranks=[r], process_group=pg, collective={"op": op, "seq": None}),
                      involved=set(int(x) for x in (ctx.report.get("job") or {}).get("ranks") or []) | {r})
