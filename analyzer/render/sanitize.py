"""One sanitiser per output kind: every input-derived string passes through one of these on its way out.

Input text (file names, process-group names, log lines, kernel names) is hostile until proven otherwise: it may
hold terminal escape sequences, newlines that forge report lines, CI workflow commands (`::error …` at the start
of a line, `##[…]` anywhere), lone surrogates that no encoder accepts, and code points XML forbids. The renderers
call the function for their kind where input text enters; `guard_ci_lines` is a last check on whole documents.

| output | function | what it guarantees |
|---|---|---|
| any | `clean` | valid Unicode (lone surrogates → `\\xNN` / U+FFFD), no ANSI/OSC sequences, no C0/C1 controls except tab and newline, no bidi overrides, no U+FFFE/U+FFFF |
| text, CI logs | `text` | `clean` + one line + no CI workflow command (`::` leading, `##[` anywhere) |
| Markdown | `markdown`, `md_code` | `text` + Markdown/HTML metacharacters made inert |
| HTML | `html` | `text` + HTML-escaped (quotes too) |
| JUnit XML | `xml` | `text`: only XML 1.0 characters; ElementTree escapes markup |
| JSON, SARIF | `json_tree`, `dumps` | every string (keys too) valid Unicode and free of `##[`; orjson escapes controls; U+2028/U+2029 written as `\\u2028`/`\\u2029` |
| GitHub annotations | `github_data`, `github_property` | `clean` + the runner's own %-escaping (CR, LF, `%`; `:` and `,` in properties); U+2028/U+2029 escaped as newlines (`%0A`) |

Line separators: besides LF and CR, a viewer may split a line at VT, FF, U+001C–U+001E, NEL (U+0085), U+2028 and
U+2029 (Python's `str.splitlines` does). `clean` turns the C0/C1 ones into spaces; U+2028/U+2029 are valid text, so
`text` joins them into one line, `github_data` escapes them like a newline, `dumps` escapes them in JSON strings, and
`guard_ci_lines` checks every piece a viewer could show as a line.
"""
from __future__ import annotations

import re
from typing import Any

import orjson

# CSI (ESC [ … final), OSC (ESC ] … BEL or ST), other ESC sequences (ESC + one byte), and the 8-bit CSI/OSC forms.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]|\x9b[0-?]*[ -/]*[@-~]"
                      r"|\x9d[^\x07\x9c]*[\x07\x9c]?")
# C0 controls but tab/newline/CR, DEL, C1 controls; bidi embeddings/overrides/isolates; non-characters XML forbids.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ufffe\uffff]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_NEWLINES = re.compile("[\r\n\t\u2028\u2029\x85]+")
#: Invisible, not whitespace to the Actions runner (it trims whitespace before looking for `::`): breaks a command.
BREAK = "\u200b"


def _surrogate(m: re.Match) -> str:
    c = ord(m.group())
    # U+DC80..U+DCFF is how Python carries an undecodable byte of a file name (surrogateescape): show the byte.
    return f"\\x{c - 0xDC00:02x}" if 0xDC80 <= c <= 0xDCFF else "\ufffd"


def clean(value: Any) -> str:
    """Input-derived text safe for any output: valid Unicode, no escape sequences, no control characters.

    Newlines, carriage returns and tabs are kept (the per-kind functions decide what to do with them).
    """
    s = value if isinstance(value, str) else _str(value)
    if _SURROGATE.search(s):
        s = _SURROGATE.sub(_surrogate, s)
    if "\x1b" in s or "\x9b" in s or "\x9d" in s:
        s = _ESCAPES.sub("", s)
    return _CONTROL.sub(" ", s)


