"""validate --recompute N on the launcher: a deterministic sample of a
dataset's records, each converted again from its source row with the options
dataset_info.json records, and compared byte for byte with the record its
sidecar line names. A source that changed since (or is gone) is a warning; the
same source giving other bytes is a problem (recompute_mismatch)."""

from __future__ import annotations

import dataclasses
import os
from typing import Optional
import zlib

from pipeline.configuration import command_line
from pipeline.configuration import config as opts
from pipeline.configuration import config_file
from pipeline.configuration import configs
from pipeline.configuration import output_flags
from pipeline.configuration.flags import ConvertOptions
from pipeline.errors import UsageError
from pipeline.validating import recompute_order
from pipeline.validating import recompute_sources
from transforms import filesystem
from transforms.core import copies
from transforms.core import fingerprints
from transforms.core import manifest
from transforms.core import paths
from transforms.core import recompute
from transforms.core import reuse
from transforms.core import splits
from transforms.core.example import LabelledRow
from transforms.core.example import LoadedImage
from transforms.core.example import built_example
from transforms.core.image import prepare_pillow
from transforms.core.image_dir import image_dir_fields
from transforms.core.labels import LabelMap
from transforms.core.redact import shown_url
from transforms.core.rejects import RowError
from transforms.core.spec import DATASET_INFO
from transforms.core.spec import SOURCES_SUFFIX
from transforms.core.validation import Problem
from transforms.read_sources import read_bytes
from transforms.workers import http_fetch
from transforms.workers.source_image import convert_sources

# Recorded options that only steer how a run ran, not what a record holds.
_NOT_FOR_RECORDS = ('previous_dataset', 'previous_dataset_missing', 'overwrite', 'progress',
                    'label_map', 'config')


# The manifest dataset_info.json records for a pipeline.api run given rows=
# (api.ROWS_SOURCE): the rows were in a temp file, gone with the run.
_ROWS_MANIFEST = '<rows>'


def recorded_config(info: dict, info_path: str, manifest_path: Optional[str]):
  """The run's ConvertConfig, from the options dataset_info.json records
  (--manifest: where its manifest lives now); UsageError if they do not load."""
  options = info.get('options')
  if not isinstance(options, dict) or not options:
    raise UsageError(f'--recompute: {info_path} records no options to convert with')
  flags = command_line._flags_of(command_line.own_parser(ConvertOptions))
  read_in_place = _read_in_place(options)
  if manifest_path and read_in_place:
    raise UsageError(f'--recompute: --manifest does not apply to {info_path}: {read_in_place}')
  if options.get('manifest') == _ROWS_MANIFEST and not manifest_path:
    raise UsageError(f'--recompute: {info_path} was converted from rows= (pipeline.api), '
                     f'which no file holds: give --manifest (manifest=), a manifest of '
                     f'those rows')
  if manifest_path:
    options = {**options, 'manifest': manifest_path}
  options = output_flags.without_pointless(options)
  if options.get('resize_mode') == 'none':
    # Runs before --height/--width were refused with it recorded the sizes
    # they did not use (output_flags.output_options): not given, as now.
    options = {**options, 'height': None, 'width': None}
  argv = []
  for key, value in sorted(options.items()):
    action = flags.get(f'--{key}')
    if action is not None and key not in _NOT_FOR_RECORDS:
      argv += config_file.tokens(key, value, action, f'{info_path}: options.{key}')
  try:
    config = opts.parse_convert(argv)[0]
  except UsageError as error:
    hint = (f' ({read_in_place})' if read_in_place else '' if manifest_path
            else " (--manifest: where the run's manifest lives now)")
    raise UsageError(f'--recompute: the options {info_path} records do not load: {error}{hint}')
  # Parquet rows and WebDataset samples: recompute_sources.py.
  return dataclasses.replace(config, manifests=tuple(
      recompute_sources.with_label_names(m, options, info['label_map'])
      for m in config.manifests))


def _read_in_place(options: dict) -> str:
  """Why --manifest cannot say where a run's sources live now ('' when it
  can): a --schema detection run's annotations and an --image_dir run's
  folder are read again where the run read them."""
  if options.get('annotations'):
    return ('a --schema detection run has no manifest: its annotations '
            f"({options['annotations']}) and images are read again where the run read them")
  if options.get('image_dir') and not options.get('manifest'):
    return (f"an --image_dir run has no manifest: its folder ({options['image_dir']}) "
            'is read again where the run read it')
  return ''


