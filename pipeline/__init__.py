"""Command-line entry points: convert and validate."""
