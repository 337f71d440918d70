"""Label maps: class name <-> integer id."""

from __future__ import annotations

import collections
from collections.abc import Iterable
import dataclasses
from typing import Optional
import unicodedata

from transforms.core.rejects import STAGE_LABEL
from transforms.core.rejects import RowError

# Without --label_map, integer labels are ids as given up to this one; a
# larger integer (an id from some database, say) would make a label map of
# millions of empty classes, so such rows are rejected instead.
MAX_INTEGER_LABEL = 100_000


def _is_int(text: str) -> bool:
  """A non-negative integer, leading zeros allowed ('00001' is 1)."""
  # int() refuses strings of thousands of digits; no id is that long anyway
  return text.isascii() and text.isdigit() and len(text) <= 18


def _gap_name(value: int, written: list) -> str:
  """The name of an integer id no row uses: zero-padded like the others when
  they all share one width ('00003' between '00002' and '00004')."""
  widths = {len(text) for text in written}
  return str(value).zfill(widths.pop()) if len(widths) == 1 else str(value)


def _bad_name(label: str) -> bool:
  """Line breaks or control characters would break label_map.txt's lines."""
  if label.isprintable():  # most labels: none of those, told 14x faster than below
    return False
  return any(unicodedata.category(c) in ('Cc', 'Zl', 'Zp') for c in label)


@dataclasses.dataclass(frozen=True)
class LabelMap:
  """Line i of label_map.txt is the class name of id i.

  `fixed`: the map came from --label_map, so names outside it are rejected.
  When every name is an integer (leading zeros allowed), labels are also
  matched by value: '1', '01' and '00001' are the same class.
  """
  names: tuple
  fixed: bool = False
  _ids: dict = dataclasses.field(default=None, compare=False, repr=False)
  _values: dict = dataclasses.field(default=None, compare=False, repr=False)

  def __post_init__(self):
    object.__setattr__(self, '_ids', {n: i for i, n in enumerate(self.names)})
    numeric = bool(self.names) and all(_is_int(n) for n in self.names)
    object.__setattr__(self, '_values', {int(n): i for i, n in enumerate(self.names)}
                       if numeric else {})

  @property
  def numeric(self) -> bool:
    """Every name an integer: labels are matched by value, ids are values."""
    return bool(self._values)

  @classmethod
  def from_labels(cls, labels: Iterable[str]) -> LabelMap:
    """Sorted distinct names; when every label is an integer, the id is its
    value and the name its text as first written (`labels` in line order)."""
    labels = list(labels)
    distinct = {label for label in labels if label and not _bad_name(label)}
    if distinct and all(_is_int(label) for label in distinct):
      first = {}
      for label in labels:
        if label in distinct and int(label) <= MAX_INTEGER_LABEL:
          first.setdefault(int(label), label)
      written = list(first.values())
      return cls(tuple(first.get(i) or _gap_name(i, written)
                       for i in range(max(first, default=-1) + 1)))
    return cls(tuple(sorted(distinct)))

  @classmethod
  def from_text(cls, text: str) -> LabelMap:
    names = tuple(line.strip() for line in text.lstrip('\ufeff').split('\n'))
    while names and not names[-1]:
      names = names[:-1]
    if not names:
      raise ValueError('the label map is empty')
    if any(not name for name in names):
      raise ValueError('the label map has a blank line inside it')
    if any('\r' in name for name in names):  # 'cat\rdog' was one class, matching no label
      raise ValueError("its lines end with a lone \\r (classic Mac OS line breaks): only "
                       "\\n or \\r\\n end a line; convert them (tr '\\r' '\\n')")
    # in a map of integers, '1' and '01' are the same class
    numeric = all(_is_int(n) for n in names)
    same = collections.Counter(int(n) if numeric else n for n in names)
    repeated = sorted(str(n) for n, count in same.items() if count > 1)
    if repeated:
      raise ValueError(f'the label map repeats {repeated}')
    return cls(names, fixed=True)

  def to_text(self) -> str:
    return ''.join(f'{name}\n' for name in self.names)

  def resolve(self, label) -> tuple:
    """A row's label (a --multi_label row's: a tuple) -> (id, name), or (ids,
    names); RowError (stage label) when it has none."""
    if isinstance(label, tuple):
      return self.lookup_all(label)
    return self.lookup(label)

  def resolves(self, label) -> bool:
    """Whether `resolve` gives the label an id (the row passes the label stage)."""
    try:
      self.resolve(label)
    except RowError:
      return False
    return True

  def lookup_all(self, labels) -> tuple[tuple, tuple]:
    """A multi-label row's labels -> (ids, names) in the order given, each
    class once; RowError (stage label) for an empty list or any bad label."""
    if '' in labels:  # dropped, it made 'a;;b' (b's neighbour lost?) {a, b}, unsaid
      given = [label for label in labels if label]
      shown = f'{given[:MAX_LISTED]}'[:-1] + (f', ... ({len(given)} labels)]' if len(
          given) > MAX_LISTED else ']')  # a row may hold thousands
      raise RowError(STAGE_LABEL, 'empty_label',
                     f'an empty label beside {shown}: two separators in a row, one at an '
                     f'end of the cell, or "" in a JSON list (a label left out?)')
    ids, names = [], []
    for label in labels:
      found, name = self.lookup(label)
      if found not in ids:
        ids.append(found)
        names.append(name)
    if not ids:
      raise RowError(STAGE_LABEL, 'empty_label', 'the row has no labels')
    return tuple(ids), tuple(names)

  def lookup(self, label: Optional[str]) -> tuple[int, str]:
    """Label text -> (id, name); RowError (stage label) when it has none.

    `name` is the map's own text: an integer label's first-written form.
    """
    if label is None or not label.strip():
      raise RowError(STAGE_LABEL, 'empty_label', 'label is empty')
    label = label.strip()
    if _bad_name(label):
      raise RowError(STAGE_LABEL, 'bad_label',
                     f'label {label!r} holds a line break or control character')
    found = self._ids.get(label)
    if found is None and self._values and _is_int(label):
      found = self._values.get(int(label))
    if found is not None:
      return found, self.names[found]
    if not self.fixed and _is_int(label) and int(label) > MAX_INTEGER_LABEL:
      raise RowError(STAGE_LABEL, 'unknown_label',
                     f'integer label {label} is above {MAX_INTEGER_LABEL}, the largest '
                     f'id used as given; pass a --label_map to name such classes')
    raise RowError(STAGE_LABEL, 'unknown_label',
                   f'label {label!r} is not in the label map '
                   f'({len(self.names)} classes)')


