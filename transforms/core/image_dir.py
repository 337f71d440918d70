"""--image_dir: which files below the folder are rows, and a row's fields
from the folders it sits in (DIR/<label>/... or DIR/<split>/<label>/...)."""

from __future__ import annotations

from typing import Optional

from transforms.core import paths
from transforms.core.rejects import STAGE_MANIFEST
from transforms.core.rejects import RowError

# --image_dir: files with other extensions are skipped, not rows.
DEFAULT_IMAGE_EXTENSIONS = ('jpg', 'jpeg', 'png', 'gif', 'bmp', 'tif', 'tiff', 'webp',
                            'ppm', 'pgm')
LAYOUT_LABEL = 'label'  # DIR/<label>/.../<file>
LAYOUT_SPLIT_LABEL = 'split/label'  # DIR/<split>/<label>/.../<file>
IMAGE_DIR_LAYOUTS = (LAYOUT_LABEL, LAYOUT_SPLIT_LABEL)


def wanted_file(relative: str, extensions: Optional[tuple]) -> bool:
  """--image_dir: is this file a row? Hidden files and folders never are;
  with `extensions` (lower case, no dot; None: every file) only image names."""
  if any(part.startswith('.') for part in relative.split('/')):
    return False
  if extensions is None:
    return True
  name = relative.rsplit('/', 1)[-1]
  return '.' in name and name.rsplit('.', 1)[1].lower() in extensions


def image_dir_fields(relative: str, layout: str) -> dict:
  """A file below --image_dir -> its row's fields, from its folders.

  layout label: DIR/<label>/... (a file directly in DIR has an empty label);
  layout split/label: DIR/<split>/<label>/..., RowError at another depth.
  """
  parts = relative.split('/')
  if layout == LAYOUT_SPLIT_LABEL:
    if len(parts) < 3:
      raise RowError(STAGE_MANIFEST, 'wrong_depth',
                     f'{relative!r} is not in a DIR/<split>/<label>/ folder')
    return {'image': relative, 'split': parts[0], 'label': parts[1]}
  return {'image': relative, 'label': parts[0] if len(parts) > 1 else ''}


def utf8_name(relative: str) -> tuple:
  """-> (the name as it can be written and shown, None), or for a name that is
  not UTF-8 (Python's surrogate escapes of a file system's bytes), (the name
  with its bad bytes as \\xNN, the RowError that rejects its row). Beam's
  coders and the manifest's text carry UTF-8 only: such a name would fail
  the whole job, not its one row."""
  shown = paths.not_utf8_shown(relative)
  if shown is not None:
    return shown, RowError(STAGE_MANIFEST, 'bad_encoding', f'file name is not UTF-8: {shown}')
  return relative, None


def class_depth(layout: str) -> int:
  """How deep below --image_dir a class folder is: DIR/<label> (1) or
  DIR/<split>/<label> (2)."""
  return 2 if layout == LAYOUT_SPLIT_LABEL else 1


def folder_labels(folders, layout: str) -> list:
  """Class folders (paths relative to --image_dir, at class_depth, no trailing
  '/') -> their labels as rows of their files would have them, unnormalized,
  in the order Keras' image_dataset_from_directory gives them ids: sorted by
  the names as listed (' zebra' before 'apple', an NFD 'café' before
  'caff'), not by the stripped labels; hidden folders and names that are
  not UTF-8 (their files are rejected rows, bad_encoding) are none."""
  listed = set()
  for folder in folders:
    parts = folder.strip('/').split('/')
    if len(parts) != class_depth(layout) or not wanted_file(folder, None):
      continue
    if utf8_name(parts[-1])[1] is None and parts[-1].strip():
      listed.add(parts[-1])
  return list(dict.fromkeys(name.strip() for name in sorted(listed)))


def folders_of_files(relatives, layout: str) -> set:
  """The class folders holding the files at these paths (relative to
  --image_dir): on an object store a folder is only the objects named below
  it (a console's empty folder: a `b/` object), so this is all there is."""
  depth = class_depth(layout)
  return {'/'.join(parts[:depth]) for parts in (relative.split('/') for relative in relatives)
          if len(parts) > depth}
