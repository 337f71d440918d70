"""What `inspect --export_dir` draws: contact sheet, label histogram, report.html.

Plain functions of plain values (no Beam, no TensorFlow): the caller streams
the records and hands over the sampled images and the counts.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import html
import io
import json
from typing import Optional
from typing import Union
import warnings

import numpy as np
from PIL import Image
from PIL import ImageDraw

from pipeline.looking.lettering import fitted
from pipeline.looking.lettering import font
from pipeline.looking.lettering import quiet_matplotlib
from pipeline.looking.lettering import shorten
from transforms.core.labels import written_out

THUMBNAIL = 128  # the longer side of a contact-sheet thumbnail, in pixels
SHEET_COLUMNS = 8
CAPTION_LINES = 2
LINE_HEIGHT = 14
MAX_HISTOGRAM_CLASSES = 40  # more classes: the most frequent ones are drawn
NAME_BYTES = 255  # the longest file name ext4, XFS, btrfs, APFS and NTFS take
MORE = '+more'  # ends an exported file's name whose ids were cut to fit NAME_BYTES
HISTOGRAM_TITLE = 'Examples per class'


@dataclasses.dataclass(frozen=True)
class Sample:
  """One exported record: where it is, what it is, its decoded pixels."""
  split: str
  shard: str
  record: int
  key: str
  label: Union[int, str, None]  # a --multi_label record's ids joined: '1+2'
  class_text: str
  image: np.ndarray  # uint8 H x W x C
  # --schema detection: (boxes, class ids, class names, masks or None), drawn on it
  objects: Optional[tuple] = None

  def file_name(self, i: int) -> str:
    """The tutorial's name: `{i}_Label_{label}.jpg` (label: the integer id).

    A detection image of a hundred objects (two-digit ids: 300 characters)
    joins more ids than a file name holds (OSError 'File name too long' ended
    the export): the ids that fit are kept, then MORE; samples.csv has them all."""
    label = 'none' if self.label is None else str(self.label)
    name = f'{i}_Label_{label}.jpg'
    if len(name) <= NAME_BYTES:  # ASCII: digits, '+', 'none'
      return name
    room = NAME_BYTES - len(f'{i}_Label_{MORE}.jpg')
    return f'{i}_Label_{label[:room + 1].rsplit("+", 1)[0]}{MORE}.jpg'


def to_pil(image: np.ndarray) -> Image.Image:
  return Image.fromarray(image[:, :, 0] if image.shape[2] == 1 else image,
                         'L' if image.shape[2] == 1 else 'RGB')


def picture(sample: Sample, font_size: int = 12) -> Image.Image:
  """The sample's pixels, with its objects drawn when it has any."""
  image = to_pil(sample.image)
  if sample.objects is None:
    return image
  from pipeline.looking.look_detection import draw_objects
  return draw_objects(image, sample.objects, font_size)


