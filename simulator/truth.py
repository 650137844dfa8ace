"""expected.json: the facts an analysis must recover, computed from the simulator's own event lists."""
from __future__ import annotations

from statistics import mean

from simulator import intervals as iv
from simulator.engine import Engine

RATIO_DIGITS = 12


def _ratio(a: int, b: int):
    return None if b == 0 else round(a / b, RATIO_DIGITS)


def step_metrics(eng: Engine, local) -> list[dict]:
    """Per rank per step: docs/metrics.md metrics over the ProfilerStep window, times on the rank's own clock."""
    rows = []
    for s in eng.st:
        for step, ws, we in s.steps:
            if we is None:
                continue
            by = {"compute": [], "comm": [], "memcpy": []}
            for k in s.kernels:
                end = k[2].end if k[0] == "comm" else k[2]
                by[k[0]].append((k[1], end))
            c = {k: iv.clip(v, ws, we) for k, v in by.items()}
            comm, comp, mem = iv.length(c["comm"]), iv.length(c["compute"]), iv.length(c["memcpy"])
            both = iv.length(iv.intersect(c["comm"], c["compute"]))
            busy = iv.length(c["comm"] + c["compute"] + c["memcpy"])
            st = we - ws
            rows.append({
                "rank": s.rank, "step": step, "start_ns": local(s.rank, ws), "end_ns": local(s.rank, we),
                "step_time_ns": st, "compute_ns": comp, "comm_ns": comm, "exposed_comm_ns": comm - both,
                "overlap_coverage": _ratio(both, comm), "comm_share": _ratio(comm, st),
                "exposed_comm_share": _ratio(comm - both, st), "idle_ns": st - busy, "memcpy_ns": mem,
            })
    return rows


def pipeline(eng: Engine) -> list[dict]:
    """Per stage and step: bubble rate on each rank's own window, and on the whole pipeline's window."""
    cfg, topo = eng.cfg, eng.topo
    p = cfg["parallel"]["pp"]
    if p < 2:
        return []
    sch = cfg["schedule"]
    m, v = sch["microbatches"], sch["virtual_stages"]
    name = {"pp_gpipe": "gpipe", "pp_1f1b": "1f1b", "pp_interleaved": "interleaved"}[sch["kind"]]
    comp = {}
    for s in eng.st:
        for step, ws, we in s.steps:
            if we is None:
                continue
            comp[(s.rank, step)] = iv.union([(k[1], k[2]) for k in s.kernels if k[0] == "compute" and ws <= k[1] < we])
    out = []
    for step in sorted({k[1] for k in comp}):
        pwin = {}
        for g in {id(topo.group_of("pp", r)): topo.group_of("pp", r) for r in range(topo.world)}.values():
            spans = [comp[(r, step)] for r in g.ranks if (r, step) in comp and comp[(r, step)]]
            if spans:
                w = (min(x[0][0] for x in spans), max(x[-1][1] for x in spans))
                for r in g.ranks:
                    pwin[r] = w
        for stage in range(p):
            ranks = [r for r in range(topo.world) if topo.coords[r]["pp"] == stage and (r, step) in comp]
            own, pipe = {}, {}
            for r in ranks:
                u = comp[(r, step)]
                if not u:
                    continue
                busy = sum(e - s for s, e in u)
                own[str(r)] = round(1 - busy / (u[-1][1] - u[0][0]), RATIO_DIGITS)
                lo, hi = pwin[r]
                pipe[str(r)] = round(1 - busy / (hi - lo), RATIO_DIGITS)
            if not own:
                continue
            out.append({
                "stage": stage, "step": step, "p": p, "m": m, "v": v, "schedule": name,
                "theoretical_bubble": round((p - 1) / (v * m + p - 1), RATIO_DIGITS),
                "bubble_rate": round(mean(own.values()), RATIO_DIGITS), "bubble_rate_by_rank": own,
                "bubble_rate_pipeline_window": round(mean(pipe.values()), RATIO_DIGITS),
                "bubble_rate_pipeline_window_by_rank": pipe,
            })
    return out


def collectives(eng: Engine, local) -> tuple[list[dict], list[dict]]:
    """Per collective instance (pg, seq) and per send/recv pair: per-rank wait and the transfer time."""
    colls, p2p = [], []
    for inst in eng.inst.values():
        if not inst.arrivals:
            continue
        row = {"op": inst.op, "ranks": inst.members, "completed": inst.end is not None,
               "mismatch": inst.mismatch}
        if inst.end is not None:
            last = max(inst.arrivals.values())
            row["transfer_ns"] = inst.transfer
            row["end_true_ns"] = inst.end
            row["end_ns"] = {str(r): local(r, inst.end) for r in inst.members}
            row["wait_ns"] = {str(r): last - a for r, a in sorted(inst.arrivals.items())}
        row["start_ns"] = {str(r): local(r, a) for r, a in sorted(inst.arrivals.items())}
        c0 = next(iter(inst.calls.values()))
        row["dtype"] = c0.dtype
        row["in_nelems"] = {str(r): c.in_n for r, c in sorted(inst.calls.items())}
        if inst.key[0] == "c":
            colls.append({"process_group": inst.key[1], "seq": inst.key[2], **row})
        else:
            _, pg, src, dst, tag = inst.key
            seqs = {str(r): c.seq for r, c in inst.calls.items()}
            p2p.append({"process_group": pg, "src": src, "dst": dst, "tag": list(tag), "p2p_seq_id": seqs, **row})
    colls.sort(key=lambda x: (int(x["process_group"]), x["seq"]))
    p2p.sort(key=lambda x: (int(x["process_group"]), x["src"], x["dst"], x["tag"][3], x["tag"][2], x["tag"][0]))
    return colls, p2p


def hang(eng: Engine, culprits: list[int]) -> dict | None:
    """The first unresolved collective per process group: who arrived, who is missing, who disagreed."""
    if not eng.hung():
        return None
    stuck = []
    for inst in eng.inst.values():
        if inst.key[0] != "c" or inst.end is not None or not inst.arrivals:
            continue
        stuck.append(inst)
    if not stuck:
        return {"process_group": None, "seq": None}
    stuck.sort(key=lambda i: min(i.arrivals.values()))
    first = stuck[0]
    sigs: dict = {}
    for r, c in first.calls.items():
        if r in first.arrivals:
            sigs.setdefault((c.op, c.in_n, c.dtype), []).append(r)
    major = max(sigs.values(), key=lambda rs: (len(rs), not set(rs) & set(culprits))) if sigs else []
    mism = sorted(r for rs in sigs.values() if rs is not major for r in rs)
    arrived = sorted(first.arrivals)
    return {
        "process_group": first.key[1], "seq": first.key[2], "op": first.calls[major[0]].op if major else None,
        "arrived_ranks": arrived, "missing_ranks": sorted(set(first.members) - set(arrived)),
        "mismatched_ranks": mism, "waiting_ranks": sorted(set(arrived) - set(mism)),
        "culprit_ranks": sorted(culprits),
        "stuck_instances": [{"process_group": i.key[1], "seq": i.key[2],
                             "missing_ranks": sorted(set(i.members) - set(i.arrivals))} for i in stuck],
    }


def process_groups(eng: Engine) -> list[dict]:
    from simulator.cost import link_for
    return [{"name": g.name, "desc": g.desc, "role": g.role, "ranks": g.ranks,
             "hosts": [eng.cfg["hostnames"][h] for h in g.hosts], "hosts_spanned": len(g.hosts),
             "link": link_for(eng.cfg, g.hosts)[0]} for g in eng.topo.groups]
