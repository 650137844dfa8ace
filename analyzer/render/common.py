"""Helpers every renderer shares: severity order and --fail-on, finding locations, number formatting."""
from __future__ import annotations

from typing import Any, Iterable, Optional

from analyzer.render import sanitize
from rules.finding import SEVERITIES, SEVERITY_RANK as _RANK

FAIL_ON = ("error", "warning", "never")


def printable(text: Any) -> str:
    """Input-derived text made safe for any output (`sanitize.clean`); newlines and tabs are kept."""
    return sanitize.clean(text)


def severity_rank(sev: Optional[str]) -> int:
    """0 for error, 1 warning, 2 info, 3 anything else (sorts the worst first)."""
    return _RANK.get(sev or "", 3)


def fails(finding: dict, fail_on: str) -> bool:
    """Does this finding reach the --fail-on level (error | warning | never)?"""
    if fail_on == "never":
        return False
    return severity_rank(finding.get("severity")) <= _RANK[fail_on]


def failing(report: dict, fail_on: str) -> list[dict]:
    """The findings that make the run fail at this --fail-on level."""
    return [f for f in report.get("findings") or [] if fails(f, fail_on)]


def ranges(values: Iterable[int]) -> str:
    """[0,1,2,5,7,8] → '0-2,5,7-8' (long rank lists stay readable)."""
    vals = sorted(set(int(v) for v in values))
    out, i = [], 0
    while i < len(vals):
        j = i
        while j + 1 < len(vals) and vals[j + 1] == vals[j] + 1:
            j += 1
        out.append(str(vals[i]) if i == j else f"{vals[i]}-{vals[j]}")
        i = j + 1
    return ",".join(out)


def pct(x: Optional[float], width: int = 0) -> str:
    """Fraction → '12.3%' ('-' when unknown)."""
    return "-".rjust(width) if x is None else f"{100 * x:.1f}%".rjust(width)


def unsplit_note(summary: dict) -> str:
    """' (+ 54.0% unsplit: …)' after the exposed share when part of the collectives' time lacks a traced member's
    arrival (docs/metrics.md, "Wait and transfer"); '' otherwise."""
    u = summary.get("unsplit_share")
    if not isinstance(u, (int, float)) or u < 0.0005:
        return ""
    return f" (+ {pct(u)} unsplit: wait or transfer, in collectives missing a traced rank)"


def overlap_text(summary: dict) -> str:
    """The two overlap figures, each named for what it is: 'overlap coverage 7.2% of the transfer, HTA overlap
    3.4% (comm kernels)' — the transfer's (docs/metrics.md) and HTA's overlap of communication kernels, the figure
    HTA, TraceLens and Nsight report (only where the ranks have communication kernels)."""
    out = f"overlap coverage {pct(summary.get('overlap_coverage'))} of the transfer"
    if summary.get("hta_overlap_coverage") is not None:
        out += f", HTA overlap {pct(summary.get('hta_overlap_coverage'))} (comm kernels)"
    return out


def has_hta(rows: list) -> bool:
    """Does any per-rank row carry HTA's overlap of communication kernels (GPU traces with comm kernels)?"""
    return any(r.get("hta_overlap_coverage") is not None for r in rows)


def has_unsplit(rows: list) -> bool:
    """Whether any per-rank row has collective time with no known wait/transfer split (an 'unsplit' column)."""
    return any(isinstance(r.get("unsplit_us"), (int, float)) and r["unsplit_us"] > 0 for r in rows)


def ms(us: Optional[float], width: int = 0) -> str:
    """Microseconds → milliseconds with 3 decimals ('-' when unknown)."""
    return "-".rjust(width) if us is None else f"{us / 1000:.3f}".rjust(width)


