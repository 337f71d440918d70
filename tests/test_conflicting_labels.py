"""One image under conflicting labels (label noise): the same bytes on a row
labelled `cat` and on another labelled `dog`. convert counts such copies in
dataset_info.json's content_duplicates (num_conflicting_labels, the first
conflicting_labels with both labels) and names them in the end-of-run
warning; a --multi_label row's labels compare as a set."""

from __future__ import annotations

import hashlib
import pathlib
import random

import apache_beam as beam
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to
import pytest

from pipeline import convert
from pipeline import validate
from pipeline.errors import EXIT_OK
from pipeline.runs import summary
from tests.conftest import local_pipeline
from tests.conftest import read_info
from tests.conftest import write_image
from transforms.batches import chunks
from transforms.core import duplicates
from transforms.core.example import BuiltExample
from transforms.core.manifest import ManifestRow
from transforms.core.shuffle import Ordering
from transforms.dedupe import ContentDuplicates

Copy = duplicates.Copy
SHA = 'ab' * 32


def _labelled(line: int, key: str, split: str, label) -> dict:
  return {'line': line, 'key': key, 'split': split, 'label': label}


def test_copies_under_another_label_than_the_first_are_counted_and_listed():
  report = duplicates.content_report(SHA, [
      Copy(9, 'c9', 'test', label='dog'), Copy(2, 'c2', 'train', label='cat'),
      Copy(5, 'c5', 'train', label='cat'), Copy(7, 'c7', 'train', label='')])
  assert report['num_conflicting_labels'] == 2  # 7 and 9; 5 agrees with the first (2)
  assert report['conflicting_labels'] == [
      {'sha256': SHA, 'first': _labelled(2, 'c2', 'train', 'cat'),
       'duplicate': _labelled(7, 'c7', 'train', '')},
      {'sha256': SHA, 'first': _labelled(2, 'c2', 'train', 'cat'),
       'duplicate': _labelled(9, 'c9', 'test', 'dog')}]
  # the counts it had are as before
  assert (report['num_within_split'], report['num_across_splits'], report['num_contents']) == (
      2, 1, 1)
  agreeing = duplicates.content_report(SHA, [Copy(1, 'a', 'train', label='cat'),
                                             Copy(2, 'b', 'train', label='cat')])
  assert (agreeing['num_conflicting_labels'], agreeing['conflicting_labels']) == (0, [])
  assert duplicates.empty_report()['num_conflicting_labels'] == 0


def test_multi_label_copies_compare_their_labels_as_sets():
  """('cat', 'pet') and ['pet', 'cat'] (a sidecar's list) agree; ('cat',) does not."""
  report = duplicates.content_report(SHA, [
      Copy(2, 'a', 'train', label=('cat', 'pet')), Copy(3, 'b', 'train', label=['pet', 'cat']),
      Copy(4, 'c', 'train', label=('pet', 'cat')), Copy(5, 'd', 'train', label=('cat',))])
  assert report['num_conflicting_labels'] == 1
  assert report['conflicting_labels'] == [
      {'sha256': SHA, 'first': _labelled(2, 'a', 'train', ['cat', 'pet']),
       'duplicate': _labelled(5, 'd', 'train', ['cat'])}]
  # --dedupe content's rejection says the same: no conflict for another order
  rows = [ManifestRow({}, 'm', line, key=f'k{line}', label=label, content_sha256=SHA)
          for line, label in ((2, ('cat', 'pet')), (3, ('pet', 'cat')), (4, ('cat',)))]
  _, rejected = duplicates.keep_first_copy(rows)
  reasons = {r.line: r.reason for r in rejected}
  assert reasons[3] == f"same bytes (SHA-256 {SHA[:12]}...) as line 2, key 'k2': kept that line"
  assert reasons[4].endswith("labelled ('cat', 'pet') where this line says ('cat',) "
                             "(conflicting labels): kept that line")


