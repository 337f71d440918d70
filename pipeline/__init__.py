"""Command-line entry points: convert and validate (logging is configured only
by the entry points, launch.configure_logging)."""
