"""Terminal output: summary and verdict first, then the ranked findings, then the key tables."""
from __future__ import annotations

from typing import Any, Optional

from analyzer.render import sanitize

from analyzer.render.common import (breakdown_table, confidence_text, has_hta, has_unsplit, overlap_text, unsplit_note, group_role, consequence_lines, cost_text, evidence_texts, job_shape, mb, ms,  # noqa: F401
                                    pipeline_shape, nothing_analysed, num, pct, printable, ranges, skipped_summary, subject_text)


def one_line(text: Any) -> str:
    """Input-derived text on one terminal line (`sanitize.text`): no controls, no newline, no CI command."""
    return sanitize.text(text)

_COLORS = {"error": "\033[1;31m", "warning": "\033[1;33m", "info": "\033[36m", "ok": "\033[1;32m",
           "bold": "\033[1m", "dim": "\033[2m"}
_RESET = "\033[0m"
MAX_EVIDENCE = 4
MAX_STEP_ROWS = 64
MAX_SKIPPED_REASONS = 8
MAX_FILE_LINES = 20


class _Painter:
    """Wraps text in ANSI colours when enabled (a TTY without NO_COLOR), else returns it unchanged."""

    def __init__(self, enabled: bool):
        self.enabled = enabled

    def __call__(self, style: str, text: str) -> str:
        return f"{_COLORS[style]}{text}{_RESET}" if self.enabled and style in _COLORS else text


def table(headers: list[str], rows: list[list[str]], indent: str = "  ") -> list[str]:
    """Right-aligned plain-text table (first column left-aligned)."""
    rows = [[one_line(c) for c in r] for r in rows]  # every cell passes `sanitize.text`
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]

    def fmt(cells: list[str]) -> str:
        return indent + "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                                  for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    return [fmt(headers), indent + "  ".join("-" * w for w in widths)] + [fmt(r) for r in rows]


def _summary(report: dict, paint: _Painter) -> list[str]:
    out: list[str] = []
    job = report.get("job") or {}
    s = job.get("summary") or {}
    inputs = report.get("inputs") or {}
    cr = report.get("cross_rank") or {}
    ranks = job.get("ranks") or []
    head = f"analyze {report.get('tool', {}).get('version', '?')}: {len(ranks)} rank(s)"
    if not ranks:  # a hang post-mortem often has no profiler trace at all: say what there is
        files = inputs.get("files") or []
        n_fr = sum(1 for f in files if f.get("kind") == "flight_recorder" and f.get("status") != "failed")
        n_log = sum(1 for f in files if f.get("kind") == "nccl_log" and f.get("status") != "failed")
        n_err = sum(1 for f in files if f.get("kind") == "stderr" and f.get("status") != "failed")
        n_ras = sum(1 for f in files if f.get("kind") == "nccl_ras" and f.get("status") != "failed")
        head = (f"analyze {report.get('tool', {}).get('version', '?')}: no profiler traces; "
                f"{n_fr} Flight Recorder dump(s), {n_log} NCCL/watchdog log(s), {n_err} stderr log(s)"
                + (f", {n_ras} NCCL RAS report(s)" if n_ras else ""))
    if job.get("world_size"):
        head += f" of world size {job['world_size']}"
        if job.get("world_size_source") and not ranks:  # a post-mortem: say what showed the size
            head += f" ({one_line(job['world_size_source'])})"
    hosts = sorted(set(((cr.get("hosts") or {}).get("rank_to_host") or {}).values()))
    if hosts:
        head += f" on {len(hosts)} host(s)"
    steps = s.get("steps") or []
    if steps:
        head += ", whole trace (no ProfilerStep)" if steps == [-1] else f", {_steps_label(steps)}"
    out.append(paint("bold", head))
    shape = _shape(report)
    if shape:
        out.append(f"job shape: {one_line(shape)}")
    out.append(f"inputs: {inputs.get('read', 0)} read, {inputs.get('salvaged', 0)} salvaged, "
               f"{inputs.get('skipped', 0)} skipped, {inputs.get('failed', 0)} failed")
    if job.get("missing_ranks"):
        out.append(paint("warning", f"missing ranks: {ranges(job['missing_ranks'])}"))
    if s.get("mean_step_time_us") is not None:
        out.append(f"step: mean {ms(s.get('mean_step_time_us'))} ms, worst-step spread across ranks "
                   f"{pct(s.get('max_step_time_spread'))}; "
                   f"comm share {pct(s.get('comm_share'))}, {overlap_text(s)}, "
                   f"exposed comm {pct(s.get('exposed_comm_share'))}{unsplit_note(s)}, idle {pct(s.get('idle_share'))}")
    jobs = inputs.get("jobs") or []
    if len(jobs) > 1:
        sel = next((j for j in jobs if j.get("selected")), jobs[0])
        others = ", ".join(str(j.get("label")) for j in jobs if j is not sel)
        out.append(paint("warning", f"job: {sel.get('label')} ({len(jobs)} jobs in the inputs; not analysed: "
                                    f"{one_line(others)}; choose with --job)"))
    verdict = report.get("verdict")
    if verdict:
        style = "error" if verdict.startswith("FAIL") else "warning" if verdict.startswith("WARN") else "ok"
        out.append("verdict: " + paint(style, verdict))
    return out


