"""Benchmark img2tfrecord's convert and validate against bare loops on one corpus.

For each case (raw300: raw 300x300, jpeg224: JPEG q95 224x224) it measures,
each as its own process tree timed from launch to exit, with peak PSS:

  ceiling        bench.ceiling: one process per core, Pillow + hand framing
  seed loop      bench.seed_loop: the single-process TensorFlow tutorial loop
  convert        python -m pipeline.convert (the project's CLI)
  tf.data        bench.tfdata_peer: the converter a TensorFlow user would write
                 (tf.data, antialiased tf.image.resize, tf.io.TFRecordWriter)
  validate       python -m pipeline.validate on convert's output
  bare validate  bench.bare_validate: one process per core, CRCs + Example checks

Convert's and tf.data's output also get a mean pixel error against a Pillow
reference (bench.quality) on the first 100 images.

Each stage also runs on the first STARTUP_IMAGES images alone: that run's
time is the stage's fixed start-up cost (interpreter, imports, Beam's pipeline
construction), and (N - STARTUP_IMAGES) / (seconds - startup seconds) its
steady rate, reported beside the whole-run rate and ratios.

With --peers it also runs the job the peers can all do (JPEG q95 224x224 from
the centred crop) with convert (--resize_mode crop), img2dataset and TensorFlow
Datasets' builder, each peer in its own venv that `make bench-peers` builds
(.peers/NAME, from bench/peers/requirements-NAME.txt).

Run from the project root:

    .venv/bin/python -m bench.bench [--manifest M] [--num_images N] [--workdir DIR]
        [--json OUT.json] [--cases raw300,jpeg224] [--skip convert,validate]
        [--repeat R] [--memory_scaling] [--peers] [--incremental]
        [--incremental_sizes A,B]
"""

import argparse
import csv
import glob
import importlib.metadata
import json
import os
import platform
import shutil
import sys

from bench import incremental
from bench.common import BENCH_CASES
from bench.common import CASES
from bench.common import Case
from bench.common import read_manifest
from bench.corpus import ensure_corpus
from bench.measure import cpu_model
from bench.measure import run_measured
from bench.quality import mean_pixel_error
from bench.quality import tfrecord_images
from bench.quality import webdataset_images

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STAGES = ('ceiling', 'seed', 'convert', 'tfdata', 'validate', 'bare')
WRITING_STAGES = ('ceiling', 'seed', 'convert', 'tfdata')  # their output is emptied first
SCRATCH_STAGES = ('ceiling', 'seed', 'tfdata')  # their output is deleted once measured
QUALITY_STAGES = ('convert', 'tfdata')  # their output's pixels are compared to Pillow's
STAGE_TITLES = {
    'ceiling': 'ceiling',
    'seed': 'seed loop',
    'convert': 'convert',
    'tfdata': 'tf.data',
    'validate': 'validate',
    'bare': 'bare validate'
}
STAGE_NOTES = {
    'ceiling': 'bench.ceiling: os.cpu_count() processes, contiguous slices; Pillow '
               'open/convert RGB/resize BILINEAR, raw or JPEG q95; hand TFRecord '
               'framing with google_crc32c; no Example, no Beam',
    'seed': 'bench.seed_loop: one process incl. TensorFlow import; Pillow '
            'convert RGB/resize with its default filter (bicubic), raw or JPEG q95; '
            'tf.train.Example img_raw/label; tf.io.TFRecordWriter',
    'convert': 'python -m pipeline.convert, whole process',
    'tfdata': 'bench.tfdata_peer: one process incl. TensorFlow import; tf.data map '
              '(AUTOTUNE) of read_file/decode_image/resize bilinear antialias=True/'
              'round to uint8, raw or encode_jpeg q95; tf.train.Example; '
              'tf.io.TFRecordWriter',
    'validate': "python -m pipeline.validate --input_dir on convert's output",
    'bare': 'bench.bare_validate: os.cpu_count() processes over whole files; both '
            'CRCs checked; Example parsed from the protobuf wire format by hand '
            '(no TensorFlow import); raw length == H*W*3, JPEG SOI/EOI markers',
}
RATIOS = (('convert', 'ceiling'), ('convert', 'seed'), ('convert', 'tfdata'),
          ('validate', 'bare'))
