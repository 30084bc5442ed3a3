"""Cloud-OpsBench's case folders (`<system>/<category>/<id>/`, LLM4Ops/Cloud-OpsBench): each a frozen snapshot of a
Kubernetes cluster in a fault. `raw_data/k8s_states.json` maps each kubectl command line that was run to its text
output (`get` tables and `describe`), read here into `k8s_objects` and `k8s_events` (`etl.kubectl`); the snapshot is
the case's `SYSTEM/CATEGORY/ID`. `metadata.json` holds the case's label: the judge reads it, never the ETL.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from rcalab.errors import LoadError

from .. import kubectl
from .base import InputFile, Query

NAME = "cloudopsbench"
STATES = "k8s_states.json"
SKIPPED = {"metadata.json": "the case's label and query: read by the judge, never by an answer",
           "tool_cache.json": "the benchmark's cached tool outputs: rcalab reads the raw snapshot",
           "logs.json": "a case's container logs are not read yet", "alert.json": "a case's alerts are not read yet",
           "metrics.csv": "a case's metrics are not read yet"}
OBJECTS = pa.schema([("snapshot", pa.string()), ("kind", pa.string()), ("namespace", pa.string()),
                     ("name", pa.string()), ("owner", pa.string()), ("labels", pa.string()), ("spec", pa.string()),
                     ("status", pa.string())])
EVENTS = pa.schema([("snapshot", pa.string()), ("namespace", pa.string()), ("object_kind", pa.string()),
                    ("object_name", pa.string()), ("type", pa.string()), ("reason", pa.string()),
                    ("message", pa.string()), ("count", pa.int32()), ("age_s", pa.float64())])


def cases(root: Path) -> list[Path]:
    """The case folders under `root` (or `root` itself): those with `raw_data/k8s_states.json`."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(p.parent.parent for p in root.rglob(f"raw_data/{STATES}"))


def snapshot(case: Path) -> str:
    """A case's id, SYSTEM/CATEGORY/ID: its folder's last three names."""
    return "/".join(case.resolve().parts[-3:])


def detect(root: Path) -> bool:
    return bool(cases(root))


def discover(root: Path) -> list[InputFile]:
    files = []
    for case in cases(root):
        for path in sorted(p for p in case.rglob("*") if p.is_file()):
            if path.name == STATES:
                files.append(InputFile(path, "k8s"))
            else:
                files.append(InputFile(path, "skip", SKIPPED.get(path.name, "not part of the snapshot rcalab reads")))
    return files


def query(con, file: InputFile) -> Query:
    try:
        states = json.loads(file.path.read_text(encoding="utf-8", errors="replace"))
    except json.JSONDecodeError as e:
        raise LoadError(f"not JSON ({e})") from None
    if not isinstance(states, dict):
        raise LoadError("not a map of kubectl command lines to their output")
    objects, events, problems = kubectl.read_states(states)
    case = snapshot(file.path.parent.parent)
    rows = [{"snapshot": case, "kind": o["kind"], "namespace": o["metadata"].get("namespace"),
             "name": o["metadata"]["name"], "owner": _owner(o), "labels": json.dumps(o["metadata"].get("labels") or {}),
             "spec": json.dumps(o["spec"]), "status": json.dumps(o["status"])} for o in objects]
    said = [{"snapshot": case, "namespace": e["involvedObject"].get("namespace"),
             "object_kind": e["involvedObject"].get("kind"), "object_name": e["involvedObject"].get("name"),
             "type": e["type"], "reason": e["reason"], "message": e["message"], "count": e["count"],
             "age_s": e["ageSeconds"]} for e in events]
    notes = [f"{len(problems)} outputs not read ({problems[0]}{' ...' if len(problems) > 1 else ''}); the rest loaded"
             ] if problems else []
    return Query({"k8s_objects": "select * from parsed_objects", "k8s_events": "select * from parsed_events"},
                 frames={"parsed_objects": pa.Table.from_pylist(rows, OBJECTS),
                         "parsed_events": pa.Table.from_pylist(said, EVENTS)}, notes=notes)


def _owner(obj: dict) -> str | None:
    refs = obj["metadata"].get("ownerReferences") or []
    return f"{refs[0]['kind']}/{refs[0]['name']}" if refs else None
