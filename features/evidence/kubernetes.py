"""The Kubernetes family: the cluster's own state (`k8s_objects`, `k8s_events`) says why a workload does not run.

It reads a snapshot as an operator reads `kubectl get` and `describe`: first what is broken now (a workload short of
its replicas, a pod that is not ready, a service without endpoints, a node that is not ready), then the words the
cluster wrote about that object (its status reasons, its events), held against the present state. Events are
history: one that claims a cause the present contradicts (a service account "not found" that exists now, a quota
that a workload at full strength no longer meets) explains nothing. Each finding names a fault type of the
cluster's taxonomy (`TAXONOMY`: Cloud-OpsBench's names and categories are the reference vocabulary), the object to
fix (`app/NAME`, `node/NAME` or `namespace/NAME`) and the object's own words as evidence.

What is a principle and what is a choice: the order of the checks follows Kubernetes' own order of a pod's life
(admitted, scheduled, pulled, started, probed, served), so the earliest failing stage is the cause of the later
ones; the weights only order findings of one snapshot and were not fitted.
"""

from __future__ import annotations

import datetime as dt
import difflib
import json
import logging
import re
from collections import Counter
from dataclasses import dataclass, field, replace

from . import BASELINE, Item, flat

TAXONOMY = {
    "Admission_Fault": ("namespace_cpu_quota_exceeded", "namespace_memory_quota_exceeded", "namespace_pod_quota_exceeded",
                        "namespace_service_quota_exceeded", "namespace_storage_quota_exceeded",
                        "missing_service_account"),
    "Scheduling_Fault": ("node_cordon_mismatch", "node_affinity_mismatch", "node_selector_mismatch",
                         "pod_anti_affinity_conflict", "taint_toleration_mismatch", "cpu_capacity_mismatch",
                         "memory_capacity_mismatch", "pv_binding_occupied", "pvc_selector_mismatch",
                         "pvc_storage_class_mismatch", "pvc_capacity_mismatch", "pvc_access_mode_mismatch"),
    "Startup_Fault": ("volume_mount_permission_denied", "missing_secret_binding", "incorrect_image_reference",
                      "image_registry_dns_failure", "missing_image_pull_secret"),
    "Runtime_Fault": ("container_memory_limit_too_low", "liveness_probe_incorrect_protocol",
                      "liveness_probe_incorrect_port", "liveness_probe_incorrect_timing",
                      "readiness_probe_incorrect_protocol", "readiness_probe_incorrect_port",
                      "service_sidecar_port_conflict", "mysql_invalid_credentials", "mysql_invalid_port",
                      "db_read_only", "db_connection_exhaustion", "deployment_zero_replicas", "oom_killed"),
    "Service_Routing_Fault": ("service_selector_mismatch", "service_port_mapping_mismatch",
                              "service_protocol_mismatch", "service_env_var_address_mismatch", "gateway_misroute",
                              "service_dns_resolution_failure"),
    "Performance_Fault": ("pod_cpu_overload", "pod_network_delay"),
    # the benchmark's README lists the node's network faults under Performance; its labels, under Infrastructure
    "Infrastructure_Fault": ("containerd_unavailable", "kubelet_unavailable", "kube_proxy_unavailable",
                             "kube_scheduler_unavailable", "node_network_delay", "node_network_packet_loss"),
}
CATEGORY = {cause: category for category, causes in TAXONOMY.items() for cause in causes}
log = logging.getLogger(__name__)


@dataclass
class Finding:
    """A cause the cluster's state gives: the object to fix, the fault type and the object's own words."""
    component: str  # app/NAME, node/NAME or namespace/NAME
    root_cause: str
    evidence: list[str] = field(default_factory=list)
    weight: float = 1.0  # orders the findings of one snapshot: the earlier stage of a pod's life, the higher
    pods: tuple[str, ...] = ()  # the pods it was found on, where it was found on pods

    @property
    def taxonomy(self) -> str:
        return CATEGORY[self.root_cause]


@dataclass
class Snapshot:
    """A cluster's objects by kind and name, the events of each object (its alerts among them, of type Alert),
    each service's log lines, the specs manifests ask for of objects the cluster does not have (`missing`) and the
    calls the dump declares (caller -> callees)."""
    objects: dict[str, dict[str, dict]]
    events: dict[tuple[str, str], list[dict]]
    namespace: str | None
    logs: dict[str, list[str]] = field(default_factory=dict)
    missing: dict[tuple[str, str], dict] = field(default_factory=dict)
    calls: dict[str, set[str]] = field(default_factory=dict)

    def of(self, kind: str) -> dict[str, dict]:
        return self.objects.get(kind, {})

    def said(self, kind: str, name: str, warning: bool = True) -> list[dict]:
        return [e for e in self.events.get((kind, name), []) if not warning or e["type"] == "Warning"]

    def alerts(self, kind: str) -> dict[str, list[dict]]:
        """The alerts firing on objects of `kind` (Service, Node), by object."""
        return {name: [e for e in events if e["type"] == "Alert"] for (k, name), events in self.events.items()
                if k == kind and any(e["type"] == "Alert" for e in events)}


