"""How far ahead of the image pool http(s) images are fetched (LoadImageFn,
read_sources.HeldBytes): within rows and within bytes, without Beam."""

import io
import threading
import time

import numpy as np
from PIL import Image

from tests.local_http import QuietHandler
from tests.local_http import RunningServer
from transforms import encode
from transforms import read_sources
from transforms.core.example import LabelledRow
from transforms.core.manifest import ManifestRow
from transforms.core.spec import ImageSpec
from transforms.encode import LoadImageFn
from transforms.read_sources import HeldBytes
from transforms.workers.source_image import convert_sources


def test_held_bytes_count_fetches_until_their_rows_are_done(monkeypatch):
  monkeypatch.setattr(read_sources, 'FETCH_GUESS', 1000)
  held = HeldBytes()
  held.started(1)
  held.started(2)
  assert (held.total, held.fetching, held.outstanding()) == (0, 2, 2000)  # guessed
  held.finished(1, 100)
  assert (held.total, held.fetching, held.outstanding()) == (100, 1, 200)  # the average
  held.finished(2, 50)
  assert (held.total, held.outstanding()) == (150, 150)
  held.done(1)
  assert held.total == 50
  held.started(3)
  held.done(3)  # its result taken before its fetch's callback ran
  held.finished(3, 70)  # let go already: not counted
  held.done(2)
  held.done(4)  # a row never fetched (a local file)
  assert (held.total, held.fetching, held.outstanding()) == (0, 0, 0)


def _noise_png(seed: int) -> bytes:
  pixels = np.random.default_rng(seed).integers(0, 256, (120, 200, 3), dtype=np.uint8)
  out = io.BytesIO()
  Image.fromarray(pixels).save(out, format='PNG')
  return out.getvalue()  # ~72 KB: noise does not compress


def _images(body_of, answered=None, delay_of=lambda index: 0.0):
  """A handler serving /N.png as body_of(N) (after delay_of(N) seconds),
  each path answered appended to `answered`."""

  class Images(QuietHandler):
    def do_GET(self):
      index = int(self.path.strip('/').split('.')[0])
      time.sleep(delay_of(index))
      body = body_of(index)
      self.send_response(200)
      self.send_header('Content-Type', 'image/png')
      self.send_header('Content-Length', str(len(body)))
      self.end_headers()
      self.wfile.write(body)
      if answered is not None:
        answered.append(self.path)

  return Images


def _loaded_behind_a_gate(handler, count: int, open_after_s: float, on_open=lambda: None):
  """LoadImageFn over the rows of /0.png .. /count-1.png served by `handler`,
  on two threads whose pool converts nothing until open_after_s have passed
  (on_open() is called then, before the pool goes on); -> its outputs, in order."""
  gate = threading.Event()

  def gated(*args):
    assert gate.wait(30)
    return convert_sources(*args)

  def open_gate():
    on_open()
    gate.set()

  with RunningServer(handler) as server:
    rows = [LabelledRow(ManifestRow({'image': f'{i}.png'}, 'm', i + 2, image=f'{i}.png',
                                    path=f'{server.base}/{i}.png', key=f'{i}.png',
                                    label='red'), 0, 'red') for i in range(count)]
    fn = LoadImageFn(ImageSpec(height=4, width=4, encoding='raw'), threads=2,
                     convert_on_thread=gated)
    fn.setup()
    timer = threading.Timer(open_after_s, open_gate)
    try:
      fn.start_bundle()
      timer.start()
      return [o for row in rows for o in fn.process(row)] + [
          windowed.value for windowed in fn.finish_bundle()]
    finally:
      timer.cancel()
      gate.set()
      fn.teardown()