def num(x: Any, digits: int = 2) -> str:
    """A number compactly ('-' when unknown)."""
    if x is None:
        return "-"
    if isinstance(x, bool):
        return str(x).lower()
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def subject_text(finding: dict) -> str:
    """'ranks 0-3, group pg0, step 12, collective allreduce#7' from a finding's subject."""
    s = finding.get("subject") or {}
    parts = []
    if s.get("ranks"):
        rs = s["ranks"]
        parts.append(("rank " if len(rs) == 1 else "ranks ") + ranges(rs))
    if s.get("process_group") not in (None, ""):
        parts.append(f"group {s['process_group']}")
    if s.get("step") is not None:
        parts.append(f"step {s['step']}")
    if s.get("collective") not in (None, ""):
        parts.append(f"collective {s['collective']}")
    return ", ".join(parts)


def cost_text(finding: dict) -> str:
    """'costs ~12.3% of step time' or '' when the rule gave no estimate."""
    c = finding.get("cost")
    return "" if c is None else f"costs ~{100 * c:.1f}% of step time"


def evidence_texts(finding: dict) -> list[str]:
    """Each evidence item as one line: 'text (file:line)'."""
    out = []
    for e in finding.get("evidence") or []:
        if isinstance(e, str):
            out.append(e)
            continue
        t = str(e.get("text", ""))
        loc = location_text(e.get("file"), e.get("line"))
        out.append(f"{t} ({loc})" if loc else t)
    return out


def location_text(file: Optional[str], line: Optional[int]) -> str:
    """'path:line', 'path' or ''."""
    if not file:
        return ""
    return f"{file}:{line}" if line else str(file)


def finding_location(report: dict, finding: dict) -> tuple[Optional[str], Optional[int]]:
    """The file (and line) a finding points at: its first evidence with a file, else its first rank's trace."""
    for e in finding.get("evidence") or []:
        if isinstance(e, dict) and e.get("file"):
            return str(e["file"]), (int(e["line"]) if e.get("line") else None)
    ranks = (finding.get("subject") or {}).get("ranks") or []
    by_rank = {r.get("rank"): r.get("file") for r in report.get("ranks") or []}
    for r in ranks:
        if by_rank.get(r):
            return str(by_rank[r]), None
    return None, None


def fallback_file(report: dict) -> Optional[str]:
    """The first input file that was read (a location for findings about the whole job)."""
    for f in (report.get("inputs") or {}).get("files") or []:
        if f.get("status") in ("read", "salvaged"):
            return str(f["path"])
    files = (report.get("inputs") or {}).get("files") or []
    return str(files[0]["path"]) if files else None


def rule_catalog(report: dict, rules: Optional[list[dict]] = None) -> list[dict]:
    """Rules as [{id, title, severity, doc}]: the registry's list when given, plus every finding id not in it."""
    out: dict[str, dict] = {}
    for r in rules or []:
        out[str(r["id"])] = {"id": str(r["id"]), "title": r.get("title") or "", "severity": r.get("severity"),
                             "doc": r.get("doc") or ""}
    for f in report.get("findings") or []:
        fid = str(f.get("id", "UNKNOWN"))
        if fid not in out:
            out[fid] = {"id": fid, "title": f.get("title") or "", "severity": f.get("severity"),
                        "doc": f.get("rule_doc") or ""}
    return sorted(out.values(), key=lambda r: r["id"])


def registry_rules() -> list[dict]:
    """Every registered rule as [{id, title, severity, doc}] from the `rules` package, [] when it lists none."""
    try:
        import rules.registry as reg  # type: ignore[import-not-found]
    except Exception:
        return []
    items: Any = None
    for name in ("all_rules", "list_rules", "registered"):
        fn = getattr(reg, name, None)
        if callable(fn):
            try:
                items = fn()
                break
            except Exception:
                items = None
    if items is None:
        items = getattr(reg, "RULES", None) or getattr(reg, "REGISTRY", None)
    if isinstance(items, dict):
        items = list(items.values())
    out = []
    for r in items or []:
        rid = getattr(r, "id", None) or (r.get("id") if isinstance(r, dict) else None)
        if not rid:
            continue
        get = (lambda k: r.get(k)) if isinstance(r, dict) else (lambda k: getattr(r, k, None))
        doc = get("doc") or get("__doc__") or getattr(get("func") or get("fn"), "__doc__", None) or ""
        out.append({"id": str(rid), "title": get("title") or "", "severity": get("severity"), "doc": str(doc).strip()})
    return out


