"""Per-process state while reading an NCCL log, and the final tables (with rank mapping).

Records arrive already classified (see nccl_log.classify_line); this module only accumulates rows and,
at the end, resolves versions, devices and global ranks per process.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from parsers.nccl_envelope import MAX_LINE_BYTES, NO_TAG, LauncherTag, int64, parse_launcher
from parsers.nccl_messages import IB_DEV, iface_matches, normalise_transport
from parsers.table import Table, objects
from parsers.watchdog_log import COLUMNS as WATCHDOG_COLUMNS

PROCESS_COLUMNS = ("host", "pid", "cuda_dev", "nccl_version", "launcher_rank", "rank", "rank_source",
                   "launcher", "version_source", "nccl_version_min", "first_line")
COMM_COLUMNS = ("host", "pid", "comm", "comm_id", "rank", "nranks", "nnodes", "local_ranks", "cuda_dev", "bus_id",
                "nvml_dev", "parent", "split_color", "split_key", "line", "init_fn", "job_rank", "complete",
                "global_rank")
CONN_COLUMNS = ("host", "pid", "comm", "channel", "src_rank", "dst_rank", "transport", "detail", "line",
                "conn_index", "direction", "src_dev", "dst_dev", "tid")
NET_COLUMNS = ("host", "pid", "network", "interface", "address", "line", "role", "detail")
ENV_COLUMNS = ("host", "pid", "name", "value", "line")
COLL_COLUMNS = ("host", "pid", "comm", "op", "op_count", "count", "datatype", "red_op", "root", "nranks", "line",
                "tid", "stream", "comm_id", "rank")
CHANNEL_COLUMNS = ("host", "pid", "coll", "collnet", "nvls", "p2p", "p2p_per_peer", "line")
WARN_COLUMNS = ("host", "pid", "src_file", "src_line", "message", "line", "timestamp", "tid", "func", "level",
                "chain", "result_code")
_INT_COLS = {"pid", "cuda_dev", "launcher_rank", "rank", "nranks", "nnodes", "local_ranks", "nvml_dev", "split_color",
             "split_key", "line", "job_rank", "global_rank", "channel", "src_rank", "dst_rank", "conn_index", "tid",
             "op_count", "count", "datatype", "red_op", "root", "src_line", "result_code", "first_line", "seq",
             "failed_seq", "pg_id", "numel_in", "numel_out", "timeout_ms", "ran_for_ms"}
_MAX_CHAIN = 64
#: Distinct (host, pid) processes one log may introduce: a node's log holds a few, a merged log of a large job
#: thousands. Lines of further processes are skipped and counted (each process costs a few KB of state).
MAX_PROCESSES = 1 << 16
_MAX_SAMPLES = 5

# Minimum NCCL version implied by a line shape (reference §0).
_V_START, _V_FN, _V_JOBRANK, _V_COMMID, _V_SHAPE = "2.18.3", "2.21", "2.29", "2.16", "2.20"


def _ver_key(v: str) -> tuple[int, ...]:
    """Sortable tuple of a dotted version string."""
    return tuple(int(x) for x in re.findall(r"\d{1,9}", v)[:3])  # bounded: no 5000-digit int()


@dataclass(slots=True)
class _Proc:
    """What one (host, pid) has told us so far."""

    first_line: int
    devs_main: Counter = field(default_factory=Counter)
    devs_any: Counter = field(default_factory=Counter)
    init_devs: Counter = field(default_factory=Counter)
    tags: Counter = field(default_factory=Counter)
    version: str = ""
    min_version: str = ""
    has_start: bool = False
    open_comms: dict = field(default_factory=dict)  # insertion-ordered set: O(1) add/remove
    pending_conn: list = field(default_factory=list)
    last_coll_comm: str = ""
    warn_group: list = field(default_factory=list)
    tests_rank: int = -1


class LogState:
    """Accumulates rows of every table; `build` turns them into tables (parsers/table.py)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.procs: dict[tuple[str, int], _Proc] = {}
        self.comms: list[dict] = []
        self.comm_index: dict[tuple[str, int, str], int] = {}
        self.conns: list[list] = []
        self.nets: list[tuple] = []
        self.envs: list[tuple] = []
        self.chans: list[tuple] = []
        self.colls: list[tuple] = []
        self.warns: list[dict] = []
        self.wd: list[dict] = []
        self.families: Counter = Counter()
        self.unrecognised = 0
        self.unrec_samples: list[tuple[int, str]] = []
        self.bad_utf8 = 0
        self.cut: list[tuple[int, str]] = []
        self.joined: list[int] = []
        self.pid_versions: dict[int, str] = {}
        self.rank_versions: dict[int, str] = {}
        self.file_versions: Counter = Counter()
        self._tag_cache: dict[str, LauncherTag] = {}
        self.rejected: list[str] = []  # raw integers `int64` refused, not yet attributed to a line
        self.out_of_range = 0  # integers in lines that do not fit int64 (stored as -1)
        self.out_of_range_line = 0  # first line holding one
        self.line_errors = 0  # lines whose handling failed unexpectedly (counted as unrecognised)
        self.first_line_error: tuple[int, str, str] | None = None  # (line, exception, text)
        self.long_lines = 0  # physical lines cut to MAX_LINE_BYTES
        self.over_procs = 0  # lines of processes beyond MAX_PROCESSES, skipped
        self.first_over_procs = 0
        self.first_long_line = 0

    # ---------------------------------------------------------------- helpers
    def count(self, family: str) -> None:
        """Count one recognised line of a family."""
        self.families[family] += 1

    def note_out_of_range(self, lineno: int, n: int) -> None:
        """Count integers of one line that did not fit int64 (their columns hold -1)."""
        if n > 0:
            if not self.out_of_range:
                self.out_of_range_line = lineno
            self.out_of_range += n

    def note_line_error(self, lineno: int, text: str, exc: BaseException) -> None:
        """A line whose handling raised: count it as unrecognised and keep the first failure for the warning."""
        self.unrecognised += 1
        self.line_errors += 1
        if self.first_line_error is None:
            self.first_line_error = (lineno, f"{exc.__class__.__name__}: {str(exc)[:80]}", text[:120])

    def note_long_line(self, lineno: int) -> None:
        """Count one line that was cut to the line-length limit."""
        if not self.long_lines:
            self.first_long_line = lineno
        self.long_lines += 1

    def note_unrecognised(self, lineno: int, text: str) -> None:
        """Keep a few unrecognised lines for the message."""
        if len(self.unrec_samples) < _MAX_SAMPLES:
            self.unrec_samples.append((lineno, text[:120]))

    def _tag(self, prefix: str) -> LauncherTag:
        """Parse a launcher prefix, cached (prefixes repeat on every line)."""
        if not prefix:
            return NO_TAG
        tag = self._tag_cache.get(prefix)
        if tag is None:
            tag = parse_launcher(prefix)
            if len(self._tag_cache) < 4096 and len(prefix) <= 256 and not _lost_number(tag):
                self._tag_cache[prefix] = tag
        return tag

    def _proc(self, host: str, pid: int, lineno: int) -> _Proc | None:
        """The state of one process, created on first sight; None past MAX_PROCESSES (the line is counted)."""
        key = (host, pid)
        p = self.procs.get(key)
        if p is None:
            if len(self.procs) >= MAX_PROCESSES:
                if not self.over_procs:
                    self.first_over_procs = lineno
                self.over_procs += 1
                return None
            p = self.procs[key] = _Proc(first_line=lineno)
        return p

    @staticmethod
    def _hint(p: _Proc, v: str) -> None:
        """Raise a process's minimum NCCL version implied by a line shape."""
        if not p.min_version or _ver_key(v) > _ver_key(p.min_version):
            p.min_version = v

    # ---------------------------------------------------------------- NCCL lines
    def add_nccl(self, lineno: int, env: re.Match, family: str, mm: re.Match | None) -> None:
        """Record one enveloped NCCL line."""
        self.families[family] += 1
        launcher, _ts, host, pid_s, tid_s, dev = env.groups()[:6]
        pid, tid = int64(pid_s), int64(tid_s)
        p = self._proc(host, pid, lineno)
        if p is None:
            return
        if dev is not None:
            (p.devs_main if tid == pid else p.devs_any)[int64(dev)] += 1
        tag = self._tag(launcher) if launcher else NO_TAG
        if tag.rank >= 0:
            p.tags[(tag.kind, tag.rank)] += 1
        elif tag.kind != "none":
            p.tags[(tag.kind, -1)] += 1
        if family not in ("warn", "errchain"):
            p.warn_group = []
        if family == "coll":
            self._coll(lineno, host, pid, tid, p, mm)
        elif family in ("init", "init_old"):
            self._init(lineno, host, pid, p, mm, family)
        elif family == "comm_shape":
            self._shape(lineno, host, pid, p, mm)
        elif family == "connection":
            self._conn(lineno, host, pid, tid, p, mm)
        elif family == "warn":
            self._warn(lineno, host, pid, tid, p, env, tag)
        elif family == "errchain":
            for i in p.warn_group:
                w = self.warns[i]
                if len(w["chain"]) < _MAX_CHAIN:
                    w["chain"].append(env.group("msg"))
                if w["result_code"] < 0:
                    w["result_code"] = int64(mm.group("code"))
        elif family == "version":
            p.version = mm.group("ver")
        elif family == "env":
            val = mm.group("val").strip()
            if val.endswith(".") and len(val) > 1:
                val = val[:-1]
            self.envs.append((host, pid, mm.group("var"), val, lineno))
        elif family == "channels":
            g = mm.groupdict()
            self.chans.append((host, pid, int64(g["coll"]), int64(g["collnet"] or "-1"), int64(g["nvls"] or "-1"),
                               int64(g["p2p"]), int64(g["p2ppeer"]), lineno))
        elif family in ("using_network", "bootstrap", "net_socket", "net_ib"):
            self._net(lineno, host, pid, family, mm)
        elif family == "cut":
            self.cut.append((lineno, env.group(0)[:120]))

    def _coll(self, lineno, host, pid, tid, p, m) -> None:
        """One COLL record."""
        op, opcount, _sb, _rb, count, dtype, redop, root, comm, nr, stream = m.groups()[:11]
        p.last_coll_comm = comm
        self.colls.append((host, pid, comm, op, int64(opcount, 16), int64(count), int64(dtype), int64(redop), int64(root),
                           int64(nr), lineno, tid, stream or ""))

    def _init(self, lineno, host, pid, p, m, family) -> None:
        """Init START/COMPLETE (all eras): create or update the communicator row."""
        gd = m.groupdict()
        comm = gd["comm"]
        complete = family == "init_old" and bool(gd.get("done")) or gd.get("phase") == "COMPLETE"
        if family == "init":
            if gd["phase"] == "START":
                p.has_start = True
                self._hint(p, _V_START)
            if gd["fn"]:
                self._hint(p, _V_FN)
            if gd["jobrank"]:
                self._hint(p, _V_JOBRANK)
            if gd["commId"]:
                self._hint(p, _V_COMMID)
            if gd["nvmlDev"] and gd["busId"]:
                self._hint(p, _V_START)
            elif gd["busId"]:
                self._hint(p, "2.5")
        else:
            self._hint(p, "2.4" if gd.get("cudaDev") else "2.3")
        key = (host, pid, comm)
        idx = self.comm_index.get(key)
        row = self.comms[idx] if idx is not None else None
        new_vals = dict(rank=int64(gd["rank"]), nranks=int64(gd["nranks"]), comm_id=gd.get("commId") or "")
        if row is not None and (row["complete"] or row["rank"] != new_vals["rank"] or row["nranks"] != new_vals["nranks"]
                                or (new_vals["comm_id"] and row["comm_id"] and row["comm_id"] != new_vals["comm_id"])):
            if not (row["complete"] and complete and row["rank"] == new_vals["rank"]
                    and row["nranks"] == new_vals["nranks"] and row["comm_id"] == new_vals["comm_id"]):
                row = None  # a destroyed pointer reused, or a different communicator
        if row is None:
            row = dict(host=host, pid=pid, comm=comm, comm_id="", rank=-1, nranks=-1, nnodes=-1, local_ranks=-1,
                       cuda_dev=-1, bus_id="", nvml_dev=-1, parent="", split_color=-1, split_key=-1, line=lineno,
                       init_fn="", job_rank=-1, complete=False, global_rank=-1)
            self.comm_index[key] = len(self.comms)
            self.comms.append(row)
        row.update(rank=new_vals["rank"], nranks=new_vals["nranks"])
        if new_vals["comm_id"]:
            row["comm_id"] = new_vals["comm_id"]
        if gd.get("cudaDev") is not None:
            row["cuda_dev"] = int64(gd["cudaDev"])
            p.init_devs[row["cuda_dev"]] += 1
        if gd.get("nvmlDev") is not None:
            row["nvml_dev"] = int64(gd["nvmlDev"])
        if gd.get("busId"):
            row["bus_id"] = gd["busId"]
        if gd.get("parent"):
            row["parent"] = gd["parent"]
        if gd.get("color") is not None:
            row["split_color"], row["split_key"] = int64(gd["color"]), int64(gd["key"])
        if gd.get("fn"):
            row["init_fn"] = gd["fn"]
        if gd.get("jobrank"):
            row["job_rank"] = int64(gd["jobrank"])
        if complete:
            row["complete"] = True
            p.open_comms.pop(comm, None)
            if not p.has_start and p.pending_conn:
                for ci in p.pending_conn:
                    c = self.conns[ci]
                    if c[4] < row["nranks"] and c[5] < row["nranks"]:
                        c[2] = comm
                p.pending_conn = []
        elif comm not in p.open_comms:
            p.open_comms[comm] = None

    def _shape(self, lineno, host, pid, p, m) -> None:
        """2.20+ `nRanks nNodes localRanks` line: fill the communicator's shape."""
        self._hint(p, _V_SHAPE)
        key = (host, pid, m.group("comm"))
        idx = self.comm_index.get(key)
        rank = int64(m.group("rank"))
        if idx is None or (rank >= 0 and self.comms[idx]["rank"] != rank):  # rank -1: unreadable, trust the Init
            row = dict(host=host, pid=pid, comm=m.group("comm"), comm_id="", rank=rank,
                       nranks=int64(m.group("nranks")), nnodes=-1, local_ranks=-1, cuda_dev=-1, bus_id="", nvml_dev=-1,
                       parent="", split_color=-1, split_key=-1, line=lineno, init_fn="", job_rank=-1,
                       complete=False, global_rank=-1)
            self.comm_index[key] = len(self.comms)
            self.comms.append(row)
        else:
            row = self.comms[idx]
        row["nnodes"], row["local_ranks"] = int64(m.group("nNodes")), int64(m.group("localRanks"))

    def _conn(self, lineno, host, pid, tid, p, m) -> None:
        """One connection line; its communicator is inferred from init/COLL order in the same process."""
        transport, detail = normalise_transport(m.group("via"))
        if transport == "P2P/CUMEM":
            self._hint(p, "2.18.1")
        elif transport == "SHM" and detail.startswith("/"):
            self._hint(p, "2.13")
        src, dst = int64(m.group("src")), int64(m.group("dst"))
        comm = ""
        if p.has_start:
            if len(p.open_comms) == 1:
                comm = next(iter(p.open_comms))
            elif not p.open_comms and p.last_coll_comm:
                comm = p.last_coll_comm  # lazy (runtime) connection during the first collective
        row = [host, pid, comm, int64(m.group("ch")), src, dst, transport, detail, lineno,
               int64(m.group("conn")), m.group("dir") or "", m.group("srcdev") or "", m.group("dstdev") or "", tid]
        self.conns.append(row)
        if not p.has_start:
            p.pending_conn.append(len(self.conns) - 1)

    def _warn(self, lineno, host, pid, tid, p, env, tag) -> None:
        """One WARN line; it joins (and extends) the open error chain of its process."""
        msg = env.group("msg") or ""
        for i in p.warn_group:
            if len(self.warns[i]["chain"]) < _MAX_CHAIN:
                self.warns[i]["chain"].append(msg)
        src = env.group("src") or ""
        self.warns.append(dict(host=host, pid=pid, src_file=src, src_line=int64(env.group("srcline")),
                               message=msg, line=lineno, timestamp=env.group("ts") or tag.timestamp, tid=tid,
                               func=env.group("func") or "", level="WARN", chain=[], result_code=-1))
        if len(p.warn_group) < 32:
            p.warn_group.append(len(self.warns) - 1)

    def _net(self, lineno, host, pid, family, m) -> None:
        """Network selection lines → one row per interface/device."""
        if family == "using_network":
            self.nets.append((host, pid, m.group("net"), "", "", lineno, "selected", ""))
        elif family in ("bootstrap", "net_socket"):
            net = "Bootstrap" if family == "bootstrap" else "Socket"
            for im in iface_matches(m.group("ifs")):
                self.nets.append((host, pid, net, im.group("if"), im.group("addr"), lineno,
                                  "bootstrap" if family == "bootstrap" else "net_device", ""))
        else:
            net = m.group("net")
            for dm in IB_DEV.finditer(m.group("devs")):
                extra = "/".join(x for x in (dm.group("link"), dm.group("extra")) if x)
                self.nets.append((host, pid, net, f"{dm.group('dev')}:{dm.group('port')}", "", lineno, "net_device",
                                  extra + ("/RO" if m.group("ro") else "")))
            for im in iface_matches(m.group("oob")):
                self.nets.append((host, pid, net, im.group("if"), im.group("addr"), lineno, "oob", ""))

    # ---------------------------------------------------------------- other lines
    def add_banner(self, lineno: int, text: str, vm: re.Match) -> None:
        """A bare `NCCL version x+cudaY` banner (≤2.21 rank 0 printf, or VERSION level)."""
        self.families["version"] += 1
        tag = self._tag(text[: vm.start()])
        ver = vm.group("ver")
        if tag.pid >= 0:
            self.pid_versions[tag.pid] = ver
        elif tag.rank >= 0 and tag.kind in ("mpi", "srun", "rank_tag", "pytorch"):
            self.rank_versions[tag.rank] = ver
        self.file_versions[ver] += 1

    def add_pytorch(self, lineno: int, prefix: str, rows: list[dict]) -> list[dict]:
        """Watchdog/c10d rows of one line."""
        self.families["pytorch"] += 1
        tag = self._tag(prefix)
        for r in rows:
            r.update(pid=tag.pid, launcher_rank=tag.rank, line=lineno)
            if r["global_rank"] < 0 and tag.kind == "pytorch":
                r["global_rank"] = tag.rank
            if not r["timestamp"]:
                r["timestamp"] = tag.timestamp
            self.wd.append(r)
        return rows

    def add_tests_rank(self, lineno: int, m: re.Match) -> None:
        """nccl-tests `#  Rank N Group G Pid P on HOST device D` header."""
        self.families["nccl_tests"] += 1
        host, pid = m.group("host"), int64(m.group("pid"))
        p = self._proc(host, pid, lineno)
        if p is None:
            return
        p.tests_rank = int64(m.group("rank"))
        p.init_devs[int64(m.group("dev"))] += 1

    def add_tests_fail(self, lineno: int, text: str, m: re.Match) -> None:
        """nccl-tests `Test NCCL failure file:line 'reason'`."""
        self.families["nccl_tests"] += 1
        host = text[: m.start()].strip().rstrip(":").strip()
        self.warns.append(dict(host=host if " " not in host else "", pid=-1, src_file=m.group("file"),
                               src_line=int64(m.group("line")), message=f"Test NCCL failure '{m.group('why')}'",
                               line=lineno, timestamp="", tid=-1, func="", level="TEST_FAILURE", chain=[],
                               result_code=-1))

    # ---------------------------------------------------------------- tables
    def _unglue_hosts(self) -> dict[tuple[str, int], str]:
        """Hosts like `12nodeB` come from a glued `…:11:12nodeB:21:22` fragment: map them to the real `nodeB`."""
        fix = {}
        by_pid: dict[int, list[str]] = {}
        for host, pid in self.procs:
            by_pid.setdefault(pid, []).append(host)
        for host, pid in list(self.procs):
            if not host[:1].isdigit():
                continue
            for h2 in by_pid[pid]:
                if (h2, pid) in self.procs and h2 != host and host.endswith(h2) and host[: len(host) - len(h2)].isdigit():
                    fix[(host, pid)] = h2
                    src, dst = self.procs.pop((host, pid)), self.procs[(h2, pid)]
                    for name in ("devs_main", "devs_any", "init_devs", "tags"):
                        getattr(dst, name).update(getattr(src, name))
                    dst.first_line = min(dst.first_line, src.first_line)
                    break
        return fix

    def build(self, n_lines: int, cls):
        """Resolve per-process identity and return the NcclLog."""
        fix = self._unglue_hosts()
        if fix:
            self.comms = [dict(r, host=fix.get((r["host"], r["pid"]), r["host"])) for r in self.comms]
            self.warns = [dict(r, host=fix.get((r["host"], r["pid"]), r["host"])) for r in self.warns]
            self.conns = [[fix.get((r[0], r[1]), r[0])] + r[1:] for r in self.conns]
            self.nets = [(fix.get((r[0], r[1]), r[0]),) + r[1:] for r in self.nets]
            self.envs = [(fix.get((r[0], r[1]), r[0]),) + r[1:] for r in self.envs]
            self.chans = [(fix.get((r[0], r[1]), r[0]),) + r[1:] for r in self.chans]
            self.colls = [(fix.get((r[0], r[1]), r[0]),) + r[1:] for r in self.colls]
        comms = _frame(self.comms, COMM_COLUMNS)
        procs = self._processes(comms)
        if len(comms):
            g = dict(zip(zip(procs["host"], procs["pid"]), procs["rank"]))
            comms["global_rank"] = [int(g.get((h, p), -1)) for h, p in zip(comms["host"], comms["pid"])]
        conns = _frame(self.conns, CONN_COLUMNS)
        colls = _frame([r + ("", -1) for r in self.colls], COLL_COLUMNS)
        if len(colls) and len(comms):
            colls = _attach_comm(colls, comms)
        for w in self.warns:
            w["chain"] = "\n".join(w["chain"])
        return cls(
            path=self.path, processes=procs, communicators=comms, connections=conns,
            networks=_frame(self.nets, NET_COLUMNS), env=_frame(self.envs, ENV_COLUMNS), colls=colls,
            warns=_frame(self.warns, WARN_COLUMNS), watchdog=_frame(self.wd, WATCHDOG_COLUMNS),
            unrecognised=self.unrecognised, n_lines=n_lines, warnings=self._warnings(n_lines),
            family_counts=dict(self.families), channels=_frame(self.chans, CHANNEL_COLUMNS),
        )

    def _processes(self, comms: Table) -> Table:
        """One row per (host, pid): device, version, launcher rank and global rank with its source."""
        maxn = int(comms["nranks"].max()) if len(comms) else -1
        hosts = {h for h, _ in self.procs}
        single_file_ver = next(iter(self.file_versions)) if len(self.file_versions) == 1 else ""
        rows = []
        by_proc: dict[tuple[str, int], list[tuple[int, int, int]]] = {}  # (line, rank, nranks) per process
        for h, pd_, ln, rk, nr in zip(comms["host"], comms["pid"], comms["line"], comms["rank"], comms["nranks"]):
            by_proc.setdefault((h, int(pd_)), []).append((int(ln), int(rk), int(nr)))
        for (host, pid), p in self.procs.items():
            dev = _mode(p.init_devs) if p.init_devs else _mode(p.devs_main) if p.devs_main else _mode(p.devs_any)
            ranked = Counter({k: v for k, v in p.tags.items() if k[1] >= 0})
            lkind, lrank = max(ranked, key=ranked.get) if ranked else (
                max(p.tags, key=p.tags.get)[0] if p.tags else "none", -1)
            ver, vsrc = p.version, "banner" if p.version else ""
            if not ver and pid in self.pid_versions:
                ver, vsrc = self.pid_versions[pid], "launcher_pid"
            if not ver and lrank in self.rank_versions and lkind in ("mpi", "srun", "rank_tag", "pytorch"):
                ver, vsrc = self.rank_versions[lrank], "launcher_rank"
            if not ver and single_file_ver:
                ver, vsrc = single_file_ver, "file"
            mine = by_proc.get((host, pid), [])
            world = list(dict.fromkeys(rk for _, rk, nr in mine if nr == maxn))
            if len(world) == 1:
                rank, src = int(world[0]), "world_comm"
            elif lrank >= 0 and lkind in ("pytorch", "mpi", "srun", "rank_tag"):
                rank, src = lrank, f"launcher:{lkind}"
            elif p.tests_rank >= 0:
                rank, src = p.tests_rank, "nccl_tests"
            elif mine:
                rank, src = min(mine, key=lambda x: x[0])[1], "first_comm"
            elif lrank >= 0 and lkind == "torchrun" and len(hosts) == 1:
                rank, src = lrank, "launcher:torchrun"
            else:
                rank, src = -1, "unknown"
            rows.append((host, pid, dev, ver, lrank, rank, src, lkind, vsrc, p.min_version, p.first_line))
        return _frame(rows, PROCESS_COLUMNS)

    def _warnings(self, n_lines: int) -> list[str]:
        """Human messages about what could not be read."""
        out = []
        if n_lines == 0:
            out.append(f"{self.path}: empty file, nothing to parse")
        elif not self.families:
            sample = "; ".join(f"line {n}: {t!r}" for n, t in self.unrec_samples[:2])
            out.append(f"{self.path}: no NCCL debug lines (NCCL_DEBUG=INFO) or ProcessGroupNCCL/watchdog lines found "
                       f"in {n_lines} lines" + (f" (e.g. {sample})" if sample else ""))
        if self.bad_utf8:
            out.append(f"{self.path}: {self.bad_utf8} lines hold bytes that are not UTF-8 (replaced by U+FFFD)")
        if self.cut:
            n, t = self.cut[0]
            out.append(f"{self.path}: {len(self.cut)} lines look cut off and were not fully read "
                       f"(first at line {n}: {t!r})")
        n_bad = self.out_of_range + len(self.rejected)  # the latter only from the table builder's safety net
        if n_bad:
            where = f"first at line {self.out_of_range_line}" if self.out_of_range else "line unknown"
            out.append(f"{self.path}: {n_bad} values out of range ignored, {where} "
                       "(integers that do not fit 64 bits are stored as -1)")
        if self.first_line_error is not None:
            n, why, t = self.first_line_error
            out.append(f"{self.path}: {self.line_errors} lines could not be handled and were skipped "
                       f"(first at line {n}: {why}; {t!r})")
        if self.over_procs:
            out.append(f"{self.path}: more than {MAX_PROCESSES} processes (host:pid) in one log; {self.over_procs} "
                       f"lines of further processes skipped (first at line {self.first_over_procs})")
        if self.long_lines:
            out.append(f"{self.path}: {self.long_lines} lines longer than {MAX_LINE_BYTES} bytes were cut to their "
                       f"first {MAX_LINE_BYTES} bytes (first at line {self.first_long_line})")
        if self.joined:
            out.append(f"{self.path}: {len(self.joined)} wrapped lines were joined with their continuation "
                       f"(first at line {self.joined[0]})")
        return out


