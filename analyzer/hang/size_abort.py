"""gloo's size check (`op.preamble.length <= op.nbytes. A vs B`): the aborted rank received A bytes where its own
buffer holds B. It is a receiver; which side passed the odd size is decided from sizes only.
"""
from __future__ import annotations

from collections import Counter

from analyzer.hang.diagnosis import HangDiagnosis
from analyzer.hang.evidence import calls_at, failure_evidence, op_at
from analyzer.hang.inputs import HangInputs
from analyzer.hang.matching import Divergence
from analyzer.hang.stderr_facts import StderrFacts
from rules.phrases import ranks_text
from parsers.dtype_sizes import DTYPE_BYTES
from parsers.table import isin


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
        seqs = inp.calls["seq"][(inp.calls["group"] == g.key) & isin(inp.calls["rank"], others)]
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
    aborted = [r for r in d.culprit_ranks if size_abort(facts, r)]
    others = {str(d.dtypes.get(r, "")) for r in d.sizes if r not in aborted}
    if not aborted or len(others) != 1:
        return
    dt = others.pop()
    s = ITEM_BYTES.get(dt.split(",")[0], -1)
    ratios = set()
    for r in aborted:
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
        if int(n) == 0:  # a barrier, an empty tensor: no data whatever the dtype
            continue
        item = max((ITEM_BYTES.get(x, -1) for x in str(dt).split(",")), default=-1)
        if item < 0:
            return -1
        total += int(n) * item
    return total


#: collectives whose members pass different sizes by design: agreement between their calls says nothing of a size
SPLIT_OPS = {"alltoall", "scatter", "gather"}
UNKNOWN_CONF = 0.4


def _signature(inp: HangInputs, g: str, seq: int, r: int) -> tuple | None:
    """What one rank passed at (g, seq): op, input/output shapes and dtypes of each part (None: no record)."""
    return _signatures(inp, g, seq).get(r)


def _signatures(inp: HangInputs, g: str, seq: int) -> dict[int, tuple]:
    """{rank: what it passed at (g, seq)} for every rank whose call is recorded: one pass over the calls, so asking
    for each member of a 100,000-rank group costs the records, not members × records."""
    c = inp.calls[(inp.calls["group"] == g) & (inp.calls["seq"] == seq) & (inp.calls["kind"] == "coll")]
    out: dict[int, list] = {}
    for x in c.sort_values("order").itertuples(index=False):
        out.setdefault(int(x.rank), []).append((str(x.op), str(x.sizes_in), str(x.dtype_in), str(x.sizes_out)))
    return {r: tuple(v) for r, v in out.items()}


def _sig_text(sig: tuple) -> str:
    return "; ".join(f"{op} in {si} {dt} out {so}" for op, si, dt, so in sig)


def _siblings(inp: HangInputs, g: str) -> list:
    """Other groups of the same role (same description, same size, no shared member); 'undefined' (new_group
    without group_desc) names no role: groups of that description are matched by nothing."""
    me = inp.groups[g]
    if not me.desc or me.desc == "undefined" or not me.members:
        return []
    return [h for h in inp.groups.values() if h.key != g and h.desc == me.desc and h.members
            and len(h.members) == len(me.members) and not set(h.members) & set(me.members)]


def _history(inp: HangInputs, g: str, seq: int, p: int) -> list[tuple[int, tuple]]:
    """Rank p's earlier calls in group g from the call site (frame) of its call at seq: (seq, what it passed),
    oldest first; empty when the call site is unknown. Those calls completed with every member (the group went on
    past them), so the other members passed matching sizes then."""
    c = inp.calls[(inp.calls["group"] == g) & (inp.calls["rank"] == p) & (inp.calls["kind"] == "coll")]
    now = c[c["seq"] == seq]
    if now.empty or not str(now["frame"][0]):
        return []
    col = "stack" if str(now["stack"][0]) else "frame"  # the whole user stack tells call sites apart best
    site = str(now[col][0])
    seqs = sorted(int(s) for s in set(c["seq"][(c[col] == site) & (c["seq"] < seq)].tolist()))
    return [(s, _signature(inp, g, s, p)) for s in seqs]


