"""GitHub Actions workflow commands: one ::error/::warning/::notice annotation per finding."""
from __future__ import annotations

from analyzer.render.common import (consequence_lines, cost_text, evidence_texts, fallback_file, finding_location,
                                    nothing_analysed, subject_text)
from analyzer.render import sanitize

_LEVEL = {"error": "error", "warning": "warning", "info": "notice"}


def escape_data(s: str) -> str:
    """Escape a message as GitHub requires: % → %25, CR → %0D, LF → %0A."""
    return sanitize.github_data(s)


def escape_property(s: str) -> str:
    """Escape a property value (file, title): as data, plus ':' → %3A and ',' → %2C."""
    return sanitize.github_property(s)


def render_github(report: dict, base: "str | None" = None) -> str:
    """One workflow command per finding (severity info → ::notice), then a ::notice with the verdict.

    File paths are relative to ``base`` (default: $GITHUB_WORKSPACE, else the git root, else the working
    directory; analyzer/render/ci_paths.py) so GitHub links them to the repository."""
    from analyzer.render.ci_paths import base_dir, ci_path
    base = base or base_dir()
    out = []
    for f in report.get("findings") or []:
        level = _LEVEL.get(str(f.get("severity")), "notice")
        file, line = finding_location(report, f)
        file = file or fallback_file(report)
        props = []
        if file:
            props.append(f"file={escape_property(ci_path(file, base))}")
            if line:
                props.append(f"line={int(line)}")
        title = f"{f.get('id', '')} {f.get('title', '')}".strip()
        props.append(f"title={escape_property(title)}")
        body = [f"{f.get('id')}: {f.get('title', '')}"]
        subj = subject_text(f)
        if subj:
            body.append(f"about: {subj}")
        body += [f"- {e}" for e in evidence_texts(f)]
        c = cost_text(f)
        if c:
            body.append(c)
        if f.get("fix"):
            body.append(f"fix: {f['fix']}")
        body += [f"explains: {c}" for c in consequence_lines(f)]
        out.append(f"::{level} {','.join(props)}::{escape_data(chr(10).join(body))}")
    why = nothing_analysed(report)
    if why:
        out.append(f"::error title=analyze::{escape_data('nothing was analysed: ' + why)}")
    out.append(f"::notice title=analyze::{escape_data(str(report.get('verdict', '')))}")
    return "\n".join(out) + "\n"
