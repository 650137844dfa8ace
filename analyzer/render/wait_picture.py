"""The HTML post-mortem's picture of a hang: who waits for whom, as an inline SVG.

Each row is one wait: the ranks waiting in a process group's collective (one box: ranks in the same state share
it, so a 10,000-rank hang draws a handful of rows) with an arrow to the rank(s) they wait for. A box says each
side's last entered and completed sequence number in that group; the culprit is red, a suspect of a tie amber.
Rows come from `hang.waits` (the wait-for edges of the Flight Recorder analysis) or, where no dump gave edges,
from the diagnoses' waiting and culprit ranks. Every input string enters through `sanitize.html`.
"""
from __future__ import annotations

from typing import Any

from analyzer.render import sanitize
from analyzer.render.common import ranges

MAX_ROWS = 40
W, BOX_W, ROW_H, BOX_H, TOP = 940, 350, 74, 52, 36
LEFT_X, RIGHT_X = 16, W - 16 - 350
COLOURS = {"culprit": ("#ffebee", "#c62828"), "suspect": ("#fff8e1", "#ef6c00"), "waiting": ("#e3f2fd", "#1565c0"),
           "other": ("#f5f5f5", "#757575")}


def _e(x: Any) -> str:
    return sanitize.html(x)


def _rows(hang: dict) -> list[dict]:
    rows = [dict(r) for r in hang.get("waits") or []]
    if rows:
        return rows
    out = []
    for d in hang.get("diagnoses") or []:  # no edges (no dumps): the diagnoses' own waiting → culprit
        if d.get("waiting_ranks") and d.get("culprit_ranks"):
            out.append({"process_group": d.get("process_group") or "", "seq": d.get("seq"), "op": d.get("op") or "",
                        "waiting": list(d["waiting_ranks"]), "waits_for": list(d["culprit_ranks"]), "absent": []})
    return out


def _seq_text(g: dict | None, ranks: list[int]) -> str:
    """'entered #6, completed #4' for the ranks of a box in group ``g`` (a `hang.groups` row; ranges where they
    differ)."""
    if not g:
        return ""

    def span(col: str) -> str:
        vals = sorted({v for r in ranks for v in [(g.get(col) or {}).get(str(r))] if v is not None and v >= 0})
        if not vals:
            return "-"
        return f"#{vals[0]}" if len(vals) == 1 else f"#{vals[0]}–#{vals[-1]}"
    return f"entered {span('last_enqueued')}, completed {span('last_completed')}"


def _box(x: int, y: int, kind: str, title: str, sub: str) -> str:
    fill, stroke = COLOURS[kind]
    return (f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="6" fill="{fill}" stroke="{stroke}" '
            f'stroke-width="{3 if kind == "culprit" else 1.5}"/>'
            f'<text x="{x + 10}" y="{y + 21}" font-size="14" font-weight="600" fill="#222">{_e(title)}</text>'
            f'<text x="{x + 10}" y="{y + 41}" font-size="12" fill="#555">{_e(sub)}</text>')


def _ranks_title(ranks: list[int], limit: int = 44) -> str:
    text = ranges(ranks).replace(",", ", ")
    if len(text) > limit:
        text = text[:limit - 1] + "…"
    return f"rank {text}" if len(ranks) == 1 else f"ranks {text} ({len(ranks)})"


def wait_picture(report: dict) -> str:
    """The SVG (with its caption) for a report whose hang section names waits or culprits; '' otherwise."""
    hang = report.get("hang") or {}
    if hang.get("status") != "hang":
        return ""
    rows = _rows(hang)
    if not rows:
        return ""
    culprits = {int(r) for d in hang.get("diagnoses") or [] if not d.get("tie") and (d.get("confidence") or 0) >= 0.5
                for r in d.get("culprit_ranks") or []}
    suspects = {int(r) for d in hang.get("diagnoses") or [] if d.get("tie") for r in d.get("culprit_ranks") or []}
    by_group = {str(x.get("process_group")): x for x in hang.get("groups") or []}
    more = max(0, len(rows) - MAX_ROWS)
    rows = rows[:MAX_ROWS]
    parts: list[str] = []
    y = TOP
    last_group = None
    for r in rows:
        g = str(r.get("process_group") or "")
        if g != last_group:
            gi = by_group.get(g) or {}
            members = f" — ranks reporting {ranges(gi['ranks'])}" if gi.get("ranks") else ""
            parts.append(f'<text x="{LEFT_X}" y="{y + 4}" font-size="13" font-weight="700" fill="#333">'
                         f'{_e(f"process group {g}" if g else "process group not known")}{_e(members)}</text>')
            y += 14
            last_group = g
        waiting = [int(x) for x in r.get("waiting") or []]
        target = [int(x) for x in r.get("waits_for") or []]
        kind = "culprit" if set(target) & culprits else "suspect" if set(target) & suspects else "other"
        wkind = "culprit" if set(waiting) <= culprits and waiting else "waiting"
        seq = f"#{r['seq']}" if r.get("seq") is not None else ""
        parts.append(_box(LEFT_X, y, wkind, _ranks_title(waiting), _seq_text(by_group.get(g), waiting) or "waiting"))
        tsub = _seq_text(by_group.get(g), target) or ""
        if set(target) & set(r.get("absent") or []):
            tsub = (tsub + "; " if tsub else "") + "never entered it"
        label = {"culprit": "culprit", "suspect": "suspect (tie)", "other": ""}[kind]
        parts.append(_box(RIGHT_X, y, kind, _ranks_title(target) + (f" — {label}" if label else ""), tsub or "-"))
        ay = y + BOX_H // 2
        x0, x1 = LEFT_X + BOX_W, RIGHT_X
        parts.append(f'<line x1="{x0 + 4}" y1="{ay}" x2="{x1 - 8}" y2="{ay}" stroke="#424242" stroke-width="2" '
                     f'marker-end="url(#arrow)"/>'
                     f'<text x="{(x0 + x1) // 2}" y="{ay - 8}" font-size="12" text-anchor="middle" fill="#333">'
                     f'{_e(("waits in " + " ".join(x for x in (str(r.get("op") or ""), seq) if x)).strip())}</text>')
        y += ROW_H
    if more:
        parts.append(f'<text x="{LEFT_X}" y="{y + 8}" font-size="12" fill="#666">… {more} more wait row(s) in '
                     f'the JSON report (hang.waits)</text>')
        y += 20
    h = y + 8
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" viewBox="0 0 {W} {h}" role="img" '
           f'aria-label="who waits for whom" style="max-width:100%;height:auto;background:#fff">'
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="8" markerHeight="8" '
           'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#424242"/></marker></defs>'
           f'<text x="{LEFT_X}" y="20" font-size="12" fill="#666">waiting ranks</text>'
           f'<text x="{RIGHT_X}" y="20" font-size="12" fill="#666">the rank(s) they wait for</text>'
           + "".join(parts) + "</svg>")
    return (f'<figure class="waitfor">{svg}<figcaption>Who waits for whom: each arrow goes from the ranks waiting in '
            "a collective to the rank(s) they wait for; ranks in the same state share a box; entered / completed "
            "are each side's last sequence numbers in that group. Red: the culprit; amber: a suspect the evidence "
            "cannot single out.</figcaption></figure>")
