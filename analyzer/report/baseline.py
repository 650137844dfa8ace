"""Compare a report against an earlier run (a folder analysed the same way, or a saved JSON report).

Regressions beyond a threshold become findings, so `analyze traces/ --baseline main-traces/` fails CI on a
slowdown. Thresholds (docs/json-schema.md, `baseline`): relative for times and bandwidths, absolute (fraction
points) for shares.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import orjson

from rules.finding import SEVERITY_RANK

REPORT_SCHEMA = "dtrace-analyzer/report"


@dataclass(frozen=True)
class Metric:
    """One compared quantity: how to read it, which way is worse, the threshold and the severity of a regression."""

    name: str
    kind: str          # "relative" (change = cur/base − 1) | "absolute" (change = cur − base)
    worse: int         # +1: higher is worse; −1: lower is worse
    threshold: float   # magnitude of a change in the worse direction that counts as a regression
    severity: str
    rule: str
    title: str


DEFAULT_METRICS = (
    Metric("step_time", "relative", +1, 0.05, "error", "BASE001", "Step time regressed against the baseline"),
    Metric("comm_time", "relative", +1, 0.10, "warning", "BASE002", "Communication time regressed"),
    Metric("comm_share", "absolute", +1, 0.05, "warning", "BASE002", "Communication share of the step grew"),
    Metric("exposed_comm_share", "absolute", +1, 0.05, "warning", "BASE002", "Exposed communication grew"),
    Metric("overlap_coverage", "absolute", -1, 0.10, "warning", "BASE002", "Compute/comm overlap dropped"),
    Metric("bubble_rate", "absolute", +1, 0.05, "warning", "BASE002", "Pipeline bubble grew"),
    Metric("busbw", "relative", -1, 0.10, "warning", "BASE003", "Collective bus bandwidth dropped"),
)
DEFAULT_THRESHOLDS = {m.name: m.threshold for m in DEFAULT_METRICS}


class BaselineError(Exception):
    """The baseline could not be read (message names the path and the reason)."""


def is_report_file(path: Path) -> Optional[dict]:
    """The parsed report when ``path`` is a saved `--format json` report, else None."""
    if not path.is_file() or path.suffix.lower() != ".json":
        return None
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    return data if isinstance(data, dict) and data.get("schema") == REPORT_SCHEMA else None


def load_baseline(source: str, analyse: Callable[[list[str]], dict]) -> dict:
    """The baseline report: a saved JSON report as is, or ``analyse([source])`` for a folder / trace files."""
    p = Path(source)
    if not p.exists():
        raise BaselineError(f"{source}: baseline not found")
    saved = is_report_file(p)
    if saved is not None:
        return saved
    report = analyse([source])
    if not report.get("ranks") and not _d(report.get("metrics")).get("per_step"):
        raise BaselineError(f"{source}: no trace in the baseline could be read")
    return report


def _mean(values: list[Optional[float]]) -> Optional[float]:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def _d(x: Any) -> dict:
    """A report member as a dict ({} when a saved report holds something else there)."""
    return x if isinstance(x, dict) else {}


def _rows(x: Any) -> list[dict]:
    """A report member as a list of dicts (other items dropped)."""
    return [r for r in x if isinstance(r, dict)] if isinstance(x, list) else []


def _f(x: Any) -> Optional[float]:
    """A compared value: a finite number, else None (a saved report may hold anything)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    try:
        v = float(x)
    except OverflowError:
        return None
    return v if v == v and abs(v) != float("inf") else None


def _job_values(report: dict) -> dict[str, Optional[float]]:
    s = _d(_d(report.get("job")).get("summary"))
    per_step = _rows(_d(report.get("metrics")).get("per_step"))
    pipe = _d(_d(report.get("cross_rank")).get("pipeline"))
    return {
        "step_time": _f(s.get("mean_step_time_us")),
        "comm_time": _mean([_f(r.get("comm_us")) for r in per_step]),
        "comm_share": _f(s.get("comm_share")),
        "exposed_comm_share": _f(s.get("exposed_comm_share")),
        "overlap_coverage": _f(s.get("overlap_coverage")),
        "bubble_rate": _f(pipe.get("mean_bubble_rate")) if pipe.get("detected") else None,
    }


def _busbw(report: dict) -> dict[tuple[str, str], dict]:
    rows = _rows(_d(_d(report.get("cross_rank")).get("collectives")).get("by_group_op"))
    return {(str(r.get("process_group")), str(r.get("op"))): dict(r, mean_busbw_gbps=_f(r.get("mean_busbw_gbps")))
            for r in rows if _f(r.get("mean_busbw_gbps"))}


