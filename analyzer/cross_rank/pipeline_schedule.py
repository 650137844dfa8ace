"""Infer a pipeline's micro-batch count m, stages per rank v and schedule from what identifies them, with a
confidence, from up to four independent sources (docs/cross-rank.md, "Pipeline"):

1. `pp_annotations` — torch.distributed.pipelining's schedule runtime names every action `PP:<stage><F|I|B|W><mb>`
   (global stage index): v, p·v, m and each rank's exact order.
2. `gpipe_annotations` — ScheduleGPipe's `Forward i` / `Backward i` (one stage per rank): m and the order.
3. `send_labels` — each send labelled by the compute block just before it (forward / backward, from the
   annotations or the autograd engine): stage 0 sends v·m activations and (v−1)·m gradients per step, the last
   stage (v−1)·m and v·m, the others v·m and v·m — so m = |forward − backward sends| on an end stage and
   v = max / m, without knowing any peer.
4. `transfers` — send counts along the stage order from the matched peers: stage 0 → 1 carries v·m per step and
   the ring's wrap (last → first) (v−1)·m; with two ranks the wrap is the same link, so only (2v−1)·m is seen.

The most confident source decides (at equal confidence the earlier one); every other source is checked against it
(agreement raises the confidence, disagreement lowers it and is stated). The schedule comes from the per-rank order
of forwards and backwards: all forwards before any backward on every rank is GPipe (looped BFS with v > 1); a
backward before the last forward on some rank is 1F1B (interleaved 1F1B with v > 1); zero-bubble schedules split the
backward into I and W (`zbv` when the two stages of a rank sit in a V: rank 0 holds the first and the last).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Optional

from analyzer.cross_rank.pipeline_blocks import RankBlocks

#: Confidence of each source when it alone decides (see docs/cross-rank.md for why these orders).
BASE_CONFIDENCE = {"pp_annotations": 0.95, "gpipe_annotations": 0.9, "send_labels": 0.85, "transfers": 0.8}
#: transfers between exactly two ranks cannot show v (the wrap link is the forward link)
TWO_RANK_TRANSFER_CONFIDENCE = 0.6


@dataclass
class Estimate:
    """What one source says about a pipeline."""

    source: str
    m: Optional[int]
    v: Optional[int]
    confidence: float
    evidence: str
    orders: dict[int, str] = field(default_factory=dict)   # rank -> F/B/I/W letters of one complete step
    n_stages: Optional[int] = None
    placement: Optional[str] = None                         # "loop" (r, r+p, …) | "v" (r, 2p−1−r) | "other"
    check: Optional[object] = None                          # callable (m, v, placement) -> bool: consistent?


def _mode(values: list) -> Optional[object]:
    """Most frequent value; ties go to the largest (a step cut short has fewer actions, never more)."""
    if not values:
        return None
    c = Counter(values)
    top = max(c.values())
    return max(k for k, n in c.items() if n == top)


def _first_step_orders(ranks: list[int], rbs: dict[int, RankBlocks], how) -> dict[int, str]:
    out = {}
    for r in ranks:
        steps = rbs[r].steps
        if steps:
            out[r] = how(steps[min(steps)])
    return out


def from_pp_annotations(ranks: list[int], rbs: dict[int, RankBlocks]) -> Optional[Estimate]:
    """`PP:<stage><kind><mb>` on every rank: stages per rank, stage count, micro-batches, order."""
    if not ranks or not all(rbs[r].pp_stages for r in ranks):
        return None
    v = _mode([len(rbs[r].pp_stages) for r in ranks])
    n_stages = max(max(rbs[r].pp_stages) for r in ranks) + 1
    per = []
    for r in ranks:
        for sb in rbs[r].steps.values():
            by_stage: dict[int, set] = {}
            for kind, stage, mb in sb.actions:
                if kind == "F" and stage >= 0:
                    by_stage.setdefault(stage, set()).add(mb)
            per += [len(x) for x in by_stage.values()]
    m = _mode(per)
    orders = _first_step_orders(ranks, rbs, lambda sb: "".join(k for k, s, _ in sb.actions if s >= 0))
    held = "; ".join(f"rank {r}: {rbs[r].pp_stages}" for r in ranks)
    p = len(ranks)
    first = {r: min(rbs[r].pp_stages) for r in ranks}
    if all(rbs[r].pp_stages == [first[r] + j * p for j in range(len(rbs[r].pp_stages))] for r in ranks):
        placement = "loop"
    elif all(rbs[r].pp_stages == sorted({first[r], 2 * p - 1 - first[r]}) for r in ranks):
        placement = "v"
    else:
        placement = "other"
    conf = BASE_CONFIDENCE["pp_annotations"]
    note = ""
    if n_stages != len(ranks) * (v or 0):
        conf *= 0.7
        note = f"; {n_stages} stages named but {len(ranks)} ranks × v={v} = {len(ranks) * (v or 0)}"
    return Estimate("pp_annotations", m, v, conf,
                    f"schedule annotations PP:<stage><action><mb>: stages held {held} ({placement} placement); "
                    f"{m} micro-batches per stage and step{note}", orders, n_stages, placement)


def from_gpipe_annotations(ranks: list[int], rbs: dict[int, RankBlocks]) -> Optional[Estimate]:
    """`Forward i` / `Backward i` on every rank (ScheduleGPipe: one stage per rank)."""
    if not ranks or not all(rbs[r].gpipe_annotations for r in ranks):
        return None
    per = [len({mb for kind, _, mb in sb.actions if kind == "F"}) for r in ranks for sb in rbs[r].steps.values()]
    m = _mode([x for x in per if x])
    orders = _first_step_orders(ranks, rbs, lambda sb: "".join(k for k, _, _ in sb.actions))
    return Estimate("gpipe_annotations", m, 1, BASE_CONFIDENCE["gpipe_annotations"],
                    f"annotations 'Forward i' / 'Backward i' (ScheduleGPipe): {m} micro-batches per step", orders)


def send_label_counts(rb: RankBlocks) -> Optional[tuple[int, int]]:
    """(forward, backward) sends per step of one rank: the mode over its complete steps."""
    pairs = [(sb.send_labels.count("F"), sb.send_labels.count("B")) for sb in rb.steps.values()
             if sb.n_send and "?" not in sb.send_labels]
    return _mode(pairs)


def from_send_labels(ranks: list[int], rbs: dict[int, RankBlocks]) -> Optional[Estimate]:
    """m and v from forward / backward sends per step (no peer needed), and the end stages they identify."""
    if not ranks or any(rbs[r].labelled_by == "none" for r in ranks):
        return None
    counts = {r: send_label_counts(rbs[r]) for r in ranks}
    if any(c is None for c in counts.values()):
        return None
    ends = {r: c for r, c in counts.items() if c[0] != c[1]}
    diffs = {abs(c[0] - c[1]) for c in ends.values()}
    txt = ", ".join(f"rank {r} {c[0]}F/{c[1]}B" for r, c in counts.items())
    orders = _first_step_orders(ranks, rbs, lambda sb: sb.order)
    if not ends and len(set(counts.values())) == 1:
        # every rank as many forward as backward sends: the V placement (rank 0 holds the first and last stage)
        x = next(iter(counts.values()))[0]

        def check_v(m: int, v: int, placement: Optional[str]) -> bool:
            return placement == "v" and x == m
        return Estimate("send_labels", None, None, 0.3, f"forward/backward sends per step ({txt}) alike on every "
                        "rank: no end stage (a V placement?)", orders, check=check_v)
    if len(diffs) != 1:
        return Estimate("send_labels", None, None, 0.3, f"forward/backward sends per step ({txt}) fit no pipeline",
                        orders)
    m = diffs.pop()
    vm = max(max(c) for c in ends.values())
    v = vm // m if vm % m == 0 else None
    ok = v is not None and all(c in ((v * m, (v - 1) * m), ((v - 1) * m, v * m)) for c in ends.values()) and \
        all(c == (v * m, v * m) for r, c in counts.items() if r not in ends)
    conf = BASE_CONFIDENCE["send_labels"] if ok else 0.4
    return Estimate("send_labels", m, v, conf,
                    f"sends per step after a forward / backward block: {txt}" +
                    ("" if ok else " (not the pattern of one pipeline: inconsistent)"), orders)


def first_stage_by_labels(ranks: list[int], rbs: dict[int, RankBlocks]) -> list[int]:
    """Ranks that send more forwards than backwards per step: the first stage of a pipeline."""
    out = []
    for r in ranks:
        c = send_label_counts(rbs[r]) if rbs[r].labelled_by != "none" else None
        if c is not None and c[0] > c[1]:
            out.append(r)
    return out


def from_transfers(order: list[int], ring: bool, fwd_counts: dict[tuple[int, int], int],
                   dir_orders: dict[int, str]) -> Optional[Estimate]:
    """m and v from sends per step along the stage order (`fwd_counts[(src, dst)]`: the mode over steps)."""
    p = len(order)
    if p < 2:
        return None
    c01 = fwd_counts.get((order[0], order[1]), 0)
    if not c01:
        return None
    if p == 2:
        def check(m: int, v: int, placement: Optional[str] = None) -> bool:
            return c01 == (2 * m if placement == "v" else (2 * v - 1) * m)
        return Estimate("transfers", c01, 1, TWO_RANK_TRANSFER_CONFIDENCE,
                        f"{c01} sends per step from stage 0 (rank {order[0]}) to rank {order[1]}: m = {c01} if one "
                        "stage per rank (between two ranks the transfers cannot show more)", dir_orders,
                        check=check)
    cw = fwd_counts.get((order[-1], order[0]), 0) if ring else 0
    m = c01 - cw if cw and c01 > cw else c01
    v = c01 // m if m and c01 % m == 0 else None

    def check(mm: int, vv: int, placement: Optional[str] = None) -> bool:
        if placement == "v":  # rank 0 sends stage 0's activations and the last stage's gradients to rank 1
            return c01 == 2 * mm and not cw
        return c01 == vv * mm and cw == (vv - 1) * mm
    ev = f"{c01} sends per step from stage 0 (rank {order[0]}) to stage 1 (rank {order[1]})"
    if ring:
        ev += f", {cw} from the last stage (rank {order[-1]}) back to stage 0: a ring of {p} ranks"
    return Estimate("transfers", m, v, BASE_CONFIDENCE["transfers"], ev, dir_orders, check=check)


def _agrees(est: Estimate, m: int, v: int, placement: Optional[str]) -> bool:
    if est.check is not None:
        return bool(est.check(m, v, placement))
    return (est.m, est.v) == (m, v)


def _interleaves(letters: str) -> bool:
    """A backward (B or I) before the last forward."""
    s = letters.replace("I", "B").replace("W", "")
    last_f = s.rfind("F")
    return last_f > 0 and "B" in s[:last_f]


def classify(orders: dict[int, str], stage_of: dict[int, int], p: int, m: Optional[int], v: Optional[int],
             placement: Optional[str] = None) -> tuple[str, float, str]:
    """(schedule, confidence, evidence) from each rank's order of forwards and backwards in one step."""
    if not orders:
        return "unknown", 0.0, "no per-rank order of forward and backward work"
    if any(("I" in o or "W" in o) for o in orders.values()):
        if placement == "v":
            return "zbv", 0.9, ("backward split into input (I) and weight (W) gradients, two stages per rank in a "
                                "V (rank 0 holds the first and the last): ZBV zero-bubble")
        return "zero_bubble", 0.9, "backward split into input (I) and weight (W) gradients: a zero-bubble schedule"
    inter = sorted(r for r, o in orders.items() if _interleaves(o))
    many = v is not None and v > 1
    if m is not None and m < 2:
        return ("looped_bfs" if many else "gpipe"), 0.3, "one micro-batch: every schedule runs the same order"
    shown = "; ".join(f"rank {r}: {orders[r][:40]}" for r in sorted(orders, key=lambda x: stage_of.get(x, x))[:4])
    if not inter:
        return ("looped_bfs" if many else "gpipe"), 0.9, f"every rank runs all forwards before any backward ({shown})"
    conf = 0.9
    if not many and m is not None:
        # 1F1B: stage s warms up with min(m, p − s) forwards, so it interleaves exactly when m > p − s
        want = sorted(r for r, s in stage_of.items() if r in orders and m > p - s)
        if want != inter:
            conf = 0.7
    name = "interleaved_1f1b" if many else "1f1b"
    return name, conf, (f"backwards start before the last forward on rank(s) {inter} (warm-up forwards, then one "
                        f"forward / one backward): {shown}")