def _lost_number(tag: LauncherTag) -> bool:
    """A launcher tag whose rank/pid digits were there but out of range (so it must not be cached uncounted)."""
    return (tag.kind == "ray" and tag.pid < 0) or (tag.kind in ("mpi", "pytorch", "torchrun", "srun", "rank_tag")
                                                  and tag.rank < 0)


def _mode(c: Counter) -> int:
    """Most common key of a counter; -1 when empty."""
    return c.most_common(1)[0][0] if c else -1


def _frame(rows: list, columns: tuple[str, ...]) -> Table:
    """A table with fixed columns (also when empty); integer columns as int64, `complete` as bool."""
    if rows and isinstance(rows[0], dict):
        data = {c: [r.get(c) for r in rows] for c in columns}
    else:
        data = {c: [r[i] if i < len(r) else None for r in rows] for i, c in enumerate(columns)}
    out: dict[str, np.ndarray] = {}
    for c in columns:
        vals = data[c]
        if c in _INT_COLS:
            out[c] = _int64_column(vals)
        elif c == "complete":
            out[c] = np.array([bool(v) for v in vals], dtype=bool)
        else:
            out[c] = _values(vals)
    return Table(out, columns)


def _int64_column(vals: list) -> np.ndarray:
    """Integer cells as int64; signed ints have been range-checked by parsing, anything else (a uint64 that would
    wrap, None, NaN) goes cell by cell through :func:`_fit64`."""
    if all(isinstance(v, (int, np.integer)) for v in vals):
        try:
            return np.array(vals, dtype=np.int64)
        except OverflowError:
            pass
    return np.array([_fit64(v) for v in vals], dtype=np.int64)


