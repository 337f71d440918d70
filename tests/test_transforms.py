"""The PTransforms on their own, with TestPipeline + assert_that."""

from __future__ import annotations

import gc
import os
import pickle
import shutil
import time

import apache_beam as beam
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to
import pytest

from tests.conftest import COLOURS
from tests.conftest import local_pipeline
from tests.conftest import write_image
from tests.conftest import write_manifest
from transforms.batches import Unbatch
from transforms.beam_util import EXAMPLES
from transforms.beam_util import REJECTED
from transforms.beam_util import TALLIES
from transforms.core import manifest
from transforms.core.example_proto import parse_example
from transforms.core.labels import LabelMap
from transforms.core.rejects import RowError
from transforms.core.spec import ExampleSpec
from transforms.core.spec import ImageSpec
from transforms.core.tally import lines_key
from transforms.encode import EncodeRows
from transforms.label_maps import LabelMapFromRows
from transforms.label_maps import LabelMapHere
from transforms.label_maps import label_map_side_input
from transforms.read_sources import start_fingerprinted_fetch
from transforms.sources import ReadManifest
from transforms.sources import ResolveKeys
from transforms.workers import http_fetch
from transforms.workers.source_image import convert_sources
from transforms.workers.source_image import read_local_file


def direct_pipeline():
  return local_pipeline()


def csv_config(path, header=('image', 'label'), role=manifest.ROLE_COMBINED):
  return manifest.ManifestConfig(path=str(path), fmt='csv', header=header, role=role)


def test_read_manifest_rows_rejections_and_count(tmp_path):
  path = tmp_path / 'm.csv'
  path.write_text('image,label\na.png,cat\n\nb.png,dog,extra\n"c.png,cat\nd.png,dog\n')
  with direct_pipeline() as p:
    read = p | ReadManifest(csv_config(path))
    assert_that(read['rows'] | Unbatch() | beam.Map(lambda r: (r.line, r.image, r.label, r.path)),
                equal_to([(2, 'a.png', 'cat', f'{tmp_path}/a.png'),
                          (6, 'd.png', 'dog', f'{tmp_path}/d.png')]), label='Rows')
    assert_that(read[REJECTED] | beam.Map(lambda r: (r.line, r.code, r.row)),
                equal_to([(4, 'wrong_field_count', 'b.png,dog,extra'),
                          (5, 'bad_quoting', '"c.png,cat')]), label='Rejected')
    assert_that(read[TALLIES], equal_to([(lines_key(False), 4)]), label='Tallies')


@pytest.mark.parametrize('deferred', [False, True])
def test_lines_parsed_where_the_rows_meet_give_the_rows_and_rejections_of_lines_parsed_as_read(
    tmp_path, deferred):
  """ReadManifest deferred (a single local worker): the lines cross ResolveKeys'
  grouping unparsed, and its parser makes the same rows and rejected
  lines as parsing them as they are read."""
  path = tmp_path / 'm.csv'
  path.write_text('image,label\nz.png,cat\n\nb.png,dog,extra\n"c.png,cat\na.png,dog\n'
                  'z.png,ant\n,cat\nm.png,cat\n')
  with direct_pipeline() as p:
    reader = ReadManifest(csv_config(path), range_bytes=16, deferred=deferred)
    read = p | reader
    assert (reader.parser is not None) == deferred
    resolved = read['rows'] | ResolveKeys(in_order=True, parse=reader.parser)
    assert_that(resolved['rows'] | Unbatch() | beam.Map(lambda r: (r.line, r.key, r.label)),
                equal_to([(6, 'a.png', 'dog'), (9, 'm.png', 'cat'), (2, 'z.png', 'cat')]),
                label='Rows')
    rejected = (read[REJECTED], resolved[REJECTED]) | beam.Flatten()
    assert_that(rejected | beam.Map(lambda r: (r.line, r.stage, r.code, r.row)),
                equal_to([(4, 'manifest', 'wrong_field_count', 'b.png,dog,extra'),
                          (5, 'manifest', 'bad_quoting', '"c.png,cat'),
                          (7, 'duplicate', 'duplicate_key', {'image': 'z.png', 'label': 'ant'}),
                          (8, 'manifest', 'empty_image', {'image': '', 'label': 'cat'})]),
                label='Rejected')


