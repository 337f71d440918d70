"""Look at a dataset: counts, specs, the first record; with --export_dir, sample
images, samples.csv, contact_sheet.png, label_histogram.png and report.html.

  python -m pipeline.look --input_dir OUT [--split NAME] [--num 16] [--per_class K]
      [--seed 0] [--export_dir DIR]
  python -m pipeline.look --files 'PATTERN' [--height H --width W --channels C]
      [--image_feature NAME] [--label_feature NAME] [--export_dir DIR]

Records are streamed once (class counts and a reproducible random sample in the
same pass); only the sampled records are kept. Exit codes: 0 done (damaged
records are reported and skipped), 2 bad input; interrupted by SIGINT, SIGTERM
or SIGHUP, the line `interrupted` and the end by the signal (130, 143, 129).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
import contextlib
import json
import os
import random

from pipeline import errors
from pipeline.configuration.locations import check_inputs_given_once
from pipeline.configuration.locations import check_location
from pipeline.errors import EXIT_OK
from pipeline.errors import UsageError
from pipeline.looking import foreign_records
from pipeline.looking import lettering
from pipeline.looking import report
from pipeline.looking.export_files import SAMPLES_CSV
from pipeline.looking.export_files import prepare_export_dir
from pipeline.looking.export_files import write_file
from pipeline.looking.export_files import write_samples
from pipeline.looking.export_files import writing
from pipeline.looking.look_sample import Reservoir
from pipeline.looking.look_sample import capped
from pipeline.looking.look_sample import decode_samples
from pipeline.looking.look_sample import present
from pipeline.looking.look_sample import records_of
from pipeline.looking.look_sample import scan_split
from pipeline.looking.look_sample import skipped_lines
from pipeline.reading import dataset
from pipeline.runs import exits
from pipeline.runs import interrupts
from pipeline.runs.summary import over_budget_line
from transforms.core import dataset_checks
from transforms.core import decoders
from transforms.core import file_kinds
from transforms.core import paths
from transforms.core import records
from transforms.core.dataset_info import InfoError
from transforms.core.example_proto import parse_example
from transforms.core.labels import written_out
from transforms.core.pointers import pointer_given
from transforms.core.spec import REJECTED_FILE
from transforms.core.spec import VALIDATION_REPORT

# More classes than this: the terminal lists the half most and the half least
# frequent (a class of 0 or 1 example is what a look is for; the 20 most
# frequent alone never showed it).
TOP_CLASSES = 20
FIRST_RECORDS = 3  # records of a foreign file whose features are described
REJECTED_SHOWN = 3  # first rejected lines per stage/code on the page
CONTACT_SHEET = 'contact_sheet.png'
HISTOGRAM = 'label_histogram.png'
REPORT = 'report.html'


def parse_args(argv: list) -> argparse.Namespace:
  parser = errors.UsageParser(prog=errors.command_prog('inspect'),
                              description=__doc__.strip().splitlines()[0],
                              allow_abbrev=False)
  parser.add_argument('--input_dir', help='a folder written by convert')
  parser.add_argument('--files', help='glob of TFRecord files convert did not write')
  parser.add_argument('--split', help='only this split (default: every split)')
  parser.add_argument('--num', type=int, default=16, help='sampled records per split')
  parser.add_argument('--per_class', type=int, default=0,
                      help='K sampled records per class and split instead of --num')
  parser.add_argument('--seed', type=int, default=0, help='seed of the random sample')
  parser.add_argument('--export_dir', help='write images, samples.csv, contact_sheet.png, '
                      'label_histogram.png and report.html here')
  parser.add_argument('--height', type=int, help='--files with raw pixels: their height')
  parser.add_argument('--width', type=int, help='--files with raw pixels: their width')
  parser.add_argument('--channels', type=int, default=3, choices=(1, 3))
  parser.add_argument('--image_feature', help='--files: the image feature (default: the '
                      f'first of {", ".join(records.IMAGE_FEATURES)})')
  parser.add_argument('--label_feature', help='--files: the label feature (default: the '
                      f'first of {", ".join(records.LABEL_FEATURES)})')
  unknown = errors.unknown_flag(parser, argv)
  if unknown:
    raise UsageError(unknown)
  check_inputs_given_once(argv, ('input_dir', 'files'))  # argparse would read the last alone
  args = parser.parse_args(argv)
  check_location('--input_dir', args.input_dir)  # first: '' is "empty", not "give --input_dir"
  check_location('--export_dir', args.export_dir)  # '' was taken as no --export_dir, exit 0
  if bool(args.input_dir) == bool(args.files):
    raise UsageError('give --input_dir (a folder written by convert) or --files PATTERN '
                       '(TFRecord files without dataset_info.json)')
  if args.num < 0 or args.per_class < 0:
    raise UsageError('--num and --per_class must not be negative')
  if args.export_dir and paths.is_remote(args.export_dir):  # not a local folder 'gs:'
    raise UsageError(f'--export_dir {args.export_dir} must be a local folder (the pictures '
                     'and report.html are written with local files)')
  if args.export_dir and os.path.exists(args.export_dir) and not os.path.isdir(args.export_dir):
    raise UsageError(f'--export_dir {args.export_dir} exists and is not a folder')
  return args


def validation_report(input_dir: str) -> tuple:
  """(validation_report.json's object or None, why it cannot be shown or None).
  One cut short or edited by hand (not UTF-8 JSON, no object) was a traceback,
  and report.html unwritten."""
  path = os.path.join(input_dir, VALIDATION_REPORT)
  if not present(path):
    return None, None
  try:  # a FIFO waited for a writer for ever: refused unopened, as a folder
    file_kinds.require_regular(path, file_kinds.NotRegularFile)
    with dataset.open_binary(path) as handle:
      validation = json.loads(handle.read())
  except (OSError, ValueError) as error:  # UnicodeDecodeError and JSONDecodeError too
    return None, f'{VALIDATION_REPORT} cannot be read: {error}'
  if not isinstance(validation, dict):
    return None, f'{VALIDATION_REPORT} holds no JSON object'
  return validation, None


def rejected_summary(input_dir: str, info: dict, unread: list) -> tuple:
  """([(stage, code, count)] from dataset_info.json, {(stage, code): first lines}
  streamed from rejected.jsonl). A rejected.jsonl that cannot be read (a
  folder: a traceback; a FIFO: a wait for ever) is said in `unread`."""
  counts = [(*reason.split('/', 1), count)
            for reason, count in info.get('rejected_by_reason', {}).items()]
  counts += [(*reason.split('/', 1), count)
             for reason, count in info.get('label_manifest_rejected_by_reason', {}).items()]
  first = {}
  path = os.path.join(input_dir, REJECTED_FILE)
  try:
    if counts and present(path):
      file_kinds.require_regular(path, file_kinds.NotRegularFile)
      with dataset.open_binary(path) as handle:  # lines over 1 MiB never held whole
        for raw in dataset_checks.capped_lines(handle):
          try:  # a cut-off last line, one not UTF-8, too long, no object: skipped
            rejection, line = json.loads(raw), raw.decode('utf-8')
            rejection.get('stage')
          except (ValueError, TypeError, AttributeError):
            continue  # the counts above still hold
          lines = first.setdefault((rejection.get('stage'), rejection.get('code')), [])
          if len(lines) < REJECTED_SHOWN:
            lines.append(line.rstrip('\n'))
  except OSError as error:  # the counts above still hold
    unread.append(f'{REJECTED_FILE}: {error.strerror or error}')
  return counts, first


def _shown(kind: str, values: list) -> str:
  """A feature's values for the terminal: long bytes as their length."""
  if kind == 'bytes_list' and values and len(values[0]) > 64:
    return f'<{len(values[0])} bytes>'
  return repr(values[0] if len(values) == 1 else values)


NO_RECORD = ['  (no readable record)']


def first_record_lines(path: str) -> list:
  skipped = []
  for _, data in records_of(path, skipped):
    features = parse_example(data)
    return [f'  {written_out(name):20s} {kind:11s} {_shown(kind, values)}'
            for name, (kind, values) in sorted(features.items())]
  return NO_RECORD


def class_table(counts: dict, names: list, unit: str = 'examples') -> tuple:
  """(headers, rows): one row per class id with its count per split and total,
  most frequent first when there are more than TOP_CLASSES."""
  splits = list(counts)
  labels = sorted({i for i, name in enumerate(names) if name}.union(
      *[set(c) for c in counts.values()]))
  rows = []
  for label in labels:
    per_split = [counts[s].get(label, 0) for s in splits]
    name = names[label] if 0 <= label < len(names) else '(not in the label map)'
    rows.append([label, name, *per_split, sum(per_split)])
  return ['id', 'class', *[f'{s} {unit}' for s in splits], f'total {unit}'], rows


def summary_lines(input_dir: str, info: dict, counts: dict) -> list:
  image = info['image']
  # --resize_mode none: each record keeps its source's size
  shape = (f'original size, {image["channels"]} channel(s)' if image['height'] is None
           else f'{image["height"]}x{image["width"]}x{image["channels"]}')
  lines = [f'Dataset {input_dir}: schema {info["schema"]}, {info.get("num_examples")} '
           f'examples, {info.get("num_rejected", 0)} rejected rows, '
           f'compression {info.get("compression")}.', 'Splits:']
  for split, declared in info['splits'].items():
    lines.append(f'  {split:12s} {declared["num_examples"]:>9,d} examples '
                 f'{declared["num_bytes"]:>14,d} bytes {len(declared["shards"]):>5d} shard(s)')
  headers, rows = class_table(counts, info['label_map'],
                              'objects' if info['schema'] == 'detection' else 'examples')
  shown, half = rows, TOP_CLASSES // 2
  if len(rows) > TOP_CLASSES:
    ranked = sorted(rows, key=lambda r: -r[-1])
    shown = ranked[:half] + [None] + ranked[-half:]
  lines.append(f'Classes ({len(rows)}' + (f'; the {half} most and the {half} least frequent'
                                          if shown is not rows else '') + '):')
  lines.append('  ' + '  '.join(f'{h:>14s}' if n > 1 else f'{h:>4s}' if n == 0 else f'{h:20s}'
                                for n, h in enumerate(headers)))
  for row in shown:
    if row is None:
      lines.append(f'  {"":>4s}  ... {len(rows) - 2 * half} more')
      continue
    lines.append('  ' + '  '.join(f'{v:>14,d}' if n > 1 else f'{v:>4d}' if n == 0
                                  else lettering.in_columns(str(v))
                                  for n, v in enumerate(row)))
  lines.append(f'Image: {shape} {image["encoding"]}, resize '
               f'{image.get("resize_mode")} ({image.get("resize_filter")})')
  lines.append('Features:')
  lines += [f'  {written_out(name):20s} {spec["dtype"]:8s} {json.dumps(spec["shape"])}'
            for name, spec in info['feature_spec'].items()]
  # The first shard holding a record: with --sink tfrecordio --num_shards N,
  # Beam's round robin may leave any shard empty, the first one too; a split of
  # no shard may come first (no first record was printed then).
  shards = [shard for split in counts for shard in info['splits'][split]['shards']]
  if shards:
    first, record = shards[0], NO_RECORD
    for shard in shards:
      record = first_record_lines(paths.join(input_dir, shard))
      if record is not NO_RECORD:
        first = shard
        break
    lines.append(f'First record of {first}:')
    lines += record
  return lines


def write_pictures(export_dir: str, title: str, samples_by_split: dict, counts: dict,
                   names: list, unit: str = 'examples') -> tuple:
  """contact_sheet.png (every sample), label_histogram.png -> (sheets per split, histogram)."""
  every = [s for samples in samples_by_split.values() for s in samples]
  write_file(export_dir, CONTACT_SHEET, report.png_bytes(report.contact_sheet(every)))
  histogram = report.figure_png(report.histogram_figure(counts, names, unit),
                                {'Title': f'{report.HISTOGRAM_TITLE}: {title}'})
  write_file(export_dir, HISTOGRAM, histogram)
  sheets = {split: report.png_bytes(report.contact_sheet(samples))
            for split, samples in samples_by_split.items() if samples}
  return sheets, histogram


def inspect_dataset(args) -> list:
  """--input_dir: the summary lines; with --export_dir, every file as well."""
  if not os.path.isdir(args.input_dir) and not paths.is_remote(args.input_dir):
    raise UsageError('--input_dir ' + (pointer_given(args.input_dir) or f'{args.input_dir} is not a folder'))
  try:
    info = dataset.read_info(args.input_dir)
  except InfoError as error:
    raise UsageError(f'{error} (for TFRecord files convert did not write, use --files)')
  splits = list(info['splits'])
  if args.split:
    if args.split not in splits:
      raise UsageError(f'no split {args.split!r}; {args.input_dir} has '
                         f'{", ".join(splits) or "none"}')
    splits = [args.split]
  exporting = bool(args.export_dir)
  size = (args.per_class or args.num) if exporting else 0
  scans = {split: scan_split(args.input_dir, info, split, size, bool(args.per_class), args.seed)
           for split in splits}
  counts = {split: scan.counts for split, scan in scans.items()}
  lines = summary_lines(args.input_dir, info, counts)
  if not exporting:  # (names written out: a feature name's ESC sequence, say)
    return lines + [f'Skipped {written_out(line)}' for line in skipped_lines(scans)[0]]
  samples = {split: decode_samples(split, scan, info) for split, scan in scans.items()}
  skipped, damaged = skipped_lines(scans)
  listed = len(skipped)
  prepare_export_dir(args.export_dir)
  rows = write_samples(args.export_dir, [s for split in samples.values() for s in split])
  # a folder named in bytes that are not UTF-8 (Python's lone surrogates),
  # shown with U+FFFD: the page and the PNG's title are UTF-8 (a traceback)
  shown = args.input_dir.encode('utf-8', 'surrogateescape').decode('utf-8', 'replace')
  title = f'img2tfrecord dataset {shown}'
  unit = 'objects' if info['schema'] == 'detection' else 'examples'
  sheets, histogram = write_pictures(args.export_dir, title, samples, counts, info['label_map'],
                                     unit)
  headers, class_rows = class_table(counts, info['label_map'], unit)
  rejected, rejected_lines = rejected_summary(args.input_dir, info, skipped)
  validation, validation_problem = validation_report(args.input_dir)
  split_rows = [[s, d['num_examples'], d['num_bytes'], len(d['shards'])]
                for s, d in info['splits'].items() if s in splits]
  page = report.report_html(
      title=title, splits=split_rows, class_rows=class_rows, class_headers=headers,
      image_spec=info['image'], feature_spec=info['feature_spec'], histogram_png=histogram,
      sheets=sheets, samples_rows=rows, rejected=rejected, rejected_lines=rejected_lines,
      validation=validation, validation_problem=validation_problem, skipped=skipped,
      num_skipped=damaged + len(skipped) - listed,  # and an unread rejected.jsonl
      notes=[f'{info.get("num_examples")} examples, {info.get("num_rejected", 0)} rejected '
             f'rows of {info.get("num_manifest_rows")} manifest rows.',
             *filter(None, [info.get('over_budget') and over_budget_line(info)])])
  write_file(args.export_dir, REPORT, page.encode('utf-8'))
  unshown = [f'Not shown: {validation_problem} (run img2tfrecord validate again)'
             ] if validation_problem else []
  return lines + [f'Skipped {written_out(line)}' for line in skipped] + unshown + [
      f'Exported {len(rows)} images, {SAMPLES_CSV}, {CONTACT_SHEET}, {HISTOGRAM} to '
      f'{args.export_dir}; open {os.path.join(os.path.abspath(args.export_dir), REPORT)}']


def inspect_files(args, show: Callable[[list], None]) -> list:
  """--files: each file's features from its first records, given to show()
  before anything that may fail (a size that does not match the records
  listed, an export's record); -> the export's lines ([] without one)."""
  paths = foreign_records.matching_files(args.files)
  if not paths:
    raise UsageError(f'--files {args.files!r} matches no file')
  lines = []
  size_problem = None  # the first listed record whose raw pixels the size given misses
  reservoir = Reservoir(args.per_class or args.num, random.Random(f'{args.seed}:files'))
  skipped = []
  counts = {}
  for path in paths:
    # a foreign file's names and feature names are written out: an ESC in one
    # reached the terminal raw (ESC [2J cleared the screen, ESC ]0; retitled it)
    lines.append(f'{written_out(path)}:')
    for index, data in records_of(path, skipped, by_content=True):
      try:
        features = parse_example(data)
      except Exception as error:  # DecodeError: not an Example
        skipped.append(f'{os.path.basename(path)} record {index}: not a tf.train.Example: '
                       f'{error}')
        continue
      if index < FIRST_RECORDS:
        lines.append(f'  record {index}:')
        lines += [f'    {written_out(name):24s} {kind:11s} {n} value(s)' +
                  (f', first {length} bytes' if length is not None else '')
                  for name, kind, n, length in records.describe_features(features)]
        size_problem = size_problem or foreign_records.listed_size_problem(
            features, args, f'{os.path.basename(path)} record {index}')
      if not args.export_dir:
        if index + 1 >= FIRST_RECORDS:
          break
        continue
      label = foreign_records.foreign_label(features, args)
      counts[label] = counts.get(label, 0) + 1
      reservoir.offer(label if args.per_class else None, (path, index, features))
  lines += [f'Skipped {written_out(line)}' for line in capped(skipped)]  # a file name's ESC too
  show(lines)
  if size_problem:
    raise UsageError(size_problem)
  if not args.export_dir:
    return []
  skipped = []  # the export's own, after the listing's
  samples = []
  for path, index, features in sorted(reservoir.items(), key=lambda c: (paths.index(c[0]), c[1])):
    where = f'{os.path.basename(path)} record {index}'
    try:
      image, label, text = foreign_records.foreign_image(features, args, where)
    except decoders.RecordError as error:
      skipped.append(f'{where}: {error}')
      continue
    key = features.get('image/key', (None, [b'']))[1]
    samples.append(report.Sample('', os.path.basename(path), index,
                                 key[0].decode('utf-8', 'replace') if key and key[0] else
                                 f'{os.path.basename(path)}#{index}', label, text, image))
  prepare_export_dir(args.export_dir)
  rows = write_samples(args.export_dir, samples)
  write_file(args.export_dir, CONTACT_SHEET, report.png_bytes(report.contact_sheet(samples)))
  return [f'Skipped {written_out(line)}' for line in capped(skipped)] + [
      f'Exported {len(rows)} images, {SAMPLES_CSV} and {CONTACT_SHEET} to {args.export_dir}']


def _print_lines(lines: list) -> None:
  if lines:
    print('\n'.join(lines), flush=True)


def run(argv: list) -> int:
  args = parse_args(argv)
  with writing(args.export_dir) if args.export_dir else contextlib.nullcontext():
    _print_lines(inspect_files(args, _print_lines) if args.files else inspect_dataset(args))
  return EXIT_OK


def main(argv=None) -> int:  # SIGINT, SIGTERM, SIGHUP: one line, the end by the signal
  return exits.handling_signals(lambda handlers: exits.main_with_usage_errors(
      run, argv, handlers), interrupts.INSPECT_LINES)


if __name__ == '__main__':
  interrupts.before_run(interrupts.INSPECT_LINES[0])
  exits.exit_with(main)
