"""kubectl's text output read back into Kubernetes objects: `kubectl describe` (any kind) and `kubectl get` tables.

An operator's snapshot of a cluster is often text: the commands they ran and what each printed (Cloud-OpsBench keeps
its cases so). `describe` prints an object as indented `Key: value` lines, with tables (its events, conditions) and
values continued on the lines below. `tree` reads that layout for any kind; `from_describe` then puts the fields the
evidence reads where Kubernetes' own JSON has them (`spec`, `status`), so that a text snapshot and a `kubectl get -o
json` export are read by the same code. Fields it does not know stay out of `spec` and `status`; the whole tree is
kept under `status.describe` for the tools.

Text is untrusted: every parser returns what it could read and raises `ValueError` with the line for what it cannot.
"""

from __future__ import annotations

import datetime as dt
import json
import re

import pyarrow as pa
import yaml

DASHES = re.compile(r"^\s*-{2,}(\s+-{2,})*\s*$")
KEY = re.compile(r"^(\s*)([^\s:][^:]*?):(?:\s+(.*?))?\s*$")
COLUMN = re.compile(r"\S+(?: \S+)*")  # a header's column name: words split by single spaces
KINDS = {"pods": "Pod", "services": "Service", "deployments": "Deployment", "replicasets": "ReplicaSet",
         "endpoints": "Endpoints", "nodes": "Node", "persistentvolumeclaims": "PersistentVolumeClaim",
         "persistentvolumes": "PersistentVolume", "resourcequota": "ResourceQuota", "resourcequotas": "ResourceQuota",
         "serviceaccounts": "ServiceAccount", "storageclasses": "StorageClass", "configmaps": "ConfigMap",
         "statefulsets": "StatefulSet", "daemonsets": "DaemonSet", "secrets": "Secret", "events": "Event",
         "ingresses": "Ingress", "jobs": "Job", "networkpolicies": "NetworkPolicy", "rolebindings": "RoleBinding"}
NONE = ("<none>", "<unset>", "")


def table(lines: list[str]) -> list[dict]:
    """A kubectl table (a header, an optional row of dashes, then rows) as dicts by column name. Columns are cut
    where the header's names begin (kubectl aligns them), the last takes the rest of the line."""
    lines = [line for line in lines if line.strip() and not DASHES.match(line)]
    if not lines:
        return []
    starts = [(m.start(), m.group()) for m in COLUMN.finditer(lines[0])]
    rows = []
    for line in lines[1:]:
        ends = [start for start, _ in starts[1:]] + [None]
        rows.append({name: line[start:end].strip() for (start, name), end in zip(starts, ends)})
    return rows


def tree(text: str) -> dict:
    """`kubectl describe`'s layout of one object as a nested dict: a key's value is its text, a list of its lines
    where it goes on below, a dict of the keys indented under it, or a list of rows where a table is under it."""
    root: dict = {}
    lines = text.splitlines()
    stack = [(-1, root)]  # (indent, dict) of the open blocks
    last = None  # (indent of its key, column of its value, dict, key) of the last key with a value
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        indent = len(line) - len(line.lstrip())
        if last and indent >= last[1] > last[0]:  # a value continued on the line below, aligned with it
            _, _, parent, key = last
            parent[key] = (parent[key] if isinstance(parent[key], list) else [parent[key]]) + [line.strip()]
            i += 1
            continue
        while stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        header = i + 1 < len(lines) and DASHES.match(lines[i + 1])
        m = None if header else KEY.match(line)
        if m is None:  # a table under the open key: its rows run while they are indented as deep as its header
            end = i + 1
            while end < len(lines) and lines[end].strip() and len(lines[end]) - len(lines[end].lstrip()) >= indent:
                end += 1
            rows = table(lines[i:end])
            owner = stack[-1][1]
            owner.setdefault("_rows", []).extend(rows)
            i = end
            continue
        key, value = m.group(2).strip(), m.group(3)
        if value is None:
            child: dict = {}
            parent[key] = child
            stack.append((indent, child))
            last = None
            if key == "Conditions" and i + 1 < len(lines) and lines[i + 1].strip().startswith("Type"):
                end = i + 1  # a pod's conditions: a table without its row of dashes
                while end < len(lines) and lines[end].strip() and lines[end].startswith(" "):
                    end += 1
                child["_rows"] = table(lines[i + 1:end])
                i = end
                continue
        else:
            parent[key] = value
            last = (indent, m.start(3), parent, key)
        i += 1
    return _tables(root)


