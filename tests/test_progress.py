"""The pieces of the live progress line."""

from pipeline.runs import progress
from transforms.workers.progress_file import ProgressFile
from transforms.workers.progress_file import write_total


def test_worker_counts_are_summed(tmp_path):
  first, second = ProgressFile(str(tmp_path)), ProgressFile(str(tmp_path))
  for _ in range(3):
    first.tick()
  second.tick()
  first.flush()
  second.flush()
  assert progress.read_total_done(str(tmp_path)) == 4


def test_a_count_being_replaced_is_read_once(tmp_path):
  """ProgressFile.flush writes NAME.tmp, then renames it over NAME: a reader
  between the two sees both and must count the worker once."""
  (tmp_path / '7-1').write_text('3')
  (tmp_path / '7-1.tmp').write_text('4')
  (tmp_path / '8-1').write_text('2')
  assert progress.read_total_done(str(tmp_path)) == 5


def test_progress_file_without_a_folder_does_nothing():
  quiet = ProgressFile(None)
  quiet.tick()
  quiet.flush()


def test_format_line_with_rate_and_eta():
  assert progress.format_line(50, 200, 10.0) == '50/200 images  5.0 img/s  ETA 0:30'
  assert progress.format_line(7, None, 0.0) == '7 images  0.0 img/s'


def test_the_total_comes_from_the_pipeline_and_is_not_a_worker_count(tmp_path):
  assert progress.read_total(str(tmp_path)) is None  # the manifest is not read yet
  write_total(str(tmp_path), 1234)
  write_total(str(tmp_path), 1234)  # every worker that numbers lines writes it
  ProgressFile(str(tmp_path)).flush()
  assert progress.read_total(str(tmp_path)) == 1234
  assert progress.read_total_done(str(tmp_path)) == 0
  write_total(None, 5)  # no progress line: nowhere to write


class _Shown:
  def __init__(self, total):
    self.total, self.closed = total, None

  def set_total(self, total):
    self.total = total

  def update(self, done):
    pass

  def close(self, done):
    self.closed = done


def test_a_run_shorter_than_a_tick_still_closes_with_its_total(tmp_path):
  """The display's thread reads the manifest's total every 0.5 s: a 9-image
  run ended before the first read, and its last line had no total."""
  folder = tmp_path / 'progress'
  folder.mkdir()
  with progress.Reporter(str(folder), None, display=_Shown) as reporter:
    write_total(reporter.directory, 9)
    done = ProgressFile(reporter.directory)
    for _ in range(9):
      done.tick()
    done.flush()
  assert (reporter._shown.total, reporter._shown.closed) == (9, 9)
  assert not folder.exists()
