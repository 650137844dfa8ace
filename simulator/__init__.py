"""Deterministic discrete-event simulator of a distributed training job, with known truth (expected.json)."""
