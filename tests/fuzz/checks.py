"""What every output must satisfy, whatever the input: it parses, it is valid Unicode, and it steers nothing."""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import orjson

_BAD_TEXT = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufffe\uffff]")
_GITHUB_LINE = re.compile(r"^::(error|warning|notice)( [^\n]*?)?::[^\n]*$")


def no_ci_commands(name: str, out: str) -> None:
    """Outside --format github no line may start (after blanks) with `::`, and `##[` may appear nowhere.

    A line is what any viewer may show as one: split at every separator `str.splitlines` knows (U+2028, NEL …).
    """
    for line in out.splitlines():
        assert not line.lstrip().startswith("::"), f"{name}: a line starts with '::': {line[:120]!r}"
    assert "##[" not in out, f"{name}: holds a '##[' workflow command"


def valid_unicode(name: str, out: str) -> None:
    out.encode("utf-8")  # raises on a lone surrogate


def check_text(name: str, out: str) -> None:
    valid_unicode(name, out)
    no_ci_commands(name, out)
    m = _BAD_TEXT.search(out)
    assert m is None, f"{name}: control or bidi character {m.group()!r} in text output"


def check_json(name: str, out: str) -> dict:
    valid_unicode(name, out)
    no_ci_commands(name, out)
    doc = orjson.loads(out)
    assert isinstance(doc, dict)
    return doc


def check_sarif(name: str, out: str) -> None:
    doc = check_json(name, out)
    assert doc["version"] == "2.1.0" and isinstance(doc["runs"][0]["results"], list)
    for r in doc["runs"][0]["results"]:
        for loc in r.get("locations", []):
            uri = loc["physicalLocation"]["artifactLocation"]["uri"]
            assert uri.isascii() and not re.search(r"[\s<>\"]", uri), f"{name}: URI not percent-encoded: {uri!r}"


def check_junit(name: str, out: str) -> None:
    valid_unicode(name, out)
    no_ci_commands(name, out)
    ET.fromstring(out.encode("utf-8"))  # well-formed XML 1.0


class _Strict(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.scripts = 0

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "iframe", "object", "embed") or any(a.startswith("on") for a, _ in attrs):
            self.scripts += 1


def check_html(name: str, out: str) -> None:
    valid_unicode(name, out)
    no_ci_commands(name, out)
    p = _Strict()
    p.feed(out)
    p.close()
    assert p.scripts == 0, f"{name}: input text became markup"
    assert "\x1b" not in out


def check_markdown(name: str, out: str) -> None:
    check_text(name, out)
    assert "<script" not in out.lower(), f"{name}: raw HTML from input in Markdown"
    for line in out.split("\n"):
        if line.startswith("| ") and line.endswith(" |"):  # table rows keep their column count
            cells = re.split(r"(?<!\\)\|", line)
            assert len(cells) >= 3


def check_github(name: str, out: str) -> None:
    valid_unicode(name, out)
    assert "\x1b" not in out and "##[" not in out
    for line in out.rstrip("\n").splitlines():  # U+2028, NEL, VT … split a line for some viewers
        assert _GITHUB_LINE.match(line), f"{name}: not one of our annotations: {line[:160]!r}"


CHECKS = {"text": check_text, "json": check_json, "markdown": check_markdown, "html": check_html,
          "junit": check_junit, "sarif": check_sarif, "github": check_github}
