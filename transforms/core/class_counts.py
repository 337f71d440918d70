"""validate's checks of dataset_info.json's per-class counts against the
labels the records hold: each split's examples_per_class and imbalance_ratio
(--schema detection: objects_per_class and num_objects, the split's and the
detection section's, against its records' objects). Plain functions; the
rest of dataset_info.json's accounting is in dataset_checks.py."""

from __future__ import annotations

import math

from transforms.core.annotations import objects_per_name
from transforms.core.labels import imbalance_ratio
from transforms.core.validation import Problem

CLASS_COUNT_MISMATCH = 'class_count_mismatch'
NUM_OBJECTS_MISMATCH = 'num_objects_mismatch'


def _counted_splits(info: dict, counts: dict, label_counts: dict, field: str):
  """(split, its declared counts per class name under `field`, {label id:
  records read}) of each split that declares them, whose records were all
  read and whose labels all name a class ('' is none: detection's 0 and id
  gaps); other splits' records are problems of their own (a detection
  record without image/object/difficult, counted, gave 8 more)."""
  names = info['label_map']
  for split, declared in info['splits'].items():
    per_class = declared.get(field)
    found = {label: n for (where, label), n in label_counts.items() if where == split}
    if per_class is not None and counts.get(split, 0) == declared['num_examples'] and all(
        label is not None and 0 <= label < len(names) and names[label] for label in found):
      yield split, per_class, found


def class_count_problems(info: dict, counts: dict, label_counts: dict) -> list:
  """Each split's examples_per_class against the labels its records hold,
  and, where they agree, its imbalance_ratio against them.
  counts: {split: records read}; label_counts: {(split, label id or None):
  records} (a multi-label record counts for each of its labels). Splits
  compared: _counted_splits'."""
  names = list(info['label_map'])
  problems = []
  for split, per_class, found in _counted_splits(info, counts, label_counts,
                                                 'examples_per_class'):
    before = len(problems)
    for label, name in enumerate(names):
      records = found.get(label, 0)
      if name not in per_class:
        detail = (f'split {split!r} has {records} record(s) of class {name!r}; its '
                  f'examples_per_class has no entry for it')
      elif per_class[name] != records:
        detail = (f'split {split!r} has {records} record(s) of class {name!r}; its '
                  f'examples_per_class says {per_class[name]}')
      else:
        continue
      problems.append(Problem(CLASS_COUNT_MISMATCH, split, -1, detail))
    problems += [Problem(CLASS_COUNT_MISMATCH, split, -1,
                         f'examples_per_class of split {split!r} names {name!r}, which is '
                         f'not in the label map')
                 for name in sorted(set(per_class) - set(names))]
    entry = info['splits'][split]
    if len(problems) == before and 'imbalance_ratio' in entry:
      problems += _imbalance_problem(split, entry['imbalance_ratio'], per_class)
  return problems


def _imbalance_problem(split: str, declared, per_class: dict) -> list:
  """The split's imbalance_ratio against its examples_per_class (found equal
  to its records): largest / smallest non-empty class, null for none."""
  ratio = imbalance_ratio(per_class.values())
  if ratio is None and declared is None:
    return []
  if (ratio is not None and isinstance(declared, (int, float))
      and not isinstance(declared, bool) and math.isclose(declared, ratio, rel_tol=1e-9)):
    return []
  present = [n for n in per_class.values() if n]
  given = (f'{max(present)} / {min(present)} = {ratio:g} (largest / smallest non-empty '
           'class)' if present else 'null (no class has a record)')
  return [Problem(CLASS_COUNT_MISMATCH, split, -1,
                  f'split {split!r} has imbalance_ratio {declared!r}; its classes give {given}')]


def _object_count_problems(where: str, field: str, declared: dict, found: dict) -> list:
  """`declared` ({class name: objects}, the objects_per_class at `field`)
  against `found` ({class name: objects the records hold}); a class missing
  from either counts 0."""
  return [Problem(CLASS_COUNT_MISMATCH, where, -1, (
      f'{what} has {found.get(name, 0)} object(s) of class {name!r}; {field} says '
      f'{declared.get(name, 0)}'))
          for what in [f'split {where!r}' if where else 'the dataset']
          for name in sorted(set(declared) | set(found), key=str)
          if declared.get(name, 0) != found.get(name, 0)]


def _num_objects_problem(where: str, field: str, declared, found: int) -> list:
  if declared is None or declared == found:
    return []
  what = f'split {where!r}' if where else 'the dataset'
  return [Problem(NUM_OBJECTS_MISMATCH, where, -1,
                  f'{what} has {found} object(s); {field} says {declared}')]


def object_count_problems(info: dict, counts: dict, label_counts: dict) -> list:
  """--schema detection: each split's objects_per_class and num_objects
  against the labels of its records' objects (label_counts counts each
  object), and, when every split's records were all read, the `detection`
  section's num_objects and objects_per_class against them all."""
  names = list(info['label_map'])
  problems, total, counted = [], {}, 0
  for split, per_class, by_id in _counted_splits(info, counts, label_counts,
                                                 'objects_per_class'):
    counted += 1
    found = objects_per_name(by_id, names)  # ids sharing a name add up, as convert's
    for name, n in found.items():
      total[name] = total.get(name, 0) + n
    problems += _object_count_problems(split, 'its objects_per_class', per_class, found)
    problems += _num_objects_problem(split, 'its num_objects',
                                     info['splits'][split].get('num_objects'),
                                     sum(found.values()))
  section = info.get('detection')
  if isinstance(section, dict) and counted and counted == len(info['splits']):
    if isinstance(section.get('objects_per_class'), dict):
      problems += _object_count_problems('', "dataset_info.json's detection.objects_per_class",
                                         section['objects_per_class'], total)
    problems += _num_objects_problem('', "dataset_info.json's detection.num_objects",
                                     section.get('num_objects'), sum(total.values()))
  return problems
