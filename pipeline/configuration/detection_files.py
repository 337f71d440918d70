"""--annotation_format voc|yolo on the launcher: the annotation files listed
(with their images and splits) and the class names read, before anything is
written. Malformed XML or YAML is a usage error (exit 2), in one line."""

from __future__ import annotations

import posixpath

from pipeline.configuration.flag_files import MAX_LABEL_MAP_BYTES
from pipeline.configuration.flag_files import read_capped
from pipeline.configuration.manifest_files import require_file
from pipeline.errors import UsageError
from transforms import filesystem
from transforms.core import annotations as objects
from transforms.core import voc
from transforms.core import yolo
from transforms.core.detect import DetectionOptions
from transforms.core.detection_info import DetectionConfig
from transforms.core.image_dir import DEFAULT_IMAGE_EXTENSIONS
from transforms.core.image_dir import wanted_file
from transforms.core.tally import SHOWN_SKIPPED_FILES

# Ultralytics' splits: images/<split>/ beside labels/<split>/.
YOLO_SPLITS = ('train', 'val', 'test')


def _files_in(files: filesystem.FileAccess, folder: str, extensions: tuple) -> list:
  """Paths of the files directly in `folder` with one of `extensions`, sorted."""
  return [path for path, _ in files.match(filesystem.join(folder, '*'))
          if path.rsplit('.', 1)[-1].lower() in extensions]


def _files_below(files: filesystem.FileAccess, folder: str, extensions: tuple,
                 nested: bool = True) -> list:
  """Paths relative to `folder` of the files below it (nested: at any depth;
  else directly in it) with one of `extensions`, sorted; hidden files and
  folders left out (a macOS copy leaves a `._a.jpg` beside each image, which
  is no image)."""
  prefix = folder.rstrip('/') + '/'
  found = files.list(prefix) if nested else files.match(prefix + '*')
  relatives = [path[len(prefix):] for path, _ in found if path.startswith(prefix)]
  return sorted(relative for relative in relatives if wanted_file(relative, extensions)
                and (nested or '/' not in relative))


def _voc(args, options: DetectionOptions, files: filesystem.FileAccess) -> DetectionConfig:
  root = args.annotations.rstrip('/')
  xml_dir = filesystem.join(root, 'Annotations')
  base = root
  if not files.match(filesystem.join(xml_dir, '*.xml')):
    xml_dir, base = root, posixpath.dirname(root) or '.'
  paths = _files_in(files, xml_dir, ('xml',))
  if not paths and not args.allow_empty:
    raise UsageError(f'--annotations {args.annotations}: no .xml file in {xml_dir}')
  lists, listings = {}, {}
  for split in voc.SPLIT_FILES:
    listing = filesystem.join(base, f'ImageSets/Main/{split}.txt')
    if files.exists(listing):
      _require_file(args.annotations, listing)
      listings[split] = listing
      try:  # a byte-order mark (Notepad's UTF-8) is no part of the first id
        text = _read_capped(files, listing, args.annotations).decode('utf-8-sig')
      except UnicodeDecodeError as error:
        raise UsageError(f'--annotations {args.annotations}: {listing} is not UTF-8 text: '
                         f'{error}')
      lists[split] = [line.split()[0] for line in text.splitlines() if line.strip()]
  split_of = voc.split_of(lists)
  images, listed, unlisted = [], [], []
  for path in paths:
    _require_file(args.annotations, path)
    try:
      parsed = voc.parse_xml(_read_capped(files, path, args.annotations), path)
    except voc.VocFormatError as error:
      raise UsageError(str(error))
    stem = posixpath.basename(path)[:-len('.xml')]
    if lists and stem not in split_of:
      unlisted.append(posixpath.basename(path))  # not in train, val or test: VOC's own
      continue  # tools leave it out too (counted, with the first names)
    images.append(parsed)
    listed.append((parsed.filename or f'{stem}.jpg', path, split_of.get(stem, ''),
                   len(listed) + 1, ()))
  # a listed id without its XML: a row, rejected as it is read (after the
  # others: their ordinals, the records' source ids, stay as they were)
  stems = [posixpath.basename(path)[:-len('.xml')] for path in paths]
  for stem, split, problem in voc.missing_annotations(lists, listings, stems, xml_dir):
    listed.append((f'{stem}.jpg', filesystem.join(xml_dir, f'{stem}.xml'), split,
                   len(listed) + 1, problem))
  names = _label_names(voc.class_names(images), args.annotations)
  mask_dir = filesystem.join(base, 'SegmentationObject')
  return DetectionConfig('voc', args.annotations, args.image_dir.rstrip('/'), names, options,
                         files=tuple(listed), mask_dir=mask_dir if options.include_masks
                         else '', num_unlisted=len(unlisted),
                         unlisted=tuple(sorted(unlisted)[:SHOWN_SKIPPED_FILES]))