def test_a_placeholder_under_many_labels_keeps_few_conflicts_at_a_time(monkeypatch):
  """100,000 copies of one image, every other one labelled otherwise, read
  backwards: the count is whole, MAX_CONFLICTS listed (the first by line),
  never more than 2 x MAX_CONFLICTS + 1 held."""
  held = []
  first_conflicts = duplicates._first_conflicts
  monkeypatch.setattr(duplicates, '_first_conflicts',
                      lambda copies: held.append(len(copies)) or first_conflicts(copies))
  copies = (Copy(line, f'img/{line}.png', 'train', label='cat' if line % 2 else 'dog')
            for line in range(100_001, 1, -1))  # line 2 (dog) is the first: 3, 5, ... differ
  report = duplicates.content_report(SHA, copies)
  assert report['num_conflicting_labels'] == 50_000
  assert [c['duplicate']['line'] for c in report['conflicting_labels']] == list(range(3, 23, 2))
  assert {c['first']['line'] for c in report['conflicting_labels']} == {2}
  assert len(report['conflicting_labels']) == duplicates.MAX_CONFLICTS
  assert max(held) == 2 * duplicates.MAX_CONFLICTS + 1


def test_merged_reports_list_the_same_conflicts_in_any_order():
  rng = random.Random(3)
  reports = []
  for content in range(30):
    copies = [Copy(line, f'k{content}-{line}', 'train', label=rng.choice('ab'))
              for line in rng.sample(range(2, 500), rng.randint(2, 6))]
    reports.append(duplicates.content_report(f'{content:064x}', copies))
  merged = duplicates.merge_reports(reports)
  assert merged['num_conflicting_labels'] == sum(r['num_conflicting_labels'] for r in reports)
  every = sorted((c for r in reports for c in r['conflicting_labels']),
                 key=lambda c: (c['duplicate']['line'], c['duplicate']['key']))
  assert merged['conflicting_labels'] == every[:duplicates.MAX_CONFLICTS]
  assert merged['num_conflicting_labels'] > duplicates.MAX_CONFLICTS
  for _ in range(5):
    rng.shuffle(reports)
    assert duplicates.merge_reports(reports) == merged


def _examples() -> list:
  """Examples whose sources repeat every 3rd row; rows 3 and 7 (contents 0
  and 1) under another label than their content's first copy."""
  ordering = Ordering(seed=3)
  label = {3: 'dog', 7: 'dog'}
  return [BuiltExample('train', ordering.key(f'k{i}', i), 0, f'k{i}', i + 2, f'{i % 3}' * 64,
                       b'record', f'f{i}', label.get(i, 'cat'), 'd', '', f'{i}.png', place=i)
          for i in range(9)]


def test_content_duplicates_on_two_workers_count_conflicting_labels():
  """ContentDuplicates through the shuffle (two workers, two buckets)."""
  with local_pipeline('--direct_num_workers=2', '--direct_running_mode=multi_threading') as p:
    batches = p | 'Examples' >> beam.Create(list(chunks(_examples(), 2))) | beam.Reshuffle()
    report = batches | ContentDuplicates(buckets=2)
    assert_that(report | beam.Map(lambda r: (
        r['num_conflicting_labels'],
        [(c['first']['line'], c['first']['label'], c['duplicate']['line'],
          c['duplicate']['label']) for c in r['conflicting_labels']])),
        equal_to([(2, [(2, 'cat', 5, 'dog'), (3, 'cat', 9, 'dog')])]))


def _report(conflicts: int) -> dict:
  listed = [{'sha256': SHA, 'first': _labelled(2, 'cat.png', 'train', 'cat'),
             'duplicate': _labelled(line, f'copy{line}.png', 'train', ['dog', 'pet'])}
            for line in range(3, 3 + conflicts)]
  return {**duplicates.empty_report(), 'num_within_split': 5, 'num_contents': 1,
          'num_conflicting_labels': conflicts, 'conflicting_labels': listed}


def test_the_warning_line_names_copies_under_conflicting_labels():
  [line] = summary.warning_lines({'content_duplicates': _report(1)})
  assert line == (
      "Warning: 5 image(s) repeat the bytes of another row under another key: 5 within a "
      "split, 0 across splits; 1 of them labelled otherwise than their first copy "
      "(conflicting labels: line 3, key 'copy3.png' says {'dog', 'pet'} where line 2, key "
      "'cat.png' says 'cat') (see content_duplicates in dataset_info.json; --dedupe content, "
      "--split_by content)")
  [line] = summary.warning_lines({'content_duplicates': _report(4)})
  assert line.count(' where line 2') == summary.SUMMARY_CONFLICTS
  assert "line 5, key 'copy5.png' says {'dog', 'pet'} where line 2, key 'cat.png' says " \
         "'cat', ...) (see" in line
  # a dataset_info.json written before the count: the line as it was
  older = {k: v for k, v in _report(0).items() if 'conflicting' not in k}
  assert summary.warning_lines({'content_duplicates': older})[0].endswith(
      '0 across splits (see content_duplicates in dataset_info.json; --dedupe content, '
      '--split_by content)')


