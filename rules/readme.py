"""`python -m rules.readme`: print the Markdown rule table that README.md holds between its rules markers."""
from __future__ import annotations

import sys

from rules.describe import markdown_table

START, END = "<!-- rules:start -->", "<!-- rules:end -->"


def main() -> int:
    """Write the table to stdout."""
    sys.stdout.write(markdown_table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