def read(con, snapshot: str | None, since: dt.datetime | None = None, until: dt.datetime | None = None) -> Snapshot:
    """A frozen cluster's state, or (None) a live cluster's as its exports last showed it before `until`, with the
    events seen from `since`."""
    objects: dict[str, dict[str, dict]] = {}
    declared: dict[tuple[str, str], dict] = {}
    namespaces: dict[str, int] = {}
    for kind, namespace, name, owner, labels, spec, status, asked in con.execute(
            # each object's latest state; of a live cluster, those its last exports before `until` show (an object
            # no export of the hour before showed is gone); and its manifest, where one was read
            """with seen as (select *, coalesce(try_cast(status->>'$.declared' as boolean), false) as asked
                             from k8s_objects where snapshot is not distinct from $snapshot
                                and ($until is null or seen is null or seen <= $until))
               select kind, namespace, name, owner, labels, spec, status, asked from seen
               where seen is null or seen > (select max(seen) from seen) - interval 1 hour
               qualify row_number() over (partition by kind, namespace, name, asked
                                          order by seen desc nulls last) = 1
               order by kind, name, namespace""",  # one order on every read: findings that tie keep it
            {"snapshot": snapshot, "until": until}).fetchall():
        if asked:
            declared[kind, name] = json.loads(spec)
            continue
        objects.setdefault(kind, {})[name] = {"namespace": namespace, "owner": owner, "labels": json.loads(labels),
                                              "spec": json.loads(spec), "status": json.loads(status)}
        if namespace:
            namespaces[namespace] = namespaces.get(namespace, 0) + 1
    for (kind, name), spec in declared.items():  # what was asked fills in what the cluster's words left out; an
        if name in objects.get(kind, {}):       # object only asked for is not there
            objects[kind][name]["spec"] = _overlay(spec, objects[kind][name]["spec"])
    events: dict[tuple[str, str], list[dict]] = {}
    for kind, name, type_, reason, message, count, age in con.execute(
            """select object_kind, object_name, type, reason, message, count, age_s from k8s_events
               where snapshot is not distinct from $snapshot
                 and ($until is null or coalesce(first_seen, last_seen) is null
                      or coalesce(first_seen, last_seen) <= $until)
                 and ($since is null or coalesce(last_seen, first_seen) is null
                      or coalesce(last_seen, first_seen) >= $since)
               order by age_s nulls last, last_seen desc nulls last, object_kind, object_name, type, reason,
                        message""",  # the same order on every load: an alert's lines have no time
            {"snapshot": snapshot, "since": since, "until": until}).fetchall():
        events.setdefault((kind, name), []).append({"type": type_, "reason": reason, "message": message or "",
                                                    "count": count, "age": age})
    logs: dict[str, list[str]] = {}
    for service, message in con.execute("""select service, message from k8s_logs where snapshot is not distinct from ?
                                           order by service, ts nulls last, message""", [snapshot]).fetchall():
        logs.setdefault(service, []).append(message or "")
    missing = {key: spec for key, spec in declared.items() if key[1] not in objects.get(key[0], {})}
    calls: dict[str, set[str]] = {}
    for caller, callee in con.execute("select distinct caller, callee from declared_calls").fetchall():
        calls.setdefault(caller, set()).add(callee)
    return Snapshot(objects, events, max(namespaces, key=namespaces.get) if namespaces else None, logs, missing,
                    calls)


EMPTY = (None, "", [], {}, "<none>", "<unset>")


def _overlay(asked, shown):
    """An object's spec as the cluster shows it (`shown`, from kubectl's words), with what its manifest asked for
    (`asked`) wherever the words say nothing: maps key by key, lists of named parts (containers, variables) part by
    part. A part the manifest asks for and the cluster does not show is not there."""
    if shown in EMPTY:
        return shown if asked in EMPTY else asked
    if isinstance(asked, dict) and isinstance(shown, dict):
        return {**asked, **{k: _overlay(asked.get(k), v) for k, v in shown.items()}}
    if isinstance(asked, list) and isinstance(shown, list) and all(isinstance(x, dict) and "name" in x
                                                                   for x in asked + shown):
        by_name = {x["name"]: x for x in asked}
        return [_overlay(by_name.get(x["name"]), x) for x in shown]
    return shown


def findings(con, snapshot: str | None, since: dt.datetime | None = None, until: dt.datetime | None = None
             ) -> list[Finding]:
    """The causes a snapshot's state gives (a live cluster's: as of `until`, its events from `since`), the likeliest
    first (each object and cause once)."""
    return causes(read(con, snapshot, since, until), snapshot or "the cluster")


def causes(s: Snapshot, name: str = "the cluster") -> list[Finding]:
    """The causes a cluster's state `s` (named `name` in a warning) gives, the likeliest first."""
    found = []
    for rule in RULES:
        try:
            found += list(rule(s))
        except (AttributeError, TypeError, ValueError, KeyError, IndexError) as e:  # an object of a shape not foreseen
            log.warning("%s: %s stopped at an object of a shape it does not read (%s: %s)", name,
                        rule.__name__.strip("_"), type(e).__name__, e)
    best: dict[tuple[str, str], Finding] = {}
    for f in found:
        key = (f.component, f.root_cause)
        if key in best:  # found again (on another pod): the strongest words, every pod
            kept = best[key] if best[key].weight >= f.weight else f
            f = replace(kept, pods=tuple(dict.fromkeys(best[key].pods + f.pods)))
        best[key] = f
    return sorted(best.values(), key=lambda f: -f.weight)


def _on_pod(s: Snapshot, pod: str, cause: str, evidence: list[str], weight: float) -> Finding:
    """A finding on a pod's own state: the workload to fix, and the pod."""
    return Finding(_app(s, "Pod", pod), cause, evidence, weight, pods=(pod,))


def _app(s: Snapshot, kind: str, name: str) -> str:
    """The workload an object belongs to (a pod's ReplicaSet's Deployment), as app/NAME."""
    for _ in range(3):
        owner = s.of(kind).get(name, {}).get("owner")
        if not owner:
            break
        kind, _, name = owner.partition("/")
        if kind == "ReplicaSet" and name not in s.of("ReplicaSet"):
            name = name.rsplit("-", 1)[0]  # a ReplicaSet's name is its Deployment's and a hash
            kind = "Deployment"
    if kind == "Pod":  # a pod whose owner is not listed: its name less the ReplicaSet's and its own hashes
        name = re.sub(r"(-[a-z0-9]{8,10})?-[a-z0-9]{5}$", "", name)
    elif kind == "ReplicaSet":
        name = name.rsplit("-", 1)[0]
    return f"app/{name}"


def _short(s: Snapshot) -> dict[str, dict]:
    """Workloads short of their replicas now: Deployment name -> its object."""
    return {name: d for name, d in s.of("Deployment").items()
            if (d["status"].get("unavailableReplicas") or 0) > 0
            or (d["spec"].get("replicas") or 0) > (d["status"].get("replicas") or 0)}


def _containers(workload: dict) -> list[dict]:
    """The containers a workload's pod template asks for."""
    return workload["spec"].get("template", {}).get("spec", {}).get("containers", [])


def _current_sets(s: Snapshot, deployment: str) -> list[str]:
    return [name for name, rs in s.of("ReplicaSet").items() if rs.get("owner") == f"Deployment/{deployment}"]


QUOTA = re.compile(r"exceeded quota: ([^,]+), requested: ([^,]+)")
RESOURCE = (("pods", "pod"), ("services", "service"), ("storage", "storage"), ("persistentvolumeclaims", "storage"),
            ("memory", "memory"), ("cpu", "cpu"))


