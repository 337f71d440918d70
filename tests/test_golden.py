"""The golden guard: a fixed corpus converted with fixed flags gives the same
bytes in every shard, index, label_map.txt and rejected.jsonl, across
refactors that change no behaviour. The constants were recorded before the
layout moves of issue 22; a change that means to change output bytes updates
them in the same commit, saying why."""

import hashlib
import io
import pathlib

import numpy as np
from PIL import Image
import pytest

from tests.conftest import write_manifest

pytestmark = pytest.mark.xdist_group('golden')

VARIANTS = {
    'raw': ('--encoding', 'raw', '--height', '16', '--width', '16'),
    'jpeg': ('--encoding', 'jpeg', '--height', '24', '--width', '20'),
    'jpeg_split': ('--encoding', 'jpeg', '--height', '24', '--width', '20',
                   '--split', 'train=0.5,validation=0.25,test=0.25', '--seed', '7'),
}
COMMON = ('--write_index', '--max_error_rate', '0.5', '--num_shards', '2', '--progress', 'off')


def make_corpus(root: pathlib.Path) -> pathlib.Path:
  """12 noise images (PNG and JPEG, fixed seed) of two labels, one missing
  file and one corrupt image."""
  rng = np.random.default_rng(20240522)
  rows = []
  for i in range(12):
    size = (int(rng.integers(10, 50)), int(rng.integers(10, 50)))
    pixels = rng.integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8)
    fmt, ext = ('PNG', 'png') if i % 2 else ('JPEG', 'jpg')
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=fmt)
    path = root / 'images' / f'img_{i:02d}.{ext}'
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buffer.getvalue())
    rows.append((f'images/img_{i:02d}.{ext}', 'cat' if i % 3 else 'dog'))
  (root / 'images' / 'corrupt.png').write_bytes(b'\x89PNG\r\n\x1a\nnot a png at all')
  rows.append(('images/corrupt.png', 'cat'))
  rows.append(('images/missing.jpg', 'dog'))
  return write_manifest(root / 'manifest.csv', rows)


def digests(out: pathlib.Path, root: pathlib.Path) -> dict:
  """sha256 of the shards, indexes, label_map.txt and rejected.jsonl (whose
  absolute paths of the corpus folder `root` read ROOT)."""
  wanted = [p for p in sorted(out.iterdir())
            if p.is_file() and (p.name in ('label_map.txt', 'rejected.jsonl')
                                or '.tfrecord' in p.name or '.index' in p.name)]
  return {p.name: hashlib.sha256(p.read_bytes().replace(str(root).encode(), b'ROOT')).hexdigest()
          for p in wanted}


@pytest.fixture(scope='module')
def golden_runs(tmp_path_factory):
  from pipeline import convert
  root = tmp_path_factory.mktemp('golden')
  manifest = make_corpus(root)
  runs = {}
  for name, flags in VARIANTS.items():
    out = root / f'out_{name}'
    code = convert.main(['--manifest', str(manifest), '--output_dir', str(out), *COMMON, *flags])
    assert code == 0, f'convert {name} exited {code}'
    runs[name] = digests(out, root)
  return runs


