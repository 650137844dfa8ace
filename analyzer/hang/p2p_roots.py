"""Send/recv roots the dumps cannot show (gloo records no P2P): a rank whose unrecorded-op count broke its own
pattern, or the ranks that died waiting in a send and a recv — narrowed to the stuck pair where the ranks' chain
order shows it.
"""
from __future__ import annotations

from analyzer.hang import p2p
from analyzer.hang.diagnosis import HangDiagnosis
from analyzer.hang.evidence import failure_evidence, group_desc
from analyzer.hang.inputs import HangInputs
from analyzer.hang.stderr_facts import StderrFacts
from rules.phrases import ranks_text
from parsers.table import isin


def p2p_roots(inp: HangInputs, facts: StderrFacts, blocked: dict[int, str], claimed: set[int]
               ) -> list[HangDiagnosis]:
    """P2P roots the dumps cannot show: a gloo rank whose unrecorded-op count broke its pattern (it left a send or
    recv out), else the ranks that died waiting in a send and a recv (a stuck pair: wrong tag or peer)."""
    anoms = [a for a in p2p.gloo_anomalies(inp) if a.rank not in claimed]
    senders, receivers = p2p.senders_receivers(blocked)
    out = []
    if anoms:
        culprits = sorted({a.rank for a in anoms})
        a = anoms[0]
        fewer = a.issued < a.usual
        partner = [r for r in (senders if fewer else receivers) if r not in culprits]
        src, dst = (partner[0], a.rank) if fewer and len(partner) == 1 else \
            ((a.rank, partner[0]) if len(partner) == 1 else (None, None))
        cause = "; ".join(f"rank {x.rank} issued {x.issued} send/recv op(s) before collective #{x.seq} of group "
                          f"{x.group} where its own repeating pattern issues {x.usual}" for x in anoms)
        cause += (": it left a send/recv out (or added one), so its peer's transfer never matched"
                  + (f" — the stuck pair is {p2p.pair_text(src, dst)}" if src is not None else ""))
        ev = [(str(r.file), None, str(r.text)) for r in inp.calls[
            isin(inp.calls["rank"], culprits) & (inp.calls["group"] == a.group) & (inp.calls["seq"] == a.seq)
            & (inp.calls["kind"] == "coll")].itertuples(index=False)]
        out.append(HangDiagnosis(kind="p2p_mismatch", process_group=a.group, pg_desc=group_desc(inp, a.group), seq=None,
                                 op="send/recv", culprit_ranks=culprits, waiting_ranks=[], confidence=0.75,
                                 source="flight_recorder", p2p={"src": src, "dst": dst, "tag": None}, cause=cause,
                                 evidence=ev + failure_evidence(facts, [r for r in (src, dst) if r is not None])))
    elif senders and receivers and not (set(senders) | set(receivers)) & claimed:
        out.append(stuck_transfer(inp, facts, senders, receivers))
    return out


def _chain_order(inp: HangInputs, ranks: set[int]) -> tuple[list[int], str]:
    """The order P2P neighbours follow: the smallest known group holding all the blocked ranks (a pipeline group
    lists its stages in order), else the ranks themselves in rank order (pipelines place stages by rank)."""
    homes = sorted((g for g in inp.groups.values() if g.members and ranks <= set(g.members)),
                   key=lambda g: (len(g.members), g.key))
    if homes and homes[0].key != "0" and homes[0].desc != "default_pg":
        g = homes[0]
        return sorted(g.members), f"group {g.key} ({g.desc or 'no description'})"
    return sorted(ranks), "rank order"


def stuck_transfer(inp: HangInputs, facts: StderrFacts, senders: list[int], receivers: list[int]) -> HangDiagnosis:
    """Ranks died waiting in sends and in recvs, and no dump records either. A blocked send is matched by a
    blocked recv only between neighbours of the chain: a sender whose neighbour waits in a recv is the stuck
    transfer (a wrong tag or peer on one side); ranks waiting on a neighbour that is itself blocked are its
    consequences. Which side is wrong stderr cannot say: a tie below 0.5 on the pair."""
    order, how = _chain_order(inp, set(senders) | set(receivers))
    pos = {r: i for i, r in enumerate(order)}
    pairs = [(s, r) for s in senders for r in receivers if s in pos and r in pos and abs(pos[s] - pos[r]) == 1]
    if len(pairs) == 1:
        src, dst = pairs[0]
        pair = sorted({src, dst})
        others = sorted((set(senders) | set(receivers)) - set(pair))
        cause = (f"rank {src} died waiting in a send and its neighbour rank {dst} (by {how}) in a recv, and no "
                 f"dump records a send/recv: the transfer {p2p.pair_text(src, dst)} never matched — a wrong tag or peer "
                 f"on one side (rank {src}'s dst/tag or rank {dst}'s src/tag); stderr does not say which")
        if others:
            cause += (f". {ranks_text(others).capitalize()} waited on a neighbour that was itself blocked in that "
                      "transfer: consequences")
        return HangDiagnosis(kind="p2p_mismatch", process_group="", pg_desc="", seq=None, op="send/recv",
                             culprit_ranks=pair, waiting_ranks=others, tie=True, confidence=0.45, source="stderr",
                             p2p={"src": src, "dst": dst, "tag": None}, cause=cause,
                             evidence=failure_evidence(facts, pair + others)[:8])
    ranks = sorted(set(senders) | set(receivers))
    src = senders[0] if len(senders) == 1 else None
    dst = receivers[0] if len(receivers) == 1 else None
    why = (f"{len(pairs)} neighbouring send/recv pairs by {how}" if pairs else f"no sender has a receiving "
           f"neighbour by {how}")
    return HangDiagnosis(
        kind="p2p_mismatch", process_group="", pg_desc="", seq=None, op="send/recv", culprit_ranks=ranks,
        waiting_ranks=[], tie=True, confidence=0.45, source="stderr", p2p={"src": src, "dst": dst, "tag": None},
        cause=(f"{ranks_text(senders)} died waiting in sends and {ranks_text(receivers)} in receives, with no other "
               f"failure and no dump of a send/recv ({why}): a send/recv never matched, and stderr does not narrow it "
               "to one pair"),
        evidence=failure_evidence(facts, ranks)[:8])
