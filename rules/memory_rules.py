"""Memory rules: a leak, fragmentation, near capacity, imbalance beyond the layout, and a post-mortem OOM, read from
the report's ``memory`` section (analyzer/report/memory.py)."""
from __future__ import annotations

from typing import Iterator, Optional

from rules.context import Context
from rules.finding import Evidence, Finding, Subject
from rules.registry import Threshold, rule


def mib(b: Optional[float]) -> str:
    """Bytes as MiB (GiB from 10 GiB up), one decimal."""
    if b is None:
        return "?"
    b = float(b)
    return f"{b / 2**30:.1f} GiB" if abs(b) >= 10 * 2**30 else f"{b / 2**20:.1f} MiB"


#: a rank's excess over its peers must also be this many times the step-to-step noise of activation memory
NOISE_K = 2.0


def _rows(ctx: Context) -> list[dict]:
    return list(ctx.section("memory").get("per_rank") or [])


_LEAK_FIX = ("Find what keeps a reference across steps: a list of tensors that grows (losses appended without "
             ".item() or .detach()), a cache keyed by step, a hook that stores outputs. torch.cuda.memory._record_"
             "memory_history() and a snapshot after a few steps name the allocations that stay.")


@rule("MEM001", "Memory grows step after step (leak)", "warning",
      thresholds=(Threshold("leak_min_bytes_per_step", 65536, "bytes",
                            "the least growth per step reported (smaller is allocator noise)",
                            "the clean real runs grow by 0 B a step at the step's end; 64 KiB is far below a "
                            "leaked activation or gradient and above a stray scalar"),
                  Threshold("leak_growth_share", 0.75, "fraction",
                            "… and at least this share of step-to-step changes must be growth",
                            "a leak grows at every step; variable-length batches move the step's end both ways")),
      confirm="Plot the report's memory.per_rank[].steps[].allocated_end for the rank: a straight rising line; "
              "the same point of a clean run's steps is flat.",
      fix=_LEAK_FIX)
