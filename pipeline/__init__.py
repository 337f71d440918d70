"""Command-line entry points: convert and validate."""

import logging

# Beam logs warnings at import time (e.g. no GCP client libraries) that mean
# nothing to a user; errors still reach stderr.
logging.basicConfig(level=logging.ERROR, format='%(levelname)s: %(message)s')
