"""Building one tf.train.Example from a decoded row: plain functions."""

from __future__ import annotations

import dataclasses

from transforms.core.example_proto import serialize_example
from transforms.core.image import EncodedImage
from transforms.core.manifest import ManifestRow
from transforms.core.spec import ExampleSpec


@dataclasses.dataclass(frozen=True, slots=True)
class LabelledRow:
  """A row whose label has been resolved to an id."""
  row: ManifestRow
  label_id: int
  label_text: str


@dataclasses.dataclass(frozen=True, slots=True)
class LoadedImage:
  """A labelled row with its encoded image and the source file's digest."""
  labelled: LabelledRow
  image: EncodedImage
  sha256: str
  source_bytes: int = 0


def example_features(loaded: LoadedImage, spec: ExampleSpec) -> dict:
  """{feature name: (kind, value)} for the chosen schema."""
  image, labelled = loaded.image, loaded.labelled
  if spec.schema == 'seed':
    return {'img_raw': ('bytes', image.data), 'label': ('int64', labelled.label_id)}
  row = labelled.row
  features = {
      'image/encoded': ('bytes', image.data),
      'image/format': ('bytes', image.format),
      'image/height': ('int64', image.height),
      'image/width': ('int64', image.width),
      'image/channels': ('int64', image.channels),
      'image/class/label': ('int64', labelled.label_id),
      'image/class/text': ('bytes', labelled.label_text),
      'image/filename': ('bytes', row.image),
      'image/key': ('bytes', row.key),
      'image/key/sha256': ('bytes', loaded.sha256),
  }
  for name, kind, values in row.extras:
    features[name] = (kind, values)
  return features


def build_example(loaded: LoadedImage, spec: ExampleSpec) -> bytes:
  return serialize_example(example_features(loaded, spec))