def _quota_kind(resource: str) -> str | None:
    """The fault type's word for a quota's resource (`requests.cpu`, `pods`, `requests.storage`), or None for one
    the taxonomy has no fault of (`count/configmaps`)."""
    return next((kind for word, kind in RESOURCE if word in resource), None)


def _admission(s: Snapshot):
    """A workload that cannot create its pods: the API server refused them (a quota, a service account)."""
    accounts = set(s.of("ServiceAccount"))
    for name, d in s.of("Deployment").items():  # asked to run no pod: it serves nothing
        if d["spec"].get("replicas") == 0:
            yield Finding(f"app/{name}", "deployment_zero_replicas", [f"deployment {name}: 0 desired replicas"], 8)
    for name in _short(s):
        for rs in _current_sets(s, name):
            for e in s.said("ReplicaSet", rs):
                if e["reason"] != "FailedCreate":
                    continue
                quota = QUOTA.search(e["message"])
                kind = _quota_kind(quota.group(2).split("=")[0]) if quota else None
                if kind:
                    yield Finding(f"namespace/{s.of('ReplicaSet')[rs]['namespace'] or s.namespace}",
                                  f"namespace_{kind}_quota_exceeded", [e["message"]], 9)
                account = re.search(r'serviceaccount "([^"]+)" not found', e["message"])
                if account and account.group(1) not in accounts:
                    yield Finding(f"app/{name}", "missing_service_account", [e["message"]], 9)
    claims = {name: _quantity(((spec.get("resources") or {}).get("requests") or {}).get("storage") or "nan")
              for (kind, name), spec in s.missing.items() if kind == "PersistentVolumeClaim"}
    for name, quota in s.of("ResourceQuota").items():  # a quota at its limit refuses the next object
        used, hard = quota["status"].get("used", {}), quota["status"].get("hard", {})
        for resource, limit in hard.items():
            kind = _quota_kind(resource)
            if not kind or limit is None:
                continue
            room = _quantity(limit) - _quantity(used.get(resource) or 0)
            namespace = f"namespace/{quota['namespace'] or s.namespace}"
            if used.get(resource) is not None and room <= 0:
                yield Finding(namespace, f"namespace_{kind}_quota_exceeded",
                              [f"quota {name}: {resource} used {used[resource]} of {limit}"], 8)
            elif kind == "storage":  # a claim its manifest asks for, not in the cluster, larger than the room left
                for claim, size in claims.items():
                    if size > room:
                        yield Finding(namespace, "namespace_storage_quota_exceeded", [
                            f"claim {claim} asks {size / 2**30:g}Gi and is not in the cluster; quota {name} leaves "
                            f"{max(room, 0) / 2**30:g}Gi of {resource}"], 8)


UNITS = {"m": 1e-3, "k": 1e3, "Ki": 2**10, "M": 1e6, "Mi": 2**20, "G": 1e9, "Gi": 2**30, "T": 1e12, "Ti": 2**40}


def _quantity(text: str) -> float:
    """A Kubernetes quantity (`500m`, `3Gi`, `10`) as a number."""
    m = re.fullmatch(r"([\d.]+)([A-Za-z]*)", str(text).strip())
    if not m:
        return float("nan")
    return float(m.group(1)) * UNITS.get(m.group(2), 1)


SCHEDULER = re.compile(r"(\d+) (node\(s\) [^,.]+|Insufficient \w+|[a-z][^,.]*)")
REASONS = (("untolerated taint", "taint_toleration_mismatch"), ("were unschedulable", "node_cordon_mismatch"),
           ("Insufficient cpu", "cpu_capacity_mismatch"), ("Insufficient memory", "memory_capacity_mismatch"),
           ("anti-affinity", "pod_anti_affinity_conflict"), ("affinity/selector", None), ("node affinity", None))


def _scheduling(s: Snapshot):
    """A pod the scheduler placed on no node: the reason its message gives for most nodes (a reason every node
    shares is the cluster's standing state only where it is not the one that excludes the rest)."""
    for pod, p in s.of("Pod").items():
        if not _pending(p):
            continue
        for e in s.said("Pod", pod):
            if e["reason"] != "FailedScheduling":
                continue
            message = e["message"].split("preemption:")[0]
            if "PersistentVolumeClaim" in message:
                yield from _claims(s, pod, p, e)
                continue
            counts = []
            for n, text in SCHEDULER.findall(message.split(":", 1)[-1]):
                cause = next((c for word, c in REASONS if word in text), "?")
                if cause is None:
                    cause = "node_selector_mismatch" if _unmet(s, p["spec"].get("nodeSelector")) else \
                        "node_affinity_mismatch"
                # the control plane's own taint keeps pods off it every day: the cluster's standing state
                standing = "untolerated taint" in text and any(w in text for w in CONTROL_PLANE)
                counts.append((not standing, int(n), cause != "node_cordon_mismatch", cause))
            if counts:
                cause = max(counts)[3]
                if cause != "?":
                    yield _on_pod(s, pod, cause, [e["message"]], 8)


CONTROL_PLANE = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")


def _unmet(s: Snapshot, selector) -> bool:
    """Whether a pod's node selector names labels no node has (where the nodes are known; a selector some node meets
    leaves the pod's affinity as what excludes them)."""
    if not isinstance(selector, dict) or not selector:
        return False
    nodes = s.of("Node")
    return not nodes or not any(_selects(selector, n["labels"]) for n in nodes.values())


def _selects(selector: dict, labels: dict) -> bool:
    """Whether a label selector selects an object's labels: a map of labels (a Service's), or `matchLabels` and
    `matchExpressions` (In, NotIn, Exists, DoesNotExist), as Kubernetes reads them."""
    if "matchLabels" not in selector and "matchExpressions" not in selector:
        return all(labels.get(k) == v for k, v in selector.items())
    if not all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, values = e.get("key"), e.get("values") or []
        held = {"In": labels.get(key) in values, "NotIn": labels.get(key) not in values,
                "Exists": key in labels, "DoesNotExist": key not in labels}.get(e.get("operator"), False)
        if not held:
            return False
    return True


def _pending(p: dict) -> bool:
    return p["status"].get("phase") == "Pending" or any(
        c.get("type") == "PodScheduled" and c.get("status") == "False" for c in p["status"].get("conditions", []))


