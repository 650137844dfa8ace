"""The trace-event format's rules as Perfetto's JSON importer applies them, as a checker for the merged timeline.

Returns a list of violations (empty: the file joins). Rules (Chrome Trace Event Format, "Flow events"; Perfetto's
json_trace_parser): a flow is keyed by (cat, name, id) — every key has exactly one start ``s`` and one end ``f``
with any ``t`` steps between, in time order; ``s`` and ``t`` bind to the slice that encloses their ``ts`` on the
same pid/tid, ``f`` with ``bp: "e"`` too (without it, the next slice to begin); complete slices ``X`` on one
thread must nest (a slice that starts inside another and ends after it is dropped); every pid is a process that
names itself; instant events carry a scope.
"""
from __future__ import annotations

import bisect
from collections import defaultdict

PHASES = {"X", "M", "s", "t", "f", "i", "C"}
EPS = 1e-6  # µs: the ts values are rounded to ns (3 decimals)


def _tracks(events: list[dict]) -> dict:
    by = defaultdict(list)
    for e in events:
        if e.get("ph") == "X":
            by[(e["pid"], e["tid"])].append((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0))))
    return {k: sorted(v, key=lambda x: (x[0], -x[1])) for k, v in by.items()}


def nesting_violations(events: list[dict], limit: int = 20) -> list[str]:
    """Slices on one thread that overlap without nesting."""
    out = []
    for key, spans in _tracks(events).items():
        stack: list[float] = []
        for s, e in spans:
            while stack and stack[-1] <= s + EPS:
                stack.pop()
            if stack and e > stack[-1] + EPS:
                out.append(f"pid {key[0]} tid {key[1]}: slice [{s}, {e}] overlaps its parent ending at {stack[-1]}")
                if len(out) >= limit:
                    return out
            stack.append(e)
    return out


def _encloses(spans: list[tuple[float, float]], starts: list[float], ts: float) -> bool:
    i = bisect.bisect_right(starts, ts + EPS)
    for j in range(i - 1, -1, -1):  # the innermost candidates are just left of ts
        s, e = spans[j]
        if s - EPS <= ts <= e + EPS:
            return True
        if i - j > 64:
            break
    return False


def flow_violations(events: list[dict], limit: int = 20) -> list[str]:
    """Flows that do not pair (cat, name, id) start to end, or whose ends bind to no enclosing slice."""
    out = []
    tracks = _tracks(events)
    starts = {k: [s for s, _ in v] for k, v in tracks.items()}
    flows = defaultdict(list)
    by_id = defaultdict(set)
    for e in events:
        if e.get("ph") in ("s", "t", "f"):
            flows[(e.get("cat"), e.get("name"), e.get("id"))].append(e)
            by_id[e.get("id")].add((e.get("cat"), e.get("name")))
    for fid, keys in by_id.items():
        if len(keys) > 1:
            out.append(f"flow id {fid} used with several (cat, name): {sorted(map(str, keys))[:3]}")
    for key, evs in flows.items():
        phs = [e["ph"] for e in evs]
        if phs.count("s") != 1 or phs.count("f") != 1:
            out.append(f"flow {key}: {phs.count('s')} start(s), {phs.count('f')} end(s)")
            continue
        s = next(e for e in evs if e["ph"] == "s")
        f = next(e for e in evs if e["ph"] == "f")
        if float(f["ts"]) + EPS < float(s["ts"]):
            out.append(f"flow {key}: ends at {f['ts']} before it starts at {s['ts']}")
        for e in evs:
            if e["ph"] == "f" and e.get("bp") != "e":
                out.append(f"flow {key}: end without bp 'e' binds to the next slice, not the one it sits in")
            k = (e["pid"], e["tid"])
            if k not in tracks or not _encloses(tracks[k], starts[k], float(e["ts"])):
                out.append(f"flow {key}: {e['ph']} at {e['ts']} on pid {k[0]} tid {k[1]} is inside no slice")
        if len(out) >= limit:
            break
    return out[:limit]


def violations(doc: dict, limit: int = 20) -> list[str]:
    """Every rule above, on a whole trace document (JSON object form)."""
    events = doc.get("traceEvents") or []
    out = []
    named = {e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    for e in events:
        if e.get("ph") not in PHASES:
            out.append(f"unknown phase {e.get('ph')!r}")
        elif e["ph"] != "M" and e.get("pid") not in named:
            out.append(f"pid {e.get('pid')} has no process_name")
        elif e["ph"] == "X" and not float(e.get("dur", -1)) >= 0:
            out.append(f"slice without a duration: {e.get('name')!r}")
        elif e["ph"] == "i" and e.get("s") not in ("g", "p", "t"):
            out.append(f"instant without scope: {e.get('name')!r}")
        if len(out) >= limit:
            return out
    return out + nesting_violations(events, limit) + flow_violations(events, limit)