def consequence_lines(finding: dict) -> list[str]:
    """What a root cause explains, one line each: 'WARNING LOAD001 Rank 7 is a straggler [rank 7]'."""
    out = []
    for c in finding.get("consequences") or []:
        subj = subject_text({"subject": c.get("subject") or {"ranks": c.get("ranks") or []}})
        line = f"{str(c.get('severity') or '').upper()} {c.get('id', '')} {c.get('title', '')}".strip()
        out.append(line + (f" [{subj}]" if subj else ""))
    return out


def explained_by(report: dict, rule_id: str, rank: Optional[int] = None) -> Optional[str]:
    """The id of the root finding that lists ``rule_id`` (about ``rank``) among its consequences, if any."""
    for f in report.get("findings") or []:
        for c in f.get("consequences") or []:
            if c.get("id") == rule_id and (rank is None or rank in (c.get("ranks") or [])):
                return str(f.get("id"))
    return None


def skipped_summary(report: dict, examples: int = 3) -> list[tuple[str, int, list[str]]]:
    """Skipped inputs by reason, the most frequent first: (reason, count, the first few paths)."""
    inputs = report.get("inputs") or {}
    rows = inputs.get("skipped_by_reason")
    if rows is None:  # a report from before skipped_by_reason: group here
        by: dict[str, list[str]] = {}
        for f in inputs.get("files") or []:
            if f.get("status") == "skipped":
                by.setdefault(str(f.get("message") or "skipped"), []).append(str(f.get("path")))
        rows = [{"reason": k, "count": len(v), "examples": v} for k, v in by.items()]
        rows.sort(key=lambda r: (-r["count"], r["reason"]))
    return [(str(r["reason"]), int(r["count"]), [str(p) for p in (r.get("examples") or [])[:examples]])
            for r in rows]


def nothing_analysed(report: dict) -> Optional[str]:
    """Why nothing was analysed, or None when something was."""
    if report.get("analysed", True):
        return None
    return str(report.get("nothing_analysed") or "no input could be read")


def mb(nbytes: Optional[float]) -> str:
    """Bytes as decimal megabytes with 3 decimals ('-' when unknown)."""
    return "-" if nbytes is None else f"{nbytes / 1e6:.3f}"


def schedule_name(pipe: dict) -> str:
    """The pipeline schedule as inferred ('zbv', 'looped_bfs', 'interleaved_1f1b'), else the coarse family."""
    inferred = str(((pipe.get("inference") or {}).get("schedule")) or "")
    return inferred if inferred and inferred != "unknown" else str(pipe.get("schedule") or "unknown")


def pipeline_shape(pipe: dict) -> str:
    """'zbv, p=2 v=2 m=8' (v only when the stages hold several chunks)."""
    v = pipe.get("v")
    return (f"{schedule_name(pipe)}, p={pipe.get('p')}" + (f" v={v}" if isinstance(v, int) and v > 1 else "")
            + f" m={pipe.get('m')}")


def group_role(g: dict) -> str:
    """A process group's role as the group tables show it: 'world (as ep)' when the world group is judged by
    the traffic it carries (cross_rank.process_groups judged_role), so the role a finding names is in the table."""
    role, judged = str(g.get("role") or ""), g.get("judged_role")
    if not judged or str(judged) in (role, "unknown"):  # traffic that says nothing (broadcasts only) adds nothing
        return role
    return f"{role} (as {judged})"


