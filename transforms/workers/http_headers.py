"""What an answer's headers say, for http_fetch.py: whether X-Robots-Tag
opts its image out, how long Retry-After asks to wait, the ETag and
Last-Modified a nightly run compares. Plain functions of header values.
"""

from __future__ import annotations

import email.utils
import time
from typing import Optional

# The opt-outs img2dataset honours by default (X-Robots-Tag).
OPT_OUTS = frozenset({'noai', 'noimageai', 'noindex', 'noimageindex'})
# The directives written `name: value` (Google's robots meta tag reference): a
# header value that starts with one addresses every agent, not one so named.
VALUED_DIRECTIVES = frozenset({'max-snippet', 'max-image-preview', 'max-video-preview',
                               'unavailable_after'})


def robots_opt_out(values: list, token: str) -> Optional[str]:
  """The X-Robots-Tag directive that opts this image out, or None.

  Each header value is a comma list of directives, optionally after an
  agent name (`somebot: noai, noindex`); such a value applies only when it
  names `token`. A value without an agent applies to every agent: one
  whose text before its first colon is no single name (`noindex,
  unavailable_after: ...`, `noai,max-snippet:0`), or is a directive of
  VALUED_DIRECTIVES (`max-image-preview:large, noai`: such a value was read
  as addressed to an agent `max-image-preview`, and its noai missed)."""
  for value in values:
    agent, sep, rest = value.partition(':')
    name = agent.strip()
    addressed = (sep and name and not any(c in name for c in ' \t,')
                 and name.lower() not in VALUED_DIRECTIVES)
    if addressed and name.lower() != token.lower():
      continue
    directives = rest if addressed else value
    for directive in directives.split(','):
      if directive.strip().lower() in OPT_OUTS:
        return value.strip()
  return None


def retry_after_s(value: Optional[str], now: Optional[float] = None) -> Optional[float]:
  """A Retry-After header (seconds, or an HTTP date) as seconds to wait."""
  if not value:
    return None
  value = value.strip()
  if value.isdigit():
    return float(value)
  try:
    when = email.utils.parsedate_to_datetime(value).timestamp()
  except (TypeError, ValueError):
    return None
  return max(0.0, when - (time.time() if now is None else now))


def change_metadata(status: int, headers) -> Optional[dict]:
  """{'etag', 'mtime': Last-Modified} of an answer (a HEAD's, or the GET's
  that fetched the bytes), None unless it is a 200 with either."""
  meta = {'etag': headers.get('ETag'), 'mtime': headers.get('Last-Modified')}
  return meta if status == 200 and any(meta.values()) else None
