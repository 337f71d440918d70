"""A local image file is held once while it is read (transforms/workers/
checked_read.read_checked): its first bytes were read apart, for the format
check, and joined to the rest, so that the file was held twice (a 250 MB
image peaked at 500 MB in its image process, over docs/sizing.md's "plus
the file's own" bytes). Counted with tracemalloc: bytes held, not RSS."""

from __future__ import annotations

import dataclasses
import io
import tracemalloc

from PIL import Image
import pytest

from transforms.core.rejects import RowError
from transforms.core.spec import ImageSpec
from transforms.workers.checked_read import read_checked

SIZE = 32 << 20  # large beside the 1 MiB reads that find its end


def _png_with_trailing_bytes(path) -> bytes:
  head = io.BytesIO()
  Image.new('RGB', (4, 4), (9, 8, 7)).save(head, 'PNG')
  data = head.getvalue() + bytes(range(256)) * ((SIZE - len(head.getvalue())) // 256)
  path.write_bytes(data)
  return data


def _read_held(path, spec: ImageSpec) -> tuple:
  with open(path, 'rb') as stream:
    tracemalloc.start()
    try:
      data = read_checked(stream, str(path), path.stat().st_size, spec)
      _, peak = tracemalloc.get_traced_memory()
    finally:
      tracemalloc.stop()
  return data, peak


def test_a_local_file_is_held_once_while_read(tmp_path):
  path = tmp_path / 'big.png'
  expected = _png_with_trailing_bytes(path)
  data, peak = _read_held(path, ImageSpec())
  assert data == expected
  assert peak < 1.1 * len(expected), f'{peak / len(expected):.2f}x the file held'


def test_the_format_and_size_checks_still_come_first(tmp_path):
  path = tmp_path / 'notes.png'
  path.write_bytes(b'just some text, no image at all' * 1000)
  with pytest.raises(RowError) as error:
    _read_held(path, ImageSpec())
  assert (error.value.stage, error.value.code) == ('decode', 'not_an_image')
  big = tmp_path / 'big.png'
  _png_with_trailing_bytes(big)
  with pytest.raises(RowError) as error:
    _read_held(big, dataclasses.replace(ImageSpec(), max_image_bytes=SIZE // 2))
  assert (error.value.stage, error.value.code) == ('read', 'too_large')
  tiny = tmp_path / 'tiny.png'
  tiny.write_bytes(b'\x89P')
  with open(tiny, 'rb') as stream:
    assert read_checked(stream, str(tiny), 2, ImageSpec(formats=None)) == b'\x89P'
