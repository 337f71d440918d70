"""urllib3's own log records, with the credentials of the URLs in them
redacted (core/redact.shown_url) and without their tracebacks. urllib3 logs
the URL it asked, query included, when an answer's headers do not parse
(a WARNING, with the traceback of its own HeaderParsingError), when a HEAD
request (a nightly run's) follows a redirect (INFO), and the path and query
it asked with each answer's status (DEBUG: 'http://host:80 "GET
/a.png?token=.. HTTP/1.1" 200 69'): a signed URL's X-Amz-Signature or token
showed wherever the process logs at that level: a Dataflow worker's log
(INFO), a notebook's or Airflow task's that configured logging. Installed
by http_fetch.py when it makes its connections. Below http_fetch.py.
"""

from __future__ import annotations

import logging
import re
import threading

from transforms.core.redact import redact_text
from transforms.core.redact import shown_url

# The loggers of urllib3's modules that log a URL (each module's
# logging.getLogger(__name__)). A filter applies only to records of the
# logger it is added to, never to those of its children: each is named.
URLLIB3_LOGGERS = ('urllib3.connection', 'urllib3.connectionpool', 'urllib3.poolmanager',
                   'urllib3.response', 'urllib3.util.retry')
# A URL inside a message: from its scheme to the next white space (a
# password or a query value may hold any other character).
_URL = re.compile(r'[A-Za-z][A-Za-z0-9+.-]*://\S+')
# A request's target apart from its URL's scheme and host, as connectionpool's
# DEBUG line of each answer shows it ('"GET /a.png?X-Amz-Signature=.. HTTP/1.1"'):
# a path after white space or a quote, with a query, to the next white space.
_TARGET = re.compile(r'(?:(?<=\s)|(?<="))/\S*\?\S*')
_INSTALLED = threading.Lock()


class RedactedUrls(logging.Filter):
  """Each record's message made once, its URLs shown as rows show them;
  the record kept (it says what happened), its traceback dropped (urllib3's
  own frames, that tell a user nothing the message does not)."""

  def filter(self, record: logging.LogRecord) -> bool:
    message = record.getMessage()
    message = _URL.sub(lambda found: shown_url(found.group()), message)
    # the query's credentials alone: redact_text of the whole line hid the
    # status after a last secret value too (it ends at '&', ';' or the end)
    record.msg = _TARGET.sub(lambda found: redact_text(found.group()), message)
    record.args = None
    record.exc_info = None
    record.exc_text = None
    return True


_FILTER = RedactedUrls()


def redact_urllib3_logs() -> None:
  """Add the filter to urllib3's loggers, once per process."""
  with _INSTALLED:
    for name in URLLIB3_LOGGERS:
      logger = logging.getLogger(name)
      if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