def leak(ctx: Context) -> Iterator[Finding]:
    """Allocated memory at the same point of every step (its end) grows step after step on a rank.

    The rate is a least-squares line through the traced steps (the first left out: its warm-up allocations).
    At that rate the steps left before the device is full follow from its capacity; a leak turns into an OOM
    after that many steps, and a restart "fixes" it until then.
    """
    seen = set()
    for r in _rows(ctx):
        rate, share = r.get("rate_bytes_per_step"), r.get("growth_share")
        if rate is None or share is None or rate < ctx.t("leak_min_bytes_per_step") \
                or share < ctx.t("leak_growth_share"):
            continue
        seen.add(r["rank"])
        steps = r.get("steps") or []
        left = r.get("steps_until_capacity")
        ev = [Evidence(f"rank {r['rank']} {r['device']}: allocated at the end of steps "
                       f"{steps[0]['step']}..{steps[-1]['step']}: "
                       + ", ".join(mib(s["allocated_end"]) for s in steps[:12])
                       + f"; +{mib(rate)} per step (least squares over {r.get('steps_fitted')} steps, "
                       f"{share:.0%} of the changes grew)")]
        if left is not None:
            ev.append(Evidence(f"cost: at this rate the {mib(r.get('capacity_bytes'))} device is full in about "
                               f"{left} steps (peak now {mib(r['peak_allocated'])}): an out-of-memory error then"))
        else:
            ev.append(Evidence(f"cost: {mib(rate)} more every step, without bound (the trace gives no capacity "
                               "for this device)"))
        yield Finding(title=f"Rank {r['rank']} leaks {mib(rate)} per step on {r['device']}", confidence=0.8,
                      subject=Subject(ranks=[int(r["rank"])]), evidence=ev,
                      extra={"kind": "leak", "device": r["device"], "rate_bytes_per_step": rate,
                             "steps_until_capacity": left})
    for g in ctx.section("memory").get("logs") or []:  # the training framework's own memory lines
        rate, share = g.get("rate_bytes_per_step"), g.get("growth_share")
        if g["rank"] in seen or rate is None or share is None or rate < ctx.t("leak_min_bytes_per_step") \
                or share < ctx.t("leak_growth_share"):
            continue
        seen.add(g["rank"])
        pts = g.get("points") or []
        key = g.get("series") or "allocated"
        cap, last = g.get("capacity_bytes"), (pts[-1].get(key) if pts else None) or 0
        left = int(max(0, cap - last) // rate) if cap else None
        ev = [Evidence(f"rank {g['rank']} {g['source']} memory lines, {key.replace('_', ' ')} at steps "
                       + ", ".join(f"{p['step']}: {mib(p.get(key))}" for p in pts[:8])
                       + f"; +{mib(rate)} per step (least squares over {g['lines'] - 1} lines, {share:.0%} grew)"),
              Evidence(f"cost: the device is full in about {left} steps at this rate" if left is not None else
                       f"cost: {mib(rate)} more every step, without bound")]
        yield Finding(title=f"Rank {g['rank']} leaks {mib(rate)} per step ({g['source']} log)", confidence=0.6,
                      subject=Subject(ranks=[int(g["rank"])]), evidence=ev,
                      extra={"kind": "leak", "device": None, "rate_bytes_per_step": rate,
                             "steps_until_capacity": left})


@rule("MEM002", "Reserved memory far above allocated (fragmentation)", "info",
      thresholds=(Threshold("fragmentation_share", 0.3, "fraction",
                            "report when reserved minus allocated at the peak is at least this share of reserved",
                            "the caching allocator's normal slack is a few to ~20 %; the public V100 trace "
                            "reserves 1.9x its peak"),
                  Threshold("fragmentation_min_bytes", 1 << 30, "bytes", "… and at least this many bytes",
                            "1 GiB is a few % of a training GPU (16-192 GB): less is not worth a change of allocator "
                            "settings")),
      confirm="torch.cuda.memory_summary() on the rank: 'Non-releasable memory' and the segment count; "
              "the report's memory.per_rank[] reserved_at_peak against peak_allocated.",
      fix="Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; pad variable-length batches to a few fixed "
          "shapes (bucketing) so freed blocks are reused; avoid torch.cuda.empty_cache() in the loop.")
def fragmentation(ctx: Context) -> Iterator[Finding]:
    """At the step's peak the caching allocator holds far more than the tensors need.

    Reserved but unallocated memory is lost to the model: blocks of the wrong sizes (variable shapes) that the
    allocator cannot hand out. A warning when the device is also near its capacity (the slack is what runs out).
    """
    for t in ctx.section("memory").get("summaries") or []:  # torch.cuda.memory_summary() in stderr
        res, alloc = t.get("reserved_peak") or 0, t.get("allocated_peak") or 0
        slack = res - alloc
        if res <= 0 or slack < ctx.t("fragmentation_min_bytes") or slack / res < ctx.t("fragmentation_share"):
            continue
        rank = t.get("rank")
        extra = []
        if t.get("non_releasable_peak") is not None:
            extra.append(f"non-releasable {mib(t['non_releasable_peak'])} at its peak")
        if t.get("alloc_retries"):
            extra.append(f"{t['alloc_retries']} cudaMalloc retries (the allocator freed its cache to fit a block)")
        yield Finding(title=f"{'Rank ' + str(rank) if rank is not None else 'A rank'} reserves {mib(slack)} more "
                            f"than it allocates on {t['device']}", confidence=0.6,
                      subject=Subject(ranks=[int(rank)] if rank is not None else []),
                      evidence=[Evidence(f"{t['path']}:{t['line']}: memory_summary: peak allocated {mib(alloc)}, "
                                         f"peak reserved {mib(res)}" + ("; " + "; ".join(extra) if extra else ""),
                                         t["path"], t["line"])],
                      extra={"kind": "fragmentation", "device": t["device"]})
    for snap in ctx.section("memory").get("snapshots") or []:  # the allocator's own segments
        for d in snap.get("devices") or []:
            res, alloc = d.get("reserved") or 0, d.get("allocated") or 0
            slack = res - alloc
            if res <= 0 or slack < ctx.t("fragmentation_min_bytes") or slack / res < ctx.t("fragmentation_share"):
                continue
            rank = snap.get("rank")
            yield Finding(title=f"{'Rank ' + str(rank) if rank is not None else 'A snapshot'} reserves {mib(slack)} "
                                f"more than it allocates on cuda:{d['device']}", confidence=0.7,
                          subject=Subject(ranks=[int(rank)] if rank is not None else []),
                          evidence=[Evidence(f"{snap['path']}: {d['segments']} segments reserve {mib(res)}, "
                                             f"{mib(alloc)} allocated; {mib(d.get('inactive'))} free in them, the "
                                             f"largest free block {mib(d.get('largest_inactive_block'))}",
                                             snap["path"], None)],
                          extra={"kind": "fragmentation", "device": f"cuda:{d['device']}"})
    for r in _rows(ctx):
        res, alloc = r.get("reserved_at_peak") or 0, r.get("peak_allocated") or 0
        slack = res - alloc
        if res <= 0 or slack < ctx.t("fragmentation_min_bytes") or slack / res < ctx.t("fragmentation_share"):
            continue
        cap = r.get("capacity_bytes")
        near = bool(cap) and (r.get("peak_reserved") or 0) >= (1 - ctx.t("capacity_margin")) * cap
        ev = [Evidence(f"rank {r['rank']} {r['device']} step {r['peak_step']}: peak allocated {mib(alloc)}, "
                       f"reserved then {mib(res)}: {mib(slack)} ({slack / res:.0%}) reserved but unused")]
        if cap:
            ev.append(Evidence(f"cost: {mib(slack)} of the {mib(cap)} device ({slack / cap:.0%}) holds no tensor"))
        yield Finding(title=f"Rank {r['rank']} reserves {mib(slack)} more than it allocates on {r['device']}",
                      severity="warning" if near else "info", confidence=0.6,
                      subject=Subject(ranks=[int(r["rank"])], step=r.get("peak_step")), evidence=ev,
                      extra={"kind": "fragmentation", "device": r["device"]})


@rule("MEM003", "Peak memory near the device's capacity", "warning",
      thresholds=(Threshold("capacity_margin", 0.05, "fraction",
                            "report when the peak reserved memory is within this share of the device's capacity",
                            "the caching allocator needs headroom for one more block; a few % is what a changed "
                            "batch or sequence length eats"),),
      confirm="torch.cuda.max_memory_reserved() against torch.cuda.get_device_properties(0).total_memory.",
      fix="Free memory: activation recomputation (checkpointing), a higher ZeRO / FSDP stage (shard optimizer "
          "state, gradients, parameters), a smaller micro-batch (more of them), or a higher tensor-parallel degree.")
def near_capacity(ctx: Context) -> Iterator[Finding]:
    """The peak reserved memory is within a few percent of the device's memory: the next larger batch, a longer
    sequence or fragmentation ends in an OOM."""
    for g in ctx.section("memory").get("logs") or []:  # torchtitan's percentage of the device
        cap, pk = g.get("capacity_bytes"), g.get("peak_max_reserved") or 0
        if cap and pk >= (1 - ctx.t("capacity_margin")) * cap and not any(r["rank"] == g["rank"] for r in _rows(ctx)):
            yield Finding(title=f"Rank {g['rank']} peaks at {pk / cap:.0%} of its device's memory", confidence=0.8,
                          subject=Subject(ranks=[int(g["rank"])]),
                          evidence=[Evidence(f"rank {g['rank']} {g['source']} log: max reserved {mib(pk)} of "
                                             f"{mib(cap)} (steps {g['first_step']}..{g['last_step']})"),
                                    Evidence(f"cost: {mib(cap - pk)} of headroom left")],
                          extra={"kind": "near_capacity", "device": None})
    for r in _rows(ctx):
        cap = r.get("capacity_bytes")
        pk = r.get("peak_reserved") or r.get("peak_allocated") or 0
        if not cap or pk < (1 - ctx.t("capacity_margin")) * cap:
            continue
        yield Finding(title=f"Rank {r['rank']} peaks at {pk / cap:.0%} of {r['device']}'s memory", confidence=0.9,
                      subject=Subject(ranks=[int(r["rank"])], step=r.get("peak_step")),
                      evidence=[Evidence(f"rank {r['rank']} {r['device']}: peak reserved {mib(pk)} of "
                                         f"{mib(cap)} (step {r['peak_step']}, allocation of {mib(r['peak_bytes'])}"
                                         + (f" in {r['peak_op']}" if r.get("peak_op") else "") + ")"),
                                Evidence(f"cost: {mib(cap - pk)} of headroom left")],
                      extra={"kind": "near_capacity", "device": r["device"]})


@rule("MEM004", "One rank or stage holds more memory than the layout explains", "warning",
      thresholds=(Threshold("memory_imbalance_ratio", 1.25, "×",
                            "report a rank whose activation memory is this many times its peers' median, or a "
                            "pipeline stage this many times the most its schedule explains",
                            "the fixed-shape clean real runs' ranks differ by under 10 % (variable-length batches "
                            "by more: the noise test covers them); a real 1F1B stage 0 holds 1.3x its last stage, "
                            "which the schedule explains; the real stages that keep what the layout does not "
                            "explain read 1.9x and 2.7x"),
                  Threshold("memory_imbalance_min_bytes", 1 << 20, "bytes", "… and by at least this many bytes "
                            "(and, between data-parallel ranks, by twice the step-to-step noise: variable-length "
                            "batches move one rank's activation memory by 2x between steps)",
                            "below 1 MiB a difference is one small tensor; the real CPU runs' unexplained stages "
                            "hold 2-3 MiB more")),
      confirm="Compare the ranks' memory.per_rank[].activation_max; for a pipeline memory.pipeline_stages[] "
              "(inflight_microbatches, expected_at_most).",
      fix="Balance the partition: move layers off the heavy stage (the loss / output head often sits on the last "
          "one), or recompute its activations; for a data-parallel rank, look for what only it keeps (metrics, "
          "logging, an uneven batch).")
def imbalance(ctx: Context) -> Iterator[Finding]:
    """A rank's activation memory (the step's peak minus what it started with) is far above its peers'.

    A pipeline's stages differ by design: 1F1B keeps up to p − s micro-batches in flight on stage s, so stage 0
    holding the most is expected and no later stage of a balanced partition should hold more than stage 0;
    GPipe keeps all m on every stage. A stage beyond that, or a data-parallel rank above its peers, holds memory
    the layout does not explain, and is the first to run out.
    """
    sec = ctx.section("memory")
    ratio, floor = ctx.t("memory_imbalance_ratio"), ctx.t("memory_imbalance_min_bytes")
    in_pipe = set()
    for s in sec.get("pipeline_stages") or []:
        in_pipe.add(s["rank"])
        bound, q = s.get("expected_at_most"), s.get("ratio_to_expected")
        if bound is None or q is None or q < ratio or s["activation_max"] - bound < floor:
            continue
        why = ("stage 0 keeps the most micro-batches under 1F1B" if s["schedule"] != "gpipe"
               else "GPipe keeps all m micro-batches on every stage")
        yield Finding(title=f"Pipeline stage {s['stage']} (rank {s['rank']}) holds {q:.1f}x the activation memory "
                            "its schedule explains", confidence=0.7,
                      subject=Subject(ranks=[int(s["rank"])]),
                      evidence=[Evidence(f"stage {s['stage']} of p={s['p']} m={s['m']} {s['schedule']}: keeps "
                                         f"{s['inflight_microbatches']} micro-batch(es) in flight, activation peak "
                                         f"{mib(s['activation_max'])}; expected at most {mib(bound)} ({why})"),
                                Evidence(f"cost: {mib(s['activation_max'] - bound)} the layout does not explain, "
                                         "on the stage that runs out first")],
                      extra={"kind": "imbalance", "stage": s["stage"]})
    for r in sec.get("rank_balance") or []:
        q = r.get("ratio_to_median")
        if r["rank"] in in_pipe or q is None or q < ratio:
            continue
        med = r["activation_median"] / q
        noise = r.get("step_noise") or 0
        if r["activation_median"] - med < max(floor, NOISE_K * noise):
            continue
        yield Finding(title=f"Rank {r['rank']} holds {q:.1f}x its peers' activation memory", confidence=0.6,
                      subject=Subject(ranks=[int(r["rank"])]),
                      evidence=[Evidence(f"rank {r['rank']} {r['device']}: median activation peak "
                                         f"{mib(r['activation_median'])} against the ranks' median {mib(med)}")],
                      extra={"kind": "imbalance"})


@rule("MEM005", "Out of memory", "error",
      confirm="The OOM line (evidence) names the allocation; the rank's memory.per_rank[].steps show the trend.",
      fix="If the rank leaked (MEM001), fix the leak; otherwise free memory (MEM003's fix) or set "
          "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True when much was reserved but unallocated.")
def oom(ctx: Context) -> Iterator[Finding]:
    """A rank ran out of memory: the allocation that failed, where, and the trend the traces show before it."""
    by_rank: dict = {}
    for o in ctx.section("memory").get("ooms") or []:
        by_rank.setdefault(o.get("rank"), []).append(o)
    trend = {r["rank"]: r for r in _rows(ctx)}
    for rank, os_ in by_rank.items():
        o = os_[0]
        ev = []
        for x in os_[:3]:
            where = (f"{x.get('path')}:{x.get('line')}" if x.get("source") == "stderr" else
                     f"{x.get('path')}: allocator trace 'oom'" if x.get("source") == "snapshot" else
                     "trace [OutOfMemory]" + (f" in step {x['step']}" if x.get("step") is not None else ""))
            ask = x.get("bytes_requested") if x.get("source") == "stderr" else x.get("bytes")
            if x.get("source") == "snapshot":
                where += (f" ({mib(x.get('device_free'))} free on the device" +
                          (f"; from {x['frame']}" if x.get("frame") else "") + ")")
            ev.append(Evidence(f"{where}: rank {rank if rank is not None else '?'} failed to allocate {mib(ask)}"
                               + (f" on {x['device']}" if x.get("device") else "")
                               + (f" ({x['reason']})" if x.get("reason") else ""),
                               x.get("path") if x.get("source") == "stderr" else None,
                               x.get("line") if x.get("source") == "stderr" else None))
        t = trend.get(rank)
        if t is not None:
            rate = t.get("rate_bytes_per_step")
            ev.append(Evidence(f"trend before it: peak {mib(t['peak_allocated'])} at step {t['peak_step']}, "
                               f"allocated at the step's end growing {mib(rate)} per step over the traced steps "
                               f"(last traced step {t['steps'][-1]['step']})" if rate and rate > 0 else
                               f"trend before it: flat over the traced steps (peak {mib(t['peak_allocated'])})"))
        yield Finding(title=f"Rank {rank if rank is not None else '?'} ran out of memory", confidence=1.0,
                      subject=Subject(ranks=[int(rank)] if rank is not None else []), evidence=ev,
                      extra={"kind": "oom"})
