"""The report dict (docs/json-schema.md): sections, summaries, baseline comparison."""
