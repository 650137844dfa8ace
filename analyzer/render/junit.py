"""JUnit XML for CI dashboards: one testcase per rule, a failure for each finding at or above --fail-on."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Optional

from analyzer.render.common import (consequence_lines, evidence_texts, fails, finding_location, location_text,
                                    nothing_analysed, rule_catalog, subject_text)
from analyzer.render import sanitize

_x = sanitize.xml  # every input-derived string enters the XML through here
printable = _x


def _finding_text(report: dict, f: dict) -> str:
    lines = [f"[{_x(f.get('severity'))}] {_x(f.get('id'))}: {_x(f.get('title', ''))}"]
    subj = subject_text(f)
    if subj:
        lines.append(f"about: {_x(subj)}")
    loc = location_text(*finding_location(report, f))
    if loc:
        lines.append(f"at: {_x(loc)}")
    lines += [f"evidence: {_x(e)}" for e in evidence_texts(f)]
    if f.get("cost") is not None:
        lines.append(f"cost: {100 * f['cost']:.1f}% of step time")
    if f.get("fix"):
        lines.append(f"fix: {_x(f['fix'])}")
    lines += [f"explains: {_x(c)}" for c in consequence_lines(f)]
    return "\n".join(lines)


def render_junit(report: dict, fail_on: str = "error", rules: Optional[list[dict]] = None) -> str:
    """A <testsuites> document: each rule a testcase; findings at/above ``fail_on`` are <failure>s, others output."""
    catalog = rule_catalog(report, rules)
    by_id: dict[str, list[dict]] = {}
    for f in report.get("findings") or []:
        by_id.setdefault(str(f.get("id", "UNKNOWN")), []).append(f)
    suites = ET.Element("testsuites", name="analyze")
    suite = ET.SubElement(suites, "testsuite", name="analyze.rules")
    n_fail = 0
    for rule in catalog:
        case = ET.SubElement(suite, "testcase", classname="analyze.rules",
                             name=printable(f"{rule['id']} {rule['title']}".strip()))
        found = by_id.get(rule["id"], [])
        failing = [f for f in found if fails(f, fail_on)]
        if failing:
            n_fail += 1
            worst = failing[0]
            fail = ET.SubElement(case, "failure", type=_x(worst.get("severity")),
                                 message=printable(f"{len(failing)} finding(s): {worst.get('title', '')}"))
            fail.text = "\n\n".join(_finding_text(report, f) for f in failing)
        others = [f for f in found if not fails(f, fail_on)]
        if others:
            out = ET.SubElement(case, "system-out")
            out.text = "\n\n".join(_finding_text(report, f) for f in others)
    n_err = 0
    why = nothing_analysed(report)
    if why:  # nothing read must never look green: one testcase in error that says so
        n_err = 1
        case = ET.SubElement(suite, "testcase", classname="analyze.inputs", name="inputs analysed")
        err = ET.SubElement(case, "error", type="nothing_analysed", message=printable(f"nothing was analysed: {why}"))
        err.text = printable(f"nothing was analysed: {why}")
    n_tests = len(catalog) + n_err
    suite.set("tests", str(n_tests))
    suite.set("failures", str(n_fail))
    suite.set("errors", str(n_err))
    suite.set("skipped", "0")
    suites.set("tests", str(n_tests))
    suites.set("failures", str(n_fail))
    suites.set("errors", str(n_err))
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="verdict", value=printable(report.get("verdict", "")))
    ET.SubElement(props, "property", name="fail_on", value=fail_on)
    suite.insert(0, suite[-1])
    del suite[-1]
    ET.indent(suites)
    return sanitize.guard_ci_lines('<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode")
                                   + "\n")