def _sampled(input_dir: str, info: dict, amount, files) -> list:
  """(split, key, PreviousRecord) of the records to convert again."""
  version = info.get('sources_format_version')
  if version is None:
    raise UsageError(f'--recompute: {input_dir} has no sidecars (written by --sink '
                     f"tfrecordio, or before sidecars existed): nothing names the records' "
                     f'sources')
  entries = []
  for split, entry in sorted(info['splits'].items()):
    sidecar = filesystem.join(input_dir, entry.get('sources') or split + SOURCES_SUFFIX)
    shards = [filesystem.join(input_dir, name) for name in entry['shards']]
    try:
      with files.open_checked(sidecar) as stream:
        for line in reuse.read_lines(stream):
          key, record = reuse.parse_line(line, split, shards, info.get('compression') == 'gzip',
                                         version)
          entries.append((split, key, record))
    except (ValueError, EOFError, OSError) as error:
      raise UsageError(f'--recompute: {sidecar} cannot be read: {error}')
  return recompute.sample(entries, amount)


def _rows(config, keys: set, files) -> tuple:
  """({key: ManifestRow} of the run's manifest for `keys` (the first row of a
  key, as convert keeps; the label from the label manifest's first row of the
  key when there is one), {'rows' | 'labels': the manifest's data lines})."""
  found, counts = [{}, {}], {}
  for index, manifest_config in enumerate(config.manifests):
    role = configs.MANIFEST_ROLES[index]
    counts[role] = 0
    if manifest_config.fmt in recompute_sources.NOT_BY_LINE:
      # a file unreadable now: its rows rejected, as convert rejects them
      counts[role], found[index] = recompute_sources.rows(manifest_config, keys)
      continue
    for name in configs.manifest_paths(manifest_config):
      # Each file of a pattern as convert read it (transforms/sources.py):
      # its relative image paths resolve against its own folder (was: the
      # pattern's, 'parts/*', every source 'gone', nothing compared).
      one_file = dataclasses.replace(manifest_config, path=name, files=())
      try:
        found_rows = _read_rows(name, one_file, keys, files)
      except (OSError, EOFError, zlib.error) as error:  # unreadable, or cut short since the run
        raise UsageError(f'--recompute: the manifest {name} cannot be read: {error}')
      counts[role] += found_rows[0]
      for key, row in found_rows[1].items():
        found[index].setdefault(key, row)
  rows, labels = found
  if len(config.manifests) > 1:
    rows = {key: dataclasses.replace(row, label=labels[key].label)
            for key, row in rows.items() if key in labels}
  return rows, counts


def _read_rows(name: str, manifest_config, keys: set, files) -> tuple:
  """(data lines, {key: its first ManifestRow} for `keys`) of one manifest
  file, decompressed as the run read it (a .gz: every line was missed, and
  every record skipped as if its row were gone)."""
  count, rows = 0, {}
  with files.open_checked(name) as stream:
    for line, raw in manifest.iter_lines(stream, manifest_config.fmt):
      count += 1
      try:
        row = manifest.row_from_fields(manifest.line_fields(raw, line, manifest_config),
                                       manifest_config, line)
      except RowError:
        continue  # rejected by the run too: no record
      if row.key in keys:
        rows.setdefault(row.key, row)
  return count, rows


# dataset_info.json's count of each manifest's rows
_COUNTED = {'rows': 'num_manifest_rows', 'labels': 'num_label_manifest_rows'}


def _unchanged(config, info: dict) -> dict:
  """{role: whether its manifest is at the versions the run recorded
  (dataset_info.json's manifest_versions: unchanged since)}; {} when the run
  recorded none (a remote manifest, an older version of img2tfrecord)."""
  recorded = info.get('manifest_versions') or {}
  if not recorded:
    return {}
  now = configs.manifest_versions(config.manifests) or {}
  return {role: now.get(role) is not None and recorded.get(role) == now.get(role)
          for role in configs.MANIFEST_ROLES[:len(config.manifests)]}


