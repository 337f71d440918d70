"""dataset_info.json: the contract between convert, validate and readers."""

from __future__ import annotations

import dataclasses
import json
from typing import Optional

from transforms.core import info_shape
from transforms.core.labels import DEFAULT_NORMALIZE
from transforms.core.spec import FORMAT_VERSION
from transforms.core.spec import READABLE_FORMAT_VERSIONS
from transforms.core.spec import SINK_TFRECORDIO
from transforms.core.spec import SOURCES_FORMAT_VERSION
from transforms.core.spec import ExampleSpec
from transforms.core.spec import ImageSpec

# The most of a dataset_info.json any command reads (1,000,000 classes make
# 37 MB): its readers read at most one byte more, and parse_info refuses that.
# A 20 GB one (sparse: no disk) was read whole: validate and inspect were
# killed by the kernel at 23 GB, with no message.
MAX_INFO_BYTES = 256 << 20


@dataclasses.dataclass(frozen=True)
class InfoSettings:
  """What a run's options fix in dataset_info.json, known before any row is read."""
  image: ImageSpec
  example: ExampleSpec
  max_error_rate: float
  config: dict  # the 'config' section: paths, schema, shards, split, extra features
  options: dict = dataclasses.field(default_factory=dict)  # every option in effect
  config_file: Optional[str] = None  # the --config file they were merged from
  label_normalize: frozenset = DEFAULT_NORMALIZE  # --label_normalize modes (label warnings)
  sink: Optional[dict] = None  # sink_info(); None: not recorded
  engine: dict = dataclasses.field(default_factory=dict)  # what ran it (runners.engine_record)
  # --previous_dataset: {'previous_dataset', 'previous_run_id', 'missing'}; None: not given
  reuse: Optional[dict] = None
  # {'rows': [file_version of each manifest file], 'labels': [... of the label
  # manifest's]}; None: not all local (or --image_dir)
  manifest_versions: Optional[dict] = None


def sink_info(sink: str, write_index: bool, shuffle: bool) -> dict:
  """dataset_info.json's `sink`: which writer wrote the shards, and what a
  reader may count on: the same bytes on every run (deterministic), index
  files beside the shards, the order of the records in a split."""
  if sink == SINK_TFRECORDIO:
    return {'name': sink, 'deterministic': False, 'index_files': False,
            'record_order': 'arrival'}
  return {'name': sink, 'deterministic': True, 'index_files': write_index,
          'record_order': 'shuffled' if shuffle else 'manifest'}


def build_info(settings: InfoSettings, *, label_names: list, splits: dict,
               num_manifest_rows: int, rejected: dict, num_label_rows: Optional[int],
               label_rows_rejected: dict, skipped: Optional[tuple] = None,
               label_warnings: Optional[dict] = None,
               content_duplicates: Optional[dict] = None, reuse: Optional[dict] = None,
               run_id: Optional[str] = None) -> dict:
  """Assembles dataset_info.json's content.

  `splits`: {name: {'num_examples', 'num_bytes', 'shards', 'examples_per_class',
  'imbalance_ratio'}};
  `label_warnings`: labels.label_warnings(); `content_duplicates`: the report
  of transforms.core.duplicates;
  `rejected`: {'stage/code': count} for image-manifest rows;
  `label_rows_rejected`: the same for label-manifest rows (two manifests);
  `skipped`: with --image_dir, (files skipped for their extension, the first names).
  `reuse`: with --previous_dataset, the reuse section (core/reuse.section);
  `run_id`: the run's (its lock's) id, what a later run's reuse section names.
  """
  num_rejected = sum(rejected.values())
  num_examples = sum(s['num_examples'] for s in splits.values())
  error_rate = num_rejected / num_manifest_rows if num_manifest_rows else 0.0
  config = settings.config
  info = {
      'format_version': FORMAT_VERSION,
      'schema': settings.example.schema,
      'feature_spec': settings.example.feature_spec(settings.image),
      'image': settings.image.to_json(),
      'compression': config['compression'],
      **({'sink': settings.sink} if settings.sink is not None else {}),
      # The sidecars' format (splits.*.sources): a contract between runs.
      **({'sources_format_version': SOURCES_FORMAT_VERSION}
         if settings.sink and settings.sink['deterministic'] else {}),
      'num_classes': len(label_names),
      'label_map': list(label_names),
      'splits': splits,
      'num_examples': num_examples,
      'num_manifest_rows': num_manifest_rows,
      'num_rejected': num_rejected,
      'rejected_by_reason': dict(sorted(rejected.items())),
      'error_rate': error_rate,
      'max_error_rate': settings.max_error_rate,
      'over_budget': error_rate > settings.max_error_rate,  # and over_budget() once complete
      'label_warnings': label_warnings or {},
      'content_duplicates': content_duplicates or {},
      'config': config,
      'options': settings.options,
      'config_file': settings.config_file,
      'engine': settings.engine,
  }
  if num_label_rows is not None:
    info['num_label_manifest_rows'] = num_label_rows
    info['num_label_manifest_rows_rejected'] = sum(label_rows_rejected.values())
    info['label_manifest_rejected_by_reason'] = dict(sorted(label_rows_rejected.items()))
  if skipped is not None:
    info['num_skipped_files'] = skipped[0]
    info['skipped_files'] = sorted(skipped[1])
  if settings.manifest_versions is not None:
    info['manifest_versions'] = settings.manifest_versions
  if run_id is not None:
    info['run_id'] = run_id
  if reuse is not None:
    info['reuse'] = reuse
  return info