def _row(m: Metric, name: str, cur: Optional[float], base: Optional[float], threshold: float) -> dict:
    change = None
    if cur is not None and base is not None:
        if m.kind == "relative":
            change = (cur / base - 1.0) if base else None
            if change is not None and not abs(change) < float("inf"):
                change = None
        else:
            change = cur - base
    regressed = change is not None and change * m.worse > threshold
    return {"name": name, "metric": m.name, "current": cur, "baseline": base, "change": change, "kind": m.kind,
            "threshold": threshold * m.worse, "regressed": bool(regressed), "severity": m.severity}


def _d(x) -> dict:
    return x if isinstance(x, dict) else {}


def _l(x) -> list:
    return x if isinstance(x, list) else []


def _size(g: dict) -> int | None:
    try:
        return int(g.get("size") or len(_l(g.get("ranks"))))
    except (TypeError, ValueError):
        return None


def job_shape(report: dict) -> dict:
    """What makes two runs the same job: world size, hosts, and the process groups by role and size. A saved
    baseline is input like any other: members of the wrong type count as absent."""
    report = _d(report)
    cr = _d(report.get("cross_rank"))
    hosts = {str(h) for h in _d(_d(cr.get("hosts")).get("rank_to_host")).values()}
    groups: dict[str, list[int]] = {}
    for g in _l(cr.get("process_groups")):
        g = _d(g)
        role = str(g.get("judged_role") or g.get("role") or "unknown")
        if str(g.get("name", "")).startswith("stream:") or (n := _size(g)) is None:
            continue  # keys made from stream numbers, not process groups
        groups.setdefault(role, []).append(n)
    pipe = _d(cr.get("pipeline"))
    ws = _d(report.get("job")).get("world_size")
    return {"world_size": ws if isinstance(ws, int) else None, "hosts": len(hosts) or None,
            "groups": {r: sorted(v) for r, v in sorted(groups.items())},
            "degrees": {r: max(v) for r, v in sorted(groups.items()) if v},
            "pipeline_stages": pipe.get("p") if pipe.get("detected") and isinstance(pipe.get("p"), int) else None}


def shape_differences(cur: dict, base: dict) -> list[str]:
    """Human lines for every way the two jobs differ in shape ([] when they are the same job)."""
    out = []
    for key, what in (("world_size", "world size"), ("hosts", "hosts"), ("pipeline_stages", "pipeline stages")):
        a, b = cur.get(key), base.get(key)
        if a is not None and b is not None and a != b:
            out.append(f"{what}: {b} in the baseline, {a} now")
    ca, cb = cur.get("degrees") or {}, base.get("degrees") or {}
    for role in sorted(set(ca) | set(cb)):
        if role in ("unknown",):
            continue
        a, b = ca.get(role), cb.get(role)
        if a != b:
            out.append(f"{role} degree: {b if b is not None else 'none'} in the baseline, "
                       f"{a if a is not None else 'none'} now")
        elif len((cur.get("groups") or {}).get(role, [])) != len((base.get("groups") or {}).get(role, [])):
            out.append(f"{role} groups: {len(base['groups'][role])} in the baseline, {len(cur['groups'][role])} now")
    return out


#: A name's time per step must change by at least this share of the step to be listed in the diff.
DIFF_MIN_SHARE = 0.01
DIFF_TOP = 5


def profile_diff(current: dict, baseline: dict) -> dict:
    """What changed between the runs, as a trace diff: names whose time per step grew or shrank most, names that
    appeared or vanished, collectives whose count per step changed (by process group and op)."""
    step_us = ((current.get("job") or {}).get("summary") or {}).get("mean_step_time_us") or 0.0
    floor = DIFF_MIN_SHARE * step_us
    ck = {(k["name"], k["kind"]): k for k in (current.get("profile") or {}).get("kernels") or []}
    bk = {(k["name"], k["kind"]): k for k in (baseline.get("profile") or {}).get("kernels") or []}
    rows = []
    for key in set(ck) | set(bk):
        a, b = ck.get(key), bk.get(key)
        ta = a["time_per_step_us"] if a else 0.0
        tb = b["time_per_step_us"] if b else 0.0
        rows.append({"name": key[0], "kind": key[1], "baseline_us": tb, "current_us": ta, "change_us": ta - tb,
                     "baseline_count": b["count_per_step"] if b else 0.0,
                     "current_count": a["count_per_step"] if a else 0.0})
    rows.sort(key=lambda r: -abs(r["change_us"]))
    grew = [r for r in rows if r["change_us"] >= floor and r["baseline_us"] > 0][:DIFF_TOP]
    shrank = [r for r in rows if -r["change_us"] >= floor and r["current_us"] > 0][:DIFF_TOP]
    appeared = [r for r in rows if r["baseline_us"] == 0 and r["current_us"] >= floor][:DIFF_TOP]
    vanished = [r for r in rows if r["current_us"] == 0 and r["baseline_us"] >= floor][:DIFF_TOP]
    steps_c = max(1, (current.get("profile") or {}).get("steps_per_rank") or 1)
    steps_b = max(1, (baseline.get("profile") or {}).get("steps_per_rank") or 1)
    cc = {(str(r.get("process_group")), str(r.get("op"))): r for r in
          ((current.get("cross_rank") or {}).get("collectives") or {}).get("by_group_op") or []}
    bc = {(str(r.get("process_group")), str(r.get("op"))): r for r in
          ((baseline.get("cross_rank") or {}).get("collectives") or {}).get("by_group_op") or []}
    counts = []
    for key in sorted(set(cc) | set(bc)):
        a = (cc.get(key) or {}).get("count") or 0
        b = (bc.get(key) or {}).get("count") or 0
        pa, pb = a / steps_c, b / steps_b
        if abs(pa - pb) > 1e-9:
            counts.append({"process_group": key[0], "op": key[1], "baseline_per_step": pb, "current_per_step": pa,
                           "baseline_mean_transfer_us": (bc.get(key) or {}).get("mean_transfer_us"),
                           "current_mean_transfer_us": (cc.get(key) or {}).get("mean_transfer_us")})
    return {"grew": grew, "shrank": shrank, "appeared": appeared, "vanished": vanished,
            "collective_counts": counts}