@dataclasses.dataclass(frozen=True)
class FolderClasses:
  """--image_dir's class folders, every one a class of a label map made from
  the rows, with or without a row of its own (an empty folder, or one whose
  files are all skipped or rejected): Keras' image_dataset_from_directory
  gives every subfolder an id, so a folder left out would shift the ids of
  the classes after it. `names`: the folders' labels, normalized as rows',
  in the order Keras gives them ids: `labels` sorted as listed, before
  normalizing (an NFD 'café', as macOS wrote it, sorts before 'caff'; its
  NFC name after it)."""
  names: tuple = ()

  @classmethod
  def of(cls, labels: Iterable[str], modes: frozenset) -> FolderClasses:
    """labels: the folders' names as listed, in Keras' order (image_dir.folder_labels)."""
    return cls(tuple(dict.fromkeys(normalize_label(label, modes) for label in labels)))

  def order(self, label_map: LabelMap) -> LabelMap:
    """A map made from the rows and these folders, its names in the folders'
    order (a name of no folder, if ever, after them, sorted); a map of
    integers keeps its ids, their values (as Keras' do not: see docs)."""
    if label_map.fixed or label_map.numeric:
      return label_map
    rank = {name: place for place, name in enumerate(self.names)}
    return LabelMap(tuple(sorted(label_map.names,
                                 key=lambda name: (rank.get(name, len(rank)), name))))


# --label_normalize: which differences between label spellings are merged.
# nfc (Unicode canonical composition: 'café' typed as e + U+0301 is 'café')
# is always on, unless `none` asks for the labels exactly as written.
NFC = 'nfc'
NORMALIZE_MODES = ('lower', 'strip')
NORMALIZE_CHOICES = {'lower': ('lower',), 'strip': ('strip',), 'both': NORMALIZE_MODES,
                     NFC: ()}
NO_NORMALIZE = 'none'
DEFAULT_NORMALIZE = frozenset({NFC})


