"""One self-contained HTML file for a ticket: verdict, findings, inline PNG figures, tables; no network access."""
from __future__ import annotations

import base64
from typing import Any, Iterable, Iterator, Optional, TextIO

from analyzer.render import sanitize

from analyzer.render.common import (breakdown_table, confidence_text, has_hta, has_unsplit, overlap_text, unsplit_note, group_role, consequence_lines, cost_text, evidence_texts, explained_by, mb, ms,
                                    pipeline_shape, nothing_analysed, num, pct, printable, ranges, skipped_summary, subject_text)

CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:0;background:#fafafa;color:#222}
main{max-width:1180px;margin:0 auto;padding:16px 24px}
h1{font-size:1.5em;margin:.3em 0} h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}
.badge{display:inline-block;padding:2px 10px;border-radius:4px;color:#fff;font-weight:bold}
.FAIL{background:#c62828}.WARN{background:#ef6c00}.OK{background:#2e7d32}
.facts{display:flex;flex-wrap:wrap;gap:8px;margin:8px 0}
.fact{background:#fff;border:1px solid #ddd;border-radius:4px;padding:4px 10px}
.finding{background:#fff;border-left:5px solid #999;margin:10px 0;padding:6px 12px;border-radius:3px}
.finding.error{border-color:#c62828}.finding.warning{border-color:#ef6c00}.finding.info{border-color:#1565c0}
.sev{font-weight:bold;text-transform:uppercase;font-size:.85em}
.error .sev{color:#c62828}.warning .sev{color:#ef6c00}.info .sev{color:#1565c0}
.meta{color:#666;font-size:.9em} .about{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px;font-size:.9em;color:#444} .about dt{font-weight:600} .about dd{margin:0} .fix{margin-top:4px}
figure{margin:12px 0;background:#fff;border:1px solid #e0e0e0;padding:8px}
figure img{max-width:100%;height:auto;display:block} figcaption{color:#555;font-size:.9em;margin-top:4px}
table{border-collapse:collapse;background:#fff;font-size:.88em;margin:8px 0}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:right} th{background:#f0f0f0}
td:first-child,th:first-child,td.txt,th.txt{text-align:left}
tr.hl td{background:#ffebee;font-weight:bold}
details{margin:8px 0} summary{cursor:pointer;color:#1565c0}
code{background:#f3f3f3;padding:0 3px}
.explains{margin-top:4px;color:#444} .explains ul{margin:2px 0}
"""


def _e(x: Any) -> str:
    """Every input-derived string enters the page through here (`sanitize.html`)."""
    return sanitize.html(x)


def _img(png: Optional[bytes], alt: str, caption: str) -> str:
    if not png:
        return ""
    data = base64.b64encode(png).decode("ascii")
    return (f'<figure><img alt="{_e(alt)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{_e(caption)}</figcaption></figure>")


def _table(headers: list[str], rows: Iterable[list[str]], highlight: Optional[set[int]] = None,
           left: frozenset = frozenset()) -> str:
    return "".join(_table_pieces(headers, rows, highlight, left))


def _table_pieces(headers: list[str], rows: Iterable[list[str]], highlight: Optional[set[int]] = None,
                  left: frozenset = frozenset()) -> Iterator[str]:
    """The table as pieces: its head, then one piece per row (``rows`` may be a generator: a 10,000-rank
    job's per-step table is never held whole). ``left``: the columns of words (a cause), left-aligned like
    the first; numbers stay right-aligned."""
    head = "".join(f'<th class="txt">{_e(h)}</th>' if i in left else f"<th>{_e(h)}</th>"
                   for i, h in enumerate(headers))
    yield f"<table><thead><tr>{head}</tr></thead><tbody>"
    for i, r in enumerate(rows):
        cls = ' class="hl"' if highlight and i in highlight else ""
        yield f"<tr{cls}>" + "".join(f'<td class="txt">{_e(c)}</td>' if j in left else f"<td>{_e(c)}</td>"
                                     for j, c in enumerate(r)) + "</tr>"
    yield "</tbody></table>"


def _fold(title: str, inner: str, rows: int, over: int = 16) -> str:
    return "".join(_fold_pieces(title, iter((inner,)), rows, over))


def _fold_pieces(title: str, inner: Iterable[str], rows: int, over: int = 16) -> Iterator[str]:
    if rows <= over:
        yield from inner
        return
    yield f"<details><summary>{_e(title)} ({rows} rows)</summary>"
    yield from inner
    yield "</details>"


def pick_steps(report: dict) -> tuple[Optional[int], Optional[int]]:
    """(representative step: mean step time closest to the median; worst step: the longest mean step time over
    the ranks, i.e. the step that cost the job the most time)."""
    rows = (report.get("metrics") or {}).get("per_step") or []
    by: dict[int, list[float]] = {}
    for r in rows:
        if r.get("step_time_us") is not None:
            by.setdefault(int(r["step"]), []).append(float(r["step_time_us"]))
    if not by:
        return None, None
    means = {s: sum(v) / len(v) for s, v in by.items()}
    order = sorted(means, key=lambda s: means[s])
    median = means[order[len(order) // 2]]
    rep = min(means, key=lambda s: (abs(means[s] - median), s))
    worst = max(means, key=lambda s: (means[s], -s))
    return rep, worst


def _header(report: dict) -> str:
    job = report.get("job") or {}
    s = job.get("summary") or {}
    cr = report.get("cross_rank") or {}
    verdict = str(report.get("verdict") or "")
    head, _, rest = verdict.partition(":")
    head = head if head in ("FAIL", "WARN", "OK") else "OK"
    inputs = report.get("inputs") or {}
    ranks = job.get("ranks") or []
    if ranks:
        facts = [f"ranks {len(ranks)}" + (f" / {job['world_size']}" if job.get("world_size") else "")]
    else:  # a dump- or log-only post-mortem: say what there is instead of "ranks 0"
        files = inputs.get("files") or []
        n_fr = sum(1 for f in files if f.get("kind") == "flight_recorder" and f.get("status") in ("read", "salvaged"))
        n_log = sum(1 for f in files if f.get("kind") == "nccl_log" and f.get("status") in ("read", "salvaged"))
        logs = [f["path"] for f in files if f.get("kind") == "stderr" and f.get("status") in ("read", "salvaged")]
        named = ", ".join(str(p).replace("\\", "/").rsplit("/", 1)[-1] for p in logs[:3]) + \
            (f", … {len(logs) - 3} more" if len(logs) > 3 else "")
        n_ras = sum(1 for f in files if f.get("kind") == "nccl_ras" and f.get("status") in ("read", "salvaged"))
        facts = [f"no profiler traces: {n_fr} Flight Recorder dump(s), {n_log} NCCL/watchdog log(s), {len(logs)} "
                 f"stderr log(s)" + (f" ({named})" if logs else "") + (f", {n_ras} NCCL RAS report(s)" if n_ras else "")]
    hosts = sorted(set(((cr.get("hosts") or {}).get("rank_to_host") or {}).values()))
    if hosts:
        facts.append(f"hosts {len(hosts)}")
    steps = s.get("steps") or []
    if steps:
        from analyzer.render.about import steps_label
        facts.append("whole trace" if steps == [-1] else steps_label(steps))
    if s.get("mean_step_time_us") is not None:
        facts += [f"mean step {ms(s['mean_step_time_us'])} ms", f"worst-step spread {pct(s.get('max_step_time_spread'))}",
                  f"comm share {pct(s.get('comm_share'))}", f"exposed comm {pct(s.get('exposed_comm_share'))}{unsplit_note(s)}",
                  f"overlap {pct(s.get('overlap_coverage'))} of the transfer"]
        if s.get("hta_overlap_coverage") is not None:
            facts.append(f"HTA overlap {pct(s.get('hta_overlap_coverage'))} (comm kernels)")
        facts.append(f"idle {pct(s.get('idle_share'))}")
    strag = (cr.get("stragglers") or {}).get("straggler")
    if strag is not None:
        by = explained_by(report, "LOAD001", int(strag))
        facts.append(f"straggler: rank {strag}" + (f" (explained by {by}, below)" if by else ""))
    mesh = report.get("mesh") or {}
    if mesh.get("dims") and mesh.get("text"):
        facts.append(f"job shape: {mesh['text']}")
    pipe = cr.get("pipeline") or {}
    if pipe.get("detected"):
        facts.append(f"pipeline {pipeline_shape(pipe)}, bubble "
                     f"{pct(pipe.get('mean_bubble_rate'))}")
    if job.get("missing_ranks"):
        facts.append(f"missing ranks {ranges(job['missing_ranks'])}")
    jobs = inputs.get("jobs") or []
    if len(jobs) > 1:
        sel = next((j for j in jobs if j.get("selected")), jobs[0])
        facts.append(f"job {sel.get('label')} of {len(jobs)} in the inputs (--job to choose)")
    tool = report.get("tool") or {}
    why = nothing_analysed(report)
    return (f"<h1>Distributed training trace analysis</h1>"
            f'<p><span class="badge {_e(head)}">{_e(head)}</span> {_e(rest.strip() or verdict)}</p>'
            + (f'<p class="finding error"><b>Nothing was analysed:</b> {_e(why)}</p>' if why else "")
            + f'<div class="facts">{"".join(f"<span class=fact>{_e(x)}</span>" for x in facts)}</div>'
            f'<p class="meta">inputs: {inputs.get("read", 0)} read, {inputs.get("salvaged", 0)} salvaged, '
            f'{inputs.get("skipped", 0)} skipped, {inputs.get("failed", 0)} failed · '
            f'{_e(tool.get("name", "analyze"))} {_e(tool.get("version", ""))}</p>')


def _about(report: dict) -> str:
    """What the report describes (the ``about`` block): job, collection date, versions, inputs, analysis time."""
    from analyzer.render.about import about_lines
    lines = about_lines(report)
    if not lines:
        return ""
    return ('<dl class="about">' + "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in lines) + "</dl>")


def _findings(report: dict) -> str:
    findings = report.get("findings") or []
    if not findings:
        return "<h2>Findings</h2><p>No findings.</p>"
    out = ["<h2>Findings</h2>"]
    for f in findings:
        sev = str(f.get("severity", "info"))
        sev_cls = sev if sev in ("error", "warning", "info") else "info"
        subj = subject_text(f)
        ev = "".join(f"<li>{_e(e)}</li>" for e in evidence_texts(f))
        meta = "; ".join(x for x in (subj, cost_text(f), confidence_text(f)) if x)
        out.append(f'<div class="finding {sev_cls}"><span class="sev">{_e(sev)}</span> '
                   f'<code>{_e(f.get("id", ""))}</code> <b>{_e(f.get("title", ""))}</b>'
                   + (f'<div class="meta">{_e(meta)}</div>' if meta else "")
                   + (f"<ul>{ev}</ul>" if ev else "")
                   + (f'<div class="fix"><b>Fix:</b> {_e(f["fix"])}</div>' if f.get("fix") else "")
                   + _explains(f) + "</div>")
    return "".join(out)


def _explains(f: dict) -> str:
    cons = consequence_lines(f)
    if not cons:
        return ""
    return (f'<div class="explains"><b>Explains</b> ({len(cons)}; listed here, not as findings of their own):'
            f'<ul>{"".join(f"<li>{_e(c)}</li>" for c in cons)}</ul></div>')


def _hang(report: dict) -> str:
    hang = report.get("hang") or {}
    if hang.get("status") != "hang":
        return ""
    rows = [[d.get("kind"), d.get("process_group"), num(d.get("seq")), d.get("op"),
             ranges(d.get("culprit_ranks") or []) or "-", ranges(d.get("waiting_ranks") or []) or "-",
             d.get("cause") or ""] for d in hang.get("diagnoses") or []]
    from analyzer.render.wait_picture import wait_picture
    return ("<h2>Hang post-mortem</h2>" + wait_picture(report)
            + _table(["kind", "group", "seq", "op", "culprit", "waiting", "cause"], rows, left=frozenset({1, 3, 6})))


def _baseline(report: dict) -> str:
    b = report.get("baseline") or {}
    if not b.get("metrics"):
        return ""
    from analyzer.report.baseline import format_change, format_value
    rows, hl = [], set()
    for i, m in enumerate(b["metrics"]):
        if m.get("regressed"):
            hl.add(i)
        rows.append([m.get("name"), format_value(str(m.get("metric")), m.get("baseline")),
                     format_value(str(m.get("metric")), m.get("current")), format_change(m),
                     format_change(m, "threshold"), "regressed" if m.get("regressed") else ""])
    return (f"<h2>Against the baseline <code>{_e(b.get('source'))}</code></h2>"
            + _table(["metric", "baseline", "current", "change", "threshold", ""], rows, hl))


def _figures(report: dict, job: Any) -> str:
    return "".join(_figure_pieces(report, job))


def _figure_pieces(report: dict, job: Any) -> Iterator[str]:
    """The figures section, a figure at a time (each one's PNG is let go once written)."""
    from analyzer.render import figures as fg

    out: list[str] = []
    rep, worst = pick_steps(report)
    if job is not None and getattr(job, "traces", None) and rep is not None:
        name = "whole trace" if rep == -1 else f"step {rep}"
        out.append("<h2>Timeline</h2>")
        drawn, total = fg.timeline_ranks(job, report, rep)
        sample = (f" {len(drawn)} of {total} ranks are drawn: the straggler, the ranks with the longest and the shortest step, then "
                  "evenly spaced ones (analyze --timeline writes every rank)." if len(drawn) < total else "")
        out.append(_img(fg.timeline(job, report, rep, f"representative {name}"), f"timeline of {name}",
                        "Per rank: compute and memcpy (upper half of each row), communication (lower half), idle in "
                        "grey; thin lines join the ends of the same collective on every rank." + sample))
        if worst is not None and worst != rep:
            out.append(_img(fg.timeline(job, report, worst, f"worst step {worst}"), f"timeline of step {worst}",
                            "The step with the longest mean step time over the ranks (the one that cost the job most)."))
        out.append(_img(fg.pipeline(job, report, rep), "pipeline schedule",
                        "One rank per pipeline stage, in this one step; hatched red = bubble (no compute inside "
                        "the stage's window). The bubble beside each stage is this step's; the pipeline's headline "
                        "bubble (findings, cross_rank.pipeline.mean_bubble_rate) is the mean over every step and "
                        "stage."))
    heat = [fg.heatmap(report, "step_time_us", "step time per rank and step: % vs the step's median rank",
                       relative=True),
            fg.heatmap(report, "wait_us" if _has(report, "wait_us") else "exposed_comm_us",
                       "wait inside collectives for the last member per rank and step (ms)"
                       if _has(report, "wait_us") else "exposed communication per rank and step (ms)", "magma")]
    n_ranks = len((report.get("job") or {}).get("ranks") or [])
    every = f" All {n_ranks} ranks are drawn; evenly spaced ones are labelled." if n_ranks > fg.MAX_RANKS else ""
    if any(heat):
        out.append("<h2>Per rank and step</h2>")
        out.append(_img(heat[0], "step time heatmap",
                        "Step time of each rank in each step, as % above (red) or below (blue) the step's median "
                        "rank (the numbers are ms). The colour range is at least ±10 %, so a clean job looks "
                        "flat. In a synchronous job every rank shares the step time (the others wait for a "
                        "straggler), so a straggler shows below, as the rank that waits least." + every))
        out.append(_img(heat[1], "wait heatmap" if _has(report, "wait_us") else "exposed comm heatmap",
                        ("Time inside collectives waiting for the last member to arrive (aligned clocks), ms, colour "
                         "from 0: the ranks that wait for a straggler are bright, the straggler itself dark (it waits "
                         "for nobody). Exposed communication is the transfer only (docs/metrics.md)."
                         if _has(report, "wait_us") else
                         "Exposed (not overlapped) communication, ms, colour from 0.") + every))
    bars = fg.share_bars(report)
    if bars:
        out.append("<h2>Overlap and communication share</h2>")
        out.append(_img(bars, "overlap coverage and comm share per rank",
                        "Overlap coverage = share of the transfer (comm less the waits for late members) hidden "
                        "under compute; comm / exposed comm share = "
                        "fraction of the step." + (" One line per share, every rank a point." if
                                                   n_ranks > fg.MAX_RANKS else "")))
    bd = fg.breakdown_bars(report)
    if bd:
        out.append("<h2>Time breakdown</h2>")
        out.append(_img(bd, "time breakdown per rank",
                        "Each rank's step time as HTA's temporal breakdown shows it — compute, communication or "
                        "memory work alone, idle — with the idle time split by what it waited for (HTA's idle-time "
                        "breakdown): the host to launch work, the host inside a collective call (other ranks), "
                        "launch latency between queued kernels, the rest. The numbers are in the table "
                        "'Time breakdown per rank' below."
                        + (" Past 64 ranks, stacked areas over the rank axis." if n_ranks > fg.MAX_RANKS else "")))
    mem_png = fg.memory(report)
    if mem_png:
        from analyzer.render import memory_table as mt
        out.append("<h2>Memory</h2>")
        out.append(_img(mem_png, "memory per rank over the traced steps",
                        "Per rank (one colour each) over the traced steps: peak allocated (solid), allocated at the "
                        "step's end (dotted: a line that rises step after step is a leak), peak reserved by the "
                        "caching allocator (dashed, where it reserves). " + mt.note(report).capitalize() + "."))
        out.append(_fold("memory per rank", _table(mt.HEADERS, mt.peak_rows(report, None)), mt.n_rows(report)))
    from analyzer.render import memory_table as mt
    other = mt.other_lines(report)
    if other:
        out.append("<h2>Memory from logs and allocator snapshots</h2><ul>"
                   + "".join(f"<li>{_e(x)}</li>" for x in other) + "</ul>")
    if job is not None and getattr(job, "traces", None):
        wm = fg.wait_matrix(job, report)
        bw = fg.bandwidth(job, report)
        if wm:
            out.append("<h2>Collective wait matrix</h2>")
            out.append(_img(wm, "collective wait matrix",
                            "Row rank waited (sum over collectives) for the column rank, the last to arrive."
                            + (f" With {n_ranks} ranks, consecutive ranks are summed in blocks."
                               if n_ranks > fg.MAX_TICKS else "")))
        if bw:
            out.append("<h2>Bus bandwidth</h2>")
            out.append(_img(bw, "bus bandwidth per collective size",
                            "Bus bandwidth (nccl-tests factors) per collective size (log\u2082 axis in KiB / MiB / "
                            "GiB, a tick at each size used when they are few), against the nominal peak of each "
                            "link class (dashed, labelled in the right margin)."))
    yield from out


def _has(report: dict, key: str) -> bool:
    """Whether the per-step rows carry ``key`` (reports made before the wait/transfer split do not)."""
    rows = (report.get("metrics") or {}).get("per_step") or []
    return bool(rows) and key in rows[0]


def _tables(report: dict) -> str:
    return "".join(_table_section_pieces(report))


def _table_section_pieces(report: dict) -> Iterator[str]:
    """The tables: per rank, process groups, collectives, then the per-rank-and-step table a row at a time."""
    rows = (report.get("metrics") or {}).get("per_rank") or []
    cr = report.get("cross_rank") or {}
    strag = (cr.get("stragglers") or {})
    per = {r["rank"]: r for r in strag.get("per_rank") or []}
    if rows:  # a row per rank, each made as it is written
        from analyzer.render.text import per_step_mean
        unsplit, hta = has_unsplit(rows), has_hta(rows)  # once: the column is the table's, not each row's
        body = ([str(r["rank"]), ms(r.get("mean_step_time_us")), pct(r.get("comm_share")),
                 ms(per_step_mean(r, "wait_us")), ms(per_step_mean(r, "transfer_us")),
                 pct(r.get("exposed_comm_share")), pct(r.get("overlap_coverage"))]
                + ([pct(r.get("hta_overlap_coverage"))] if hta else [])
                + [pct(r.get("idle_share")), pct(per.get(r["rank"], {}).get("pct_last"))]
                + ([ms(per_step_mean(r, "unsplit_us"))] if unsplit else []) for r in rows)
        hl = {i for i, r in enumerate(rows) if r["rank"] == strag.get("straggler")}
        yield "<h2>Per rank</h2>"
        yield from _fold_pieces("per-rank table", _table_pieces(
            ["rank", "mean step ms", "comm share %", "wait ms/step", "transfer ms/step", "exposed comm %",
             "transfer overlap %"] + (["HTA overlap %"] if hta else [])
            + ["idle %", "last to arrive %"] + (["unsplit ms/step"] if unsplit else []),
            body, hl),
            len(rows))
    headers, brows, note = breakdown_table(report)
    if brows:
        yield f"<h2>Time breakdown per rank</h2><p class=\"meta\">{_e(note)}</p>"
        yield from _fold_pieces("time breakdown", _table_pieces(headers, brows), len(brows))
    out = []
    groups = cr.get("process_groups") or []
    if groups:
        body = [[g.get("name", ""), group_role(g), num(g.get("size")), ranges(g.get("ranks") or []),
                 g.get("span", ""), ", ".join(f"{k}×{v}" for k, v in (g.get("ops") or {}).items())] for g in groups]
        out.append("<h2>Process groups</h2>" + _fold("process groups", _table(
            ["group", "role", "size", "ranks", "span", "ops"], body), len(body)))
    coll = (cr.get("collectives") or {}).get("by_group_op") or []
    if coll:
        from analyzer.render.text import _per_call_bytes
        body = [[c.get("process_group", ""), c.get("op", ""), num(c.get("count")), mb(_per_call_bytes(c)),
                 ms(c.get("mean_transfer_us")), num(c.get("mean_busbw_gbps")), c.get("link_class", "")]
                for c in coll]
        out.append("<h2>Collectives (per call)</h2>" + _fold("collectives", _table(
            ["group", "op", "calls", "MB/call", "transfer ms/call", "busbw GB/s", "link"], body), len(body)))
    yield "".join(out)
    steps = (report.get("metrics") or {}).get("per_step") or []
    if steps:  # one row at a time, straight to the output (one row per rank and step)
        body = ([str(r["rank"]), "all" if r["step"] == -1 else str(r["step"]), ms(r.get("step_time_us")),
                 ms(r.get("compute_us")), ms(r.get("comm_us")), ms(r.get("exposed_comm_us")),
                 pct(r.get("overlap_coverage")), pct(r.get("comm_share")), ms(r.get("idle_us"))] for r in steps)
        yield "<h2>Per rank and step</h2>"
        yield from _fold_pieces("per rank and step", _table_pieces(
            ["rank", "step", "step ms", "compute ms", "comm ms", "exposed ms", "overlap %", "comm share %",
             "idle ms"], body),
            len(steps), over=0)


def _problems(report: dict) -> str:
    files = (report.get("inputs") or {}).get("files") or []
    bad = [f for f in files if f.get("status") in ("failed", "salvaged")]
    messages = {f.get("message") for f in files}
    warns = [w for w in report.get("warnings") or [] if w not in messages]
    skipped = [f for f in files if f.get("status") == "skipped"]
    if not bad and not warns and not skipped:
        return ""
    items = [f"<li><b>{_e(f['status'])}</b> <code>{_e(f['path'])}</code>: {_e(f.get('message', ''))}</li>"
             for f in bad] + [f"<li>{_e(w)}</li>" for w in warns]
    for reason, n, _ in skipped_summary(report):
        paths = [f["path"] for f in skipped if (f.get("message") or "skipped") == reason]
        items.append(f"<li><b>skipped</b> {n} × {_e(reason)}<details><summary>{n} file(s)</summary><ul>"
                     + "".join(f"<li><code>{_e(p)}</code></li>" for p in paths) + "</ul></details></li>")
    return (f"<h2>Input problems and warnings</h2><details><summary>{len(bad)} failed or salvaged, "
            f"{len(skipped)} skipped, {len(warns)} warning(s)</summary><ul>{''.join(items)}</ul></details>")


def render_html(report: dict, job: Any = None) -> str:
    """The self-contained HTML report; the timelines, wait matrix and bandwidth plot need the loaded ``job``."""
    return sanitize.guard_ci_lines("".join(html_pieces(report, job)))


def write_html(report: dict, job: Any, fh: TextIO) -> int:
    """Write :func:`render_html`'s document to ``fh`` piece by piece (what ``--format html -o r.html`` does: the
    per-rank-and-step table of a large job is never held whole, as rows or as text); the same characters.
    Returns the characters written."""
    n = 0
    for piece in guarded_pieces(html_pieces(report, job)):
        fh.write(piece)
        n += len(piece)
    return n


def html_pieces(report: dict, job: Any = None) -> Iterator[str]:
    """The HTML document in pieces whose concatenation is the page (before :func:`sanitize.guard_ci_lines`)."""
    from analyzer.render.about import title as about_title
    title = f"analyze: {about_title(report)}"
    yield ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
           "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
           "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; img-src data:; "
           "style-src 'unsafe-inline'\">"
           f"<title>{_e(title)}</title><style>{CSS}</style></head><body><main>")
    yield _header(report) + _about(report) + _findings(report) + _hang(report) + _baseline(report)
    yield from _figure_pieces(report, job)
    yield from _table_section_pieces(report)
    yield _problems(report)
    yield "</main></body></html>\n"


#: the characters str.splitlines ends a line at (what sanitize.guard_ci_lines splits the document at)
_LINE_ENDS = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")


def guarded_pieces(pieces: Iterable[str]) -> Iterator[str]:
    """``pieces`` with :func:`sanitize.guard_ci_lines` applied as if to their concatenation (the same text),
    without joining them: a line's start is held back only while it is blanks and at most one ``:`` (it could
    still become ``::``), and a piece's trailing ``#`` or ``##`` only until the next piece shows whether a
    ``##[`` goes across."""
    held, at_start = "", True  # text not yet written; whether ``held`` begins a line whose start is undecided
    for piece in pieces:
        if not piece:
            continue
        segments = (held + piece).splitlines(keepends=True)
        held = ""
        out = []
        for k, seg in enumerate(segments):
            starts = at_start if k == 0 else True
            complete = seg[-1] in _LINE_ENDS
            if starts:
                rest = seg.lstrip()
                if not complete and rest in ("", ":"):  # still blanks (and maybe a ':'): undecided
                    held, at_start = seg, True
                    break
                if rest.startswith("::"):
                    i = len(seg) - len(rest)
                    seg = seg[:i] + sanitize.BREAK + seg[i:]
            if complete:
                out.append(seg.replace("##[", "#" + sanitize.BREAK + "#[") if "##[" in seg else seg)
                at_start = True
                continue
            keep = 2 if seg.endswith("##") else 1 if seg.endswith("#") else 0
            body = seg[:len(seg) - keep]
            out.append(body.replace("##[", "#" + sanitize.BREAK + "#[") if "##[" in body else body)
            held, at_start = seg[len(seg) - keep:], False
        if out:
            yield "".join(out)
    if held:
        yield held