def test_resolve_keys_keeps_first_row_and_joins_labels(tmp_path):
  images = [manifest.ManifestRow({'key': k, 'image': i}, 'img.csv', n, image=i, path=i, key=k)
            for n, (k, i) in enumerate([('a', '1.png'), ('b', '2.png'), ('a', '3.png'),
                                        ('c', '4.png')], 2)]
  labels = [manifest.ManifestRow({'key': k, 'label': l}, 'lab.csv', n, key=k, label=l)
            for n, (k, l) in enumerate([('a', 'cat'), ('b', 'dog'), ('b', 'cat'),
                                        ('z', 'cat')], 2)]
  with direct_pipeline() as p:
    resolved = (p | 'Images' >> beam.Create([images[:3], images[3:]])) | ResolveKeys(
        p | 'Labels' >> beam.Create([labels]))
    assert_that(resolved['rows'] | Unbatch() | beam.Map(lambda r: (r.key, r.image, r.label)),
                equal_to([('a', '1.png', 'cat'), ('b', '2.png', 'dog')]), label='Rows')
    assert_that(resolved[REJECTED] | beam.Map(lambda r: (r.stage, r.code, r.line,
                                                         r.counts_as_row)),
                equal_to([('duplicate', 'duplicate_key', 4, True),
                          ('label', 'no_label', 5, True),
                          ('label_manifest', 'duplicate_key', 4, False),
                          ('label_manifest', 'no_image', 5, False)]), label='Rejected')


def test_label_map_from_rows():
  rows = [manifest.ManifestRow({}, 'm', i, label=label)
          for i, label in enumerate(['dog', 'cat', '', 'dog', 'ant'])]
  with direct_pipeline() as p:
    label_map = p | beam.Create([rows[:2], rows[2:]]) | LabelMapFromRows()
    assert_that(label_map | beam.Map(lambda m: m.names),
                equal_to([('ant', 'cat', 'dog')]))


def test_the_in_order_resolve_makes_the_combines_label_map_for_the_steps_after_it():
  # 'aardvark' is only on a duplicate key's row, which is rejected: in the map
  # it would shift every id; '' is no label
  rows = [manifest.ManifestRow({}, 'm', line, image=f'{key}.png', path=f'{key}.png', key=key,
                               label=label)
          for line, (key, label) in enumerate([('a', 'dog'), ('b', 'cat'), ('a', 'aardvark'),
                                               ('c', ''), ('d', 'dog'), ('e', 'bee')], 2)]
  here = LabelMapHere()
  with local_pipeline() as p:
    resolved = (p | beam.Create([rows[:3], rows[3:]])
                | ResolveKeys(in_order=True, label_map_here=here))
    assert_that(resolved['rows'] | 'Names' >> LabelMapFromRows()
                | beam.Map(lambda label_map: label_map.names),
                equal_to([('bee', 'cat', 'dog')]), label='Combined')
    ids = resolved['rows'] | Unbatch() | beam.Filter(lambda row: row.label) | beam.Map(
        lambda row, label_map: (row.key, label_map.resolve(row.label)),
        label_map_side_input(here))
    assert_that(ids, equal_to([('a', (2, 'dog')), ('b', (1, 'cat')), ('d', (2, 'dog')),
                               ('e', (0, 'bee'))]), label='Resolved')


def test_a_label_map_made_here_is_read_only_in_its_process_and_not_kept():
  here = LabelMapHere()
  copy = pickle.loads(pickle.dumps(here))
  with pytest.raises(RuntimeError, match='not in this process'):
    copy.resolve('cat')  # nothing made yet: never a guess
  made = here.make([manifest.ManifestRow({}, 'm', 2, label='cat')])
  assert made.names == ('cat',)
  del made
  gc.collect()  # the steps' copies may be dropped (Beam drops idle ones): the map stays
  assert copy.resolve('cat') == (0, 'cat')
  reader = pickle.loads(pickle.dumps(here))
  del here, copy
  gc.collect()
  with pytest.raises(RuntimeError):
    reader.resolve('cat')  # the pipeline's own is gone: so is the run's map