def parse_normalize(text: Optional[str]) -> frozenset:
  """'lower', 'strip', 'both', 'nfc' or a comma list of them -> the modes,
  NFC among them; 'none' alone -> no mode at all; ValueError otherwise."""
  parts = [part.strip() for part in (text or NFC).split(',')]
  if NO_NORMALIZE in parts:
    if len(parts) > 1:
      raise ValueError(f'{NO_NORMALIZE} keeps labels as written: give it alone')
    return frozenset()
  modes = {NFC}
  for part in parts:
    if part not in NORMALIZE_CHOICES:
      raise ValueError(f'{part!r} is not one of lower, strip, both, nfc, none')
    modes.update(NORMALIZE_CHOICES[part])
  return frozenset(modes)


def normalize_label(label: Optional[str], modes: frozenset) -> Optional[str]:
  """The label as stored. Surrounding spaces are always stripped (label_map.txt
  cannot hold them); 'lower' lowercases; 'nfc' composes (last, so what is
  stored is NFC)."""
  if label is None:
    return None
  if 'lower' in modes:
    label = label.lower()
  if NFC in modes and not label.isascii():  # ASCII text is NFC already
    label = unicodedata.normalize('NFC', label)
  return label


def normalized_map(label_map: LabelMap, modes: frozenset) -> LabelMap:
  """A --label_map file under --label_normalize; ValueError if two of its
  names become one."""
  if 'lower' not in modes and NFC not in modes:
    return label_map
  names = tuple(normalize_label(name, modes) for name in label_map.names)
  if names == label_map.names:
    return label_map
  merged = sorted(n for n, count in collections.Counter(names).items() if count > 1)
  if merged:
    raise ValueError(f'--label_normalize {",".join(sorted(modes))} makes these names '
                     f'one: {merged}' + ('' if 'lower' in modes else
                                         f' ({NO_NORMALIZE} keeps them apart)'))
  return LabelMap(names, fixed=label_map.fixed)


# Warnings list at most this many names or groups (counts are always whole).
MAX_LISTED = 20


def case_variants(label_rows: dict) -> list:
  """{label: rows} -> [[(label, rows), ...] per group of labels that differ
  only in case], largest groups first."""
  groups = collections.defaultdict(list)
  for label, rows in label_rows.items():
    if label:
      groups[label.casefold()].append((label, rows))
  variants = [sorted(g) for g in groups.values() if len(g) > 1]
  return sorted(variants, key=lambda g: (-sum(r for _, r in g), g))


def _invisible(char: str) -> bool:
  """Format characters (Unicode category Cf): zero-width U+200B-D and U+FEFF,
  the bidi controls U+200E/F, U+202A-E, U+2066-9, soft hyphen, ..."""
  return unicodedata.category(char) == 'Cf'


def shown(label: str) -> str:
  """The label with each invisible character written as <U+XXXX>."""
  return ''.join(f'<U+{ord(c):04X}>' if _invisible(c) else c for c in label)


def written_out(text: str) -> str:
  """The text with invisible and bidi characters (Cf) and control characters
  (Cc) written <U+XXXX>, for a terminal or a picture. A COCO category name
  holding ESC, BEL or a backspace is converted as it is: printed raw,
  'bell<BEL>x<BS>y' showed as 'belly' and an ESC sequence coloured the rest
  of the table."""
  return ''.join(f'<U+{ord(c):04X}>' if unicodedata.category(c) == 'Cc' else c
                 for c in shown(text))


def invisible_characters(label_rows: dict) -> list:
  """{label: rows} -> [{'label', 'shown', 'rows', 'looks_like': the other
  labels that are the same text once invisible characters are taken out}]
  for each label holding an invisible or bidi control character, most rows
  first."""
  visible = collections.defaultdict(list)
  for label in label_rows:
    visible[''.join(c for c in label if not _invisible(c))].append(label)
  found = []
  for label, rows in label_rows.items():
    if any(_invisible(c) for c in label):
      same = visible[''.join(c for c in label if not _invisible(c))]
      found.append({'label': label, 'shown': shown(label), 'rows': rows,
                    'looks_like': sorted(shown(other) for other in same if other != label)})
  return sorted(found, key=lambda entry: (-entry['rows'], entry['label']))


