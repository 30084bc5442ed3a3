"""A cluster's objects and events beside any dump: `kubectl get ... -o json` exports (a `List`, or one object) and
the OpenTelemetry Collector's k8sobjects receiver (pull or watch) as its file exporter writes it (OTLP/JSON log
records whose body is the object, or a watch's `{type, object}`; `event.domain` is `k8s`). The loader gives this
module every JSON file an adapter skipped (`claim`), whatever the dump's layout; they load into
`k8s_objects` (seen: the export file's time, a record's time) and `k8s_events`."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import re
from pathlib import Path

from common.errors import LoadError

from .. import kubectl
from .base import InputFile, Query

KIND = "k8s_export"
PEEK = 1 << 16  # bytes read to tell a file's kind
EXPORT = re.compile(r'^\s*\{\s*"apiVersion"\s*:')  # kubectl's JSON opens so
COLLECTOR = re.compile(r'"key"\s*:\s*"event\.domain"\s*,\s*"value"\s*:\s*\{\s*"stringValue"\s*:\s*"k8s"')


def _open(path: Path):
    return gzip.open(path, "rt", encoding="utf-8", errors="replace") if path.suffix == ".gz" else \
        open(path, encoding="utf-8", errors="replace")


def head(path: Path, size: int = PEEK) -> str:
    """A plain or gzip file's first `size` characters."""
    with _open(path) as f:
        return f.read(size)


SUFFIXES = (".json", ".jsonl", ".json.gz", ".jsonl.gz")


def candidates(root: Path) -> list[Path]:
    """The JSON files under a dump, which may be a cluster's exports whatever the dump's layout."""
    return sorted(p for p in Path(root).rglob("*") if p.name.endswith(SUFFIXES) and p.is_file()) \
        if Path(root).is_dir() else []


def claim(file: InputFile) -> InputFile:
    """A file an adapter skipped, as a cluster's export where it is one (by its first bytes); any other as it was.
    (The OTLP adapter tells the Collector's records itself, reading their first line as it does every file's.)"""
    if file.kind != "skip" or not file.path.name.endswith(SUFFIXES):
        return file
    try:
        first = head(file.path)
    except (OSError, EOFError, UnicodeError):
        return file
    if COLLECTOR.search(first) or (EXPORT.match(first) and '"kind"' in first):
        return InputFile(file.path, KIND)
    return file


def _value(any_value):
    """An OTLP AnyValue as Python: maps (kvlistValue) and lists (arrayValue) all the way down."""
    if not isinstance(any_value, dict):
        return any_value
    if "kvlistValue" in any_value:
        return {kv.get("key"): _value(kv.get("value")) for kv in (any_value["kvlistValue"] or {}).get("values", [])}
    if "arrayValue" in any_value:
        return [_value(v) for v in (any_value["arrayValue"] or {}).get("values", [])]
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in any_value:
            return any_value[key]
    if "intValue" in any_value:
        return int(any_value["intValue"])
    return None


def _nanos(text) -> dt.datetime | None:
    try:
        return dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=int(text) // 1000) if text else None
    except (TypeError, ValueError):
        return None


def _records(text: str) -> tuple[list, list[str]]:
    """The objects of a Collector file's log records, each with the time it was seen; watch events of type DELETED
    are left out (the object is gone)."""
    items, problems = [], []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except json.JSONDecodeError as e:
            problems.append(f"line {lineno}: not JSON ({e.msg})")
            continue
        try:
            for resource in request.get("resourceLogs") or []:
                for scope in resource.get("scopeLogs") or []:
                    for record in scope.get("logRecords") or []:
                        body = _value(record.get("body"))
                        if isinstance(body, dict) and isinstance(body.get("object"), dict):  # a watch's event
                            if body.get("type") == "DELETED":
                                continue
                            body = body["object"]
                        seen = _nanos(record.get("timeUnixNano")) or _nanos(record.get("observedTimeUnixNano"))
                        items.append((body, seen))
        except (AttributeError, TypeError, ValueError) as e:  # a request of a shape OTLP does not have
            problems.append(f"line {lineno}: not an OTLP logs request ({type(e).__name__}: {e})")
    return items, problems


def query(con, file: InputFile) -> Query:
    try:
        with _open(file.path) as f:
            text = f.read()
    except (OSError, EOFError) as e:
        raise LoadError(f"cannot be read ({e})") from None
    objects, events, problems = [], [], []
    if COLLECTOR.search(text[:PEEK]):
        items, problems = _records(text)
    else:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            raise LoadError(f"not JSON ({e})") from None
        seen = dt.datetime.fromtimestamp(file.path.stat().st_mtime, dt.timezone.utc).replace(tzinfo=None)
        listed = doc["items"] if isinstance(doc, dict) and isinstance(doc.get("items"), list) else [doc]
        items = [(item, seen) for item in listed]
    for item, seen in items:
        got, said, wrong = kubectl.from_json([item], seen)
        objects += got
        events += said
        problems += wrong
    tables = kubectl.tables(objects, events, None)
    notes = kubectl.left_out(problems, "items")
    return Query({t: f"select * from parsed_{t}" for t in tables}, frames={f"parsed_{t}": rows
                                                                          for t, rows in tables.items()}, notes=notes)