@pytest.fixture(scope='module')
def noisy(tmp_path_factory) -> pathlib.Path:
  """cat.png copied to cat2.png (labelled dog) and cat3.png (cat);
  dog.png copied to dog2.png (dog). The --multi_label manifest: cat2.png's
  labels in another order (no conflict), cat3.png's fewer (a conflict)."""
  root = tmp_path_factory.mktemp('noisy')
  write_image(root / 'cat.png', (255, 0, 0), size=(3, 2))
  write_image(root / 'dog.png', (0, 255, 0), size=(3, 2))
  for copy, of in (('cat2.png', 'cat.png'), ('cat3.png', 'cat.png'), ('dog2.png', 'dog.png')):
    (root / copy).write_bytes((root / of).read_bytes())
  (root / 'm.csv').write_text('image,label\ncat.png,cat\ndog.png,dog\ncat2.png,dog\n'
                              'cat3.png,cat\ndog2.png,dog\n')
  (root / 'multi.csv').write_text('image,label\ncat.png,cat;pet\ndog.png,dog\ncat2.png,pet;cat\n'
                                  'cat3.png,cat\ndog2.png,dog;dog\n')
  return root


def _convert(noisy: pathlib.Path, manifest: str, out: pathlib.Path, *flags) -> int:
  return convert.main(['--manifest', str(noisy / manifest), '--output_dir', str(out),
                       '--height', '2', '--width', '2', *flags])


@pytest.mark.parametrize('manifest,flags,first,duplicate', [
    ('m.csv', (), (2, 'cat.png', 'cat'), (4, 'cat2.png', 'dog')),
    ('multi.csv', ('--multi_label',), (2, 'cat.png', ['cat', 'pet']), (5, 'cat3.png', ['cat']))])
def test_convert_names_copies_under_conflicting_labels(noisy, tmp_path, capsys, manifest,
                                                       flags, first, duplicate):
  out = tmp_path / 'out'
  assert _convert(noisy, manifest, out, *flags) == EXIT_OK
  report = read_info(out)['content_duplicates']
  sha = hashlib.sha256((noisy / 'cat.png').read_bytes()).hexdigest()
  assert report['num_within_split'] == 3 and report['num_conflicting_labels'] == 1
  assert report['conflicting_labels'] == [
      {'sha256': sha, 'first': _labelled(*first[:2], 'train', first[2]),
       'duplicate': _labelled(*duplicate[:2], 'train', duplicate[2])}]
  printed = capsys.readouterr().out
  said = lambda label: (repr(label) if isinstance(label, str)  # noqa: E731
                        else '{' + ', '.join(map(repr, label)) + '}')
  assert (f'3 within a split, 0 across splits; 1 of them labelled otherwise than their '
          f'first copy (conflicting labels: line {duplicate[0]}, key {duplicate[1]!r} says '
          f'{said(duplicate[2])} where line {first[0]}, key {first[1]!r} says '
          f'{said(first[2])}) (see content_duplicates') in printed
  assert validate.main(['--input_dir', str(out)]) == EXIT_OK  # the new fields are taken
  # a rerun writes the same dataset_info.json but for its run id, the same shards
  again = tmp_path / 'again'
  assert _convert(noisy, manifest, again, *flags) == EXIT_OK
  info, info_again = read_info(out), read_info(again)
  assert [name for name in info if info[name] != info_again[name]
          and name not in ('config', 'options')] == ['run_id']
  assert info['content_duplicates'] == info_again['content_duplicates']
  [shard] = info['splits']['train']['shards']
  assert (out / shard).read_bytes() == (again / shard).read_bytes()
  # records copied from it (--previous_dataset): their labels read back from
  # its sidecar (a multi-label row's a list) give the same report
  reused = tmp_path / 'reused'
  assert _convert(noisy, manifest, reused, *flags, '--previous_dataset', str(out)) == EXIT_OK
  assert read_info(reused)['reuse']['reused'] == 5
  assert read_info(reused)['content_duplicates'] == report