@pytest.mark.parametrize('in_order, inline, previous, label_map, dedupe, made_here', [
    (True, False, None, None, 'none', True),
    (True, True, 'local', None, 'none', True),  # copies in the image step: one stage
    (True, False, 'remote', None, 'none', False),  # joined through a shuffle: stages apart
    (False, False, None, None, 'none', False),  # a distributed runner
    (True, False, None, 'file', 'none', False),  # --label_map: no map from the rows
    (True, False, None, None, 'content', False),  # --dedupe content drops rows before it
])
def test_the_label_map_is_made_in_the_resolve_step_only_where_one_stage_follows(
    in_order, inline, previous, label_map, dedupe, made_here):
  from types import SimpleNamespace

  from pipeline.configuration import convert_plan
  config = SimpleNamespace(
      label_map=label_map, detection=None, dedupe=dedupe,
      previous=SimpleNamespace(dataset='prev') if previous else None)
  assert convert_plan.label_map_made_here(config, in_order, inline) is made_here


def test_encode_rows_examples_and_rejections(tmp_path):
  write_image(tmp_path / 'red.png', COLOURS['red'])
  (tmp_path / 'bad.png').write_bytes(b'nope')
  rows = [manifest.ManifestRow({}, 'm', 2, image='red.png', path=str(tmp_path / 'red.png'),
                               key='red.png', label='red', split='train'),
          manifest.ManifestRow({}, 'm', 3, image='bad.png', path=str(tmp_path / 'bad.png'),
                               key='bad.png', label='red', split='train'),
          manifest.ManifestRow({}, 'm', 4, image='x.png', path=str(tmp_path / 'x.png'),
                               key='x.png', label='purple', split='train')]
  spec = ImageSpec(height=2, width=3)

  def summary(example):
    features = parse_example(example.data)
    return (example.split, features['image/class/label'][1], features['image/encoded'][1][0])

  with direct_pipeline() as p:
    label_map = p | 'LabelMap' >> beam.Create([LabelMap(('blue', 'red'), fixed=True)])
    encoded = p | 'Rows' >> beam.Create([rows]) | EncodeRows(spec, ExampleSpec(), label_map)
    assert_that(encoded[EXAMPLES] | Unbatch() | beam.Map(summary),
                equal_to([('train', [1], bytes(COLOURS['red']) * 6)]), label='Examples')
    assert_that(encoded[REJECTED] | beam.Map(lambda r: (r.line, r.stage, r.code)),
                equal_to([(3, 'decode', 'not_an_image'), (4, 'label', 'unknown_label')]),
                label='Rejected')


def _keep_data(batch, folder: str) -> list:
  """Each example's bytes to FOLDER/<its key>; -> the batch's keys, in order."""
  for example in batch:
    with open(f'{folder}/{example.key}', 'wb') as handle:
      handle.write(example.data)
  return [int(example.key.split('.')[0]) for example in batch]