def _diff_lines(diff: dict, comm_only: bool = False) -> list[str]:
    """Evidence lines for the diff: what grew, appeared, vanished; collective counts that changed (``comm_only``:
    only communication rows, for a communication regression)."""
    out = []
    if comm_only:
        diff = {k: [r for r in v if r.get("kind", "comm") == "comm"] for k, v in diff.items() if isinstance(v, list)}
    for r in diff.get("grew") or []:
        out.append(f"grew: {r['name'][:120]} {r['baseline_us']:.0f} → {r['current_us']:.0f} µs per step "
                   f"({r['change_us']:+.0f} µs; {r['baseline_count']:g} → {r['current_count']:g} calls)")
    for r in diff.get("appeared") or []:
        out.append(f"appeared: {r['name'][:120]} {r['current_us']:.0f} µs per step ({r['current_count']:g} calls)")
    for r in diff.get("vanished") or []:
        out.append(f"vanished: {r['name'][:120]} (was {r['baseline_us']:.0f} µs per step)")
    for r in (diff.get("collective_counts") or [])[:DIFF_TOP]:
        out.append(f"collective count: {r['op']} on process group {r['process_group']} "
                   f"{r['baseline_per_step']:g} → {r['current_per_step']:g} per step")
    return out


def compare(current: dict, baseline: dict, source: str,
            thresholds: Optional[dict[str, float]] = None) -> dict:
    """The `baseline` section: each metric's current and baseline value, change, threshold and verdict.

    When the two runs are jobs of a different shape (world size, hosts, group roles and sizes, pipeline stages) the
    values are kept for reading but none counts as a regression (`comparable: false`, BASE004 says why)."""
    th = dict(DEFAULT_THRESHOLDS)
    th.update(thresholds or {})
    cur_v, base_v = _job_values(current), _job_values(baseline)
    rows = []
    for m in DEFAULT_METRICS:
        if m.name == "busbw":
            continue
        if cur_v[m.name] is None and base_v[m.name] is None:
            continue
        rows.append(_row(m, m.name, cur_v[m.name], base_v[m.name], th[m.name]))
    bw = next(m for m in DEFAULT_METRICS if m.name == "busbw")
    cur_bw, base_bw = _busbw(current), _busbw(baseline)
    for key in sorted(set(cur_bw) & set(base_bw)):
        rows.append(_row(bw, f"busbw {key[1]} {key[0]}", cur_bw[key]["mean_busbw_gbps"],
                         base_bw[key]["mean_busbw_gbps"], th["busbw"]))
    cs, bs = job_shape(current), job_shape(baseline)
    differences = shape_differences(cs, bs)
    if differences:
        for r in rows:
            r["regressed"] = False
    return {"source": source, "thresholds": th, "metrics": rows,
            "regressions": sum(1 for r in rows if r["regressed"]),
            "comparable": not differences, "shape": {"current": cs, "baseline": bs, "differences": differences},
            "diff": profile_diff(current, baseline)}


def format_value(metric: str, x: Optional[float]) -> str:
    """A compared value in its unit: ms for times, GB/s for bandwidth, % for shares."""
    if x is None:
        return "-"
    if metric in ("step_time", "comm_time"):
        return f"{x / 1000:.3f} ms"
    if metric == "busbw":
        return f"{x:.2f} GB/s"
    return f"{100 * x:.1f}%"


