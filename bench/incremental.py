"""make bench BENCH_ARGS="--incremental [--repeat 3]": a nightly run that redoes only what
changed, against the full run it replaces.

On the generated corpus (default 12,000 JPEGs, bench/corpus.py) it converts
night 1 (jpeg224), then changes 1% of it: 40 new images, 40 relabelled rows,
20 image files rewritten in place (same path, new content) and 20 rows
deleted. Then it times, each as its own process tree from launch to exit:

  full       convert of night 2's manifest from scratch
  metadata   the same with --previous_dataset night1 (--change_detection metadata)
  content    the same with --change_detection content (every file read and hashed)
  floor      the same previous dataset, but a manifest of night 1's first FLOOR_ROWS
             rows (unchanged): what any incremental run costs before its rows
             do (start-up, Beam's job, the 12,000 sidecar lines), so full / floor
             is the most any incremental run of this corpus could gain

and checks that both incremental outputs hold the full run's bytes (shards,
label map, rejected.jsonl). Targets: metadata >= 10x, content >= 5x faster.

Night 2's files live in a scratch copy of the corpus (hard links, or real
copies with --incremental_sizes; a rewritten file is unlinked first), so the
cached corpus is never changed.

With --incremental_sizes A,B (make bench BENCH_ARGS="--incremental_sizes
6000,12000") it does all that at both sizes, the timed runs interleaved, and
prints beside the gains the marginal cost of a row: (seconds at B - seconds
at A) / (rows at B - rows at A), in us, of a reused row for metadata and
content (rows: the reuse section's `reused`) and of an encoded row for full.
CHANGED is a count, not a share, so the changed rows, start-up and Beam's job
are in both times and cancel: what is left is what one more unchanged row
costs. Target: metadata <= 40 us a reused row.

Beside it, at the larger size, the least a reused row can cost in plain
Python (bench/reuse_floor.py: the same per-row work, no Beam, no disk),
timed in each attempt: a reused row's cost moves with the VM's speed and
with the host the VM lands on (42.5-92 us on an AMD EPYC, 83-154 us on an
Intel Xeon, the same code, 2026-12-06 and 07), and the ratio of the two
moves less.
"""

import csv
import filecmp
import json
import os
import shutil
import sys
import time
from typing import Optional

from bench.corpus import NUM_CLASSES
from bench.corpus import ensure_corpus
from bench.corpus import make_image
from bench.corpus import relative_path
from bench.measure import cpu_model
from bench.measure import run_measured
from bench.reuse_floor import copy_floor_us
from bench.reuse_floor import plain_loop_us

DEFAULT_IMAGES = 12_000
CHANGED = {'new': 40, 'relabelled': 40, 'rewritten': 20, 'deleted': 20}
TARGETS = {'metadata': 10.0, 'content': 5.0}
MARGINAL_TARGETS_US = {'metadata': 40.0}  # a reused row, between two sizes
MARGINAL_RUNS = ('full', 'metadata', 'content')
# night2() picks its changed rows from index 7 on (0-based): the first 7 rows
# never change.
FLOOR_ROWS = 5
FLAGS = ('--encoding', 'jpeg', '--height', '224', '--width', '224', '--progress', 'off')


def _read(manifest: str) -> list:
  with open(manifest, newline='') as f:
    return [(row['image'], row['label']) for row in csv.DictReader(f)]


def _write(manifest: str, rows: list) -> str:
  with open(manifest, 'w', newline='') as f:
    writer = csv.writer(f)
    writer.writerow(['image', 'label'])
    writer.writerows(rows)
  return manifest


def scratch_corpus(corpus_manifest: str, scratch: str, copy: bool = False) -> str:
  """A hard-linked copy of the corpus' images under `scratch` (`copy`: real
  copies, files of their own); -> night 1's manifest."""
  source = os.path.dirname(corpus_manifest)
  rows = _read(corpus_manifest)
  for image, _ in rows:
    target = os.path.join(scratch, image)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if not copy:
      try:
        os.link(os.path.join(source, image), target)
        continue
      except OSError:  # another filesystem: a copy
        pass
    shutil.copy2(os.path.join(source, image), target)
  return _write(os.path.join(scratch, 'night1.csv'), rows)


