"""The cluster's own state: kubectl's text read back into Kubernetes objects and events, and Cloud-OpsBench's case
folders loaded into `k8s_objects` and `k8s_events`."""

import datetime as dt
import json
import os
import re
import shutil

import pytest
from click.testing import CliRunner
from conftest import SHARED

from etl import kubectl, store
from features.evidence.kubernetes import Snapshot, causes, findings
from rcalab.cli import cli
from testbed.cluster import any_value

CASES = SHARED / "cloudopsbench" / "boutique"
CRASHING = """Name:             redis-cart-79598c9984-fs47p
Namespace:        boutique
Node:             worker-01/192.168.0.222
Labels:           app=redis-cart
                  pod-template-hash=79598c9984
Status:           Running
Controlled By:  ReplicaSet/redis-cart-79598c9984
Containers:
  redis:
    Image:          redis:alpine
    Port:           6379/TCP
    State:          Waiting
      Reason:       CrashLoopBackOff
    Last State:     Terminated
      Reason:       Error
      Exit Code:    1
    Ready:          False
    Restart Count:  4
    Liveness:     tcp-socket :6379 delay=0s timeout=1s period=5s #success=1 #failure=3
Conditions:
  Type                        Status
  Ready                       False
  PodScheduled                True
Tolerations:                 node.kubernetes.io/not-ready:NoExecute op=Exists for 300s
                             node.kubernetes.io/unreachable:NoExecute op=Exists for 300s
Events:
  Type     Reason     Age                 From               Message
  ----     ------     ----                ----               -------
  Warning  BackOff    52s (x9 over 107s)  kubelet            Back-off restarting failed container redis in pod x
"""


def test_describe_text_reads_back_as_kubernetes_json():
    pod = kubectl.from_describe("Pod", CRASHING)
    assert pod["metadata"]["labels"] == {"app": "redis-cart", "pod-template-hash": "79598c9984"}
    assert pod["metadata"]["ownerReferences"] == [{"kind": "ReplicaSet", "name": "redis-cart-79598c9984"}]
    assert pod["spec"]["nodeName"] == "worker-01"
    assert pod["spec"]["containers"][0]["ports"] == [{"containerPort": 6379, "protocol": "TCP"}]
    assert pod["spec"]["containers"][0]["livenessProbe"] == {
        "tcpSocket": {"port": 6379}, "initialDelaySeconds": 0, "timeoutSeconds": 1, "periodSeconds": 5,
        "successThreshold": 1, "failureThreshold": 3}
    assert len(pod["spec"]["tolerations"]) == 2
    status = pod["status"]["containerStatuses"][0]
    assert status["state"] == {"waiting": {"reason": "CrashLoopBackOff"}}
    assert status["lastState"] == {"terminated": {"reason": "Error", "exitCode": 1}}
    assert status["restartCount"] == 4
    assert {"type": "Ready", "status": "False"} in pod["status"]["conditions"]
    event, = pod["events"]
    assert (event["reason"], event["count"], event["ageSeconds"]) == ("BackOff", 9, 52.0)
    assert event["involvedObject"]["name"] == "redis-cart-79598c9984-fs47p"


def test_a_snapshot_s_bad_outputs_are_named_and_the_rest_reads():
    states = {"kubectl describe pods redis-cart-79598c9984-fs47p -n boutique": CRASHING,
              "kubectl describe pods cut-short -n boutique": "Namespace:  boutique\nStatus:  Pend",  # truncated
              "kubectl get pods -n boutique": "STATUS   NAME\nRunning   frontend-1\n",  # columns reordered
              "kubectl frobnicate": "?",
              "kubectl get events -n boutique": "5s  Warning  FailedScheduling  pod/frontend-1  0/4 nodes are available"}
    objects, events, problems = kubectl.read_states(states)
    assert {o["metadata"]["name"] for o in objects} == {"redis-cart-79598c9984-fs47p", "frontend-1"}
    assert {e["reason"] for e in events} == {"BackOff", "FailedScheduling"}
    assert len(problems) == 2
    assert any("cut-short" in p and "Name:" in p for p in problems)
    assert any("frobnicate" in p for p in problems)


