"""validate --recompute for manifests whose rows are not lines: a Parquet
manifest's rows (an image in a cell) and WebDataset tars' samples (an image
in a member). Their rows are found again as convert's first pass found them,
by the same functions (transforms/parquet_source.py's ReadRowGroupFn: each
row group's light columns; transforms/webdataset_source.py's ReadTarFn: each
tar's member headers and label members), in the manifest's order, the first
row of a key kept. A row carries where its bytes are (a ParquetCell, a
TarMember), which the comparison reads as the image step does
(transforms/workers/source_refs.py), and its fingerprint is its file's and
its place in it (row, member offset), as convert recorded it in the sidecar:
a file rewritten since is a warning, never a comparison."""

from __future__ import annotations

import dataclasses

import apache_beam as beam

from transforms.beam_util import TALLIES
from transforms.core import fingerprints
from transforms.core import manifest
from transforms.parquet_source import ReadRowGroupFn
from transforms.parquet_source import row_groups
from transforms.webdataset_source import ReadTarFn
from transforms.workers import http_fetch
from transforms.workers import source_refs

# Manifests whose rows are not lines (their images are cells or members).
NOT_BY_LINE = (manifest.PARQUET, manifest.WEBDATASET)


def with_label_names(config: manifest.ManifestConfig, options: dict,
                     label_map: tuple) -> manifest.ManifestConfig:
  """A WebDataset config whose .cls ids name the classes of the run's
  --label_map (dataset_info.json's label_map: the file itself is not read
  again, it may be gone); any other config as it is."""
  if config.fmt != manifest.WEBDATASET or not options.get('label_map'):
    return config
  layout = dataclasses.replace(config.layout, class_names=tuple(label_map))
  return dataclasses.replace(config, layout=layout)


def rows(config: manifest.ManifestConfig, keys: set) -> tuple:
  """(the rows convert counted, {key: its first ManifestRow} for `keys`) of
  a Parquet or WebDataset manifest, read as convert's first pass reads it.
  Rows it rejected give no record, and are skipped."""
  # The image step's per-thread caches (a row group's column, an open
  # .tar.gz) may hold a file as it was before it was rewritten.
  source_refs.clear_cache()
  if config.fmt == manifest.PARQUET:
    reader, items = ReadRowGroupFn(config), row_groups(config.layout)
  else:
    reader = ReadTarFn(config)
    items = [(index, path, size) for index, (path, size) in enumerate(config.layout.files)]
  reader.setup()
  count, found = 0, {}
  for item in items:
    for out in reader.process(item):
      if isinstance(out, beam.pvalue.TaggedOutput):
        if out.tag == TALLIES:
          count += out.value[1]
        continue
      if out.key in keys:
        found.setdefault(out.key, out)
  return count, found


def fingerprint_now(row, http: http_fetch.HttpClient) -> str:
  """The metadata fingerprint of a row's source as convert takes it
  (transforms/reuse.py's FingerprintFn): a file's; for bytes inside a file
  (row.ref), that file's with the place of the bytes in it, and that of the
  path read when a Parquet cell is null."""
  fallback = getattr(row.ref, 'fallback', '') if row.ref is not None else ''
  found = fingerprints.fingerprint_all(
      [row.path, fallback], lambda path: http.metadata(path) if http_fetch.is_http(path)
      else fingerprints.beam_metadata(path), None)
  if row.ref is None:
    return found[0]
  return fingerprints.part_fingerprint(found[0], row.ref.part(), found[1])


def shown_source(row) -> str:
  """What a message calls a row's source: a file's path, or the place of
  its bytes in one (`data/train.parquet row 3`, `a.tar member 0001.png`)."""
  return row.ref.where() if row.ref is not None else row.path

