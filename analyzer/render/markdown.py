"""GitHub-flavoured Markdown for tickets: verdict, ranked findings with evidence and fix, key tables."""
from __future__ import annotations

import re
from typing import Any

from analyzer.render import sanitize

from analyzer.render.common import (job_shape, breakdown_table, confidence_text, has_hta, has_unsplit, overlap_text, unsplit_note, group_role, consequence_lines, cost_text, evidence_texts, mb, ms, num, pct, printable,
                                    ranges, skipped_summary, subject_text)

DETAILS_OVER = 12  # tables longer than this fold into <details>
_ICON = {"error": "🔴", "warning": "🟠", "info": "🔵"}


def md_escape(text: Any) -> str:
    """Make input-derived text inert in Markdown tables and inline text (`sanitize.markdown`)."""
    return sanitize.markdown(text)


def md_code(text: Any) -> str:
    """Input-derived text as an inline code span (`sanitize.md_code`)."""
    return sanitize.md_code(text)


_BARE_PIPE = re.compile(r"(?<!\\)\|")


def _cell(c: Any) -> str:
    """A table cell on one line that cannot open HTML or split the row (callers escape the rest)."""
    return _BARE_PIPE.sub("\\|", sanitize.text(c).replace("<", "&lt;").replace(">", "&gt;"))


def md_table(headers: list[str], rows: list[list[str]], summary: str = "", left: frozenset = frozenset()) -> list[str]:
    """A GFM table; longer than DETAILS_OVER rows it folds into a collapsible <details> block. ``left``: columns
    of words (a cause), left-aligned like the first; numbers right-aligned."""
    align = ["---" if i == 0 or i in left else "---:" for i in range(len(headers))]
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(_cell(c) for c in r) + " |" for r in rows]
    if len(rows) > DETAILS_OVER:
        return [f"<details><summary>{summary or 'table'} ({len(rows)} rows)</summary>", ""] + lines + ["", "</details>"]
    return lines


def _head(report: dict) -> list[str]:
    job = report.get("job") or {}
    s = job.get("summary") or {}
    cr = report.get("cross_rank") or {}
    inputs = report.get("inputs") or {}
    verdict = report.get("verdict") or "no verdict"
    out = [f"## Trace analysis: {md_escape(verdict)}", ""]
    jobs = inputs.get("jobs") or []
    if len(jobs) > 1:
        sel = next((j for j in jobs if j.get("selected")), jobs[0])
        out += [f"**Job {md_escape(sel.get('label'))}** of {len(jobs)} found in the inputs (not analysed: "
                + ", ".join(md_escape(j.get("label")) for j in jobs if j is not sel) + "; choose with `--job`).", ""]
    facts = [f"**ranks** {len(job.get('ranks') or [])}" + (f" of {job['world_size']}" if job.get("world_size") else "")]
    hosts = sorted(set(((cr.get("hosts") or {}).get("rank_to_host") or {}).values()))
    if hosts:
        facts.append(f"**hosts** {len(hosts)}")
    steps = s.get("steps") or []
    if steps:
        from analyzer.render.about import steps_label
        label = steps_label(steps)
        word, rest = label.split(" ", 1)
        facts.append("**steps** whole trace" if steps == [-1] else f"**{word}** {rest}")
    if s.get("mean_step_time_us") is not None:
        facts.append(f"**mean step** {ms(s['mean_step_time_us'])} ms")
        facts.append(f"**comm share** {pct(s.get('comm_share'))}")
        facts.append(f"**exposed comm** {pct(s.get('exposed_comm_share'))}{unsplit_note(s)}")
        facts.append(f"**overlap** {pct(s.get('overlap_coverage'))} of the transfer")
        if s.get("hta_overlap_coverage") is not None:
            facts.append(f"**HTA overlap** {pct(s.get('hta_overlap_coverage'))} (comm kernels)")
        facts.append(f"**idle** {pct(s.get('idle_share'))}")
        facts.append(f"**worst-step spread** {pct(s.get('max_step_time_spread'))}")
    out.append(" · ".join(facts))
    out.append("")
    shape = job_shape(report)
    if shape:
        out += [f"**job shape** {md_escape(shape)}", ""]
    out.append(f"Inputs: {inputs.get('read', 0)} read, {inputs.get('salvaged', 0)} salvaged, "
               f"{inputs.get('skipped', 0)} skipped, {inputs.get('failed', 0)} failed"
               + (f"; **missing ranks {ranges(job['missing_ranks'])}**" if job.get("missing_ranks") else "")
               + f". Tool: analyze {md_escape(report.get('tool', {}).get('version', '?'))}.")
    return out


