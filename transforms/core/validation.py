"""Checks of one record and of the totals, against dataset_info.json: plain functions."""

from __future__ import annotations

import dataclasses
import io
from typing import Optional

from google.protobuf.message import DecodeError
from PIL import Image
from PIL import UnidentifiedImageError

from transforms.core.example_proto import KIND_OF_DTYPE
from transforms.core.example_proto import parse_example
from transforms.core.spec import ImageSpec


@dataclasses.dataclass(frozen=True)
class Problem:
  """One finding: what is wrong, in which file and record (-1: whole file)."""
  kind: str
  file: str
  record: int
  detail: str

  def sort_key(self):
    return (self.file, self.record, self.kind)

  def to_json(self) -> dict:
    return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class RecordSummary:
  split: str
  shard: str
  record: int
  label: Optional[int]
  key: Optional[str]


@dataclasses.dataclass(frozen=True)
class Expected:
  """What every record must look like, from dataset_info.json."""
  schema: str
  feature_spec: dict
  image: ImageSpec
  label_map: tuple

  @classmethod
  def from_info(cls, info: dict) -> Expected:
    return cls(info['schema'], info['feature_spec'], ImageSpec.from_json(info['image']),
               tuple(info['label_map']))


def _scalar(features: dict, name: str):
  return features[name][1][0]


def check_features(features: dict, spec: dict) -> list:
  """Problems with presence, kind and scalar-ness of the declared features."""
  details = []
  for name, declared in spec.items():
    if name not in features:
      details.append(('missing_feature', f'feature {name!r} is missing'))
      continue
    kind, values = features[name]
    if kind != KIND_OF_DTYPE[declared['dtype']]:
      details.append(('wrong_type', f'feature {name!r} is {kind}, expected '
                      f'{KIND_OF_DTYPE[declared["dtype"]]}'))
    elif declared['shape'] == [] and len(values) != 1:
      details.append(('wrong_shape', f'feature {name!r} has {len(values)} values, expected 1'))
  return details


def check_image(data: bytes, encoding: str, height: int, width: int,
                channels: int) -> list:
  """Problems with the stored image against the expected H x W x C."""
  if height <= 0 or width <= 0:
    return [('wrong_image_size', f'image size {width}x{height} is not positive')]
  if encoding == 'raw':
    expected = height * width * channels
    if len(data) != expected:
      return [('wrong_image_size', f'raw image has {len(data)} bytes, expected '
               f'{height}x{width}x{channels} = {expected}')]
    return []
  try:
    image = Image.open(io.BytesIO(data))
    image.load()
  except UnidentifiedImageError:
    return [('undecodable_image', f'{encoding} image does not decode: not an image '
             f'Pillow can read ({len(data)} bytes, starts with {data[:8]!r})')]
  except Exception as error:  # any decoder failure is a finding, not a crash
    return [('undecodable_image', f'{encoding} image does not decode: {error}')]
  problems = []
  if image.format != encoding.upper():
    problems.append(('wrong_image_format', f'image is {image.format}, expected {encoding}'))
  if image.size != (width, height):
    problems.append(('wrong_image_size', f'image decodes to {image.size[0]}x'
                     f'{image.size[1]}, expected {width}x{height}'))
  if len(image.getbands()) != channels:
    problems.append(('wrong_channels', f'image has {len(image.getbands())} channels, '
                     f'expected {channels}'))
  return problems


def check_label(label: int, text: Optional[str], label_map: tuple) -> list:
  if not 0 <= label < len(label_map):
    return [('label_out_of_range', f'label {label} is outside 0..{len(label_map) - 1}')]
  if text is not None and text != label_map[label]:
    return [('label_mismatch', f'label {label} has text {text!r}, the label map says '
             f'{label_map[label]!r}')]
  return []