def _abort_seq(inp: HangInputs, g: str, seq: int, r: int, got: int) -> int:
    """The call rank r aborted in: where the others wait (seq), unless every recorded call of its peers there
    moves fewer bytes than r received (a barrier after it) — then the peers' call before, which they completed
    (gloo's size check fails on the receiving side only: the sender goes on)."""
    peers = set(inp.groups[g].members or ()) - {r}
    for _ in range(2):
        sizes = [call_bytes(inp, g, seq, p) for p in sorted(peers & set(_signatures(inp, g, seq)))]
        prev = peers & set(_signatures(inp, g, seq - 1))
        if not sizes or got < 0 or any(b < 0 or b >= got for b in sizes) or not prev or seq <= 1:
            break
        seq -= 1
    return seq


def judge_receiver(inp: HangInputs, facts: StderrFacts, r: int, g: str, seq: int | None
                   ) -> tuple[str, list[int], str, float]:
    """Whose size is odd when gloo aborted rank r for receiving A bytes into its B-byte buffer at (g, seq).

    Returns (verdict, ranks, why, confidence): 'receiver' (r's own size is the odd one: the members whose calls
    are recorded agree with each other, or its one peer passed what the sibling groups of its role pass, or
    what it passed at every earlier call from the same call site), 'sender' (its one peer passed what the
    siblings do not), or 'unknown' (nothing names the sender; `ranks` are the suspects).
    """
    o = facts.ranks[r].origin
    got, held = o.get("bytes_a", -1), o.get("bytes_b", -1)
    members = set(inp.groups[g].members or ()) if g in inp.groups else set()
    suspects = sorted(members) if members else sorted(set(inp.world)) if 0 < len(inp.world) <= 8 else []
    if not g or seq is None or not members:
        return "unknown", suspects, "no dump records the call it aborted in", UNKNOWN_CONF
    seq = _abort_seq(inp, g, seq, r, got)
    sigs = _signatures(inp, g, seq)
    present = {p: sigs[p] for p in sorted((members - {r}) & set(sigs))}
    if not present:
        return "unknown", suspects, f"no other member's dump records #{seq} of group {g}", UNKNOWN_CONF
    if len(set(present.values())) > 1:
        return "unknown", suspects, f"the other members' calls at #{seq} differ among themselves", UNKNOWN_CONF
    sig = next(iter(present.values()))
    if any(part[0] in SPLIT_OPS for part in sig):
        return ("unknown", suspects, f"#{seq} is {sig[0][0]}, whose members pass different sizes by design",
                UNKNOWN_CONF)
    held_txt = f"its own {held}-byte buffer" if held >= 0 else "its own buffer"
    if len(present) >= 2:
        conf = 0.9 if len(present) == len(members) - 1 else 0.75
        return "receiver", [r], (f"{ranks_text(sorted(present))} agree on their call at #{seq} ({_sig_text(sig)}), "
                                 f"so what rank {r} received ({got} bytes) is what the group passes and "
                                 f"{held_txt} is the odd size"), conf
    p = next(iter(present))
    sib = []
    for h in _siblings(inp, g):
        hs = _signatures(inp, h.key, seq)
        if set(h.members) <= set(hs) and len({hs[q] for q in h.members}) == 1:
            sib.append((h.key, hs[next(iter(h.members))]))
    if sib and len({s for _, s in sib}) == 1:
        keys = ", ".join(k for k, _ in sib)
        if sib[0][1] == sig:
            return "receiver", [r], (f"rank {p}, its one peer, passed at #{seq} what the sibling group(s) {keys} of "
                                     f"the same role pass ({_sig_text(sig)}), so {held_txt} is the odd size"), 0.75
        return "sender", [p], (f"rank {p} passed at #{seq} {_sig_text(sig)}, where the sibling group(s) {keys} of the "
                               f"same role pass {_sig_text(sib[0][1])}: rank {p}'s call is the odd one and rank {r} "
                               f"only received its larger message ({got} bytes into {held_txt})"), 0.75
    hist = _history(inp, g, seq, p)
    before = {h for _, h in hist}
    if len(hist) >= 2 and before == {sig}:
        return "receiver", [r], (f"rank {p}, its one peer, passed {_sig_text(sig)} at #{seq} as at its {len(hist)} "
                                 f"earlier calls from the same call site, which completed with rank {r}: rank {r}'s "
                                 f"size changed, so {held_txt} is the odd size"), 0.7
    was, now = (call_bytes(inp, g, hist[-1][0], p), call_bytes(inp, g, seq, p)) if hist else (-1, -1)
    if len(hist) >= 2 and len(before) == 1 and held > 0 and was > 0 and now * held == was * got:
        return "sender", [p], (f"rank {p}, its one peer, passed {_sig_text(sig)} at #{seq} where its {len(hist)} "
                               f"earlier calls from the same call site, which completed with rank {r}, passed "
                               f"{_sig_text(hist[-1][1])}: {now} bytes against {was}, the ratio of what rank {r} "
                               f"received ({got} bytes) to what its buffer holds ({held}) — rank {p}'s size changed, "
                               f"rank {r}'s did not"), 0.75
    return ("unknown", suspects, f"group {g} has {len(members)} members and only rank {p}'s call is recorded, with "
            "no sibling group or earlier call from the same site to show the usual size", UNKNOWN_CONF)