STARTUP_IMAGES = 10
PIPELINE_DEFAULTS = CASES['raw300']  # what pipeline.convert does without flags
MEMORY_SCALING_FACTOR = 4
MEMORY_SCALING_TARGET = 1.25
DISTURBED_PERCENT = 10
PEER_JOB = Case('jpeg224crop', 'jpeg', 224, 224)  # the job every peer can do
PEERS = ('img2dataset', 'tfds')  # .peers/NAME/bin/python runs bench/peers/NAME_peer.py
PEER_TITLES = {'convert': 'convert', 'img2dataset': 'img2dataset', 'tfds': 'TFDS builder'}  # other processes' share of the CPU that flags a figure

# ---------------------------------------------------------------- arguments


def comma_list(allowed, allow_none=False):
  """argparse type: a comma-separated subset of `allowed` ('none' = empty)."""

  def parse(text):
    if allow_none and text == 'none':
      return []
    items = [item for item in text.split(',') if item]
    unknown = sorted(set(items) - set(allowed))
    if unknown:
      raise argparse.ArgumentTypeError(f"unknown {unknown}; choose from {','.join(allowed)}")
    return items

  return parse


def positive_int(text):
  """argparse type: an int >= 1."""
  value = int(text)
  if value < 1:
    raise argparse.ArgumentTypeError(f'{text} is not >= 1')
  return value


def two_sizes(text: str) -> list:
  """argparse type: 'A,B', two different corpus sizes -> [smaller, larger].

  A marginal cost is taken between exactly two sizes; more would need a fit.
  """
  sizes = [positive_int(item) for item in text.split(',') if item]
  if len(sizes) != 2 or sizes[0] == sizes[1]:
    raise argparse.ArgumentTypeError(f'{text}: give two different sizes, e.g. 6000,12000')
  return sorted(sizes)