def annotations_all_rejected(info: dict) -> int:
  """How many annotations a detection dataset read when every one of them
  was rejected and none reached an image (0 otherwise, and for any other
  dataset): a COCO file whose image_ids are strings, or whose every box is
  bad, converted each image without objects, exit 0, validate OK. A box the
  crop dropped was read and kept first: it counts as reaching its image."""
  detection = info.get('detection') or {}
  rejected = detection.get('num_rejected_annotations') or 0
  kept = (detection.get('num_objects') or 0) + (
      (detection.get('dropped_boxes') or {}).get('crop_visibility') or 0)
  return rejected if rejected and not kept else 0


def over_budget(info: dict) -> bool:
  """dataset_info.json's over_budget (exit 3): rows rejected above
  --max_error_rate, or every annotation of a detection dataset rejected (a
  rate of 1, which only --max_error_rate 1 allows). Dropped or rejected
  annotations are no rows, and real sets have a few (COCO's degenerate
  boxes, which Model Garden skips too): only all of them counts."""
  budget = info['max_error_rate']
  return info['error_rate'] > budget or bool(annotations_all_rejected(info) and budget < 1)


def over_budget_reason(info: dict) -> str:
  """Why a dataset is over its budget, in a sentence ('' within it)."""
  if info['error_rate'] > info['max_error_rate']:
    return (f'Error rate {info["error_rate"]:.2%} is above --max_error_rate '
            f'{info["max_error_rate"]:.2%}')
  count = annotations_all_rejected(info)
  if count and info['max_error_rate'] < 1:
    return (f'Every one of the {count} annotation(s) was rejected (rejected.jsonl), so no '
            f'image has an object (--max_error_rate 1 accepts that)')
  return ''


class InfoError(Exception):
  """dataset_info.json is missing or unusable."""


class RowsLost(Exception):
  """A run's counts do not add up: rows read that ended as no Example and no
  rejected line (or as both). A bug of the run: nothing is published."""


def check_every_row_ended(info: dict) -> None:
  """RowsLost unless every row read ended as one Example or one rejected
  row (num_manifest_rows = num_examples + num_rejected), the promise
  validate checks too (row_accounting): a row lost by the pipeline made an
  exit 0 before, caught only by a later validate."""
  rows, examples, rejected = (info['num_manifest_rows'], info['num_examples'],
                              info['num_rejected'])
  if rows != examples + rejected:
    raise RowsLost(f'{rows} row(s) were read, but {examples} Example(s) and {rejected} '
                   f'rejected row(s) make {examples + rejected}: '
                   f'{abs(rows - examples - rejected)} row(s) '
                   f'{"lost" if rows > examples + rejected else "counted twice"} by the run '
                   f'(a bug: nothing was published)')


def how_changed(read: dict, now: Optional[dict]) -> Optional[str]:
  """How a folder's dataset_info.json differs from the `read` one a command
  began with (`now`: read again, None if gone), in the words its message
  gives; None if it is the same. A convert removes it before any shard and
  writes its own (with a run id of its own) last, so any difference means a
  convert wrote the folder meanwhile (validate's report and export's
  metadata then describe a dataset no longer there)."""
  if now is None:
    return 'its dataset_info.json is gone'
  return 'its dataset_info.json was rewritten' if now != read else None


def parse_info(text, path: str) -> dict:
  """The text of dataset_info.json (str, or the file's bytes) -> its dict;
  InfoError if it is unusable: not UTF-8, not JSON (also JSON nested too deeply
  for the parser), not an object, lacking a field or holding one of another
  shape than info_shape.INFO_SHAPE describes (the message names the field and
  its value)."""
  if len(text) > MAX_INFO_BYTES:
    raise InfoError(f'{path} is over {MAX_INFO_BYTES} bytes, more than any dataset_info.json '
                    f'convert writes (1,000,000 classes take 37 MB): not read')
  if isinstance(text, bytes):
    try:
      text = text.decode('utf-8')
    except UnicodeDecodeError as error:
      raise InfoError(f'{path} is not UTF-8 text: {error}') from None
  try:
    info = json.loads(text)
  except json.JSONDecodeError as error:
    raise InfoError(f'{path} is not valid JSON: {error}')
  except RecursionError:  # json's own recursion, on arrays nested thousands deep
    raise InfoError(f'{path} is not valid JSON: nested too deeply') from None
  if not isinstance(info, dict):
    raise InfoError(f'{path} does not hold a JSON object')
  missing = [name for name in info_shape.REQUIRED if name not in info]
  if missing:
    raise InfoError(f'{path} lacks {", ".join(missing)}')
  if info['format_version'] not in READABLE_FORMAT_VERSIONS or isinstance(
      info['format_version'], bool):
    raise InfoError(f'{path} has format_version {info["format_version"]}; '
                    f'this tool reads {", ".join(map(str, READABLE_FORMAT_VERSIONS))}')
  problem = info_shape.problem(info)
  if problem:
    raise InfoError(f'{path}: {problem}')
  return info
