"""One simulated job: run the engine, then write every artefact and expected.json into a folder."""
from __future__ import annotations

import copy
import json
import pickle
import random
from pathlib import Path

from simulator import truth
from simulator.config import normalise
from simulator.engine import Engine
from simulator.faults import apply_config_faults, apply_program_faults
from simulator.program import Builder
from simulator.topology import build_topology
from simulator.write_errors import crash_lines, fr_dump, watchdog_lines
from simulator.write_kineto import KinetoWriter
from simulator.write_nccl import NcclLogWriter

CONVENTION = "true_ns = local_ns + clock_offset_ns (local_ns: the rank's own clock, as written in its files)"


class Job:
    """A simulated job: config, topology, engine state and the per-rank identities used by the writers."""

    def __init__(self, cfg: dict):
        self.source_cfg = copy.deepcopy(cfg)
        cfg = normalise(copy.deepcopy(cfg))
        apply_config_faults(cfg)
        self.cfg = cfg
        self.topo = build_topology(cfg)
        self.pg = {g.name: g for g in self.topo.groups}
        progs = Builder(cfg, self.topo).build()
        apply_program_faults(cfg, self.topo, progs)
        self.progs = progs
        self.eng = Engine(cfg, self.topo, progs)
        self.eng.run()
        rng = random.Random(cfg["seed"] * 101 + 3)
        q = 1000 if cfg["trace"]["format"] == "old" else 1
        nh = cfg["hosts"]
        cfg["hostnames"] = [f"{cfg['host_prefix']}{h:02d}" for h in range(nh)]
        offs = cfg["clock"]["offsets_us"]
        mx = cfg["clock"]["max_offset_us"] * 1000
        self.host_offset = [int(round(offs[h] * 1000)) if offs else int(rng.uniform(-mx, mx)) // q * q
                            for h in range(nh)]
        self.pids = [rng.randrange(20000, 400000) for _ in range(self.topo.world)]
        self.epoch = cfg["clock"]["epoch_ns"] // q * q
        self.base_ns = {}
        for s in self.eng.st:
            first = min([s.steps[0][1]] if s.steps else [0])
            self.base_ns[s.rank] = (self.local(s.rank, first) - 1_000_000) // 1000 * 1000
        self._ptr = random.Random(cfg["seed"] * 13 + 1)
        self._comm, self._stream, self._cid = {}, {}, {}

    # ---- identities ----------------------------------------------------------------------------
    def offset(self, rank: int) -> int:
        return self.host_offset[self.topo.host(rank)]

    def local(self, rank: int, t: int) -> int:
        """The rank's own clock (epoch ns) at true sim time t."""
        return self.epoch + t - self.offset(rank)

    def hostname(self, rank: int) -> str:
        return self.cfg["hostnames"][self.topo.host(rank)]

    def ip(self, rank: int) -> str:
        return f"10.42.{self.topo.host(rank) // 250}.{10 + self.topo.host(rank) % 250}"

    def comm_ptr(self, rank: int, pg: str) -> str:
        k = (rank, pg)
        if k not in self._comm:
            self._comm[k] = f"0x{0x55d000000000 + self._ptr.randrange(1 << 32) * 16:x}"
        return self._comm[k]

    def stream_ptr(self, rank: int, pg: str) -> str:
        k = (rank, pg)
        if k not in self._stream:
            self._stream[k] = f"0x{0x55e000000000 + self._ptr.randrange(1 << 32) * 16:x}"
        return self._stream[k]

    def comm_id(self, pg: str) -> str:
        if pg not in self._cid:
            seed = self.cfg["seed"]
            self._cid[pg] = "0x%x" % random.Random(f"{seed}/{pg}").getrandbits(63)
        return self._cid[pg]

    def bus_id(self, rank: int) -> str:
        return ["18000", "2a000", "3a000", "5d000", "9a000", "ab000", "ba000", "db000"][self.topo.local(rank) % 8]

    def buf_ptr(self, rank: int, opcount: int, which: int) -> str:
        return f"0x7f{(rank * 7919 + opcount * 104729 + which * 65537) % (1 << 28):07x}00"

    # ---- per-rank comm records -----------------------------------------------------------------
    def records(self, rank: int) -> list[dict]:
        """The rank's enqueued comm calls with FR state and local times."""
        out = []
        for e in self.eng.st[rank].enqueued:
            inst, c = e["inst"], e["call"]
            st = e["state"]
            if st is None:
                st = "completed" if inst.end is not None else "started"
            rec = {"call": c, "inst": inst, "state": st, "created": self.local(rank, e["cpu"])}
            if st in ("started", "completed") and rank in inst.arrivals:
                rec["started"] = self.local(rank, inst.arrivals[rank])
            if st == "completed":
                rec["completed"] = self.local(rank, inst.end) + 40_000
            out.append(rec)
        return out


