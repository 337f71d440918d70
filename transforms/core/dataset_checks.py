"""validate's checks of dataset_info.json's own accounting, against the files
beside the shards and against what the records hold: plain functions.

- the rows: num_manifest_rows = examples + the rejected.jsonl lines that are
  manifest rows (label-manifest lines are not), by reason as well, and no
  two of those lines of one row (rejected_rows);
- the examples read against each split's num_examples, the total against
  their sum and --expected_count, and an empty dataset (count_problems);
- the numbers that follow from others: num_classes from the label map,
  error_rate and over_budget from the rows, each num_..._rejected from its
  reasons; each split's num_bytes against its shards' sizes;
- label_map.txt line for line against the recorded label map, and
  label_map.pbtxt (--schema detection) against it too;
- (in class_counts.py) each split's examples_per_class, and detection's
  object counts, against the labels of its records;
- with a hash --split, each record's split recomputed from its key (or, with
  --split_by content, from its image's SHA-256).
"""

from __future__ import annotations

from collections.abc import Iterable
import dataclasses
import json
import math
from typing import Optional

from transforms.core import detection_checks
from transforms.core import line_caps
from transforms.core import rejected_rows
from transforms.core.annotations import label_map_pbtxt
from transforms.core.dataset_info import MAX_INFO_BYTES
from transforms.core.dataset_info import annotations_all_rejected
from transforms.core.dataset_info import over_budget
from transforms.core.rejects import STAGE_LABEL_MANIFEST
from transforms.core.spec import LABEL_MAP
from transforms.core.spec import LABEL_MAP_PBTXT
from transforms.core.spec import REJECTED_FILE
from transforms.core.splits import HashSplit
from transforms.core.splits import hash_split
from transforms.core.validation import Problem

ROW_ACCOUNTING = 'row_accounting'
COUNT_MISMATCH = 'count_mismatch'
LABEL_MAP_MISMATCH = 'label_map_mismatch'
WRONG_SPLIT = 'wrong_split'


@dataclasses.dataclass
class RejectedLines:
  """rejected.jsonl counted by reason ('stage/code')."""
  rows: dict = dataclasses.field(default_factory=dict)  # image-manifest rows
  label_rows: dict = dataclasses.field(default_factory=dict)  # label-manifest lines
  unreadable: list = dataclasses.field(default_factory=list)  # (line number, why)
  missing: bool = False  # no rejected.jsonl (an object store's when nothing was rejected)
  repeated: list = dataclasses.field(default_factory=list)  # the first RepeatedRows
  num_repeated: int = 0  # rows with more than one line


def _counts_as_row(record: dict, config: dict) -> bool:
  """Label-manifest lines say counts_as_row false; lines written before they
  did are told by their stage, or by their source being the label manifest."""
  if 'counts_as_row' in record:
    return record['counts_as_row'] is not False
  label_manifest = config.get('label_manifest')
  return record['stage'] != STAGE_LABEL_MANIFEST and not (
      label_manifest and record.get('source') == label_manifest
      and label_manifest != config.get('manifest'))


def count_rejected(lines: Iterable[bytes], info: dict,
                   run_entries: int = rejected_rows.RUN_ENTRIES) -> RejectedLines:
  """The lines of rejected.jsonl -> RejectedLines. A line that is not a JSON
  object with a stage and a code is unreadable (and counted as no reason).
  Rows with more than one line are found in one pass, in bounded memory
  (rejected_rows.repeated_rows: runs of `run_entries` lines)."""
  counted = RejectedLines()
  counted.repeated, counted.num_repeated = rejected_rows.repeated_rows(
      _counted_rows(lines, info.get('config') or {}, counted), run_entries)
  return counted


def side_text(files, path: str) -> str:
  """The text of a label map beside the shards (`files`: a FileAccess);
  ValueError past MAX_INFO_BYTES, which its names, also in dataset_info.json,
  never take: a 2 GB one (sparse) was read whole, validate's MemoryError."""
  data = files.read_at_most(path, MAX_INFO_BYTES)
  if len(data) > MAX_INFO_BYTES:
    raise ValueError(f'over {MAX_INFO_BYTES} bytes: not read')
  return data.decode('utf-8')


def capped_lines(stream):
  """The lines of a binary stream, each with at most line_caps.MAX_LINE_BYTES
  in memory (a longer one: a LongLine): a rejected.jsonl of one 2 GB line
  (sparse: no disk) was read whole, validate's MemoryError."""
  while True:
    line = line_caps.read_line(stream)
    if not line:
      return
    yield line