def test_a_case_folder_loads_into_objects_and_events_and_its_label_is_not_read(tmp_path):
    dump = tmp_path / "benchmark" / "boutique"
    for case in ("startup/60", "scheduling/141"):
        shutil.copytree(CASES / case, dump / case)
    (dump / "runtime" / "1" / "raw_data").mkdir(parents=True)
    (dump / "runtime" / "1" / "raw_data" / "k8s_states.json").write_text("{not json")
    db = tmp_path / "store.duckdb"
    result = CliRunner().invoke(cli, ["etl", str(tmp_path / "benchmark"), "--db", str(db)])
    assert result.exit_code == 2, result.output  # one file failed, named; the rest loaded
    assert "runtime/1/raw_data/k8s_states.json" in result.output and "not JSON" in result.output
    con = store.connect(db, read_only=True)
    kinds = dict(con.execute("select kind, count(*) from k8s_objects where snapshot = 'boutique/startup/60' "
                             "group by all").fetchall())
    assert kinds["Pod"] >= 11 and kinds["Node"] == 4 and kinds["Service"] >= 11
    calls = set(con.execute("select caller, callee from declared_calls").fetchall())  # GetServiceDependencies' tree
    assert {("frontend", "checkoutservice"), ("checkoutservice", "cartservice"), ("cartservice", "redis-cart")} <= calls
    waiting, = con.execute("""select status->>'$.containerStatuses[0].state.waiting.reason' from k8s_objects
                              where snapshot = 'boutique/startup/60' and kind = 'Pod' and name like 'redis-cart-%'
                              and status->>'$.describe' is not null""").fetchall()[0]
    assert waiting == "CrashLoopBackOff"
    message, = con.execute("""select message from k8s_events where snapshot = 'boutique/scheduling/141'
                              and reason = 'FailedScheduling' and object_name like 'adservice-%'""").fetchall()[0]
    assert "untolerated taint" in message
    read = {row[0] for row in con.execute("select path from manifest where status = 'loaded'").fetchall()}
    assert not any(p.endswith("metadata.json") for p in read)
    denied, = con.execute("""select count(*) from k8s_logs where snapshot = 'boutique/startup/60'
                             and service = 'redis-cart' and message like '%Permission denied%' and ts is not null"""
                          ).fetchall()[0]
    assert denied
    labels = json.loads((dump / "startup/60/metadata.json").read_text())["result"]["root_cause"]
    assert not con.execute("select count(*) from k8s_objects where status like ?", [f"%{labels}%"]).fetchall()[0][0]


