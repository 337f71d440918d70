"""Sizing a convert job on paper, from the last `make bench` figures.

  python -m bench.plan --images N --workers W --vcpus V [--case raw300|jpeg224]
      [--bench_json PATH] [--startup_minutes M]

Reads the JSON `make bench` writes (default /tmp/img2tfrecord-bench/bench.json)
and prints: the measured per-core rate and memory, the time on W Dataflow
workers of V vCPUs each, the output size and a shard count, and what this
machine can do locally (time, manifest rows per GiB of memory). Every figure
comes from that JSON except the assumptions printed as such.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

DEFAULT_JSON = '/tmp/img2tfrecord-bench/bench.json'
MIB = 2**20
GIB = 2**30
SHARD_TARGET_MIB = 128  # convert's --shard_size_mb default; tf.data reads 100-200 MB shards well
DATAFLOW_STARTUP_MINUTES = 4.0  # assumed, not measured here: worker VMs boot and install
DISTURBED_PERCENT = 10  # as bench.bench: above this share of other CPU use, rates are low


class PlanError(Exception):
  """The bench JSON lacks what the estimate needs."""


def _convert_stage(figures: dict, case: str) -> dict:
  try:
    stage = figures['cases'][case]['stages']['convert']
  except KeyError:
    raise PlanError(f'the bench JSON has no convert figures for case {case!r} '
                    f'(cases: {", ".join(figures.get("cases", {})) or "none"}); '
                    f'run make bench BENCH_ARGS="--cases {case}"')
  if stage.get('status') != 'ok':
    raise PlanError(f'convert did not finish in the bench for case {case!r}: '
                    f'{stage.get("status")}')
  return stage


def per_row_memory(figures: dict):
  """(bytes per manifest row, MiB at no rows) from --memory_scaling, or None."""
  runs = figures.get('memory_scaling', {}).get('runs', {})
  points = sorted((int(n), r['peak_pss_mib']) for n, r in runs.items()
                  if r.get('status') == 'ok' and r.get('peak_pss_mib'))
  if len(points) < 2 or points[-1][0] == points[0][0]:
    return None
  (n1, p1), (n2, p2) = points[0], points[-1]
  per_row = max((p2 - p1) * MIB / (n2 - n1), 1.0)
  return per_row, p1 - n1 * per_row / MIB


def estimate(figures: dict, images: int, workers: int, vcpus: int, case: str = 'raw300',
             startup_minutes: float = DATAFLOW_STARTUP_MINUTES) -> dict:
  """The numbers `render` prints, all derived from the bench figures."""
  stage = _convert_stage(figures, case)
  cores = figures['machine']['cpu_count']
  measured = figures['cases'][case]['num_images']
  rate = stage.get('steady_images_per_s') or stage['images_per_s']
  per_core = rate / cores
  bytes_per_image = stage['output']['mib'] * MIB / measured
  output_bytes = images * bytes_per_image
  shards = max(1, math.ceil(output_bytes / (SHARD_TARGET_MIB * MIB)))
  dataflow_seconds = images / (per_core * workers * vcpus)
  result = {
      'case': case,
      'bench_images': measured,
      'bench_cores': cores,
      'rate_per_core': per_core,
      'peak_pss_mib': stage['peak_pss_mib'],
      'startup_seconds': stage.get('startup_seconds', 0.0),
      'bytes_per_image': bytes_per_image,
      'images': images,
      'workers': workers,
      'vcpus': vcpus,
      'dataflow_minutes': startup_minutes + dataflow_seconds / 60,
      'dataflow_vcpu_hours': workers * vcpus * (startup_minutes / 60 + dataflow_seconds / 3600),
      'output_gib': output_bytes / GIB,
      'num_shards': shards,
      'shard_mib': output_bytes / shards / MIB,
      'local_minutes': (stage.get('startup_seconds', 0.0) + images / rate) / 60,
      'machine_gib': figures['machine'].get('memory_gib'),
      'other_cpu_percent': stage.get('other_cpu_percent', 0.0),
  }
  memory = per_row_memory(figures)
  if memory:
    per_row, base_mib = memory
    result.update(bytes_per_row=per_row, base_mib=base_mib,
                  rows_per_gib=GIB / per_row,
                  local_peak_gib=(base_mib * MIB + images * per_row) / GIB)
    if result['machine_gib']:
      usable = result['machine_gib'] * GIB * 0.8 - base_mib * MIB
      result['local_max_rows'] = int(max(usable, 0) / per_row)
  return result


def render(e: dict, startup_minutes: float = DATAFLOW_STARTUP_MINUTES) -> str:
  lines = [
      f"From the bench ({e['case']}, {e['bench_images']:,} images on {e['bench_cores']} "
      f"cores): {e['rate_per_core']:.0f} images/s per core once started, peak PSS "
      f"{e['peak_pss_mib']:.0f} MiB, {e['bytes_per_image'] / 1e3:.1f} KB of output per image.",
      f"Dataflow, {e['images']:,} images on {e['workers']} workers x {e['vcpus']} vCPUs "
      f"(assuming a vCPU converts as fast as a bench core, and {startup_minutes:g} min for "
      f"workers to start): {e['dataflow_minutes']:.0f} min, "
      f"{e['dataflow_vcpu_hours']:.1f} vCPU-hours.",
      f"Output: {e['output_gib']:.1f} GiB; --num_shards {e['num_shards']} gives "
      f"{e['shard_mib']:.0f} MiB per shard (aim for 100-200 MB: fewer, larger files for "
      f"tf.data; at least as many shards as reading hosts).",
      f"Locally, on {e['bench_cores']} cores as in the bench: "
      f"{e['local_minutes']:.0f} min for {e['images']:,} images.",
  ]
  if e['other_cpu_percent'] > DISTURBED_PERCENT:
    lines.append(f"Warning: other processes used {e['other_cpu_percent']:.0f}% of the CPU "
                 f"during the bench's convert: its rate, and every time above, is too "
                 f"pessimistic; rerun make bench on an idle machine.")
  if 'bytes_per_row' in e:
    lines.append(
        f"Local memory: {e['bytes_per_row'] / 1e3:.1f} KB per manifest row "
        f"({e['rows_per_gib']:,.0f} rows per GiB) over {e['base_mib']:.0f} MiB: "
        f"{e['local_peak_gib']:.2f} GiB peak for {e['images']:,} rows"
        + (f"; this machine ({e['machine_gib']} GiB, 80% usable) holds about "
           f"{e['local_max_rows']:,} rows." if 'local_max_rows' in e else '.'))
  else:
    lines.append('Local memory per manifest row: not measured (make bench '
                 'BENCH_ARGS=--memory_scaling).')
  return '\n'.join(lines)


def _positive_int(text: str) -> int:
  value = int(text)
  if value < 1:
    raise argparse.ArgumentTypeError(f'{text} is not >= 1')
  return value


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog='python -m bench.plan',
                                   description=__doc__.strip().splitlines()[0])
  parser.add_argument('--images', type=_positive_int, required=True)
  parser.add_argument('--workers', type=_positive_int, required=True)
  parser.add_argument('--vcpus', type=_positive_int, required=True,
                      help='vCPUs per worker (n2-standard-4: 4)')
  parser.add_argument('--case', default='raw300', help='bench case: raw300 or jpeg224')
  parser.add_argument('--bench_json', default=DEFAULT_JSON,
                      help=f'figures written by make bench (default {DEFAULT_JSON})')
  parser.add_argument('--startup_minutes', type=float, default=DATAFLOW_STARTUP_MINUTES,
                      help='assumed time for Dataflow workers to start')
  args = parser.parse_args(argv)
  if not os.path.exists(args.bench_json):
    print(f'error: {args.bench_json} does not exist: run make bench first', file=sys.stderr)
    return 2
  try:
    with open(args.bench_json, encoding='utf-8') as handle:
      figures = json.load(handle)
    print(render(estimate(figures, args.images, args.workers, args.vcpus, args.case,
                          args.startup_minutes), args.startup_minutes))
  except (PlanError, ValueError, KeyError) as error:
    print(f'error: {args.bench_json}: {error}', file=sys.stderr)
    return 2
  return 0


if __name__ == '__main__':
  sys.exit(main())