def _tables(node):
    """A block that holds only a table is the table itself."""
    if isinstance(node, dict):
        if set(node) == {"_rows"}:
            return node["_rows"]
        return {k: _tables(v) for k, v in node.items()}
    return node


def _lines(value) -> list[str]:
    if value is None or value in NONE:
        return []
    return [v for v in (value if isinstance(value, list) else [value]) if v not in NONE]


def _pairs(value) -> dict:
    """`a=b` lines (labels, selectors) as a dict; a selector's `a=b,c=d` split too."""
    out = {}
    for line in _lines(value):
        for part in line.split(","):
            key, found, val = part.strip().partition("=")
            if found:
                out[key.strip()] = val.strip()
    return out


def _port(text: str) -> dict:
    """`9555/TCP` or `grpc  9555/TCP` as a port."""
    words = text.split()
    number, _, protocol = words[-1].partition("/")
    port = {"port": int(number) if number.isdigit() else number, "protocol": protocol or "TCP"}
    if len(words) > 1:
        port["name"] = words[0]
    return port


PROBES = {"http-get": "httpGet", "tcp-socket": "tcpSocket", "grpc": "grpc", "exec": "exec"}
TIMING = {"delay": "initialDelaySeconds", "timeout": "timeoutSeconds", "period": "periodSeconds",
          "#success": "successThreshold", "#failure": "failureThreshold"}


def _probe(text: str) -> dict:
    """`http-get http://:8080/healthz delay=5s timeout=1s ...`, `tcp-socket :6379 ...` or `grpc <pod>:9555 ...` as
    Kubernetes' probe: `{"httpGet": {"port": 8080, "path": "/healthz"}, "initialDelaySeconds": 5, ...}`."""
    words = text.split()
    if not words:
        return {}
    target = words[1] if len(words) > 1 and "=" not in words[1] else ""
    action: dict = {}
    port, path = re.search(r":(\d+)", target), re.search(r":\d+(/\S*)", target)
    if port:
        action["port"] = int(port.group(1))
    if path:
        action["path"] = path.group(1)
    probe = {PROBES.get(words[0], words[0]): action}
    for word in words[1:]:
        key, found, value = word.partition("=")
        if found and key in TIMING:
            number = value.rstrip("s")
            probe[TIMING[key]] = int(number) if number.isdigit() else value
    return probe


def _containers(block) -> list[dict]:
    """The containers of a pod or a pod template: name, image, ports, probes, resources, environment and state."""
    out = []
    for name, c in (block or {}).items():
        if not isinstance(c, dict):
            continue
        container = {"name": name, "image": c.get("Image", "")}
        ports = [_port(p) for p in _lines(c.get("Port") or c.get("Ports")) for p in p.split(",") if p.strip()]
        container["ports"] = [{"containerPort": p["port"], "protocol": p["protocol"]} for p in ports]
        for key, field in (("Liveness", "livenessProbe"), ("Readiness", "readinessProbe"), ("Startup", "startupProbe")):
            if key in c:
                container[field] = _probe(" ".join(_lines(c[key])))
        container["resources"] = {k.lower(): v for k, v in (("Limits", c.get("Limits")), ("Requests", c.get("Requests")))
                                  if isinstance(v, dict)}
        env = c.get("Environment")
        container["env"] = [{"name": k, "value": v} for k, v in env.items()] if isinstance(env, dict) else []
        if "State" in c:
            container["status"] = {"state": _state(c, "State"), "lastState": _state(c, "Last State"),
                                   "ready": c.get("Ready") == "True",
                                   "restartCount": int(c.get("Restart Count", "0") or 0)}
        out.append(container)
    return out