def night2(night1_manifest: str, changed: dict = CHANGED) -> str:
  """Night 1's rows with `changed` applied (the images too); -> night 2's manifest.
  Rows are picked spread over the manifest, never the same row twice."""
  folder = os.path.dirname(night1_manifest)
  rows = _read(night1_manifest)
  n = len(rows)
  picks = iter(range(7, n, max(1, n // (sum(changed.values()) + 1))))
  relabelled = {next(picks) for _ in range(changed['relabelled'])}
  rewritten = {next(picks) for _ in range(changed['rewritten'])}
  deleted = {next(picks) for _ in range(changed['deleted'])}
  for index in rewritten:
    path = os.path.join(folder, rows[index][0])
    os.unlink(path)  # a hard link to the cache: never written through
    make_image(index + 10_000_000).save(path, format='JPEG', quality=90)
  out = []
  for index, (image, label) in enumerate(rows):
    if index in deleted:
      continue
    if index in relabelled:
      label = f'class_{(int(label.rsplit("_", 1)[1]) + 1) % NUM_CLASSES:02d}'
    out.append((image, label))
  for index in range(n, n + changed['new']):
    path = os.path.join(folder, relative_path(index))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    make_image(index).save(path, format='JPEG', quality=90)
    out.append((relative_path(index), f'class_{index % NUM_CLASSES:02d}'))
  return _write(os.path.join(folder, 'night2.csv'), out)


def floor_manifest(night1_manifest: str, rows: int = FLOOR_ROWS) -> str:
  """Night 1's first `rows` rows, which night2() never changes; -> its path."""
  return _write(os.path.join(os.path.dirname(night1_manifest), 'floor.csv'),
                _read(night1_manifest)[:rows])


def _convert(manifest: str, out: str, *more) -> list:
  return [sys.executable, '-m', 'pipeline.convert', '--manifest', manifest, '--output_dir',
          out, '--overwrite', *FLAGS, *more]


def same_bytes(full: str, other: str, sidecars: bool = True) -> bool:
  """Every shard, index, label map and rejected.jsonl (and sidecar) of `full`
  is in `other`. The content run's sidecars record SHA-256 fingerprints where
  the full (metadata) run's record file metadata: compared without them."""
  names = [n for n in os.listdir(full) if n != 'dataset_info.json'
           and (sidecars or not n.endswith('.sources.jsonl.gz'))]
  return set(names) <= set(os.listdir(other)) and all(filecmp.cmp(os.path.join(full, n), os.path.join(other, n), shallow=False)
              for n in names)


def prepare(workdir: str, num_images: int, timeout: float,
            copy: bool = False) -> tuple[str, dict, dict]:
  """Night 1 converted and night 2 made at `num_images` (`copy`: in a copied
  scratch corpus, see run_sizes); -> (the size's root folder, its figures so
  far, {name: the command of each run to time})."""
  corpus_manifest, corpus = ensure_corpus(workdir, num_images)
  root = os.path.join(workdir, f'incremental-{num_images}')
  shutil.rmtree(root, ignore_errors=True)
  logs = os.path.join(root, 'logs')
  os.makedirs(logs)
  manifest1 = scratch_corpus(corpus_manifest, os.path.join(root, 'corpus'), copy)
  night1 = os.path.join(root, 'night1')
  figures = {'corpus': corpus, 'changed': CHANGED, 'targets': TARGETS, 'runs': {}}
  os.sync()
  figures['runs']['night1'] = run_measured(_convert(manifest1, night1),
                                           os.path.join(logs, 'night1'), timeout=timeout)
  manifest2 = night2(manifest1)
  commands = {
      'full': _convert(manifest2, os.path.join(root, 'full')),
      'metadata': _convert(manifest2, os.path.join(root, 'metadata'),
                           '--previous_dataset', night1),
      'content': _convert(manifest2, os.path.join(root, 'content'), '--previous_dataset',
                          night1, '--change_detection', 'content'),
      'floor': _convert(floor_manifest(manifest1), os.path.join(root, 'floor'),
                        '--previous_dataset', night1),
  }
  return root, figures, commands


def time_runs(root: str, figures: dict, commands: dict, attempt: int, timeout: float) -> None:
  """Run each of `commands` once, keeping in `figures` the fastest of each."""
  logs = os.path.join(root, 'logs')
  for name, command in commands.items():
    # Each night writes a folder of its own (docs/incremental.md): the
    # previous attempt's is removed before, not by the run's --overwrite
    # (0.17 s of a 2.4 s `metadata` run at 12,000 rows, profiled).
    shutil.rmtree(os.path.join(root, name), ignore_errors=True)
    # The previous run's shards (~370 MB) are still being written back to
    # disk: measured, that writeback slowed the next run by up to 3 s.
    os.sync()
    result = run_measured(command, os.path.join(logs, f'{name}-{attempt}'), timeout=timeout)
    info_path = os.path.join(root, name, 'dataset_info.json')
    if result['returncode'] == 0 and os.path.exists(info_path):
      with open(info_path) as f:
        info = json.load(f)
      result['reuse'] = info.get('reuse')
      result['rows'] = info.get('num_manifest_rows')
    best = figures['runs'].get(name)
    result['all_seconds'] = (best['all_seconds'] if best else []) + [result['seconds']]
    if best is None or result['returncode'] != 0 or (
            best['returncode'] == 0 and result['seconds'] < best['seconds']):
      figures['runs'][name] = result
    else:
      best['all_seconds'] = result['all_seconds']


def conclude(root: str, figures: dict) -> dict:
  """The gains against full, and whether each output holds full's bytes; -> figures."""
  full = figures['runs']['full']['seconds']
  for name, target in TARGETS.items():
    result = figures['runs'][name]
    result['speedup'] = round(full / result['seconds'], 2) if result['seconds'] else None
    result['same_bytes_as_full'] = same_bytes(os.path.join(root, 'full'),
                                              os.path.join(root, name), name == 'metadata')
    result['target_met'] = bool(result['speedup'] and result['speedup'] >= target)
  floor = figures['runs']['floor']
  floor['ceiling'] = round(full / floor['seconds'], 2) if floor['seconds'] else None
  return figures


def run(workdir: str, num_images: int, timeout: float, repeat: int = 1) -> dict:
  """The whole benchmark; -> its figures (of each timed run, the fastest of
  `repeat`; every time in all_seconds)."""
  root, figures, commands = prepare(workdir, num_images, timeout)
  for attempt in range(repeat):  # interleaved, so drift on the machine hits every run alike
    time_runs(root, figures, commands, attempt, timeout)
  return conclude(root, figures)


def run_sizes(workdir: str, sizes: list, timeout: float, repeat: int = 1) -> dict:
  """The benchmark at each of two `sizes`, their timed runs interleaved (a
  marginal cost is a difference of two times: drift between them would be
  in it); -> {'sizes': {size: its figures}, 'marginal': marginal_costs()}.

  Each size's scratch corpus is copied, not hard-linked: the metadata
  fingerprint holds the inode's ctime, which a link made or removed changes.
  Measured with links (600 and 1200 images): the 1200 scratch corpus' links
  made every unchanged row of the 600 one `changed_source`, none reused.
  """
  prepared = {size: prepare(workdir, size, timeout, copy=True) for size in sizes}
  loop, copy = [], []  # the plain loop's and the bytes' us a row at the larger size, each attempt
  for attempt in range(repeat):
    for root, figures, commands in prepared.values():
      time_runs(root, figures, commands, attempt, timeout)
    loop.append(plain_loop_us(prepared[max(sizes)][0]))
    copy.append(copy_floor_us(os.path.join(prepared[max(sizes)][0], 'night1')))
  by_size = {size: conclude(root, figures) for size, (root, figures, _) in prepared.items()}
  return {'sizes': by_size, 'marginal': marginal_costs(by_size),
          'plain_loop': {'us_per_row': min(loop), 'all_us': loop,
                         'copy_floor_us': min(copy), 'copy_floor_all_us': copy},
          'cpu_model': cpu_model(), 'finished': time.strftime('%Y-%m-%d %H:%M UTC',
                                                              time.gmtime())}


def marginal_us_per_row(small: tuple, large: tuple) -> Optional[float]:
  """us per row between two runs, each (seconds, rows): what the larger run
  spent beyond the smaller one over the rows it had beyond it, so what both
  spent alike (start-up, the changed rows) cancels. None without a difference."""
  (small_s, small_rows), (large_s, large_rows) = small, large
  if None in (small_s, small_rows, large_s, large_rows) or large_rows == small_rows:
    return None
  return round((large_s - small_s) / (large_rows - small_rows) * 1e6, 1)


def counted_rows(name: str, result: dict) -> Optional[int]:
  """The rows a run's marginal cost is per: full's rows (every one encoded),
  an incremental run's reused rows (from its reuse section)."""
  if result.get('returncode') != 0:
    return None
  if name == 'full':
    return result.get('rows')
  return (result.get('reuse') or {}).get('reused')


def marginal_costs(by_size: dict) -> dict:
  """{run: {'us_per_row', 'cpu_us_per_row', 'rows': [small, large],
  'comparable', 'target_us', 'target_met'}} between the smallest and the
  largest size of `by_size` ({size: figures}). The target is on wall time;
  the CPU (the process tree's) is beside it because, on a shared machine, it
  moves less with what else runs: at 600 and 1,200 rows with the other
  processes using twice the run's own CPU, content's wall-time marginal came
  out at -322 us a row.

  The changed rows are the same count at both sizes, so the counted rows must
  differ as the sizes do; where they do not (rows reused at one size and not
  the other), the figure is no row's cost: `comparable` False, no target met.
  """
  small_size, large_size = min(by_size), max(by_size)
  small, large = by_size[small_size]['runs'], by_size[large_size]['runs']
  costs = {}
  for name in MARGINAL_RUNS:
    rows = [counted_rows(name, small[name]), counted_rows(name, large[name])]
    us = marginal_us_per_row((small[name]['seconds'], rows[0]),
                             (large[name]['seconds'], rows[1]))
    comparable = None not in rows and rows[1] - rows[0] == large_size - small_size
    cpu_us = marginal_us_per_row((small[name].get('cpu_seconds'), rows[0]),
                                 (large[name].get('cpu_seconds'), rows[1]))
    costs[name] = {'us_per_row': us, 'cpu_us_per_row': cpu_us, 'rows': rows,
                   'comparable': comparable}
    if name in MARGINAL_TARGETS_US:
      target = MARGINAL_TARGETS_US[name]
      costs[name]['target_us'] = target
      costs[name]['target_met'] = comparable and us is not None and us <= target
  return costs


def print_figures(figures: dict) -> None:
  runs = figures['runs']
  print(f'\nincremental: {figures["corpus"]["num_images"]} JPEGs, night 2 changes '
        + ', '.join(f'{n} {k}' for k, n in figures['changed'].items()))
  for name in ('night1', 'full', 'metadata', 'content'):
    result = runs[name]
    line = f'  {name:<9} {result["seconds"]:8.1f} s  exit {result["returncode"]}'
    if 'speedup' in result:
      line += (f'  {result["speedup"]}x (target {TARGETS[name]}x: '
               f'{"met" if result["target_met"] else "NOT met"}); same bytes as full: '
               f'{result["same_bytes_as_full"]}')
    reuse = result.get('reuse')
    if reuse:
      line += f'; reused {reuse["reused"]}, encoded {reuse["num_encoded"]}'
    print(line)
  floor = runs['floor']
  print(f'  {"floor":<9} {floor["seconds"]:8.1f} s  exit {floor["returncode"]}  '
        f'({FLOOR_ROWS} unchanged rows, the same previous dataset): no incremental run '
        f'of this corpus can be more than {floor["ceiling"]}x faster than full')


def print_marginal(by_size: dict, marginal: dict, loop: Optional[dict] = None,
                   cpu: str = '') -> None:
  """The marginal cost of a row between the two sizes, and each size's gains;
  loop: the plain loop's figures (run_sizes), set beside a reused row's."""
  small, large = min(by_size), max(by_size)
  print(f'\nmarginal cost of a row, {small} -> {large} JPEGs (the same '
        f'{sum(CHANGED.values())} changed rows at both sizes: they and start-up cancel):')
  for name, cost in marginal.items():
    us = cost['us_per_row']
    kind = 'an encoded row' if name == 'full' else 'a reused row'
    line = f'  {name:<9} ' + (f'{us:8.1f} us {kind}' if us is not None else
                               f'     n/a ({kind}: a run failed or the rows are alike)')
    if cost.get('cpu_us_per_row') is not None:
      line += f' (CPU {cost["cpu_us_per_row"]:.1f} us)'
    line += f'  (rows {cost["rows"][0]} -> {cost["rows"][1]})'
    if us is not None and not cost['comparable']:
      line += f' (not a cost per row: the rows differ by other than {large - small})'
    if 'target_us' in cost:
      line += f'; target <= {cost["target_us"]:g} us: {"met" if cost["target_met"] else "NOT met"}'
    if name != 'full':
      line += '; end to end ' + ', '.join(
          f'{by_size[size]["runs"][name].get("speedup")}x at {size}' for size in by_size)
    print(line)
  if loop:
    reused = marginal.get('metadata', {}).get('us_per_row')
    print(f'  plain loop {loop["us_per_row"]:7.1f} us a row at {large} (bench/reuse_floor.py: '
          f'the same per-row work in plain Python, no Beam, no disk; this hour, this '
          f'machine{": " + cpu if cpu else ""})' + (
              f'; metadata\'s reused row is {reused / loop["us_per_row"]:.2f}x it'
              if reused and reused > 0 and loop['us_per_row'] else ''))
    if loop.get('copy_floor_us') is not None:
      print(f'  the bytes {loop["copy_floor_us"]:7.1f} us a record at {large} (night 1\'s '
            f'shards read and written again as cat does, no Python per record: part of both '
            f'figures above)')


def main(workdir: str, num_images, timeout: float, json_path=None, repeat: int = 1,
         sizes: Optional[list] = None) -> dict:
  """The benchmark at `num_images` (default DEFAULT_IMAGES), or with `sizes`
  (two corpus sizes) at both, with the marginal cost of a row between them."""
  workdir = os.path.abspath(workdir)
  if sizes:
    figures = run_sizes(workdir, sorted(sizes), timeout, repeat)
    json_path = json_path or os.path.join(workdir, 'bench-incremental-sizes.json')
  else:
    figures = run(workdir, num_images or DEFAULT_IMAGES, timeout, repeat)
    json_path = json_path or os.path.join(workdir, 'bench-incremental.json')
  with open(json_path, 'w') as f:
    json.dump(figures, f, indent=2)
  if sizes:
    for size_figures in figures['sizes'].values():
      print_figures(size_figures)
    print_marginal(figures['sizes'], figures['marginal'], figures['plain_loop'],
                   figures['cpu_model'])
  else:
    print_figures(figures)
  print(f'\nfigures: {json_path}')
  return figures
