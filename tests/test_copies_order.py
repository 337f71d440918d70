"""Which copy of identical bytes comes first when a manifest pattern reads
several files: the same one in the content_duplicates report as the one
--dedupe content keeps (files in path order, then lines)."""

from __future__ import annotations

import hashlib
import json
import pathlib

from pipeline import convert
from pipeline.errors import EXIT_OK
from tests.conftest import read_info
from tests.conftest import write_image


def _two_files(root: pathlib.Path) -> pathlib.Path:
  """parts/a.csv lists a copy of orig.png on its line 5 (train); parts/b.csv,
  read after it, lists orig.png on its line 2 (test): by file and line the
  copy in a.csv is the first."""
  write_image(root / 'orig.png', (200, 10, 10), size=(3, 2))
  (root / 'copy.png').write_bytes((root / 'orig.png').read_bytes())
  for i, colour in enumerate([(0, 90, 0), (0, 0, 90), (90, 90, 0)]):
    write_image(root / f'other{i}.png', colour, size=(3, 2))
  parts = root / 'parts'
  parts.mkdir()
  (parts / 'a.csv').write_text('image,label,key,split\n'
                               '../other0.png,cat,other0,train\n'
                               '../other1.png,dog,other1,train\n'
                               '../other2.png,cat,other2,test\n'
                               '../copy.png,cat,copy,train\n')
  (parts / 'b.csv').write_text('image,label,key,split\n'
                               '../orig.png,cat,orig,test\n')
  return parts


def _convert(parts: pathlib.Path, out: pathlib.Path, *flags) -> dict:
  assert convert.main(['--manifest', str(parts / '*.csv'), '--output_dir', str(out),
                       '--height', '2', '--width', '2', '--max_error_rate', '1',
                       *flags]) == EXIT_OK
  return read_info(out)


def test_copies_report_names_the_first_copy_by_file_then_line(tmp_path):
  parts = _two_files(tmp_path)
  sha = hashlib.sha256((tmp_path / 'orig.png').read_bytes()).hexdigest()
  report = _convert(parts, tmp_path / 'all')['content_duplicates']
  assert report['num_across_splits'] == 1 and report['num_within_split'] == 0
  # a.csv is read first: its line 5 is the first copy, b.csv's line 2 the later
  assert report['pairs'] == [{
      'sha256': sha, 'across': True,
      'first': {'line': 5, 'key': 'copy', 'split': 'train'},
      'duplicate': {'line': 2, 'key': 'orig', 'split': 'test'}}]
  # and --dedupe content keeps that first copy, rejecting the one the report
  # calls the duplicate
  info = _convert(parts, tmp_path / 'deduped', '--dedupe', 'content')
  assert {split: entry['num_examples'] for split, entry in info['splits'].items()} == {
      'train': 3, 'test': 1}
  rejected = [json.loads(line) for line in
              (tmp_path / 'deduped' / 'rejected.jsonl').read_text().splitlines()]
  assert [(r['row']['key'], r['line'], r['code']) for r in rejected] == [
      ('orig', 2, 'duplicate_content')]
