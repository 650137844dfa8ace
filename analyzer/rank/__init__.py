"""Rank-local facts: interval algebra and per-rank x step metrics, computed from one rank's tables."""
