"""Credentials out of the options a run records (dataset_info.json's `options`),
and out of the URLs a row shows (image/filename, keys, rejected.jsonl):
shown_url.

An option whose name says it is a credential (s3_secret_access_key,
s3_session_token, gbek, ...) is recorded as REDACTED. Any other value is
recorded, but for the credentials inside it, found by their form:

- the user part of a URL, `scheme://user:password@host` ->
  `scheme://<redacted>@host`, the user name too: a token is often given as
  the user name alone (`https://TOKEN@host`);
- `name=value` pairs whose name says secret (SECRET_NAME), wherever such pairs
  are written: connection strings (`AccountKey=<redacted>;...`), URL queries
  and SAS tokens (`...&sig=<redacted>`), KEY=VALUE lists (`--labels`,
  `--environment_options`, `-Dx.keyStorePassword=...` JVM properties). The
  value runs to the next `;` or `&`, or to the end: a value is hidden
  whole, whatever follows it in a comma list with it;
- in a JSON object (a mapping option, or a string holding JSON such as
  `--environment_config`), the value of a key whose name says secret.

The names are kept, so the record still tells which account or endpoint a run
used. A value with no credential in it is recorded unchanged, so the recorded
options stay a config file of the run (credentials aside).
"""

from __future__ import annotations

import json
import re

REDACTED = '<redacted>'
# Option names whose whole value is a credential.
SECRET_OPTION = re.compile(r'secret|passw|token|access_key|credential|gbek', re.IGNORECASE)
# Names of pairs and JSON keys whose value is a credential: AccountKey,
# SharedAccessKey, SharedAccessSignature, Password, pwd, sig, X-Amz-Signature,
# X-Goog-Signature, X-Amz-Security-Token, token, access_token, key, api_key,
# client_secret, AWSAccessKeyId (a SigV2 presigned URL's access key, which
# SigV4's X-Amz-Credential holds, and --s3_access_key_id is redacted), ...
# (SharedAccessKeyName, AccountName and sv are kept).
SECRET_NAME = re.compile(r'secret|passw|pwd|token|signature|credential|access_?key_?id|'
                         r'(?:key|sig|auth)$', re.IGNORECASE)
_USERINFO = re.compile(r'\b([A-Za-z][A-Za-z0-9+.-]*://)([^/?#\s]+)@')
# A pair's name starts the text or follows a separator: `;` (connection
# strings), `&`/`?` (queries), `,` or space (lists), `=` (a pair inside a
# value: process_variables=TOKEN=x). `-D` starts a JVM property.
_PAIR = re.compile(r'(?:^|(?<=[;&?,=\s]))(-*[A-Za-z_][\w.-]*)[ \t]*=')
_VALUE_END = re.compile(r'[;&]')


def secret_name(name: str) -> bool:
  return bool(SECRET_NAME.search(name.strip()))


def redact_option(name: str, value):
  """One recorded option (a JSON-safe value) without the credentials in it."""
  if value and SECRET_OPTION.search(name):
    return REDACTED
  return redact_value(value)


def redact_value(value):
  """A JSON-safe value with every credential found in it replaced by REDACTED."""
  if isinstance(value, str):
    return redact_text(value)
  if isinstance(value, list):
    return [redact_value(v) for v in value]
  if isinstance(value, dict):  # keys too: Beam makes some from the user's text
    return {redact_value(k): REDACTED if v and isinstance(k, str) and secret_name(k)
            else redact_value(v) for k, v in value.items()}
  return value


def redact_text(text: str) -> str:
  if text.lstrip().startswith(('{', '[')):
    try:
      data = json.loads(text)
    except (ValueError, RecursionError):  # not JSON: redacted as text below
      data = None
    if isinstance(data, (dict, list)):
      redacted = redact_value(data)
      return text if redacted == data else json.dumps(redacted)
  text = _USERINFO.sub(lambda m: f'{m.group(1)}{REDACTED}@', text)
  out, last = [], 0
  for match in _PAIR.finditer(text):
    if match.start() < last or not secret_name(match.group(1)):
      continue  # inside a value already hidden, or not a secret
    if text.startswith(REDACTED, match.end()):
      continue  # hidden already (a message built from a shown URL): what follows stays
    end = _VALUE_END.search(text, match.end())
    stop = end.start() if end else len(text)
    if stop > match.end():
      out += [text[last:match.end()], REDACTED]
      last = stop
  return ''.join(out) + text[last:]


# A text that starts as a URL: its scheme, and its authority (to the first
# '/', '?' or '#', as urllib.parse.urlsplit takes it).
_URL_AUTHORITY = re.compile(r'([A-Za-z][A-Za-z0-9+.-]*://)([^/?#]*)')


def _url_user_end(text: str) -> int:
  """Where the user part of the URL `text` starts with ends (the index of
  its '@'), or -1. The user part is the authority's up to its last '@', as
  the request takes it: a space in the password too (_USERINFO, for any
  text, stops at one). An authority whose port is no number, with an '@'
  after it, is a user:password holding '/', '?' or '#' unescaped: such a
  URL fails to parse, and its row showed the password."""
  found = _URL_AUTHORITY.match(text)
  if found is None:
    return -1
  authority = found.group(2)
  if '@' in authority:
    return found.start(2) + authority.rindex('@')
  port = authority.rpartition(':')[2]
  if ':' in authority and not authority.startswith('[') and not port.isdigit():
    return text.find('@', found.end(2))
  return -1


def shown_url(text: str) -> str:
  """A path as a row may show it: a URL's user part and the query values
  that are credentials (a signed URL's X-Amz-Signature, sig, token, key,
  ...) redacted (redact_text); any other text as it is."""
  if '://' not in text:
    return text
  end = _url_user_end(text)
  if end >= 0:
    start = text.index('://') + 3
    text = f'{text[:start]}{REDACTED}{text[end:]}'
  return redact_text(text)


def shown_value(value):
  """A rejected row's cells (a line, a dict, lists) with shown_url applied to
  every string in them; nothing else changes (a column named `key` stays)."""
  if isinstance(value, str):
    return shown_url(value)
  if isinstance(value, list):
    return [shown_value(v) for v in value]
  if isinstance(value, dict):
    return {k: shown_value(v) for k, v in value.items()}
  return value
