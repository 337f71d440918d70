"""convert's summary on the terminal: what was written, rejected, warned about
and reused, from the dataset_info.json it wrote."""

from __future__ import annotations

from typing import Optional

from transforms.core import reuse
from transforms.core.dataset_info import over_budget_reason
from transforms.core.labels import written_out


def summary(info: dict, seconds: float) -> str:
  """A few lines for the terminal: what was written, what was rejected."""
  lines = [f'Converted {info["num_examples"]} of {info["num_manifest_rows"]} rows '
           f'in {seconds:.1f} s; {info["num_rejected"]} rejected'
           + (' (see rejected.jsonl)' if info['num_rejected'] else '') + '.']
  for name, split in info['splits'].items():
    lines.append(f'  {name}: {split["num_examples"]} examples, '
                 f'{split["num_bytes"] / 1e6:.1f} MB in {len(split["shards"])} shard(s)')
    lines += _class_lines(split)
  for reason, count in info['rejected_by_reason'].items():
    lines.append(f'  rejected {reason}: {count}')
  for reason, count in info.get('label_manifest_rejected_by_reason', {}).items():
    lines.append(f'  label manifest line rejected {reason}: {count} (not an image row)')
  if info.get('num_skipped_files'):
    shown = info['skipped_files']
    lines.append(f'  skipped {info["num_skipped_files"]} file(s) that are not images by '
                 f'name (--image_extensions): {", ".join(map(written_out, shown))}'
                 + (', ...' if info['num_skipped_files'] > len(shown) else ''))
  for reason, count in info.get('rejected_annotations_by_reason', {}).items():
    lines.append(f'  annotation rejected {reason}: {count} (not an image row)')
  lines.append(f'  classes: {_classes(info)}; output: {info["config"]["output_dir"]}')
  if info.get('detection'):  # --schema detection
    found = info['detection']
    lines.append(f'  objects: {found["num_objects"]}; boxes dropped by the crop: '
                 f'{found["dropped_boxes"]["crop_visibility"]}; images without objects '
                 f'skipped: {found["num_skipped_empty"]}')
    if found.get('num_skipped_unlisted'):
      shown = found['skipped_unlisted']
      lines.append(f'  skipped {found["num_skipped_unlisted"]} annotation file(s) that no '
                   f'ImageSets/Main split file lists: {", ".join(shown)}'
                   + (', ...' if found['num_skipped_unlisted'] > len(shown) else ''))
  if info.get('reuse'):
    lines.append(reuse.summary_line(info['reuse']))
  lines += warning_lines(info)
  if not info['num_manifest_rows']:
    lines.append('Warning: the manifest has no rows; the dataset is empty.')
  return '\n'.join(lines)


def over_budget_line(info: dict) -> Optional[str]:
  """The line saying why a run over its error budget exits 3 (None within
  it): for stderr, where a caller that keeps only stderr (cron) finds it."""
  if not info['over_budget']:
    return None
  return f'{over_budget_reason(info) or "Over its error budget"}: exit code 3.'


def _classes(info: dict) -> str:
  """How many classes: a detection label map's ids have gaps (num_classes is
  its largest id, '' names the ids no class has)."""
  if not info.get('detection'):
    return str(info['num_classes'])
  count = sum(1 for name in info['label_map'] if name)
  return f'{count}' + (f' (ids up to {info["num_classes"]})' if count != info['num_classes']
                       else '')


# Up to this many classes the summary lists them all; above, the extremes.
SUMMARY_CLASSES = 20
SUMMARY_EXTREMES = 3


def _class_lines(split: dict) -> list:
  counts = split.get('examples_per_class') or {}
  if not counts:
    return []
  ratio = split.get('imbalance_ratio')
  ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
  # a name holding ESC or U+202E printed raw recoloured or turned the line around
  shown = lambda items: ', '.join(f'{written_out(name)} {n}' for name, n in items)  # noqa: E731
  if len(ranked) <= SUMMARY_CLASSES:
    text = f'per class: {shown(ranked)}'
  else:
    text = (f'per class: largest {shown(ranked[:SUMMARY_EXTREMES])}; smallest '
            f'{shown(ranked[-SUMMARY_EXTREMES:])}')
  return [f'    {text}' + (f'; imbalance {ratio:.1f}x' if ratio else '')]


