"""Hang and crash post-mortem: dumps, logs and stderr -> per-group sequences -> divergence -> verdict."""
