"""Parsers: bytes in, typed tables out. No analysis, no opinions."""
