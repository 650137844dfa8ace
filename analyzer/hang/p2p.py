"""Send/recv hangs where the dumps record no send/recv: gloo's op counts and the ranks' own timeouts.

gloo's Flight Recorder writes no entry for a send or recv, but every op still takes an `op_id`, so the number of
ops between two recorded collectives of a group is the number of P2P ops issued in between. A training loop
repeats itself, so each rank issues the same number in the same place of every step: a rank that issued fewer
(or more) in the interval where the job hung than its own history predicts left a send/recv out (or added one).
stderr tells which ranks died waiting in a send and which in a recv (the API their traceback ends in).
"""
from __future__ import annotations

from dataclasses import dataclass

from parsers.table import Table

from analyzer.hang.inputs import HangInputs
from analyzer.hang.stderr_facts import StderrFacts


@dataclass
class P2pAnomaly:
    """A rank whose count of unrecorded ops before a collective breaks its own repeating pattern."""

    rank: int
    group: str
    seq: int          # the collective after the interval
    issued: int
    usual: int


def period_next(hist: list, max_period: int = 64) -> object | None:
    """The item a periodic history predicts next: the smallest period P (at most `max_period`) with
    hist[i] == hist[i - P] for every i — the whole history, not only its tail — seen repeating over at least half
    a cycle (and two items) beyond its first cycle."""
    n = len(hist)
    for p in range(1, min(max_period, n - 2) + 1):
        if n - p < max(2, (p + 1) // 2):
            break
        if all(hist[i] == hist[i - p] for i in range(p, n)):
            return hist[n - p]
    return None


def gloo_anomalies(inp: HangInputs) -> list[P2pAnomaly]:
    """Per gloo group and rank: the last recorded interval whose P2P count differs from the rank's pattern."""
    c = inp.calls[(inp.calls["kind"] == "coll") & (inp.calls["ops_before"] >= 0)]
    out = []
    for (g, r), df in c.groups(["group", "rank"]):
        if g not in inp.groups or inp.groups[g].backend != "gloo":
            continue
        gaps = [int(x) for x in df.sort_values("order")["ops_before"]]
        seqs = [int(x) for x in df.sort_values("order")["seq"]]
        if len(gaps) < 4 or not any(gaps):
            continue
        want = period_next(gaps[:-1])
        if want is not None and gaps[-1] != want:
            out.append(P2pAnomaly(int(r), str(g), seqs[-1], gaps[-1], want))
    return out


def blocked_directions(facts: StderrFacts) -> dict[int, str]:
    """Ranks whose fatal wait was a send/recv (per stderr) → 'send' / 'recv' ('' when the direction is unknown)."""
    return {r: f.p2p_direction for r, f in facts.ranks.items() if f.blocked_in_p2p}


def pair_text(src: int | None, dst: int | None) -> str:
    return f"rank {src} → rank {dst}" if src is not None and dst is not None else "unknown pair"


def senders_receivers(blocked: dict[int, str]) -> tuple[list[int], list[int]]:
    return sorted(r for r, d in blocked.items() if d == "send"), sorted(r for r, d in blocked.items() if d == "recv")


def anomaly_rows(anoms: list[P2pAnomaly]) -> Table:
    return Table.from_records([a.__dict__ for a in anoms], ["rank", "group", "seq", "issued", "usual"])
