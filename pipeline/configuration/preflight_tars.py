"""What convert checks of a WebDataset manifest on the launcher: the tars its
brace ranges and globs name (listed and sized, none read), and which flags
apply (the label from .cls, .txt or a .json field; no image column). Every
problem is a UsageError."""

from __future__ import annotations

import dataclasses
from typing import Optional

from pipeline.configuration.manifest_files import manifest_files
from pipeline.configuration.manifest_files import path_splits
from pipeline.errors import UsageError
from transforms.core import manifest
from transforms.core import paths
from transforms.core import splits
from transforms.core import webdataset
from transforms.core.labels import LabelMap


def tar_files(path: str) -> tuple:
  """(path, size) of every tar --manifest names: each brace expansion
  ({000000..000099}, {a,b}) a file or a glob, sorted by path, each once."""
  found = {}
  for each in webdataset.expand_braces(path):
    found.update(manifest_files(each))
  return tuple(sorted(found.items()))


def tar_config(path: str, role: str, split: splits.SplitConfig, extras: tuple,
               columns: dict, multi_label: bool, label_normalize: frozenset,
               files: Optional[tuple] = None) -> manifest.ManifestConfig:
  """A WebDataset --manifest -> its ManifestConfig (config.layout: the
  tars). files: the tars, when already listed (tar_files)."""
  if role != manifest.ROLE_COMBINED:
    raise UsageError(f'manifest {path} is WebDataset tars: their samples hold images and '
                     f'labels together (--label_manifest takes a CSV, TSV, JSONL or txt '
                     f'manifest)')
  if multi_label:
    raise UsageError(f'--multi_label reads a label cell of several labels: not WebDataset '
                     f'tars ({path})')
  if 'image' in columns:
    raise UsageError(f"manifest {path} is WebDataset tars: a sample's image is its member "
                     f'whose extension is in --image_extensions; drop --image_column')
  files = files or tar_files(path)
  names = paths.short_names([tar for tar, _ in files], path)
  layout = webdataset.TarLayout(files=files, extensions=None, names=names,
                                splits=path_splits(files, names, path, split))
  return manifest.ManifestConfig(
      path=path, fmt=manifest.WEBDATASET, role=role, split=split, extra_features=extras,
      columns=tuple(sorted(columns.items())), label_normalize=label_normalize, files=files,
      layout=layout)


def with_options(config: manifest.ManifestConfig, extensions: Optional[tuple],
                 label_map: Optional[LabelMap]) -> manifest.ManifestConfig:
  """The config with what the samples are read by: the image extensions,
  and the --label_map names a .cls id stands for."""
  layout = dataclasses.replace(config.layout, extensions=extensions,
                               class_names=label_map.names if label_map else ())
  return dataclasses.replace(config, layout=layout)