def _require_file(given: str, path: str) -> None:
  """A file of the --annotations dataset the launcher reads: a regular file
  (a FIFO or a device would hang it or fill its memory)."""
  require_file(f'--annotations {given}: the file', path)


def _label_names(categories: dict, source: str) -> tuple:
  try:
    return objects.label_names(categories, source)
  except objects.LabelMapError as error:
    raise UsageError(str(error))


def _read_capped(files: filesystem.FileAccess, path: str, given: str) -> bytes:
  """A file of the --annotations tree the launcher reads (a VOC XML or split
  list, data.yaml, classes.txt): capped as a --label_map is, else exit 2."""
  return read_capped(f'--annotations {given}: {path}', path, MAX_LABEL_MAP_BYTES,
                     'any annotation file', files)


def _yolo_names(path: str, files: filesystem.FileAccess, given: str) -> tuple:
  """-> (label id -> name, keypoint values per row: 0 unless data.yaml has kpt_shape)."""
  _require_file(given, path)
  try:
    text = yolo.decode_text(_read_capped(files, path, given), path)
    if path.endswith(('.yaml', '.yml')):
      return yolo.names_from_yaml(text, path), yolo.keypoint_values(text, path)
    return yolo.names_from_text(text, path), 0
  except yolo.YoloFormatError as error:
    raise UsageError(str(error))


