"""--timeline-max-events' default, alone in a module so that the command line's help text and the timeline
writer share it without importing each other (or pandas)."""
DEFAULT_MAX_EVENTS = 1_000_000