def _values(vals: list) -> np.ndarray:
    """A text (or other) column: Python objects, except a column of floats only (as pandas would infer it)."""
    if vals and all(isinstance(v, float) for v in vals):
        return np.array(vals, dtype=float)
    return objects(vals)


def _fit64(v) -> int:
    """One table cell as an int64: -1 when missing, or when it does not fit (then counted as a reject)."""
    if v is None or (isinstance(v, (float, np.floating)) and np.isnan(v)):
        return -1
    if isinstance(v, (float, np.floating)) and np.isfinite(v) and float(v).is_integer():
        v = int(v)
    if isinstance(v, (int, np.integer)):
        return int64(str(int(v)))
    return int64(str(v))


def _attach_comm(colls: Table, comms: Table) -> Table:
    """Give each COLL row the comm_id and comm rank of the latest Init of its pointer in its process (at or
    before the COLL line)."""
    import bisect
    inits: dict[tuple, list[tuple[int, int]]] = {}
    for i, (h, p, c, ln) in enumerate(zip(comms["host"].tolist(), comms["pid"].tolist(), comms["comm"].tolist(),
                                          comms["line"].tolist())):
        inits.setdefault((h, p, c), []).append((ln, i))
    for v in inits.values():
        v.sort()
    lines = {k: [ln for ln, _ in v] for k, v in inits.items()}
    cid_of, rank_of = comms["comm_id"].tolist(), comms["rank"].tolist()
    cid = np.empty(len(colls), dtype=object)
    rank = np.full(len(colls), -1, dtype=np.int64)
    for j, (h, p, c, ln) in enumerate(zip(colls["host"].tolist(), colls["pid"].tolist(), colls["comm"].tolist(),
                                          colls["line"].tolist())):
        k = (h, p, c)
        at = bisect.bisect_right(lines[k], ln) - 1 if k in lines else -1
        if at >= 0:
            i = inits[k][at][1]
            v = cid_of[i]
            cid[j] = "" if v is None or v != v else v
            rank[j] = rank_of[i]
        else:
            cid[j] = ""
    return colls.with_columns(comm_id=cid, rank=rank)[list(COLL_COLUMNS)]
