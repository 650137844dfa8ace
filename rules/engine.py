"""Run the registered rules over an analysed job: select, run, merge duplicates, attach consequences, rank."""
from __future__ import annotations

from typing import Any, Optional

from rules.config import RuleConfig
from rules.context import Context
from rules.finding import SEVERITY_RANK, Evidence, Finding
from rules.catalog import load_all
from rules.registry import RULES

RULE_DOC = "analyze --explain {id}"


def run_rules(job: Any, report: dict, config: Any = None, strict: bool = False) -> list[dict]:
    """Findings as JSON-ready dicts, ranked by severity, then estimated cost, then confidence.

    A rule that raises is skipped with a report warning (strict=True re-raises, for tests).
    """
    return [f.to_dict() for f in collect_findings(report, config, job=job, strict=strict)]


def collect_findings(report: dict, config: Optional[RuleConfig] = None, job: Any = None,
                     strict: bool = False) -> list[Finding]:
    """The ranked Finding objects (root causes only; merged consequences live inside them)."""
    load_all()
    cfg = config if isinstance(config, RuleConfig) else RuleConfig()
    ctx = Context(report=report, thresholds=dict(cfg.thresholds), job=job)
    found: list[Finding] = []
    for rid in sorted(RULES):
        if not cfg.enabled(rid):
            continue
        r = RULES[rid]
        try:
            for f in r.func(ctx) or ():
                f.id = f.id or r.id
                f.title = f.title or r.title
                f.severity = f.severity or r.severity
                f.fix = f.fix or r.fix
                f.rule_doc = f.rule_doc or RULE_DOC.format(id=f.id)
                f.confidence = min(1.0, max(0.0, float(f.confidence)))
                found.append(f)
        except Exception as exc:
            if strict:
                raise
            report.setdefault("warnings", []).append(
                f"rule {rid} failed and was skipped ({type(exc).__name__}: {exc})")
    found = merge_duplicates(found)
    found.sort(key=Finding.sort_key)
    return attach_consequences(found)


def _subject_key(f: Finding) -> tuple:
    """Identity of a finding for de-duplication: id and subject."""
    s = f.subject
    coll = tuple(sorted((s.collective or {}).items()))
    return (f.id, tuple(sorted(s.ranks)), s.process_group, s.step, coll)


def merge_duplicates(found: list[Finding]) -> list[Finding]:
    """One finding per (id, subject): evidence merged, highest confidence and cost kept."""
    seen: dict[tuple, Finding] = {}
    out = []
    for f in found:
        k = _subject_key(f)
        g = seen.get(k)
        if g is None:
            seen[k] = f
            out.append(f)
            continue
        have = {(e.text, e.file, e.line) for e in g.evidence}
        g.evidence.extend(e for e in f.evidence if (e.text, e.file, e.line) not in have)
        g.confidence = max(g.confidence, f.confidence)
        if f.cost is not None:
            g.cost = max(g.cost or 0.0, f.cost)
        g.involved |= f.involved
    return out


def _matches(rid: str, selectors: list[str]) -> bool:
    """True when a rule id starts with one of the selectors."""
    return any(rid.startswith(s) for s in selectors)


def related(root: Finding, cons: Finding) -> bool:
    """Whether `cons` is about the same ranks / group as `root` (so root can explain it)."""
    if cons.caused_by and root.anchor and cons.caused_by == root.anchor:
        return True
    if root.id.startswith("NET") and cons.id == "LOAD001" and cons.extra.get("attribution") in ("compute", "host"):
        return False  # a network problem slows every rank alike: it cannot explain one rank computing longer
    a, b = root.ranks_touched(), cons.ranks_touched()
    if a and b and not b <= a:
        return False
    pa, pb = root.subject.process_group, cons.subject.process_group
    if pa is not None and pb is not None and str(pa) != str(pb):
        return bool(b) and bool(a)
    return True


#: A root at least this sure of itself counts as "as confident" as any consequence it explains (see may_absorb).
ABSORB_CONFIDENCE = 0.5


def may_absorb(root: Finding, cons: Finding) -> bool:
    """A root cause may hide a consequence only when it is at least as severe and at least as confident: a
    guess ("rank 1 may be a straggler", 20 %) must not swallow a warning that stands on its own; both then stay
    in the list. A root explains its consequence with more claims than the consequence makes (MOE001: the
    straggler of LOAD001 *and* why; NET004: the exposed transfer of COMM001 *and* the link), so its confidence is
    a conjunction's and can never reach its part's: a root that is more sure than not (ABSORB_CONFIDENCE)
    counts as confident enough for any consequence of no higher severity."""
    sev = SEVERITY_RANK.get(root.severity, 9) <= SEVERITY_RANK.get(cons.severity, 9)
    return sev and float(root.confidence) >= min(float(cons.confidence), ABSORB_CONFIDENCE)


def _explains(f: Finding) -> list[str]:
    """Rule-level plus finding-level selectors of what a finding explains."""
    return (list(RULES[f.id].explains) if f.id in RULES else []) + list(f.explains)


def attach_consequences(ranked: list[Finding]) -> list[Finding]:
    """Walk findings best first; each absorbs the findings it explains (transitively: what it absorbs, it
    also explains), listed under `consequences`, when it is at least as severe and as confident as each
    (:func:`may_absorb`). Roots keep their rank order."""
    absorbed: set[int] = set()
    standing: list[tuple[Finding, Finding]] = []  # (root, consequence) kept apart by may_absorb
    for i, root in enumerate(ranked):
        if i in absorbed:
            continue
        sel = _explains(root)
        changed = True
        while changed and sel:
            changed = False
            for j, cons in enumerate(ranked):
                if j == i or j in absorbed or cons.id == root.id or not _matches(cons.id, sel):
                    continue
                if not related(root, cons):
                    continue
                if not may_absorb(root, cons):
                    standing.append((root, cons))
                    continue
                absorbed.add(j)
                changed = True
                root.consequences.append({"id": cons.id, "title": cons.title, "severity": cons.severity,
                                          "ranks": [int(r) for r in cons.subject.ranks],
                                          "subject": cons.subject.to_dict(),
                                          "evidence": [e.text for e in cons.evidence[:2]]})
                root.consequences.extend(cons.consequences)
                cons.consequences = []
                sel = sel + [s for s in _explains(cons) if s not in sel]
    out = sorted((f for i, f in enumerate(ranked) if i not in absorbed), key=Finding.sort_key)
    return _roots_first(out, [(r, c) for r, c in standing if r in out and c in out])


def _roots_first(out: list[Finding], standing: list[tuple[Finding, Finding]]) -> list[Finding]:
    """Each consequence that stands beside a root that could explain it says so, and among findings of one
    severity the root comes before it (a slow link before the exposed communication it makes)."""
    seen: set[tuple[int, int]] = set()
    for root, cons in standing:
        if (id(root), id(cons)) in seen:
            continue
        seen.add((id(root), id(cons)))
        text = (f"may be a consequence of {root.id} ({root.severity}, confidence {root.confidence:.0%}: "
                f"{root.title}); it stands on its own because that finding is "
                + ("less severe" if SEVERITY_RANK.get(root.severity, 9) > SEVERITY_RANK.get(cons.severity, 9)
                   else "less certain"))
        if all(e.text != text for e in cons.evidence):
            cons.evidence.append(Evidence(text))
        i, j = out.index(root), out.index(cons)
        if j < i and root.severity == cons.severity:
            out.insert(j, out.pop(i))
    return out


__all__ = ["run_rules", "collect_findings", "merge_duplicates", "attach_consequences", "Evidence", "Finding"]
