"""Good and bad rows in the same batch: every row an Example or one rejected
line with the right stage and code, and every rejected line valid JSON."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pipeline import convert
from pipeline import validate
from tests.conftest import feature
from tests.conftest import pixels
from tests.conftest import read_examples
from tests.conftest import read_info
from tests.conftest import write_image
from transforms.core.rejects import Rejection


def _strict(line: str) -> dict:
  """A JSON line as any reader but Python's takes it: no NaN, no Infinity."""
  def refuse(constant):
    raise ValueError(f'{constant} is not JSON')
  return json.loads(line, parse_constant=refuse)


def _rejected(out) -> list:
  return [_strict(line) for line in (out / 'rejected.jsonl').read_text().splitlines()]


def _convert(manifest, out, *flags) -> int:
  return convert.main(['--manifest', str(manifest), '--output_dir', str(out),
                       '--height', '4', '--width', '4', '--max_error_rate', '1', *flags])


def test_jsonl_nan_is_an_empty_cell_and_infinity_a_bad_value(tmp_path):
  for i in range(8):
    write_image(tmp_path / f'i{i}.png', (30 * i, 0, 0), size=(4, 4))
  # What json.dumps writes for a pandas gap (NaN) and for an overflow
  # (Infinity, 1e400): read as a class 'nan' and 'inf' before.
  lines = [
      '{"image": "i0.png", "label": "cat"}',
      '{"image": "i1.png", "label": NaN}',
      '{"image": "i2.png", "label": "dog"}',
      '{"image": "i3.png", "label": Infinity}',
      '{"image": "i4.png", "label": -1e400}',
      '{"image": NaN, "label": "cat"}',
      '{"image": "i6.png", "label": "dog", "key": NaN}',
      '{"image": "i7.png", "label": 3.0}',
  ]
  (tmp_path / 'm.jsonl').write_text('\n'.join(lines) + '\n')
  out = tmp_path / 'out'
  assert _convert(tmp_path / 'm.jsonl', out) == 0
  assert (out / 'label_map.txt').read_text().splitlines() == ['3', 'cat', 'dog']
  rejected = {r['line']: (r['stage'], r['code']) for r in _rejected(out)}
  assert rejected == {2: ('label', 'empty_label'), 4: ('manifest', 'bad_value'),
                      5: ('manifest', 'bad_value'), 6: ('manifest', 'empty_image')}
  by_line = {r['line']: r for r in _rejected(out)}
  assert by_line[2]['row'] == {'image': 'i1.png', 'label': 'NaN'}
  assert by_line[4]['row'] == {'image': 'i3.png', 'label': 'Infinity'}
  assert by_line[5]['row'] == {'image': 'i4.png', 'label': '-Infinity'}
  assert 'finite number, not -inf' in by_line[5]['reason']
  examples = read_examples(out)
  keys = sorted(feature(e, 'image/key').decode() for e in examples)
  assert keys == ['i0.png', 'i2.png', 'i6.png', 'i7.png']  # a NaN key: the image's path
  info = read_info(out)
  assert (info['num_manifest_rows'], info['num_examples'], info['num_rejected']) == (8, 4, 4)
  assert validate.main(['--input_dir', str(out)]) == 0


def test_a_rejected_row_holding_nan_is_a_valid_json_line():
  rejection = Rejection({'image': 'a.png', 'label': float('nan'),
                         'w': [1.0, float('inf'), {'x': float('-inf')}]},
                        'label', 'empty_label', 'label is empty', 'm.jsonl', 3)
  assert _strict(rejection.to_json())['row'] == {
      'image': 'a.png', 'label': 'NaN', 'w': [1.0, 'Infinity', {'x': '-Infinity'}]}
  plain = Rejection({'image': 'a.png', 'label': 1.5}, 'label', 'x', 'y', 'm.jsonl', 1)
  assert _strict(plain.to_json())['row'] == {'image': 'a.png', 'label': 1.5}


@pytest.mark.parametrize('pool', [[], ['--image_threads', '2']])
def test_dedupe_content_rejects_each_empty_file_as_empty(tmp_path, pool):
  """Empty files in one batch with good ones: each is decode/empty_file, not
  a duplicate_content of another empty file that was itself rejected."""
  for i in range(3):
    (tmp_path / f'empty{i}.jpg').write_bytes(b'')
  write_image(tmp_path / 'red.png', (255, 0, 0), size=(6, 6))
  write_image(tmp_path / 'blue.png', (0, 0, 255), size=(6, 6))
  (tmp_path / 'red_copy.png').write_bytes((tmp_path / 'red.png').read_bytes())
  rows = [('empty0.jpg', 'a'), ('red.png', 'a'), ('empty1.jpg', 'b'), ('blue.png', 'b'),
          ('empty2.jpg', 'a'), ('red_copy.png', 'b')]
  (tmp_path / 'm.csv').write_text('image,label\n' + ''.join(f'{i},{l}\n' for i, l in rows))
  out = tmp_path / 'out'
  assert _convert(tmp_path / 'm.csv', out, '--dedupe', 'content', *pool) == 0
  rejected = {r['row']['image']: (r['stage'], r['code'], r['reason']) for r in _rejected(out)}
  assert {k: v[:2] for k, v in rejected.items()} == {
      'empty0.jpg': ('decode', 'empty_file'), 'empty1.jpg': ('decode', 'empty_file'),
      'empty2.jpg': ('decode', 'empty_file'), 'red_copy.png': ('duplicate', 'duplicate_content')}
  assert ("as line 3, key 'red.png', labelled 'a' where this line says 'b' (conflicting "
          "labels): kept that line") in rejected['red_copy.png'][2]
  examples = {feature(e, 'image/key').decode(): e for e in read_examples(out)}
  assert sorted(examples) == ['blue.png', 'red.png']
  assert (pixels(examples['red.png'], 4, 4) == np.array([255, 0, 0], np.uint8)).all()
  assert (pixels(examples['blue.png'], 4, 4) == np.array([0, 0, 255], np.uint8)).all()
  info = read_info(out)
  assert info['rejected_by_reason'] == {'decode/empty_file': 3, 'duplicate/duplicate_content': 1}
  assert (info['num_manifest_rows'], info['num_examples']) == (6, 2)