def format_change(row: dict, key: str = "change") -> str:
    """'+14.3%' for relative metrics, '+1.9 pt' (percentage points) for shares; '-' when unknown."""
    x = row.get(key)
    if x is None:
        return "-"
    return f"{100 * x:+.1f}%" if row.get("kind") == "relative" else f"{100 * x:+.1f} pt"


def _describe(row: dict) -> str:
    m = row["metric"]
    return (f"{row['name']}: {format_value(m, row['baseline'])} → {format_value(m, row['current'])} "
            f"({format_change(row)}; threshold {format_change(row, 'threshold')})")


def regression_findings(section: dict) -> list[dict]:
    """Findings (report contract) for the regressed metrics: one per rule id, its evidence one line per metric."""
    by_rule: dict[str, list[tuple[Metric, dict]]] = {}
    metrics = {m.name: m for m in DEFAULT_METRICS}
    for row in section["metrics"]:
        if row["regressed"]:
            m = metrics[row["metric"]]
            by_rule.setdefault(m.rule, []).append((m, row))
    out = []
    diff_ev = [{"text": t, "file": None, "line": None} for t in _diff_lines(section.get("diff") or {})]
    comm_ev = [{"text": t, "file": None, "line": None} for t in _diff_lines(section.get("diff") or {}, True)]
    if not section.get("comparable", True):
        diffs = (section.get("shape") or {}).get("differences") or []
        out.append({
            "id": "BASE004", "title": "The baseline is a job of another shape: no regression verdict",
            "severity": "warning", "confidence": 0.95,
            "subject": {"ranks": [], "process_group": None, "step": None, "collective": None},
            "evidence": [{"text": d, "file": None, "line": None} for d in diffs] + diff_ev
                        + [{"text": f"baseline: {section['source']}", "file": None, "line": None}],
            "cost": None,
            "fix": "Compare runs of the same job shape (world size, hosts, parallel degrees); to judge a re-layout, "
                   "compare step time and throughput per GPU by hand.",
            "consequences": [], "rule_doc": __doc__.strip().splitlines()[0],
        })
    for rule, items in sorted(by_rule.items()):
        m0, row0 = items[0]
        cost = None
        if row0["metric"] == "step_time" and row0["current"]:
            cost = (row0["current"] - row0["baseline"]) / row0["current"]
        title = m0.title if len(items) == 1 else f"{m0.title} (and {len(items) - 1} more metric(s))"
        out.append({
            "id": rule, "title": title, "severity": m0.severity, "confidence": 0.9,
            "subject": {"ranks": [], "process_group": None, "step": None, "collective": None},
            "evidence": [{"text": _describe(r), "file": None, "line": None} for _, r in items]
                        + (diff_ev if rule == "BASE001" else comm_ev if rule == "BASE002" else [])
                        + [{"text": f"baseline: {section['source']}", "file": None, "line": None}],
            "cost": cost,
            "fix": "Compare the two runs' per-rank tables and timelines (--html); bisect the change between them "
                   "(code, NCCL/driver version, topology, link health). Raise --regression-threshold only for "
                   "known, accepted noise.",
            "consequences": [], "rule_doc": __doc__.strip().splitlines()[0],
        })
    return out


def rank_findings(findings: list[dict]) -> list[dict]:
    """Severity, then estimated cost (higher first), then confidence (higher first)."""
    return sorted(findings, key=lambda f: (SEVERITY_RANK.get(f.get("severity") or "", 3), -(f.get("cost") or 0.0),
                                           -(f.get("confidence") or 0.0)))


def apply_baseline(report: dict, baseline: dict, source: str,
                   thresholds: Optional[dict[str, float]] = None) -> dict:
    """Add the `baseline` section and its regression findings to ``report`` (in place; returned for chaining)."""
    from analyzer.report.assemble import verdict

    section = compare(report, baseline, source, thresholds)
    report["baseline"] = section
    report["findings"] = rank_findings(list(report.get("findings") or []) + regression_findings(section))
    report["verdict"] = verdict(report["findings"])
    return report


def parse_threshold(text: str) -> tuple[str, float]:
    """'step_time=0.05' or 'busbw=10%' → ('step_time', 0.05); raises ValueError with the valid names."""
    name, sep, value = text.partition("=")
    name = name.strip()
    if not sep or name not in DEFAULT_THRESHOLDS:
        raise ValueError(f"expected NAME=VALUE with NAME one of {', '.join(DEFAULT_THRESHOLDS)}; got {text!r}")
    value = value.strip()
    v: Any = float(value[:-1]) / 100 if value.endswith("%") else float(value)
    if not (0 <= v < float("inf")):  # also refuses NaN, which would silently disable the check
        raise ValueError(f"threshold must be a finite number >= 0: {text!r}")
    return name, v