# Recorded at 1f4456e (before the layout moves of issue 22).
GOLDEN = {
    'jpeg': {
        'label_map.txt':
            'f641fdcd8af73b2f6334ab63c13d2eb857cd16f2aa4ea0ba20ba0eb9627918b5',
        'rejected.jsonl':
            'ccaa2fe6a98b3d22633d2593281da33b760f9033646b13f309adea0157dce2a1',
        'train-00000-of-00002.tfrecord':
            '7bda0c0835f97eaa1542305a840bf955264bb64667be3e61ecbf54eab3809031',
        'train-00000-of-00002.tfrecord.index':
            'a3e14d421c6290d7022c241371474af8579f19e30aa98be2683e75a85d8b5574',
        'train-00001-of-00002.tfrecord':
            '8cc8e58463dd94c6456590d103e7d17b3bf21ec957915208e740855644747cc3',
        'train-00001-of-00002.tfrecord.index':
            '6e279ff7a1a3d9d970ea49df92f3e326e75e07f9e736f943ab260491b39698c6',
    },
    'jpeg_split': {
        'label_map.txt':
            'f641fdcd8af73b2f6334ab63c13d2eb857cd16f2aa4ea0ba20ba0eb9627918b5',
        # The same lines as without --split, now also in the same order: rejected
        # rows are written by source and line (they came in the order the split's
        # steps delivered them).
        'rejected.jsonl':
            'ccaa2fe6a98b3d22633d2593281da33b760f9033646b13f309adea0157dce2a1',
        'test-00000-of-00002.tfrecord':
            '8c6b72f79ced2deabfcd1248733c961bf60952e4fbce50fe19d38dc9ccf35b47',
        'test-00000-of-00002.tfrecord.index':
            '078b2419abac67692f1411de8feb1e21a70997d498579e7843e8bbd91232c18b',
        'test-00001-of-00002.tfrecord':
            'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855',
        'test-00001-of-00002.tfrecord.index':
            'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855',
        'train-00000-of-00002.tfrecord':
            'fc382e5c6b657b4ecc2bffb714e9d7b5ee602344b0e4fbcc570e9e826763f137',
        'train-00000-of-00002.tfrecord.index':
            '808a3732bc0ab3493502dbca7241153764e8b79ef68050c0b03d16f1aaa26f1f',
        'train-00001-of-00002.tfrecord':
            '0633c7ca49e7ecce59e7c7e558a581e8fb3d110b3cf7aaaade13c3b0255c18a4',
        'train-00001-of-00002.tfrecord.index':
            '4cc0cec28bf42aa4c13b3d35b1e5db2e95c7f6da23aa4ce1d30db81d188544aa',
        'validation-00000-of-00002.tfrecord':
            '9b141d199b8919612a4b383d86ea4cfad04d614eb6dcf36579c6e53ee7c44d5f',
        'validation-00000-of-00002.tfrecord.index':
            '06ac9d2ddfb6b08a81787801e9f594909edeb94c8f959c60046b69a79427da12',
        'validation-00001-of-00002.tfrecord':
            '8dbd06ad290e04e78f35bafefe2999cebaf1b25672415c18a09613d557bed80e',
        'validation-00001-of-00002.tfrecord.index':
            '82ba02baebe479d3a754db6dbe2c786c7ff4570ceb519f00d19bd01635ce6318',
    },
    'raw': {
        'label_map.txt':
            'f641fdcd8af73b2f6334ab63c13d2eb857cd16f2aa4ea0ba20ba0eb9627918b5',
        'rejected.jsonl':
            'ccaa2fe6a98b3d22633d2593281da33b760f9033646b13f309adea0157dce2a1',
        'train-00000-of-00002.tfrecord':
            '8159e19d72d1e094ebca7f3b43634df28567c6fd94980429ced2db87e885eb00',
        'train-00000-of-00002.tfrecord.index':
            'e213593979e991b33eaa7c5607140b5fb79725ceca55aef17a5d3fb179af1dae',
        'train-00001-of-00002.tfrecord':
            '9e50eb2c8287d9172ba2348534b32bbe975fa10e2c436e3156f043f7e6bbf557',
        'train-00001-of-00002.tfrecord.index':
            'e213593979e991b33eaa7c5607140b5fb79725ceca55aef17a5d3fb179af1dae',
    },
}


@pytest.mark.parametrize('variant', sorted(VARIANTS))
def test_output_bytes_are_golden(golden_runs, variant):
  got = golden_runs[variant]
  assert 'rejected.jsonl' in got and 'label_map.txt' in got
  assert any('.index' in name for name in got), sorted(got)
  assert got == GOLDEN[variant]
