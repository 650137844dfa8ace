"""Facts across ranks: topology, clock alignment, collective matching, waits, stragglers, pipelines."""