def test_a_batch_of_good_and_bad_rows_keeps_its_good_rows_together(tmp_path):
  """One batch in: its good rows leave in batches, in their order, each bad
  row alone as its own dead letter; threads and image worker processes
  (which build the Example there) give the same bytes."""
  rows = []
  for i in range(12):
    path = tmp_path / f'{i}.png'
    if i % 4 == 1:
      path.write_bytes(b'not an image')
    else:
      write_image(path, (i * 20, 255 - i, 7), size=(5, 3))
    rows.append(manifest.ManifestRow({'image': path.name}, 'm', i + 2, image=path.name,
                                     path=str(path), key=path.name,
                                     label='purple' if i == 6 else 'red'))
  good = [i for i in range(12) if i % 4 != 1 and i != 6]
  for name, pool in (('threads', {'image_threads': 2}), ('processes', {'image_processes': 2})):
    (tmp_path / name).mkdir()
    with direct_pipeline() as p:
      label_map = p | 'LabelMap' >> beam.Create([LabelMap(('blue', 'red'), fixed=True)])
      encoded = p | 'Rows' >> beam.Create([rows]) | EncodeRows(
          ImageSpec(height=1, width=1), ExampleSpec(), label_map, **pool)
      keys = encoded[EXAMPLES] | 'Keep' >> beam.Map(_keep_data, str(tmp_path / name))
      assert_that(keys | 'Ordered' >> beam.Filter(lambda batch: batch != sorted(batch)),
                  equal_to([]), label='EachBatchInOrder')
      assert_that(encoded[EXAMPLES] | Unbatch() | beam.Map(lambda e: (
          parse_example(e.data)['image/filename'][1][0].decode(),
          parse_example(e.data)['image/encoded'][1][0][0],
          parse_example(e.data)['image/class/label'][1])),
                  equal_to([(f'{i}.png', i * 20, [1]) for i in good]), label='Examples')
      assert_that(encoded[REJECTED] | beam.Map(lambda r: (r.line, r.stage, r.code)),
                  equal_to([(i + 2, 'decode', 'not_an_image') for i in (1, 5, 9)] +
                           [(8, 'label', 'unknown_label')]), label='Rejected')
  threads = {path.name: path.read_bytes() for path in (tmp_path / 'threads').iterdir()}
  processes = {path.name: path.read_bytes() for path in (tmp_path / 'processes').iterdir()}
  assert sorted(threads) == sorted(f'{i}.png' for i in good)
  assert threads == processes