@dataclass
class Inference:
    """The reported `pipeline.inference` (docs/json-schema.md)."""

    p: int
    m: Optional[int]
    v: Optional[int]
    schedule: str
    confidence: float
    confidence_by_key: dict
    evidence: list
    sources: list
    n_stages: Optional[int]

    def to_dict(self) -> dict:
        return {"p": self.p, "m": self.m, "v": self.v, "schedule": self.schedule,
                "confidence": round(self.confidence, 3),
                "confidence_by_key": {k: round(c, 3) for k, c in self.confidence_by_key.items()},
                "evidence": self.evidence, "sources": self.sources, "n_stages": self.n_stages}


def combine(p: int, p_conf: float, p_evidence: str, estimates: list[Optional[Estimate]],
            stage_of: dict[int, int]) -> Inference:
    """The first present source decides m and v; the others confirm or contradict it (module docstring)."""
    ests = [e for e in estimates if e is not None]
    evidence = [p_evidence]
    usable = [e for e in ests if e.m and e.v]
    lead = max(usable, key=lambda e: e.confidence) if usable else None  # max keeps the first of equals
    m = v = None
    mv_conf = 0.0
    if lead is not None:
        m, v, mv_conf = lead.m, lead.v, lead.confidence
        evidence.append(f"{lead.source}: {lead.evidence}")
        for e in ests:
            if e is lead:
                continue
            if e.m is None and e.check is None:
                evidence.append(f"{e.source} (not used): {e.evidence}")
                continue
            if _agrees(e, m, v, lead.placement):
                mv_conf += 0.5 * (1 - mv_conf) * e.confidence
                evidence.append(f"{e.source} agrees: {e.evidence}")
            else:
                mv_conf *= 0.7
                evidence.append(f"{e.source} disagrees (m={e.m}, v={e.v}): {e.evidence}")
    else:
        evidence += [f"{e.source}: {e.evidence}" for e in ests]
    n_stages = next((e.n_stages for e in ests if e.n_stages), None)
    if n_stages is not None and v:
        if n_stages == p * v:
            p_conf += 0.5 * (1 - p_conf)
        else:
            p_conf *= 0.7
    orders_from = next((e for e in ests if e.orders), None)
    sched, s_conf, s_ev = classify(orders_from.orders if orders_from else {}, stage_of, p, m, v,
                                   lead.placement if lead is not None else None)
    if orders_from is not None:
        evidence.append(f"schedule from {orders_from.source}: {s_ev}")
    by_key = {"p": p_conf, "m": mv_conf, "v": mv_conf, "schedule": s_conf}
    return Inference(p, m, v, sched, min(by_key.values()), by_key, evidence, [e.source for e in ests], n_stages)