def _steps_label(steps: list[int]) -> str:
    """'steps 5-6 (2 profiled)' / 'step 10 (1 profiled)': the step numbers, and how many there are."""
    from analyzer.render.about import steps_label
    return steps_label(steps)


def _about(report: dict) -> list[str]:
    """What the report describes (job, collection date, versions, inputs, when analysed): the ``about`` block."""
    from analyzer.render.about import about_lines
    return [f"{k}: {one_line(v)}" for k, v in about_lines(report)]


def _shape(report: dict) -> str:
    """'tp=2 pp=2 dp=2 (pipeline 1f1b, p=2 m=4)' from the process-group roles, '' when unknown."""
    return job_shape(report)


def _findings(report: dict, paint: _Painter) -> list[str]:
    findings = report.get("findings") or []
    if not findings:
        return []
    out = ["", paint("bold", f"findings ({len(findings)}, worst first):")]
    for i, f in enumerate(findings, 1):
        sev = str(f.get("severity", "?"))
        subj = subject_text(f)
        line = f"{i:>2}. {paint(sev, one_line(sev.upper()))} {one_line(f.get('id', ''))} {one_line(f.get('title', ''))}"
        out.append(line + (f"  [{one_line(subj)}]" if subj else ""))
        ev = evidence_texts(f)
        for e in ev[:MAX_EVIDENCE]:
            out.append(f"      - {one_line(e)}")
        if len(ev) > MAX_EVIDENCE:
            out.append(f"      - ... {len(ev) - MAX_EVIDENCE} more (see --format json)")
        extra = [x for x in (cost_text(f), confidence_text(f)) if x]
        if extra:
            out.append("      " + paint("dim", "; ".join(extra)))
        if f.get("fix"):
            out.append(f"      fix: {one_line(f['fix'])}")
        cons = consequence_lines(f)
        if cons:
            out.append(f"      explains ({len(cons)}): what this root cause also shows up as")
            out += [f"        - {one_line(c)}" for c in cons]
    return out


def _hang(report: dict, paint: _Painter) -> list[str]:
    hang = report.get("hang") or {}
    if hang.get("status") != "hang":
        return []
    out = ["", paint("error", "hang post-mortem:")]
    for d in hang.get("diagnoses") or []:
        where = []
        if d.get("process_group"):
            where.append(f"group {one_line(d['process_group'])}")
        if d.get("seq") is not None:
            where.append(f"seq {one_line(d['seq'])}")
        if d.get("op"):
            where.append(f"op {one_line(d['op'])}")
        if d.get("p2p") and d["p2p"].get("src") is not None and d["p2p"].get("dst") is not None:
            where.append(f"send/recv {one_line(d['p2p']['src'])} → {one_line(d['p2p']['dst'])}")
        tie = " (a tie: the evidence cannot tell which)" if d.get("tie") else ""
        out.append(f"  - {one_line(d.get('kind'))}: {' '.join(where) or 'no group or seq known'}; "
                   f"culprit ranks {ranges(d.get('culprit_ranks') or []) or '-'}{tie}, "
                   f"waiting {ranges(d.get('waiting_ranks') or []) or '-'}")
        if d.get("cause"):
            out.append(f"    cause: {one_line(d['cause'])}")
    missing = hang.get("ranks_without_dump") or {}
    if missing:
        out.append("  ranks without a Flight Recorder dump:")
        out += [f"    - rank {r}: {one_line(why)}" for r, why in sorted(missing.items(), key=lambda kv: int(kv[0]))]
    return out


def per_step_mean(row: dict, key: str):
    """A per-rank sum (metrics.per_rank) as a mean per step; None when unknown."""
    v, n = row.get(key), row.get("steps")
    return v / n if isinstance(v, (int, float)) and isinstance(n, (int, float)) and n else None


