"""The scaling comparison as text and Markdown: the runs table, efficiency with its factors, the waterfall of each
step up in size, the dominant loss and its fix (docs/scaling.md). Input text passes through sanitize."""
from __future__ import annotations

from typing import Any, Callable, Optional

from analyzer.render import sanitize
from analyzer.scaling.factors import FACTORS

SHORT = {"host_idle": "host", "load_balance": "LB", "bubble": "bubble", "serialisation": "serial",
         "transfer": "transfer", "computation_scalability": "CS"}


def _ms(us: Optional[float]) -> str:
    return "-" if us is None else f"{us / 1e3:.1f}"


def _pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _f(x: Optional[float], nd: int = 2) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def _thr(r: dict) -> str:
    if r.get("throughput") is None:
        return "-"
    unit = "/s" if r.get("throughput_unit") == "samples/s" else " st/s"
    return f"{r['throughput']:.3g}{unit}"


def _run_cells(r: dict, esc: Callable[[Any], str]) -> list[str]:
    return [esc(r.get("label")), str(r.get("world_size")), esc(r.get("shape")), str(r.get("steps")),
            _ms(r.get("step_time_median_us")), _ms(r.get("step_time_p90_us")), _ms(r.get("step_time_max_us")),
            "-" if r.get("batch_per_rank") is None else f"{r['batch_per_rank']:g}/{r.get('global_batch') or 0:g}",
            _thr(r), _pct(r.get("comm_share")), _pct(r.get("exposed_comm_share")), _pct(r.get("bubble_share")),
            _pct(r.get("idle_share")), _f(r.get("efficiency")), esc(r.get("judgement"))]


RUN_HEAD = ["run", "N", "shape", "steps", "median ms", "p90 ms", "max ms", "batch rank/global", "throughput",
            "comm", "exposed", "bubble", "idle", "eff", "judged"]


def _kind_line(doc: dict) -> str:
    k = doc.get("scaling") or {}
    conf = "" if k.get("source") != "inferred" else f", confidence {k.get('confidence', 0):.2f}"
    return f"{k.get('kind', 'unknown')} scaling ({k.get('source', '')}{conf}): {k.get('evidence', '')}"


def _factor_cells(values: dict, shares: dict) -> list[str]:
    return [f"{_f(values.get(f))} ({'-' if shares.get(f) is None else f'{-100 * shares[f] + 0.0:+.1f}'})"
            for f in FACTORS]


def _volume_lines(doc: dict, esc: Callable[[Any], str]) -> list[str]:
    """One line per run with communication: bus bytes per step, measured transfer, the time the volume explains."""
    out = []
    for r in doc.get("runs") or []:
        if r.get("volume_ratio") is None:
            continue
        out.append(f"{esc(r['label'])} (N={r['world_size']}): {r['comm_bus_bytes_per_step'] / 1e6:.2f} MB bus "
                   f"bytes per step, transfer {_ms(r['comm_transfer_us_per_step'])} ms measured, "
                   f"{_ms(r['volume_time_us'])} ms at {r['reference_busbw_gbps']:.3g} GB/s "
                   f"(x{r['volume_ratio']:.2f}): {r['volume_verdict']}")
    return out


def render_text(doc: dict) -> str:
    esc = sanitize.text
    runs = doc.get("runs") or []
    lines = [f"Scaling across {len(runs)} runs: {esc(_kind_line(doc))}"]
    rows = [RUN_HEAD] + [_run_cells(r, esc) for r in runs]
    widths = [max(len(row[i]) for row in rows) for i in range(len(RUN_HEAD))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    lines.append("")
    lines.append("Efficiency factors against the smallest run (points of efficiency each lost):")
    head = ["run", "N", "eff"] + [SHORT[f] for f in FACTORS] + ["dominant"]
    frows = [head] + [[esc(r["label"]), str(r["world_size"]), _f(r.get("efficiency"))] +
                      _factor_cells(r.get("factors") or {}, r.get("loss_shares") or {}) +
                      [r.get("dominant") or "-"] for r in runs]
    widths = [max(len(row[i]) for row in frows) for i in range(len(head))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in frows]
    if doc.get("steps_up"):
        lines.append("")
        lines.append("Each step up in size (efficiency across the step; points lost per factor):")
        for s in doc["steps_up"]:
            parts = ", ".join(f"{SHORT[f]} {-100 * v:+.1f}" for f, v in (s.get("loss_shares") or {}).items()
                              if v is not None and abs(v) >= 0.0005)
            lines.append(f"  {s['from_world_size']} -> {s['to_world_size']} ({esc(s['from_label'])} -> "
                         f"{esc(s['to_label'])}): x{s['efficiency']:.2f}; {parts or 'no change'}"
                         + (f"; most lost: {s['dominant']}: {s['fix']}" if s.get("dominant") else ""))
    vol = _volume_lines(doc, esc)
    if vol:
        lines += ["", "Volume against bandwidth (reference: the link's nominal bus bandwidth, else the best run's):"]
        lines += ["  " + v for v in vol]
    for n in doc.get("notes") or []:
        lines.append(f"note: {esc(n)}")
    for w in doc.get("warnings") or []:
        lines.append(f"warning: {esc(w)}")
    return "\n".join(lines) + "\n"


def render_markdown(doc: dict) -> str:
    esc = sanitize.markdown
    runs = doc.get("runs") or []
    out = [f"# Scaling across {len(runs)} runs", "", esc(_kind_line(doc)), "",
           "| " + " | ".join(RUN_HEAD) + " |", "|" + "---|" * len(RUN_HEAD)]
    out += ["| " + " | ".join(_run_cells(r, esc)) + " |" for r in runs]
    head = ["run", "N", "efficiency"] + [SHORT[f] for f in FACTORS] + ["dominant"]
    out += ["", "## Efficiency and its factors", "",
            "Each factor against the smallest run; in brackets the points of efficiency it lost (its share of "
            "1 − E; they add up to the loss). " + ", ".join(f"{SHORT[f]} = {f.replace('_', ' ')}" for f in FACTORS)
            + ".", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join([esc(r["label"]), str(r["world_size"]), _f(r.get("efficiency"))] +
                              _factor_cells(r.get("factors") or {}, r.get("loss_shares") or {}) +
                              [r.get("dominant") or "-"]) + " |" for r in runs]
    if doc.get("steps_up"):
        out += ["", "## Each step up in size", "", "| step | efficiency | " +
                " | ".join(SHORT[f] for f in FACTORS) + " | most lost | fix |", "|" + "---|" * (len(FACTORS) + 4)]
        for s in doc["steps_up"]:
            sh = s.get("loss_shares") or {}
            out.append(f"| {s['from_world_size']} → {s['to_world_size']} | ×{s['efficiency']:.2f} | " +
                       " | ".join("-" if sh.get(f) is None else f"{-100 * sh[f] + 0.0:+.1f}" for f in FACTORS) +
                       f" | {s.get('dominant') or '-'} | {esc(s.get('fix') or '')} |")
    vol = _volume_lines(doc, esc)
    if vol:
        out += ["", "## Volume against bandwidth", "",
                "Reference: the link's nominal bus bandwidth, else the best run's effective one.", ""]
        out += [f"- {v}" for v in vol]
    if doc.get("notes") or doc.get("warnings"):
        out += [""] + [f"- note: {esc(n)}" for n in doc.get("notes") or []] + \
               [f"- warning: {esc(w)}" for w in doc.get("warnings") or []]
    return "\n".join(out) + "\n"
