"""The Finding: one diagnosis with its subject, evidence, estimated cost and fix (JSON form: docs/report-sections.md)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

SEVERITIES = ("error", "warning", "info")
SEVERITY_RANK = {s: i for i, s in enumerate(SEVERITIES)}


@dataclass
class Evidence:
    """One number or log line backing a finding; `file`/`line` point at the source when it came from a log."""

    text: str
    file: Optional[str] = None
    line: Optional[int] = None

    def to_dict(self) -> dict:
        return {"text": self.text, "file": self.file, "line": self.line}


@dataclass
class Subject:
    """What a finding is about: ranks, process group, step, collective ({op, seq}; JSON: 'op#seq' plus op, seq)."""

    ranks: list[int] = field(default_factory=list)
    process_group: Optional[str] = None
    step: Optional[int] = None
    collective: Optional[dict] = None

    def to_dict(self) -> dict:
        """JSON form: `collective` as text ('allreduce#5'), with its `op` and `seq` as their own keys."""
        c = self.collective or {}
        op, seq = c.get("op"), c.get("seq")
        text = None
        if op or seq is not None:
            text = f"{op or ''}{'#' + str(seq) if seq is not None else ''}"
        return {"ranks": [int(r) for r in self.ranks], "process_group": self.process_group,
                "step": self.step, "collective": text, "op": op, "seq": seq}


@dataclass
class Finding:
    """A rule's diagnosis. id/title/severity default to the rule's metadata (filled by the engine).

    `involved` lists every rank the root cause touches (culprits and the ranks that wait on them); the engine
    uses it, with the process group, to attach consequences to a root cause. It is not part of the JSON form.
    """

    id: str = ""
    title: str = ""
    severity: str = ""
    confidence: float = 0.5
    subject: Subject = field(default_factory=Subject)
    evidence: list[Evidence] = field(default_factory=list)
    cost: Optional[float] = None
    fix: str = ""
    consequences: list[dict] = field(default_factory=list)
    rule_doc: str = ""
    involved: set[int] = field(default_factory=set)
    explains: list[str] = field(default_factory=list)
    anchor: str = ""
    caused_by: str = ""
    extra: dict = field(default_factory=dict)

    def ranks_touched(self) -> set[int]:
        """Subject ranks plus involved ranks."""
        return set(self.subject.ranks) | set(self.involved)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (docs/report-sections.md, `findings`)."""
        out = {
            "id": self.id, "title": self.title, "severity": self.severity,
            "confidence": round(float(self.confidence), 3),
            "subject": self.subject.to_dict(),
            "evidence": [e.to_dict() for e in self.evidence],
            "cost": None if self.cost is None else round(float(self.cost), 4),
            "fix": self.fix, "consequences": list(self.consequences), "rule_doc": self.rule_doc,
        }
        out.update(self.extra)
        return out

    def sort_key(self) -> tuple:
        """Severity, then estimated cost (unknown counts as 0), then confidence; id keeps ties stable."""
        return (SEVERITY_RANK.get(self.severity, 9), -(self.cost or 0.0), -self.confidence, self.id,
                self.subject.process_group or "", tuple(self.subject.ranks))
