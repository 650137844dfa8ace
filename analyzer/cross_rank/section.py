"""Cross-rank timeline analysis section of the report (clock alignment, collectives, stragglers, groups, pipeline).

Order of work: hosts → group keys and sequence numbers → clock offsets from collectives (plus send/recv pairs
when collectives leave a clock unlinked) → peers of unlabelled send/recv by aligned end time → one instance
table on the aligned clock → stragglers, roles, pipeline, job summary. See docs/cross-rank.md.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import pandas as pd

from analyzer.cross_rank import align as al_mod
from analyzer.cross_rank import collectives as co
from analyzer.cross_rank import desync as ds
from analyzer.cross_rank import links as lk
from analyzer.cross_rank import pipeline as pl
from analyzer.cross_rank import placement as pc
from analyzer.cross_rank import stragglers as sg
from analyzer.cross_rank.member_parts import MemberParts, partition_cuts
from analyzer.cross_rank.roles import group_role_facts, judge_role, role_metrics
from analyzer.layout import mesh_of
from analyzer.load.job import Job
from analyzer.cross_rank.topology import Hosts, declared_groups, group_span, resolve_hosts
from analyzer.rank import intervals as iv

#: Unlabelled send/recv pair when their aligned ends are this close (plus 5× the alignment residual).
PEER_TOLERANCE_NS = 50_000


@dataclass
class CrossRank:
    """Everything the section is built from (plain tables, usable from Python)."""

    hosts: Hosts
    alignment: al_mod.Alignment
    instances: pd.DataFrame   # one row per collective instance / send-recv pair (aligned ns)
    #: the member table (one row per (instance, rank): aligned start/end, duration_ns = wait_ns (until the last
    #: member arrived) + member_transfer_ns (the rest)) in partitions
    #: kept where they were built (member_parts.py); ``members`` joins them
    parts: MemberParts
    expected: dict
    match_method: str
    unmatched_rows: int
    groups: dict
    desync: list = field(default_factory=list)  # collectives one rank lacks / adds / reorders (desync.py)
    #: per group: median share of the step's compute done before its first collective (infer_role's first_pos)
    first_compute: dict = field(default_factory=dict)
    #: per group: what tells its role (roles.group_role_facts: reductions in the forward, recurring payloads)
    role_facts: dict = field(default_factory=dict)
    #: per group known only from its rows: ranks whose collectives a cut lost that may be members
    #: (collectives.maybe_members; such instances' waits are not known: mark_wait_known)
    maybe_members: dict = field(default_factory=dict)

    @property
    def unknown_iids(self) -> np.ndarray:
        """Sorted ids of the instances lacking a traced member (collectives.mark_wait_known), computed once."""
        if not hasattr(self, "_unknown"):
            self._unknown = co.unknown_iids(self.instances)
        return self._unknown

    @property
    def members(self) -> pd.DataFrame:
        """The whole member table, joined from its partitions on first use (the report itself asks the
        partitions instead: a large job's table is never held whole unless this is read)."""
        if not hasattr(self, "_members"):
            self._members = self.parts.frame()
        return self._members


def _next_id(obs: pd.DataFrame) -> int:
    return int(obs["obs"].max()) + 1 if len(obs) else 0


def _empty_members() -> pd.DataFrame:
    return pd.DataFrame({k: [] for k in ("iid", "rank", "start", "end", "op", "nelems", "dtype", "process_group",
                                         "kind", "seq", "src", "dst", "step")})


def analyse(job: Job, gpus_per_node: Optional[int] = None) -> CrossRank:
    """Match, align and time every collective instance of the job (computed once per job and host source)."""
    key = ("cross_rank", gpus_per_node)
    if key not in job.cache:
        job.cache[key] = _analyse(job, gpus_per_node)
    return job.cache[key]


def _analyse(job: Job, gpus_per_node: Optional[int]) -> CrossRank:
    hosts = resolve_hosts(job, gpus_per_node)
    ranks = job.ranks
    domain_of = {r: (hosts.host(r) if hosts.known else f"rank{r}") for r in ranks}
    declared = declared_groups(job)
    long = co.gather_columns(job)
    if not len(long["rank"]):
        al = al_mod.zero_alignment(ranks, domain_of, "single_rank" if len(ranks) <= 1 else "refused",
                                   "no collectives in the traces: nothing to align on")
        return CrossRank(hosts, al, pd.DataFrame(), MemberParts.of(_empty_members()), {}, "none", 0, declared)
    # the layout reads send/recv peers as global ranks (a sub-group's send records the group rank) and books rows
    # without a group name to the rank's group of the dimension they belong to (analyzer/layout)
    mesh = mesh_of(job)
    long["peer"] = mesh.global_peers(long["rank"], long["op"], long["peer"])
    mesh.fill_group_names(long)
    keys = co.assign_keys(long, declared)
    coll, p2p = co.split_rows(long)  # empties `long`: the rows are held once from here on
    obs, al = _align_collectives(coll, ranks, domain_of)
    desyncs, changed = ds.realign_columns(coll, job, al.offset_of if al.status == "ok" else None)
    if changed:  # a rank lacked (or added) collectives: match and align again on the corrected order
        obs, al = _align_collectives(coll, ranks, domain_of)

    if len(p2p):
        size2 = {k: m for k, m in keys.members.items() if len(m) == 2}
        implied = [(m[1] if r == m[0] else m[0]) if k in size2 and r in m else -1
                   for k, m, r in zip(p2p["process_group"], [size2.get(k, []) for k in p2p["process_group"]],
                                      p2p["rank"])]
        p2p["peer"] = np.where(p2p["peer"] >= 0, p2p["peer"], np.array(implied, dtype=np.int64))
        if al.status == "refused":
            known = co.pair_by_order(p2p)
            kk = pd.factorize(pd.MultiIndex.from_arrays([known["process_group"], known["src"], known["dst"],
                                                         known["seq"]]))[0] + _next_id(obs)
            extra = [obs, pd.DataFrame({"obs": kk, "rank": known["rank"].to_numpy(), "t": known["end"].to_numpy()})]
            unl = p2p[p2p["peer"] < 0]
            if len(unl):
                mo = al_mod.p2p_pair_observations(unl, domain_of)
                mo["obs"] += max(_next_id(e) for e in extra)
                extra.append(mo)
            al = al_mod.estimate(pd.concat(extra, ignore_index=True), ranks, domain_of,
                                 what="collectives and send/recv pairs")
        unl = p2p["peer"].to_numpy() < 0
        if unl.any():
            res = al.offsets["residual_ns"].max()
            tol = PEER_TOLERANCE_NS + (5 * res if res == res else 0)
            aend = p2p.loc[unl, "end"].to_numpy() + al.shift(p2p.loc[unl, "rank"].to_numpy())
            found = co.peers_by_end(p2p[unl], aend, int(tol))
            p2p.loc[unl, "peer"] = found
    del obs
    first_compute = first_compute_shares(coll)
    role_facts = group_role_facts(coll)
    expected = {("collective", k): m for k, m in keys.members.items()}
    unmatched = 0
    pr = None
    if len(p2p):
        pr = co.pair_by_order(p2p)
        unmatched += int((p2p["peer"] < 0).sum())
        for k in pr["process_group"].unique():
            expected[("p2p", k)] = [0, 1]
    del p2p
    inst, members = _instances_and_members(coll, pr, al, hosts.rank_to_host if hosts.known else {}, expected,
                                           getattr(job, "engine", None))  # empties `coll`
    del pr
    maybe = co.maybe_members(keys, job)
    co.mark_wait_known(inst, expected, ranks, maybe)
    unmatched += int((~inst["complete"]).sum())
    return CrossRank(hosts, al, inst, members, expected, keys.method, unmatched, declared, desyncs,
                     first_compute, role_facts, maybe)


#: The member table's columns before its waits and durations are added (docs/cross-rank.md).
MEMBER_COLUMNS = ["iid", "rank", "start", "end", "op", "nelems", "dtype", "process_group", "kind", "seq", "src",
                  "dst", "step", "stream"]


def _member_rows(coll: dict, pr: Optional[pd.DataFrame], al: al_mod.Alignment) -> pd.DataFrame:
    """Collective rows (instance = their observation id) and send/recv pairs (ids after them) on the aligned
    clock, sorted by (instance, rank). Consumes ``coll``: each column is dropped once copied."""
    n_coll = len(coll["rank"])
    n_iid = int(coll["obs"].max() + 1) if n_coll else 0
    coll["iid"] = coll.pop("obs")
    for k in [k for k in coll if k not in MEMBER_COLUMNS]:  # what the member table does not carry (compute_before)
        del coll[k]
    if pr is not None:
        pk = pd.factorize(pd.MultiIndex.from_arrays([pr["process_group"], pr["src"], pr["dst"], pr["seq"]]))[0]
        pr = pr.assign(kind="p2p", iid=pk + n_iid).reindex(columns=MEMBER_COLUMNS)
    def column(k: str) -> np.ndarray:
        if k == "kind":  # one string object for every row (np.full makes one per row from a numpy str; the
            a = np.empty(n_coll, dtype=object)  # DataFrame's "str" column keeps the objects it is given)
            a[:] = "collective"
        elif k in ("src", "dst"):
            a = np.full(n_coll, -1, np.int64)
        else:
            a = coll.pop(k)
        return a if pr is None else np.concatenate([a, pr[k].to_numpy()])
    iid, rank = column("iid"), column("rank")
    order = np.lexsort((rank, iid))  # stable: a stable sort by (iid, rank)
    out: dict[str, np.ndarray] = {"iid": iid[order], "rank": rank[order]}
    del iid, rank
    shift = al.shift(out["rank"])  # in the sorted order: each column is shifted once sorted
    for k in MEMBER_COLUMNS[2:]:
        v = column(k)[order]  # the constant columns (kind, src, dst) are made here, one at a time
        if k in ("start", "end"):
            v += shift
        out[k] = _strings(v)
        del v
    coll.clear()
    del order, shift
    return pd.DataFrame(out, copy=False)


def _strings(v: np.ndarray) -> Any:
    """An object column of strings (op, dtype, group, kind) as the array type the table's constructor would infer
    for it (pandas 3's ``str``), made without the constructor's inference: that tries every numeric type on the
    way and holds about five times the column's size meanwhile (at 1024 ranks the member table's peak)."""
    if v.dtype != object or not len(v) or pd.api.types.infer_dtype(v, skipna=False) != "string":
        return v  # anything else: left to the constructor
    dtype = pd.Series(v[:1]).dtype  # what the constructor infers for strings (object before pandas 3)
    return v if dtype == object else pd.array(v, dtype=dtype, copy=False)


#: At most this many member rows are on their way to the engine's instance tasks at once (about 64 MB).
WAVE_ROWS = 1 << 19


def _instances_and_members(coll: dict, pr: Optional[pd.DataFrame], al: al_mod.Alignment, hosts_of: dict,
                           expected: dict, engine: Any = None,
                           partition_rows: Optional[int] = None) -> tuple[pd.DataFrame, MemberParts]:
    """The instance table and the member table's partitions (member_parts.py). Consumes ``coll``.

    Rows that fit one partition, or a job without an engine, are built here as one table (in partitions of
    whole instances). Past one partition each partition of whole instances is an engine task: the parent
    sends its rows, the task builds its instances (they come back) and its members' waits (they stay), and
    the parent drops the rows once every partition is sent."""
    rows = co.PARTITION_ROWS if partition_rows is None else partition_rows
    m = _member_rows(coll, pr, al)  # the sorted rows, held once (coll's columns are dropped as they are copied)
    n = len(m)
    if engine is None or n <= rows:
        inst, m = co.instance_frames(m, hosts_of, expected, rows)
        return inst, MemberParts.of(m)
    iid = m["iid"].to_numpy()
    cuts = partition_cuts(iid, rows)
    pieces = list(zip(cuts[:-1], cuts[1:]))
    bounds = [(int(iid[a]), int(iid[b - 1]) + 1) for a, b in pieces]
    rank, group = m["rank"].to_numpy(), m["process_group"].to_numpy()
    # partitions in flight at once: enough to keep the workers busy, never more than WAVE_ROWS rows
    wave = max(1, min(2 * int(getattr(engine, "workers", 1) or 1), WAVE_ROWS // max(1, rows)))
    insts: list[pd.DataFrame] = []
    handles: list[Any] = []
    for w in range(0, len(pieces), wave):
        items = []
        for a, b in pieces[w:w + wave]:
            ranks = set(np.unique(rank[a:b]).tolist())
            groups = set(pd.unique(group[a:b]).tolist())
            hosts = {r: h for r, h in hosts_of.items() if r in ranks} or hosts_of
            # a slice of the rows (no copy here: it is copied into the task's pickle)
            items.append((m.iloc[a:b], hosts, {k: v for k, v in expected.items() if k[1] in groups}))
        got, kept = engine.map_keep(co.instance_task, items, ship=True)
        del items
        insts += got
        handles += kept
    del m, iid, rank, group
    return pd.concat(insts, ignore_index=True), MemberParts(handles, bounds, n, engine)


def _align_collectives(coll: dict, ranks: list[int], domain_of: dict) -> tuple:
    """Observation ids per (group, seq) set in ``coll["obs"]``; the observations (a sample past ALIGN_ROWS) and
    the clock offsets they give."""
    gcode, _ = pd.factorize(coll["process_group"])
    seq = coll["seq"]
    span = int(seq.max()) + 1 if len(seq) else 1
    if len(gcode) and (int(gcode.max()) + 1) * span < (1 << 62):
        coll["obs"] = pd.factorize(gcode.astype(np.int64) * span + seq)[0]  # first-appearance order, as below
    else:
        coll["obs"] = pd.factorize(pd.MultiIndex.from_arrays([coll["process_group"], seq]))[0]
    keep = alignment_sample(gcode, seq, coll["rank"])
    if keep is not None:
        obs = pd.DataFrame({"obs": coll["obs"][keep], "rank": coll["rank"][keep], "t": coll["end"][keep]})
        al = al_mod.estimate(obs, ranks, domain_of, what="collectives sampled from every group")
        if not al.weak_domains:  # aligned, or refused for want of any link every row would lack too
            return obs, al
        del obs  # the sample left a clock short of instances that every row may still give it
    obs = pd.DataFrame({"obs": coll["obs"], "rank": coll["rank"], "t": coll["end"]})
    return obs, al_mod.estimate(obs, ranks, domain_of)


#: Clock alignment reads about this many collective rows at most: past it, a sample of instances spread evenly
#: over each group's sequence (offsets are medians over the instances; a quarter million rows pin them as well
#: as every row does, and the alignment's memory stays bounded at any job size).
ALIGN_ROWS = 1 << 18
#: A sampled group keeps at least this many of its instances (a small group may be the only link between hosts),
#: and a group with a member that recorded fewer than this many strides keeps its first this-many instances
#: whole (a rank that crashed or was cut off early has only its first collectives).
ALIGN_MIN_INSTANCES = 64


def alignment_sample(gcode: np.ndarray, seq: np.ndarray, rank: Optional[np.ndarray] = None,
                     budget: Optional[int] = None) -> Optional[np.ndarray]:
    """Rows whose instances the clock alignment uses (None: all, within ``budget``, default ALIGN_ROWS). Per
    group every k-th sequence number, k set so the group keeps its share of the budget (up to twice it) and at
    least ALIGN_MIN_INSTANCES instances; where a member (``rank``) has fewer than ALIGN_MIN_INSTANCES × k
    collectives in the group, its first ALIGN_MIN_INSTANCES instances too. Extra collectives (sequence numbers
    past desync.EXTRA_SEQ, at no position of the group's consensus) are left out. A sample that leaves a clock
    short is not the last word: the caller aligns on every row then."""
    n = len(seq)
    budget = ALIGN_ROWS if budget is None else budget
    if n <= budget:
        return None
    normal = seq < ds.EXTRA_SEQ
    groups = int(gcode.max()) + 1
    n_inst = np.zeros(groups, np.int64)
    np.maximum.at(n_inst, gcode[normal], seq[normal] + 1)
    want = np.maximum(np.minimum(n_inst, ALIGN_MIN_INSTANCES), np.ceil(n_inst * (budget / n)).astype(np.int64))
    stride = np.maximum(1, n_inst // np.maximum(want, 1))
    keep = normal & (seq % stride[gcode] == 0)
    if rank is not None:
        # (group, rank) row counts: a member short of ALIGN_MIN_INSTANCES strides makes its group keep its head
        span = int(rank.max()) + 1
        pair, count = np.unique(gcode[normal].astype(np.int64) * span + rank[normal], return_counts=True)
        g = pair // span
        thin = np.zeros(groups, bool)
        thin[g[count < ALIGN_MIN_INSTANCES * stride[g]]] = True
        thin &= stride > 1
        if thin.any():
            keep |= normal & thin[gcode] & (seq < ALIGN_MIN_INSTANCES)
    return keep


def group_order(name: object) -> tuple:
    """Sort key for process-group names: numbers numerically (2 before 10), then the others by name."""
    n = str(name)
    return (not n.isdigit(), int(n) if n.isdigit() else 0, n)


def _groups_section(job: Job, cr: CrossRank) -> list[dict]:
    """Process groups: members, hosts spanned, span, inferred role with evidence, op counts."""
    inst = cr.instances
    names = set(cr.groups) | (set(inst["process_group"]) if len(inst) else set())
    world = job.world_size or len(job.ranks)
    nsteps = max(1, len([s for s in (job.step_metrics["step"].unique() if len(job.step_metrics) else [])
                         if s >= 0]))
    pos = _first_positions(job, cr)
    mesh = mesh_of(job)
    # one pass over the rows, not one filter per group (10,000-rank jobs have thousands of groups)
    by_group = dict(tuple(inst.groupby("process_group", sort=False, observed=True))) if len(inst) else {}
    member_ranks = member_facts(cr)["ranks"]
    out = []
    for name in sorted(names, key=group_order):
        g = cr.groups.get(name)
        ranks = list(g.ranks) if g is not None and g.ranks else \
            cr.expected.get(("collective", name)) or sorted(set(member_ranks.get(name, [])))
        sub = by_group.get(name, inst.iloc[:0])
        ops = {str(k): int(v) for k, v in sub["op"].value_counts().items()} if len(sub) else {}
        if len(sub) and (sub["kind"] == "p2p").any():
            pp = sub[sub["kind"] == "p2p"]
            ops.pop("send", None)
            ops.pop("recv", None)
            ops["send"] = ops.get("send", 0) + len(pp)
            ops["recv"] = ops.get("recv", 0) + len(pp)
        coll_sub = sub[sub["kind"] == "collective"] if len(sub) else sub
        per_step = len(coll_sub) / nsteps if len(coll_sub) else 0.0
        hs, span = group_span(ranks, cr.hosts)
        # the world group is judged by what it carries (a plain DDP job's only group is its DP group), any group
        # by what identifies its role (roles.judge_role: per-layer reductions in forward and backward are TP)
        role, judged, evidence = judge_role(name, ranks, world, ops, per_step, pos.get(name),
                                            cr.role_facts.get(str(name)))
        said = mesh.role_of(str(name), ranks)  # the layout's word (a name, or the dimension's structure) first
        if said is not None and said.role not in ("world", "unknown") and said.dim is not None:
            # a data-parallel dimension whose groups gather parameters shards them: FSDP (the traffic tells)
            role = judged = "fsdp" if said.role == "dp" and judged == "fsdp" else said.role
            evidence = f"{said.dim} dimension of the mesh ({said.evidence}); {evidence}"
        out.append({"name": name, "desc": g.desc if g is not None else "", "ranks": ranks, "size": len(ranks),
                    "hosts": hs, "n_hosts": len(hs) if cr.hosts.known else None, "span": span, "role": role,
                    "judged_role": judged, "evidence": evidence, "ops": ops})
    return out


def _facts_of_part(part: pd.DataFrame, unknown: Any) -> tuple:
    """Run where a member partition is: each group's member ranks, each rank's wait (sum, count), transfer and
    unsplit time (sums: a member of one of the instances ``unknown`` — sorted ids, or None — has no known
    transfer), the wait inside steps, and per group the rows each rank has in those instances."""
    pg, rank, wait = part["process_group"].to_numpy(), part["rank"].to_numpy(), part["wait_ns"].to_numpy()
    code, names = pd.factorize(pg)
    span = int(rank.max()) + 1 if len(rank) else 1
    pairs = np.unique(code.astype(np.int64) * span + rank)
    groups: dict = {}
    for c, r in zip((pairs // span).tolist(), (pairs % span).tolist()):
        groups.setdefault(names[c], []).append(r)
    ranks, inv = np.unique(rank, return_inverse=True)
    total, transfer, unsplit = (np.zeros(len(ranks), np.int64) for _ in range(3))
    np.add.at(total, inv, wait)
    held = (np.empty(0, object), np.empty(0, np.int64), np.empty(0, np.int64))
    if "member_transfer_ns" in part:
        rest = part["member_transfer_ns"].to_numpy()
        out = np.isin(part["iid"].to_numpy(), unknown) if unknown is not None and len(unknown) \
            else np.zeros(len(part), bool)
        np.add.at(transfer, inv[~out], rest[~out])
        np.add.at(unsplit, inv[out], rest[out])
        if out.any():  # (group, rank, rows) in those instances, as arrays
            key, count = np.unique(code[out].astype(np.int64) * span + rank[out], return_counts=True)
            held = (np.asarray(names, dtype=object)[key // span], key % span, count)
    return (groups, ranks, total, np.bincount(inv, minlength=len(ranks)), int(wait[part["step"].to_numpy() >= 0].sum()),
            transfer, unsplit, held)


def member_facts(cr: CrossRank) -> dict:
    """What the section needs of every member row, asked of the partitions once: ``ranks`` (group → its
    member ranks, sorted), ``wait`` (ranks, total wait ns, rows; by rank), ``transfer`` and ``unsplit`` (total
    ns, in the order of ``wait``'s ranks), ``wait_in_steps`` (ns), ``unsplit_held`` (a Series by (group, rank):
    the rank's rows in the group's instances whose waits are known only in part)."""
    if not hasattr(cr, "_facts"):
        groups: dict = {}
        held = []
        per = []
        in_steps = 0
        unknown = co.unknown_iids(getattr(cr, "instances", None))
        for g, ranks, total, count, inside, transfer, unsplit, h in cr.parts.map(_facts_of_part,
                                                                                   cr.parts.slices(unknown)):
            for name, rs in g.items():
                groups.setdefault(name, set()).update(rs)
            if len(h[0]):
                held.append(h)
            per.append((ranks, total, count, transfer, unsplit))
            in_steps += inside
        if per:
            ranks = np.concatenate([p[0] for p in per])
            u, inv = np.unique(ranks, return_inverse=True)
            sums = [np.zeros(len(u), np.int64) for _ in range(4)]
            for k, into in enumerate(sums, 1):
                np.add.at(into, inv, np.concatenate([p[k] for p in per]))
            total, count, transfer, unsplit = sums
        else:
            u = total = count = transfer = unsplit = np.empty(0, np.int64)
        cr._facts = {"ranks": {k: sorted(v) for k, v in groups.items()}, "wait": (u, total, count),
                     "transfer": transfer, "unsplit": unsplit, "wait_in_steps": in_steps,
                     "unsplit_held": _summed_rows(held)}
    return cr._facts


def _summed_rows(held: list) -> pd.Series:
    """(group, rank) → rows, summed over the partitions' arrays (empty when no instance lacks a traced rank)."""
    if not held:
        return pd.Series(dtype=np.int64)
    g, r, n = (np.concatenate([h[k] for h in held]) for k in range(3))
    return pd.Series(n, index=pd.MultiIndex.from_arrays([g.astype(str), r.astype(np.int64)])).groupby(level=[0, 1]).sum()


def unsplit_section(job: Job, cr: CrossRank) -> Optional[dict]:
    """`cross_rank.collectives.wait_unknown`: the instances that lack a traced member, the traced ranks they
    lack (per group: those with fewer rows in them than the group has such instances) and why each is absent;
    None when every instance has its traced members (collectives.mark_wait_known)."""
    inst = cr.instances
    if not len(cr.unknown_iids):
        return None
    sel = inst[~inst["wait_known"].to_numpy(bool)]
    held = member_facts(cr)["unsplit_held"]
    present = set(job.traces)
    missing: set = set()
    by_group = sel.groupby("process_group").size()
    for g, n in by_group.items():
        expected = list(cr.expected.get(("collective", g)) or []) + list(cr.maybe_members.get(g, []))
        rows = held.loc[str(g)] if len(held) and str(g) in held.index.get_level_values(0) else pd.Series(dtype=np.int64)
        missing |= {int(r) for r in expected if int(r) in present and int(rows.get(int(r), 0)) < n}
    damage = getattr(job, "damage", None) or {}
    why = {}
    for r in sorted(missing):
        d = damage.get(r)
        why[str(r)] = ("collectives_lost" if d is not None and not d.collectives_trusted() else
                       "cut" if d is not None else "not_recorded")
    return {"instances": int(len(sel)), "groups": sorted(str(g) for g in sel["process_group"].unique()),
            "instances_by_group": {str(g): int(n) for g, n in by_group.items()},
            "ranks_missing": sorted(missing), "why": why}


def _first_positions(job: Job, cr: CrossRank) -> dict:
    """Per group: median (over members and steps) share of the step's compute done before its first collective.

    Each collective row carries that share for its own start (``compute_before``, computed where its rank was
    parsed: analyzer/rank/summary.py); it grows with the start, so the first collective's is the least.
    """
    if not cr.first_compute or job.step_metrics is None or not len(job.step_metrics):
        return {}
    return dict(cr.first_compute)


def first_compute_shares(coll: Any) -> dict:
    """Median over (rank, step) of the least ``compute_before`` per (group, rank, step), by group (NaN dropped).

    ``coll``: a DataFrame or a dict of columns (section.py's)."""
    if "compute_before" not in coll or not len(coll["rank"]):
        return {}
    step = np.asarray(coll["step"])
    inside = step >= 0
    if not inside.any():
        return {}
    gcode, names = pd.factorize(np.asarray(coll["process_group"])[inside], sort=True)
    c = pd.DataFrame({"g": gcode, "rank": np.asarray(coll["rank"])[inside], "step": step[inside],
                      "compute_before": np.asarray(coll["compute_before"])[inside]})
    first = c.groupby(["g", "rank", "step"])["compute_before"].min().reset_index()
    med = first.groupby("g")["compute_before"].median().dropna()
    return {names[g]: float(v) for g, v in med.items()}


def _link_evidence(job: Job) -> lk.LinkEvidence:
    """NCCL log evidence about the job's links, computed once per job."""
    if "link_evidence" not in job.cache:
        job.cache["link_evidence"] = lk.log_evidence(list(job.nccl_logs or []))
    return job.cache["link_evidence"]


def group_link(job: Job, group: dict) -> lk.Link:
    """Link class and nominal busbw of one process group (analyzer/cross_rank/links.py)."""
    ranks = [r for r in group.get("ranks") or [] if r in job.traces]
    if "link_devices" not in job.cache:  # job-wide facts, once per job rather than once per group
        job.cache["link_devices"] = (any(t.device_type == "cpu" for t in job.traces.values()),
                                     [t.meta.get("gpu_name") for t in job.traces.values()])
    cpu, all_names = job.cache["link_devices"]
    names = [job.traces[r].meta.get("gpu_name") for r in ranks] or all_names
    gpu = next((g for g in (lk.gpu_of(n) for n in names) if g is not None), None)
    return lk.classify(str(group.get("span", "unknown")), cpu, gpu, _link_evidence(job))


def _link_class(job: Job, span: str) -> str:
    """Link class of a span for the whole job (kept for callers that know only the span)."""
    return group_link(job, {"span": span, "ranks": []}).link_class


def _link_section(job: Job, links: dict[str, lk.Link]) -> dict:
    """`cross_rank.links`: per class the groups, nominal busbw and its source; the NCCL log facts and causes."""
    ev = _link_evidence(job)
    classes: dict[str, dict] = {}
    for name, link in links.items():
        c = classes.setdefault(link.link_class, {**link.to_dict(), "groups": []})
        c["groups"].append(name)
    causes = {}
    for link in links.values():
        for c in lk.low_busbw_causes(link, ev):
            row = {"text": c[0], "file": c[1], "line": c[2], "link_class": link.link_class}
            if len(c) > 3:
                row["cap_gbps"] = c[3]
            causes.setdefault(c[0], row)
    return {"classes": sorted(classes.values(), key=lambda c: c["link_class"]),
            "facts": [{"text": t, "file": f, "line": ln} for t, f, ln in ev.facts],
            "env": {k: v[0] for k, v in sorted(ev.env.items())},
            "coll_channels": ev.coll_channels, "nvls": ev.nvls, "gdr": ev.gdr,
            "causes": list(causes.values())}


def _judge_busbw(link: lk.Link, op: str, n: int, nbytes: Optional[float], count: int,
                 busbw: Optional[float]) -> dict:
    """Expected busbw at the row's mean message size and the measured / expected ratio."""
    from analyzer.cross_rank.collectives import busbw_factor
    mean = (nbytes / count) if nbytes and count else None
    exp = lk.expected_busbw(link, op, n, mean or 0, busbw_factor(op if op not in ("send", "recv") else "sendrecv", n))
    eff = (busbw / exp) if (exp and busbw is not None) else None
    return {"nominal_busbw_gbps": link.nominal_gbps, "expected_busbw_gbps": exp, "busbw_efficiency": eff}


def _per_active(transfer: np.ndarray, known: np.ndarray, in_steps: np.ndarray, step: np.ndarray) -> Optional[float]:
    """Transfer µs per step holding a call, over the steps whose calls all have a known transfer; None without."""
    if not in_steps.any():
        return None
    bad = np.unique(step[in_steps & ~known])
    ok = in_steps & ~np.isin(step, bad)
    active = len(np.unique(step[ok]))
    return float(transfer[ok].sum()) / active / 1e3 if active else None


def cross_rank_section(job: Job, gpus_per_node: Optional[int] = None) -> dict:
    """JSON-ready dict of everything learned between ranks (docs/report-sections.md `cross_rank`)."""
    if not job.traces:
        return {}
    cr = analyse(job, gpus_per_node)
    groups = _groups_section(job, cr)
    span_of = {g["name"]: g["span"] for g in groups}
    role_of = {g["name"]: g["role"] for g in groups}
    inst, mem = cr.instances, cr.parts
    section: dict[str, Any] = {
        "hosts": {"source": cr.hosts.source, "rank_to_host": {str(r): h for r, h in cr.hosts.rank_to_host.items()},
                  "gpus_per_node": cr.hosts.gpus_per_node},
        "alignment": cr.alignment.to_dict(),
        "process_groups": groups,
    }
    links = {g["name"]: group_link(job, g) for g in groups}
    section["links"] = _link_section(job, links)
    if len(inst):
        by = []
        for (pg, op), g in inst.groupby(["process_group", "op"], sort=True):
            link = links.get(pg) or group_link(job, {"span": span_of.get(pg, "unknown"), "ranks": []})
            # an instance lacking a traced member has no known transfer (collectives.mark_wait_known): the
            # transfer figures are those of the others; none when no instance of the row is whole
            known = g["wait_known"].to_numpy(bool) if "wait_known" in g else np.ones(len(g), bool)
            tr = g["transfer_ns"].to_numpy()
            nbytes = int(g["bytes"].clip(lower=0).sum()) if (g["bytes"] >= 0).any() else None
            busbw = _nanmean(g["busbw_gbps"])
            size = int(g["group_size"].max()) if "group_size" in g else 0
            in_steps = g["step"].to_numpy() >= 0
            active = int(len(np.unique(g["step"].to_numpy()[in_steps])))
            by.append({"process_group": pg, "op": op, "role": role_of.get(pg), "count": int(len(g)),
                       # steps holding at least one call, and the calls and transfer time per such step: with
                       # gradient accumulation (no_sync) the reductions run in one step of several
                       "active_steps": active,
                       "calls_per_active_step": float(in_steps.sum()) / active if active else None,
                       "transfer_us_per_active_step": _per_active(tr, known, in_steps, g["step"].to_numpy()),
                       "bytes": nbytes,
                       "mean_bytes": float(g.loc[g["bytes"] >= 0, "bytes"].mean()) if (g["bytes"] >= 0).any()
                       else None,
                       "mean_transfer_us": float(tr[known].mean()) / 1e3 if known.any() else None,
                       "mean_busbw_gbps": busbw,
                       "mean_algbw_gbps": _nanmean(g["algbw_gbps"]),
                       "link_class": link.link_class,
                       **_judge_busbw(link, str(op), size, nbytes, int(len(g)), busbw),
                       "crossed_hosts": bool(g["crossed_hosts"].any()) if cr.hosts.known else None})
        by.sort(key=lambda row: (group_order(row["process_group"]), str(row["op"])))
        facts = member_facts(cr)
        section["collectives"] = {
            "instances": int(len(inst)), "matched": int(inst["complete"].sum()),
            "unmatched": int(cr.unmatched_rows), "match_method": cr.match_method,
            "p2p_pairs": int((inst["kind"] == "p2p").sum()), "by_group_op": by,
            "per_rank_wait": [{"rank": int(r), "total_wait_us": float(t) / 1e3, "mean_wait_us": float(t / c) / 1e3,
                               "total_transfer_us": float(x) / 1e3, "total_unsplit_us": float(u) / 1e3}
                              for r, t, c, x, u in zip(*facts["wait"], facts["transfer"], facts["unsplit"])],
            "wait_unknown": unsplit_section(job, cr)}
        nsteps = len([s for s in (job.step_metrics["step"].unique() if len(job.step_metrics) else []) if s >= 0])
        section["roles"] = role_metrics(job, mem, cr.alignment.offset_of,
                                        {g["name"]: g["judged_role"] for g in groups}, max(1, nsteps),
                                        waits=cr.alignment.status == "ok",
                                        unknown_iids=cr.unknown_iids)
        section["stragglers"] = sg.analyse(job, inst, mem, cr.alignment.offset_of)
        section["placement"] = pc.analyse(job, inst, mem, cr.alignment.offset_of)
        section["pipeline"] = pl.analyse(job, inst, mem, cr.alignment.offset_of)
    else:
        section["collectives"] = {"instances": 0, "matched": 0, "unmatched": 0, "match_method": cr.match_method,
                                  "by_group_op": [], "per_rank_wait": []}
        section["stragglers"] = {"per_rank": [], "straggler": None, "confidence": 0.0, "attribution": "unknown",
                                 "evidence": "no collectives", "per_step": []}
        section["pipeline"] = pl.analyse(job, inst, mem, cr.alignment.offset_of)
    waited = {x["step"]: x["slowest_rank"] for x in section["stragglers"].get("per_step") or [] if x.get("material")}
    section["step_spread"] = sg.step_spread(job.step_metrics, waited)
    section["desync"] = cr.desync
    from analyzer.cross_rank.expert_load import expert_load
    section["expert_load"] = expert_load(job, mesh_of(job))
    section["summary"] = _summary(job, cr, section)
    return section


def _nanmean(s: pd.Series) -> Optional[float]:
    v = s.to_numpy(dtype=float)
    v = v[np.isfinite(v)]
    return float(v.mean()) if len(v) else None


def _summary(job: Job, cr: CrossRank, section: dict) -> dict:
    """Critical path in outline (per step: whom the job waited for, where) and scaling-relevant shares."""
    sm = job.step_metrics
    step_total = float(sm["step_time_ns"].sum()) if sm is not None and len(sm) else float("nan")
    inst = cr.instances
    crit = []
    if len(inst):
        ci = inst[(inst["kind"] == "collective") & (inst["last_delay_ns"] > sg.TIE_NS)]
        for x in (section.get("stragglers") or {}).get("per_step") or []:  # the rank each step waited for
            r = int(x["slowest_rank"])
            g = ci[(ci["step"] == x["step"]) & (ci["last_rank"] == r)]
            if not len(g):
                continue
            worst = g.sort_values("last_delay_ns").iloc[-1]
            crit.append({"step": int(x["step"]), "rank": r, "delay_us": float(x["delay_us"]),
                         "where": f"{worst['op']} #{int(worst['seq'])} on process group {worst['process_group']}: "
                                  f"the others waited {worst['last_delay_ns'] / 1e3:.1f} µs for rank {r}"})
    exposed = float(sm["exposed_comm_ns"].sum()) / step_total if step_total and step_total > 0 else None
    wait = float(member_facts(cr)["wait_in_steps"]) / step_total if len(cr.parts) and step_total > 0 else None
    bubble = None
    pipe = section.get("pipeline") or {}
    if pipe.get("detected") and pipe.get("per_stage") and sm is not None and len(sm):
        st = sm.set_index(["rank", "step"])["step_time_ns"]
        num = den = 0.0
        for x in pipe["per_stage"]:
            k = (x["rank"], x["step"])
            if k in st.index and x["bubble_rate"] == x["bubble_rate"]:
                num += x["bubble_rate"] * x["window_us"] * 1e3
                den += float(st.loc[k])
        bubble = num / den if den else None
    return {"critical_path": crit, "exposed_comm_share": exposed, "bubble_share": bubble, "wait_share": wait}


def instance_table(job: Any, gpus_per_node: Optional[int] = None) -> pd.DataFrame:
    """One row per collective instance / send-recv pair on the aligned clock (for plots; see docs/cross-rank.md)."""
    return analyse(job, gpus_per_node).instances


def member_table(job: Any, gpus_per_node: Optional[int] = None) -> pd.DataFrame:
    """One row per (instance, rank): aligned start/end, duration_ns = wait_ns (for the last member to arrive) +
    member_transfer_ns (the rest; the instance's own transfer_ns is its shortest member duration)."""
    return analyse(job, gpus_per_node).members