def _per_rank(report: dict) -> list[str]:
    rows = (report.get("metrics") or {}).get("per_rank") or []
    if not rows:
        return []
    strag = {r["rank"]: r for r in ((report.get("cross_rank") or {}).get("stragglers") or {}).get("per_rank") or []}
    headers = ["rank", "steps", "step ms", "comm%", "wait ms", "transfer ms", "exposed%", "xfer ovl%", "idle%"]
    unsplit, hta = has_unsplit(rows), has_hta(rows)
    if hta:
        headers.insert(8, "HTA ovl%")
    if unsplit:
        headers.insert(6, "unsplit ms")
    if strag:
        headers += ["last%", "imposed ms Σ"]
    body = []
    for r in rows:
        cells = [str(r.get("rank")), num(r.get("steps")), ms(r.get("mean_step_time_us")), pct(r.get("comm_share")),
                 ms(per_step_mean(r, "wait_us")), ms(per_step_mean(r, "transfer_us")),
                 pct(r.get("exposed_comm_share")), pct(r.get("overlap_coverage")), pct(r.get("idle_share"))]
        if hta:
            cells.insert(8, pct(r.get("hta_overlap_coverage")))
        if unsplit:
            cells.insert(6, ms(per_step_mean(r, "unsplit_us")))
        if strag:
            s = strag.get(r.get("rank"), {})
            # wait_imposed_us is a sum over the steps: per step here, like every column of this table
            cells += [pct(s.get("pct_last")), ms(per_step_mean({"steps": r.get("steps"), **s}, "wait_imposed_us"))]
        body.append(cells)
    note = (["  imposed ms Σ: the waiting a rank made the others do by arriving last, summed over the ranks that "
             "waited (per step)"] if strag else [])
    return ["", "per rank (mean over steps):"] + table(headers, body) + note


def _breakdown(report: dict) -> list[str]:
    """The per-rank time breakdown (HTA's temporal and idle-time breakdowns): at most MAX_STEP_ROWS ranks."""
    headers, rows, note = breakdown_table(report)
    if not rows:
        return []
    more = len(rows) - MAX_STEP_ROWS
    out = ["", "time breakdown per rank (share of step time; what the idle time waited for):"]
    out += table(headers, rows[:MAX_STEP_ROWS])
    if more > 0:
        out.append(f"  ... {more} more rank(s) (see --format json: breakdown.per_rank)")
    import textwrap
    out += textwrap.wrap(note, 116, initial_indent="  ", subsequent_indent="  ")
    return out


def _per_step(report: dict) -> list[str]:
    rows = (report.get("metrics") or {}).get("per_step") or []
    if not rows or len(rows) <= len((report.get("metrics") or {}).get("per_rank") or []):
        return []  # one step per rank: the per-rank table already says it all
    if len(rows) > MAX_STEP_ROWS:
        return ["", f"per rank and step: {len(rows)} rows, see --format markdown/html/json"]
    headers = ["rank", "step", "step ms", "compute ms", "comm ms", "exposed ms", "overlap%", "comm%", "idle ms",
               "memcpy ms"]
    body = [[str(r["rank"]), "all" if r["step"] == -1 else str(r["step"]), ms(r.get("step_time_us")),
             ms(r.get("compute_us")), ms(r.get("comm_us")), ms(r.get("exposed_comm_us")),
             pct(r.get("overlap_coverage")), pct(r.get("comm_share")), ms(r.get("idle_us")), ms(r.get("memcpy_us"))]
            for r in rows]
    return ["", "per rank and step:"] + table(headers, body)


def _groups(report: dict) -> list[str]:
    cr = report.get("cross_rank") or {}
    groups = cr.get("process_groups") or []
    out = []
    if groups:
        body = [[str(g.get("name", "")), group_role(g), str(g.get("size", "")),
                 ranges(g.get("ranks") or []), str(g.get("span", "")),
                 ", ".join(f"{k}×{v}" for k, v in (g.get("ops") or {}).items())] for g in groups]
        out += ["", "process groups:"] + table(["group", "role", "size", "ranks", "span", "ops"], body)
    coll = (cr.get("collectives") or {}).get("by_group_op") or []
    if coll:
        body = [[str(c.get("process_group", "")), str(c.get("op", "")), num(c.get("count")),
                 mb(_per_call_bytes(c)), ms(c.get("mean_transfer_us")), num(c.get("mean_busbw_gbps")),
                 str(c.get("link_class", ""))] for c in coll]
        out += ["", "collectives (per call: mean size and transfer time):"] + table(
            ["group", "op", "calls", "MB/call", "transfer ms/call", "busbw GB/s", "link"], body)
    pipe = cr.get("pipeline") or {}
    if pipe.get("detected"):
        out += ["", f"pipeline: {one_line(pipeline_shape(pipe))}, bubble "
                    f"{pct(pipe.get('mean_bubble_rate'))} (theory {pct(pipe.get('theoretical_bubble'))})"]
    return out


