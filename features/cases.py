"""Incident questions: `input.json` of the challenge, each an uuid and a UTC window in prose."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from pathlib import Path

from rcalab.errors import RcalabError, read_json

YEARS = (1970, 2200)  # telemetry has no time outside these
_STAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?Z")


@dataclass(frozen=True)
class Question:
    uuid: str
    start: dt.datetime  # naive UTC, as in the store
    end: dt.datetime
    description: str


def parse_window(description: str) -> tuple[dt.datetime, dt.datetime]:
    """The two UTC timestamps of an anomaly description, as naive UTC datetimes."""
    stamps = _STAMP.findall(description)
    if len(stamps) != 2:
        raise ValueError(f"expected two UTC timestamps, found {len(stamps)}")
    start, end = (dt.datetime.fromisoformat(s.replace("Z", "")) for s in stamps)
    if not (YEARS[0] <= start.year and end.year <= YEARS[1]):
        raise ValueError(f"the window {stamps[0]} to {stamps[1]} is outside the years {YEARS[0]}-{YEARS[1]}")
    if end < start:
        raise ValueError("the window ends before it starts")
    if end == start:
        raise ValueError("the window is empty (it starts and ends at the same time)")
    return start, end


def load_questions(path: Path) -> list[Question]:
    """The questions of an input file; errors name the file and the entry."""
    items = read_json(path)
    if not isinstance(items, list):
        raise RcalabError(f"{path}: expected a JSON list of cases, found a {type(items).__name__}")
    questions, seen = [], {}
    for i, item in enumerate(items):
        try:
            start, end = parse_window(item["Anomaly Description"])
            if not isinstance(item["uuid"], str):
                raise TypeError
            if item["uuid"] in seen:
                raise ValueError(f"the uuid is listed twice (first at entry {seen[item['uuid']]})")
            seen[item["uuid"]] = i
            questions.append(Question(item["uuid"], start, end, item["Anomaly Description"]))
        except KeyError as e:
            raise RcalabError(f"{path}: entry {i}: missing field {e}") from None
        except TypeError:
            raise RcalabError(f"{path}: entry {i}: expected an object with 'uuid' and 'Anomaly Description' "
                              "text fields") from None
        except ValueError as e:
            raise RcalabError(f"{path}: entry {i} ({item.get('uuid', '?')}): {e}") from None
    return questions