def decide_size_abort(inp: HangInputs, facts: StderrFacts, d: HangDiagnosis) -> None:
    """Turn a root placed at the ranks gloo's size check aborted into what the sizes show: those ranks as the
    culprits (their own size is odd), the sender whose call is odd, or a stated unknown below 0.5 that names the
    aborted ranks as receivers and the group's members as suspects."""
    aborted = [r for r in d.culprit_ranks if facts.ranks.get(r) and facts.ranks[r].origin
               and facts.ranks[r].origin.get("kind") == "gloo_size_mismatch"]
    if not aborted or len(aborted) != len(d.culprit_ranks):
        return
    if len(aborted) == 1 and d.process_group in inp.groups and d.seq is not None:
        seq = _abort_seq(inp, d.process_group, d.seq, aborted[0], facts.ranks[aborted[0]].origin.get("bytes_a", -1))
        if seq != d.seq:  # the size check failed in the call before the one the peers wait in
            d.seq, d.op = seq, op_at(inp, d.process_group, seq)
            c = inp.calls[(inp.calls["group"] == d.process_group) & (inp.calls["seq"] == seq)
                          & (inp.calls["kind"] == "coll")]
            d.ops = {int(x.rank): str(x.op) for x in c.itertuples(index=False)}
            d.sizes = {int(x.rank): int(x.numel_in) for x in c.itertuples(index=False)}
            d.dtypes = {int(x.rank): str(x.dtype_in) for x in c.itertuples(index=False)}
    got = [(r, *judge_receiver(inp, facts, r, d.process_group, d.seq)) for r in aborted]
    verdicts = {v for _, v, _, _, _ in got}
    whys = "; ".join(why for _, _, _, why, _ in got)
    if verdicts == {"receiver"}:
        d.confidence = min([d.confidence] + [c for *_, c in got])
        d.cause += f": {whys}"
        return
    if verdicts == {"sender"}:
        senders = sorted({p for _, _, ps, _, _ in got for p in ps} - set(aborted))
        if senders:
            d.culprit_ranks, d.waiting_ranks = senders, sorted(set(d.waiting_ranks) | set(aborted))
            d.confidence = min(c for *_, c in got)
            d.cause = f"{d.cause}: {whys}"
            return
    suspects = sorted({p for _, v, ps, _, _ in got for p in ps} | set(aborted))
    receivers = ranks_text(aborted)
    sizes = "; ".join(f"rank {r}: a peer sent {facts.ranks[r].origin.get('bytes_a', -1)} bytes where its own buffer "
                      f"holds {facts.ranks[r].origin.get('bytes_b', -1)}" for r in aborted)
    d.cause = (f"gloo's size check aborted {receivers} (SIGABRT) — {sizes}. {receivers.capitalize()} "
               f"{'is the receiver' if len(aborted) == 1 else 'are the receivers'} of the larger message; which side "
               f"passed the odd size the inputs do not show ({whys}): compare the shapes passed at this call on "
               f"{ranks_text(suspects) if suspects else 'every rank'}")
    d.culprit_ranks, d.tie, d.confidence = suspects, True, UNKNOWN_CONF
