"""A manifest read in byte ranges by every worker: the Beam steps
(TestPipeline + assert_that) with ranges of a few bytes, several files as one
manifest, and whole conversions against one manifest holding the same rows."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import os
import pathlib
import threading

import apache_beam as beam
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to
import pytest

from pipeline import convert
from pipeline.configuration import preflight
from pipeline.errors import EXIT_OK
from pipeline.errors import EXIT_USAGE
from pipeline.errors import UsageError
from tests.conftest import COLOURS
from tests.conftest import local_pipeline
from tests.conftest import read_info
from tests.conftest import rejected_lines
from tests.conftest import write_image
from transforms import manifest_ranges
from transforms.batches import Unbatch
from transforms.beam_util import REJECTED
from transforms.beam_util import ROWS
from transforms.beam_util import TALLIES
from transforms.core import manifest
from transforms.core.splits import SplitConfig
from transforms.core.tally import lines_key
from transforms.manifest_ranges import RANGE_LOG_ENV
from transforms.sources import ReadManifest

# Bad rows beside range boundaries, blank lines, CRLF, a 4-byte UTF-8
# character and a last line without its newline. (line, what the line is)
LINES = [
    (1, 'image,label'),
    (2, 'a.png,cat'),
    (3, 'b.png,dog,extra'),  # wrong_field_count
    (4, ''),
    (5, '"c.png,cat'),  # bad_quoting: a quoted field cannot hold a line break
    (6, 'rest",cat'),  # ... so the rest of it is a line of its own
    (7, '\U0001f600.png,\u00e9t\u00e9'),
    (8, ',cat'),  # empty_image
    (9, '   '),
    (10, 'd.png,cat\r'),  # CRLF
    (11, 'e.png,dog'),
]
ROWS_EXPECTED = [(2, 'a.png', 'cat'), (6, 'rest"', 'cat'), (7, '\U0001f600.png', '\u00e9t\u00e9'),
                 (10, 'd.png', 'cat'), (11, 'e.png', 'dog')]
REJECTED_EXPECTED = [(3, 'wrong_field_count'), (5, 'bad_quoting'), (8, 'empty_image')]


def manifest_bytes() -> bytes:
  return '\n'.join(text for _, text in LINES).encode('utf-8')  # no final newline


def direct_pipeline(*flags):
  return local_pipeline(*flags)


def config_for(path, files=()):
  return manifest.ManifestConfig(path=str(path), fmt='csv', header=('image', 'label'),
                                 files=files)


def test_line_numbers_are_exact_with_tiny_ranges(tmp_path):
  """Ranges cut inside lines, on their ends (11-13) and none: one pipeline
  reads the manifest once per range size, and one assert_that checks them all
  (an assert_that per output and size made it 17 s; each is several stages)."""
  path = tmp_path / 'm.csv'
  path.write_bytes(manifest_bytes())
  sizes = (1, 2, 5, 11, 12, 13, 29, None)
  expected = []
  for size in sizes:
    expected += [(size, 'row', (n, image, label, n, str(path))) for n, image, label in ROWS_EXPECTED]
    expected += [(size, 'rejected', line_code) for line_code in REJECTED_EXPECTED]
    expected += [(size, 'lines', 8)]
  with direct_pipeline() as p:
    seen = []
    for size in sizes:
      read = p | f'Read{size}' >> ReadManifest(config_for(path), range_bytes=size)
      seen += [
          read[ROWS] | f'Unbatch{size}' >> Unbatch() | f'Rows{size}' >> beam.Map(
              lambda r, size=size: (size, 'row', (r.line, r.image, r.label, r.place, r.source))),
          read[REJECTED] | f'Rejected{size}' >> beam.Map(
              lambda r, size=size: (size, 'rejected', (r.line, r.code))),
          read[TALLIES] | f'Tallies{size}' >> beam.Map(
              lambda kv, size=size: ((size, kv[0]), kv[1])),
      ]
    tallied = (seen[2::3] | 'AllTallies' >> beam.Flatten() | 'Sum' >> beam.CombinePerKey(sum)
               | 'Lines' >> beam.Map(
                   lambda kv: (kv[0][0], 'lines' if kv[0][1] == lines_key(False) else kv[0][1],
                               kv[1])))
    everything = [c for i, c in enumerate(seen) if i % 3 != 2] + [tallied]
    assert_that(everything | 'All' >> beam.Flatten(), equal_to(expected))


def write_parts(folder: pathlib.Path) -> list:
  """Three files of one manifest: a.csv, b.csv.gz (read whole), c.csv."""
  folder.mkdir(parents=True, exist_ok=True)
  (folder / 'a.csv').write_bytes(b'image,label\na1.png,cat\nbad,row,here\na3.png,dog\n')
  (folder / 'b.csv.gz').write_bytes(gzip.compress(b'image,label\n\nb2.png,cat\n,dog\n'))
  (folder / 'c.csv').write_bytes(b'image,label\r\nc1.png,dog\r\n"c2,dog\r\nc3.png,cat')
  return [str(folder / name) for name in ('a.csv', 'b.csv.gz', 'c.csv')]


def test_files_of_a_pattern_are_one_manifest_with_their_own_lines(tmp_path):
  paths = write_parts(tmp_path / 'parts')
  config = preflight.manifest_config(str(tmp_path / 'parts' / '*.csv*'),
                                     manifest.ROLE_COMBINED, SplitConfig(), ())
  assert [p for p, _ in config.files] == paths
  a, b, c = paths
  with direct_pipeline() as p:
    read = p | ReadManifest(config, range_bytes=4)
    assert_that(read[ROWS] | Unbatch()
                | beam.Map(lambda r: (r.source, r.line, r.place, r.image, r.path)),
                equal_to([(a, 2, 2, 'a1.png', f'{tmp_path}/parts/a1.png'),
                          (a, 4, 4, 'a3.png', f'{tmp_path}/parts/a3.png'),
                          (b, 3, 7, 'b2.png', f'{tmp_path}/parts/b2.png'),
                          (c, 2, 10, 'c1.png', f'{tmp_path}/parts/c1.png'),
                          (c, 4, 12, 'c3.png', f'{tmp_path}/parts/c3.png')]), label='Rows')
    assert_that(read[REJECTED] | beam.Map(lambda r: (r.source, r.line, r.code)),
                equal_to([(a, 3, 'wrong_field_count'), (b, 4, 'empty_image'),
                          (c, 3, 'bad_quoting')]), label='Rejected')
    assert_that(read[TALLIES] | beam.CombinePerKey(sum),
                equal_to([(lines_key(False), 8)]), label='Tallies')


@pytest.mark.integration  # Beam's multi-process DirectRunner (~9 s)
def test_two_local_workers_both_read_ranges(tmp_path, monkeypatch):
  """--direct_num_workers 2: the ranges are spread over both worker processes."""
  log = tmp_path / 'ranges'
  log.mkdir()
  monkeypatch.setenv(RANGE_LOG_ENV, str(log))
  path = tmp_path / 'm.csv'
  rows = [f'{i}.png,{"cat" if i % 3 else "dog"}' for i in range(4000)]
  path.write_text('image,label\n' + '\n'.join(rows) + '\n')
  with direct_pipeline('--direct_num_workers=2', '--direct_running_mode=multi_processing') as p:
    read = p | ReadManifest(config_for(path), range_bytes=2000)
    assert_that(read[ROWS] | Unbatch() | beam.Map(lambda r: (r.line, r.image)),
                equal_to([(i + 2, f'{i}.png') for i in range(4000)]))
  pids = {name.split('-')[0] for name in os.listdir(log)}
  assert len(pids) == 2, sorted(os.listdir(log))


# --- whole conversions ---------------------------------------------------------


def make_images(root: pathlib.Path) -> list:
  """(absolute image path, label) of 12 small images; two rows of them are bad."""
  rows = []
  for i in range(12):
    name = list(COLOURS)[i % 3]
    path = write_image(root / 'images' / f'{name}_{i}.png', COLOURS[name],
                       size=(10 + i, 8 + i))
    rows.append((str(path), name))
  rows.insert(5, (str(root / 'images' / 'missing.png'), 'red'))
  rows.insert(9, ('', 'red'))
  return rows


def csv_text(rows, crlf=False) -> bytes:
  end = '\r\n' if crlf else '\n'
  return ('image,label' + end + ''.join(f'{i},{l}{end}' for i, l in rows)).encode()


def digests(out: pathlib.Path) -> dict:
  return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.iterdir())
          if p.name == 'label_map.txt' or '.tfrecord' in p.name or '.index' in p.name}


@pytest.mark.parametrize('shuffle', ['off', 'on'])
def test_a_pattern_converts_as_one_manifest_holding_its_rows(tmp_path, shuffle):
  rows = make_images(tmp_path)
  single = tmp_path / 'all.csv'
  single.write_bytes(csv_text(rows))
  parts = tmp_path / 'parts'
  parts.mkdir()
  (parts / 'p0.csv').write_bytes(csv_text(rows[:6]))
  (parts / 'p1.csv.gz').write_bytes(gzip.compress(csv_text(rows[6:8])))
  (parts / 'p2.csv').write_bytes(csv_text(rows[8:], crlf=True))
  flags = ['--num_shards', '2', '--write_index', '--max_error_rate', '0.5',
           '--shuffle', shuffle, '--progress', 'off', '--height', '8', '--width', '8']
  outs = {}
  for name, source in (('single', single), ('parts', parts / 'p*.csv*')):
    outs[name] = tmp_path / f'out_{name}'
    assert convert.main(['--manifest', str(source), '--output_dir', str(outs[name]),
                         *flags]) == EXIT_OK
  assert digests(outs['parts']) == digests(outs['single'])
  info = read_info(outs['parts'])
  assert (info['num_manifest_rows'], info['num_examples'], info['num_rejected']) == (14, 12, 2)
  rejected = sorted((r['source'], r['line'], r['code']) for r in rejected_lines(outs['parts']))
  assert rejected == [(str(parts / 'p0.csv'), 7, 'missing_file'),
                      (str(parts / 'p2.csv'), 3, 'empty_image')]
  assert sorted((r['source'], r['line'], r['code']) for r in rejected_lines(outs['single'])) == [
      (str(single), 7, 'missing_file'), (str(single), 11, 'empty_image')]


def test_duplicate_keys_across_files_name_the_kept_file(tmp_path):
  rows = make_images(tmp_path)[:3]
  parts = tmp_path / 'parts'
  parts.mkdir()
  (parts / 'a.csv').write_bytes(csv_text(rows))
  (parts / 'b.csv').write_bytes(csv_text(rows[1:2]))
  out = tmp_path / 'out'
  assert convert.main(['--manifest', str(parts / '*.csv'), '--output_dir', str(out),
                       '--max_error_rate', '0.5', '--progress', 'off']) == EXIT_OK
  [duplicate] = rejected_lines(out)
  assert (duplicate['source'], duplicate['line'], duplicate['code']) == (
      str(parts / 'b.csv'), 2, 'duplicate_key')
  assert duplicate['reason'].endswith(f'kept line 3 of {parts / "a.csv"}')


@pytest.mark.parametrize('files, pattern, message', [
    ({'a.csv': 'image,label\n', 'b.csv': 'image,class\n'}, '*.csv',
     'manifest {d}/b.csv has the columns image, class, unlike {d}/a.csv (image, label): '
     'the files of --manifest {d}/*.csv need the same header line'),
    ({'a.csv': 'image,label\n'}, '*.tsv', 'manifest {d}/*.tsv matches no file'),
    ({'a.csv': 'image,label\n', 'b.tsv': 'image\tlabel\n'}, '*.?sv',
     'manifest {d}/*.?sv names files of two formats ({d}/a.csv is csv, {d}/b.tsv is tsv): '
     'the files of one --manifest share one format'),
    ({'a.csv': 'image,label\n', 'b.dat': 'x\n'}, '*',
     "cannot tell the format of manifest '{d}/b.dat'"),
])
def test_pattern_usage_errors(tmp_path, capsys, files, pattern, message):
  for name, text in files.items():
    (tmp_path / name).write_text(text)
  code = convert.main(['--manifest', str(tmp_path / pattern), '--output_dir',
                       str(tmp_path / 'out')])
  assert code == EXIT_USAGE
  err = capsys.readouterr().err.strip()
  assert message.format(d=tmp_path) in err and len(err.splitlines()) == 1, err
  assert not (tmp_path / 'out').exists()


def test_an_empty_part_has_no_header_to_check(tmp_path):
  (tmp_path / 'a.csv').write_text('image,label\n')
  (tmp_path / 'b.csv').write_text('')
  config = preflight.manifest_config(str(tmp_path / '*.csv'), manifest.ROLE_COMBINED,
                                     SplitConfig(), ())
  assert config.header == ('image', 'label')
  assert [size for _, size in config.files] == [12, 0]


@pytest.mark.parametrize('pattern', ['*.csv', 'p?.csv', '[p]*.csv', 'sub*/*.csv'])
def test_a_relative_pattern_matches_in_the_current_folder(tmp_path, monkeypatch, pattern):
  """Beam's local match lists the folder before the first wildcard: '' for
  `*.csv`, `sub*` for `sub*/*.csv`, where it found nothing (matches no file)."""
  folder = tmp_path / 'sub1' if pattern.startswith('sub') else tmp_path
  folder.mkdir(exist_ok=True)
  for name in ('p1.csv', 'p2.csv'):
    (folder / name).write_text('image,label\n')
  monkeypatch.chdir(tmp_path)
  config = preflight.manifest_config(pattern, manifest.ROLE_COMBINED, SplitConfig(), ())
  prefix = 'sub1/' if pattern.startswith('sub') else ''
  assert config.files == ((f'{prefix}p1.csv', 12), (f'{prefix}p2.csv', 12))


def test_a_literal_file_name_with_glob_characters_is_that_file(tmp_path):
  path = tmp_path / 'm[1].csv'
  path.write_text('image,label\n')
  config = preflight.manifest_config(str(path), manifest.ROLE_COMBINED,
                                     SplitConfig(), ())
  assert config.files == ((str(path), 12),)
  with pytest.raises(UsageError, match='does not exist or is not a file'):
    preflight.manifest_config(str(tmp_path / 'none.csv'), manifest.ROLE_COMBINED,
                              SplitConfig(), ())


def test_the_reader_leaves_the_row_count_for_the_progress_line(tmp_path):
  path = tmp_path / 'm.csv'
  path.write_bytes(manifest_bytes())
  progress_dir = tmp_path / 'progress'
  progress_dir.mkdir()
  with direct_pipeline() as p:
    p | ReadManifest(config_for(path), range_bytes=7, progress_dir=str(progress_dir))
  assert (progress_dir / 'total').read_text() == '8'  # data lines: rows and rejected


def test_the_launcher_reads_one_line_of_each_file(tmp_path, monkeypatch):
  """However big the files: one readline each, for the header, nothing else."""
  from transforms import filesystem
  write_parts(tmp_path / 'parts')
  calls = []
  opened = filesystem.FileAccess.open_checked

  class Counted:
    def __init__(self, stream, path):
      self._stream, self._name = stream, os.path.basename(path)

    def readline(self, *args):
      calls.append(('readline', self._name))
      return self._stream.readline(*args)

    def read(self, *args):
      calls.append(('read', self._name))
      return self._stream.read(*args)

  @contextlib.contextmanager
  def counted(self, path):
    with opened(self, path) as stream:
      yield Counted(stream, path)

  monkeypatch.setattr(filesystem.FileAccess, 'open_checked', counted)
  preflight.manifest_config(str(tmp_path / 'parts' / '*'), manifest.ROLE_COMBINED,
                            SplitConfig(), ())
  assert sorted(calls) == [('readline', 'a.csv'), ('readline', 'b.csv.gz'),
                           ('readline', 'c.csv')]


class _PausingTracker:
  """A restriction tracker that stops at claim `pause_at` until released:
  the runner's split request then lands while the range is half read."""

  def __init__(self, tracker, pause_at: int):
    self._tracker, self._pause_at = tracker, pause_at
    self._claims = 0

  def current_restriction(self):
    return self._tracker.current_restriction()

  def try_claim(self, position):
    self._claims += 1
    if self._claims == self._pause_at:
      _PAUSE['reached'].set()
      assert _PAUSE['release'].wait(60), 'the split manager never released the read'
    return self._tracker.try_claim(position)


