"""What Kubernetes shows of a simulated system: its nodes, deployments, services and pods every ten minutes, as the
OpenTelemetry Collector's k8sobjects receiver writes them (pull mode, `interval: 10m`: each object a log record), with
the pod states and events a fault leaves (`Change`: the mechanisms of the cluster's own faults, and of a pod's kill
or failure, add them to a `Day`). The ETL reads the file beside any dump (`etl/adapters/kubernetes.py`)."""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from .workload import Day

MINUTE = dt.timedelta(minutes=1)
PULL = 10  # minutes between the receiver's pulls


@dataclass(frozen=True)
class Change:
    """Pods' status for the minutes [start, stop) (Kubernetes' JSON: phase, conditions, containerStatuses), what
    their service's spec and their containers' specs say then beside their own (`service`, `container`: a changed
    manifest, the pods' workload's too), and the events (type, reason, message) it begins with."""
    start: int
    stop: int
    pods: tuple[str, ...]
    status: dict
    events: tuple[tuple[str, str, str], ...] = ()
    service: dict | None = None
    container: dict | None = None


RUNNING = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
           "containerStatuses": [{"name": "server", "ready": True, "restartCount": 0, "state": {"running": {}}}]}


def restarted(count: int, reason: str, code: int, ready: bool = True) -> dict:
    """A running pod's status once its container has restarted `count` times, the last run ending so."""
    return {"phase": "Running", "conditions": [{"type": "Ready", "status": str(ready)}],
            "containerStatuses": [{"name": "server", "ready": ready, "restartCount": count, "state": {"running": {}},
                                   "lastState": {"terminated": {"reason": reason, "exitCode": code}}}]}


def _set(service: str) -> str:
    """A ReplicaSet's name: its Deployment's and a hash, as Kubernetes names it."""
    return f"{service}-{hashlib.sha1(service.encode()).hexdigest()[:9]}"


def objects_at(day: Day, minute: int) -> list[dict]:
    """The system's objects as the cluster shows them at `minute` of the day."""
    topo, system = day.topo, day.topo.system
    status, specs, containers = {pod: RUNNING for pod in topo.pods}, {}, {}
    for change in day.cluster:
        if change.start <= minute < change.stop:
            status.update({pod: change.status for pod in change.pods})
            if change.service:
                specs[topo.service_of[change.pods[0]]] = change.service
            if change.container:
                containers[topo.service_of[change.pods[0]]] = change.container
    objects = [{"kind": "Node", "metadata": {"name": node, "labels": {"kubernetes.io/hostname": node}},
                "spec": {}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
               for node in system.workers]
    for name, comp in system.components.items():
        labels = {"app": name}
        container = {"name": "server", "image": f"{name}:1",
                     "ports": [{"containerPort": comp.port}] if comp.port else []} | containers.get(name, {})
        objects.append({"kind": "Deployment", "metadata": {"name": name, "namespace": comp.namespace, "labels": labels},
                        "spec": {"replicas": comp.replicas, "selector": labels,
                                 "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}}},
                        "status": {"replicas": comp.replicas}})
        objects.append({"kind": "Service", "metadata": {"name": name, "namespace": comp.namespace, "labels": labels},
                        "spec": {"selector": labels, "ports": [{"port": comp.port, "targetPort": comp.port}]
                                 if comp.port else []} | specs.get(name, {})})
        for pod in topo.pods_of(name):
            objects.append({"kind": "Pod", "metadata": {"name": pod, "namespace": comp.namespace, "labels": labels,
                                                        "ownerReferences": [{"kind": "ReplicaSet",
                                                                             "name": _set(name)}]},
                            "spec": {"nodeName": topo.node_of[pod], "containers": [container]},
                            "status": status[pod]})
    return objects


def events_between(day: Day, lo: int, hi: int) -> list[tuple[int, dict]]:
    """The events the changes beginning in minutes [lo, hi) leave, each with its minute."""
    out = []
    for change in day.cluster:
        if lo <= change.start < hi:
            when = (day.start_utc + change.start * MINUTE).strftime("%Y-%m-%dT%H:%M:%SZ")
            for pod in change.pods:
                namespace = day.topo.component(pod).namespace
                for i, (kind, reason, message) in enumerate(change.events):
                    out.append((change.start, {
                        "kind": "Event", "metadata": {"name": f"{pod}.{change.start}.{i}", "namespace": namespace},
                        "involvedObject": {"kind": "Pod", "name": pod, "namespace": namespace}, "type": kind,
                        "reason": reason, "message": message, "count": 1, "firstTimestamp": when,
                        "lastTimestamp": when}))
    return out


def any_value(value) -> dict:
    """A value as an OTLP AnyValue, as the Collector writes a body."""
    if isinstance(value, dict):
        return {"kvlistValue": {"values": [{"key": k, "value": any_value(v)} for k, v in value.items()]}}
    if isinstance(value, list):
        return {"arrayValue": {"values": [any_value(v) for v in value]}}
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    return {"stringValue": str(value)}


def _record(obj: dict, minute: int, day: Day) -> dict:
    nanos = int((day.start_utc + minute * MINUTE).timestamp()) * 10**9
    return {"timeUnixNano": str(nanos), "observedTimeUnixNano": str(nanos), "body": any_value(obj),
            "attributes": [{"key": "event.domain", "value": {"stringValue": "k8s"}},
                           {"key": "event.name", "value": {"stringValue": obj["kind"]}}]}


def write_cluster(day: Day, folder: Path) -> Path:
    """The day's cluster state: an export request an hour of the written hours, its objects as each pull of the
    hour saw them and the events of the hour (gzip, same seed same bytes)."""
    path = folder / "k8s" / f"k8sobjects_{day.date.isoformat()}.jsonl.gz"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with gzip.GzipFile(tmp, "wb", compresslevel=1, mtime=0) as f:
        for hour in range(day.written.start // 60, day.written.stop // 60):
            records = [_record(obj, minute, day) for minute in range(hour * 60, hour * 60 + 60, PULL)
                       for obj in objects_at(day, minute)]
            records += [_record(event, minute, day) for minute, event in events_between(day, hour * 60, hour * 60 + 60)]
            request = {"resourceLogs": [{"resource": {}, "scopeLogs": [{"scope": {"name": "k8sobjects"},
                                                                         "logRecords": records}]}]}
            f.write((json.dumps(request) + "\n").encode())
    tmp.replace(path)
    return path
