"""The scaling comparison as one self-contained HTML page: an inline SVG of efficiency and its factors against
world size (log scale), the runs table, the factors with their share of the loss, each step up (docs/scaling.md).
Input text passes through sanitize.html."""
from __future__ import annotations

import math
from typing import Optional

from analyzer.render import sanitize
from analyzer.render.compare_text import RUN_HEAD, SHORT, _f, _run_cells
from analyzer.scaling.factors import FACTORS

COLORS = {"efficiency": "#111111", "host_idle": "#e6194b", "load_balance": "#f58231", "bubble": "#911eb4",
          "serialisation": "#4363d8", "transfer": "#3cb44b", "computation_scalability": "#9a6324",
          "guide": "#999999"}
STYLE = """body{font-family:system-ui,sans-serif;margin:16px;color:#222;max-width:1200px}
table{border-collapse:collapse;font-size:13px;margin:8px 0 16px}td,th{border:1px solid #ccc;padding:3px 6px;
text-align:right}th{background:#f3f3f3}td:first-child,th:first-child{text-align:left;white-space:nowrap}.loss{color:#b00}
.gain{color:#070}.note{color:#555;font-size:13px}svg text{font-size:12px;font-family:system-ui,sans-serif}"""


def _plot(runs: list[dict], guide: dict) -> str:
    """Efficiency (thick) and each factor against the smallest run, against log2 world size; the guide dashed."""
    W, H, L, R, T, B = 760, 340, 52, 190, 16, 40
    sizes = sorted({r["world_size"] for r in runs})
    lo, hi = math.log2(sizes[0]), math.log2(sizes[-1])
    span = hi - lo or 1.0
    vals = [r.get("efficiency") or 0 for r in runs] + [v for r in runs for v in (r.get("factors") or {}).values()
                                                       if v is not None]
    ymax = max(1.0, min(2.0, max(vals, default=1.0)))
    ymin = max(0.0, min(0.0, min(vals, default=0.0)))

    def x(n: float) -> float:
        return L + (math.log2(n) - lo) / span * (W - L - R) if span else L + (W - L - R) / 2

    def y(v: float) -> float:
        return T + (ymax - min(max(v, ymin), ymax)) / (ymax - ymin) * (H - T - B)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" role="img" '
           'aria-label="scaling efficiency and its factors against world size">']
    for k in range(int(ymax * 10) + 1):
        v = k / 10
        if v < ymin:
            continue
        out.append(f'<line x1="{L}" x2="{W - R}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#eee"/>'
                   f'<text x="{L - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.1f}</text>')
    step = max(1, math.ceil(len(sizes) / 12))
    for n in sizes[::step]:
        out.append(f'<text x="{x(n):.1f}" y="{H - B + 16}" text-anchor="middle">{n}</text>')
    out.append(f'<text x="{(L + W - R) / 2}" y="{H - 6}" text-anchor="middle">world size (ranks, log scale)</text>')
    if guide:
        pts = " ".join(f"{x(n):.1f},{y(guide[n]):.1f}" for n in sizes)
        out.append(f'<polyline points="{pts}" fill="none" stroke="{COLORS["guide"]}" stroke-dasharray="5 4"/>')
    series = [("efficiency", [(r["world_size"], r.get("efficiency")) for r in runs])] + \
             [(f, [(r["world_size"], (r.get("factors") or {}).get(f)) for r in runs]) for f in FACTORS]
    for name, pts in series:
        pts = [(n, v) for n, v in pts if v is not None]
        if not pts:
            continue
        width = 3 if name == "efficiency" else 1.5
        out.append(f'<polyline points="{" ".join(f"{x(n):.1f},{y(v):.1f}" for n, v in pts)}" fill="none" '
                   f'stroke="{COLORS[name]}" stroke-width="{width}"/>')
        out += [f'<circle cx="{x(n):.1f}" cy="{y(v):.1f}" r="{3 if name == "efficiency" else 2}" '
                f'fill="{COLORS[name]}"/>' for n, v in pts]
    legend = [("efficiency", "efficiency E")] + [(f, f.replace("_", " ")) for f in FACTORS] + [("guide", "guide")]
    for i, (key, text) in enumerate(legend):
        yy = T + 10 + i * 18
        dash = ' stroke-dasharray="5 4"' if key == "guide" else ""
        out.append(f'<line x1="{W - R + 12}" x2="{W - R + 34}" y1="{yy}" y2="{yy}" stroke="{COLORS[key]}" '
                   f'stroke-width="{3 if key == "efficiency" else 2}"{dash}/>'
                   f'<text x="{W - R + 40}" y="{yy + 4}">{text}</text>')
    out.append("</svg>")
    return "".join(out)