def _about(report: dict) -> list[str]:
    """What the report describes (the ``about`` block) as a short list under the title."""
    from analyzer.render.about import about_lines
    lines = about_lines(report)
    if not lines:
        return []
    return [f"- **{k}** {md_escape(v)}" for k, v in lines] + [""]


def _findings(report: dict) -> list[str]:
    findings = report.get("findings") or []
    out = ["", "### Findings", ""]
    if not findings:
        return out + ["No findings."]
    for i, f in enumerate(findings, 1):
        sev = str(f.get("severity", "info"))
        subj = subject_text(f)
        out.append(f"{i}. {_ICON.get(sev, '')} **{sev.upper()} `{md_escape(f.get('id', ''))}`** "
                   f"{md_escape(f.get('title', ''))}" + (f" — {md_escape(subj)}" if subj else ""))
        for e in evidence_texts(f):
            out.append(f"   - {md_escape(e)}")
        meta = [x for x in (cost_text(f), confidence_text(f)) if x]
        if meta:
            out.append(f"   - _{md_escape('; '.join(meta))}_")
        if f.get("fix"):
            out.append(f"   - **Fix:** {md_escape(f['fix'])}")
        cons = consequence_lines(f)
        if cons:
            out.append(f"   - **Explains** ({len(cons)}):")
            out += [f"     - {md_escape(c)}" for c in cons]
    return out


def _hang(report: dict) -> list[str]:
    hang = report.get("hang") or {}
    if hang.get("status") != "hang":
        return []
    rows = [[md_escape(d.get("kind")), md_escape(d.get("process_group")), num(d.get("seq")), md_escape(d.get("op")),
             ranges(d.get("culprit_ranks") or []) or "-", ranges(d.get("waiting_ranks") or []) or "-"]
            for d in hang.get("diagnoses") or []]
    return ["", "### Hang post-mortem", ""] + md_table(["kind", "group", "seq", "op", "culprit ranks", "waiting"],
                                                      rows, "hang diagnoses", left=frozenset({1, 3}))


def _baseline(report: dict) -> list[str]:
    b = report.get("baseline") or {}
    if not b.get("metrics"):
        return []
    from analyzer.report.baseline import format_change, format_value
    rows = [[md_escape(m.get("name")), format_value(str(m.get("metric")), m.get("baseline")),
             format_value(str(m.get("metric")), m.get("current")), format_change(m), format_change(m, "threshold"),
             "**regressed**" if m.get("regressed") else ""] for m in b["metrics"]]
    return ["", f"### Against the baseline {md_code(b.get('source'))}", ""] + md_table(
        ["metric", "baseline", "current", "change", "threshold", ""], rows, "baseline metrics")


def _steps(report: dict) -> list[str]:
    rows = (report.get("metrics") or {}).get("per_step") or []
    if not rows:
        return []
    body = [[str(r["rank"]), "all" if r["step"] == -1 else str(r["step"]), ms(r.get("step_time_us")),
             ms(r.get("compute_us")), ms(r.get("comm_us")), ms(r.get("exposed_comm_us")),
             pct(r.get("overlap_coverage")), pct(r.get("comm_share")), ms(r.get("idle_us"))] for r in rows]
    return ["", "### Per-rank step table", ""] + md_table(
        ["rank", "step", "step ms", "compute ms", "comm ms", "exposed comm ms", "overlap %", "comm share %",
         "idle ms"], body, "per rank and step")


def _ranks(report: dict) -> list[str]:
    rows = (report.get("metrics") or {}).get("per_rank") or []
    strag = ((report.get("cross_rank") or {}).get("stragglers") or {})
    per = {r["rank"]: r for r in strag.get("per_rank") or []}
    if not rows:
        return []
    from analyzer.render.text import per_step_mean
    unsplit, hta = has_unsplit(rows), has_hta(rows)  # once: the column is the table's, not each row's
    body = [[str(r["rank"]) + (" ⚠ straggler" if r["rank"] == strag.get("straggler") else ""),
             ms(r.get("mean_step_time_us")), pct(r.get("comm_share")), ms(per_step_mean(r, "wait_us")),
             ms(per_step_mean(r, "transfer_us")), pct(r.get("exposed_comm_share")),
             pct(r.get("overlap_coverage"))] + ([pct(r.get("hta_overlap_coverage"))] if hta else [])
            + [pct(r.get("idle_share")), pct(per.get(r["rank"], {}).get("pct_last"))]
            + ([ms(per_step_mean(r, "unsplit_us"))] if unsplit else []) for r in rows]
    return ["", "### Per-rank summary", ""] + md_table(
        ["rank", "mean step ms", "comm share %", "wait ms/step", "transfer ms/step", "exposed comm %",
         "transfer overlap %"] + (["HTA overlap %"] if hta else [])
        + ["idle %", "last to arrive %"] + (["unsplit ms/step"] if unsplit else []), body, "per rank")


