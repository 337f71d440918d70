"""Jar manifests: the one of an assembled job server's thin jar, written
(its Main-Class and the Class-Path of its lib/), and what a job server jar's
says, read on the launcher before the job server is started: whether `java
-jar` can run it at all (a Main-Class) and which jars of its Class-Path are
not there.

A jar of the cache whose lib/ had lost a jar (or a jar given that is no job
server: one of Beam's runner libraries) started a JVM that ended at once
(`Could not find or load main class`, `no main manifest attribute`); Beam
tried three times, then the run failed with exit 1, three `Failed to start
job service` lines and a traceback of 40 lines, none saying why.
"""

from __future__ import annotations

import os
import urllib.parse
import zipfile

MANIFEST = 'META-INF/MANIFEST.MF'


def attributes(jar: str) -> dict:
  """The main attributes of a jar's manifest (name -> value, continuation
  lines joined, as the jar spec folds them); {} when it has none or cannot
  be read (check_job_server_jar says so of a path that is no jar)."""
  try:
    with zipfile.ZipFile(jar) as archive:
      data = archive.read(MANIFEST)
  except (OSError, KeyError, zipfile.BadZipFile):
    return {}
  text = data.decode('utf-8', errors='replace').replace('\r\n', '\n').replace('\r', '\n')
  found = {}
  for line in text.replace('\n ', '').split('\n\n', 1)[0].splitlines():
    name, colon, value = line.partition(':')
    if colon:
      found[name.strip()] = value.strip()
  return found


def missing_class_path(jar: str) -> list:
  """The Class-Path entries of `jar` (relative URLs, resolved from its
  folder, as Java does) that are no file; absolute URLs are left out."""
  folder = os.path.dirname(os.path.abspath(jar))
  missing = []
  for entry in attributes(jar).get('Class-Path', '').split():
    if urllib.parse.urlparse(entry).scheme or entry.startswith('/'):
      continue
    if not os.path.isfile(os.path.join(folder, urllib.parse.unquote(entry))):
      missing.append(urllib.parse.unquote(entry))
  return missing


def manifest(main_class: str, class_path: list) -> bytes:
  """A jar manifest: lines of at most 72 bytes, continued with a space (the jar spec)."""
  def wrap(line: str) -> bytes:
    data = line.encode('utf-8')
    parts = [data[:72]] + [b' ' + data[i:i + 71] for i in range(72, len(data), 71)]
    return b'\r\n'.join(parts) + b'\r\n'
  return (wrap('Manifest-Version: 1.0') + wrap(f'Main-Class: {main_class}')
          + wrap('Class-Path: ' + ' '.join(class_path)) + b'\r\n')


def write_thin_jar(path: str, main_class: str, class_path: list) -> None:
  """A jar holding only a manifest: `java -jar` runs main_class with class_path
  (relative to the jar's folder) on its class path."""
  with zipfile.ZipFile(path, 'w') as jar:
    jar.writestr(MANIFEST, manifest(main_class, class_path))