def _memory(report: dict) -> list[str]:
    from analyzer.render import memory_table as mt
    rows, other = mt.peak_rows(report), mt.other_lines(report)
    out = []
    if rows:
        more = mt.n_rows(report) - len(rows)
        out += (["", f"memory per rank ({mt.note(report)}):"] + table(mt.HEADERS, rows)
                + ([f"  ... {more} more rows: see --format json/html"] if more > 0 else []))
    if other:
        out += ["", "memory from logs and allocator snapshots:"] + ["  " + one_line(x) for x in other]
    return out


def _per_call_bytes(c: dict) -> Optional[float]:
    """Mean bytes per call of a by_group_op row (older reports: the total over the calls divided by them)."""
    if c.get("mean_bytes") is not None:
        return float(c["mean_bytes"])
    if c.get("bytes") is not None and c.get("count"):
        return float(c["bytes"]) / float(c["count"])
    return None


def _baseline(report: dict, paint: _Painter) -> list[str]:
    b = report.get("baseline") or {}
    if not b.get("metrics"):
        return []
    from analyzer.report.baseline import format_change, format_value
    body = []
    for m in b["metrics"]:
        mark = "REGRESSED" if m.get("regressed") else ""
        name = str(m.get("metric", m.get("name")))
        body.append([one_line(m.get("name")), format_value(name, m.get("baseline")),
                     format_value(name, m.get("current")), format_change(m), format_change(m, "threshold"), mark])
    lines = table(["metric", "baseline", "current", "change", "threshold", ""], body)
    lines = [paint("error", ln) if ln.rstrip().endswith("REGRESSED") else ln for ln in lines]
    return ["", f"baseline: {one_line(b.get('source'))}"] + lines


def _problems(report: dict, verbose: bool = False) -> list[str]:
    """Failed and salvaged files one per line; skipped files summarised by reason (all of them with -v)."""
    inputs = report.get("inputs") or {}
    files = inputs.get("files") or []
    problems = [f for f in files if f.get("status") in ("failed", "salvaged")]
    out = []
    shown = problems if verbose else problems[:MAX_FILE_LINES]
    for f in shown:
        out.append(f"{f['status']}: {one_line(f['path'])}: {one_line(f.get('message', ''))}")
    if len(problems) > len(shown):
        out.append(f"... {len(problems) - len(shown)} more failed or salvaged file(s) (-v lists them all)")
    skipped = [f for f in files if f.get("status") == "skipped"]
    if skipped and verbose:
        out += [f"skipped: {one_line(f['path'])}: {one_line(f.get('message', ''))}" for f in skipped]
    elif skipped:
        rows = skipped_summary(report)
        out.append(f"skipped {len(skipped)} file(s)" + (" (-v lists them all):" if len(skipped) > 3 else ":"))
        for reason, n, ex in rows[:MAX_SKIPPED_REASONS]:
            more = ", …" if n > len(ex) else ""
            out.append(f"  {n} × {one_line(reason)}: {one_line(', '.join(ex))}{more}")
        if len(rows) > MAX_SKIPPED_REASONS:
            rest = sum(n for _, n, _ in rows[MAX_SKIPPED_REASONS:])
            out.append(f"  {rest} more in {len(rows) - MAX_SKIPPED_REASONS} other reason(s)")
    messages = {f.get("message") for f in files}
    for w in report.get("warnings") or []:
        if w not in messages:
            out.append(f"warning: {one_line(w)}")
    return ([""] + out) if out else []


def render_text(report: dict[str, Any], color: bool = False, verbose: Optional[bool] = None) -> str:
    """Human-readable report for a terminal or a CI log (ANSI colours only when ``color``)."""
    paint = _Painter(color)
    out = _summary(report, paint)
    out[1:1] = _about(report)
    out += _findings(report, paint)
    out += _hang(report, paint)
    out += _baseline(report, paint)
    out += _per_rank(report)
    out += _breakdown(report)
    out += _per_step(report)
    out += _groups(report)
    out += _memory(report)
    out += _problems(report, bool(verbose))
    return sanitize.guard_ci_lines("\n".join(out) + "\n")
