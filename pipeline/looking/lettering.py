"""The text inspect draws and prints of the data: class names and keys
shortened, invisible and control characters written out, and the font they
are drawn in."""

from __future__ import annotations

import functools
import logging
import os
import unicodedata

from PIL import ImageFont

from transforms.core.labels import written_out

NAME_CHARS = 20  # a class name or key drawn or listed: its first 19 characters and '…'


@functools.cache
def font(size: int) -> ImageFont.FreeTypeFont:
  """DejaVu Sans, which matplotlib ships: Pillow's own font (Aileron) drew every
  Cyrillic, Greek, Hebrew and Arabic letter as the same empty box."""
  return ImageFont.truetype(
      os.path.join(quiet_matplotlib().get_data_path(), 'fonts', 'ttf', 'DejaVuSans.ttf'), size)


def quiet_matplotlib():
  """matplotlib, imported without its warnings about a config folder it
  cannot write (HOME read-only or not the user's: a CI runner, a container
  user without a home): 'mkdir -p failed for path ...' and 'Matplotlib
  created a temporary cache directory ...', two lines on a run that went
  well. It works as well in that temporary folder, which it removes at exit."""
  logger = logging.getLogger('matplotlib')
  level = logger.level
  logger.setLevel(logging.ERROR)
  try:
    import matplotlib
    import matplotlib.font_manager  # its cache folder: the same warning
  finally:
    logger.setLevel(level)
  return matplotlib


def shorten(text: str, limit: int = NAME_CHARS, keep_end: bool = False) -> str:
  """The text in `limit` characters at most, invisible and control ones
  written <U+XXXX> (written_out: a U+202E turned the rest of a line around;
  in the terminal, the counts after it)."""
  text = written_out(text)
  if len(text) <= limit:
    return text
  return '…' + text[1 - limit:] if keep_end else text[:limit - 1] + '…'


def fitted(text: str, typeface: ImageFont.FreeTypeFont, width: float,
           keep_end: bool = False) -> str:
  """shorten(text), cut further until it is drawn in `width` pixels: 20 wide
  letters ('W', 'm', a detection image's ids '1+2+3+...') took 150 to 200
  pixels and ran into the next thumbnail's caption."""
  text = shorten(text, keep_end=keep_end)
  while len(text) > 1 and typeface.getlength(text) > width:
    text = '…' + text[2:] if keep_end else text[:-2] + '…'
  return text


def _columns(char: str) -> int:
  """Terminal columns of one character: 2 for East Asian wide ones and most
  emoji, 0 for combining marks, 1 for the rest."""
  if unicodedata.combining(char) or unicodedata.category(char) in ('Mn', 'Me'):
    return 0
  return 2 if unicodedata.east_asian_width(char) in ('W', 'F') else 1


def in_columns(text: str, columns: int = NAME_CHARS) -> str:
  """shorten(text) cut to `columns` terminal columns and padded to them: a
  padding by characters moved the counts after a Chinese class name (2
  columns a character) or an emoji 1 column right each, and after one with
  combining accents left."""
  text = shorten(text)
  width = sum(map(_columns, text))
  while width > columns:
    text = text.rstrip('…')[:-1] + '…'
    width = sum(map(_columns, text))
  return text + ' ' * (columns - width)