def _state(c: dict, key: str) -> dict:
    """`State: Waiting` and its details (`State Reason`, `State Exit Code`; see `_describe_tree`) as Kubernetes'
    containerState: {"waiting": {"reason": ...}}."""
    word = (c.get(key) or "").lower()
    if word not in ("waiting", "running", "terminated"):
        return {}
    detail = {"reason": c.get(f"{key} Reason"), "exitCode": c.get(f"{key} Exit Code"),
              "message": c.get(f"{key} Message")}
    return {word: {k: int(v) if k == "exitCode" and v.lstrip("-").isdigit() else v
                   for k, v in detail.items() if v is not None}}


def from_describe(kind: str, text: str) -> dict:
    """One object from `kubectl describe KIND NAME`: apiVersion-less Kubernetes JSON (kind, metadata, spec, status)
    with the events under it as `events` (Event objects)."""
    t = _describe_tree(text)
    meta = {"name": t.get("Name", ""), "namespace": t.get("Namespace") if t.get("Namespace") not in NONE else None,
            "labels": _pairs(t.get("Labels"))}
    owner = t.get("Controlled By")
    if owner not in NONE and owner:
        owner_kind, _, owner_name = owner.partition("/")
        meta["ownerReferences"] = [{"kind": owner_kind, "name": owner_name}]
    spec, status = READERS.get(kind, lambda t: ({}, {}))(t)
    status["describe"] = {k: v for k, v in t.items() if k != "Events"}
    obj = {"kind": kind, "metadata": meta, "spec": spec, "status": status}
    obj["events"] = [_event(row, kind, meta) for row in (t.get("Events") or []) if isinstance(row, dict)]
    return obj


def _describe_tree(text: str) -> dict:
    """`tree`, with a container's state kept: `State: Waiting` with `Reason: ...` lines under it is a key with both a
    value and keys, which `tree` has no place for; its details become keys of their own (`State Reason`)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = KEY.match(line)
        if m and m.group(2).strip() in ("State", "Last State") and m.group(3):
            indent, j = len(m.group(1)), i + 1
            while j < len(lines) and len(lines[j]) - len(lines[j].lstrip()) > indent:
                detail = KEY.match(lines[j])
                if detail:
                    lines[j] = f"{m.group(1)}{m.group(2).strip()} {detail.group(2).strip()}:  {detail.group(3) or ''}"
                j += 1
    return tree("\n".join(lines))


def _age(text: str) -> tuple[float | None, int]:
    """An event's Age column: `70s`, `3m4s`, `52s (x9 over 107s)`; the seconds since it was last seen and its count."""
    count = re.search(r"\(x(\d+) over", text)
    first = text.split("(")[0].strip() or None
    return _seconds(first), int(count.group(1)) if count else 1


def _seconds(text: str | None) -> float | None:
    if not text:
        return None
    parts = re.findall(r"(\d+)([dhms])", text)
    if not parts:
        return None
    return float(sum(int(n) * {"d": 86400, "h": 3600, "m": 60, "s": 1}[u] for n, u in parts))


def _event(row: dict, kind: str, meta: dict) -> dict:
    age, count = _age(row.get("Age", ""))
    return {"kind": "Event", "type": row.get("Type", ""), "reason": row.get("Reason", ""),
            "message": row.get("Message", ""), "count": count, "ageSeconds": age,
            "source": {"component": row.get("From", "")},
            "involvedObject": {"kind": kind, "name": meta["name"], "namespace": meta.get("namespace")}}