def contact_sheet(samples: list, columns: int = SHEET_COLUMNS) -> Image.Image:
  """A grid of thumbnails, each with its class text and key underneath."""
  columns = max(1, min(columns, len(samples)))
  rows = max(1, -(-len(samples) // columns))
  cell_w, cell_h = THUMBNAIL + 8, THUMBNAIL + 8 + CAPTION_LINES * LINE_HEIGHT
  sheet = Image.new('RGB', (columns * cell_w, rows * cell_h), (255, 255, 255))
  draw = ImageDraw.Draw(sheet)
  caption_font = font(10)
  for n, sample in enumerate(samples):
    x, y = (n % columns) * cell_w + 4, (n // columns) * cell_h + 4
    thumb = to_pil(sample.image).convert('RGB')
    thumb.thumbnail((THUMBNAIL, THUMBNAIL), Image.Resampling.BILINEAR)
    if sample.objects is not None:  # drawn at the thumbnail's size: names stay legible
      thumb = picture(dataclasses.replace(sample, image=np.asarray(thumb)), font_size=9)
    if thumb.width < THUMBNAIL // 2 and thumb.height < THUMBNAIL // 2:
      scale = max(1, THUMBNAIL // max(thumb.width, thumb.height))
      thumb = thumb.resize((thumb.width * scale, thumb.height * scale), Image.Resampling.NEAREST)
    sheet.paste(thumb, (x + (THUMBNAIL - thumb.width) // 2, y + (THUMBNAIL - thumb.height) // 2))
    label = '' if sample.label is None else f'{sample.label} '
    room = cell_w - 6  # the caption ends before the next cell's begins
    draw.text((x, y + THUMBNAIL + 2), fitted(f'{label}{sample.class_text}', caption_font, room),
              fill=(0, 0, 0), font=caption_font)
    draw.text((x, y + THUMBNAIL + 2 + LINE_HEIGHT),
              fitted(sample.key, caption_font, room, keep_end=True),
              fill=(90, 90, 90), font=caption_font)
  return sheet


def histogram_classes(class_counts: dict, names: list) -> list:
  """Label ids drawn: every class, or the MAX_HISTOGRAM_CLASSES most frequent."""
  totals = {}
  for counts in class_counts.values():
    for label, count in counts.items():
      totals[label] = totals.get(label, 0) + count
  # (a detection label map has ids no class has: '' names, not drawn)
  labels = sorted({i for i, name in enumerate(names) if name} | set(totals))
  if len(labels) > MAX_HISTOGRAM_CLASSES:
    labels = sorted(sorted(labels, key=lambda l: -totals.get(l, 0))[:MAX_HISTOGRAM_CLASSES])
  return labels


def histogram_figure(class_counts: dict, names: list, unit: str = 'examples'):
  """A matplotlib Figure: examples per class, one bar group per split.

  class_counts: {split: {label id: count}}. Bars are in split order, each
  split's bars in label order (the test reads them back from the figure).
  """
  matplotlib = quiet_matplotlib()
  matplotlib.use('Agg')
  from matplotlib.figure import Figure
  from matplotlib.ticker import MaxNLocator
  labels = histogram_classes(class_counts, names)
  splits = list(class_counts)
  figure = Figure(figsize=(max(6.0, 0.5 * len(labels) * max(1, len(splits)) + 2), 4), dpi=100)
  axes = figure.subplots()
  width = 0.8 / max(1, len(splits))
  positions = np.arange(len(labels))
  for n, split in enumerate(splits):
    heights = [class_counts[split].get(label, 0) for label in labels]
    bars = axes.bar(positions + (n - (len(splits) - 1) / 2) * width, heights, width, label=split)
    axes.bar_label(bars, fontsize=7)
  # shortened: one 300-character name pushed every bar out of the picture
  ticks = axes.set_xticks(positions, [shorten(names[l]) if 0 <= l < len(names) else str(l)
                                      for l in labels])
  if len(labels) > 8 or _overlapping(figure, ticks):  # 5 names of 20 letters ran together
    for tick in ticks:
      tick.label1.set_rotation(45)
      tick.label1.set_horizontalalignment('right')
  axes.yaxis.set_major_locator(MaxNLocator(integer=True))  # counts: no '1.5 examples'
  # from 0 up: a split whose every record was skipped (all counts 0) drew -0.045..0.045
  axes.set_ylim(0, max(1.0, axes.get_ylim()[1]))
  axes.set_ylabel(unit)
  shown = '' if len(labels) == len([n for n in names if n]) else (
      f' ({len(labels)} most frequent)')
  axes.set_title(HISTOGRAM_TITLE.replace('Examples', unit.capitalize()) + shown)
  if splits:
    axes.legend()
  with _missing_glyphs_as_boxes():
    figure.tight_layout()
  return figure


def _overlapping(figure, ticks: list) -> bool:
  """Whether two neighbouring tick labels, drawn level, overlap."""
  from matplotlib.backends.backend_agg import FigureCanvasAgg
  renderer = FigureCanvasAgg(figure).get_renderer()
  with _missing_glyphs_as_boxes():
    extents = [tick.label1.get_window_extent(renderer) for tick in ticks]
  return any(left.x1 > right.x0 for left, right in zip(extents, extents[1:]))


@contextlib.contextmanager
def _missing_glyphs_as_boxes():
  """matplotlib's UserWarning for each glyph its font lacks (an emoji in a class
  name: 4 lines on stderr per emoji, one drawing) is left out: the box drawn says it."""
  with warnings.catch_warnings():
    warnings.filterwarnings('ignore', r'Glyph \d+ .* missing from font', UserWarning)
    yield


def png_bytes(image: Image.Image) -> bytes:
  buffer = io.BytesIO()
  image.save(buffer, 'PNG')
  return buffer.getvalue()


def figure_png(figure, metadata: Optional[dict] = None) -> bytes:
  buffer = io.BytesIO()
  with _missing_glyphs_as_boxes():
    figure.savefig(buffer, format='png', metadata=metadata)
  return buffer.getvalue()


def _data_uri(png: bytes) -> str:
  return 'data:image/png;base64,' + base64.b64encode(png).decode('ascii')


def _esc(value) -> str:
  """Escaped, invisible and control characters written <U+XXXX>: a U+202E showed
  'abc<U+202E>evil.exe' as 'abcexe.live'."""
  return html.escape(written_out(str(value)))


def _lines(lines: list) -> str:
  """Lines for a <pre>, each escaped: the line breaks between them kept."""
  return '\n'.join(_esc(line) for line in lines)


def _table(headers: list, rows: list, table_id: str, row_keys: Optional[list] = None) -> str:
  """An HTML table; each cell carries data-col=<header> (rows data-row=<key>)."""
  head = ''.join(f'<th>{_esc(h)}</th>' for h in headers)
  body = []
  for n, row in enumerate(rows):
    key = f' data-row="{_esc(row_keys[n])}"' if row_keys else ''
    cells = ''.join(f'<td data-col="{_esc(h)}">{_esc(v)}</td>' for h, v in zip(headers, row))
    body.append(f'<tr{key}>{cells}</tr>')
  return (f'<table id="{table_id}"><thead><tr>{head}</tr></thead>'
          f'<tbody>{"".join(body)}</tbody></table>')


_STYLE = """
body { font-family: sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: left; font-size: 0.9em; }
/* a 300-character class name pushed the counts off the page: the data's text wraps
   anywhere, numbers never (every cell wrapping anywhere squeezed an id 10 to '1 0') */
td[data-col="class"], td[data-col="class_text"], td[data-col="key"], td[data-col="file"],
td[data-col="label"], td[data-col="feature"], td[data-col="value"] { overflow-wrap: anywhere; }
td[data-col="label"] { min-width: 6ch; } td[data-col="key"], td[data-col="file"] { min-width: 14ch; }
td[data-col$="examples"], td[data-col="count"], td[data-col="bytes"] { text-align: right; }
pre { background: #f4f4f4; padding: 0.5em; white-space: pre-wrap; overflow-wrap: anywhere;
      font-size: 0.8em; }
img { max-width: 100%; border: 1px solid #ddd; }
.bad { color: #b00; } .good { color: #070; }
"""

# Marks the page once everything loaded: data-images-loaded / -broken and
# data-page-width (wider than the window: something scrolls sideways) on
# <body>, and a visible line for an image that did not load.
_SCRIPT = """
window.addEventListener('load', function () {
  var images = Array.prototype.slice.call(document.images);
  var broken = images.filter(function (i) { return !i.complete || i.naturalWidth === 0; });
  document.body.dataset.imagesLoaded = images.length - broken.length;
  document.body.dataset.imagesBroken = broken.length;
  document.body.dataset.pageWidth = document.documentElement.scrollWidth;
  broken.forEach(function (i) {
    var note = document.createElement('p');
    note.className = 'bad';
    note.textContent = 'image did not load: ' + i.alt;
    i.parentNode.insertBefore(note, i);
  });
});
"""


def _verdict(validation: Optional[dict], rejected: int, problem: Optional[str] = None,
             skipped: int = 0) -> str:
  """The page's first line: is the dataset proven, and how many rows did not
  make it (at the bottom alone, a reader of the page saw neither first), and
  how much inspect skipped as damaged: a shard cut since validate ran showed
  'Valid' above class counts short of dataset_info.json's."""
  rows = f'{rejected} rejected row(s)'
  if skipped:
    rows += (f'; {skipped} damaged shard(s), record(s) or file(s) skipped by inspect, so '
             f'the counts below are of what it read (see the end of the page)')
    if not problem and validation is None:
      problem = 'Damaged (not validated yet)'
    elif not problem and validation.get('valid'):
      problem = 'Damaged since validate found it valid'
  if problem:
    return f'<p id="verdict" class="bad">{_esc(problem)}; {rows}.</p>'
  if validation is None:
    return (f'<p id="verdict">Not validated yet (run <code>img2tfrecord validate</code>); '
            f'{rows}.</p>')
  good = bool(validation.get('valid'))
  return (f'<p id="verdict" class="{"good" if good else "bad"}">'
          f'{"Valid" if good else "PROBLEMS FOUND"}: {_esc(validation.get("num_examples"))} '
          f'examples read, {_esc(validation.get("num_problems"))} problems; {rows} '
          f'(details below).</p>')


def _validation(validation: Optional[dict], problem: Optional[str]) -> list:
  """The Validation section: validation_report.json's verdict, problems by kind
  and the first 10. Its values are escaped as the dataset's are: a report
  whose num_examples held a <script> ran it when the page was opened."""
  if problem:
    return [f'<p id="validation" class="bad">{_esc(problem)}.</p>']
  if validation is None:
    return ['<p id="validation">Not validated yet (no validation_report.json): run '
            '<code>img2tfrecord validate</code>.</p>']
  good = bool(validation.get('valid'))
  parts = [f'<p id="validation" class="{"good" if good else "bad"}">'
           f'{"valid" if good else "PROBLEMS FOUND"}: {_esc(validation.get("num_examples"))} '
           f'examples read, {_esc(validation.get("num_problems"))} problems.</p>']
  problems = validation.get('problems_by_kind')
  if problems and isinstance(problems, dict):
    parts.append(_table(['kind', 'count'], list(problems.items()), 'problems', list(problems)))
    listed = validation.get('problems')
    first = [json.dumps(p) for p in (listed if isinstance(listed, list) else [])[:10]]
    parts.append(f'<pre>{_lines(first)}</pre>')
  return parts


def report_html(*, title: str, splits: list, class_rows: list, class_headers: list,
                image_spec: dict, feature_spec: dict, histogram_png: bytes,
                sheets: dict, samples_rows: list, rejected: list, rejected_lines: dict,
                validation: Optional[dict], skipped: list, notes: list,
                validation_problem: Optional[str] = None,
                num_skipped: Optional[int] = None) -> str:
  """The self-contained report page (images embedded as data: URIs).

  splits: [(name, examples, bytes, shards)]; class_rows: [[id, name, per split..., total]];
  sheets: {split: contact sheet PNG}; rejected: [(stage, code, count)];
  rejected_lines: {(stage, code): [first lines]}; validation: validation_report.json
  or None; skipped: [str] damaged records inspect skipped (num_skipped of them
  in all when only the first are listed); validation_problem:
  why validation_report.json cannot be shown (not JSON, no object), or None.
  """
  parts = [f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{_esc(title)}</title>'
           f'<style>{_STYLE}</style><script>{_SCRIPT}</script></head><body>',
           f'<h1>{_esc(title)}</h1>']
  parts += [f'<p>{_esc(note)}</p>' for note in notes]
  parts.append(_verdict(validation, sum(count for _, _, count in rejected),
                        validation_problem,
                        len(skipped) if num_skipped is None else num_skipped))
  parts.append('<h2>Splits</h2>')
  parts.append(_table(['split', 'examples', 'bytes', 'shards'], splits, 'splits',
                      [s[0] for s in splits]))
  parts.append('<h2>Classes</h2>')
  parts.append(_table(class_headers, class_rows, 'classes', [r[0] for r in class_rows]))
  parts.append(f'<img id="histogram" alt="label histogram" src="{_data_uri(histogram_png)}">')
  parts.append('<h2>Image</h2>')
  parts.append(_table(['field', 'value'], [[k, json.dumps(v)] for k, v in image_spec.items()],
                      'image_spec', list(image_spec)))
  parts.append('<h2>Features</h2>')
  parts.append(_table(['feature', 'dtype', 'shape'],
                      [[k, v['dtype'], json.dumps(v['shape'])] for k, v in feature_spec.items()],
                      'feature_spec', list(feature_spec)))
  parts.append('<h2>Samples</h2>')
  for split, png in sheets.items():
    parts.append(f'<h3>{_esc(split)}</h3><img class="sheet" data-split="{_esc(split)}" '
                 f'alt="contact sheet of {_esc(split)}" src="{_data_uri(png)}">')
  parts.append(_table(['file', 'split', 'shard', 'record', 'key', 'label', 'class_text'],
                      samples_rows, 'samples', [r[0] for r in samples_rows]))
  parts.append('<h2>Rejected rows</h2>')
  if rejected:
    parts.append(_table(['stage', 'code', 'count'], rejected, 'rejected',
                        [f'{s}/{c}' for s, c, _ in rejected]))
    for (stage, code), lines in rejected_lines.items():
      parts.append(f'<h4>{_esc(stage)}/{_esc(code)}: first {len(lines)}</h4>'
                   f'<pre>{_lines(lines)}</pre>')
  else:
    parts.append('<p id="rejected">None: every manifest row is an example.</p>')
  parts.append('<h2>Validation</h2>')
  parts += _validation(validation, validation_problem)
  if skipped:
    parts.append('<h2>Damaged records skipped by inspect</h2>')
    parts.append(f'<pre id="skipped">{_lines(skipped)}</pre>')
  parts.append('</body></html>\n')
  return '\n'.join(parts)
