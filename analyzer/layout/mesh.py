"""The mesh: dimensions (named, sized, ordered outermost first), each rank's coordinate, each group's dimension
and role with evidence and confidence, and the questions later stages ask (which dimension is this group, who are
my pipeline neighbours, my TP partners, my DP peers).

Sources, in order: the groups' descriptions (``pg_desc``: DeviceMesh ``mesh_<dim>``, Megatron names; union over
ranks' ``distributedInfo``, the kernels' args and Flight Recorder dumps), then structure where names are absent:
groups of one dimension partition the world into equal, disjoint sets with one offset pattern; the send/recv
peers say which dimension is the pipeline's; the traffic a dimension's groups carry says its role.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from analyzer.layout.groups import Group, declared_groups
from analyzer.layout.names import dimension_of_desc
from analyzer.layout.structure import choose_dims, partitions, peer_fit

#: confidence of a dimension by how it was learned
CONFIDENCE = {"pg_desc": 0.95, "flight_recorder": 0.9, "p2p": 0.85, "traffic": 0.7, "structure": 0.5}
#: reduction ops whose place in the step tells gradient sync (after backward) from per-layer TP
_REDUCTIONS = ("allreduce", "reducescatter", "allgather")
#: share of a step's compute after which a reduction is a gradient sync (data parallel)
LATE_SHARE = 0.8


@dataclass
class GroupInfo:
    """One process group: its members, the dimension it belongs to and its role, with evidence."""

    name: str
    desc: str
    ranks: list[int]
    dim: Optional[str]
    role: str
    source: str
    evidence: str
    confidence: float

    def to_dict(self) -> dict:
        return {"name": self.name, "desc": self.desc, "ranks": self.ranks, "dim": self.dim, "role": self.role,
                "source": self.source, "evidence": self.evidence, "confidence": round(self.confidence, 3)}


@dataclass
class Dimension:
    """One mesh dimension: its groups (each a sorted rank list) and role."""

    name: str
    role: str
    size: int
    groups: list[list[int]]
    group_names: list[str]
    source: str
    evidence: str
    confidence: float
    stride: int = 1

    def where(self, rank: int) -> Optional[tuple[int, int]]:
        """(index of the rank's group, its position in it), or None (an index built once)."""
        idx = self.__dict__.get("_where")
        if idx is None:
            idx = {r: (i, k) for i, g in enumerate(self.groups) for k, r in enumerate(g)}
            self.__dict__["_where"] = idx
        return idx.get(rank)

    def to_dict(self) -> dict:
        return {"name": self.name, "role": self.role, "size": self.size, "groups": self.groups,
                "group_names": self.group_names, "source": self.source, "evidence": self.evidence,
                "confidence": round(self.confidence, 3)}


@dataclass
class Mesh:
    """The job's shape (see the module docstring); ``dims`` outermost first; ``exact``: the dimensions' sizes
    multiply to the world size and every rank has one coordinate."""

    world_size: int
    dims: list[Dimension] = field(default_factory=list)
    groups: dict[str, GroupInfo] = field(default_factory=dict)
    coords: dict[int, dict[str, int]] = field(default_factory=dict)
    source: str = "none"
    exact: bool = False
    #: how send/recv peers were read: "global", "local:<dim>" (group ranks of that dimension) or "none"
    p2p_peers: str = "none"
    #: (rank, gloo thread) → the group it serves (threads.py), for rows that name no group
    thread_groups: dict = field(default_factory=dict, repr=False)

    # --- questions -------------------------------------------------------------------------------------------
    def dim(self, name: str) -> Optional[Dimension]:
        return next((d for d in self.dims if d.name == name), None)

    def by_role(self, role: str) -> Optional[Dimension]:
        return next((d for d in self.dims if d.role == role), None)

    def group_of(self, rank: int, dim: str) -> list[int]:
        """The ranks of ``rank``'s group in dimension ``dim`` ([] when unknown)."""
        d = self.dim(dim)
        w = d.where(rank) if d else None
        return list(d.groups[w[0]]) if w else []

    def group_name_of(self, rank: int, dim: str) -> Optional[str]:
        d = self.dim(dim)
        w = d.where(rank) if d else None
        return d.group_names[w[0]] if w else None

    def dimension_of(self, group: str, ranks: Optional[list[int]] = None) -> Optional[str]:
        """The dimension of a group known by name, else by its ranks; None for the world group or unknown."""
        g = self.groups.get(str(group))
        if g is not None and g.dim:
            return g.dim
        rs = sorted(ranks) if ranks else (g.ranks if g is not None else [])
        for d in self.dims:
            if rs and list(rs) in d.groups:
                return d.name
        return None

    def role_of(self, group: str, ranks: Optional[list[int]] = None) -> Optional[GroupInfo]:
        """The layout's word on a group's role (by name, else by ranks), or None when it has none."""
        g = self.groups.get(str(group))
        dim = self.dimension_of(group, ranks)
        if dim is not None:
            d = self.dim(dim)
            if d is not None and d.role != "unknown":
                return GroupInfo(str(group), g.desc if g else "", list(ranks or (g.ranks if g else [])), dim, d.role,
                                 d.source, d.evidence, d.confidence)
        if g is not None and g.role not in ("unknown",):
            return g
        return None

    def pp_neighbours(self, rank: int) -> tuple[Optional[int], Optional[int]]:
        """(previous, next) stage's rank in ``rank``'s pipeline (stage order = order in the pp group)."""
        d = self.by_role("pp")
        g = self.group_of(rank, d.name) if d else []
        if rank not in g:
            return None, None
        i = g.index(rank)
        return (g[i - 1] if i > 0 else None), (g[i + 1] if i + 1 < len(g) else None)

    def partners(self, rank: int, role: str) -> list[int]:
        """The other ranks of ``rank``'s group in the dimension with that role (tp partners, dp peers…)."""
        d = self.by_role(role)
        return [r for r in self.group_of(rank, d.name) if r != rank] if d else []

    def tp_partners(self, rank: int) -> list[int]:
        return self.partners(rank, "tp")

    def dp_peers(self, rank: int) -> list[int]:
        return self.partners(rank, "dp") or self.partners(rank, "fsdp")

    def shape_text(self) -> str:
        """'dp=2 × tp=2 (from pg_desc mesh_dp, mesh_tp)'; '' when no dimension is known."""
        if not self.dims:
            return ""
        parts = " × ".join(f"{d.name}={d.size}" for d in self.dims)
        how = {"pg_desc": "pg_desc", "flight_recorder": "Flight Recorder pg_config"}
        named = [d for d in self.dims if d.source in how]
        if named and len(named) == len(self.dims):
            descs = ", ".join(sorted({self.groups[n].desc for d in named for n in d.group_names[:1]
                                      if n in self.groups}))
            src = f"from {how[named[0].source]} {descs}"
        else:
            src = "from " + "; ".join(f"{d.name}: {d.source}" for d in self.dims)
        return f"{parts} ({src}{'' if self.exact else '; not exact'})"

    def to_dict(self) -> dict:
        return {"shape": {d.name: d.size for d in self.dims}, "exact": self.exact, "source": self.source,
                "text": self.shape_text(), "dims": [d.to_dict() for d in self.dims],
                "coords": {str(r): c for r, c in sorted(self.coords.items())},
                "groups": [g.to_dict() for g in sorted(self.groups.values(), key=lambda g: _order(g.name))],
                "p2p_peers": self.p2p_peers}

    # --- rows the cross-rank stage keys ------------------------------------------------------------------------
    def global_peers(self, rank: np.ndarray, op: np.ndarray, peer: np.ndarray) -> np.ndarray:
        """Send/recv peers as global ranks (they are group ranks where the layout found them so)."""
        if not self.p2p_peers.startswith("local:"):
            return peer
        mapping = {r: self.group_of(r, self.p2p_peers[6:]) for r in range(self.world_size)}
        fit = peer_fit(rank, op, peer, mapping, self.world_size)
        return peer if fit is None else fit

    def fill_group_names(self, long: dict) -> int:
        """Book rows without a process-group name to the rank's group where the layout knows it: a send/recv
        whose peer is in the rank's pp group to that group; any other collective to the group its gloo thread
        serves (threads.py: the members' same collectives end together), else to the rank's group of the one
        non-pipeline dimension. Returns the rows named. ``long``: the cross-rank stage's row columns."""
        pg = np.asarray(long["pg_name"])
        none = pg == ""
        if not none.any() or not self.dims:
            return 0
        rank = np.asarray(long["rank"])
        op = np.asarray(long["op"])
        peer = np.asarray(long["peer"])
        out = pg.astype(object).copy()
        pp = self.by_role("pp")
        p2p = np.isin(op, ("send", "recv"))
        n = max(self.world_size, int(rank.max()) + 1 if len(rank) else 0, int(peer.max()) + 1 if len(peer) else 0)
        if pp is not None:  # vectorised: each rank's pp group index, and the group's name
            gid = np.full(n + 1, -1, np.int64)
            names = np.full(n + 1, "", dtype=object)
            for i, (g, nm) in enumerate(zip(pp.groups, pp.group_names)):
                gid[g], names[g] = i, nm
            pe = np.where(peer >= 0, peer, n)
            hit = none & p2p & (peer >= 0) & (gid[rank] >= 0) & (gid[rank] == gid[pe])
            out[hit] = names[rank[hit]]
        rest = none & ~p2p
        if rest.any():
            by_thread = self.thread_groups
            if by_thread:
                stream = np.asarray(long["stream"]).astype(np.int64)
                rows = np.flatnonzero(rest)
                keys, inv = np.unique(np.stack([rank[rows].astype(np.int64), stream[rows]]), axis=1,
                                      return_inverse=True)
                got = np.array([by_thread.get((int(a), int(b)), "") for a, b in keys.T], dtype=object)[inv.ravel()]
                out[rows] = np.where(got != "", got, out[rows])
                rest = rest & (out == "")
        others = [d for d in self.dims if d.role != "pp" and d.size > 1]
        if rest.any() and len(others) == 1:
            d = others[0]
            name_of = {r: self.group_name_of(r, d.name) for r in range(self.world_size)}
            rows = np.flatnonzero(rest)
            names = np.array([name_of.get(int(r)) or "" for r in range(int(rank.max()) + 1)], dtype=object)
            out[rows] = names[rank[rows]]
        long["pg_name"] = out
        return int((none & (out != "")).sum())


def _order(name: str) -> tuple:
    return (0, int(name), "") if name.isdigit() else (1, 0, name)


def mesh_of(job: Any) -> Mesh:
    """The job's mesh (computed once per job)."""
    cache = getattr(job, "cache", None)
    if cache is not None and "layout_mesh" in cache:
        return cache["layout_mesh"]
    mesh = infer_mesh(job)
    if cache is not None:
        cache["layout_mesh"] = mesh
    return mesh


def _world(job: Any, groups: dict[str, Group]) -> int:
    w = getattr(job, "world_size", None) or 0
    ranks = list(getattr(job, "traces", {}) or {})
    top = max([max(g.ranks) + 1 for g in groups.values() if g.ranks] + [max(ranks) + 1 if ranks else 0])
    return int(max(w, top))


def _p2p_rows(job: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rk, op, pe, pg = [], [], [], []
    for r, t in job.traces.items():
        o = collective_column(t, "op")
        if not len(o):
            continue
        sel = np.isin(o, ("send", "recv"))
        if not sel.any():
            continue
        rk.append(np.full(int(sel.sum()), int(r), np.int64))
        op.append(np.asarray(o[sel]).astype(str))
        pe.append(np.asarray(collective_column(t, "peer"))[sel].astype(np.int64))
        pg.append(np.asarray(collective_column(t, "pg_name"))[sel].astype(str))
    if not rk:
        e = np.empty(0, np.int64)
        return e, np.empty(0, str), e, np.empty(0, str)
    return np.concatenate(rk), np.concatenate(op), np.concatenate(pe), np.concatenate(pg)


def _reduction_lateness(job: Any) -> Optional[float]:
    """Share of the job's unnamed reductions issued after LATE_SHARE of their step's compute (None: none)."""
    late = total = 0
    for t in job.traces.values():
        o = collective_column(t, "op")
        if not len(o):
            continue
        cb = np.asarray(collective_column(t, "compute_before"), dtype=float)
        sel = np.isin(o, _REDUCTIONS) & np.isfinite(cb)
        total += int(sel.sum())
        late += int((cb[sel] >= LATE_SHARE).sum())
    return late / total if total else None


def _ops_by_group(job: Any) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for t in job.traces.values():
        names, ops = collective_column(t, "pg_name"), collective_column(t, "op")
        if not len(names):
            continue
        keys, counts = np.unique(np.char.add(np.asarray(names).astype(str), "\x1f" + np.asarray(ops).astype(str))
                                 if len(names) else np.empty(0, str), return_counts=True)
        for k, c in zip(keys.tolist(), counts.tolist()):
            n, o = k.split("\x1f", 1)
            if n:
                out.setdefault(n, {})[o] = out.setdefault(n, {}).get(o, 0) + int(c)
    return out


def _thread_tallies(job: Any, by_thread: dict) -> dict[str, dict]:
    """Per group, from the unnamed rows its gloo threads ran (threads.py): op counts, and the reductions issued
    after LATE_SHARE of their step's compute out of all reductions."""
    out: dict[str, dict] = {}
    for r, t in job.traces.items():
        op = collective_column(t, "op")
        if not len(op):
            continue
        op = np.asarray(op).astype(str)
        pg = np.asarray(collective_column(t, "pg_name")).astype(str)
        stream = np.asarray(collective_column(t, "stream"))
        cb = np.asarray(collective_column(t, "compute_before"), dtype=float)
        sel = (pg == "") & ~np.isin(op, ("send", "recv"))
        for s in np.unique(stream[sel]):
            g = by_thread.get((int(r), int(s)))
            if g is None:
                continue
            m = sel & (stream == s)
            e = out.setdefault(g, {"ops": {}, "late": 0, "red": 0})
            for o, c in zip(*np.unique(op[m], return_counts=True)):
                e["ops"][str(o)] = e["ops"].get(str(o), 0) + int(c)
            red = m & np.isin(op, _REDUCTIONS) & np.isfinite(cb)
            e["red"] += int(red.sum())
            e["late"] += int((cb[red] >= LATE_SHARE).sum())
    return out


def _traffic_role(ops: dict[str, int]) -> Optional[tuple[str, str]]:
    """What a dimension's groups carry tells pp (send/recv) and ep (all-to-all) outright; else None."""
    total = sum(ops.values())
    if not total:
        return None
    p2p = ops.get("send", 0) + ops.get("recv", 0)
    if p2p / total >= 0.5:
        return "pp", f"its groups carry send/recv ({p2p} of {total} operations)"
    if ops.get("alltoall", 0) / total >= 0.5:
        return "ep", f"its groups carry all-to-all ({ops['alltoall']} of {total} operations): expert dispatch"
    ag, rs, ar = ops.get("allgather", 0), ops.get("reducescatter", 0), ops.get("allreduce", 0)
    if ag and rs and ag >= 1.5 * rs:
        return "fsdp", f"parameter all-gathers ({ag}) ≈ 2× gradient reduce-scatters ({rs})"
    if ag and not rs and ar and ag >= ar:  # gloo has no reduce-scatter: FSDP reduces gradients by all-reduce
        return "fsdp", f"parameter all-gathers ({ag}) outnumber the gradient all-reduces ({ar})"
    return None


def infer_mesh(job: Any) -> Mesh:
    """The mesh from the job's declared groups and, where their names say nothing, their structure and traffic."""
    declared = declared_groups(job)
    world = _world(job, declared)
    mesh = Mesh(world)
    if world <= 1:
        return mesh
    fr_only = {n for n, g in declared.items() if g.sources == {"flight_recorder"}}
    # 1. names
    named: dict[str, dict] = {}
    infos: dict[str, GroupInfo] = {}
    for n, g in declared.items():
        said = dimension_of_desc(g.desc)
        src = "flight_recorder" if n in fr_only else "pg_desc"
        if said is None:
            role, ev = ("world", "spans every rank") if len(g.ranks) == world else ("unknown", "no name says")
            infos[n] = GroupInfo(n, g.desc, g.ranks, None, role, "structure", ev, CONFIDENCE["structure"])
            continue
        dim, role, composite = said
        infos[n] = GroupInfo(n, g.desc, g.ranks, None if dim == "world" else dim, role, src,
                             f"pg_desc {g.desc!r}", CONFIDENCE[src])
        if dim != "world" and g.ranks:
            e = named.setdefault(dim, {"role": role, "composite": composite, "names": [], "groups": [], "src": src})
            if g.ranks not in e["groups"]:
                e["groups"].append(g.ranks)
                e["names"].append(n)
    cands: list[dict] = []
    for dim, e in named.items():
        sizes = {len(g) for g in e["groups"]}
        flat = [r for g in e["groups"] for r in g]
        if len(sizes) != 1 or len(flat) != len(set(flat)):
            continue
        cands.append({"name": dim, "role": e["role"], "size": sizes.pop(), "groups": e["groups"],
                      "names": e["names"], "source": e["src"], "composite": e["composite"],
                      "evidence": f"pg_desc {declared[e['names'][0]].desc!r} on {len(e['groups'])} group(s)"})
    # 2. structure: unnamed groups that partition the world
    unnamed = {n: g.ranks for n, g in declared.items() if infos[n].dim is None and infos[n].role != "world"}
    for part in partitions(unnamed, world):
        gs = [declared[n].ranks for n in part]
        if any(sorted(map(tuple, gs)) == sorted(map(tuple, c["groups"])) for c in cands):
            continue
        cands.append({"name": None, "role": "unknown", "size": len(gs[0]), "groups": gs, "names": part,
                      "source": "structure", "composite": False,
                      "evidence": f"{len(gs)} groups of {len(gs[0])} ranks partition the world"})
    cands.sort(key=lambda c: (c["composite"], c["source"] == "structure"))
    covered = set(range(world))

    pos = [{r: k for g in c["groups"] for k, r in enumerate(g)} for c in cands]  # rank → place in its group

    def coords_ok(sub: list[int]) -> bool:
        if any(len(pos[i]) != world for i in sub):
            return False
        return len({tuple(pos[i][r] for i in sub) for r in range(world)}) == len(covered)
    chosen = choose_dims([c["size"] for c in cands], coords_ok, world)
    exact = bool(chosen)
    if not chosen:  # names seen on the traced ranks only, or nothing partitions the world: keep what names say
        chosen = [i for i, c in enumerate(cands) if c["source"] != "structure" and not c["composite"]]
    dims = [cands[i] for i in chosen]
    # 3. roles of unnamed dimensions: send/recv peers, then traffic, then place in the step
    rank, op, peer, p2p_pg = _p2p_rows(job)
    how_peers = "none"
    if len(rank) and (peer >= 0).any():
        pp_fit = None
        for c in dims:
            if c["role"] == "pp":
                pp_fit = c
        order = ([pp_fit] if pp_fit else []) + [c for c in dims if c is not pp_fit and c["role"] in ("unknown", "pp")]
        if peer_fit(rank, op, peer, None, world) is not None and pp_fit is None:
            how_peers = "global"
        elif pp_fit is not None and peer_fit(rank, op, peer, None, world) is not None and all(
                any(int(a) in g and int(b) in g for g in pp_fit["groups"]) for a, b in
                zip(rank[peer >= 0][:64], peer[peer >= 0][:64])):
            how_peers = "global"
        else:
            for c in order:
                mapping = {r: g for g in c["groups"] for r in g}
                if peer_fit(rank, op, peer, mapping, world) is not None:
                    how_peers = "local"
                    if c["role"] == "unknown":
                        c["role"], c["source"] = "pp", "p2p"
                        c["evidence"] = (f"{c['evidence']}; the send/recv peers are ranks of these groups "
                                         "(group-local peer numbers fit them and no other)")
                    mesh.p2p_peers = f"local:{c['name'] or 'pp'}"
                    break
    if how_peers == "global":
        mesh.p2p_peers = "global"
        # a send/recv on the world group between members of one unnamed dimension's groups marks that dimension
        if not any(c["role"] == "pp" for c in dims):
            known = peer >= 0
            for c in dims:
                if c["role"] != "unknown":
                    continue
                gid = {r: i for i, g in enumerate(c["groups"]) for r in g}
                if known.any() and all(gid.get(int(a)) == gid.get(int(b)) for a, b in zip(rank[known], peer[known])):
                    c["role"], c["source"] = "pp", "p2p"
                    c["evidence"] += "; every send/recv stays inside these groups"
                    break
    ops = _ops_by_group(job)
    for c in dims:
        if c["role"] != "unknown":
            continue
        tally: dict[str, int] = {}
        for n in c["names"]:
            for k, v in ops.get(n, {}).items():
                tally[k] = tally.get(k, 0) + v
        said = _traffic_role(tally)
        if said:
            c["role"], c["source"] = said[0], "traffic"
            c["evidence"] += "; " + said[1]
    # gloo rows name no group: the groups their threads serve tell each dimension's traffic (threads.py)
    by_thread: dict = {}
    if dims:
        from analyzer.layout.threads import thread_groups
        of_rank: dict[int, list] = {}
        for g in infos.values():
            for r in g.ranks:
                of_rank.setdefault(r, []).append((g.name, g.ranks))
        dim_of = {n: (c["name"] or f"#{i}") for i, c in enumerate(dims) for n in c["names"]}
        by_thread = thread_groups(job, of_rank, dim_of)
    mesh.thread_groups = by_thread
    tallies = _thread_tallies(job, by_thread) if by_thread else {}
    for c in dims:
        tally: dict[str, int] = {}
        late = red = 0
        for n in c["names"]:
            e = tallies.get(n)
            if e:
                for k, v in e["ops"].items():
                    tally[k] = tally.get(k, 0) + v
                late, red = late + e["late"], red + e["red"]
        if not tally:
            continue
        said = _traffic_role(tally)
        if c["role"] == "unknown" and said:
            c["role"], c["source"] = said[0], "traffic"
            c["evidence"] += "; " + said[1]
        elif c["role"] == "dp" and said and said[0] == "fsdp":
            c["role"] = "fsdp"
            c["evidence"] += "; " + said[1] + ": the data-parallel dimension shards its parameters"
        elif c["role"] == "unknown" and red:
            share = late / red
            c["role"], c["source"] = ("dp" if share >= 0.5 else "tp"), "traffic"
            c["evidence"] += (f"; {share:.0%} of its groups' {red} reductions come after {LATE_SHARE:.0%} of their "
                              "step's compute: " + ("gradient sync after backward (data parallel)" if share >= 0.5
                                                    else "per-layer reductions inside the step (tensor parallel)"))
    left = [c for c in dims if c["role"] == "unknown"]
    if len(left) == 1 and len(dims) > 1:
        late = _reduction_lateness(job)
        if late is not None:
            c = left[0]
            c["role"] = "dp" if late >= 0.5 else "tp"
            c["source"] = "structure"
            c["evidence"] += (f"; the one dimension left; {late:.0%} of the job's reductions come after "
                              f"{LATE_SHARE:.0%} of their step's compute: "
                              + ("gradient sync after backward (data parallel)" if late >= 0.5 else
                                 "per-layer reductions inside the step (tensor parallel)"))
    # names and order (outermost first: the larger stride)
    used = {c["name"] for c in dims if c["name"]}
    for i, c in enumerate(dims):
        if not c["name"]:
            base = c["role"] if c["role"] != "unknown" else f"d{i}"
            c["name"] = base if base not in used else f"{base}{i}"
            used.add(c["name"])
        c["stride"] = min((g[1] - g[0] for g in c["groups"] if len(g) > 1), default=1)
    dims.sort(key=lambda c: -c["stride"])
    mesh.dims = [Dimension(c["name"], c["role"], c["size"], [list(g) for g in c["groups"]], list(c["names"]),
                           c["source"], c["evidence"], CONFIDENCE.get(c["source"], 0.5) * (1 if exact else 0.8),
                           c["stride"]) for c in dims]
    mesh.exact = exact
    if exact:
        for r in range(world):
            mesh.coords[r] = {d.name: d.where(r)[1] for d in mesh.dims}
    for d in mesh.dims:
        for n in d.group_names:
            g = infos.get(n)
            if g is not None:
                g.dim, g.role, g.source, g.evidence, g.confidence = d.name, d.role, d.source, d.evidence, d.confidence
    # a group that equals a dimension's group by its ranks (an unnamed duplicate) is of that dimension
    for g in infos.values():
        if g.dim is None and g.role != "world":
            for d in mesh.dims:
                if g.ranks in d.groups:
                    g.dim, g.role, g.source, g.evidence, g.confidence = (d.name, d.role, d.source,
                                                                         "same ranks as a group of " + d.name,
                                                                         d.confidence)
    mesh.groups = infos
    srcs = {d.source for d in mesh.dims}
    mesh.source = ("pg_desc" if srcs == {"pg_desc"} else "flight_recorder" if srcs <= {"pg_desc", "flight_recorder"}
                   and srcs else "structure" if srcs else "none")
    return mesh


def collective_column(t: Any, name: str) -> Any:
    """One column of a rank's collectives (analyzer.rank.summary, imported here: a run without traces — a hang
    post-mortem — never loads the table library)."""
    from analyzer.rank.summary import collective_column as column
    return column(t, name)