def warning_lines(info: dict) -> list:
  """One line per kind of warning dataset_info.json holds."""
  lines = []
  labels = info.get('label_warnings') or {}
  if labels.get('num_case_variant_groups'):
    groups = ['/'.join(map(written_out, group)) for group in labels['case_variants'][:3]]
    lines.append(f'Warning: {labels["num_case_variant_groups"]} group(s) of labels differ '
                 f'only in case, kept apart: {"; ".join(groups)} '
                 f'(--label_normalize lower merges them)')
  if labels.get('num_labels_with_surrounding_spaces'):
    names = list(labels['surrounding_spaces'])[:3]
    lines.append(f'Warning: {labels["num_labels_with_surrounding_spaces"]} label(s) had '
                 f'surrounding spaces in some rows, stripped (one class with any unspaced '
                 f'spelling): {names} (--label_normalize strip says that is intended)')
  if labels.get('num_labels_with_invisible_characters'):
    shown = [entry['shown'] + (f' (looks like {", ".join(entry["looks_like"])})'
                               if entry['looks_like'] else '')
             for entry in labels['invisible_characters'][:3]]
    lines.append(f'Warning: {labels["num_labels_with_invisible_characters"]} label(s) hold '
                 f'invisible or bidi control characters, kept as written: {"; ".join(shown)} '
                 f'(see label_warnings in dataset_info.json)')
  if labels.get('num_normalization_variant_groups'):
    groups = ['/'.join(ascii(label) for label in group)
              for group in labels['normalization_variants'][:3]]
    lines.append(f'Warning: {labels["num_normalization_variant_groups"]} group(s) of labels '
                 f'are one text in different Unicode forms, kept apart: {"; ".join(groups)} '
                 f'(the default --label_normalize nfc merges them)')
  if labels.get('num_labels_not_integers'):
    lines.append(f'Warning: {labels["num_labels_not_integers"]} label(s) are not non-negative '
                 "integers, so the class ids follow the labels sorted as text, not the "
                 "integers' values ('10' before '2'; '1' and '01' two classes): "
                 f'{labels["labels_not_integers"][:5]} (label_map.txt lists the ids; '
                 f'--label_map sets them)')
  if labels.get('num_empty_classes'):
    lines.append(f'Warning: {labels["num_empty_classes"]} class(es) of the label map have '
                 f'no {"object" if info.get("detection") else "example"} (ids kept): '
                 f'{labels["empty_classes"][:5]}')
  copies = info.get('content_duplicates') or {}
  if copies.get('num_within_split') or copies.get('num_across_splits'):
    lines.append(f'Warning: {copies["num_within_split"] + copies["num_across_splits"]} '
                 f'image(s) repeat the bytes of another row under another key: '
                 f'{copies["num_within_split"]} within a split, '
                 f'{copies["num_across_splits"]} across splits{_conflicts(copies)} (see '
                 f'content_duplicates in dataset_info.json; --dedupe content, --split_by '
                 f'content)')
  cut_short = (info.get('reuse') or {}).get('sidecars_cut_short')
  if cut_short:  # else a damaged previous dataset passes for that many new images
    lines.append(f'Warning: {cut_short} sidecar(s) of the previous dataset are damaged: '
                 f'read up to the damage (none of one whose gzip check fails), the rows '
                 f'past it encoded as new (see reuse.sidecars_cut_short in '
                 f'dataset_info.json)')
  return lines


# Copies under conflicting labels the warning line names (dataset_info.json lists more).
SUMMARY_CONFLICTS = 3


def _conflicts(copies: dict) -> str:
  """'; N of them labelled otherwise than their first copy (...)' when one
  image carries two labels (label noise); '' else, or for a dataset_info.json
  written before convert counted them."""
  count = copies.get('num_conflicting_labels')
  if not count:
    return ''
  shown = '; '.join(f'{_copy(c["duplicate"])} where {_copy(c["first"])}'
                    for c in copies['conflicting_labels'][:SUMMARY_CONFLICTS])
  more = ', ...' if count > SUMMARY_CONFLICTS else ''
  return (f'; {count} of them labelled otherwise than their first copy (conflicting '
          f'labels: {shown}{more})')


def _copy(copy: dict) -> str:
  # a key or class name holding ESC or U+202E printed raw recoloured the line
  label = copy['label']
  said = ('{' + ', '.join(repr(written_out(one)) for one in label) + '}'
          if isinstance(label, list) else repr(written_out(label)))
  return f'line {copy["line"]}, key {written_out(copy["key"])!r} says {said}'