def check_record(data: bytes, expected: Expected) -> tuple:
  """Serialized Example -> (label or None, key or None, [(kind, detail)])."""
  try:
    features = parse_example(data)
  except DecodeError as error:
    return None, None, [('unparseable_record', f'not a tf.train.Example: {error}')]
  problems = check_features(features, expected.feature_spec)
  if problems:
    return None, None, problems
  spec = expected.image
  if expected.schema == 'seed':
    label = _scalar(features, 'label')
    problems += check_image(_scalar(features, 'img_raw'), 'raw', spec.height,
                            spec.width, spec.channels)
    return label, None, problems + check_label(label, None, expected.label_map)
  label = _scalar(features, 'image/class/label')
  key = _scalar(features, 'image/key').decode('utf-8', 'replace')
  height, width = _scalar(features, 'image/height'), _scalar(features, 'image/width')
  channels = _scalar(features, 'image/channels')
  stored_format = _scalar(features, 'image/format').decode('utf-8', 'replace')
  if stored_format != spec.encoding:
    problems.append(('wrong_image_format', f'image/format is {stored_format!r}, '
                     f'expected {spec.encoding!r}'))
  if spec.fixed_size and (height, width) != (spec.height, spec.width):
    problems.append(('wrong_image_size', f'image/height x width is {height}x{width}, '
                     f'expected {spec.height}x{spec.width}'))
  if channels != spec.channels:
    problems.append(('wrong_channels', f'image/channels is {channels}, expected '
                     f'{spec.channels}'))
  problems += check_image(_scalar(features, 'image/encoded'), spec.encoding,
                          height, width, spec.channels)
  text = _scalar(features, 'image/class/text').decode('utf-8', 'replace')
  return label, key, problems + check_label(label, text, expected.label_map)


def check_records(records: list, expected: Expected) -> list:
  """check_record of each record; a record whose check raised gets an
  unexpected_error problem instead (the others are still checked)."""
  results = []
  for data in records:
    try:
      results.append(check_record(data, expected))
    except Exception as error:  # pylint: disable=broad-except  (one record's problem)
      results.append(unexpected_check_error(error))
  return results


def unexpected_check_error(error: Exception) -> tuple:
  """The check_record result for a record whose check failed unexpectedly."""
  return None, None, [('unexpected_error', f'checking the record failed: '
                                           f'{type(error).__name__}: {error}')]


_SHARD, _LABEL, _KIND = 'shard', 'label', 'kind'


def summary_tallies(summary: RecordSummary) -> list:
  """The counts one checked record adds to: its shard and its label."""
  return [((_SHARD, (summary.split, summary.shard)), 1), ((_LABEL, summary.label), 1)]


def problem_tally(problem: Problem) -> tuple:
  return (_KIND, problem.kind), 1


def split_tallies(sums: dict) -> tuple:
  """{tally key: sum} -> ({(split, shard): records}, {label: records},
  {problem kind: problems})."""
  parts = {_SHARD: {}, _LABEL: {}, _KIND: {}}
  for (kind, value), count in sums.items():
    parts[kind][value] = count
  return parts[_SHARD], parts[_LABEL], parts[_KIND]


def count_problems(info: dict, counts: dict, expected_count: Optional[int]) -> list:
  """Per-split and total count mismatches. counts: {split: examples read}."""
  problems = []
  for split, declared in info['splits'].items():
    found = counts.get(split, 0)
    if found != declared['num_examples']:
      problems.append(Problem('count_mismatch', split, -1,
                              f'split {split!r} has {found} examples, dataset_info.json '
                              f'says {declared["num_examples"]}'))
  total = sum(counts.values())
  declared_total = sum(s['num_examples'] for s in info['splits'].values())
  if info.get('num_examples', declared_total) != declared_total:
    problems.append(Problem('count_mismatch', '', -1,
                            f'dataset_info.json num_examples {info["num_examples"]} is '
                            f'not the sum of its splits ({declared_total})'))
  if expected_count is not None and total != expected_count:
    problems.append(Problem('count_mismatch', '', -1,
                            f'{total} examples in total, --expected_count is {expected_count}'))
  return problems