def _recount(config, info: dict, counts: dict, unchanged: dict) -> list:
  """A problem for each manifest read again at the versions the run recorded
  (unchanged since) whose data lines are not the rows dataset_info.json
  counts: a row dropped (or one added) after the run, with every count
  edited to match, or a reader that lost one. A manifest changed since is
  not counted (nightly runs change theirs)."""
  problems = []
  for role, manifest_config in zip(configs.MANIFEST_ROLES, config.manifests):
    if not unchanged.get(role):
      continue
    field = _COUNTED[role]
    if isinstance(info.get(field), int) and info[field] != counts.get(role):
      problems.append(Problem(
          recompute.ROW_COUNT, '', -1,
          f"{manifest_config.source} holds {counts.get(role)} data "
          f"line(s), unchanged since the run; dataset_info.json's {field} says {info[field]}"))
  return problems


def _names_a_file_gone(source: manifest.ManifestConfig, key: str) -> bool:
  """Whether `key` is a Parquet row's or WebDataset sample's own key
  ('{file name}:{row}', '{tar name}/{sample}') naming a file the manifest
  no longer matches: the file was renamed since the run (the versions,
  size and time, stay), so no row gives the key, and the run may well
  have written it."""
  if source.fmt not in (manifest.PARQUET, manifest.WEBDATASET) or 'key' in dict(
      source.columns):
    return False
  names = {os.path.basename(path) for path in configs.manifest_paths(source)}
  if source.fmt == manifest.PARQUET:
    name, colon, row = key.rpartition(':')
    return bool(colon) and row.isdigit() and name not in names
  name, slash, _ = key.partition('/')
  return bool(slash) and name not in names


def _rows_read_from(config) -> str:
  """' (rows read from ...)': the manifests read, a relative one with the
  path it resolved to. A relative --manifest the run recorded is read from
  the folder validate runs in: from another folder holding a manifest of that
  name, every sampled record was skipped as 'no row gives it now', naming
  neither file."""
  if not config.manifests:
    return ''
  read = [m.source if paths.is_remote(m.source) or os.path.isabs(m.source)
          else f'{m.source} = {os.path.abspath(m.source)}' for m in config.manifests]
  return f" (rows read from {', '.join(read)}; --manifest: where the run's manifest lives now)"


def _image_dir_row(config, image: str):
  """The row --image_dir made of the file at `image` (relative to it)."""
  source = manifest.ManifestConfig(
      path=config.image_dir.rstrip('/') + '/', fmt='csv', header=('image', 'label'), listed=True,
      split=config.split, label_normalize=config.label_normalize)
  return manifest.row_from_fields(image_dir_fields(image, config.image_dir_layout), source, 0)


def findings(input_dir: str, info: dict, amount, manifest_path: Optional[str],
             files: Optional[filesystem.FileAccess] = None) -> tuple:
  """-> ([Problem], [warning Problem], records converted again and compared,
  records skipped) of --recompute `amount` on the dataset: a sampled record
  whose source changed since the run or is gone (recompute_source_changed),
  or that another version of img2tfrecord encoded (recompute_other_version),
  is skipped, a warning: not compared."""
  files = files or filesystem.FileAccess()
  if paths.is_remote(input_dir):
    raise UsageError('--recompute reads the shards of a local --input_dir')
  info_path = filesystem.join(input_dir, DATASET_INFO)
  config = recorded_config(info, info_path, manifest_path)
  sampled = _sampled(input_dir, info, amount, files)
  if config.detection is not None:  # objects from annotation files, not manifest rows
    from pipeline.validating import recompute_detection
    return recompute_detection.findings(input_dir, info, config, sampled, files)
  rows, counts = _rows(config, {key for _, key, _ in sampled}, files) if (
      config.manifests) else ({}, {})
  label_map = LabelMap(tuple(info['label_map']), fixed=True)
  digest = fingerprints.options_digest(config.image, config.example)
  prepare_pillow(config.image.max_pixels)
  reader = copies.ShardReader()
  http = http_fetch.client(config.http)  # the run's --http_* options
  unchanged = _unchanged(config, info) if config.manifests else {}
  # Every manifest as the run read it: a record no row gives was not written
  # by the run (its key renamed since, every count still right), not a row
  # gone from a changed manifest.
  as_read = bool(unchanged) and all(unchanged.values())
  problems, warnings = _recount(config, info, counts, unchanged), []
  if recompute_order.checks_order(info, config, as_read):
    problems += recompute_order.order_problems(info, sampled, rows)
  found_at = [([], [])] * len(sampled)  # each record's (problems, warnings), by index
  try:
    for index, (split, key, record) in recompute.in_shard_order(sampled, reader):
      found_at[index] = mine = ([], [])
      where = (os.path.basename(record.shard_path), record.ordinal)
      row = rows.get(key) if config.manifests else (
          _image_dir_row(config, record.image) if record.image else None)
      if row is None and as_read and not _names_a_file_gone(config.manifests[0], key):
        mine[0].append(Problem(recompute.RECOMPUTE_MISMATCH, *where,
                               f"key {key!r}: no row of the run's manifest gives it, and the "
                               f'manifest is unchanged since the run: the run wrote no such '
                               f'record'))
        continue
      if row is None:
        mine[1].append(Problem(recompute.SOURCE_CHANGED, *where,
                               f"key {key!r}: no row of the run's input gives it now"
                               f'{_rows_read_from(config)}'))
        continue
      found = _one(row, split, record, config, label_map, digest, reader, files, http,
                   bool(unchanged) and not as_read)
      recompute.add_finding(found, where, key, *mine)
  finally:
    reader.close()
  recompute.in_sample_order(found_at, problems, warnings)
  return recompute.findings(problems, warnings, len(sampled))


