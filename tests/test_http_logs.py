"""urllib3's log records, filtered by transforms/workers/http_logs.py: no
credential of a URL shows in them, whichever part of the message holds it."""

from __future__ import annotations

import logging

from transforms.workers import http_logs

SECRET = 'S1GN4TURE'


def _filtered(msg: str, *args) -> str:
  record = logging.LogRecord('urllib3.connectionpool', logging.DEBUG, __file__, 1, msg, args,
                             None)
  assert http_logs.RedactedUrls().filter(record)
  return record.getMessage()


def test_the_debug_line_of_an_answer_shows_no_query_credential():
  # connectionpool logs each answer's request target apart from its scheme
  # and host (the same call as urllib3 2.x's _make_request): the URL pattern
  # never saw the query, and the signature showed at DEBUG.
  shown = _filtered('%s://%s:%s "%s %s %s" %s %s', 'http', '127.0.0.1', 8080, 'GET',
                    f'/a.png?X-Amz-Signature={SECRET}&id=9&token={SECRET}', 'HTTP/1.1', 200, 69)
  assert shown == ('http://127.0.0.1:8080 "GET /a.png?X-Amz-Signature=<redacted>&id=9'
                   '&token=<redacted> HTTP/1.1" 200 69')


def test_a_relative_redirect_and_a_plain_path_are_shown_as_they_are_but_credentials():
  assert _filtered('Redirecting %s -> %s', f'/a.png?sig={SECRET}', 'http://h/b.png') == (
      'Redirecting /a.png?sig=<redacted> -> http://h/b.png')
  assert _filtered('Starting new HTTP connection (%d): %s:%s', 1, 'h', 80) == (
      'Starting new HTTP connection (1): h:80')
  assert _filtered('%s://%s:%s "%s %s %s" %s %s', 'http', 'h', 80, 'GET', '/a.png?id=9',
                   'HTTP/1.1', 200, 69) == 'http://h:80 "GET /a.png?id=9 HTTP/1.1" 200 69'