def test_a_case_s_metrics_load_as_its_services_and_nodes_series_on_the_events_clock(tmp_path):
    """metrics.csv: a column SERVICE-METRIC a series (a node's where kubectl lists that node), its times China's
    clock, eight hours after the events' UTC: read as UTC, beside the case's events."""
    dump = tmp_path / "boutique"
    shutil.copytree(CASES / "infrastructure/41", dump / "infrastructure/41")
    db = tmp_path / "store.duckdb"
    assert CliRunner().invoke(cli, ["etl", str(dump), "--db", str(db)]).exit_code == 0
    con = store.connect(db, read_only=True)
    kinds = dict(con.execute("select component, any_value(component_kind) from metric_points group by all").fetchall())
    assert kinds["redis-cart"] == kinds["adservice"] == "service" and kinds["worker-01"] == kinds["master"] == "node"
    (first, last), = con.execute("select min(ts), max(ts) from metric_points").fetchall()
    stamps = re.findall(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", (dump / "infrastructure/41/raw_data/k8s_states.json").read_text())
    latest = dt.datetime.fromisoformat(max(stamps)[:-1])  # the last time kubectl printed (a pod's start, in UTC)
    assert latest < first < latest + dt.timedelta(minutes=10) and last < latest + dt.timedelta(minutes=20)


EXPECTED = {  # a case of each stage of a pod's life: its label, and the words the cause is found by
    "admission/1": ("Admission_Fault", "app/adservice", "missing_service_account"),
    "admission/44": ("Admission_Fault", "namespace/boutique", "namespace_service_quota_exceeded"),
    "scheduling/141": ("Scheduling_Fault", "app/adservice", "taint_toleration_mismatch"),
    "scheduling/128": ("Scheduling_Fault", "app/redis-cart", "pvc_access_mode_mismatch"),
    "scheduling/53": ("Scheduling_Fault", "app/redis-cart", "pvc_capacity_mismatch"),  # the claim's size: its
    "scheduling/131": ("Scheduling_Fault", "app/redis-cart", "pvc_selector_mismatch"),  # manifest's, as its selector
    "startup/1": ("Startup_Fault", "app/adservice", "image_registry_dns_failure"),
    "startup/60": ("Startup_Fault", "app/redis-cart", "volume_mount_permission_denied"),
    "runtime/10": ("Runtime_Fault", "app/checkoutservice", "liveness_probe_incorrect_port"),
    "runtime/31": ("Runtime_Fault", "app/adservice", "readiness_probe_incorrect_protocol"),
    "service/1": ("Service_Routing_Fault", "app/cartservice", "service_env_var_address_mismatch"),
    "infrastructure/1": ("Infrastructure_Fault", "node/worker-01", "containerd_unavailable"),
    "infrastructure/45": ("Infrastructure_Fault", "node/worker-01", "node_network_packet_loss"),  # by its alerts
    "infrastructure/41": ("Infrastructure_Fault", "node/worker-02", "node_network_delay"),  # its slow callees
    "infrastructure/42": ("Infrastructure_Fault", "node/worker-02", "node_network_delay"),  # retransmits, rates fell
    "performance/1": ("Performance_Fault", "app/adservice", "pod_cpu_overload"),
    "performance/12": ("Performance_Fault", "app/adservice", "pod_network_delay"),
}


def test_manifests_are_declared_objects_and_aliases_are_not_read():
    claim = """apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: shop}
spec:
  resources: {requests: {storage: 3Gi}}
  selector: {matchLabels: {disktype: hdd}}
---
"""
    objects, problems = kubectl.manifests(claim)
    assert not problems and objects[0]["spec"]["resources"]["requests"]["storage"] == "3Gi"
    assert objects[0]["status"] == kubectl.DECLARED
    bomb = "a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\n"
    assert kubectl.manifests(bomb)[0] == [] and "alias" in kubectl.manifests(bomb)[1][0]
    assert kubectl.manifests("kind: [unclosed")[1][0].startswith("not YAML")


def test_a_node_service_systemd_says_is_not_active_names_the_node(tmp_path):
    """The benchmark's CheckNodeServiceStatus outputs: kube-proxy stopped on worker-02 (a service of the node, not a
    pod: no pod says so), kubelet running everywhere."""
    from etl.adapters.cloudopsbench import _tools

    status = "Service: {unit}\nNode: {node}\nStatus: x {unit}.service\n     Active: {active} since Fri 2025-12-05\n"
    tools = {f'CheckNodeServiceStatus:{{"node_name":"{node}","service_name":"{unit}"}}':
             status.format(unit=unit, node=node, active="inactive (dead)" if (node, unit) == ("worker-02", "kube-proxy")
                           else "active (running)")
             for node in ("worker-01", "worker-02") for unit in ("kubelet", "kube-proxy")}
    tools['CheckNodeServiceStatus:{"node_name": 7}'] = "?"
    tables, notes = _tools(tools, "boutique/infrastructure/9")
    assert "not a node and a service" in notes[0]
    con = store.connect(tmp_path / "tiny.duckdb")
    for table, rows in tables.items():
        con.register("rows", rows)
        con.execute(f"insert into {table} by name select * from rows")
    top = findings(con, "boutique/infrastructure/9")
    assert [(f.component, f.root_cause) for f in top] == [("node/worker-02", "kube_proxy_unavailable")], top


@pytest.fixture(scope="module")
def cases_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("cloudopsbench")
    for case in EXPECTED:
        shutil.copytree(CASES / case, root / "boutique" / case)
    db = root / "store.duckdb"
    assert CliRunner().invoke(cli, ["etl", str(root), "--db", str(db)]).exit_code == 0
    return db


@pytest.mark.parametrize("case", EXPECTED)
def test_the_cluster_s_state_names_the_cause_of_each_stage_of_a_pod_s_life(cases_store, case):
    """Events are history: the service accounts "not found" while the others were created, a probe refused by a
    container that died by itself, an address of a part not deployed here, each lose to the cause the present state
    holds."""
    con = store.connect(cases_store, read_only=True)
    top = findings(con, f"boutique/{case}")[0]
    assert (top.taxonomy, top.component, top.root_cause) == EXPECTED[case], top
    assert top.evidence


def test_case_folders_are_answered_and_judged_end_to_end_and_no_answer_reads_a_label(cases_store, tmp_path):
    """The four commands of a Cloud-OpsBench run; the same answers come from the folders with their labels cut
    out of metadata.json."""
    def run(root, db, name):
        runner = CliRunner()
        if not db.exists():
            assert runner.invoke(cli, ["etl", str(root), "--db", str(db)]).exit_code == 0
        questions, answers = tmp_path / f"{name}-input.json", tmp_path / f"{name}.jsonl"
        assert runner.invoke(cli, ["questions", "--db", str(db), "--out", str(questions)]).exit_code == 0
        result = runner.invoke(cli, ["diagnose", "--agent", "llm", "--db", str(db), "--input", str(questions),
                                     "--out", str(answers), "--report", str(tmp_path / f"{name}-pages")])
        assert result.exit_code == 0, result.output
        return questions, answers

    questions, answers = run(None, cases_store, "labelled")
    assert {q["uuid"] for q in json.loads(questions.read_text())} == {f"boutique/{c}" for c in EXPECTED}
    judged = CliRunner().invoke(cli, ["judge", "--rules", "cloudopsbench", "--truth", str(cases_store.parent),
                                      "--answers", str(answers), "--json"])
    assert judged.exit_code == 0, judged.output
    assert json.loads(judged.output) == {"A@1": 1.0, "A@3": 1.0, "object@1": 1.0, "cause@1": 1.0,
                                         "cases": len(EXPECTED), "answered": len(EXPECTED)}
    first = json.loads(answers.read_text().splitlines()[0])
    assert first["top_3_predictions"][0].keys() == {"fault_taxonomy", "fault_object", "root_cause"}
    page = (tmp_path / "labelled-pages" / "case-0001.html").read_text()  # what the answer rests on
    assert "The objects of app/adservice" in page and "FailedCreate" in page

    bare = tmp_path / "bare"
    shutil.copytree(cases_store.parent / "boutique", bare / "boutique")
    for meta in bare.rglob("metadata.json"):
        meta.write_text(json.dumps({k: v for k, v in json.loads(meta.read_text()).items()
                                    if k not in ("result", "process")}))
    _, unlabelled = run(bare, tmp_path / "bare.duckdb", "bare")
    assert unlabelled.read_text() == answers.read_text()


PENDING = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "cart-5f9c-x2x", "namespace": "shop", "labels": {"app": "cart"},
                        "ownerReferences": [{"kind": "ReplicaSet", "name": "cart-5f9c"}], "managedFields": [{}]},
           "spec": {"containers": [{"name": "server", "image": "cart:1"}]},
           "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]}}
SCHEDULING = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "cart-5f9c-x2x.1", "namespace": "shop"},
              "involvedObject": {"kind": "Pod", "name": "cart-5f9c-x2x", "namespace": "shop"},
              "reason": "FailedScheduling", "type": "Warning", "count": 3,
              "message": "0/3 nodes are available: 3 node(s) had untolerated taint {dedicated: db}.",
              "firstTimestamp": "2025-06-06T10:00:00Z", "lastTimestamp": "2025-06-06T10:04:00Z"}


