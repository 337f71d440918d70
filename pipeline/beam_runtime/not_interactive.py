"""The project's own pipelines kept out of Interactive Beam when they are built
in IPython or a notebook (pipeline.api)."""

from __future__ import annotations

from collections.abc import Iterator
import contextlib

# apache_beam.pipeline's names for "is this IPython?" and for the step that
# hands each applied transform to Interactive Beam.
PATCHED = ('is_in_ipython', 'alter_label_if_ipython')


@contextlib.contextmanager
def outside_interactive_beam() -> Iterator[None]:
  """For one with block, apache_beam.pipeline sees no IPython.

  Built in IPython, a Beam pipeline hands every transform applied to it to
  Interactive Beam (alter_label_if_ipython), which imports Beam's interactive
  stack and DataFrame API (pandas) and starts Interactive Beam's environment:
  a warning about its missing extras, JavaScript put into the notebook's
  output, a clean-up at exit. Pipeline.run then leaves its local temp folder
  to that clean-up. The pipelines pipeline.api builds are none of the user's
  business there. Beam's own functions are put back after the block.
  """
  from apache_beam import pipeline as beam_pipeline
  saved = {name: getattr(beam_pipeline, name) for name in PATCHED
           if hasattr(beam_pipeline, name)}  # another Beam: nothing to keep out
  if len(saved) == len(PATCHED):
    beam_pipeline.is_in_ipython = lambda: False
    beam_pipeline.alter_label_if_ipython = lambda transform, pvalueish: None
  try:
    yield
  finally:
    for name, function in saved.items():
      setattr(beam_pipeline, name, function)