def _claims(s: Snapshot, pod: str, p: dict, event: dict):
    """A pod held back by a claim that binds no volume: why the claim finds no volume to bind."""
    claims = {name: c for name, c in s.of("PersistentVolumeClaim").items() if c["status"].get("phase") != "Bound"}
    for name, claim in claims.items():
        words = [event["message"]] + [e["message"] for e in s.said("PersistentVolumeClaim", name, warning=False)]
        spec = claim["spec"]
        classes = set(s.of("StorageClass"))
        volumes = s.of("PersistentVolume")
        wanted = spec.get("storageClassName")
        if wanted and wanted not in NONE and classes and wanted not in classes:
            yield _on_pod(s, pod, "pvc_storage_class_mismatch", words + [f"storage class {wanted} does not exist"], 8)
            continue
        same = {n: v for n, v in volumes.items() if v["spec"].get("storageClassName") == wanted} or volumes
        if any(v["status"].get("phase") == "Bound" for v in same.values()) and not any(
                v["status"].get("phase") == "Available" for v in same.values()):
            yield _on_pod(s, pod, "pv_binding_occupied", words + ["every volume of its class is bound to another claim"], 8)
            continue
        asked, offered = _modes(spec.get("accessModes")), [_modes(v["spec"].get("accessModes")) for v in same.values()]
        if offered and all(asked - modes for modes in offered):
            yield _on_pod(s, pod, "pvc_access_mode_mismatch", words + [
                f"the claim asks {sorted(asked)}; the volumes offer {sorted(set().union(*offered))}"], 7)
            continue
        selector = spec.get("selector") or {}
        if selector and not any(_selects(selector, v["labels"]) for v in same.values()):
            yield _on_pod(s, pod, "pvc_selector_mismatch", words + [f"the claim selects {selector}: no volume has it"], 7)
            continue
        size = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
        if size and all(_quantity(size) > _quantity(v["spec"].get("capacity") or 0) for v in same.values()):
            yield _on_pod(s, pod, "pvc_capacity_mismatch", words + [f"the claim asks {size}; no volume is as large"], 7)
            continue
        # What the claim asks beyond its modes (its size, its selector) kubectl describe does not print while it is
        # pending: where the snapshot does not show it, each stays a possible cause, the likelier first.
        labelled = any(v["labels"] for v in same.values())
        for weight, cause in sorted(((6, "pvc_capacity_mismatch"), (5.5 if labelled else 5, "pvc_selector_mismatch"),
                                     (4.5, "pvc_access_mode_mismatch")), reverse=True):
            yield _on_pod(s, pod, cause, words, weight)


NONE = ("<none>", "<unset>", "", None)
MODES = {"RWO": "ReadWriteOnce", "ROX": "ReadOnlyMany", "RWX": "ReadWriteMany", "RWOP": "ReadWriteOncePod"}


def _modes(modes) -> set[str]:
    """Access modes by their full names; a claim whose request is not shown asks ReadWriteOnce, as nearly all do."""
    words = [w.strip() for m in (modes or []) for w in str(m).split(",") if w.strip()]
    return {MODES.get(w, w) for w in words} or {"ReadWriteOnce"}
PULL = (("no such host", "image_registry_dns_failure"), ("lookup", "image_registry_dns_failure"),
        ("unauthorized", "missing_image_pull_secret"), ("authentication required", "missing_image_pull_secret"),
        ("pull access denied", "missing_image_pull_secret"), ("not found", "incorrect_image_reference"),
        ("manifest unknown", "incorrect_image_reference"))


def _startup(s: Snapshot):
    """A pod scheduled whose container cannot start: its image, a secret, a volume."""
    for pod, p in s.of("Pod").items():
        for status in p["status"].get("containerStatuses", []):
            waiting = (status.get("state") or {}).get("waiting", {}).get("reason") or ""
            if waiting in ("ErrImagePull", "ImagePullBackOff", "InvalidImageName"):
                pulled = [e["message"] for e in s.said("Pod", pod) if e["message"].startswith("Failed to pull")]
                text = " ".join(pulled).lower()
                cause = next((c for word, c in PULL if word in text), "incorrect_image_reference")
                yield _on_pod(s, pod, cause, pulled[:1] or [waiting], 8)
            if any(e["reason"] == "FailedToRetrieveImagePullSecret" for e in s.said("Pod", pod)):
                yield _on_pod(s, pod, "missing_image_pull_secret",
                              [e["message"] for e in s.said("Pod", pod)
                               if e["reason"] == "FailedToRetrieveImagePullSecret"][:1], 8)
            if waiting == "CreateContainerConfigError" or any(
                    e["reason"] == "FailedMount" and "secret" in e["message"] for e in s.said("Pod", pod)):
                yield _on_pod(s, pod, "missing_secret_binding",
                              [e["message"] for e in s.said("Pod", pod)][:1] or [waiting], 8)


PROBE = re.compile(r"(Liveness|Readiness) probe failed: (.*)")
# A probe answered in another protocol: an HTTP probe's reply that is no HTTP (Go's net/http words), a gRPC probe's
# that is no HTTP/2 or no gRPC health service (grpc-go's and the kubelet's words)
OTHER_PROTOCOL = ("malformed HTTP", "HTTP/1.x transport", "server preface", "http2: frame too large",
                  "does not implement the grpc health protocol")


