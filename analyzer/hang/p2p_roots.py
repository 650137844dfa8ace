"""Send/recv roots the dumps cannot show (gloo records no P2P): a rank whose unrecorded-op count broke its own
pattern, or the ranks that died waiting in a send and a recv.
"""
from __future__ import annotations

from analyzer.hang import p2p
from analyzer.hang.diagnosis import HangDiagnosis
from analyzer.hang.evidence import failure_evidence, group_desc
from analyzer.hang.inputs import HangInputs
from analyzer.hang.stderr_facts import StderrFacts
from analyzer.phrases import ranks_text


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
            (inp.calls["rank"].isin(culprits)) & (inp.calls["group"] == a.group) & (inp.calls["seq"] == a.seq)
            & (inp.calls["kind"] == "coll")].itertuples(index=False)]
        out.append(HangDiagnosis(kind="p2p_mismatch", process_group=a.group, pg_desc=group_desc(inp, a.group), seq=None,
                                 op="send/recv", culprit_ranks=culprits, waiting_ranks=[], confidence=0.75,
                                 source="flight_recorder", p2p={"src": src, "dst": dst, "tag": None}, cause=cause,
                                 evidence=ev + failure_evidence(facts, [r for r in (src, dst) if r is not None])))
    elif senders and receivers and not (set(senders) | set(receivers)) & claimed:
        src = senders[0] if len(senders) == 1 else None
        dst = receivers[0] if len(receivers) == 1 else None
        pair = sorted(set(senders) | set(receivers))
        out.append(HangDiagnosis(
            kind="p2p_mismatch", process_group="", pg_desc="", seq=None, op="send/recv", culprit_ranks=pair,
            waiting_ranks=[], tie=True, confidence=0.45, source="stderr", p2p={"src": src, "dst": dst, "tag": None},
            cause=(f"{ranks_text(senders)} died waiting in a send and {ranks_text(receivers)} in a recv, with no other failure: "
                   f"the transfer {p2p.pair_text(src, dst)} never matched (a wrong tag or peer on one side; the "
                   "evidence does not say which)" if src is not None and dst is not None else
                   f"{ranks_text(senders)} died waiting in sends and {receivers} in receives, with no other failure"),
            evidence=failure_evidence(facts, pair)))
    return out