def _one(row, split: str, record, config, label_map: LabelMap, digest: str, reader,
         files, http: http_fetch.HttpClient, row_changed: bool = False) -> Optional[tuple]:
  """(kind, what) of one record against its row converted again, or None.
  row_changed: a manifest changed since the run (manifest_versions), so a
  label, split or feature its row gives now may rightly differ (a row
  relabelled since): recompute_source_changed, as for a changed image; image
  bytes that differ stay a problem (the image's own fingerprint is unchanged).
  An http(s) source's fingerprint is its ETag and Last-Modified, as convert
  recorded them (a HEAD request); Beam's filesystems have none, so every such
  record was `recompute_source_changed`, never compared. Its URL is shown as
  convert shows it (credentials <redacted>): messages and the report held
  its password and signature."""
  recorded = record.option_digest.partition('-')[0]
  if recorded and recorded != digest:  # the same options recorded: another version's pixels
    return recompute.OTHER_VERSION, (
        f'its record was encoded under options digest {recorded}; this version of '
        f'img2tfrecord, Pillow and its codecs gives {digest} for the same options: not '
        f'compared')
  result = convert_sources([row.ref or row.path], config.image,
                           read=lambda path, spec: read_bytes(path, files, spec, http))[0]
  sha256 = None if isinstance(result, Exception) else result[1]
  if record.fingerprint.startswith('sha256:'):
    now = fingerprints.content_fingerprint(sha256) if sha256 else ''
  else:  # a file's, or (row.ref) its file's and the place of its bytes in it
    now = recompute_sources.fingerprint_now(row, http)
  shown = shown_url(recompute_sources.shown_source(row))
  if now != record.fingerprint:
    return recompute.SOURCE_CHANGED, (
        f'its source {shown} changed since the run (or is gone): not compared')
  if isinstance(result, Exception):
    return recompute.RECOMPUTE_MISMATCH, f'its unchanged source {shown} does not convert ' \
        f'again: {result}'
  if config.split_by == 'content' and config.split.fractions:
    row = dataclasses.replace(row, split=splits.hash_split(
        sha256, config.split.fractions, config.split.seed))
  try:
    label_id, label_text = label_map.resolve(row.label)
  except RowError as error:
    return (recompute.SOURCE_CHANGED if row_changed else recompute.RECOMPUTE_MISMATCH), (
        f"its row's label no longer resolves: {error.reason}"
        + (_ROW_CHANGED if row_changed else ''))
  loaded = LoadedImage(LabelledRow(row, label_id, label_text), result[0], sha256, result[2])
  expected = built_example(loaded, config.example, config.ordering, digest).data
  try:
    found, _ = reader.data(record)
  except copies.COPY_ERRORS as error:
    return recompute.RECOMPUTE_MISMATCH, f'its record cannot be read: {error}'
  differ = recompute.record_differences(found, expected, split, row.split, 'its row gives')
  if not differ:
    return None
  if row_changed and 'image bytes' not in differ:
    return recompute.SOURCE_CHANGED, f'{", ".join(differ)} differ from its row' + _ROW_CHANGED
  return recompute.RECOMPUTE_MISMATCH, (
      f'{", ".join(differ)} differ from its unchanged source {shown} '
      f'converted again')


_ROW_CHANGED = "; the run's manifest changed since the run: not compared"
