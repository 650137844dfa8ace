"""Desync rules: the ranks of a process group disagree, in their traces, on the collectives they ran."""
from __future__ import annotations

from typing import Iterator

from rules.context import Context
from rules.finding import Evidence, Finding, Subject
from rules.registry import rule

_WHAT = {"missing": "lacks", "extra": "runs an extra", "order": "runs another collective at"}


@rule("SYNC001", "Ranks disagree on a group's collectives (desync)", "error",
      confirm="Count the group's collectives per ProfilerStep in each rank's trace (c10d::* ops, or the NCCL / "
              "gloo kernels and spans): the named rank has one fewer (or more) at the named step and position. "
              "With Flight Recorder dumps, compare the rank's collective_seq_id with the others'.",
      fix="Find the branch that lets this rank skip (or add) a collective: a rank-dependent condition "
          "(`if rank == 0:`), unused parameters in DDP (find_unused_parameters), data-dependent control flow, "
          "an exception swallowed on one rank. Every member must issue the same collectives in the same order; "
          "set TORCH_DISTRIBUTED_DEBUG=DETAIL to check it at run time. If the job did not hang, the profiler may "
          "have dropped events: re-profile before trusting any cross-rank number of this group.")
def desync(ctx: Context) -> Iterator[Finding]:
    """One rank's trace lacks a collective the other members of its group ran (or has an extra one, or
    another op at a position): NCCL and gloo match collectives by order alone, so from there on the group's
    calls pair wrongly — the job hangs at that point, mixes up buffers, or (DDP) averages the wrong gradients.

    Found by comparing each member's sequence with the group's consensus and aligning it in time
    (docs/cross-rank.md, desync): the position is the 0-based index in the group's order, with the step and
    the index within the step. Only steps the rank recorded (and a cut did not damage) are judged. The
    cross-rank matching already skips the missing position, so waits and stragglers stay right. Cost 1.0:
    a job with this desync cannot be trusted to progress.
    """
    for d in ctx.cross.get("desync") or []:
        r, pg, op, pos = int(d["rank"]), str(d["process_group"]), str(d["op"]), int(d["position"])
        where = f"step {d['step']}, collective {d['index_in_step']} of the step" if d.get("step") is not None \
            else "outside the profiled steps"
        kind = d.get("kind")
        if kind == "missing":
            at = f"position {pos}" + (f" (or {d['or_position']})" if d.get("or_position") is not None else "")
            title = f"Rank {r} lacks the {op} at {at} of process group {pg} that the other members ran"
        elif kind == "extra":
            title = f"Rank {r} runs an extra {op} in process group {pg} (after position {pos - 1})"
        else:
            title = (f"Rank {r} runs {op} at position {pos} of process group {pg} where the other members run "
                     f"{d.get('expected_op')}")
        ev = [Evidence(f"{where}; reference rank {d.get('reference_rank')} (follows the group's consensus)"),
              Evidence(f"placed by aligning the rank's collectives with the reference's start and end times: "
                       f"confidence {d.get('confidence')}" + (f"; position {d['or_position']} fits almost as well "
                                                              "(the two ran at about the same time)"
                                                              if d.get("or_position") is not None else ""))]
        yield Finding(title=title, confidence=float(d.get("confidence") or 0.5), cost=1.0, evidence=ev,
                      subject=Subject(ranks=[r], process_group=pg, step=d.get("step"),
                                      collective={"op": op, "seq": pos}),
                      involved={r})
