"""Cloud-OpsBench's case folders (`<system>/<category>/<id>/`, LLM4Ops/Cloud-OpsBench): each a frozen snapshot of a
Kubernetes cluster in a fault. `raw_data/k8s_states.json` maps each kubectl command line that was run to its text
output (`get` tables and `describe`), read here into `k8s_objects` and `k8s_events` (`etl.kubectl`); `logs.json`
(service -> the lines kubectl logs printed) into `k8s_logs`; `alert.json` (the alerts firing, each on a service or
a node with its evidence lines) into `k8s_events` as type Alert. From `tool_cache.json`, the benchmark's tools'
outputs: `GetAppYAML`'s (each app's manifests, as applied) into `k8s_objects` with the status `kubectl.DECLARED`, what
was asked for, which the evidence holds beside what the cluster shows; `CheckNodeServiceStatus`'s (systemd's status of
a node's kubelet, container runtime, kube-proxy or scheduler) into `k8s_events` as type Service on the node, the
unit the reason and its `Active:` line the message; `GetServiceDependencies`'s (a service's callers, and the tree of
the calls below it) into `declared_calls`. `metrics.csv` (a column `NAME-METRIC` a series, a row every few
seconds) into `metric_points`, a service's series or a node's; its times are its collector's clock, China's (UTC+8:
they sit eight hours after the events' UTC in every case read here), read as UTC. The snapshot is the case's `SYSTEM/CATEGORY/ID`.
`metadata.json` holds the case's label: the judge reads it, never the ETL.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa

from common.errors import LoadError

from .. import kubectl
from .base import InputFile, Query

NAME = "cloudopsbench"
STATES = "k8s_states.json"
READ = (STATES, "logs.json", "alert.json")
TOOLS = "tool_cache.json"
MANIFESTS = "GetAppYAML:"  # the tool that prints an app's manifests
UNITS = "CheckNodeServiceStatus:"  # the tool that prints systemd's status of a node's service
DEPENDENCIES = "GetServiceDependencies:"  # the tool that draws whom a service calls, as a tree
# (the other tools' outputs repeat the raw data)
ACTIVE = re.compile(r"^\s*Active:\s*(.+)$", re.M)
METRICS = "metrics.csv"
CLOCK = "Asia/Shanghai"  # metrics.csv's times
SKIPPED = {"metadata.json": "the case's label and query: read by the judge, never by an answer"}


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
            if path.name in READ and path.parent.name == "raw_data" or path.name == TOOLS and path.parent == case:
                files.append(InputFile(path, "k8s"))
            elif path.name == METRICS and path.parent.name == "raw_data":
                files.append(InputFile(path, "metric"))
            else:
                files.append(InputFile(path, "skip", SKIPPED.get(path.name, "not part of the snapshot rcalab reads")))
    return files


LOGS = pa.schema([("snapshot", pa.string()), ("namespace", pa.string()), ("service", pa.string()),
                  ("ts", pa.timestamp("us")), ("message", pa.string())])
STAMP = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2}))\s")


def query(con, file: InputFile) -> Query:
    if file.kind == "metric":
        return _metrics(file)
    try:
        doc = json.loads(file.path.read_text(encoding="utf-8", errors="replace"))
    except json.JSONDecodeError as e:
        raise LoadError(f"not JSON ({e})") from None
    case = snapshot(file.path.parent if file.path.name == TOOLS else file.path.parent.parent)
    reader = {STATES: _states, "logs.json": _logs, "alert.json": _alerts, TOOLS: _tools}[file.path.name]
    tables, notes = reader(doc, case)
    return Query({table: f"select * from parsed_{table}" for table in tables},
                 frames={f"parsed_{table}": rows for table, rows in tables.items()}, notes=notes)


def _states(states, case: str) -> tuple[dict, list[str]]:
    if not isinstance(states, dict):
        raise LoadError("not a map of kubectl command lines to their output")
    objects, events, problems = kubectl.read_states(states)
    return kubectl.tables(objects, events, case), kubectl.left_out(problems, "outputs")


def _tools(tools, case: str) -> tuple[dict, list[str]]:
    """The apps' manifests that `GetAppYAML` printed, as declared objects; the node services' status that
    `CheckNodeServiceStatus` printed, as events of type Service; the calls `GetServiceDependencies` drew."""
    if not isinstance(tools, dict):
        raise LoadError("not a map of tool calls to their outputs")
    objects, events, problems, calls = [], [], [], {}
    for call, text in tools.items():
        call, text = str(call), str(text)
        if call.startswith(MANIFESTS):
            found, said = kubectl.manifests(text)
            objects += found
            problems += [f"{call[:80]}: {line}" for line in said]
        elif call.startswith(UNITS):
            try:
                asked = json.loads(call[len(UNITS):])
                node, unit = str(asked["node_name"]), str(asked["service_name"])
            except (ValueError, KeyError, TypeError):
                problems.append(f"{call[:80]}: not a node and a service")
                continue
            active = ACTIVE.search(text)
            events.append({"type": "Service", "reason": unit, "message": f"{unit}: " + (
                active.group(1).strip() if active else text.strip().splitlines()[-1][:200] if text.strip() else ""),
                "involvedObject": {"kind": "Node", "name": node, "namespace": None}})
        elif call.startswith(DEPENDENCIES):
            calls |= dict.fromkeys(_calls(text))
    tables = kubectl.tables(objects, events, case)
    tables["declared_calls"] = pa.Table.from_pylist([{"caller": a, "callee": b} for a, b in calls], CALLS)
    return tables, kubectl.left_out(problems, "tool outputs")


CALLS = pa.schema([("caller", pa.string()), ("callee", pa.string())])
BRANCH = re.compile(r"^((?:[│ ]   )*)([├└]── )?([A-Za-z0-9][\w.-]*)")  # a tree's line: its depth, a name


def _calls(text: str) -> list[tuple[str, str]]:
    """(caller, callee) as `GetServiceDependencies` draws them: `[Upstream (Called By)]: a, b` and, under
    `[Downstream (Calls)]:`, a tree whose lines name a service under the one it calls it from."""
    head, _, tree = text.partition("[Downstream (Calls)]:")
    service = re.search(r"\[Service\]:\s*([\w.-]+)", head)
    up = re.search(r"\[Upstream \(Called By\)\]:(.*)", head)
    found = [(caller.strip(), service.group(1)) for caller in (up.group(1).split(",") if up and service else [])
             if re.fullmatch(r"[A-Za-z0-9][\w.-]*", caller.strip())]
    path: list[str] = []
    for line in tree.splitlines():
        m = BRANCH.match(line)
        if not m:
            continue
        depth = len(m.group(1)) // 4 + bool(m.group(2))
        if 0 < depth <= len(path):
            found.append((path[depth - 1], m.group(3)))
        path = path[:depth] + [m.group(3)]
    return found


def _logs(logs, case: str) -> tuple[dict, list[str]]:
    """service -> its lines; a line that begins with an RFC 3339 time (kubectl logs --timestamps) keeps it."""
    if not isinstance(logs, dict):
        raise LoadError("not a map of services to their log lines")
    rows, odd = [], []
    for service, lines in logs.items():
        if not isinstance(lines, list):
            odd.append(service)
            continue
        for line in lines:
            text = str(line)
            stamp = STAMP.match(text)
            when = kubectl.utc(stamp.group(1)) if stamp else None
            rows.append({"snapshot": case, "namespace": None, "service": service, "ts": when,
                         "message": text[stamp.end():] if when else text})
    notes = [f"services whose logs are not a list of lines: {', '.join(odd[:5])}; the rest loaded"] if odd else []
    return {"k8s_logs": pa.Table.from_pylist(rows, LOGS)}, notes


def _alerts(doc, case: str) -> tuple[dict, list[str]]:
    """Each alert's evidence lines as events of type Alert on the object alerted on; the reason is a line's kind
    (`RESOURCE_SATURATION [cpu_cfs]`), the message the line."""
    alerts = doc.get("alerts", []) if isinstance(doc, dict) else None
    if not isinstance(alerts, list):
        raise LoadError("no list of alerts")
    rows, odd = [], 0
    for alert in alerts:
        if not isinstance(alert, dict) or not isinstance(alert.get("evidence"), list):
            odd += 1
            continue
        for line in alert["evidence"]:
            kind, _, rest = str(line).partition("|")
            rows.append({"snapshot": case, "object_kind": str(alert.get("type") or ""),
                         "object_name": str(alert.get("name") or ""), "type": "Alert", "reason": kind.strip(),
                         "message": str(line), "count": 1})
    notes = [f"{odd} alerts without an object's evidence list left out; the rest loaded"] if odd else []
    return {"k8s_events": pa.Table.from_pylist(rows, kubectl.EVENTS)}, notes


def _metrics(file: InputFile) -> Query:
    """metrics.csv's series, each column `NAME-METRIC` (a name may hold dashes, a metric does not): a node's where
    the case's kubectl lists a node of that name, else a service's."""
    states = file.path.parent / STATES
    try:
        objects, _, _ = kubectl.read_states(json.loads(states.read_text(encoding="utf-8", errors="replace")))
    except (OSError, json.JSONDecodeError, AttributeError):  # its states are named as the load of that file fails
        objects = []
    nodes = sorted({o["metadata"]["name"] for o in objects if o.get("kind") == "Node"})
    series = "regexp_extract(name, '^(.+)-([^-]+)$', {})"
    return Query(f"""
    select timezone('UTC', timezone($clock, try_cast(time as timestamp))) as ts, 'cloudopsbench' as source,
           who as component, case when node then 'node' else 'service' end as component_kind,
           case when not node then who end as service, case when node then who end as node, metric,
           try_cast(value as double) as value
    from (select *, {series.format(1)} as who, {series.format(2)} as metric,
                 list_contains($nodes, {series.format(1)}) as node
          from (unpivot (select * from read_csv($path, header = true, all_varchar = true))
                on columns(* exclude (time)) into name name value value))""",
                 {"path": str(file.path), "clock": CLOCK, "nodes": nodes})