# Shared with the in-process worker by name (a pickled closure would copy them).
_PAUSE = {}


class _PausingReadRangeFn(manifest_ranges.ReadRangeFn):
  """The first read of a range starting at 0 pauses at its 300th claim."""

  def process(self, element, tracker=manifest_ranges._RESTRICTION):
    first = element[1] == 0 and not _PAUSE['reached'].is_set()
    yield from super().process(element, _PausingTracker(tracker, 300) if first else tracker)


def test_a_range_split_by_the_runner_while_read_keeps_every_line_number(tmp_path, monkeypatch):
  """The runner splits the one range's rest off twice while it is being read
  (Beam's test split manager, on its in-process runner): the pieces are read
  as new reads, and every line keeps its true number."""
  from apache_beam.runners.portability.fn_api_runner import fn_runner
  from apache_beam.transforms import environments
  reached, release = threading.Event(), threading.Event()
  monkeypatch.setitem(_PAUSE, 'reached', reached)
  monkeypatch.setitem(_PAUSE, 'release', release)
  monkeypatch.setattr(manifest_ranges, 'ReadRangeFn', _PausingReadRangeFn)
  splits = []

  def split_manager(num_elements):
    if num_elements and not release.is_set():
      yield  # the range is being read
      assert reached.wait(60)
      splits.append((yield 0.5))
      splits.append((yield 0.5))
      release.set()

  path = tmp_path / 'm.csv'
  text = ['image,label'] + [f'{i}.png,c{i % 7}' if i % 9 else '' for i in range(1, 1200)]
  path.write_text('\r\n'.join(text))  # CRLF, no final newline
  files = manifest_ranges.manifest_files(config_for(path))
  expected = [(0, n, n, line.encode()) for n, line in enumerate(text, 1) if n > 1 and line]
  stage = 'Read/ReadRanges/ParDo(_PausingReadRangeFn)'
  with fn_runner.split_manager(stage, split_manager):
    # gRPC: the split request reaches the worker while it processes the bundle
    with beam.Pipeline(runner=fn_runner.FnApiRunner(
        default_environment=environments.EmbeddedPythonGrpcEnvironment.default())) as p:
      read = p | 'Read' >> manifest_ranges.ReadManifestLines(files, True)
      assert_that(read[manifest_ranges.LINES], equal_to(expected), label='Lines')
      assert_that(read[manifest_ranges.READS] | beam.Map(lambda r: r.lines)
                  | beam.combiners.ToList() | 'Sum' >> beam.Map(lambda c: (len(c), sum(c))),
                  equal_to([(3, 1200)]), label='Reads')
  assert len(splits) == 2 and all(split is not None for split in splits), splits


def test_an_empty_gzip_part_has_no_header_to_check(tmp_path):
  # An empty export compressed is a gzip stream of nothing: not 0 bytes long.
  with gzip.open(tmp_path / 'a.csv.gz', 'wt') as handle:
    handle.write('image,label\n')
  with gzip.open(tmp_path / 'b.csv.gz', 'wt'):
    pass
  config = preflight.manifest_config(str(tmp_path / '*.csv.gz'), manifest.ROLE_COMBINED,
                                     SplitConfig(), ())
  assert config.header == ('image', 'label')
  assert len(config.files) == 2 and config.files[1][1] > 0