def test_a_cluster_s_exports_beside_a_telemetry_dump_load_into_the_same_tables(tmp_path):
    """kubectl get -o json (a List with an event, a kind rcalab does not know, an event with no object and an object
    larger than Kubernetes keeps) and the Collector's k8sobjects records (a watch's event) beside an RCAEval case."""
    from test_rcaeval import case

    case(tmp_path / "dump", "cartservice", "cpu", "cpu")
    k8s = tmp_path / "dump" / "k8s"
    k8s.mkdir()
    huge = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "huge", "namespace": "shop"},
            "data": {"blob": "x" * (2 * 2**20)}}
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "shop"},
              "spec": {"size": 3}}
    orphan = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "lost", "namespace": "shop"},
              "reason": "Odd", "message": "no object"}
    (k8s / "pods.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List",
                                               "items": [PENDING, SCHEDULING, widget, orphan, huge]}, indent=4))
    record = {"timeUnixNano": "1749204300000000000", "body": any_value({"type": "MODIFIED", "object": {
        **PENDING, "metadata": {**PENDING["metadata"], "name": "cart-5f9c-y7y"}}}),
        "attributes": [{"key": "event.domain", "value": {"stringValue": "k8s"}},
                       {"key": "event.name", "value": {"stringValue": "Pod"}}]}
    (k8s / "objects.jsonl").write_text(json.dumps({"resourceLogs": [{"resource": {}, "scopeLogs": [
        {"scope": {}, "logRecords": [record]}]}]}) + "\n")
    db = tmp_path / "store.duckdb"
    result = CliRunner().invoke(cli, ["etl", str(tmp_path / "dump"), "--db", str(db)])
    assert result.exit_code == 0, result.output
    con = store.connect(db, read_only=True)
    rows = con.execute("select kind, name, owner, seen, spec->>'$.containers[0].image', labels->>'$.app' "
                       "from k8s_objects order by name").fetchall()
    assert [r[:3] for r in rows] == [("Pod", "cart-5f9c-x2x", "ReplicaSet/cart-5f9c"),
                                     ("Pod", "cart-5f9c-y7y", "ReplicaSet/cart-5f9c"), ("Widget", "w", None)]
    assert rows[1][3] == dt.datetime(2025, 6, 6, 10, 5) and rows[0][4:] == ("cart:1", "cart")
    event, = con.execute("select object_kind, object_name, reason, count, first_seen, last_seen "
                         "from k8s_events").fetchall()
    assert event == ("Pod", "cart-5f9c-x2x", "FailedScheduling", 3, dt.datetime(2025, 6, 6, 10),
                     dt.datetime(2025, 6, 6, 10, 4))
    said, = con.execute("select error from manifest where path like '%pods.json'").fetchall()[0]
    assert "event lost: no object involved" in said and "ConfigMap huge" in said and "the rest loaded" in said
    assert con.execute("select count(*) from metric_points").fetchall()[0][0]  # the telemetry loaded as before
    import duckdb

    from etl.adapters import kubernetes, otlp

    assert otlp.signal(duckdb.connect(), k8s / "objects.jsonl") == kubernetes.KIND  # in an OTLP dump, told at once


def _deployment(name, replicas=1, containers=None, labels=None):
    labels = labels or {"app": name}
    containers = containers or [{"name": "server", "image": f"{name}:1", "ports": [{"containerPort": 8080}]}]
    return {"kind": "Deployment", "metadata": {"name": name, "namespace": "shop", "labels": labels},
            "spec": {"replicas": replicas, "selector": labels,
                     "template": {"metadata": {"labels": labels}, "spec": {"containers": containers}}},
            "status": {"replicas": replicas, "availableReplicas": replicas}}


def _pod(name, app, containers=None, phase="Running", namespace="shop", node="worker-1", **status):
    containers = containers or [{"name": "server", "image": f"{app}:1", "ports": [{"containerPort": 8080}]}]
    return {"kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": {"app": app},
                                        "ownerReferences": [{"kind": "ReplicaSet", "name": name.rsplit("-", 1)[0]}]},
            "spec": {"nodeName": node, "containers": containers}, "status": {"phase": phase, **status}}


def _event(kind, name, reason, message, namespace="shop"):
    return {"kind": "Event", "metadata": {"name": f"{name}.1", "namespace": namespace}, "type": "Warning",
            "reason": reason, "message": message, "involvedObject": {"kind": kind, "name": name,
                                                                     "namespace": namespace}}


def _tiny(tmp_path, items, logs=()):
    """A store of a cluster's state: its objects and events, and (service, line) log lines."""
    objects, events, problems = kubectl.from_json(items)
    assert not problems
    con = store.connect(tmp_path / "tiny.duckdb")
    for table, rows in kubectl.tables(objects, events, None).items():
        con.register("rows", rows)
        con.execute(f"insert into {table} by name select * from rows")
    for service, line in logs:
        con.execute("insert into k8s_logs (service, message) values (?, ?)", [service, line])
    return con


GRPC = [{"name": "server", "image": "cart:1", "ports": [{"containerPort": 7070}],
         "livenessProbe": {"grpc": {"port": 7070}, "periodSeconds": 5}}]