def _pod(t: dict) -> tuple[dict, dict]:
    containers = _containers(t.get("Containers"))
    node = (t.get("Node") or "").split("/")[0]
    spec = {"nodeName": node if node not in NONE else None, "serviceAccountName": t.get("Service Account"),
            "containers": [{k: v for k, v in c.items() if k != "status"} for c in containers],
            "nodeSelector": _pairs(t.get("Node-Selectors")), "tolerations": _lines(t.get("Tolerations")),
            "volumes": t.get("Volumes") if isinstance(t.get("Volumes"), dict) else {}}
    conditions = [{"type": r.get("Type"), "status": r.get("Status")} for r in _rows(t.get("Conditions"))]
    statuses = [{"name": c["name"], **c["status"]} for c in containers if "status" in c]
    init = _containers(t.get("Init Containers"))
    return spec, {"phase": t.get("Status"), "reason": t.get("Reason"), "conditions": conditions,
                  "containerStatuses": statuses,
                  "initContainerStatuses": [{"name": c["name"], **c["status"]} for c in init if "status" in c]}


def _rows(value) -> list[dict]:
    return [r for r in value if isinstance(r, dict)] if isinstance(value, list) else []


def _workload(t: dict) -> tuple[dict, dict]:
    template = t.get("Pod Template") if isinstance(t.get("Pod Template"), dict) else {}
    replicas = t.get("Replicas") or ""
    desired = re.search(r"(\d+) desired", replicas)
    spec = {"selector": _pairs(t.get("Selector")),
            "replicas": int(desired.group(1)) if desired else None,
            "template": {"metadata": {"labels": _pairs(template.get("Labels"))},
                         "spec": {"serviceAccountName": template.get("Service Account"),
                                  "containers": _containers(template.get("Containers")),
                                  "nodeSelector": _pairs(template.get("Node-Selectors")),
                                  "tolerations": _lines(template.get("Tolerations"))}}}
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", replicas)}
    conditions = [{"type": r.get("Type"), "status": r.get("Status"), "reason": r.get("Reason")}
                  for r in _rows(t.get("Conditions"))]
    return spec, {"replicas": counts.get("total", counts.get("current")), "availableReplicas": counts.get("available"),
                  "unavailableReplicas": counts.get("unavailable"), "conditions": conditions}


def _service(t: dict) -> tuple[dict, dict]:
    ports = []
    for port, target in zip(_lines(t.get("Port")), _lines(t.get("TargetPort")) or [None] * len(_lines(t.get("Port")))):
        p = _port(port)
        ports.append({"name": p.get("name"), "port": p["port"], "protocol": p["protocol"],
                      "targetPort": _port(target)["port"] if target else p["port"]})
    return ({"selector": _pairs(t.get("Selector")), "type": t.get("Type"), "ports": ports},
            {"endpoints": [e for line in _lines(t.get("Endpoints")) for e in line.split(",") if e]})


def _endpoints(t: dict) -> tuple[dict, dict]:
    subsets = t.get("Subsets") if isinstance(t.get("Subsets"), dict) else {}
    return {}, {"addresses": [a for line in _lines(subsets.get("Addresses")) for a in line.split(",") if a],
                "notReadyAddresses": [a for line in _lines(subsets.get("NotReadyAddresses"))
                                      for a in line.split(",") if a]}


def _node(t: dict) -> tuple[dict, dict]:
    conditions = [{"type": r.get("Type"), "status": r.get("Status"), "reason": r.get("Reason"),
                   "message": r.get("Message")} for r in _rows(t.get("Conditions"))]
    pods = [{"namespace": r.get("Namespace"), "name": r.get("Name")} for r in _rows(t.get("_rows"))
            if r.get("Namespace") and r.get("Name")]  # the Non-terminated Pods table
    return ({"unschedulable": t.get("Unschedulable") == "true", "taints": _lines(t.get("Taints"))},
            {"conditions": conditions, "capacity": t.get("Capacity") or {}, "allocatable": t.get("Allocatable") or {},
             "pods": pods})