def _runtime(s: Snapshot):
    """A container that runs and fails: killed for memory (at every start, CrashLoopBackOff: its limit is below what
    it needs to run at all; once, by what it did), or a probe that fails it though it serves."""
    for pod, p in s.of("Pod").items():
        for e in s.said("Pod", pod):
            if "OOM" in e["message"] or "OOMKilled" in e["message"]:
                yield _on_pod(s, pod, "oom_killed", [e["message"]], 7)
        statuses = p["status"].get("containerStatuses", [])
        for status in statuses:
            last = (status.get("lastState") or {}).get("terminated", {})
            if last.get("reason") == "OOMKilled":
                words = [f"last state terminated: OOMKilled (exit {last.get('exitCode')}), "
                         f"restarts {status.get('restartCount', 0)}"]
                if (status.get("state") or {}).get("waiting", {}).get("reason") == "CrashLoopBackOff":
                    limit = next((c.get("resources", {}).get("limits", {}).get("memory")
                                  for c in p["spec"].get("containers", []) if c.get("name") == status.get("name")), None)
                    yield _on_pod(s, pod, "container_memory_limit_too_low",
                                  words + [f"CrashLoopBackOff; memory limit {limit or 'not shown'}"], 7)
                else:
                    yield _on_pod(s, pod, "oom_killed", words, 7)
        crashed = [st for st in statuses if (st.get("lastState") or {}).get("terminated", {}).get("reason") == "Error"]
        reached = [e for e in s.said("Pod", pod) if e["message"].startswith("Liveness probe failed")
                   and "connection refused" not in e["message"]]
        killed = any(e["reason"] == "Killing" and "failed liveness probe" in e["message"]
                     for e in s.said("Pod", pod, warning=False))  # the kubelet's word that its probe killed it
        if crashed and not reached and not killed:  # it exits by itself: a probe refused finds nothing listening
            mounts = [v for v, d in (p["spec"].get("volumes") or {}).items()
                      if isinstance(d, dict) and not str(d.get("Type", "")).startswith(("Projected", "ConfigMap",
                                                                                         "Secret", "EmptyDir"))]
            if mounts:
                denied = _lines_with(s, _app(s, "Pod", pod), "permission denied")
                yield _on_pod(s, pod, "volume_mount_permission_denied", [
                    f"container {crashed[0]['name']} exits by itself (exit code "
                    f"{crashed[0]['lastState']['terminated'].get('exitCode')}) with volume {mounts[0]} mounted",
                    *denied[:1]], 7.5 if denied else 6.5)
            continue
        restarted = any(st.get("restartCount", 0) > 0 for st in statuses)
        unready = any(not st.get("ready", True) for st in statuses)
        if not (restarted or unready):
            continue
        for e in s.said("Pod", pod):
            m = PROBE.match(e["message"])
            if not m:
                continue
            which = m.group(1).lower()
            if which == "liveness" and not restarted or which == "readiness" and restarted:
                continue
            probe = next((c.get(f"{which}Probe") for c in p["spec"].get("containers", []) if c.get(f"{which}Probe")),
                         {})
            ports = {port["containerPort"] for c in p["spec"].get("containers", []) for port in c.get("ports", [])}
            detail = m.group(2)
            if any(words in detail for words in OTHER_PROTOCOL):
                cause = f"{which}_probe_incorrect_protocol"
            elif _probe(probe)[1] and ports and _probe(probe)[1] not in ports:
                cause = f"{which}_probe_incorrect_port"
            else:
                cause = f"{which}_probe_incorrect_timing"
            yield _on_pod(s, pod, cause, [e["message"], f"{which} probe: {probe}"], 6 if e["count"] > 1 else 5)


def _routing(s: Snapshot):
    """A service that reaches no pod (its selector, its target port), and an address a workload is given that
    names no service or another port."""
    pods = [p for p in s.of("Pod").values() if p["status"].get("phase") == "Running"]
    services = s.of("Service")
    for name, svc in services.items():
        selector = svc["spec"].get("selector") or {}
        if not selector:
            continue
        chosen = [p for p in pods if _selects(selector, p["labels"])]
        workloads = [d for d in s.of("Deployment").values()  # whose pod template it selects
                     if _selects(selector, d["spec"].get("template", {}).get("metadata", {}).get("labels") or {})]
        if not chosen:
            if not workloads and s.of("Deployment"):
                yield Finding(f"app/{name}", "service_selector_mismatch",
                              [f"service {name} selects {selector}: no pod has these labels"], 7)
            continue
        ports = {port["containerPort"] for p in chosen for c in p["spec"].get("containers", [])
                 for port in c.get("ports", [])}
        # how its workloads are probed, as their templates say (a sidecar rewrites a running pod's probes)
        probes = {HANDLERS.get(_probe(c.get(f"{w}Probe"))[0]) for d in workloads
                  for c in _containers(d)
                  for w in ("liveness", "readiness")} - {None}
        for port in svc["spec"].get("ports", []):
            target = port.get("targetPort")
            if ports and isinstance(target, int) and target not in ports:
                yield Finding(f"app/{name}", "service_port_mapping_mismatch",
                              [f"service {name} sends port {port.get('port')} to {target}; its pods listen on "
                               f"{sorted(ports)}"], 7)
            said = _protocol(port.get("name"))  # a port's name declares its protocol (Istio's protocol selection)
            if said in ("http", "grpc") and len(probes) == 1 and said not in probes:
                yield Finding(f"app/{name}", "service_protocol_mismatch",
                              [f"service {name} names port {port.get('port')} {port.get('name')!r}; its pods are "
                               f"probed over {', '.join(sorted(probes))}"], 6)
    for name, d in s.of("Deployment").items():
        for c in _containers(d):
            for var, host, port in _addresses(c.get("env", [])):
                service = services.get(host)
                database = port == MYSQL or "mysql" in host
                if service is None and host not in s.of("Deployment") and services:
                    near = [n for n in services if host.startswith(n) or n.startswith(host)] or \
                        difflib.get_close_matches(host, services, n=1, cutoff=0.75)
                    # a near miss of a service's name is a mistake; an unrelated name, a part not deployed here
                    yield Finding(f"app/{name}", "service_env_var_address_mismatch",
                                  [f"{var}: no service {host}" + (f" (service {near[0]} exists)" if near else "")],
                                  7 if near else 2)
                elif service and port not in {p.get("port") for p in service["spec"].get("ports", [])}:
                    yield Finding(f"app/{name}", "mysql_invalid_port" if database else "service_env_var_address_mismatch",
                                  [f"{var}: service {host} has no port {port}"], 7)


ADDRESS = re.compile(r"^(?:[a-z]+:(?://)?(?:[a-z]+:)?//)?([a-z0-9][a-z0-9.-]*):(\d+)(?:/.*)?$", re.I)  # host:port, a URL
MYSQL = 3306  # MySQL's own port


def _addresses(env: list) -> list[tuple[str, str, int]]:
    """The addresses a container is given: `HOST:PORT` and URL values (`jdbc:mysql://db:3306/orders`), and a
    `X_HOST` beside its `X_PORT`; each as the variable's words, the host (a service's name, namespace cut) and port."""
    values = {str(e.get("name")): str(e.get("value", "")) for e in env if isinstance(e, dict)}
    out = []
    for var, value in values.items():
        m = ADDRESS.match(value.strip())
        if m and (var.endswith(("_ADDR", "_HOST", "_ADDRESS", "_URL")) or "://" in value):
            out.append((f"{var}={value}", m.group(1).split(".")[0], int(m.group(2))))
        elif var.endswith("_HOST") and values.get(var[:-5] + "_PORT", "").isdigit():
            port = values[var[:-5] + "_PORT"]
            out.append((f"{var}={value}, {var[:-5]}_PORT={port}", value.split(".")[0], int(port)))
    return out


