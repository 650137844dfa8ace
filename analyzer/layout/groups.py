"""Every process group the job's files declare, with where each was read: the traces' ``distributedInfo``
(union over ranks: each rank lists only its own groups), the collectives' ``Process Group Name/Ranks`` args, and
Flight Recorder dumps' ``pg_config``."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np


_INTS = re.compile(r"-?\d+")


def parse_ranks(text: Any) -> list[int]:
    """'[0, 1, 2]' (Kineto / FR style) or a list → sorted ints; [] when unreadable."""
    if isinstance(text, (list, tuple)):
        return sorted(int(x) for x in text if isinstance(x, (int, np.integer)))
    if isinstance(text, str) and text.strip():
        return sorted(int(x) for x in _INTS.findall(text))
    return []


@dataclass
class Group:
    """One process group as declared (pg_config, kernel args, FR dump)."""

    name: str
    desc: str = ""
    ranks: list[int] = field(default_factory=list)
    #: where it was read: "distributedInfo", "collective_args", "flight_recorder"
    sources: set = field(default_factory=set)


def _add(groups: dict[str, Group], name: str, desc: str, ranks: list[int], source: str) -> None:
    if not name:  # a dump's unnamed placeholder entry names no group
        return
    g = groups.setdefault(name, Group(name))
    if desc and (not g.desc or g.desc == "undefined"):
        g.desc = desc
    if len(ranks) > len(g.ranks):
        g.ranks = ranks
    g.sources.add(source)


def declared_groups(job: Any) -> dict[str, Group]:
    """Union of every rank's ``distributedInfo.pg_config``, the kernels' ``Process Group Name/Ranks`` args and the
    FR dumps' ``pg_config``."""
    groups: dict[str, Group] = {}
    seen: dict[int, Any] = {}  # a pg_config shared by many ranks (SharedValues) is read once
    parsed: dict[str, list[int]] = {}
    for t in job.traces.values():
        config = t.meta.get("pg_config") or []
        if seen.get(id(config)) is config:
            config = []
        else:
            seen[id(config)] = config
        for pg in config:
            if isinstance(pg, dict) and pg.get("pg_name") is not None:
                _add(groups, str(pg["pg_name"]), str(pg.get("pg_desc") or ""), parse_ranks(pg.get("ranks")),
                     "distributedInfo")
        names = collective_column(t, "pg_name")
        if len(names):
            rows = np.flatnonzero(names != "")
            _, first = np.unique(names[rows].astype(str), return_index=True)
            rows = rows[np.sort(first)]
            descs, rks = collective_column(t, "pg_desc"), collective_column(t, "pg_ranks")
            for name, desc, rk in zip(names[rows], descs[rows], rks[rows]):
                ranks = parsed.get(rk) if isinstance(rk, str) else None
                if ranks is None:
                    ranks = parse_ranks(rk)
                    if isinstance(rk, str):
                        parsed[rk] = ranks
                _add(groups, str(name), str(desc or ""), ranks, "collective_args")
    for d in getattr(job, "fr_dumps", None) or []:
        for name, v in (getattr(d, "pg_config", None) or {}).items():
            if isinstance(v, dict):
                _add(groups, str(name), str(v.get("desc") or ""), list(v.get("ranks") or []), "flight_recorder")
    return groups


def collective_column(t: Any, name: str) -> Any:
    """One column of a rank's collectives (analyzer.rank.summary, imported here: a run without traces — a hang
    post-mortem — never loads the table library)."""
    from analyzer.rank.summary import collective_column as column
    return column(t, name)