def test_urls_are_fetched_ahead_only_while_their_bytes_fit(monkeypatch):
  """Rows arrive faster than the pool converts them: every fetch started
  as its row arrived, and with fetches faster than decoding, a bundle's
  whole set of images was held at once (150 JPEGs of 5 MB: 1.15 GB in the
  launcher, 1.88 GB with 300). Now no fetch starts while the rows not yet
  converted hold FETCH_AHEAD_BYTES."""
  monkeypatch.setattr(read_sources, 'FETCH_AHEAD_BYTES', 400_000)
  monkeypatch.setattr(read_sources, 'FETCH_GUESS', 80_000, raising=False)
  bodies = [_noise_png(i) for i in range(40)]
  answered, at_gate = [], []
  out = _loaded_behind_a_gate(_images(bodies.__getitem__, answered), 40, 1.0,
                              lambda: at_gate.append(len(answered)))
  # 400 KB hold 5 of these 72 KB images; the pool's two threads take a
  # call each, up to 2 calls a thread waiting (one row a call on threads)
  (fetched,) = at_gate
  assert 4 <= fetched <= 12, fetched
  assert len(answered) == 40
  assert [o.labelled.row.key for o in out] == [f'{i}.png' for i in range(40)]
  for index in (0, 39):  # each its own image's pixels
    expected = Image.open(io.BytesIO(bodies[index])).resize((4, 4), Image.BILINEAR)
    assert out[index].image.data == expected.tobytes()


def test_photos_after_thumbnails_are_not_all_fetched_at_the_thumbnails_size(monkeypatch):
  """A fetch still running counts as the average fetch so far: after 60
  small PNGs, each of 20 big ones was guessed at ~1 KB and all 20 started
  at once (their rows arrive before any finishes), 1.4 MB held against a
  300 KB bound. Now at most FETCH_IN_FLIGHT fetches run or queue: what
  passes the bound is those few images."""
  monkeypatch.setattr(read_sources, 'FETCH_AHEAD_BYTES', 300_000)
  monkeypatch.setattr(read_sources, 'FETCH_GUESS', 1_000)
  monkeypatch.setattr(read_sources, 'FETCH_IN_FLIGHT', 4, raising=False)
  small = Image.new('RGB', (8, 8), (200, 10, 10))
  out = io.BytesIO()
  small.save(out, format='PNG')
  bodies = [out.getvalue()] * 60 + [_noise_png(i) for i in range(20)]  # ~72 KB each
  peak = []

  class Counted(HeldBytes):
    def finished(self, key, size):
      super().finished(key, size)
      peak.append(self.total)

  monkeypatch.setattr(encode, 'HeldBytes', Counted)

  # a photo takes longer than the rows take to arrive; no row is converted
  # before the last has arrived
  out = _loaded_behind_a_gate(_images(bodies.__getitem__,
                                      delay_of=lambda index: 0.05 if index >= 60 else 0.0),
                              80, 2.0)
  # the bound and the 4 fetches in flight past it: 300 KB + 4 x 72 KB
  assert 300_000 < max(peak) < 300_000 + 5 * 72_000, max(peak)
  assert [o.labelled.row.key for o in out] == [f'{i}.png' for i in range(80)]
  expected = Image.open(io.BytesIO(bodies[79])).resize((4, 4), Image.BILINEAR)
  assert out[79].image.data == expected.tobytes()


def test_urls_are_fetched_at_most_fetch_ahead_max_rows_ahead(monkeypatch):
  """Rows of small images fit the bytes many times over: the rows ahead of
  the pool (FETCH_AHEAD_MAX) are what stops their fetches (no test held it
  once too_far_ahead's went)."""
  monkeypatch.setattr(encode, 'FETCH_AHEAD_MAX', 6)
  body = _noise_png(1)
  answered, at_gate = [], []
  out = _loaded_behind_a_gate(_images(lambda index: body, answered), 40, 1.0,
                              lambda: at_gate.append(len(answered)))
  # 6 rows ahead, and the pool's calls: two threads, up to 2 calls each waiting
  (fetched,) = at_gate
  assert 6 <= fetched <= 14, fetched
  assert [o.labelled.row.key for o in out] == [f'{i}.png' for i in range(40)]