PROTOCOLS = ("grpc", "http2", "https", "http", "tcp", "udp", "tls", "mongo", "redis", "mysql")
HANDLERS = {"grpc": "grpc", "httpGet": "http"}  # a probe's handler: the protocol the workload speaks


def _probe(probe) -> tuple[str | None, int | None]:
    """A probe's handler and port, as Kubernetes writes a probe (`{"grpc": {"port": 9555}}`)."""
    if not isinstance(probe, dict):
        return None, None
    handler = next((h for h in ("grpc", "httpGet", "tcpSocket", "exec") if h in probe), None)
    port = (probe.get(handler) or {}).get("port") if handler else None
    return handler, port if isinstance(port, int) else None


def _protocol(name) -> str | None:
    """The protocol a port's name declares (`grpc`, `http-web`), as Istio reads it; http2 counts as http."""
    word = str(name or "").lower().split("-")[0]
    found = next((p for p in PROTOCOLS if word == p), None)
    return "http" if found in ("http2", "https") else found


SIDECAR_PORTS = {15000, 15001, 15004, 15006, 15008, 15009, 15020, 15021, 15053, 15090}  # Istio's own (its docs)


def _sidecar(s: Snapshot):
    """An application container that declares a port its pod's sidecar holds: one of them cannot listen."""
    for pod, p in s.of("Pod").items():
        containers = p["spec"].get("containers", [])
        for c in containers:
            if c.get("name") == "istio-proxy":
                continue
            mine = {port["containerPort"] for port in c.get("ports", [])}
            others = {port["containerPort"] for o in containers if o is not c for port in o.get("ports", [])}
            clash = mine & (others | (SIDECAR_PORTS if any(o.get("name") == "istio-proxy" for o in containers)
                                      else set()))
            if clash:
                yield _on_pod(s, pod, "service_sidecar_port_conflict",
                              [f"container {c['name']} of {pod} declares port {sorted(clash)[0]}, which the pod's "
                               "sidecar holds"], 7)


LOOKUP = re.compile(r"lookup ([a-z0-9][a-z0-9.-]*?)(?:\.[a-z0-9-]+\.svc[.a-z]*)? on [^:]+:53: no such host")
# A client that found no instance of a name in its service registry (Spring Cloud's load balancers' words)
UNREGISTERED = re.compile(r"(?:Unable to find instance for|No instances available for|No servers available for "
                          r"service:)\s+([a-z0-9][a-z0-9.-]*[a-z0-9])", re.I)


def _dns(s: Snapshot):
    """Names clients looked up in vain. Of a service that exists, the cluster's DNS failed the lookups. A name no
    service has is the client's own setting naming a part that is not there: a gateway's route, any other client's
    address (a near miss of a service's name says so)."""
    failed: dict[str, int] = {}
    for lines in s.logs.values():
        for line in lines:
            m = LOOKUP.search(line)
            if m and m.group(1) in s.of("Service"):
                failed[m.group(1)] = failed.get(m.group(1), 0) + 1
    if failed:
        name = max(failed, key=failed.get)
        yield Finding(f"app/{name}", "service_dns_resolution_failure",
                      [f"{failed[name]} log lines: lookup {name} failed (no such host), though the service exists"], 3)
    services = s.of("Service")
    for client, lines in s.logs.items():
        missing = {m.group(1): line for line in lines for m in [UNREGISTERED.search(line)] if m}
        for name, line in missing.items():
            if name in services or name in s.of("Deployment") or not services:
                continue  # a part that is there: why it has no instance is its own state's to say
            near = difflib.get_close_matches(name, services, n=1, cutoff=0.75)
            cause = "gateway_misroute" if "gateway" in client else "service_env_var_address_mismatch"
            yield Finding(f"app/{client}", cause, [line[:300]] + [f"no service {name}" + (
                f" (service {near[0]} exists)" if near else "")], 6 if near else 4)


NODE_SERVICES = (("kubelet", "kubelet_unavailable"), ("containerd", "containerd_unavailable"),
                 ("cri-o", "containerd_unavailable"), ("docker", "containerd_unavailable"),
                 ("kube-proxy", "kube_proxy_unavailable"), ("kube-scheduler", "kube_scheduler_unavailable"))


def _infrastructure(s: Snapshot):
    """A node that cannot run pods: a node service systemd says is not active (its kubelet, container runtime,
    kube-proxy, scheduler), its runtime, its kubelet; and pods no scheduler places."""
    for (kind, node), said in s.events.items():
        for e in said:
            if kind == "Node" and e["type"] == "Service" and re.search(r": (inactive|failed)\b", e["message"]):
                cause = next((c for unit, c in NODE_SERVICES if e["reason"].startswith(unit)), None)
                if cause:
                    yield Finding(f"node/{node}", cause, [f"systemd on {node}: {e['message']}"], 9.5)
    for pod, p in s.of("Pod").items():
        for e in s.said("Pod", pod):
            if e["reason"] == "FailedCreatePodSandBox" and "containerd.sock" in e["message"]:
                node = p["spec"].get("nodeName")
                if node:
                    yield Finding(f"node/{node}", "containerd_unavailable", [e["message"]], 9)
    for name, node in s.of("Node").items():
        ready = next((c for c in node["status"].get("conditions", []) if c.get("type") == "Ready"), None)
        if ready and ready.get("status") != "True":
            words = [f"Ready {ready.get('status')}: {ready.get('message') or ready.get('reason')}"]
            runtime = any("containerd" in (e["message"] or "") for e in s.said("Node", name))
            yield Finding(f"node/{name}", "containerd_unavailable" if runtime else "kubelet_unavailable", words, 9)
    for pod, p in s.of("Pod").items():  # a node's own pods that do not run: kube-proxy, the scheduler
        if p.get("namespace") == "kube-system" and p["status"].get("phase") not in (None, "Running", "Succeeded"):
            if pod.startswith("kube-proxy"):
                node = p["spec"].get("nodeName") or next(
                    (n for n, node in s.of("Node").items() if any(x["name"] == pod for x in node["status"].get("pods", []))),
                    None)
                if node:
                    yield Finding(f"node/{node}", "kube_proxy_unavailable",
                                  [f"{pod}: {p['status'].get('phase')}"], 8)
    waiting = [pod for pod, p in s.of("Pod").items() if _pending(p) and not p["spec"].get("nodeName")
               and p["status"].get("describe") and not s.said("Pod", pod)]
    if waiting:
        masters = [n for n, node in s.of("Node").items()
                   if any(k.startswith("node-role.kubernetes.io/") and k.split("/")[1] in ("master", "control-plane")
                          for k in node["labels"]) or n.startswith("master")]
        yield Finding(f"node/{masters[0] if masters else '?'}", "kube_scheduler_unavailable",
                      [f"{len(waiting)} pods pending with no word from a scheduler ({waiting[0]})"], 8)