def normalization_variants(label_rows: dict) -> list:
  """{label: rows} -> [[(label, rows), ...] per group of labels that are one
  text in Unicode NFC (only with --label_normalize none)], largest first."""
  groups = collections.defaultdict(list)
  for label, rows in label_rows.items():
    groups[unicodedata.normalize('NFC', label)].append((label, rows))
  variants = [sorted(g) for g in groups.values() if len(g) > 1]
  return sorted(variants, key=lambda g: (-sum(r for _, r in g), g))


def labels_not_integers(label_names: list) -> list:
  """The names that kept a label map made from the rows off integer ids,
  when at least two of its names, and at least half, are non-negative
  integers: a stray '-1', '+3' or 'n/a' among '0'..'9' makes every id that of
  the names sorted as text ('10' before '2'; '1' and '01' two classes), not
  the integers' values. [] when every name, or most, are not such integers.
  A whole decimal ('1.0', '10.00': what pandas writes for an integer column
  holding a gap) counts as an integer there, and is listed: '0.0'..'10.0'
  gave '10.0' id 2, silently."""
  others = [name for name in label_names if not _is_int(name)]
  unlike = sum(1 for name in others if not _is_whole_decimal(name))
  like = len(label_names) - unlike
  return others if others and like >= max(2, unlike) else []


def _is_whole_decimal(text: str) -> bool:
  """'1.0', '10.00': a non-negative integer written as a decimal."""
  whole, dot, zeros = text.partition('.')
  return bool(dot) and _is_int(whole) and bool(zeros) and not zeros.strip('0')


def label_warnings(label_rows: dict, padded_labels: dict, modes: frozenset,
                   label_names: list, class_counts: dict, from_rows: bool = True) -> dict:
  """What dataset_info.json's `label_warnings` holds (empty lists when none).

  case_variants: labels that differ only in case (not merged unless
  --label_normalize lower); surrounding_spaces: labels whose cells had spaces
  around them, with their row counts (stripped, so merged: unless
  --label_normalize strip asked for it, that is worth knowing);
  invisible_characters: labels holding invisible or bidi control characters
  (kept as written: see invisible_characters()); normalization_variants:
  labels that are one text in NFC, kept apart (--label_normalize none);
  empty_classes: classes of the label map without an example (their ids stay);
  labels_not_integers: with a label map made from the rows (from_rows), the
  labels that kept mostly integer labels off integer ids (labels_not_integers).
  """
  variants = case_variants(label_rows)
  invisible = invisible_characters(label_rows)
  forms = normalization_variants(label_rows)
  spaced = {} if 'strip' in modes else dict(sorted(padded_labels.items()))
  used = {label_id for per_class in class_counts.values() for label_id, n in per_class.items()
          if n}
  empty = [name for i, name in enumerate(label_names) if i not in used]
  not_integers = labels_not_integers(label_names) if from_rows else []
  return {
      'case_variants': [{label: rows for label, rows in group}
                        for group in variants[:MAX_LISTED]],
      'num_case_variant_groups': len(variants),
      'surrounding_spaces': dict(list(spaced.items())[:MAX_LISTED]),
      'num_labels_with_surrounding_spaces': len(spaced),
      'invisible_characters': invisible[:MAX_LISTED],
      'num_labels_with_invisible_characters': len(invisible),
      'normalization_variants': [{label: rows for label, rows in group}
                                 for group in forms[:MAX_LISTED]],
      'num_normalization_variant_groups': len(forms),
      'empty_classes': empty[:MAX_LISTED],
      'num_empty_classes': len(empty),
      'labels_not_integers': not_integers[:MAX_LISTED],
      'num_labels_not_integers': len(not_integers),
  }


def imbalance_ratio(examples: Iterable[int]) -> Optional[float]:
  """dataset_info.json's imbalance_ratio of a split's per-class counts: its
  largest / smallest non-empty class; None when no class has an example.
  convert writes it (class_balance) and validate recounts it (class_counts)."""
  present = [n for n in examples if n]
  return max(present) / min(present) if present else None


def class_balance(class_counts: dict, label_names: list) -> dict:
  """{split: {label id: examples}} -> {split: {'examples_per_class': {name: n}
  for every class, 'imbalance_ratio': largest / smallest non-empty class}}."""
  balance = {}
  for split, per_class in sorted(class_counts.items()):
    counts = {name: per_class.get(i, 0) for i, name in enumerate(label_names)}
    balance[split] = {
        'examples_per_class': counts,
        'imbalance_ratio': imbalance_ratio(counts.values()),
    }
  return balance