def parse_args(argv=None):
  """The command line's options."""
  parser = argparse.ArgumentParser(
      prog='python -m bench.bench',
      description=__doc__.split('\n\n')[0],
      formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument(
      '--manifest',
      help="CSV 'image,label' to use instead of "
      "the generated corpus (paths relative to its folder)")
  parser.add_argument(
      '--num_images',
      type=positive_int,
      help='size of the generated corpus (default 3000; with --incremental 12000)')
  parser.add_argument(
      '--workdir', default='/tmp/img2tfrecord-bench', help='corpus cache, outputs and logs')
  parser.add_argument(
      '--json', help='where to write the figures '
      '(default WORKDIR/bench.json)')
  parser.add_argument(
      '--cases',
      type=comma_list(CASES, allow_none=True),
      default=list(BENCH_CASES),
      help=f"comma list of {','.join(CASES)}, or 'none' (default {','.join(BENCH_CASES)})")
  parser.add_argument(
      '--skip',
      type=comma_list(STAGES),
      default=[],
      help=f"comma list of stages to skip: {','.join(STAGES)}")
  parser.add_argument(
      '--memory_scaling',
      action='store_true',
      help='also run convert (raw300) on the generated corpus at '
      f'N and {MEMORY_SCALING_FACTOR}N images and compare peak PSS')
  parser.add_argument(
      '--repeat',
      type=positive_int,
      default=1,
      help='runs per stage; the fastest is reported, the '
      'highest peak PSS kept (default 1)')
  parser.add_argument(
      '--timeout', type=float, default=3600, help='seconds before a measured process is killed')
  parser.add_argument(
      '--peers',
      action='store_true',
      help='also run the centre-crop JPEG job with convert, img2dataset and '
      "TFDS' builder (their venvs: make bench-peers), and again from URLs served "
      'on 127.0.0.1 with convert and img2dataset')
  parser.add_argument(
      '--keep_outputs', action='store_true', help='keep the ceiling and seed loop TFRecords')
  parser.add_argument(
      '--incremental', action='store_true',
      help='only the nightly-run benchmark (bench/incremental.py): a full run against '
      '--previous_dataset runs after 1%% of the corpus changed')
  parser.add_argument(
      '--incremental_sizes', type=two_sizes, metavar='A,B',
      help='--incremental at both corpus sizes (e.g. 6000,12000), with the marginal cost '
      'of a reused row between them: (seconds at B - at A) / (rows at B - at A)')
  args = parser.parse_args(argv)
  if args.incremental_sizes:
    if args.num_images is not None:
      parser.error('--incremental_sizes gives the corpus sizes: leave out --num_images')
    args.incremental = True
  if args.num_images is None and not args.incremental:
    args.num_images = 3000
  return args


# ---------------------------------------------------------------- machine


def package_version(*names):
  """Installed version of the first distribution found among `names`."""
  for name in names:
    try:
      return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
      continue
  return None


def machine_info():
  """What the figures were measured on."""
  from PIL import features
  with open('/proc/meminfo') as f:
    mem_kib = int(f.readline().split()[1])
  return {
      'cpu_count': os.cpu_count(),
      'cpu_model': cpu_model(),
      'memory_gib': round(mem_kib / 2**20, 1),
      'kernel': platform.release(),
      'python': platform.python_version(),
      'pillow': package_version('pillow'),
      'libjpeg_turbo': features.version('libjpeg_turbo'),
      'apache_beam': package_version('apache-beam'),
      'tensorflow': package_version('tensorflow-cpu', 'tensorflow'),
      'numpy': package_version('numpy'),
      'google_crc32c': package_version('google-crc32c'),
  }


# ---------------------------------------------------------------- stages


def case_flags(case, defaults=None):
  """--encoding/--height/--width flags; with `defaults`, only those that differ."""
  flags = []
  for name in ('encoding', 'height', 'width'):
    value = getattr(case, name)
    if defaults is None or value != getattr(defaults, name):
      flags += [f'--{name}', str(value)]
  return flags


def stage_command(stage, case, manifest, run_dir):
  """Command line of one stage of one case; outputs go under `run_dir`."""
  py = sys.executable
  out = os.path.join(run_dir, stage)
  convert_out = os.path.join(run_dir, 'convert')
  return {
      'ceiling': [py, '-m', 'bench.ceiling', '--manifest', manifest, '--output_dir', out] +
                 case_flags(case),
      'seed': [
          py, '-m', 'bench.seed_loop', '--manifest', manifest, '--output',
          os.path.join(out, 'seed.tfrecord')
      ] + case_flags(case),
      'convert': [
          py, '-m', 'pipeline.convert', '--manifest', manifest, '--output_dir', out, '--overwrite'
      ] + case_flags(case, PIPELINE_DEFAULTS),
      'tfdata': [py, '-m', 'bench.tfdata_peer', '--manifest', manifest, '--output_dir', out] +
                case_flags(case),
      'validate': [py, '-m', 'pipeline.validate', '--input_dir', convert_out],
      'bare': [py, '-m', 'bench.bare_validate', '--input_dir', convert_out] + case_flags(case),
  }[stage]


def tfrecord_files(folder):
  """The TFRecord files that convert wrote into `folder`."""
  return sorted(glob.glob(os.path.join(folder, '*.tfrecord*')))


def last_json_line(lines):
  """The last stdout line that parses as a JSON object, or None."""
  for line in reversed(lines):
    try:
      value = json.loads(line)
    except ValueError:
      continue
    if isinstance(value, dict):
      return value
  return None


def measure_stage(cmd, num_images, log_prefix, args, output_dir=None):
  """Run a stage's command --repeat times (up to a failure) and return the
    fastest run's measurements, with status, images/s, every run's seconds and
    the highest peak PSS. Before each run, `output_dir` is emptied and dirty
    pages are flushed to disk."""
  runs = []
  for _ in range(args.repeat):
    if output_dir:
      shutil.rmtree(output_dir, ignore_errors=True)
    os.sync()  # so no earlier run's writeback lands in this one
    runs.append(run_measured(cmd, log_prefix, cwd=PROJECT_ROOT, timeout=args.timeout))
    if runs[-1]['returncode'] != 0:
      break
  failed = runs[-1]['returncode'] != 0
  result = dict(runs[-1] if failed else min(runs, key=lambda r: r['seconds']))
  result['runs_seconds'] = [r['seconds'] for r in runs]
  result['peak_pss_mib'] = max(r['peak_pss_mib'] for r in runs)
  result['other_cpu_percent'] = round(
      100 * result['other_cpu_seconds'] / (result['seconds'] * os.cpu_count()), 1)
  if not failed:
    result['status'] = 'ok'
    result['images_per_s'] = round(num_images / result['seconds'], 1)
  else:
    result['status'] = 'timeout' if result['returncode'] is None else 'failed'
  report = last_json_line(result['stdout_tail'])
  if report is not None:
    result['report'] = report
  return result


def output_summary(folder):
  """Number and total size of the TFRecord files in `folder`."""
  files = tfrecord_files(folder)
  return {'files': len(files), 'mib': round(sum(os.path.getsize(f) for f in files) / 2**20, 1)}


def run_stage(stage, case, manifest, num_images, args, run_name=None):
  """Run one stage of one case, or explain why it was skipped."""
  run_name = run_name or case.name
  run_dir = os.path.join(args.workdir, 'runs', run_name)
  out = os.path.join(run_dir, stage)
  if stage in args.skip:
    return {'status': 'skipped', 'reason': '--skip'}
  reads_convert = stage in ('validate', 'bare')
  if reads_convert and not tfrecord_files(os.path.join(run_dir, 'convert')):
    return {'status': 'skipped', 'reason': 'no convert output to read'}
  writes = stage in WRITING_STAGES
  print(f'  {run_name}: {STAGE_TITLES[stage]} ...', flush=True)
  log_prefix = os.path.join(args.workdir, 'logs', f'{run_name}-{stage}')
  result = measure_stage(
      stage_command(stage, case, manifest, run_dir),
      num_images,
      log_prefix,
      args,
      output_dir=out if writes else None)
  if writes:
    result['output'] = output_summary(out)
  if stage in QUALITY_STAGES and result['status'] == 'ok':
    result['mean_pixel_error'] = mean_pixel_error(
        tfrecord_images(tfrecord_files(out), os.path.dirname(manifest)),
        read_manifest(manifest), case.encoding, case.width, case.height)
  if stage in SCRATCH_STAGES and not args.keep_outputs:
    shutil.rmtree(out, ignore_errors=True)
  return result


def stage_ratios(stages, rate='images_per_s', pairs=RATIOS):
  """`rate` ratios top/bottom of `pairs` (None if missing)."""
  ratios = {}
  for top, bottom in pairs:
    a, b = stages.get(top, {}).get(rate), stages.get(bottom, {}).get(rate)
    ratios[f'{top}/{bottom}'] = round(a / b, 3) if a and b else None
  return ratios


def startup_manifest(manifest, workdir):
  """A manifest of the first STARTUP_IMAGES images (absolute paths) in `workdir`."""
  os.makedirs(workdir, exist_ok=True)
  path = os.path.join(workdir, f'manifest-startup-{STARTUP_IMAGES}.csv')
  with open(path, 'w', newline='') as f:
    writer = csv.writer(f)
    writer.writerow(['image', 'label'])
    writer.writerows(read_manifest(manifest)[:STARTUP_IMAGES])
  return path


def add_steady_rate(result, startup, num_images):
  """Startup seconds and the rate once started, from the small run `startup`."""
  if startup.get('status') != 'ok' or result.get('status') != 'ok':
    return
  result['startup_seconds'] = startup['seconds']
  working = result['seconds'] - startup['seconds']
  if num_images > STARTUP_IMAGES and working > 0:
    result['steady_images_per_s'] = round((num_images - STARTUP_IMAGES) / working, 1)


def run_case(case, manifest, num_images, args):
  """All stages of one case, in order, their start-up runs, and the ratios."""
  stages = {stage: run_stage(stage, case, manifest, num_images, args) for stage in STAGES}
  small = startup_manifest(manifest, args.workdir)
  for stage in STAGES:
    startup = run_stage(stage, case, small, STARTUP_IMAGES, args, run_name=f'{case.name}-startup')
    add_steady_rate(stages[stage], startup, num_images)
  shutil.rmtree(os.path.join(args.workdir, 'runs', f'{case.name}-startup'), ignore_errors=True)
  return {
      'encoding': case.encoding,
      'height': case.height,
      'width': case.width,
      'num_images': num_images,
      'stages': stages,
      'ratios': stage_ratios(stages),
      'steady_ratios': stage_ratios(stages, 'steady_images_per_s')
  }


def memory_scaling(args):
  """Peak PSS of convert (raw300) at N and 4N generated images, and their ratio."""
  case = CASES['raw300']
  runs = {}
  for n in (args.num_images, MEMORY_SCALING_FACTOR * args.num_images):
    manifest, _ = ensure_corpus(args.workdir, n)
    warm_page_cache(manifest)
    run_dir = os.path.join(args.workdir, 'runs', f'memory-{n}')
    print(f'  memory scaling: convert {n} images ...', flush=True)
    runs[str(n)] = measure_stage(
        stage_command('convert', case, manifest, run_dir),
        n,
        os.path.join(args.workdir, 'logs', f'memory-{n}-convert'),
        args,
        output_dir=os.path.join(run_dir, 'convert'))
    shutil.rmtree(run_dir, ignore_errors=True)
  small, large = (runs[str(n)] for n in (args.num_images, MEMORY_SCALING_FACTOR * args.num_images))
  ok = small['status'] == large['status'] == 'ok' and small['peak_pss_mib'] > 0
  ratio = round(large['peak_pss_mib'] / small['peak_pss_mib'], 3) if ok else None
  return {
      'case': case.name,
      'runs': runs,
      'pss_ratio': ratio,
      'target': MEMORY_SCALING_TARGET,
      'passed': ratio is not None and ratio <= MEMORY_SCALING_TARGET
  }


# ---------------------------------------------------------------- peers


def peer_python(name):
  """The interpreter of peer `name`'s venv (None when it is not built)."""
  path = os.path.join(PROJECT_ROOT, '.peers', name, 'bin', 'python')
  return path if os.path.exists(path) else None


def peer_command(tool, manifest, out):
  """Command line of one tool doing the peer job, or None (venv not built)."""
  size = ['--height', str(PEER_JOB.height), '--width', str(PEER_JOB.width)]
  if tool == 'convert':
    return [sys.executable, '-m', 'pipeline.convert', '--manifest', manifest, '--output_dir',
            out, '--overwrite', '--encoding', 'jpeg', '--resize_mode', 'crop'] + size
  python = peer_python(tool)
  if python is None:
    return None
  return [python, os.path.join(PROJECT_ROOT, 'bench', 'peers', f'{tool}_peer.py'),
          '--manifest', manifest, '--output_dir', out] + size


def peer_images(tool, out, manifest):
  """(source, JPEG bytes) pairs of a tool's output, for the pixel error."""
  if tool == 'img2dataset':
    return webdataset_images(sorted(glob.glob(os.path.join(out, '*.tar'))))
  if tool == 'tfds':
    files = sorted(glob.glob(os.path.join(out, '**', '*.tfrecord*'), recursive=True))
    return tfrecord_images(files, '', image='image', key='key')
  return tfrecord_images(tfrecord_files(out), os.path.dirname(manifest))


def run_peers(manifest, num_images, args):
  """The peer job with convert and each peer: images/s, peak PSS, pixel error, ratios."""
  results = {}
  rows = read_manifest(manifest)
  for tool in ('convert',) + PEERS:
    out = os.path.join(args.workdir, 'runs', 'peers', tool)
    cmd = peer_command(tool, manifest, out)
    if cmd is None:
      results[tool] = {'status': 'skipped', 'reason': 'no venv: make bench-peers'}
      continue
    print(f'  peers: {PEER_TITLES[tool]} ...', flush=True)
    result = measure_stage(cmd, num_images, os.path.join(args.workdir, 'logs', f'peer-{tool}'),
                           args, output_dir=out)
    if result['status'] == 'ok':
      result['mean_pixel_error'] = mean_pixel_error(
          peer_images(tool, out, manifest), rows, PEER_JOB.encoding, PEER_JOB.width,
          PEER_JOB.height, crop=True)
    shutil.rmtree(out, ignore_errors=True)
    results[tool] = result
  ratios = stage_ratios(results, pairs=[('convert', tool) for tool in PEERS])
  return {'job': 'JPEG q95 224x224, centred crop', 'num_images': num_images,
          'tools': results, 'ratios': ratios}


def url_manifest(manifest, base, path):
  """The corpus manifest with each image as a URL under `base` (its path
  relative to the manifest's folder); -> `path`."""
  folder = os.path.dirname(os.path.abspath(manifest))
  with open(path, 'w', newline='') as out:
    writer = csv.writer(out)
    writer.writerow(['image', 'label'])
    for image, label in read_manifest(manifest):
      writer.writerow([f'{base}/{os.path.relpath(image, folder)}', label])
  return path


def run_url_peers(manifest, num_images, args):
  """The peer job over HTTP: the corpus served by a server on 127.0.0.1 (a
  thread of this process, the same for both tools), converted by convert
  (http:// image paths) and by img2dataset (its native webdataset output):
  images/s, peak PSS, ratio."""
  from pipeline.demo_sources import serving
  results = {}
  with serving(os.path.dirname(os.path.abspath(manifest))) as base:
    urls = url_manifest(manifest, base, os.path.join(args.workdir, 'urls.csv'))
    for tool in ('convert', 'img2dataset'):
      out = os.path.join(args.workdir, 'runs', 'urls', tool)
      cmd = peer_command(tool, urls, out)
      if cmd is None:
        results[tool] = {'status': 'skipped', 'reason': 'no venv: make bench-peers'}
        continue
      print(f'  urls: {PEER_TITLES[tool]} ...', flush=True)
      results[tool] = measure_stage(cmd, num_images, os.path.join(
          args.workdir, 'logs', f'url-{tool}'), args, output_dir=out)
      if results[tool]['status'] == 'ok':
        results[tool]['images_written'] = sum(1 for _ in (
            webdataset_images(sorted(glob.glob(os.path.join(out, '*.tar'))))
            if tool == 'img2dataset' else tfrecord_images(tfrecord_files(out), '')))
      shutil.rmtree(out, ignore_errors=True)
  return {'job': 'JPEG q95 224x224, centred crop, from http://127.0.0.1', 'num_images':
          num_images, 'tools': results,
          'ratios': stage_ratios(results, pairs=[('convert', 'img2dataset')])}


def print_peers(result):
  """The peer job's table: a line per tool, then convert's ratio to each."""
  print(f"\npeers: {result['job']}, {result['num_images']} images")
  print(f"  {'tool':<14}{'images/s':>10}{'seconds':>10}{'peak PSS MiB':>14}{'px err':>8}"
        '  status')
  for tool, r in result['tools'].items():
    status = r['status'] + (f" ({r['reason']})" if r['status'] == 'skipped' else '')
    print(f"  {PEER_TITLES[tool]:<14}{fmt(r.get('images_per_s'), '.1f'):>10}"
          f"{fmt(r.get('seconds'), '.2f'):>10}{fmt(r.get('peak_pss_mib'), '.1f'):>14}"
          f"{fmt(r.get('mean_pixel_error'), '.2f'):>8}  {status}")
  print('  convert is x faster than: ' + '   '.join(
      f"{PEER_TITLES[name.split('/')[1]]} {fmt(ratio, '.2f')}"
      for name, ratio in result['ratios'].items()))


# ---------------------------------------------------------------- corpus


def warm_page_cache(manifest):
  """Read every image once so no stage pays for cold disk reads."""
  for path, _ in read_manifest(manifest):
    with open(path, 'rb') as f:
      while f.read(1 << 20):
        pass


def prepare_corpus(args):
  """The manifest to use and a description of its corpus."""
  if args.manifest:
    manifest = os.path.abspath(args.manifest)
    info = {'manifest': manifest, 'num_images': len(read_manifest(manifest)), 'generated_now': 0}
  else:
    print(f'corpus: {args.num_images} images in {args.workdir} ...', flush=True)
    manifest, info = ensure_corpus(args.workdir, args.num_images)
  warm_page_cache(manifest)
  return manifest, info


# ---------------------------------------------------------------- report


def fmt(value, spec):
  """Format a number, or '-' when missing."""
  return '-' if value is None else format(value, spec)


def print_machine(machine):
  """One line: cores, CPU model, memory and the versions that matter."""
  print(f"\nmachine: {machine['cpu_count']} x {machine['cpu_model']}, "
        f"{machine['memory_gib']} GiB; Python {machine['python']}, "
        f"Pillow {machine['pillow']} (libjpeg-turbo {machine['libjpeg_turbo']}), "
        f"Beam {machine['apache_beam']}, TensorFlow {machine['tensorflow']}")


def print_case(name, result):
  """The table of one case: a line per stage, the ratios, then any problems."""
  case = CASES[name]
  print(f"\n{name}: {case.encoding} {case.width}x{case.height}, "
        f"{result['num_images']} images")
  print(f"  {'stage':<14}{'images/s':>10}{'seconds':>10}{'startup s':>11}"
        f"{'steady img/s':>14}{'peak PSS MiB':>14}{'procs':>7}{'other CPU%':>12}"
        f"{'px err':>8}  status")
  for stage, r in result['stages'].items():
    status = r['status']
    if status == 'failed':
      status += f" (exit {r['returncode']})"
    elif status == 'skipped':
      status += f" ({r['reason']})"
    print(f"  {STAGE_TITLES[stage]:<14}{fmt(r.get('images_per_s'), '.1f'):>10}"
          f"{fmt(r.get('seconds'), '.2f'):>10}{fmt(r.get('startup_seconds'), '.2f'):>11}"
          f"{fmt(r.get('steady_images_per_s'), '.1f'):>14}"
          f"{fmt(r.get('peak_pss_mib'), '.1f'):>14}"
          f"{fmt(r.get('max_processes'), 'd'):>7}"
          f"{fmt(r.get('other_cpu_percent'), '.0f'):>12}"
          f"{fmt(r.get('mean_pixel_error'), '.2f'):>8}  {status}")
  for title, key in (('whole run', 'ratios'), ('steady', 'steady_ratios')):
    print(f"  ratios, {title + ' (images/s):':<22}" +
          '   '.join(f"{STAGE_TITLES[top]}/{STAGE_TITLES[bottom]} "
                     f"{fmt(result[key][f'{top}/{bottom}'], '.2f')}" for top, bottom in RATIOS))
  if any(r.get('other_cpu_percent', 0) > DISTURBED_PERCENT for r in result['stages'].values()):
    print(f'  warning: other processes used over {DISTURBED_PERCENT}% of the CPU '
          'during some stages (other CPU%); those figures are low')
  records = result['stages']['bare'].get('report', {}).get('records')
  if records is not None and records != result['num_images']:
    print(f"  note: convert's output holds {records} records "
          f"for {result['num_images']} images")
  for stage, r in result['stages'].items():
    if r['status'] in ('failed', 'timeout'):
      print(f'  {STAGE_TITLES[stage]} stderr (last lines):')
      for line in r.get('stderr_tail', [])[-4:]:
        print(f'    {line}')


def print_memory_scaling(result):
  """Peak PSS of convert at both sizes and the verdict against the target."""
  print(f"\nmemory scaling (convert {result['case']}):")
  for n, r in result['runs'].items():
    print(f"  {n:>7} images: peak PSS {fmt(r.get('peak_pss_mib'), '.1f')} MiB, "
          f"{fmt(r.get('images_per_s'), '.1f')} images/s, "
          f"other CPU {fmt(r.get('other_cpu_percent'), '.0f')}%, {r['status']}")
  verdict = 'pass' if result['passed'] else 'FAIL'
  print(f"  ratio {fmt(result['pss_ratio'], '.2f')} (target <= "
        f"{result['target']}): {verdict}")


def save_json(figures, path):
  """Write the figures to `path` atomically."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  tmp = path + '.tmp'
  with open(tmp, 'w') as f:
    json.dump(figures, f, indent=2)
  os.replace(tmp, path)


# ---------------------------------------------------------------- main


def main(argv=None):
  args = parse_args(argv)
  args.workdir = os.path.abspath(args.workdir)
  if args.incremental:
    os.makedirs(args.workdir, exist_ok=True)
    incremental.main(args.workdir, args.num_images, args.timeout, args.json, args.repeat,
                     args.incremental_sizes)
    return
  os.makedirs(os.path.join(args.workdir, 'logs'), exist_ok=True)
  json_path = os.path.abspath(args.json or os.path.join(args.workdir, 'bench.json'))

  figures = {'machine': machine_info(), 'stage_notes': STAGE_NOTES, 'cases': {}}
  if args.cases:
    manifest, figures['corpus'] = prepare_corpus(args)
    num_images = figures['corpus']['num_images']
    for name in args.cases:
      figures['cases'][name] = run_case(CASES[name], manifest, num_images, args)
      save_json(figures, json_path)
  if args.memory_scaling:
    figures['memory_scaling'] = memory_scaling(args)
    save_json(figures, json_path)
  if args.peers:
    manifest, figures['corpus'] = prepare_corpus(args)
    figures['peers'] = run_peers(manifest, figures['corpus']['num_images'], args)
    save_json(figures, json_path)
    figures['url_peers'] = run_url_peers(manifest, figures['corpus']['num_images'], args)
    save_json(figures, json_path)

  print_machine(figures['machine'])
  for name, result in figures['cases'].items():
    print_case(name, result)
  if 'memory_scaling' in figures:
    print_memory_scaling(figures['memory_scaling'])
  if 'peers' in figures:
    print_peers(figures['peers'])
  if 'url_peers' in figures:
    print_peers(figures['url_peers'])
  save_json(figures, json_path)
  print(f'\nfigures: {json_path}')


if __name__ == '__main__':
  main()
