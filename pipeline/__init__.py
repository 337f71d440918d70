"""Command-line entry points: convert and validate (logging is configured only
by the entry points, cli.configure_logging)."""