def job_shape(report: dict) -> str:
    """'dp=2 × tp=2 (from pg_desc mesh_dp, mesh_tp) (pipeline 1f1b, p=2 m=4)': the layout's mesh where it found
    one (report ``mesh``), else the process-group roles; groups of one rank say nothing. Raw input text (group
    descriptions): each renderer escapes it for its format."""
    cr = report.get("cross_rank") or {}
    mesh = report.get("mesh") or {}
    parts: list[str] = []
    if mesh.get("dims") and mesh.get("text"):
        parts.append(str(mesh["text"]))
    else:
        sizes: dict[str, int] = {}
        for g in cr.get("process_groups") or []:
            role = g.get("role")
            if role in ("tp", "dp", "fsdp", "pp", "ep") and g.get("size") and int(g["size"]) > 1:
                sizes[role] = max(sizes.get(role, 0), int(g["size"]))
        parts = [f"{k}={v}" for k, v in sizes.items()]
    pipe = cr.get("pipeline") or {}
    if pipe.get("detected"):
        parts.append(f"(pipeline {pipeline_shape(pipe)})")
    return " ".join(parts)


def confidence_text(f: dict) -> str:
    """'confidence 50% (that rank 7 is the rank the others wait for …; not higher: …)': the figure and, where
    the rule says it (findings[].confidence_basis), what it is of and why it is not higher; '' without one."""
    c = f.get("confidence")
    if c is None:
        return ""
    basis = f.get("confidence_basis")
    return f"confidence {c:.0%}" + (f" ({basis})" if basis else "")


#: the breakdown's idle parts as the reports name them (report.breakdown, analyzer/report/breakdown.py)
IDLE_PART_LABELS = (("host", "host"), ("peer", "peer"), ("kernel_wait", "launch"), ("other", "other"))


def breakdown_table(report: dict) -> tuple[list[str], list[list[str]], str]:
    """(headers, rows, note) of the per-rank time breakdown: step time split into compute / non-compute
    (communication or memory work alone) / idle, the idle split by what it waited for, and (GPU traces) the
    kernel time per class; ([], [], "") when the report has none."""
    b = report.get("breakdown") or {}
    rows = b.get("per_rank") or []
    if not rows:
        return [], [], ""
    gpu = b.get("device") != "cpu"
    classes = [c for c in ("compute", "comm", "memcpy", "memset") if any(c in (r.get("kernel_us") or {})
                                                                          for r in rows)] if gpu else []
    headers = ["rank", "step ms", "compute%", "non-comp%", "idle%"] + \
        [f"{label}%" for _, label in IDLE_PART_LABELS] + [f"k.{c}%" for c in classes]
    body = []
    for r in rows:
        sh = r.get("shares") or {}
        n = max(1, int(r.get("steps") or 1))
        body.append([str(r.get("rank")), ms((r.get("step_us") or 0) / n), pct(sh.get("compute")),
                     pct(sh.get("non_compute")), pct(sh.get("idle"))]
                    + [pct(sh.get(f"idle_{k}")) if r.get("idle_split") else "-" for k, _ in IDLE_PART_LABELS]
                    + [pct(sh.get(f"kernel_{c}")) if c in (r.get("kernel_us") or {}) else "-" for c in classes])
    device = "GPU" if gpu else "CPU"
    note = (f"Shares of each rank's step time (step ms: mean per step), as HTA's temporal breakdown: compute = "
            f"some compute running; non-comp = the {device} busy with communication or memory work only; idle = "
            "nothing running (the three add up to 100%). The idle split, as HTA's idle-time breakdown (host + peer "
            "+ launch + other = idle): host = waiting for the host to launch work (data loading, Python, a host "
            "sync); peer = the host inside a collective call, waiting on other ranks; launch = launch latency "
            "between queued kernels; other = the rest." + (
                " k.<class>: the class's share of the summed kernel time (overlapping streams count twice)."
                if classes else ""))
    return headers, body, note