def _counted_rows(lines: Iterable[bytes], config: dict, counted: RejectedLines):
  """Counts each line into `counted` as it goes, and yields (source, line,
  number in the file) of each line that counts as a row and names one."""
  for number, line in enumerate(lines, 1):
    if isinstance(line, line_caps.LongLine):  # never held whole
      counted.unreadable.append((number, f'a line of {line.length} bytes, over '
                                         f'{line_caps.MAX_LINE_BYTES}: not read'))
      continue
    if not line.strip():
      continue
    try:
      record = json.loads(line)
      reason = f'{record["stage"]}/{record["code"]}'
    except (ValueError, TypeError, KeyError) as error:  # ValueError: bad JSON or UTF-8
      counted.unreadable.append((number, f'{type(error).__name__}: {error}'))
      continue
    row = _counts_as_row(record, config)
    into = counted.rows if row else counted.label_rows
    into[reason] = into.get(reason, 0) + 1
    identity = rejected_rows.row_identity(record) if row else None
    if identity is not None:
      yield *identity, number


def _declared_examples(info: dict) -> int:
  return info.get('num_examples', sum(s['num_examples'] for s in info['splits'].values()))


def _by_reason(found: dict, declared: dict, what: str, field: str) -> list:
  return [Problem(ROW_ACCOUNTING, REJECTED_FILE, -1,
                  f'{REJECTED_FILE} holds {found.get(reason, 0)} {what} rejected as {reason}; '
                  f"dataset_info.json's {field} says {declared.get(reason, 0)}")
          for reason in sorted(set(found) | set(declared))
          if found.get(reason, 0) != declared.get(reason, 0)]


def row_accounting_problems(info: dict, rejected: RejectedLines) -> list:
  """Every manifest row is an example or a line of rejected.jsonl: the
  numbers of dataset_info.json against each other and against the file."""
  problems = [Problem(ROW_ACCOUNTING, REJECTED_FILE, -1,
                      f'line {number} is not a JSON object with a stage and a code ({why})')
              for number, why in rejected.unreadable]
  problems += [Problem(ROW_ACCOUNTING, REJECTED_FILE, -1, row.detail())
               for row in rejected.repeated]
  if rejected.num_repeated > len(rejected.repeated):
    problems.append(Problem(
        ROW_ACCOUNTING, REJECTED_FILE, -1,
        f'{rejected.num_repeated - len(rejected.repeated)} more row(s) of another source '
        f'or line have more than one line each'))
  rows = sum(rejected.rows.values()) + len(rejected.unreadable)
  if 'num_manifest_rows' in info:
    examples = _declared_examples(info)
    if info['num_manifest_rows'] != examples + rows:
      missing = f' ({REJECTED_FILE} is missing)' if rejected.missing else ''
      problems.append(Problem(
          ROW_ACCOUNTING, '', -1,
          f"dataset_info.json's num_manifest_rows is {info['num_manifest_rows']}, but its "
          f'{examples} examples and the {rows} rejected row(s) in {REJECTED_FILE}{missing} '
          f'make {examples + rows}'))
  declared = info.get('rejected_by_reason')
  if declared is not None:
    if info.get('num_rejected', sum(declared.values())) != sum(declared.values()):
      problems.append(Problem(
          ROW_ACCOUNTING, '', -1,
          f"dataset_info.json's num_rejected {info['num_rejected']} is not the sum of its "
          f'rejected_by_reason ({sum(declared.values())})'))
    problems += _by_reason(rejected.rows, declared, 'row(s)', 'rejected_by_reason')
  field = ('rejected_annotations_by_reason' if 'rejected_annotations_by_reason' in info
           else 'label_manifest_rejected_by_reason')  # --schema detection: annotations
  problems += _by_reason(rejected.label_rows, info.get(field, {}),
                         'annotation(s)' if field.endswith('annotations_by_reason')
                         else 'label-manifest line(s)', field)
  return problems


def _sum_problems(total: str, declared, reasons: str, by_reason) -> list:
  """A total of dataset_info.json (`declared`, at `total`) against the sum of
  its counts by reason (`by_reason`, at `reasons`), when it has both."""
  if declared is None or by_reason is None or declared == sum(by_reason.values()):
    return []
  return [Problem(ROW_ACCOUNTING, '', -1,
                  f"dataset_info.json's {total} is {declared}, but its {reasons} adds up "
                  f'to {sum(by_reason.values())}')]


def _rate(value) -> str:
  return f'{value:.6g}'