def _claim(t: dict) -> tuple[dict, dict]:
    return ({"storageClassName": t.get("StorageClass"), "accessModes": _lines(t.get("Access Modes")),
             "volumeName": t.get("Volume") if t.get("Volume") not in NONE else None,
             "capacity": t.get("Capacity"), "selector": _pairs(t.get("Selector")), "claim": t.get("Claim")},
            {"phase": t.get("Status")})


def _quota(t: dict) -> tuple[dict, dict]:
    hard, used = {}, {}
    for row in _rows(t.get("Resource") if isinstance(t.get("Resource"), list) else t.get("_rows")):
        hard[row.get("Resource")] = row.get("Hard")
        used[row.get("Resource")] = row.get("Used")
    return {"hard": hard}, {"hard": hard, "used": used}


READERS = {"Pod": _pod, "Deployment": _workload, "ReplicaSet": _workload, "StatefulSet": _workload,
           "Service": _service, "Endpoints": _endpoints, "Node": _node, "PersistentVolumeClaim": _claim,
           "PersistentVolume": _claim, "ResourceQuota": _quota}


def from_get(kind: str, rows: list[dict], namespace: str | None) -> list[dict]:
    """Objects from a `kubectl get KIND` table: what its columns say (a pod's STATUS, READY and RESTARTS)."""
    out = []
    for row in rows:
        name = row.get("NAME")
        if not name:
            continue
        status = {"get": row}
        if kind == "Pod":
            status["phase"] = row.get("STATUS")
        out.append({"kind": kind, "metadata": {"name": name, "namespace": row.get("NAMESPACE", namespace)},
                    "spec": {}, "status": status})
    return out


EVENT_ROW = re.compile(r"^(\S+)\s+(Normal|Warning)\s+(\S+)\s+(\S+)/(\S+)\s+(.*)$")


def events_from_get(text: str, namespace: str | None) -> list[dict]:
    """Events from `kubectl get events` (LAST SEEN, TYPE, REASON, OBJECT as kind/name, MESSAGE), its header cut off
    or not (`| tail`)."""
    out = []
    for line in text.splitlines():
        m = EVENT_ROW.match(line.strip())
        if m:
            age, kind, reason, object_kind, name, message = m.groups()
            out.append({"kind": "Event", "type": kind, "reason": reason, "message": message.strip(), "count": 1,
                        "ageSeconds": _seconds(age), "source": {"component": ""},
                        "involvedObject": {"kind": KINDS.get(object_kind + "s", object_kind.capitalize()),
                                           "name": name, "namespace": namespace}})
    return out


COMMAND = re.compile(r"^kubectl (get|describe) (\S+)(?: (?!-)(\S+))?(.*)$")


def command(line: str) -> tuple[str, str, str | None, str | None, str]:
    """A kubectl command line: verb, kind, name, namespace and the rest (`-o wide`, `--show-labels`, `-l ...`)."""
    m = COMMAND.match(line.strip())
    if not m:
        raise ValueError(f"not a kubectl get or describe: {line[:80]!r}")
    verb, resource, name, rest = m.groups()
    namespace = re.search(r"(?:-n|--namespace)[ =](\S+)", rest)
    if name == "-n":  # `kubectl get pods -n boutique` read as a name
        name = None
    return verb, KINDS.get(resource, resource), name, namespace.group(1) if namespace else None, rest