def _breakdown(report: dict) -> list[str]:
    headers, rows, note = breakdown_table(report)
    if not rows:
        return []
    return ["", "### Time breakdown per rank", "", md_escape(note), ""] + md_table(headers, rows, "time breakdown")


def _groups(report: dict) -> list[str]:
    cr = report.get("cross_rank") or {}
    out = []
    groups = cr.get("process_groups") or []
    if groups:
        body = [[md_escape(g.get("name", "")), md_escape(group_role(g)), num(g.get("size")),
                 ranges(g.get("ranks") or []), md_escape(g.get("span", "")),
                 md_escape(", ".join(f"{k}×{v}" for k, v in (g.get("ops") or {}).items()))] for g in groups]
        out += ["", "### Process groups", ""] + md_table(["group", "role", "size", "ranks", "span", "ops"], body,
                                                        "process groups")
    coll = (cr.get("collectives") or {}).get("by_group_op") or []
    if coll:
        from analyzer.render.text import _per_call_bytes
        body = [[md_escape(c.get("process_group", "")), md_escape(c.get("op", "")), num(c.get("count")),
                 mb(_per_call_bytes(c)), ms(c.get("mean_transfer_us")), num(c.get("mean_busbw_gbps")),
                 md_escape(c.get("link_class", ""))] for c in coll]
        out += ["", "### Collectives (per call)", ""] + md_table(
            ["group", "op", "calls", "MB/call", "transfer ms/call", "busbw GB/s", "link"], body, "collectives")
    pipe = cr.get("pipeline") or {}
    if pipe.get("detected"):
        out += ["", f"Pipeline: **{md_escape(pipe.get('schedule'))}**, p={pipe.get('p')}, m={pipe.get('m')}, "
                    f"bubble {pct(pipe.get('mean_bubble_rate'))} (theoretical {pct(pipe.get('theoretical_bubble'))})."]
    return out


def _problems(report: dict) -> list[str]:
    """Failed and salvaged files one per line; skipped files counted by reason with the first few names."""
    files = (report.get("inputs") or {}).get("files") or []
    bad = [f for f in files if f.get("status") in ("failed", "salvaged")]
    warns = report.get("warnings") or []
    skipped = [f for f in files if f.get("status") == "skipped"]
    if not bad and not warns and not skipped:
        return []
    lines = [f"- **{md_escape(f['status'])}** {md_code(f['path'])}: {md_escape(f.get('message', ''))}" for f in bad]
    for reason, n, ex in skipped_summary(report):
        lines.append(f"- **skipped** {n} × {md_escape(reason)}: " + ", ".join(md_code(p) for p in ex)
                     + (", …" if n > len(ex) else ""))
    messages = {f.get("message") for f in files}
    lines += [f"- {md_escape(w)}" for w in warns if w not in messages]
    if len(lines) > DETAILS_OVER:
        return ["", f"<details><summary>Input problems and warnings ({len(lines)})</summary>", ""] + lines + [
            "", "</details>"]
    return ["", "### Input problems and warnings", ""] + lines


def _memory(report: dict) -> list[str]:
    from analyzer.render import memory_table as mt
    rows, other = mt.peak_rows(report), mt.other_lines(report)
    out = []
    if rows:
        out += ["", "### Memory per rank", "", md_escape(mt.note(report)), ""] + md_table(mt.HEADERS, rows,
                                                                                        "memory per rank")
    if other:
        out += ["", "### Memory from logs and allocator snapshots", ""] + ["- " + md_escape(x) for x in other]
    return out


def render_markdown(report: dict) -> str:
    """The report as a Markdown summary that pastes into an issue tracker."""
    out = _head(report)
    out[2:2] = _about(report)
    out = out + _findings(report) + _hang(report) + _baseline(report) + _ranks(report) + _breakdown(report) + _groups(report)
    out += _memory(report)
    out += _steps(report) + _problems(report)
    return sanitize.guard_ci_lines("\n".join(out) + "\n")
