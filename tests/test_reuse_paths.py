"""--previous_dataset on both copy paths: a single local worker (inline, in
write order) and every other run (sidecars read in the workers, joined by key,
copied a previous shard per call) count the same reuse and write the same
bytes, whatever damage the previous dataset holds. The corpus and helpers are
test_reuse_checks.py's (eight raw records of one length)."""

import json
import zlib

import pytest

from pipeline.errors import EXIT_OK
from tests.conftest import read_info
from tests.test_reuse_checks import _lines
from tests.test_reuse_checks import _previous
from tests.test_reuse_checks import _run
from tests.test_reuse_checks import _same_shards
from tests.test_reuse_checks import _write_lines
from tests.test_reuse_checks import night1  # noqa: F401 (a fixture)
from tests.test_reuse_checks import path  # noqa: F401 (a fixture)

pytestmark = pytest.mark.xdist_group('reuse_checks')


@pytest.mark.parametrize('edited, expected', [
    # k1 keeps its own line (the first): copied; k6, without one, is new
    ('later', {'reused': 7, 'new': 1, 'changed_source': 0}),
    # k6's first line is k1's record (another file's fingerprint): encoded;
    # k1, without a line, is new
    ('earlier', {'reused': 6, 'new': 1, 'changed_source': 1}),
])
def test_a_key_on_two_sidecar_lines_is_served_by_its_first_on_both_paths(
    night1, tmp_path, path, edited, expected):  # noqa: F811 (fixtures)
  """A sidecar edited to give one key two lines (a later line given an
  earlier line's key, or the other way round): a single local worker kept
  the last line (a dict of the lines), the join by key the first (the order
  its lists arrive in), so the two paths counted the same run differently
  (`later`: 6 reused and a changed_source inline, 7 reused by shard). Both
  take the line written first now. The bytes were and are a full run's."""
  root, _, full = night1
  previous = _previous(full, tmp_path)
  lines = _lines(previous)
  one = next(line for line in lines if line['key'] == 'k1')
  other = next(line for line in lines if line['key'] == 'k6')
  assert lines.index(one) < lines.index(other)  # write order: k1's line first
  if edited == 'later':
    other['key'] = 'k1'
  else:
    one['key'] = 'k6'
  _write_lines(previous, lines)
  out = tmp_path / 'out'
  assert _run(root / 'night1.csv', out, '--previous_dataset', str(previous)) == EXIT_OK
  reuse_info = read_info(out)['reuse']
  assert {'reused': reuse_info['reused'], 'new': reuse_info['encoded']['new'],
          'changed_source': reuse_info['encoded']['changed_source']} == expected
  assert (reuse_info['reuse_fallback'], reuse_info['dropped']) == (0, 0)
  _same_shards(out, full)


@pytest.fixture(scope='module')
def gzip_night1(night1):  # noqa: F811 (a fixture)
  """test_reuse_checks' corpus converted with gzip shards: (its folder, the
  dataset)."""
  root, _, _ = night1
  out = root / 'night1_gzip'
  assert _run(root / 'night1.csv', out, '--compression', 'gzip') == EXIT_OK
  return root, out


def _other_in_shard(lines: list, line: dict) -> dict:
  return next(other for other in lines if other['shard'] == line['shard'] and other is not line)


@pytest.mark.parametrize('damage, reused', [
    ('length', 7),  # 10**12: past the shard's end
    ('offset', 7),  # past 2^63
    ('offset_of_another', 7),  # another record's place, its ordinal still right
    ('ordinal_of_another', 8),  # the line's offset still right: the record is there
])
def test_a_gzip_shard_s_record_is_found_where_its_line_says_on_both_paths(
    gzip_night1, tmp_path, path, damage, reused):  # noqa: F811 (fixtures)
  """A gzip shard's records are copied from where the line's offset and
  length place them in its uncompressed bytes, on both paths. By shard they
  were picked by ordinal, offset and length unused: a line whose length or
  offset is damaged, or that names another record's place, was copied by
  shard (8 reused) and encoded inline (7 reused, 1 reuse_fallback); one whose
  ordinal alone was edited the other way round."""
  root, night = gzip_night1
  previous = _previous(night, tmp_path)
  lines = _lines(previous)
  first, other = lines[0], _other_in_shard(lines, lines[0])
  first.update({'length': {'length': 10 ** 12}, 'offset': {'offset': 2 ** 63},
                'offset_of_another': {'offset': other['offset']},
                'ordinal_of_another': {'ordinal': other['ordinal']}}[damage])
  _write_lines(previous, lines)
  out = tmp_path / 'out'
  assert _run(root / 'night1.csv', out, '--compression', 'gzip',
              '--previous_dataset', str(previous)) == EXIT_OK
  reuse_info = read_info(out)['reuse']
  assert (reuse_info['reused'], reuse_info['reuse_fallback']) == (reused, 8 - reused)
  for name in [p.name for p in night.iterdir() if p.name != 'dataset_info.json']:
    assert (out / name).read_bytes() == (night / name).read_bytes(), name


def test_a_gzip_shard_cut_short_serves_its_records_before_the_cut_on_both_paths(
    gzip_night1, tmp_path, path):  # noqa: F811 (fixtures)
  """A gzip shard cut short after the run's checks (here: its size put in
  dataset_info.json): the records inflated whole before the cut are copied,
  those past it encoded (reuse_fallback). Inline, the shard was inflated a
  MiB at a time with read(), which drops what it inflated when the cut
  raises EOFError: every record of the shard was encoded (by shard, streamed,
  only those past the cut)."""
  root, night = gzip_night1
  previous = _previous(night, tmp_path)
  info = read_info(previous)
  shard = previous / info['splits']['train']['shards'][1]
  data = shard.read_bytes()
  kept = data[:len(data) // 2]
  shard.write_bytes(kept)
  info['splits']['train']['num_bytes'] -= len(data) - len(kept)
  (previous / 'dataset_info.json').write_text(json.dumps(info))
  inflated = len(zlib.decompressobj(31).decompress(kept))
  whole = sum(1 for line in _lines(previous)
              if line['shard'] == 1 and line['offset'] + line['length'] <= inflated)
  assert 0 < whole < 4  # some records of shard 1 before the cut, some past it
  out = tmp_path / 'out'
  assert _run(root / 'night1.csv', out, '--compression', 'gzip',
              '--previous_dataset', str(previous)) == EXIT_OK
  reuse_info = read_info(out)['reuse']
  assert (reuse_info['reused'], reuse_info['reuse_fallback']) == (4 + whole, 4 - whole)
  for name in [p.name for p in night.iterdir() if p.name != 'dataset_info.json']:
    assert (out / name).read_bytes() == (night / name).read_bytes(), name