def _lines_with(s: Snapshot, app: str, words: str) -> list[str]:
    """The log lines of an app's service that hold `words` (any case)."""
    service = app.split("/", 1)[1]
    return [line for line in s.logs.get(service, []) if words in line.lower()]


# A database's refusal in the words the database itself writes it (MySQL's, PostgreSQL's and Redis's messages, as
# their clients log them); a JDBC link failure is a port only where the name resolved.
REFUSALS = (("mysql_invalid_credentials", ("access denied for user", "password authentication failed for user",
                                           "wrongpass", "noauth authentication required")),
            ("db_read_only", ("--read-only option", "--super-read-only option", "in a read-only transaction",
                              "can't write against a read only replica")),
            ("db_connection_exhaustion", ("too many connections", "too many clients already",
                                          "remaining connection slots are reserved", "max number of clients reached")),
            ("mysql_invalid_port", ("communications link failure",)))
UNRESOLVED = ("unknownhostexception", "no such host", "name or service not known", "temporary failure in name resolution")
SERVER_SIDE = {"db_read_only", "db_connection_exhaustion"}  # a server's own state, fixed on the server
ENGINES = ("mysql", "mariadb", "percona", "postgres", "redis", "mongo")


def _databases(s: Snapshot) -> dict[str, str]:
    """The workloads that run a database, by the image their pods run: app/NAME -> the engine."""
    found = {}
    for pod, p in s.of("Pod").items():
        for c in p["spec"].get("containers", []):
            engine = next((e for e in ENGINES if e in str(c.get("image", "")).lower()), None)
            if engine:
                found[_app(s, "Pod", pod)] = engine
    return found


def _said_by_logs(s: Snapshot):
    """A database's refusal in its clients' logs, on the side that is to fix: a server in read-only mode or out of
    connections is the database's; credentials or a port refused are the client's settings, unless several clients
    are refused alike (then what changed is the server's). The database is the one the lines name, else the only
    one the cluster runs. (No development case shows these; the words are the databases' own.)"""
    databases = _databases(s)
    said: dict[str, dict[str, str]] = {}  # cause -> client app -> its first line saying it
    for service, lines in s.logs.items():
        app = f"app/{service}"
        if app in databases:
            continue  # a server's own log of a refusal is not a client refused
        text = "\n".join(lines).lower()
        for cause, words in REFUSALS:
            word = next((w for w in words if w in text), None)
            if word:
                if cause == "mysql_invalid_port" and any(w in text for w in UNRESOLVED):
                    cause = "service_env_var_address_mismatch"  # the name it was given resolves to nothing
                said.setdefault(cause, {})[app] = next(line for line in lines if word in line.lower())[:300]
    for cause, clients in said.items():
        first = next(iter(clients.values()))
        if cause in SERVER_SIDE or len(clients) > 1:
            named = [d for d in databases if any(d.split("/", 1)[1] in line.lower() for line in clients.values())]
            server = named[0] if len(named) == 1 else next(iter(databases)) if len(databases) == 1 else None
            if server and cause != "service_env_var_address_mismatch":
                yield Finding(server, cause, [first, f"{len(clients)} clients refused alike: "
                                                     f"{', '.join(c.split('/', 1)[1] for c in clients)}"], 5)
                continue
        for client, line in clients.items():
            yield Finding(client, cause, [line], 5)


def _rise(message: str) -> float:
    """The largest `(+1343.0%)` rise an alert's line gives, as a ratio; `New Spike` counts as a rise from nothing."""
    rises = [float(x) for x in re.findall(r"\(\+([\d.]+)%\)", message)]
    return max(rises) / 100 if rises else (float("inf") if "New Spike" in message else 0.0)


def _current(message: str) -> float:
    m = re.search(r"Current=([\d.]+)", message)
    return float(m.group(1)) if m else 0.0


def _callees(s: Snapshot) -> dict[str, set[str]]:
    """Whom each workload calls: the calls the dump declares and the services its containers are given the address
    of."""
    calls = {name: set(callees) for name, callees in s.calls.items()}
    for name, d in s.of("Deployment").items():
        for c in _containers(d):
            calls.setdefault(name, set()).update(host for _, host, _ in _addresses(c.get("env", [])))
    return calls