def read_states(states: dict[str, str]) -> tuple[list[dict], list[dict], list[str]]:
    """A snapshot kept as kubectl command line -> its output: the objects (a `describe` over a `get` table's row
    for the same object), their events (each once), and a line for each output that could not be read."""
    objects: dict[tuple, dict] = {}
    listed: dict[tuple, dict] = {}
    events: dict[tuple, dict] = {}
    problems = []
    for line, text in states.items():
        try:
            verb, kind, name, namespace, rest = command(line)
            if not isinstance(text, str):
                raise ValueError("its output is not text")
            if kind == "Event":
                found = events_from_get(text, namespace)
            elif verb == "describe":
                obj = from_describe(kind, text)
                obj["metadata"]["namespace"] = obj["metadata"]["namespace"] or (None if kind in CLUSTER_WIDE
                                                                                else namespace)
                if not obj["metadata"]["name"]:
                    raise ValueError("no Name: line (the output is cut short or not describe's)")
                objects[(kind, obj["metadata"]["namespace"], obj["metadata"]["name"])] = obj
                found = obj.pop("events")
            elif "-o" not in rest.split() and "-l" not in rest.split():
                for obj in from_get(kind, table(text.splitlines()), None if kind in CLUSTER_WIDE else namespace):
                    listed[(kind, obj["metadata"]["namespace"], obj["metadata"]["name"])] = obj
                found = []
            else:
                found = []
        except (ValueError, KeyError, IndexError, AttributeError, TypeError) as e:  # text of a shape not foreseen
            problems.append(f"{line[:120]}: " + (str(e) if isinstance(e, ValueError) else
                                                  f"a shape not read ({type(e).__name__}: {e})"))
            continue
        for event in found:
            o = event["involvedObject"]
            events.setdefault((o["kind"], o["namespace"], o["name"], event["reason"], event["message"]), event)
    merged = {**listed, **objects}
    return list(merged.values()), list(events.values()), problems


CLUSTER_WIDE = {"Node", "PersistentVolume", "StorageClass", "Namespace"}


OBJECTS = pa.schema([("snapshot", pa.string()), ("kind", pa.string()), ("namespace", pa.string()),
                     ("name", pa.string()), ("owner", pa.string()), ("labels", pa.string()), ("spec", pa.string()),
                     ("status", pa.string()), ("seen", pa.timestamp("us"))])
EVENTS = pa.schema([("snapshot", pa.string()), ("namespace", pa.string()), ("object_kind", pa.string()),
                    ("object_name", pa.string()), ("type", pa.string()), ("reason", pa.string()),
                    ("message", pa.string()), ("count", pa.int32()), ("first_seen", pa.timestamp("us")),
                    ("last_seen", pa.timestamp("us")), ("age_s", pa.float64())])


def tables(objects: list[dict], events: list[dict], snapshot: str | None, seen: dt.datetime | None = None
           ) -> dict[str, pa.Table]:
    """Objects and events as rows of `k8s_objects` and `k8s_events` (Arrow tables, for the loader)."""
    rows = [{"snapshot": snapshot, "kind": o["kind"], "namespace": o["metadata"].get("namespace"),
             "name": o["metadata"]["name"], "owner": _owner(o), "labels": json.dumps(o["metadata"].get("labels") or {}),
             "spec": json.dumps(o.get("spec") or {}), "status": json.dumps(o.get("status") or {}),
             "seen": o.get("seen", seen)} for o in objects]
    said = [{"snapshot": snapshot, "namespace": e["involvedObject"].get("namespace"),
             "object_kind": e["involvedObject"].get("kind"), "object_name": e["involvedObject"].get("name"),
             "type": e.get("type"), "reason": e.get("reason"), "message": e.get("message"), "count": e.get("count"),
             "first_seen": e.get("firstSeen"), "last_seen": e.get("lastSeen"), "age_s": e.get("ageSeconds")}
            for e in events]
    return {"k8s_objects": pa.Table.from_pylist(rows, OBJECTS), "k8s_events": pa.Table.from_pylist(said, EVENTS)}


def _owner(obj: dict) -> str | None:
    refs = obj["metadata"].get("ownerReferences")
    first = refs[0] if isinstance(refs, list) and refs and isinstance(refs[0], dict) else None
    return f"{first.get('kind')}/{first.get('name')}" if first else None


MAX_OBJECT = 3 * 2**20 // 2  # bytes: the API server's etcd refuses a larger object, so none is real


