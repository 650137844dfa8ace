"""gloo's size check (`op.preamble.length <= op.nbytes. A vs B`): the aborted rank received A bytes where its own
buffer holds B. It is a receiver; which side passed the odd size is decided from sizes only.
"""
from __future__ import annotations

from collections import Counter

from analyzer.cross_rank.collectives import DTYPE_BYTES
from analyzer.hang.diagnosis import HangDiagnosis
from analyzer.hang.evidence import calls_at, failure_evidence, op_at
from analyzer.hang.inputs import HangInputs
from analyzer.hang.matching import Divergence
from analyzer.hang.stderr_facts import StderrFacts
from analyzer.phrases import ranks_text


def size_abort(facts: StderrFacts, r: int) -> bool:
    f = facts.ranks.get(r)
    return bool(f and f.origin and f.origin.get("kind") in ("gloo_size_mismatch", "gloo_invalid_tensor_size"))



def abort_side(inp: HangInputs, d: Divergence, facts: StderrFacts) -> tuple[list[int], str] | None:
    """Break a tie with ranks that gloo aborted in this group for receiving more data than their own buffer holds:
    such a rank holds the smaller buffer, so it sides with the ranks whose call moves fewer bytes."""
    members = inp.groups[d.group].members if d.group in inp.groups else set()
    aborted = [r for r in sorted(members or ()) if r not in d.present and size_abort(facts, r)
               and facts.ranks[r].origin.get("bytes_a", -1) > facts.ranks[r].origin.get("bytes_b", -1) >= 0]
    if not aborted:
        return None
    nbytes = {r: call_bytes(inp, d.group, d.seq, r) for r in d.present}
    if any(v < 0 for v in nbytes.values()) or len(set(nbytes.values())) < 2:
        return None
    small = min(nbytes.values())
    votes = Counter("small" if v == small else "large" for v in nbytes.values())
    votes["small"] += len(aborted)
    if votes["small"] <= votes["large"]:
        return None
    odd = sorted(r for r, v in nbytes.items() if v != small)
    why = (f"{ranks_text(aborted)} aborted in gloo's size check (received more bytes than their own buffer holds), so "
           f"their call moves the smaller amount, like {ranks_text(sorted(r for r in nbytes if nbytes[r] == small))}")
    return odd, why



def size_abort_majorities(inp: HangInputs, facts: StderrFacts, taken: set[int]) -> list[HangDiagnosis]:
    """Ranks gloo aborted for receiving more than their own buffer holds are receivers, not necessarily the odd
    ones: when two or more of them agree on their own buffer's size and are most of the smallest known group that
    holds them all, the group's other members are the ones whose call moves more (the majority rule of a
    mismatch, with the aborted ranks voting for the buffer they hold)."""
    aborted = [r for r in facts.origin_ranks() if r not in taken and size_abort(facts, r)]
    by_size: dict[int, list[int]] = {}
    for r in aborted:
        o = facts.ranks[r].origin
        if o.get("bytes_a", -1) > o.get("bytes_b", -1) >= 0:
            by_size.setdefault(int(o["bytes_b"]), []).append(r)
    out = []
    for held, ranks in sorted(by_size.items()):
        if len(ranks) < 2:
            continue
        homes = sorted((g for g in inp.groups.values() if g.members and set(ranks) <= set(g.members)),
                       key=lambda g: (len(g.members), g.key))
        if not homes:
            continue
        g = homes[0]
        others = sorted(set(g.members) - set(ranks))
        if not others or len(others) >= len(ranks) or any(size_abort(facts, r) for r in others):
            continue
        got = ", ".join(f"rank {r}: {facts.ranks[r].origin['bytes_a']}" for r in ranks)
        cause = (f"gloo's size check aborted {ranks_text(ranks)} (SIGABRT): each received more than its own "
                 f"{held}-byte buffer holds ({got} bytes). They agree with each other on the size and are "
                 f"{len(ranks)} of the {len(g.members)} members of group {g.key} ({g.desc or 'no description'}), "
                 f"the smallest group holding them all; its other member{'s' if len(others) > 1 else ''} "
                 f"{ranks_text(others)} sent the larger data: {'their' if len(others) > 1 else 'its'} call differs "
                 "(a skipped or extra collective there, or a different size)")
        seqs = inp.calls.loc[(inp.calls["group"] == g.key) & inp.calls["rank"].isin(others), "seq"]
        seq = int(seqs.max()) if len(seqs) else None
        d = HangDiagnosis(kind="mismatched_size", process_group=g.key, pg_desc=g.desc, seq=seq,
                          op=op_at(inp, g.key, seq) if seq is not None else "", culprit_ranks=others,
                          waiting_ranks=sorted(ranks), cause=cause, confidence=0.7, source="stderr")
        d.evidence.extend(failure_evidence(facts, sorted(ranks)))
        if seq is not None:
            d.evidence.extend(calls_at(inp, g.key, seq, others)[:4])
        out.append(d)
    return out



#: Bytes per element of the dtype names Kineto writes and the ones hang/inputs.py normalises FR's to.
ITEM_BYTES = {**DTYPE_BYTES, "fp8_e4m3": 1, "fp8_e5m2": 1, "complex64": 8}



def dtype_from_abort(inp: HangInputs, facts: StderrFacts, d: HangDiagnosis) -> None:
    """A size abort whose bytes received / held is the ratio of the others' element size to another dtype's
    (float32 against bfloat16: 2) may be a dtype mismatch with equal shapes; gloo's numbers cannot tell it from a
    shape twice as large, so the cause says both (the kind stays a size mismatch)."""
    others = {str(d.dtypes.get(r, "")) for r in d.sizes if r not in d.culprit_ranks}
    if len(others) != 1:
        return
    dt = others.pop()
    s = ITEM_BYTES.get(dt.split(",")[0], -1)
    ratios = set()
    for r in d.culprit_ranks:
        o = facts.ranks[r].origin if r in facts.ranks else None
        got, held = (o.get("bytes_a", -1), o.get("bytes_b", -1)) if o else (-1, -1)
        if s < 0 or held <= 0 or got <= held or got % held:
            return
        ratios.add(got // held)
    if len(ratios) != 1 or (k := ratios.pop()) not in (2, 4, 8) or s % k:
        return
    small = {1: "an 8-bit dtype", 2: "a 16-bit dtype (bfloat16 / float16)", 4: "a 32-bit dtype"}[s // k]
    d.cause += (f"; received / held = {k}, which is also what the same shape in {small} against the others' {dt} "
                "gives: check the dtypes as well as the shapes")



def call_bytes(inp: HangInputs, g: str, seq: int, r: int) -> int:
    """Bytes one rank's call moves at (g, seq): Σ input elements × element size (-1 when unknown)."""
    c = inp.calls[(inp.calls["group"] == g) & (inp.calls["seq"] == seq) & (inp.calls["rank"] == r)
                  & (inp.calls["kind"] == "coll")]
    if c.empty or (c["numel_in"] < 0).any():
        return -1
    total = 0
    for n, dt in zip(c["numel_in"], c["dtype_in"]):
        item = max((ITEM_BYTES.get(x, -1) for x in str(dt).split(",")), default=-1)
        if item < 0:
            return -1
        total += int(n) * item
    return total
