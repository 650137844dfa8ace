"""SARIF 2.1.0: the rules as reportingDescriptors, each finding a result located at its trace or log file."""
from __future__ import annotations

from pathlib import PurePath
from typing import Optional
from urllib.parse import quote

import orjson

from analyzer.render import sanitize
from analyzer.render.ci_paths import BASE_ID
from analyzer.render.common import (consequence_lines, cost_text, evidence_texts, fallback_file, finding_location,
                                    nothing_analysed, rule_catalog, subject_text)

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_LEVEL = {"error": "error", "warning": "warning", "info": "note"}
INFO_URI = "https://example.invalid/dtrace-analyzer"  # no public home yet; SARIF only needs a URI


def file_uri(path: str) -> str:
    """A relative path as a URI reference (forward slashes, percent-encoded); absolute paths as file:// URIs."""
    p = PurePath(sanitize.clean(path) if "\x1b" in path else path)
    # an undecodable byte of a file name (surrogateescape) is percent-encoded as that byte
    if p.is_absolute():
        return "file://" + quote(p.as_posix(), errors="surrogateescape")
    return quote(p.as_posix(), errors="surrogateescape")


def artifact_location(path: str, base: Optional[str]) -> dict:
    """{"uri", "uriBaseId"}: relative to the repository base (analyzer/render/ci_paths.py) when the file lies
    under it, so GitHub code scanning maps it; else the absolute file:// URI (or the relative path as given)."""
    if base is not None:
        from analyzer.render.ci_paths import BASE_ID, relative
        rel = relative(path, base)
        if rel is not None:
            return {"uri": file_uri(rel), "uriBaseId": BASE_ID}
    return {"uri": file_uri(path)}


def _result(report: dict, f: dict, rule_index: dict[str, int], base: Optional[str] = None) -> dict:
    fid = str(f.get("id", "UNKNOWN"))
    text = f"{f.get('title', '')}"
    subj = subject_text(f)
    if subj:
        text += f" ({subj})"
    ev = evidence_texts(f)
    cons = consequence_lines(f)
    md = [text] + [f"- {e}" for e in ev] + ([cost_text(f)] if cost_text(f) else []) + (
        [f"Fix: {f['fix']}"] if f.get("fix") else []) + ([f"Explains ({len(cons)}):"] + [f"- {c}" for c in cons]
                                                         if cons else [])
    res: dict = {
        "ruleId": fid,
        "ruleIndex": rule_index[fid],
        "level": _LEVEL.get(str(f.get("severity")), "note"),
        "message": {"text": "\n".join(md)},
    }
    file, line = finding_location(report, f)
    file = file or fallback_file(report)
    if file:
        phys: dict = {"artifactLocation": artifact_location(file, base)}
        if line:
            phys["region"] = {"startLine": int(line)}
        res["locations"] = [{"physicalLocation": phys}]
    props: dict = {}
    for k in ("confidence", "cost"):
        if f.get(k) is not None:
            props[k] = f[k]
    s = f.get("subject") or {}
    if any(v not in (None, [], "") for v in s.values()):
        props["subject"] = s
    if f.get("consequences"):
        props["consequences"] = [{"id": c.get("id"), "title": c.get("title"), "severity": c.get("severity"),
                                  "subject": c.get("subject") or {"ranks": c.get("ranks") or []}}
                                 for c in f["consequences"]]
    if props:
        res["properties"] = props
    res["partialFingerprints"] = {"analyzeFinding/v1": f"{fid}:{subj}"}
    return res


def sarif_dict(report: dict, rules: Optional[list[dict]] = None, base: Optional[str] = None) -> dict:
    """The SARIF log as a dict (one run, the tool's rules, one result per finding).

    ``base``: the folder paths are made relative to (default: $GITHUB_WORKSPACE, else the git root of the working
    directory, else the working directory); ``originalUriBaseIds`` says where it is."""
    if base is None:
        from analyzer.render.ci_paths import base_dir
        base = base_dir()
    catalog = rule_catalog(report, rules)
    rule_index = {r["id"]: i for i, r in enumerate(catalog)}
    descriptors = []
    for r in catalog:
        d: dict = {"id": r["id"], "shortDescription": {"text": r["title"] or r["id"]}}
        if r["doc"]:
            d["fullDescription"] = {"text": r["doc"]}
        if r.get("severity"):
            d["defaultConfiguration"] = {"level": _LEVEL.get(str(r["severity"]), "note")}
        descriptors.append(d)
    files = [f["path"] for f in (report.get("inputs") or {}).get("files") or []]
    tool = report.get("tool") or {}
    run = {
        "tool": {"driver": {"name": tool.get("name", "analyze"), "version": str(tool.get("version", "")),
                            "informationUri": INFO_URI, "rules": descriptors}},
        "originalUriBaseIds": {BASE_ID: {"uri": file_uri(base).rstrip("/") + "/",
                                         "description": {"text": "the repository (or working directory) root"}}},
        "artifacts": [{"location": artifact_location(p, base)} for p in files],
        "results": [_result(report, f, rule_index, base) for f in report.get("findings") or []],
        "properties": {"verdict": report.get("verdict", "")},
    }
    why = nothing_analysed(report)
    inv: dict = {"executionSuccessful": why is None}
    if why:  # zero results must not read as a clean run: say that nothing was analysed
        inv["toolExecutionNotifications"] = [{"level": "error", "descriptor": {"id": "nothing-analysed"},
                                              "message": {"text": f"nothing was analysed: {why}"}}]
    run["invocations"] = [inv]
    return sanitize.json_tree({"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]})


def render_sarif(report: dict, rules: Optional[list[dict]] = None, base: Optional[str] = None) -> str:
    """SARIF 2.1.0 JSON text (``base``: see :func:`sarif_dict`)."""
    return sanitize.dumps(sarif_dict(report, rules, base), option=orjson.OPT_INDENT_2) + "\n"