def from_json(items: list, seen: dt.datetime | None = None) -> tuple[list[dict], list[dict], list[str]]:
    """Objects as Kubernetes writes them (`kubectl get -o json`, a watch's object): each Event (core/v1 or
    events.k8s.io/v1) among them as an event, the rest as objects of their kind; a line for each left out."""
    objects, events, problems = [], [], []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("metadata"), dict) or not isinstance(
                item.get("kind"), str) or not isinstance(item["metadata"].get("name", ""), str):
            problems.append(f"an item without kind and metadata: {str(item)[:80]}")
            continue
        name = item["metadata"].get("name") or "?"
        size = len(json.dumps(item))
        if size > MAX_OBJECT:
            problems.append(f"{item['kind']} {name}: {size:,} bytes, larger than any object Kubernetes keeps")
            continue
        if item["kind"] == "Event":
            event = _event_json(item)
            if event is None:
                problems.append(f"event {name}: no object involved")
            else:
                events.append(event)
            continue
        meta = {k: item["metadata"].get(k) for k in ("name", "namespace", "ownerReferences")}
        labels = item["metadata"].get("labels")
        meta["labels"] = {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}
        objects.append({"kind": item["kind"], "metadata": meta, "spec": item.get("spec") or
                        {k: v for k, v in item.items() if k not in ("kind", "apiVersion", "metadata", "status")},
                        "status": item.get("status") or {}, "seen": seen})
    return objects, events, problems


class _NoAliases(yaml.SafeLoader):
    """YAML without anchors' aliases: a manifest needs none, and a few aliases can stand for a document of billions
    of nodes once written out as JSON."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            raise yaml.YAMLError("an alias (*name): manifests with aliases are not read")
        return super().compose_node(parent, index)


DECLARED = {"declared": True}  # a manifest's object: what was asked for, never written by the cluster


def manifests(text: str) -> tuple[list[dict], list[str]]:
    """The objects of YAML manifests (as `kubectl apply -f` takes them, `---` between), each with the status
    `DECLARED` (a manifest has none of its own), and a line for each document left out."""
    try:
        documents = [d for d in yaml.load_all(text, Loader=_NoAliases) if d is not None]
    except yaml.YAMLError as e:
        return [], [f"not YAML manifests ({str(e).splitlines()[0]})"]
    objects, events, problems = from_json(documents)
    problems += [f"event {e['involvedObject'].get('name')}: an event is no manifest" for e in events]
    return [{**o, "status": DECLARED} for o in objects], problems


def _event_json(item: dict) -> dict | None:
    involved = item.get("involvedObject") or item.get("regarding")
    if not isinstance(involved, dict) or not involved.get("name"):
        return None
    series = item.get("series") if isinstance(item.get("series"), dict) else {}
    return {"kind": "Event", "type": item.get("type", ""), "reason": item.get("reason", ""),
            "message": item.get("message") or item.get("note") or "",
            "count": item.get("count") or item.get("deprecatedCount") or series.get("count") or 1,
            "firstSeen": utc(item.get("firstTimestamp") or item.get("deprecatedFirstTimestamp")
                               or item.get("eventTime")),
            "lastSeen": utc(item.get("lastTimestamp") or item.get("deprecatedLastTimestamp")
                              or series.get("lastObservedTime") or item.get("eventTime")),
            "ageSeconds": None,
            "involvedObject": {"kind": involved.get("kind"), "name": involved.get("name"),
                               "namespace": involved.get("namespace") or item["metadata"].get("namespace")}}


def utc(text) -> dt.datetime | None:
    """An RFC 3339 time as naive UTC, or None."""
    try:
        return dt.datetime.fromisoformat(str(text).replace("Z", "+00:00")).astimezone(dt.timezone.utc).replace(
            tzinfo=None) if text else None
    except ValueError:
        return None


def left_out(problems: list[str], what: str) -> list[str]:
    """The manifest's line for the parts of a file left out: how many, the first three by name."""
    if not problems:
        return []
    shown = "; ".join(problems[:3]) + (" ..." if len(problems) > 3 else "")
    return [f"{len(problems)} {what} left out ({shown}); the rest loaded"]