def _num_classes_problems(info: dict) -> list:
  names = info['label_map']
  detection = info['schema'] == 'detection'
  classes = max((i for i, name in enumerate(names) if name), default=0) if detection else len(names)
  if info.get('num_classes', classes) == classes:
    return []
  found = (f'the largest class id of its label_map is {classes}' if detection
           else f'its label_map has {classes} class(es)')
  return [Problem(COUNT_MISMATCH, '', -1,
                  f"dataset_info.json's num_classes is {info['num_classes']}, but {found}")]


def _error_rate_problems(info: dict) -> list:
  problems, rate = [], info.get('error_rate')
  if 'num_rejected' in info and 'num_manifest_rows' in info:
    rows, rejected = info['num_manifest_rows'], info['num_rejected']
    rate = rejected / rows if rows else 0.0  # as convert computes it
    if 'error_rate' in info and not math.isclose(info['error_rate'], rate, rel_tol=1e-9,
                                                  abs_tol=1e-12):
      problems.append(Problem(
          ROW_ACCOUNTING, '', -1,
          f"dataset_info.json's error_rate is {_rate(info['error_rate'])}, but its "
          f'num_rejected / num_manifest_rows is {rejected} / {rows} = {_rate(rate)}'))
  budget = info.get('max_error_rate')
  if 'over_budget' not in info or budget is None or rate is None:
    return problems
  expected = over_budget({**info, 'error_rate': rate})
  if info['over_budget'] != expected:
    all_rejected = annotations_all_rejected(info)
    why = (f"its error rate {_rate(rate)} is {'above' if rate > budget else 'within'} its "
           f'max_error_rate {_rate(budget)}')
    if all_rejected and rate <= budget:
      why = (f'every one of its {all_rejected} annotation(s) was rejected (no image has an '
             f'object) and its max_error_rate is {_rate(budget)}')
    problems.append(Problem(
        ROW_ACCOUNTING, '', -1,
        f"dataset_info.json's over_budget is {str(info['over_budget']).lower()}, but {why}"))
  return problems


def declared_number_problems(info: dict) -> list:
  """The numbers of dataset_info.json that follow from its others: num_classes
  from the label map (its length; --schema detection: the largest id),
  error_rate from num_rejected / num_manifest_rows, over_budget from that rate
  and max_error_rate, and the totals of rejected label-manifest lines
  (--schema detection: annotations, and detection.dropped_boxes) from their
  reasons. A number the file lacks is not compared (a dataset written before
  it existed)."""
  return (_num_classes_problems(info) + _error_rate_problems(info)
          + _sum_problems('num_label_manifest_rows_rejected',
                          info.get('num_label_manifest_rows_rejected'),
                          'label_manifest_rejected_by_reason',
                          info.get('label_manifest_rejected_by_reason'))
          + _sum_problems('detection.num_rejected_annotations',
                          (info.get('detection') or {}).get('num_rejected_annotations'),
                          'rejected_annotations_by_reason',
                          info.get('rejected_annotations_by_reason'))
          + [Problem(ROW_ACCOUNTING, '', -1, f"dataset_info.json's {what}")
             for what in detection_checks.dropped_boxes_problems(
                 info.get('detection') or {}, info.get('rejected_annotations_by_reason'))])


def count_problems(info: dict, counts: dict, expected_count: Optional[int]) -> list:
  """Per-split and total count mismatches. counts: {split: examples read}."""
  problems = []
  for split, declared in info['splits'].items():
    found = counts.get(split, 0)
    if found != declared['num_examples']:
      problems.append(Problem(COUNT_MISMATCH, split, -1,
                              f'split {split!r} has {found} examples, dataset_info.json '
                              f'says {declared["num_examples"]}'))
  total = sum(counts.values())
  declared_total = sum(s['num_examples'] for s in info['splits'].values())
  if info.get('num_examples', declared_total) != declared_total:
    problems.append(Problem(COUNT_MISMATCH, '', -1,
                            f'dataset_info.json num_examples {info["num_examples"]} is '
                            f'not the sum of its splits ({declared_total})'))
  if expected_count is not None and total != expected_count:
    problems.append(Problem(COUNT_MISMATCH, '', -1,
                            f'{total} examples in total, --expected_count is {expected_count}'))
  # An empty dataset is a problem unless someone said it may be empty: convert
  # --allow_empty (recorded in its options) or --expected_count 0 here. (One
  # that declares examples but has none readable has other problems.)
  if (not total and not info.get('num_examples', declared_total) and expected_count is None
      and (info.get('options') or {}).get('allow_empty') is not True):
    problems.append(Problem('empty_dataset', '', -1,
                            'the dataset has no examples (convert writes one only with '
                            '--allow_empty; --expected_count 0 accepts it)'))
  return problems