def test_large_records_leave_the_image_step_in_batches_of_a_few_mb(tmp_path):
  """40 raw 300x300 records (270,000 bytes each) from one batch of rows:
  lists of at most 16 (BATCH_BYTES, 4 MiB, is reached by the 16th), every
  record once and in order."""
  from transforms.batches import BATCH_BYTES
  rows = []
  for i in range(40):
    write_image(tmp_path / f'{i:02d}.png', (i, 0, 0), size=(30, 30))
    rows.append(manifest.ManifestRow({'image': f'{i:02d}.png'}, 'm', i + 2,
                                     image=f'{i:02d}.png', path=str(tmp_path / f'{i:02d}.png'),
                                     key=f'{i:02d}.png', label='red'))
  per_record = 300 * 300 * 3
  assert (BATCH_BYTES // per_record + 1) == 16
  with direct_pipeline() as p:
    label_map = p | 'LabelMap' >> beam.Create([LabelMap(('red',), fixed=True)])
    encoded = p | 'Rows' >> beam.Create([rows]) | EncodeRows(
        ImageSpec(height=300, width=300, encoding='raw'), ExampleSpec(), label_map)
    assert_that(encoded[EXAMPLES] | beam.Map(len), equal_to([16, 16, 8]), label='Sizes')
    assert_that(encoded[EXAMPLES] | 'Lines' >> beam.Map(lambda batch: [e.line for e in batch]),
                equal_to([list(range(2, 18)), list(range(18, 34)), list(range(34, 42))]),
                label='InOrder')
    assert_that(encoded[EXAMPLES] | Unbatch() | beam.Map(
        lambda e: parse_example(e.data)['image/encoded'][1][0][0]),
                equal_to(list(range(40))), label='Pixels')


def _explode(path, spec):
  raise ZeroDivisionError('inside some plugin')


def _read_or_explode(path, spec):
  with open(path, 'rb') as handle:
    if handle.read(4) == b'BOOM':
      raise ZeroDivisionError('inside some plugin')
  return read_local_file(path, spec)


def _convert_exploding(sources, spec, read):
  """convert_sources, with every image failing in a way nobody foresaw."""
  return convert_sources(sources, spec, _explode)


def _convert_or_explode(sources, spec, read):
  """convert_sources, except that a file starting with BOOM fails unforeseen."""
  return convert_sources(sources, spec, _read_or_explode)


def test_an_unforeseen_decoder_crash_becomes_a_dead_letter(tmp_path):
  write_image(tmp_path / 'red.png', COLOURS['red'])
  rows = [manifest.ManifestRow({'image': 'red.png'}, 'm', 2, image='red.png',
                               path=str(tmp_path / 'red.png'), key='red.png', label='red')]
  with direct_pipeline() as p:
    label_map = p | 'LabelMap' >> beam.Create([LabelMap(('red',))])
    encoded = p | 'Rows' >> beam.Create([rows]) | EncodeRows(
        ImageSpec(), ExampleSpec(), label_map, convert_on_thread=_convert_exploding)
    assert_that(encoded[EXAMPLES], equal_to([]), label='NoExamples')
    assert_that(encoded[REJECTED] | beam.Map(
        lambda r: (r.row, r.stage, r.code, 'ZeroDivisionError' in r.reason)),
                equal_to([({'image': 'red.png'}, 'decode', 'unexpected_error', True)]),
                label='DeadLetter')


def test_thread_pool_keeps_every_row_and_blames_the_right_one(tmp_path):
  """With image_threads > 1 results leave after later rows were taken in:
  each outcome must still belong to its own row."""
  rows = []
  for i in range(40):
    path = tmp_path / f'{i}.png'
    if i % 10 == 3:
      path.write_bytes(b'BOOM')
    elif i % 10 == 7:
      path.write_bytes(b'not an image')
    else:
      write_image(path, (i, 0, 0), size=(3, 2))
    rows.append(manifest.ManifestRow({'image': path.name}, 'm', i, image=path.name,
                                     path=str(path), key=path.name, label='red'))
  with direct_pipeline() as p:
    label_map = p | 'LabelMap' >> beam.Create([LabelMap(('red',))])
    encoded = p | 'Rows' >> beam.Create([rows]) | EncodeRows(
        ImageSpec(height=1, width=1), ExampleSpec(), label_map, image_threads=3,
        convert_on_thread=_convert_or_explode)
    assert_that(encoded[EXAMPLES] | Unbatch() | beam.Map(
        lambda e: (parse_example(e.data)['image/filename'][1][0].decode(),
                   parse_example(e.data)['image/encoded'][1][0][0])),
                equal_to([(f'{i}.png', i) for i in range(40) if i % 10 not in (3, 7)]),
                label='Examples')
    assert_that(encoded[REJECTED] | beam.Map(lambda r: (r.line, r.code)),
                equal_to([(i, 'unexpected_error') for i in range(3, 40, 10)] +
                         [(i, 'not_an_image') for i in range(7, 40, 10)]), label='Rejected')


def test_steps_declared_any_are_not_inferred_and_get_the_type_inference_gave(
    sample, monkeypatch):
  from apache_beam.typehints import Any

  from pipeline import convert
  from pipeline.configuration import config as opts
  from transforms.beam_util import AnyOutput
  inferred = []
  real = beam.DoFn.infer_output_type
  monkeypatch.setattr(beam.DoFn, 'infer_output_type', lambda fn, input_type: (
      inferred.append(type(fn)), real(fn, input_type))[1])
  config, _ = opts.parse_convert(['--manifest', str(sample.manifest), '--output_dir',
                                  str(sample.out), '--height', '4', '--width', '4'])
  p = direct_pipeline()
  convert.build(p, config)
  shutil.rmtree(p.local_tempdir)  # made with the pipeline; removed by a run, and this one never runs
  declared = {}
  for applied in p.transforms_stack[0].parts:
    _walk(applied, declared)
  assert declared and set(declared.values()) == {Any}
  for step in ('WriteDatasetInfo', 'TallyExamples', 'WriteSizeCapped', 'WriteJsonl'):
    assert any(step in label for label in declared), (step, sorted(declared))
  assert not [cls for cls in inferred if issubclass(cls, AnyOutput)]


def _walk(applied, declared: dict) -> None:
  """{label: main output's element type} of each AnyOutput step below `applied`."""
  from transforms.beam_util import AnyOutput
  fn = getattr(applied.transform, 'fn', None)
  if isinstance(fn, AnyOutput):
    output = applied.outputs.get(None) or next(iter(applied.outputs.values()))
    declared[applied.full_label] = output.element_type
  for part in applied.parts:
    _walk(part, declared)


def test_convert_reports_counters_per_stage_and_reason(sample):
  from apache_beam.metrics.metric import MetricsFilter

  from pipeline import convert
  from pipeline.configuration import config as opts
  write_manifest(sample.manifest, list(sample.labels.items()) + [('images/gone.png', 'red')])
  config, _ = opts.parse_convert(['--manifest', str(sample.manifest), '--output_dir',
                                  str(sample.out), '--height', '4', '--width', '4'])
  p = direct_pipeline()
  convert.build(p, config)
  result = p.run()
  result.wait_until_finish()
  counters = {c.key.metric.name: c.committed for c in result.metrics().query(
      MetricsFilter().with_namespace('img2tfrecord'))['counters']}
  assert counters['manifest_rows'] == 10
  assert counters['images_loaded'] == 9
  assert counters['source_bytes'] == sum(
      os.path.getsize(sample.manifest.parent / image) for image in sample.labels)
  assert counters['rejected_read_missing_file'] == 1


@pytest.mark.slow
@pytest.mark.parametrize('slow', [5, 19])
def test_a_stuck_image_is_rejected_as_timeout_and_its_batch_redone(tmp_path, slow):
  """A worker process that never answers is killed after --image_timeout_s and
  replaced; its row is rejected (decode/timeout), the rest of its batch redone."""
  from tests.process_helpers import sleep_on_marked
  rows = []
  for i in range(20):
    name = f'{i}-SLOW.png' if i == slow else f'{i}.png'
    write_image(tmp_path / name, (i, 0, 0), size=(3, 2))
    rows.append(manifest.ManifestRow({'image': name}, 'm', i, image=name,
                                     path=str(tmp_path / name), key=name, label='red'))
  started = time.monotonic()
  with direct_pipeline() as p:
    label_map = p | 'LabelMap' >> beam.Create([LabelMap(('red',))])
    encoded = p | 'Rows' >> beam.Create([rows]) | EncodeRows(
        ImageSpec(height=1, width=1), ExampleSpec(), label_map,
        image_processes=2, convert_in_process=sleep_on_marked, image_timeout_s=2)
    assert_that(encoded[EXAMPLES] | Unbatch() | beam.Map(
        lambda e: parse_example(e.data)['image/filename'][1][0].decode()),
                equal_to([f'{i}.png' for i in range(20) if i != slow]), label='Examples')
    assert_that(encoded[REJECTED] | beam.Map(
        lambda r: (r.line, r.stage, r.code, '--image_timeout_s 2' in r.reason)),
                equal_to([(slow, 'decode', 'timeout', True)]), label='Rejected')
  # the batch, then the row alone: twice the limit, not the 600 s sleep
  assert time.monotonic() - started < 120


def test_a_crashing_image_worker_rejects_only_its_row(tmp_path):
  """A real worker process dies on one image: that row is rejected, its batch
  neighbours are converted, order and counts are kept."""
  from tests.process_helpers import crash_on_marked
  rows = []
  for i in range(20):
    name = f'{i}-CRASH.png' if i == 5 else f'{i}.png'
    write_image(tmp_path / name, (i, 0, 0), size=(3, 2))
    rows.append(manifest.ManifestRow({'image': name}, 'm', i, image=name,
                                     path=str(tmp_path / name), key=name, label='red'))
  with direct_pipeline() as p:
    label_map = p | 'LabelMap' >> beam.Create([LabelMap(('red',))])
    encoded = p | 'Rows' >> beam.Create([rows]) | EncodeRows(
        ImageSpec(height=1, width=1, encoding='png'), ExampleSpec(), label_map,
        image_processes=2, convert_in_process=crash_on_marked)
    assert_that(encoded[EXAMPLES] | Unbatch() | beam.Map(
        lambda e: parse_example(e.data)['image/filename'][1][0].decode()),
                equal_to([f'{i}.png' for i in range(20) if i != 5]), label='Examples')
    assert_that(encoded[REJECTED] | beam.Map(
        lambda r: (r.line, r.code, 'exit code 9' in r.reason)),
                equal_to([(5, 'unexpected_error', True)]), label='Rejected')


def test_in_global_window_places_main_and_tagged_outputs_alike():
  """finish_bundle's outputs, main or dead letter, go to the global window
  under their own tag (encode's and check_shards' DoFns emit both)."""
  from apache_beam.transforms.window import GlobalWindow

  from transforms.beam_util import in_global_window
  main, tagged = in_global_window('row'), in_global_window(beam.pvalue.TaggedOutput(
      REJECTED, 'rejection'))
  assert (main.value, main.windows) == ('row', [GlobalWindow()])
  assert isinstance(tagged, beam.pvalue.TaggedOutput) and tagged.tag == REJECTED
  assert (tagged.value.value, tagged.value.windows) == ('rejection', [GlobalWindow()])
  assert tagged.value.timestamp == main.timestamp == GlobalWindow().max_timestamp()


def test_tallies_are_summed_per_bundle_into_the_same_totals():
  from transforms.beam_util import TallyPerBundle
  with direct_pipeline() as p:
    sums = (p
            | beam.Create(['a', 'b', 'a', 'c', 'a'], reshuffle=False)
            | beam.ParDo(TallyPerBundle(lambda label: [(label, 1), ('all', 2)]))
            | beam.CombinePerKey(sum))
    assert_that(sums, equal_to([('a', 3), ('b', 1), ('c', 1), ('all', 10)]))


class _FakeClient:
  """fetch_with_metadata as HttpClient's: the bytes and the answer's metadata."""

  def __init__(self, metadata=None, error=None):
    self._metadata, self._error = metadata, error

  def fetch_with_metadata(self, url, spec):
    del url, spec
    if self._error:
      raise self._error
    return b'image bytes', self._metadata


@pytest.mark.parametrize('metadata, fingerprint', [
    ({'etag': '"v1"', 'mtime': None}, 'https:etag="v1"'),  # as a HEAD's remote_fingerprint
    ({'etag': None, 'mtime': 'Tue, 01 Dec 2026 10:00:00 GMT'},
     'https:mtime=Tue, 01 Dec 2026 10:00:00 GMT'),
    (None, ''),  # neither: the record's content fingerprint, as after a HEAD with neither
])
def test_a_fetched_url_gets_the_fingerprint_a_head_would_give(metadata, fingerprint):
  seen = []
  fetch = start_fingerprinted_fetch('https://h.example/a.png', ImageSpec(),
                                    _FakeClient(metadata), seen.append)
  assert (fetch.result(), seen) == (b'image bytes', [fingerprint])


def test_a_failed_fetch_gives_its_error_and_no_fingerprint():
  seen = []
  error = RowError('read', 'missing_file', 'https://h.example/a.png: HTTP 404')
  fetch = start_fingerprinted_fetch('https://h.example/a.png', ImageSpec(),
                                    _FakeClient(error=error), seen.append)
  assert (fetch.result(), seen) == (error, [])


@pytest.mark.parametrize('status, headers, metadata', [
    (200, {'ETag': '"x"'}, {'etag': '"x"', 'mtime': None}),
    (200, {'Last-Modified': 'then'}, {'etag': None, 'mtime': 'then'}),
    (200, {}, None),
    (206, {'ETag': '"x"'}, None),  # a part, or any answer but a whole 200, is no version
])
def test_change_metadata_of_an_answer(status, headers, metadata):
  assert http_fetch.change_metadata(status, headers) == metadata
