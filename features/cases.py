"""Incident questions: `input.json` of the challenge, each an uuid and a UTC window in prose; or a frozen cluster's
state, named by its `snapshot` (a Cloud-OpsBench case), with no window."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from pathlib import Path

from common.errors import RcalabError, read_json
from etl import store

YEARS = (1970, 2200)  # telemetry has no time outside these
_STAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?Z")


@dataclass(frozen=True)
class Question:
    uuid: str
    start: dt.datetime | None  # naive UTC, as in the store; None for a snapshot's question
    end: dt.datetime | None
    description: str
    snapshot: str | None = None  # the frozen cluster state it asks about (`k8s_objects.snapshot`)


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
            snapshot = item.get("snapshot") if isinstance(item, dict) else None
            if snapshot is None:
                start, end = parse_window(item["Anomaly Description"])
            elif isinstance(snapshot, str) and isinstance(item["Anomaly Description"], str):
                start = end = None
            else:
                raise TypeError
            if not isinstance(item["uuid"], str):
                raise TypeError
            if item["uuid"] in seen:
                raise ValueError(f"the uuid is listed twice (first at entry {seen[item['uuid']]})")
            seen[item["uuid"]] = i
            questions.append(Question(item["uuid"], start, end, item["Anomaly Description"], snapshot))
        except KeyError as e:
            raise RcalabError(f"{path}: entry {i}: missing field {e}") from None
        except TypeError:
            raise RcalabError(f"{path}: entry {i}: expected an object with 'uuid' and 'Anomaly Description' "
                              "text fields") from None
        except ValueError as e:
            raise RcalabError(f"{path}: entry {i} ({item.get('uuid', '?')}): {e}") from None
    return questions


def snapshot_questions(db: Path) -> list[dict]:
    """A question for every frozen cluster state in the store `db` (a Cloud-OpsBench case), its uuid the snapshot's
    name."""
    con = store.connect(db, read_only=True)
    try:
        names = store.cursor(con).execute("select distinct snapshot from k8s_objects where snapshot is not null "
                                          "order by snapshot").fetchall()
    finally:
        con.close()
    return [{"uuid": name, "snapshot": name,
             "Anomaly Description": f"The cluster of snapshot {name} is abnormal. Please infer the possible cause."}
            for name, in names]