def _share(v: Optional[float]) -> str:
    if v is None:
        return "-"
    cls = "loss" if v > 0.0005 else "gain" if v < -0.0005 else ""
    return f'<span class="{cls}">{-100 * v + 0.0:+.1f}</span>'


def render_html(doc: dict) -> str:
    esc = sanitize.html
    runs = doc.get("runs") or []
    k = doc.get("scaling") or {}
    title = f"Scaling across {len(runs)} runs"
    kind = (f"{esc(k.get('kind', 'unknown'))} scaling ({esc(k.get('source', ''))}"
            + (f", confidence {k.get('confidence', 0):.2f}" if k.get("source") == "inferred" else "")
            + f"): {esc(k.get('evidence', ''))}")
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>analyze: {esc(title)}</title>"
             f"<style>{STYLE}</style></head><body><h1>{esc(title)}</h1><p>{kind}</p>"]
    if runs:
        guide = {r["world_size"]: r.get("expected_efficiency") for r in runs if r.get("expected_efficiency")}
        parts.append("<h2>Efficiency and its factors against world size</h2>")
        parts.append(_plot(runs, guide))
        parts.append("<p class='note'>Each factor against the smallest run; their product is the efficiency. "
                     "Dashed: the guide value at that size.</p>")
    parts.append("<h2>Runs</h2><table><tr>" + "".join(f"<th>{h}</th>" for h in RUN_HEAD) + "</tr>")
    parts += ["<tr>" + "".join(f"<td>{c}</td>" for c in _run_cells(r, esc)) + "</tr>" for r in runs]
    parts.append("</table><h2>Where the efficiency went</h2><p class='note'>Factor against the smallest run, and "
                 "the points of efficiency it lost (red) or gained (green); the points add up to 1 − E.</p>"
                 "<table><tr><th>run</th><th>N</th><th>E</th>" +
                 "".join(f"<th>{f.replace('_', ' ')}</th>" for f in FACTORS) + "<th>dominant</th></tr>")
    for r in runs:
        f, sh = r.get("factors") or {}, r.get("loss_shares") or {}
        parts.append(f"<tr><td>{esc(r['label'])}</td><td>{r['world_size']}</td><td>{_f(r.get('efficiency'))}</td>"
                     + "".join(f"<td>{_f(f.get(x))} ({_share(sh.get(x))})</td>" for x in FACTORS)
                     + f"<td>{esc(r.get('dominant') or '-')}</td></tr>")
    parts.append("</table>")
    if doc.get("steps_up"):
        parts.append("<h2>Each step up in size</h2><table><tr><th>step</th><th>efficiency</th>" +
                     "".join(f"<th>{SHORT[f]}</th>" for f in FACTORS) + "<th>most lost</th><th>fix</th></tr>")
        for s in doc["steps_up"]:
            sh = s.get("loss_shares") or {}
            parts.append(f"<tr><td>{s['from_world_size']} → {s['to_world_size']}</td><td>×{s['efficiency']:.2f}</td>"
                         + "".join(f"<td>{_share(sh.get(f))}</td>" for f in FACTORS)
                         + f"<td>{esc(s.get('dominant') or '-')}</td>"
                         f"<td style='text-align:left'>{esc(s.get('fix') or '')}</td></tr>")
        parts.append("</table>")
    for n in doc.get("notes") or []:
        parts.append(f"<p class='note'>note: {esc(n)}</p>")
    for w in doc.get("warnings") or []:
        parts.append(f"<p class='note'>warning: {esc(w)}</p>")
    parts.append("</body></html>\n")
    return "".join(parts)
