"""WebDataset tars as a manifest: plain functions.

A sample is the consecutive members of a tar that share a key, as webdataset
defines it: the member's path up to the first dot of its base name; the rest
is the member's suffix, lower-cased (`0001.jpg`, `0001.cls`, `0001.json` are
one sample, key `0001`). Members other than regular files, and names without
a dot, are not part of any sample (webdataset skips them too). A sample's
image is its member whose suffix is one of --image_extensions; its label the
`.cls` member (a class id, as text), or with --label_column the `.txt`
member (`txt`) or a field of the `.json` member (any other name).

A row never carries image bytes: it carries the image member's place
(TarMember: tar, offset of its data, size), and the image step reads them.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
from typing import NamedTuple
from typing import Optional

from transforms.core import json_objects
from transforms.core import line_caps
from transforms.core import manifest
from transforms.core.extra_values import ABSENT
from transforms.core.extra_values import parse_extra
from transforms.core.image_dir import utf8_name
from transforms.core.labels import normalize_label
from transforms.core.rejects import STAGE_LABEL
from transforms.core.rejects import STAGE_MANIFEST
from transforms.core.rejects import STAGE_READ
from transforms.core.rejects import RowError

# Label and metadata members are read whole in the first pass, up to this size.
MAX_SMALL_MEMBER = 1 << 20
LABEL_MEMBERS = ('cls', 'txt')  # --label_column cls|txt: that member; else a .json field
SMALL_SUFFIXES = ('cls', 'txt', 'json')  # read in the first pass; never an image
# webdataset's metadata members (__key__, ...): not part of any sample.
_META = re.compile(r'__[^/]*__($|/)')
_KEY = re.compile(r'^((?:.*/|)[^.]+)[.]([^/]*)$')  # webdataset's base_plus_ext
_RANGE = re.compile(r'^(-?\d+)\.\.(-?\d+)$')


def is_gzipped(path: str) -> bool:
  return path.lower().endswith(('.gz', '.tgz'))


def expand_braces(pattern: str) -> list:
  """Bash-style brace expansion as webdataset's shard lists use it:
  {000..099} (zero-padded as written), {a,b,c}, nested and repeated."""
  depth, start = 0, None
  for i, char in enumerate(pattern):
    if char == '{':
      if depth == 0:
        start = i
      depth += 1
    elif char == '}' and depth:
      depth -= 1
      if depth == 0:
        prefix, rest = pattern[:start], expand_braces(pattern[i + 1:])
        return [prefix + alternative + tail
                for alternative in _alternatives(pattern[start + 1:i]) for tail in rest]
  return [pattern]


def _alternatives(inside: str) -> list:
  found = _RANGE.match(inside)
  if found:
    first, last = found.group(1), found.group(2)
    width = max(len(first.lstrip('-')), len(last.lstrip('-'))) if (
        first.lstrip('-').startswith('0') or last.lstrip('-').startswith('0')) else 0
    low, high = int(first), int(last)
    step = 1 if high >= low else -1
    return [str(n).zfill(width) for n in range(low, high + step, step)]
  parts, depth, begin = [], 0, 0
  for i, char in enumerate(inside):
    depth += char == '{'
    depth -= char == '}'
    if char == ',' and depth == 0:
      parts.append(inside[begin:i])
      begin = i + 1
  parts.append(inside[begin:])
  if len(parts) == 1:  # {x}: no alternatives, kept as written (as bash and braceexpand do)
    return ['{' + text + '}' for text in expand_braces(inside)]
  return [text for part in parts for text in expand_braces(part)]


def member_key(name: str) -> tuple:
  """(sample key, lower-cased suffix) of a member's name, or (None, None)
  (no dot in its base name; webdataset's metadata members)."""
  found = None if _META.match(name) else _KEY.match(name)
  if not found:
    return None, None
  return found.group(1), found.group(2).lower()


class Member(NamedTuple):
  """One regular file of a tar, as the first pass saw it."""
  name: str
  offset: int  # of its data in the (uncompressed) tar
  size: int
  data: Optional[bytes] = None  # label and metadata members only
  error: Optional[str] = None  # why it could not be read (truncated)


def ends_in_padding(last: Member, available: Optional[int],
                    next_header: int) -> bool:
  """Whether a tar of `available` bytes (None: not known) that ends before
  `next_header`, the offset of the header after its `last` member, holds all
  of that member's data: the cut is in the zeros padding it to 512 bytes."""
  return (last.error is None and available is not None
          and last.offset + last.size <= available < next_header)


class TarMember(NamedTuple):
  """An image's bytes in a tar: `size` bytes at `offset` of the (uncompressed)
  tar `file`; `member` and `sample`: its name and sample number (messages)."""
  file: str
  offset: int
  size: int
  member: str
  sample: int

  def where(self) -> str:
    return f'{self.file} member {self.member}'

  def part(self) -> str:
    """The member's place in its tar, for its fingerprint."""
    return f'offset={self.offset}'


@dataclasses.dataclass(frozen=True)
class TarLayout:
  """What the launcher knows of a WebDataset manifest: its tars (path, size),
  the image suffixes, and the class names of --label_map (.cls ids name them)."""
  files: tuple  # (path, size), sorted by path
  extensions: Optional[tuple]  # None: every suffix is an image
  class_names: tuple = ()
  # each tar's name in keys (paths.short_names): `000.tar`, or `train/000.tar`
  # and `val/000.tar` when tars of one name lie in sibling folders
  names: tuple = ()
  # each tar's split from its path (splits.keyword_splits), None: none
  splits: tuple = ()


def label_source(config: manifest.ManifestConfig) -> str:
  """'cls' or 'txt' (that member), or the name of a .json field."""
  return dict(config.columns).get('label', 'cls')


def samples(members):
  """Members in tar order -> (key, [Member, ...]) per sample: consecutive
  members sharing a key (a key that comes back later is a sample again: the
  caller rejects it)."""
  key, group = None, []
  for member in members:
    found, _ = member_key(member.name)
    if found is None:
      continue
    if group and found != key:
      yield key, group
      group = []
    key = found
    group.append(member)
  if group:
    yield key, group


def shown_names(key: str, group: list) -> tuple:
  """A sample's rejected.jsonl fields ({'sample', 'members'}), names not UTF-8
  shown with their bad bytes as \\xNN, and the RowError that rejects a sample
  with such a name (else None). tarfile gives a name's bytes that are not
  UTF-8 as surrogate escapes; Beam's coders, the key's hash and the sidecar
  carry UTF-8 only: one such member failed the whole job with a traceback."""
  sample, bad = utf8_name(key)
  members, first = [], None  # the first name not UTF-8, as shown
  for member in group:
    shown, error = utf8_name(member.name)
    members.append(shown)
    if error is not None and first is None:
      first = shown
  if bad is not None or first is not None:
    bad = RowError(STAGE_MANIFEST, 'bad_encoding',
                   f'member name is not UTF-8: {first if first is not None else sample}')
  return {'sample': sample, 'members': members}, bad


def wanted_small(name: str) -> bool:
  """Whether the first pass reads this member's data (label and metadata)."""
  return member_key(name)[1] in SMALL_SUFFIXES


def _text(member: Member) -> str:
  if member.data is None:
    raise RowError(STAGE_READ, 'unreadable', f'member {member.name} could not be read: '
                   f'{member.error or f"more than {MAX_SMALL_MEMBER} bytes"}')
  try:
    return member.data.decode('utf-8').strip()
  except UnicodeDecodeError as error:
    raise RowError(STAGE_MANIFEST, 'bad_encoding', f'member {member.name} is not UTF-8: {error}')


def sample_row(key: str, group: list, number: int, tar: str, tar_index: int,
               config: manifest.ManifestConfig, layout: TarLayout, repeated: bool
               ) -> manifest.ManifestRow:
  """A sample's members -> its ManifestRow; RowError when it is unusable.
  number: the sample's place in its tar (from 0); repeated: its key came
  before in the tar, apart from it."""
  tar_name = layout.names[tar_index] if layout.names else posixpath.basename(tar)
  if repeated:
    raise RowError(STAGE_MANIFEST, 'split_sample', f'sample {key} comes back in {tar} '
                   f'after other samples: its members are not together')
  by_suffix = {}
  for member in group:
    suffix = member_key(member.name)[1]
    if suffix in by_suffix:
      raise RowError(STAGE_MANIFEST, 'duplicate_member', f'sample {key} has two members '
                     f'.{suffix} ({by_suffix[suffix].name}, {member.name})')
    by_suffix[suffix] = member
  for member in group:
    if member.error is not None:
      raise RowError(STAGE_READ, 'truncated', f'member {member.name} of {tar} is cut '
                     f'short: {member.error}')
  images = [m for s, m in by_suffix.items()
            if layout.extensions is None or s in layout.extensions]
  images = [m for m in images if member_key(m.name)[1] not in SMALL_SUFFIXES]
  if not images:
    raise RowError(STAGE_MANIFEST, 'no_image', f'sample {key} has no image member '
                   f'(its members: {", ".join(m.name for m in group)}; '
                   f'--image_extensions)')
  if len(images) > 1:
    raise RowError(STAGE_MANIFEST, 'two_images', f'sample {key} has {len(images)} image '
                   f'members: {", ".join(m.name for m in images)}')
  image = images[0]
  meta = {}
  if 'json' in by_suffix:
    try:
      meta = json_objects.loads(_text(by_suffix['json']))  # a member named twice too
      # "\ud800" parses, but no UTF-8 can hold it: as a label, key or feature
      # it failed the whole job when the Example was written (as a JSONL line's).
      json_objects.check_unicode(meta)
    except UnicodeEncodeError as error:
      raise RowError(STAGE_MANIFEST, 'bad_encoding', f'member {by_suffix["json"].name} '
                     f'holds text that is not valid Unicode: {error.reason}')
    except (ValueError, RecursionError) as error:  # RecursionError: arrays nested deep
      raise RowError(STAGE_MANIFEST, 'bad_json', f'member {by_suffix["json"].name} is not '
                     f'JSON: {error}')
    if not isinstance(meta, dict):
      raise RowError(STAGE_MANIFEST, 'bad_json', f'member {by_suffix["json"].name} is '
                     f'JSON {type(meta).__name__}, not an object')
    line_caps.check_field_lengths(meta, f'member {by_suffix["json"].name}')
  source = label_source(config)
  if source in LABEL_MEMBERS:
    if source not in by_suffix:  # was 'label is empty': a .json's label went unread, unsaid
      raise RowError(STAGE_LABEL, 'empty_label', f'sample {key} has no .{source} member, '
                     f'the label (its members: {", ".join(m.name for m in group)}; a label '
                     f'in its .json: --label_column NAME)')
    label = _text(by_suffix[source])
    line_caps.check_lengths((label,), f'member {key}.{source}')
    # A .txt's one line ending is no padding; spaces around its text are.
    padded = source == 'txt' and manifest.is_padded(
        _one_line(by_suffix[source].data.decode('utf-8')))
  else:
    label = manifest.text_of(meta, source)
    padded = manifest.is_padded(meta.get(source))
  if source == 'cls' and label is not None:
    label = _class_id(label, by_suffix['cls'].name, layout)
  stated_key = manifest.text_of(meta, config.column('key')) if 'key' in dict(
      config.columns) else None
  row_key = stated_key or f'{tar_name}/{key}'
  extras = tuple((f.name, f.kind, parse_extra(meta.get(f.name, ABSENT), f.kind, f.name, 'jsonl',
                                              f.shape))
                 for f in config.extra_features)
  split_value = manifest.split_cell(meta, config.column('split')) if 'split' in dict(
      config.columns) else None
  fields = {'sample': key, 'image': image.name, 'label': label}
  return manifest.ManifestRow(
      fields, tar, number, image=f'{tar_name}/{image.name}', path=tar, key=row_key,
      label=normalize_label(label, config.label_normalize),
      # a null split member ('') takes the tar's split, else is rejected (it went to train)
      split=config.split.assign(row_key, split_value or (
          layout.splits[tar_index] if layout.splits else None) or split_value),
      extras=extras, position=(tar_index << 32) + number + 1,
      ref=TarMember(tar, image.offset, image.size, image.name, number), label_padded=padded)


def _one_line(text: str) -> str:
  """A .txt member's text without the one line ending that ends it."""
  return text[:-2] if text.endswith('\r\n') else text[:-1] if text.endswith('\n') else text


def _class_id(text: str, name: str, layout: TarLayout) -> str:
  """A .cls value: a class id; with --label_map, the name on its line."""
  try:
    value = int(text)
  except ValueError:
    raise RowError(STAGE_LABEL, 'bad_label', f'member {name} holds {text[:40]!r}, not a '
                   f'class id (an integer)')
  if value < 0:
    raise RowError(STAGE_LABEL, 'no_label', f'member {name} holds {value}: no label')
  if not layout.class_names:
    return str(value)
  if value >= len(layout.class_names):
    raise RowError(STAGE_LABEL, 'unknown_label', f'class id {value} ({name}) is past the '
                   f'{len(layout.class_names)} lines of --label_map')
  return layout.class_names[value]
