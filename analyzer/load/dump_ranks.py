"""One Flight Recorder dump per rank: two dumps claiming one rank (a pickle and a JSON dump of the same process, or
a dump whose 'rank' key lies) must not both be read, or the hang analysis sees one rank twice and another never."""
from __future__ import annotations

from typing import Any

from parsers.flight_recorder import rank_from_name


def one_dump_per_rank(dumps: list[Any]) -> tuple[list[Any], list[tuple[Any, str]], list[tuple[Any, str]]]:
    """(dumps kept, [(dump renumbered, why)], [(dump skipped, why)]) — the dumps in their given order.

    Of the dumps claiming a rank, the one whose file name gives that rank is kept (else the first). Another one
    whose file name gives a rank no dump claims is read as that rank (PyTorch names each dump after its rank, so
    the name is the better witness when the content collides); the rest are skipped, naming the file kept.
    """
    by_rank: dict[int, list[Any]] = {}
    for d in dumps:
        if d.rank is not None:
            by_rank.setdefault(int(d.rank), []).append(d)
    claimed = set(by_rank)
    keeper = {r: next((d for d in ds if rank_from_name(d.path) == r), ds[0]) for r, ds in by_rank.items()}
    kept, renumbered, skipped = [], [], []
    for d in dumps:
        r = d.rank
        if r is None or keeper[int(r)] is d:
            kept.append(d)
            continue
        first = keeper[int(r)]
        own = rank_from_name(d.path)
        if own is not None and own not in claimed:
            claimed.add(own)
            d.rank, d.rank_source = own, "filename"
            renumbered.append((d, f"duplicate rank {r}: {first.path} claims it too; read as rank {own}, the rank "
                                  "its file name gives"))
            kept.append(d)
            continue
        skipped.append((d, f"duplicate rank {r}: already read from {first.path}"))
    return kept, renumbered, skipped