def _yolo(args, options: DetectionOptions, files: filesystem.FileAccess) -> DetectionConfig:
  given = args.annotations.rstrip('/')
  if given.endswith(('.yaml', '.yml', '.txt')):
    names_file, root = given, posixpath.dirname(given) or '.'
  else:
    root = given
    names_file = next((filesystem.join(root, n) for n in ('data.yaml', 'data.yml',
                                                           'classes.txt')
                       if files.exists(filesystem.join(root, n))), None)
  if names_file is None or not files.exists(names_file):
    raise UsageError(f'--annotations {args.annotations}: no data.yaml or classes.txt '
                     f'names the classes')
  names, keypoints = _yolo_names(names_file, files, args.annotations)
  names = _label_names(names, names_file)
  images_root = (args.image_dir or filesystem.join(root, 'images')).rstrip('/')
  labels_root = filesystem.join(root, 'labels')
  # images/ listed once, at every depth (a listing is a request per 1,000 files on S3)
  every = _files_below(files, images_root, None)
  below = [relative for relative in every if wanted_file(relative, DEFAULT_IMAGE_EXTENSIONS)]
  # the other files by path without extension: a label file whose image the
  # run does not read (b.mpo, b.jfif) names it, not "no b.* image"
  unread = {}
  for relative in sorted(set(every) - set(below)):
    unread.setdefault(relative.rsplit('.', 1)[0], []).append(posixpath.basename(relative))
  found = {s: images for s in YOLO_SPLITS if (images := [
      relative[len(s) + 1:] for relative in below if relative.startswith(s + '/')])}
  _refuse_unread_images(args.annotations, images_root, below, bool(found))
  listed = []
  # Ultralytics' own: images/<split>/a/b.jpg is labelled by labels/<split>/a/b.txt.
  for split, images in found.items() or [('', below)]:
    for relative in images:
      label = filesystem.join(filesystem.join(labels_root, split) if split else labels_root,
                              f'{relative.rsplit(".", 1)[0]}.txt')
      listed.append((f'{split}/{relative}' if split else relative,
                     label if files.exists(label) else '', split, len(listed) + 1, ()))
  if not listed and not args.allow_empty:
    raise UsageError(f'--annotations {args.annotations}: no image in {images_root}')
  # a label file without its image (in labels/, or at any depth below
  # labels/<split>/): a row, rejected as it is read (after the images: their
  # ordinals stay). Not a classes.txt no image claims: LabelImg writes the
  # class names there.
  used = {path for _, path, _, _, _ in listed} | {names_file}
  for split in ('', *YOLO_SPLITS):
    folder = filesystem.join(labels_root, split) if split else labels_root
    for relative in _files_below(files, folder, ('txt',), nested=bool(split)):
      label = filesystem.join(folder, relative)
      if label not in used and posixpath.basename(label) != 'classes.txt':
        images = filesystem.join(images_root, split) if split else images_root
        images = filesystem.join(images, posixpath.dirname(relative)).rstrip('/')
        stem = relative.rsplit('.', 1)[0]
        listed.append(('', label, split, len(listed) + 1, yolo.missing_image(
            label, images, unread.get(f'{split}/{stem}' if split else stem, ()))))
  if listed and not any(path for _, path, *_ in listed) and not args.allow_empty:
    # no label file anywhere: every image written without objects, exit 0
    # (Roboflow's train/images with --image_dir, its labels in train/labels)
    raise UsageError(f'--annotations {args.annotations}: no label file in {labels_root} '
                     f'for any of the {len(listed)} image(s) in {images_root}: each would be '
                     f'written without objects (label files are read there, whatever '
                     f'--image_dir says; --allow_empty converts them so)')
  return DetectionConfig('yolo', args.annotations, images_root, names, options,
                         files=tuple(listed), keypoint_values=keypoints)


def _refuse_unread_images(given: str, images_root: str, below: list, splits: bool) -> None:
  """UsageError if an image below images/ (`below`: relative paths) is in no
  place the run reads: with split folders, anywhere outside them (Roboflow's
  images/valid/ beside images/train/ lost every validation image without a
  word); without, in a folder below images/ (images/training/ could be a
  split under another name, and would be merged into train without a word)."""
  unread = [relative for relative in below
            if (relative.split('/', 1)[0] not in YOLO_SPLITS if splits else '/' in relative)]
  if not unread:
    return
  first = unread[0].split('/', 1)[0]
  where = f'{images_root}/{first}' if '/' in unread[0] else images_root
  count = sum(1 for relative in unread if relative.split('/', 1)[0] == first) if (
      '/' in unread[0]) else sum(1 for relative in unread if '/' not in relative)
  held = f'{where}/ holds {count} image(s) below it' if '/' in unread[0] else (
      f'{where} holds {count} image(s) directly in it, beside its split folders')
  rule = ('only images/train, images/val and images/test are read, as its splits: '
          'move them into one' if splits else
          'images/ has no train, val or test folder, so only the files directly in '
          'it are read: rename the folder train, val or test if it is a split, or move '
          'it out of images/')
  raise UsageError(f'--annotations {given}: {held}, which would not be read; {rule}')


def file_config(args, options: DetectionOptions) -> DetectionConfig:
  """The DetectionConfig of a VOC or YOLO dataset; UsageError when unusable."""
  files = filesystem.FileAccess()
  if not files.exists(args.annotations) and not files.match(
      filesystem.join(args.annotations, '*')):
    raise UsageError(f'--annotations {args.annotations}: no such file or folder')
  if args.annotation_format == 'voc':
    return _voc(args, options, files)
  return _yolo(args, options, files)
