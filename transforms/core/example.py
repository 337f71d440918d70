"""Building one tf.train.Example from a decoded row: plain functions."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

from transforms.core.fingerprints import content_fingerprint
from transforms.core.fingerprints import record_digest
from transforms.core.image import EncodedImage
from transforms.core.manifest import ManifestRow
from transforms.core.pickling import cheap_pickle
from transforms.core.shuffle import Ordering
from transforms.core.spec import ExampleSpec


@cheap_pickle
@dataclasses.dataclass(frozen=True, slots=True)
class LabelledRow:
  """A row whose label has been resolved to an id (a multi-label row's: tuples)."""
  row: ManifestRow
  label_id: int | tuple
  label_text: str | tuple


@cheap_pickle
@dataclasses.dataclass(frozen=True, slots=True)
class LoadedImage:
  """A labelled row with its encoded image and the source file's digest."""
  labelled: LabelledRow
  image: EncodedImage
  sha256: str
  source_bytes: int = 0
  reuse: str = ''  # reuse.FALLBACK: its record was to be copied, but failed its CRC


@cheap_pickle
@dataclasses.dataclass(frozen=True, slots=True)
class LoadedExample:
  """A labelled row whose Example an image worker process built from its
  image (build_example, there): its serialized Example and its source's
  digest. The launcher then only writes it."""
  labelled: LabelledRow
  data: bytes
  sha256: str
  source_bytes: int = 0
  reuse: str = ''  # reuse.FALLBACK: its record was to be copied, but failed its CRC


@cheap_pickle
@dataclasses.dataclass(frozen=True, slots=True)
class LoadedCopy:
  """A labelled row whose record was copied from the previous dataset
  (--previous_dataset): its serialized Example and its source's digest."""
  labelled: LabelledRow
  data: bytes
  sha256: str
  # The record as read from its previous shard (its frame checked): written
  # as it is, not framed again (b'': framed by the writer). On 12,000 reused
  # 31 KB records, framing again was ~10 us of a record's copy and write.
  framed: bytes = b''


def example_features(loaded: LoadedImage, spec: ExampleSpec) -> dict:
  """{feature name: (kind, value)}: the spec's feature table applied to `loaded`."""
  return {feature.name: (feature.kind, feature.value(loaded)) for feature in spec.features()}


def build_example(loaded: LoadedImage, spec: ExampleSpec) -> bytes:
  # Imported on first use: image worker processes import this module for its
  # row types, never build an Example, and started ~0.04 s slower with
  # protobuf's descriptors loaded (measured on 2 cores).
  from transforms.core.example_proto import serialize_example
  return serialize_example(example_features(loaded, spec))


class BuiltExample(NamedTuple):
  """A serialized Example with what the writers and the counts need to know."""
  split: str
  order: int  # place in the write order (transforms.core.shuffle)
  label_id: int
  key: str
  line: int
  sha256: str
  data: bytes
  # What the sidecar records (core/reuse.sidecar_line): the source's
  # fingerprint, the label's text and the record's option digest.
  fingerprint: str = ''
  label_text: object = ''
  option_digest: str = ''
  reuse: str = ''  # 'reused': copied from the previous dataset; 'reuse_fallback'
  image: str = ''  # the row's image path as written (the sidecar's `image`)
  framed: bytes = b''  # a LoadedCopy's framed record, written as it is (b'': framed anew)
  spilled: tuple = ()  # transforms/spill.Spilled: its framed bytes wait in a file (data b'')
  # The row's place in manifest order (ManifestRow.place): which of two copies
  # of one image came first (duplicates.Copy), across a pattern's files too.
  place: int = 0


def held_bytes(value: LoadedImage | LoadedExample | LoadedCopy | BuiltExample) -> int:
  """The image or record bytes one output of an image step holds (what
  batches.BatchedFn cuts its lists by)."""
  if isinstance(value, LoadedImage):
    return len(value.image.data)
  # a copy's data is a view into its framed bytes (core/copies.Copied)
  return len(getattr(value, 'framed', b'')) or len(value.data)


def built_example(loaded: LoadedImage | LoadedExample | LoadedCopy, spec: ExampleSpec,
                  ordering: Ordering, options_digest: str = '') -> BuiltExample:
  """options_digest: fingerprints.options_digest of the run (the record's
  option digest adds its extra features). A LoadedCopy's or a LoadedExample's
  Example is its data."""
  row, labelled = loaded.labelled.row, loaded.labelled
  copied = isinstance(loaded, LoadedCopy)
  return BuiltExample(row.split, ordering.key(row.key, row.place), labelled.label_id,
                      row.key, row.line, loaded.sha256,
                      build_example(loaded, spec) if isinstance(loaded, LoadedImage)
                      else loaded.data,
                      row.fingerprint or content_fingerprint(loaded.sha256),
                      labelled.label_text, record_digest(options_digest, row.extras),
                      'reused' if copied else (loaded.reuse or row.reuse), row.image,
                      loaded.framed if copied else b'', place=row.place)
