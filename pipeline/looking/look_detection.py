"""inspect on a --schema detection dataset: each sample's boxes with their
class names drawn on it, its masks as a translucent overlay."""

from __future__ import annotations

from typing import Optional

import numpy as np
from PIL import Image
from PIL import ImageDraw

from pipeline.looking import lettering

# One colour per class id (cycled), bright on photos.
PALETTE = ((255, 64, 64), (64, 200, 255), (255, 220, 0), (120, 255, 90), (255, 120, 255),
           (255, 160, 40), (0, 255, 200), (170, 130, 255))
MASK_ALPHA = 0.45


def colour(label: int) -> tuple:
  return PALETTE[int(label) % len(PALETTE)]


def draw_objects(image: Image.Image, objects: tuple, font_size: int = 12) -> Image.Image:
  """An RGB copy of `image` with the objects drawn: objects = (boxes [N, 4]
  ymin, xmin, ymax, xmax in [0, 1]; class ids [N]; class names [N]; masks
  [N, H, W] of 0/1 or None)."""
  boxes, labels, texts, masks = objects
  picture = image.convert('RGB')
  width, height = picture.size
  if masks is not None and len(masks):
    pixels = np.asarray(picture, np.float32)
    for label, mask in zip(labels, masks):
      shown = np.asarray(Image.fromarray(np.asarray(mask, np.uint8)).resize(
          (width, height), Image.Resampling.NEAREST)) > 0
      pixels[shown] = pixels[shown] * (1 - MASK_ALPHA) + np.array(colour(label)) * MASK_ALPHA
    picture = Image.fromarray(pixels.round().astype(np.uint8), 'RGB')
  draw = ImageDraw.Draw(picture)
  font = lettering.font(font_size)
  line = max(1, round(min(width, height) / 160))
  for (ymin, xmin, ymax, xmax), label, text in zip(boxes, labels, texts):
    text = lettering.shorten(text)  # a 300-character name ran across the whole picture
    left, top = xmin * width, ymin * height
    # a box under 1 pixel wide or high at this size (COCO's 1-pixel boxes on a
    # thumbnail): its right below its left made Pillow raise ValueError
    box = (left, top, max(left, xmax * width - 1), max(top, ymax * height - 1))
    draw.rectangle(box, outline=colour(label), width=line)
    left, top, right, bottom = draw.textbbox((box[0], box[1]), text, font=font)
    # kept inside the picture: a box at the right edge had its name cut off there
    place = (max(0, min(box[0], width - (right - left) - 2)), max(0, box[1] - (bottom - top) - 2))
    left, top, right, bottom = draw.textbbox(place, text, font=font)
    draw.rectangle((left - 1, top - 1, right + 1, bottom + 1), fill=colour(label))
    draw.text(place, text, fill=(0, 0, 0), font=font)
  return picture


def sample_objects(example: dict) -> Optional[tuple]:
  """What draw_objects draws of a read.examples example (None: no boxes)."""
  if 'classes' not in example:  # (a classification dataset's: no objects)
    return None
  return (example['boxes'], list(example['classes']), list(example['class_text']),
          example.get('masks'))
