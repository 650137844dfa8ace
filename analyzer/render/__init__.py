"""Renderers: the report dict → text, JSON, and (as they land) Markdown, HTML, JUnit, SARIF, GitHub annotations."""