def byte_count_problems(info: dict, split_bytes: dict) -> list:
  """Each split's num_bytes against the bytes of its shards on disk.
  split_bytes: {split: (shards, bytes)} of the splits whose listed shards are
  all there (a missing one is a problem of its own)."""
  problems = []
  for split, declared in info['splits'].items():
    if 'num_bytes' in declared and split in split_bytes:
      shards, found = split_bytes[split]
      if declared['num_bytes'] != found:
        problems.append(Problem(COUNT_MISMATCH, split, -1,
                                f'split {split!r} has {found} bytes in its {shards} '
                                f"shard(s); dataset_info.json's num_bytes says "
                                f'{declared["num_bytes"]}'))
  return problems


def label_map_problems(info: dict, text: Optional[str]) -> list:
  """label_map.txt (its text, None: missing) against dataset_info.json's
  label_map: one name per line, each line ended, nothing else."""
  names = list(info['label_map'])
  if info.get('schema') == 'detection':  # `id<TAB>name` lines: the ids have gaps
    names = [f'{i}\t{name}' for i, name in enumerate(names) if name]
  if text is None:  # (detection: its classes, not the ids up to the largest)
    return [Problem(LABEL_MAP_MISMATCH, LABEL_MAP, -1,
                    f"{LABEL_MAP} is missing; dataset_info.json's label_map has "
                    f'{len(names)} classes')]
  if text == ''.join(f'{name}\n' for name in names):
    return []
  lines = text.split('\n')
  ended = lines[-1] == ''
  if ended:
    lines.pop()
  for number, (line, name) in enumerate(zip(lines, names), 1):
    if line != name:
      return [Problem(LABEL_MAP_MISMATCH, LABEL_MAP, -1,
                      f"line {number} is {line!r}, dataset_info.json's label_map has {name!r}")]
  if len(lines) != len(names):
    return [Problem(LABEL_MAP_MISMATCH, LABEL_MAP, -1,
                    f"{LABEL_MAP} has {len(lines)} line(s), dataset_info.json's label_map "
                    f'{len(names)} class(es)')]
  return [Problem(LABEL_MAP_MISMATCH, LABEL_MAP, -1, 'the last line has no line break')]


def label_map_pbtxt_problems(info: dict, text: Optional[str]) -> list:
  """--schema detection: label_map.pbtxt (its text, None: missing) against
  dataset_info.json's label_map, as convert writes it (label_map_pbtxt: an
  item of id and name per class): the first line that differs, with the id
  of the item it is in."""
  if info.get('schema') != 'detection':
    return []
  expected = label_map_pbtxt(info['label_map'])
  if text is None:
    return [Problem(LABEL_MAP_MISMATCH, LABEL_MAP_PBTXT, -1,
                    f"{LABEL_MAP_PBTXT} is missing; dataset_info.json's label_map has "
                    f'{sum(1 for name in info["label_map"] if name)} classes')]
  if text == expected:
    return []
  lines, wanted = text.splitlines(), expected.splitlines()
  item = None
  for number, (line, want) in enumerate(zip(lines, wanted), 1):
    if want.startswith('  id: '):
      item = want[len('  id: '):]
    if line != want:
      inside = f' (the item of id {item})' if item is not None and number % 4 != 1 else ''
      return [Problem(LABEL_MAP_MISMATCH, LABEL_MAP_PBTXT, -1,
                      f"line {number} is {line!r}, not {want!r} as dataset_info.json's "
                      f'label_map has it{inside}')]
  if len(lines) != len(wanted):
    return [Problem(LABEL_MAP_MISMATCH, LABEL_MAP_PBTXT, -1,
                    f'{LABEL_MAP_PBTXT} has {len(lines)} line(s), not the {len(wanted)} '
                    f"of an item per class of dataset_info.json's label_map")]
  return [Problem(LABEL_MAP_MISMATCH, LABEL_MAP_PBTXT, -1,
                  'the line breaks are not one \\n after each line')]


def split_problems(rule: HashSplit, split: str, key: Optional[str],
                   sha256: Optional[str]) -> list:
  """[(kind, detail)] when a record's split is not the one its key (or image
  digest, with --split_by content) hashes to; [] when it is, or when the
  splits are not by hash or the record lacks what was hashed."""
  hashed = sha256 if rule.by == 'content' else key
  if not rule.fractions or not hashed or key is None:
    return []
  wanted = hash_split(hashed, rule.fractions, rule.seed)
  if wanted == split:
    return []
  what = "its image's SHA-256" if rule.by == 'content' else 'the key'
  return [(WRONG_SPLIT, f'key {key!r} is in split {split!r}, but {what} hashes to '
                        f'{wanted!r} ({rule.describe()})')]