def _performance(s: Snapshot):
    """Where the state holds no cause, the alerts firing: a service saturating its CPU; a network fault where the
    slowness starts. A service is slow of its own where none of the services it calls is slow too (a caller waits
    on its callee). Slow services of their own on one node share its network (where the calls are known): the
    node's, unless one alone is. A
    node whose TCP segments are retransmitted has a network fault: a loss, retransmitted, grows the latency's tail
    while the rates hold; a delay holds every exchange, so the callers' rates fall (more services send less than
    are slow)."""
    services, nodes = s.alerts("Service"), s.alerts("Node")
    for name, alerts in services.items():
        cpu = [a for a in alerts if a["reason"].startswith("RESOURCE_SATURATION [cpu")]
        if cpu:
            yield Finding(f"app/{name}", "pod_cpu_overload", [a["message"] for a in cpu], 4)
    slow = {name: max(_rise(a["message"]) for a in alerts if a["reason"].startswith("LATENCY"))
            for name, alerts in services.items() if any(a["reason"].startswith("LATENCY") for a in alerts)}
    calls = _callees(s)
    own = {name: rise for name, rise in slow.items() if not calls.get(name, set()) & slow.keys()}
    fell = [name for name, alerts in services.items()
            if any(a["reason"].startswith(("THROUGHPUT_DROP", "TRAFFIC_ANOMALY [Network Drop")) for a in alerts)]
    retrans = {name: max(_current(a["message"]) for a in alerts) for name, alerts in nodes.items()
               if any("Retransmission" in a["reason"] for a in alerts)}
    if retrans:
        node = max(retrans, key=retrans.get)
        words = [a["message"] for a in nodes[node] if "Retransmission" in a["reason"]]
        first, second = ("node_network_delay", "node_network_packet_loss") if len(fell) > len(slow) else \
            ("node_network_packet_loss", "node_network_delay")
        yield Finding(f"node/{node}", first, words, 3.9)
        yield Finding(f"node/{node}", second, words, 3.8)
    elif any(calls.values()):  # without the calls, a slow caller cannot be told from a slow callee
        hosts = {name: {p["spec"].get("nodeName") for pod, p in s.of("Pod").items()
                        if _app(s, "Pod", pod) == f"app/{name}"} - {None} for name in own}
        top = Counter(node for name in own for node in hosts[name]).most_common(2)
        if top and top[0][1] > 1 and (len(top) == 1 or top[1][1] < top[0][1]):
            node = top[0][0]
            on = sorted(name for name in own if node in hosts[name])
            yield Finding(f"node/{node}", "node_network_delay", [f"slow of their own on {node}: {', '.join(on)}"]
                          + [a["message"] for name in on for a in services[name] if a["reason"].startswith("LATENCY")],
                          3.8)
    moved = {name: rise for name, rise in own.items()
             if any(a["reason"].startswith("TRAFFIC_ANOMALY") for a in services[name])}
    if moved:
        name = max(moved, key=moved.get)
        yield Finding(f"app/{name}", "pod_network_delay",
                      [a["message"] for a in services[name] if a["reason"].startswith(("TRAFFIC", "LATENCY"))], 3.7)


def status_words(status: dict) -> tuple[str, str]:
    """An object's status as kubectl's columns say it (a phase, replicas, each container's state and restarts) and
    its conditions (`Ready=False (KubeletNotReady)`)."""
    words = [str(status["phase"])] if status.get("phase") else []
    words += [f"{key} {status[key]}" for key in ("replicas", "readyReplicas", "availableReplicas",
                                                 "unavailableReplicas") if status.get(key) is not None]
    for c in status.get("containerStatuses") or []:
        if isinstance(c, dict):
            state, detail = next(iter((c.get("state") or {}).items()), ("", {}))
            reason = detail.get("reason", "") if isinstance(detail, dict) else ""
            words.append(f"{c.get('name')}: {state} {reason}".strip() + f", restarts {c.get('restartCount', 0)}")
    conditions = [f"{c.get('type')}={c.get('status')}" + (f" ({c['reason']})" if c.get("reason") else "")
                  for c in status.get("conditions") or [] if isinstance(c, dict)]
    return "; ".join(words), ", ".join(conditions)


def facts(s: Snapshot, component: str, limit: int = 4) -> list[str]:
    """What the cluster's state says of an object to fix, read only: the status of its workloads, pods and services
    (an app), its conditions and services (a node) or its quotas (a namespace), then its objects' warnings."""
    level, _, name = component.partition("/")
    mine = [(kind, n) for kind, objects in s.objects.items() for n in objects
            if level == "app" and (n == name and kind != "Pod" or kind == "Pod" and _app(s, "Pod", n) == component)
            or level == "node" and kind == "Node" and n == name
            or level == "namespace" and kind == "ResourceQuota"]
    lines = []
    for kind, n in mine:
        o = s.of(kind)[n]
        state, conditions = status_words(o["status"])
        if kind == "ResourceQuota":
            state = ", ".join(f"{r} {o['status'].get('used', {}).get(r)} of {h}"
                              for r, h in (o["status"].get("hard") or {}).items())
        if state or conditions:
            lines.append(f"{kind} {n}: " + "; ".join(w for w in (state, conditions) if w))
    said = [e for kind, n in mine for e in s.events.get((kind, n), [])
            if e["type"] in ("Warning", "Service", "Alert") and not (e["type"] == "Service" and ": active" in e["message"])]
    return lines[:limit] + [f"{e['type']} {e['reason']}: {e['message']}" for e in said[:limit]]


RULES = (_admission, _scheduling, _startup, _runtime, _routing, _infrastructure, _sidecar, _dns, _said_by_logs,
         _performance)  # in the order of a pod's life, the alerts last


SLACK = dt.timedelta(minutes=10)  # a state exported this long after a window still shows it (a nightly export's rhythm)


def collect(con, window) -> list[Item]:
    """The family's evidence in a telemetry window (the `features.evidence` contract): a live cluster's findings at its
    exports in the window (its events from an hour before it), each an item of kind `state` on the pods it was found on
    where the telemetry knows them (else on the service or node to fix), its key the cluster's fault type. A store
    without a live cluster's objects has none."""
    if not con.execute("select 1 from k8s_objects where snapshot is null limit 1").fetchall():
        return []
    items = []
    known = {pod for pod, in con.execute("select distinct pod from placement").fetchall()}  # the telemetry's pods
    # The state the cluster showed at each of its exports in the window (a fault over before the window ends shows in
    # those during it), and at the last before it; each cause once.
    pulls = [t for t, in con.execute("""select distinct seen from k8s_objects where snapshot is null and seen <= $1
                                         and seen >= coalesce((select max(seen) from k8s_objects
                                                               where snapshot is null and seen <= $2), $2)
                                         order by seen""", [window.end + SLACK, window.start]).fetchall()]
    said: dict[tuple[str, str], Finding] = {}
    for pull in pulls or [window.end + SLACK]:
        for f in findings(con, None, window.start - BASELINE, pull):
            said.setdefault((f.component, f.root_cause), f)
    for f in said.values():
        level, _, name = f.component.partition("/")
        if level in ("app", "node"):  # on each pod it was found on that the telemetry knows (the ranking tells a
            for component in (f.pods if f.pods and set(f.pods) <= known else (name,)):  # replica from its service)
                items.append(Item(component, "state", 1.0, f.root_cause,
                                  flat(f"{f.root_cause}: {f.evidence[0]}", 200), "state"))
    return items