def _str(value: Any) -> str:
    """str() that never raises (an integer of thousands of digits, an object whose __str__ fails)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 4096:
        return f"<integer of about {int(value.bit_length() * 0.30103) + 1} digits>"
    try:
        return str(value)
    except Exception:  # noqa: BLE001 - a renderer must never fail on a value
        return f"<{type(value).__name__}>"


def no_ci_commands(s: str) -> str:
    """Break GitHub Actions workflow commands: `::` at the start (after blanks) and `##[` anywhere."""
    if "##[" in s:
        s = s.replace("##[", "#" + BREAK + "#[")
    if s.lstrip().startswith("::"):
        i = len(s) - len(s.lstrip())
        s = s[:i] + BREAK + s[i:]
    return s


def text(value: Any) -> str:
    """For the terminal and CI logs: `clean`, on one line (newlines and tabs become spaces), no CI commands."""
    s = clean(value)
    if "\n" in s or "\r" in s or "\t" in s or "\u2028" in s or "\u2029" in s or "\x85" in s:
        s = _NEWLINES.sub(" ", s)
    return no_ci_commands(s)


def markdown(value: Any) -> str:
    """Inert in Markdown tables and inline text: pipes, HTML, emphasis, backticks, links escaped; one line."""
    s = text(value)
    for a, b in (("\\", "\\\\"), ("|", "\\|"), ("<", "&lt;"), (">", "&gt;"), ("*", "\\*"), ("_", "\\_"),
                 ("`", "\\`"), ("[", "\\["), ("]", "\\]")):
        s = s.replace(a, b)
    return s


def md_code(value: Any) -> str:
    """Input-derived text as an inline code span (backticks made quotes; one line)."""
    return "`" + text(value).replace("`", "'") + "`"


def html(value: Any) -> str:
    """HTML-escaped (quotes too), one line, no CI commands."""
    from html import escape
    return escape(text(value), quote=True)


def xml(value: Any) -> str:
    """For XML text and attributes (ElementTree escapes markup): only XML 1.0 characters, one line."""
    return text(value)


def github_data(value: Any) -> str:
    """A workflow command's message, escaped as the runner unescapes it: % → %25, CR → %0D, LF → %0A."""
    s = clean(value).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if "\u2028" in s or "\u2029" in s:  # a line separator to a viewer: escaped like the newline it stands for
        s = s.replace("\u2028", "%0A").replace("\u2029", "%0A")
    return s.replace("##[", "#" + BREAK + "#[") if "##[" in s else s


def github_property(value: Any) -> str:
    """A workflow command's property value (file, title): as data, plus ':' → %3A and ',' → %2C."""
    return github_data(value).replace(":", "%3A").replace(",", "%2C")


def _json_value(v: Any) -> Any:
    if isinstance(v, str):
        if _SURROGATE.search(v):
            v = _SURROGATE.sub(_surrogate, v)
        return v.replace("##[", "#" + BREAK + "#[") if "##[" in v else v  # a JSON line never starts a string
    if isinstance(v, dict):
        return {(_json_value(k) if isinstance(k, str) else k): _json_value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_value(x) for x in v]
    if isinstance(v, int) and not isinstance(v, bool) and not -(1 << 63) <= v < (1 << 64):
        return _str(v)  # orjson writes 64-bit integers only
    return v


def json_tree(obj: Any) -> Any:
    """The report with every string valid Unicode and free of CI commands (unchanged objects when already so)."""
    return _json_value(obj)


def dumps(obj: Any, option: int = 0) -> str:
    """orjson text of a report: fast path as is, sanitised copy when a string holds surrogates or CI commands."""
    return dumps_bytes(obj, option).decode()


def dumps_bytes(obj: Any, option: int = 0) -> bytes:
    """:func:`dumps` as UTF-8 bytes."""
    try:
        out = orjson.dumps(obj, option=option)
        if b"##[" not in out:
            return _escape_separators(out)
    except (TypeError, orjson.JSONEncodeError):
        pass
    return _escape_separators(orjson.dumps(json_tree(obj), option=option | orjson.OPT_SERIALIZE_NUMPY))


_LS, _PS, _NEL = "\u2028".encode(), "\u2029".encode(), "\x85".encode()


def _escape_separators(out: bytes) -> bytes:
    """U+2028, U+2029 and NEL (only ever inside JSON strings) as JSON escapes: no viewer splits a line there."""
    if _LS in out or _PS in out or _NEL in out:
        out = out.replace(_LS, b"\\u2028").replace(_PS, b"\\u2029").replace(_NEL, b"\\u0085")
    return out


def guard_ci_lines(document: str) -> str:
    """Last check on a whole non-GitHub document: no line may start (after blanks) with `::` or hold `##[`.

    Renderers already pass input text through their sanitiser; this keeps the promise even for text a
    renderer forgot. The break character is invisible and legal in text, Markdown, HTML, XML and JSON strings.
    """
    if "::" not in document and "##[" not in document:
        return document
    # every line a viewer could show: split at each separator str.splitlines knows (VT, FF, NEL, U+2028 …)
    return "".join(no_ci_commands(line) for line in document.splitlines(keepends=True))
