"""YAML files a user hands over (--config files, a YOLO data.yaml) read as
plain data, held to what such a file needs: a plain function.

A key given twice is an error (never "last wins"); lists and mappings nest at
most MAX_DEPTH levels (deeper blew Python's recursion limit: a traceback); and
YAML anchors and aliases are refused. An alias is a reference that whoever
walks the data writes out again: nine levels of nine aliases each (the
"billion laughs") took 55 s and 3.6 GB before failing. The checks run while
the YAML is composed, so such a file is refused at its first anchor, before
anything expands. Booleans are YAML 1.2's: only true and false (YAML 1.1 also
reads yes/no/on/off as booleans: `progress: off` means the word, as on the
command line, and a class named `no` stays a name).

A double-quoted string may escape a character outside the BMP as two \\u
escapes, a UTF-16 surrogate pair, as JSON does (a data.yaml written by
json.dump, which YAML 1.2 reads as YAML): PyYAML keeps the two halves as two
characters, which no UTF-8 file can hold (a YOLO class named so failed the
job at its end, writing dataset_info.json: a traceback, exit 1). A pair is
read as its character; a half without its other half is refused.
"""

from __future__ import annotations

import re

# Lists and mappings nested deeper than this are refused: a config's value is
# at most a mapping of lists, a data.yaml's `names` a list or a mapping.
MAX_DEPTH = 32
TOO_DEEP = f'nested deeper than {MAX_DEPTH} levels'


class PlainYamlError(ValueError):
  """The file does not parse or breaks one of the rules above: one line,
  starting with the `where` it was loaded with."""


def load(text: str, where: str):
  """The YAML document in `text` as plain data (dicts, lists, str, int,
  float, bool, None); PlainYamlError otherwise. where: how messages name the
  file (e.g. '--config c.yaml')."""
  import yaml  # only what reads YAML pays for it

  class Loader(yaml.SafeLoader):
    depth = 0

    def compose_node(self, parent, index):
      event = self.peek_event()
      if isinstance(event, yaml.AliasEvent) or getattr(event, 'anchor', None) is not None:
        raise PlainYamlError(f'{where}: line {event.start_mark.line + 1}: YAML anchors '
                             'and aliases (&name, *name) are not accepted; write the value out')
      if self.depth >= MAX_DEPTH and isinstance(
          event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
        raise PlainYamlError(f'{where}: line {event.start_mark.line + 1}: {TOO_DEEP}')
      self.depth += 1
      try:
        return super().compose_node(parent, index)
      finally:
        self.depth -= 1

    def compose_mapping_node(self, anchor):
      node = super().compose_mapping_node(anchor)
      first = {}
      for key, _ in node.value:
        if isinstance(key, yaml.ScalarNode):
          seen = first.setdefault((key.tag, key.value), key)
          if seen is not key:
            raise PlainYamlError(f'{where}: key {key.value!r} is given twice (lines '
                                 f'{seen.start_mark.line + 1} and {key.start_mark.line + 1})')
      return node

    def construct_scalar(self, node):
      value = super().construct_scalar(node)
      return _paired(value, node, where) if isinstance(value, str) else value

  bool_tag = 'tag:yaml.org,2002:bool'
  Loader.yaml_implicit_resolvers = {
      first: [(tag, regexp) for tag, regexp in resolvers if tag != bool_tag]
      for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
  Loader.add_implicit_resolver(bool_tag, re.compile(r'^(?:true|True|TRUE|false|False|FALSE)$'),
                               list('tTfF'))
  try:
    return yaml.load(text, Loader)  # a SafeLoader: builds plain data only
  except yaml.YAMLError as error:
    problem = getattr(error, 'problem', None) or str(error).splitlines()[0]
    mark = getattr(error, 'problem_mark', None)
    at = f'line {mark.line + 1}: ' if mark is not None else ''
    context, started = getattr(error, 'context', None), getattr(error, 'context_mark', None)
    if context and started is not None and (mark is None or started.line != mark.line):
      problem += f' ({context} started at line {started.line + 1})'
    raise PlainYamlError(f'{where} does not parse: {at}{problem}') from None


_SURROGATE = re.compile('[\ud800-\udfff]')
_LONE = re.compile('[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]')


def _paired(value: str, node, where: str) -> str:
  """A scalar's text with each UTF-16 surrogate pair (two \\u escapes) read
  as the one character it is; PlainYamlError for a half without its other."""
  if not _SURROGATE.search(value):
    return value
  try:
    return value.encode('utf-16-le', 'surrogatepass').decode('utf-16-le')
  except UnicodeDecodeError:
    lone = _LONE.search(value).group()
    raise PlainYamlError(
        f'{where}: line {node.start_mark.line + 1}: a string holds a lone UTF-16 surrogate '
        f'(\\u{ord(lone):04x}), half a character: escape the whole character '
        '(\\U0001F426, or a surrogate pair \\ud83d\\udc26) or write it as UTF-8') from None
