"""img2tfrecord's commands and their plumbing, in rooms.

Here, at the top: the entry points. cli.py (the img2tfrecord console script),
convert.py, validate.py, look.py (inspect), export.py, demo.py,
demo_detection.py, demo_sources.py, flex_template.py, flex_launch.py (the Flex Template's
entry point), and the Python API: api.py, read.py. They may import every room.
At the bottom: errors.py (the exit codes, the one UsageError), which every
module may import and which imports nothing of the project.

The rooms, each a package whose docstring says what it holds and what it may
import (tests/test_layout.py holds them to it), from the top down:
validating/, configuration/, runs/, engines/, looking/, reading/,
beam_runtime/.
Logging is configured only by the entry points (runs/exits.py
configure_logging): importing a module configures nothing.
"""