TINY = {  # a cluster's state as its exports show it: the cause, and the finding it must give
    "deployment_zero_replicas": ([_deployment("cart", replicas=0),  # beside objects of shapes no cluster writes
                                  {**_pod("odd-1-x", "odd"), "spec": {"containers": {"a": 1}, "nodeName": 5},
                                   "status": {"phase": "Pending", "conditions": "none", "containerStatuses": [7]}}],
                                 "app/cart"),
    "missing_image_pull_secret": ([_deployment("cart"), _pod("cart-5f9c-x2x", "cart", phase="Pending", containerStatuses=[
        {"name": "server", "state": {"waiting": {"reason": "ImagePullBackOff"}}}]),
        _event("Pod", "cart-5f9c-x2x", "Failed", 'Failed to pull image "private/cart:1": pull access denied, '
                                                   "repository does not exist or may require authorization")],
        "app/cart"),
    "service_sidecar_port_conflict": ([_deployment("cart"), _pod("cart-5f9c-x2x", "cart", containers=[
        {"name": "server", "ports": [{"containerPort": 15021}]},
        {"name": "istio-proxy", "ports": [{"containerPort": 15090}]}])], "app/cart"),
    "service_protocol_mismatch": ([_deployment("cart", containers=GRPC), _pod("cart-5f9c-x2x", "cart", containers=GRPC),
                                   {"kind": "Service", "metadata": {"name": "cart", "namespace": "shop"},
                                    "spec": {"selector": {"app": "cart"},
                                             "ports": [{"name": "http-cart", "port": 7070, "targetPort": 7070}]}}],
                                  "app/cart"),
    "mysql_invalid_port": ([_deployment("ts-order", containers=[
        {"name": "server", "env": [{"name": "MYSQL_HOST", "value": "ts-order-mysql"}, {"name": "MYSQL_PORT",
                                                                                      "value": "3307"}]}]),
        _deployment("ts-order-mysql"), {"kind": "Service", "metadata": {"name": "ts-order-mysql", "namespace": "shop"},
         "spec": {"selector": {"app": "ts-order-mysql"}, "ports": [{"port": 3306, "targetPort": 3306}]}}],
        "app/ts-order"),
    "liveness_probe_incorrect_protocol": ([_deployment("ts-order"), _pod("ts-order-5f9c-x2x", "ts-order", containers=[
        {"name": "server", "ports": [{"containerPort": 12031}], "livenessProbe": {"grpc": {"port": 12031}}}],
        containerStatuses=[{"name": "server", "ready": True, "restartCount": 4, "state": {"running": {}}}]),
        _event("Pod", "ts-order-5f9c-x2x", "Unhealthy", "Liveness probe failed: error: health rpc probe failed: rpc "
               'error: code = Unavailable desc = connection error: desc = "error reading server preface: http2: frame '
               'too large"')], "app/ts-order"),
    "liveness_probe_incorrect_timing": ([_deployment("ts-order"), _pod("ts-order-5f9c-x2x", "ts-order", containers=[
        {"name": "server", "ports": [{"containerPort": 12031}],
         "livenessProbe": {"tcpSocket": {"port": 12031}, "initialDelaySeconds": 5}}], containerStatuses=[
        {"name": "server", "ready": False, "restartCount": 5, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
         "lastState": {"terminated": {"reason": "Error", "exitCode": 143}}}]),  # a JVM not listening yet: refused
        _event("Pod", "ts-order-5f9c-x2x", "Unhealthy", "Liveness probe failed: dial tcp 10.244.1.7:12031: connect: "
                                                        "connection refused"),
        {**_event("Pod", "ts-order-5f9c-x2x", "Killing", "Container server failed liveness probe, will be restarted"),
         "type": "Normal"}], "app/ts-order"),
    "namespace_storage_quota_exceeded": ([_deployment("redis"), _pod("redis-5f9c-x2x", "redis", phase="Pending", node=None),
        _event("Pod", "redis-5f9c-x2x", "FailedScheduling",
               '0/3 nodes are available: persistentvolumeclaim "redis-pvc" not found.'),
        {"kind": "PersistentVolumeClaim", "metadata": {"name": "redis-pvc", "namespace": "shop"},  # its manifest's
         "spec": {"resources": {"requests": {"storage": "1Gi"}}}, "status": {"declared": True}},
        {"kind": "ResourceQuota", "metadata": {"name": "storage", "namespace": "shop"},
         "status": {"hard": {"requests.storage": "500Mi"}, "used": {"requests.storage": "0"}}}], "namespace/shop"),
    "container_memory_limit_too_low": ([_deployment("cart"), _pod("cart-5f9c-x2x", "cart", containerStatuses=[
        {"name": "server", "ready": False, "restartCount": 4, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
         "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}])], "app/cart"),  # at every start
    "kube_proxy_unavailable": ([_pod("kube-proxy-x2x4p", "kube-proxy", phase="Failed", namespace="kube-system",
                                     node="worker-2")], "node/worker-2"),
    "pod_anti_affinity_conflict": ([_deployment("cart"), _pod("cart-5f9c-x2x", "cart", phase="Pending", node=None),
                                    _event("Pod", "cart-5f9c-x2x", "FailedScheduling",
                                           "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules.")],
                                   "app/cart"),
}


@pytest.mark.parametrize("cause", TINY)
def test_each_kind_of_cause_on_a_tiny_cluster(tmp_path, cause):
    """Fault types no development case shows, each in the words Kubernetes writes it."""
    items, component = TINY[cause]
    top = findings(_tiny(tmp_path, items), None)[0]
    assert (top.component, top.root_cause) == (component, cause), top


def test_slow_services_on_one_node_are_its_network_only_where_the_calls_are_known():
    """front (worker-1) calls cart and ads (worker-2); all three are slow, cart's traffic moved. With the calls,
    cart and ads are slow of their own, on one node: its delay. Without them, front may be waiting on either: the
    one whose own traffic moved, its pod's delay."""
    def alert(reason, message):
        return {"type": "Alert", "reason": reason, "message": message, "count": 1, "age": None}

    pods = {f"{app}-5f9c-x2x": {"namespace": "shop", "owner": f"ReplicaSet/{app}-5f9c", "labels": {"app": app},
                                "spec": {"nodeName": node}, "status": {"phase": "Running"}}
            for app, node in (("front", "worker-1"), ("cart", "worker-2"), ("ads", "worker-2"))}
    slow = {app: alert("LATENCY_DEGRADATION [Slow Response]", f"{app}-p90latency: Normal=2ms -> Current=90ms (+{rise}%)")
            for app, rise in (("front", 9000.0), ("cart", 4400.0), ("ads", 3000.0))}
    events = {("Service", app): [slow[app]] for app in slow}
    events["Service", "cart"].append(alert("TRAFFIC_ANOMALY [Network Drop]", "Normal=40pps -> Current=9pps (-77.5%)"))

    def first(calls):
        top = causes(Snapshot({"Pod": pods}, events, "shop", calls=calls))[0]
        return top.component, top.root_cause

    assert first({"front": {"cart", "ads"}}) == ("node/worker-2", "node_network_delay")
    assert first({}) == ("app/cart", "pod_network_delay")


def test_the_cluster_s_state_joins_the_ranking_of_a_telemetry_window(tmp_path):
    """The frontend's latency rose; the cluster says why: the pod behind it is killed for its memory at every start.
    Without the export the ranking names the frontend; with it, the cartservice, for the cluster's reason."""
    from features.cases import load_questions
    from features.digest import build_digest
    from test_rcaeval import INJECT, case

    def top(dump, name):
        db, cases = tmp_path / f"{name}.duckdb", tmp_path / f"{name}-cases"
        assert CliRunner().invoke(cli, ["etl", str(dump), "--db", str(db)]).exit_code == 0
        assert CliRunner().invoke(cli, ["cases", str(dump), "--out", str(cases)]).exit_code == 0
        con = store.connect(db, read_only=True)
        digest = build_digest(con, load_questions(cases / "input.json")[0])
        first = digest.candidates[0].component
        return first, digest.options.get(first, [None])[0]

    dump = tmp_path / "dump"
    case(dump, "frontend", "latency", "latency-50")
    assert top(dump, "telemetry")[0] == "frontend"
    oom = _pod("cartservice-5f9c-x2x", "cartservice", containerStatuses=[
        {"name": "server", "ready": False, "restartCount": 3, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
         "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}])
    export = dump / "k8s" / "state.json"
    export.parent.mkdir()
    export.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [oom]}, indent=2))
    when = INJECT + 5 * 60  # exported five minutes into the fault
    os.utime(export, (when, when))
    component, option = top(dump, "with-state")
    assert component == "cartservice" and option.fault_type == "container_memory_limit_too_low", (component, option)


def test_a_live_cluster_s_state_is_its_last_export_before_the_window_s_end(tmp_path):
    """The pod OOM-killed at 10:00 was well again at 11:00; a pod last seen at 8:00 is gone."""
    con = store.connect(tmp_path / "tiny.duckdb")
    ill = _pod("cart-5f9c-x2x", "cart", containerStatuses=[
        {"name": "server", "restartCount": 1, "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}])
    well = _pod("cart-5f9c-x2x", "cart", containerStatuses=[{"name": "server", "restartCount": 1}])
    gone = _pod("old-1b2c-q9q", "old", containerStatuses=[
        {"name": "server", "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}])
    for item, hour in ((gone, 8), (ill, 10), (well, 11)):
        objects, events, _ = kubectl.from_json([item], dt.datetime(2025, 6, 6, hour))
        for table, rows in kubectl.tables(objects, events, None).items():
            con.register("rows", rows)
            con.execute(f"insert into {table} by name select * from rows")

    def causes(hour):
        return [(f.component, f.root_cause) for f in findings(con, None, until=dt.datetime(2025, 6, 6, hour, 5))]

    assert causes(10) == [("app/cart", "oom_killed")]
    assert causes(11) == []
    assert ("app/old", "oom_killed") in causes(8)


@pytest.mark.parametrize("fault, label, words", [
    ("incorrect image reference", "incorrect_image_reference", "Failed to pull image"),
    ("service selector mismatch", "service_selector_mismatch", "no pod has these labels"),
    ("liveness probe incorrect port", "liveness_probe_incorrect_port", "Liveness probe failed")])
def test_a_testbed_kubernetes_fault_is_named_by_the_ranking_from_the_cluster_s_state(tmp_path, fault, label, words):
    """HipsterShop with the cluster's state written, and a fault of the cluster's own making: a rollout whose image
    the registry does not have (the pods' silence alone says pod failure), a service's selector that no pod meets
    (its callers' refused connections alone say its pods failed), a liveness probe on a port the container does not
    listen on (its pods flap). The cluster says why, and its words name the fault."""
    from testbed.system import SHIPPED

    text = (SHIPPED / "hipstershop.yaml").read_text()  # its faults are its last block
    description = tmp_path / "shop.yaml"
    description.write_text(text[:text.index("\nfaults:\n")] + f"\nfaults:\n  {fault}: [service]\n")
    out, db = tmp_path / "dump", tmp_path / "store.duckdb"
    runner = CliRunner()
    result = runner.invoke(cli, ["simulate", str(out), "--system", str(description), "--cases", "1", "--scale", "0.003",
                                 "--hours", "2", "--cluster-state"])
    assert result.exit_code == 0, result.output
    assert list(out.glob("*/k8s/k8sobjects_*.jsonl.gz"))
    assert runner.invoke(cli, ["etl", str(out), "--db", str(db)]).exit_code == 0
    truth = json.loads((out / "groundtruth.jsonl").read_text().splitlines()[0])
    con = store.connect(db, read_only=True)
    from features.cases import load_questions
    from features.digest import build_digest

    digest = build_digest(con, load_questions(out / "input.json")[0])
    top = digest.candidates[0]
    assert top.component in (truth["instance"] if isinstance(truth["instance"], list) else [truth["instance"]])
    assert digest.options[top.component][0].fault_type == label, digest.options[top.component]
    assert any(words in i.text for i in top.evidence + top.found)


def test_a_quota_on_a_resource_the_taxonomy_has_no_fault_of_names_none_and_stops_nothing(tmp_path):
    short = {**_deployment("cart"), "status": {"replicas": 0}}
    replicas = {"kind": "ReplicaSet", "metadata": {"name": "cart-5f9c", "namespace": "shop",
                                                   "ownerReferences": [{"kind": "Deployment", "name": "cart"}]}}
    refused = _event("ReplicaSet", "cart-5f9c", "FailedCreate", 'Error creating: pods "cart-5f9c-x" is forbidden: '
                     "exceeded quota: objects, requested: count/configmaps=1, used: count/configmaps=5, limited: "
                     "count/configmaps=5")
    con = _tiny(tmp_path, [short, replicas, refused, _deployment("shop", replicas=0)])
    assert [(f.component, f.root_cause) for f in findings(con, None)] == [("app/shop", "deployment_zero_replicas")]


def _mysql_pod():
    return {**_pod("tsdb-mysql-0", "tsdb-mysql", containers=[{"name": "mysql", "image": "mysql:5.7"}]),
            "metadata": {"name": "tsdb-mysql-0", "namespace": "shop", "labels": {"app": "tsdb-mysql"},
                         "ownerReferences": [{"kind": "StatefulSet", "name": "tsdb-mysql"}]}}


READ_ONLY = ("java.sql.SQLException: The MySQL server is running with the --read-only option so it cannot execute "
             "this statement")
DENIED = "java.sql.SQLException: Access denied for user 'ts'@'10.244.1.7' (using password: YES)"
LINK = "com.mysql.cj.jdbc.exceptions.CommunicationsException: Communications link failure"
REFUSED = {  # clients' lines -> the finding: the server's state is the server's; a client's setting, the client's
    "read-only": ([("ts-order-service", READ_ONLY)], ("app/tsdb-mysql", "db_read_only")),
    "too many connections": ([("ts-order-service", 'Data source rejected establishment of connection, message from '
                                                   'server: "Too many connections"')],
                             ("app/tsdb-mysql", "db_connection_exhaustion")),
    "one client denied": ([("ts-order-service", DENIED), ("ts-route-service", "GET /routes 200")],
                          ("app/ts-order-service", "mysql_invalid_credentials")),
    "every client denied": ([("ts-order-service", DENIED), ("ts-route-service", DENIED)],
                            ("app/tsdb-mysql", "mysql_invalid_credentials")),
    "port refused": ([("ts-order-service", LINK), ("ts-order-service", "Caused by: java.net.ConnectException: "
                                                                       "Connection refused")],
                     ("app/ts-order-service", "mysql_invalid_port")),
    "host unknown": ([("ts-order-service", LINK), ("ts-order-service", "Caused by: java.net.UnknownHostException: "
                                                                       "tsdb-mysq1-leader")],
                     ("app/ts-order-service", "service_env_var_address_mismatch")),
    "a gateway's route to no service": ([("ts-gateway-service", "NotFoundException: 503 SERVICE_UNAVAILABLE \"Unable "
                                                                 "to find instance for ts-order-servcie\"")],
                                         ("app/ts-gateway-service", "gateway_misroute")),
    "a registry's instance of a service that is down is no route's fault": (
        [("ts-gateway-service", "java.lang.IllegalStateException: No instances available for ts-order-service")],
        None),
    "a read-only disk is no database": ([("ts-order-service", "java.io.IOException: Read-only file system")], None),
}


@pytest.mark.parametrize("case", REFUSED)
def test_what_a_client_logs_of_a_part_it_uses_names_the_side_to_fix(tmp_path, case):
    lines, expected = REFUSED[case]
    con = _tiny(tmp_path, [_deployment("ts-order-service"), _pod("ts-order-service-5f9c-x2x", "ts-order-service"),
                           _mysql_pod(), {"kind": "Service", "metadata": {"name": "ts-order-service", "namespace": "shop"},
                                          "spec": {"selector": {"app": "ts-order-service"}}}], lines)
    found = [(f.component, f.root_cause) for f in findings(con, None)]
    assert found[:1] == ([expected] if expected else []), found


def test_the_llm_agent_asks_its_model_only_where_the_state_leaves_a_choice(tmp_path):
    """Two apps pending for the same taint tie: the model reads each one's state and chooses; its choice leads, in
    the finding's own words. A malformed reply leaves the findings' order; one finding asks nothing."""
    from features.cases import Question
    from reasoner.cluster import leaves_a_choice, snapshot_answer
    from test_reasoner import ScriptedChat

    taint = "0/3 nodes are available: 3 node(s) had untolerated taint {dedicated: gpu}."
    items = [_deployment("cart"), _deployment("shop")]
    for app in ("cart", "shop"):
        items += [_pod(f"{app}-5f9c-x2x", app, phase="Pending", node=None),
                  _event("Pod", f"{app}-5f9c-x2x", "FailedScheduling", taint)]
    con = _tiny(tmp_path, items)
    q = Question("shop/scheduling/1", None, None, "Pods are pending.", snapshot=None)
    assert leaves_a_choice(con, q)
    first = snapshot_answer(con, q).answer["component"]  # the rank agent: the findings' order
    other = ({"cart", "shop"} - {first}).pop()
    chat = ScriptedChat({"option": "B"})
    chosen = snapshot_answer(con, q, chat, "tiny")
    assert chosen.answer["component"] == other and chosen.transcript["status"] == "answered"
    assert "untolerated taint" in chosen.answer["reason"] and "Pending" in chat.asked[0][0][1]["content"]
    assert [p["fault_object"] for p in chosen.answer["top_3_predictions"][:2]] == [f"app/{other}", f"app/{first}"]
    garbled = snapshot_answer(con, q, ScriptedChat("B, I think"), "tiny")
    assert garbled.answer["component"] == first and garbled.transcript["status"] == "fallback"
    con.execute("delete from k8s_events where object_name like ?", [f"{other}-%"])
    silent = ScriptedChat()
    assert snapshot_answer(con, q, silent, "tiny").answer["component"] == first and not silent.asked


@pytest.mark.parametrize("system, fault, reason", [("hipstershop", "pod kill", "Stopping container server"),
                                                   ("hipstershop", "pod failure", "Container server definition changed"),
                                                   ("hipstershop", "memory stress", "Started container server"),
                                                   ("otel-demo", "email memory leak", "Started container server")])
def test_a_pod_fault_leaves_what_kubernetes_writes_and_the_answer_it_had_without_the_state(tmp_path, system, fault,
                                                                                          reason):
    """A killed pod's container restarts (Killing, a restart counted), a failed pod's is swapped for one that idles
    (restarted for its changed definition, not ready while it idles), a stressed pod's is OOM-killed at its peak, a
    leaking one (here) as its window ends: the state says what happened to the pod, and the answer from the
    telemetry stands, as without the state."""
    import shutil

    from features.cases import load_questions
    from features.digest import build_digest
    from testbed.bench import random_schedule

    schedule = random_schedule(tmp_path / "schedule.jsonl", 1, system=system, types=[fault])
    out = tmp_path / "dump"
    runner = CliRunner()
    result = runner.invoke(cli, ["simulate", str(out), "--system", system, "--schedule", str(schedule), "--scale",
                                 "0.003", "--hours", "2", "--cluster-state"])
    assert result.exit_code == 0, result.output
    bare = tmp_path / "bare"
    shutil.copytree(out, bare, ignore=shutil.ignore_patterns("k8s"))
    tops = []
    for dump in (out, bare):
        db = tmp_path / f"{dump.name}.duckdb"
        assert runner.invoke(cli, ["etl", str(dump), "--db", str(db)]).exit_code == 0
        con = store.connect(db, read_only=True)
        digest = build_digest(con, load_questions(dump / "input.json")[0])
        top = digest.candidates[0]
        tops.append((top.component, digest.options[top.component][0].fault_type))
        if dump == out:
            truth = json.loads((out / "groundtruth.jsonl").read_text())
            pods = {p for p, in con.execute("select pod from placement where service = ?", [truth["service"]]).fetchall()}
            said = {name for name, message in con.execute("select object_name, message from k8s_events").fetchall()
                    if reason in message}
            assert said and said <= pods
            shown = [json.loads(s)["containerStatuses"][0] for s, in con.execute(
                "select status from k8s_objects where kind = 'Pod' and list_contains(?, name)", [sorted(said)]).fetchall()]
            assert any(st["restartCount"] > 0 for st in shown)
            if fault == "pod failure":  # a kill's two minutes may fall between two pulls
                assert any(not st["ready"] for st in shown)
            if "memory" in fault:
                assert any(st.get("lastState", {}).get("terminated", {}).get("reason") == "OOMKilled" for st in shown)
        con.close()
    assert tops[0] == tops[1]
