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

Night 2's files live in a scratch copy of the corpus (hard links; a
rewritten file is unlinked first), so the cached corpus is never changed.
"""

import csv
import filecmp
import json
import os
import shutil
import sys

from bench.corpus import NUM_CLASSES
from bench.corpus import ensure_corpus
from bench.corpus import make_image
from bench.corpus import relative_path
from bench.measure import run_measured

DEFAULT_IMAGES = 12_000
CHANGED = {'new': 40, 'relabelled': 40, 'rewritten': 20, 'deleted': 20}
TARGETS = {'metadata': 10.0, 'content': 5.0}
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


def scratch_corpus(corpus_manifest: str, scratch: str) -> str:
  """A hard-linked copy of the corpus' images under `scratch`; -> night 1's manifest."""
  source = os.path.dirname(corpus_manifest)
  rows = _read(corpus_manifest)
  for image, _ in rows:
    target = os.path.join(scratch, image)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    try:
      os.link(os.path.join(source, image), target)
    except OSError:  # another filesystem: a copy
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


def run(workdir: str, num_images: int, timeout: float, repeat: int = 1) -> dict:
  """The whole benchmark; -> its figures (of each timed run, the fastest of
  `repeat`; every time in all_seconds)."""
  corpus_manifest, corpus = ensure_corpus(workdir, num_images)
  root = os.path.join(workdir, f'incremental-{num_images}')
  shutil.rmtree(root, ignore_errors=True)
  logs = os.path.join(root, 'logs')
  os.makedirs(logs)
  manifest1 = scratch_corpus(corpus_manifest, os.path.join(root, 'corpus'))
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
  for attempt in range(repeat):  # interleaved, so drift on the machine hits every run alike
    for name, command in commands.items():
      # The previous run's shards (~370 MB) are still being written back to
      # disk: measured, that writeback slowed the next run by up to 3 s.
      os.sync()
      result = run_measured(command, os.path.join(logs, f'{name}-{attempt}'), timeout=timeout)
      info_path = os.path.join(root, name, 'dataset_info.json')
      if result['returncode'] == 0 and os.path.exists(info_path):
        with open(info_path) as f:
          result['reuse'] = json.load(f).get('reuse')
      best = figures['runs'].get(name)
      result['all_seconds'] = (best['all_seconds'] if best else []) + [result['seconds']]
      if best is None or result['returncode'] != 0 or (
              best['returncode'] == 0 and result['seconds'] < best['seconds']):
        figures['runs'][name] = result
      else:
        best['all_seconds'] = result['all_seconds']
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


def main(workdir: str, num_images, timeout: float, json_path=None, repeat: int = 1) -> dict:
  figures = run(os.path.abspath(workdir), num_images or DEFAULT_IMAGES, timeout, repeat)
  json_path = json_path or os.path.join(workdir, 'bench-incremental.json')
  with open(json_path, 'w') as f:
    json.dump(figures, f, indent=2)
  print_figures(figures)
  print(f'\nfigures: {json_path}')
  return figures
