"""Each source (a Parquet manifest read by row group, WebDataset tars, a URL
list served on 127.0.0.1, an --image_dir of split and class folders, some
empty, of no image or of broken images only) converts on a real Flink
(embedded in its job server, launched with nothing but --runner) to the
DirectRunner's bytes.

make test-integration runs these (a JVM, a job server and an engine per run);
make test leaves them out.
"""

from __future__ import annotations

import pytest

from pipeline import convert
from pipeline.errors import EXIT_OK
from tests.conftest import read_info
from tests.test_engines_integration import describe
from tests.test_engines_integration import run_module
from tests.test_http import CASES
from tests.test_http import Server
from tests.test_image_dir_classes import _tree
from tests.test_manifest_ranges import digests
from tests.test_parquet import HubSet
from tests.test_webdataset import Shards
from tests.test_webdataset import png
from tests.test_webdataset import write_tar

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.xdist_group('engines')]

FLAGS = ('--height', '8', '--width', '8', '--progress', 'off', '--num_shards', '2',
         '--max_error_rate', '1')


def _parquet(root, _server) -> tuple:
  HubSet(root)
  return ['--manifest', str(root / 'data' / '*.parquet')], ()


def _webdataset(root, _server) -> tuple:
  Shards(root)
  write_tar(root / 'train-000002.tar.gz', [('x/0.png', png(9)), ('x/0.cls', b'1'),
                                           ('x/1.cls', b'0')])  # no image: a rejected line
  return (['--manifest', str(root / 'train-{000000..000002}.tar*')],
          ('--label_map', str(root / 'names.txt')))


def _urls(root, server) -> tuple:
  manifest = root / 'urls.csv'
  manifest.write_text('image,label\n' + ''.join(
      f'{server.base}{path},{label}\n' for path, label, expected in CASES
      if expected is None or expected[1] in ('missing_file', 'robots_opt_out')))
  return ['--manifest', str(manifest)], ('--http_timeout_s', '5', '--http_retries', '2')


def _image_dir(root, _server) -> tuple:
  # Every class folder is a class, empty or not. On Flink and Spark every
  # such run failed (exit 1, "...classes] were consumed but never produced")
  # while the folders' classes were flattened into the rows' combine.
  _tree(root / 'tree', (('train/a', ('0.png', '1.png')), ('train/b', ()),
                        ('train/c', ('0.png', 'notes.txt')), ('train/d', ('x.jpg', 'y.png')),
                        ('test/a', ('0.png',)), ('test/e', ())))
  (root / 'tree' / 'train' / 'd' / 'y.png').write_bytes(b'\x89PNG\r\n\x1a\n cut')
  return ['--image_dir', str(root / 'tree'), '--image_dir_layout', 'split/label'], (
      '--split_names', 'train,test')


@pytest.mark.parametrize('source', [_parquet, _webdataset, _urls, _image_dir],
                         ids=lambda f: f.__name__[1:])
def test_each_source_converts_on_flink_as_on_the_direct_runner(source, tmp_path):
  with Server() as server:
    given, flags = source(tmp_path, server)
    local = tmp_path / 'local'
    assert convert.main([*given, '--output_dir', str(local), *FLAGS, *flags]) == EXIT_OK
    server.failing = True  # the URLs fail their first request again (after the local run)
    server.seen.clear()
    out = tmp_path / 'flink'
    result = run_module('pipeline.convert', *given, '--output_dir', out,
                        *FLAGS, *flags, '--runner', 'FlinkRunner')
    assert result.returncode == EXIT_OK, describe(result)
  assert digests(out) == digests(local)
  assert (out / 'rejected.jsonl').read_bytes() == (local / 'rejected.jsonl').read_bytes()
  if source is _image_dir:
    assert (out / 'label_map.txt').read_text() == 'a\nb\nc\nd\ne\n'
    assert read_info(out)['splits']['train']['examples_per_class'] == {
        'a': 2, 'b': 0, 'c': 1, 'd': 0, 'e': 0}