def write_job(job: Job, out: Path) -> dict:
    """Write traces, NCCL logs, stderr, FR dumps and expected.json into `out`; return expected."""
    out.mkdir(parents=True, exist_ok=True)
    cfg, topo, eng = job.cfg, job.topo, job.eng
    hung = eng.hung()
    files = {"traces": [], "nccl_logs": [], "stderr": [], "flight_recorder": []}
    if cfg["trace"]["write"] and not hung:
        for r in range(topo.world):
            name = f"rank{r}.pt.trace.json.gz"
            KinetoWriter(job, r).write(out / name)
            files["traces"].append(name)
    watchdog = {}
    if hung:
        watchdog = _watchdogs(job)
    log_mode = cfg["nccl"]["log"]
    for r in range(topo.world):
        st = eng.st[r]
        if log_mode != "none":
            w = NcclLogWriter(job, r)
            lines = w.build()
            if log_mode == "coll":
                opc: dict = {}
                for rec in st.enqueued:
                    c = rec["call"]
                    n = opc.get(c.pg, 0)
                    opc[c.pg] = n + 1
                    for ln in w.coll_line(c, n, r):
                        w.info(ln)
            if st.halted == "crashed":
                when = job.local(r, st.halt_time)
                w.warn("enqueue.cc:1556", "Cuda failure 'an illegal memory access was encountered'", when)
                w.info("enqueue.cc:1556 -> 1")
            (out / f"nccl_rank{r}.log").write_text("\n".join(lines) + "\n")
            files["nccl_logs"].append(f"nccl_rank{r}.log")
        if hung:
            err = []
            if r in watchdog:
                err = watchdog[r]["lines"]
            elif st.halted == "crashed":
                err = crash_lines(job, r, job.local(r, st.halt_time))
            (out / f"stderr_rank{r}.log").write_text("\n".join(err) + ("\n" if err else ""))
            files["stderr"].append(f"stderr_rank{r}.log")
            if st.halted != "crashed":
                dump = fr_dump(job, r, job.records(r))
                fmt = cfg["flight_recorder"]["format"]
                if fmt in ("json", "both"):
                    (out / f"nccl_trace_rank_{r}.json").write_text(json.dumps(dump))
                    files["flight_recorder"].append(f"nccl_trace_rank_{r}.json")
                if fmt in ("pickle", "both"):
                    (out / f"nccl_trace_rank_{r}").write_bytes(pickle.dumps(dump, protocol=2))
                    files["flight_recorder"].append(f"nccl_trace_rank_{r}")
    exp = expected(job, files, watchdog)
    (out / "expected.json").write_text(dump_expected(exp))
    return exp


def dump_expected(exp: dict) -> str:
    """One top-level key per line, one list item per line: diffable and small."""
    parts = []
    for k, v in exp.items():
        if isinstance(v, list) and v and isinstance(v[0], dict):
            body = "[\n  " + ",\n  ".join(json.dumps(x) for x in v) + "\n ]"
        else:
            body = json.dumps(v)
        parts.append(f" {json.dumps(k)}: {body}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def _watchdogs(job: Job) -> dict:
    """For each rank with unfinished work: the oldest pending work times out first and takes the process down."""
    to_ns = job.cfg["nccl"]["timeout_ms"] * 1_000_000
    rng = random.Random(job.cfg["seed"] * 57 + 11)
    out = {}
    for s in job.eng.st:
        if s.halted:
            continue
        recs = job.records(s.rank)
        pend = [x for x in recs if x["state"] != "completed"]
        if not pend:
            continue
        p = min(pend, key=lambda x: x["created"])
        fire = p["created"] + to_ns + rng.randrange(2, 40) * 1_000_000 + rng.randrange(1_000_000)
        ran_ms = (fire - p["created"]) // 1_000_000
        pgrecs = [x for x in recs if x["call"].pg == p["call"].pg and not x["call"].is_p2p]
        enq = max(x["call"].seq for x in pgrecs)
        comp = max([x["call"].seq for x in pgrecs if x["state"] == "completed"] or [-1])
        out[s.rank] = {"lines": watchdog_lines(job, s.rank, p, enq, comp, fire, ran_ms),
                       "process_group": p["call"].pg, "seq": p["call"].seq, "last_enqueued": enq,
                       "last_completed": comp}
    return out


def expected(job: Job, files: dict, watchdog: dict) -> dict:
    cfg, topo, eng = job.cfg, job.topo, job.eng
    hung = eng.hung()
    colls, p2p = truth.collectives(eng, job.local)
    faults = []
    for f in cfg["faults"]:
        e = {k: v for k, v in f.items() if k not in ("role",)}
        e.setdefault("ranks", _fault_ranks(job, f))
        if f["kind"] == "tp_cross_host":
            e["process_groups"] = sorted({job.topo.group_of("tp", r).name for r in e["ranks"]}, key=int)
        elif f["kind"] in ("small_buckets", "no_overlap", "straggler", "uneven_last_batch") and "dp" in job.topo.by_role:
            e["process_groups"] = sorted({job.topo.group_of("dp", r).name for r in e["ranks"]}, key=int)
        elif f["kind"] == "moe_imbalance":
            e["process_groups"] = sorted({job.topo.group_of("ep", r).name for r in e["ranks"]}, key=int)
        if len(e.get("process_groups", [])) == 1:
            e["process_group"] = e["process_groups"][0]
        if f["kind"] == "data_loader_stall":
            e.setdefault("steps", [cfg["first_step"] + i for i in range(cfg["steps"])])
        if f["kind"] == "uneven_last_batch":
            e["step"] = cfg["first_step"] + cfg["steps"] - 1
        faults.append(e)
    return {
        "schema_version": 1,
        "scenario": cfg["name"], "description": cfg["description"], "seed": cfg["seed"],
        "world_size": topo.world, "gpus_per_host": cfg["gpus_per_host"], "hosts": cfg["hostnames"],
        "rank_host": [job.hostname(r) for r in range(topo.world)],
        "rank_local_gpu": [topo.local(r) for r in range(topo.world)],
        "parallel": {k: cfg["parallel"][k] for k in ("tp", "pp", "dp", "ep", "order")},
        "rank_coords": [{k: c[k] for k in ("tp", "dp", "pp")} for c in topo.coords],
        "schedule": {k: cfg["schedule"][k] for k in ("kind", "microbatches", "virtual_stages", "bucket_mb", "overlap",
                                                     "tp_comm", "moe") + (("tp_overlap",) if cfg["schedule"].get("tp_overlap")
                                                                          else ())},
        "nccl_version": cfg["nccl"]["version"], "trace_format": cfg["trace"]["format"],
        "network": cfg["network"]["inter"], "socket_ifname": cfg["nccl"]["socket_ifname"],
        "time_unit": "ns", "clock_convention": CONVENTION,
        "clock_offsets_ns": {str(r): job.offset(r) for r in range(topo.world)},
        "steps": [cfg["first_step"] + i for i in range(cfg["steps"])],
        "files": files,
        "process_groups": truth.process_groups(eng),
        "rank_step_metrics": [] if hung else truth.step_metrics(eng, job.local),
        "pipeline": [] if hung else truth.pipeline(eng),
        "collectives": colls,
        "p2p": p2p,
        "hang": truth.hang(eng, _culprits(cfg)) if hung else None,
        "watchdog": {str(r): {k: v for k, v in w.items() if k != "lines"} for r, w in sorted(watchdog.items())},
        "faults": faults,
        **({"memory": _memory_truth(job)} if cfg["trace"].get("memory") else {}),
    }


def _memory_truth(job: Job) -> dict:
    from simulator.memory import truth as memory_truth
    return memory_truth(job)


def _culprits(cfg: dict) -> list[int]:
    kinds = ("mismatched_op", "mismatched_size", "mismatched_dtype", "extra_collective", "skipped_collective",
             "stalled_rank", "crashed_rank")
    return sorted({r for f in cfg["faults"] if f["kind"] in kinds for r in f["ranks"]})


def _fault_ranks(job: Job, f: dict) -> list[int]:
    k = f["kind"]
    if k == "tp_cross_host":
        return sorted({r for r in range(job.topo.world) if len(job.topo.group_of("tp", r).hosts) > 1})
    if k == "slow_link":
        return [r for r in range(job.topo.world) if job.topo.host(r) in f.get("hosts", [1])]
    return list(range(job.topo.world))
