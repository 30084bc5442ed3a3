"""Faults of the cluster's own making: what Kubernetes does wrong (or is told to), with the telemetry it leaves and
the pod states and events it writes (`testbed.cluster`)."""

from __future__ import annotations

from ..cluster import RUNNING, Change
from .base import NET_KPIS, SERVICE, cold_start, crash_loop, cut_off, fault, indices


@fault("incorrect image reference", "kubernetes", SERVICE,
       [{"type": "log", "keyword": ["Connection", "refused"]},
        {"type": "metric", "keyword": ["client_error", "client_error_ratio", "error", "error_ratio"]},
        {"type": "metric", "keyword": ["pod_cpu_usage"]}],
       ["client_error", "client_error_ratio", "error", "error_ratio", "pod_processes", "request", "response"],
       ["image pull failure", "ErrImagePull", "incorrect image reference"])
def incorrect_image_reference(day, target, sl, rng):
    """A rollout names an image tag the registry does not have: the service's pods are replaced (a Recreate rollout)
    by pods that cannot pull it and never start, so for the window there is no process, no traffic, and connections
    are refused; Kubernetes says ErrImagePull and why. Then the rollout is undone and the pods start cold."""
    service = day.topo.service_of[target.pods[0]]
    cut_off(day, target.pods, sl, "refused", ("pod_cpu_usage", "pod_processes", *NET_KPIS), 0.0)
    day.pod_kpi["pod_memory_working_set_bytes"][sl, indices(day, target.pods)] *= 0.02  # no container runs
    cold_start(day, target.pods, sl.stop)
    image = f"{service}:1-rollout"
    day.cluster.append(Change(sl.start, sl.stop, tuple(target.pods), {
        "phase": "Pending", "conditions": [{"type": "Ready", "status": "False"}],
        "containerStatuses": [{"name": "server", "ready": False, "restartCount": 0,
                               "state": {"waiting": {"reason": "ErrImagePull"}}}]},
        (("Warning", "Failed", f'Failed to pull image "{image}": rpc error: code = NotFound desc = failed to pull and '
                               f'unpack image "{image}": not found'),
         ("Warning", "Failed", "Error: ErrImagePull"))))


@fault("service selector mismatch", "kubernetes", SERVICE,
       [{"type": "log", "keyword": ["Connection", "refused"]},
        {"type": "metric", "keyword": ["client_error", "client_error_ratio", "error", "error_ratio"]},
        {"type": "metric", "keyword": ["pod_network_receive_bytes"]}],
       ["client_error", "client_error_ratio", "error", "error_ratio", "request", "response",
        "pod_network_receive_bytes", "pod_cpu_usage"],
       ["service selector mismatch", "no endpoints", "selector matches no pod"])
def service_selector_mismatch(day, target, sl, rng):
    """A change to the service's manifest selects a label its pods do not have: the service has no endpoints, so its
    callers' connections are refused while its pods run on idle (their processes and memory as they were, no
    request, the CPU at rest). Kubernetes writes no event of it: the Service's spec says it. Then the manifest is put
    back."""
    service = day.topo.service_of[target.pods[0]]
    cut_off(day, target.pods, sl, "refused", NET_KPIS, 0.02)
    day.pod_kpi["pod_cpu_usage"][sl, indices(day, target.pods)] *= 0.15  # no request to serve
    selector = {"app": service, "version": "v2"}  # a label the rollout of the pods was to add, and did not
    day.cluster.append(Change(sl.start, sl.stop, tuple(target.pods), RUNNING, service={"selector": selector}))


@fault("liveness probe incorrect port", "kubernetes", SERVICE,
       [{"type": "log", "keyword": ["Connection", "refused"]},
        {"type": "metric", "keyword": ["client_error", "client_error_ratio", "error", "error_ratio"]},
        {"type": "metric", "keyword": ["pod_processes"]}],
       ["client_error", "client_error_ratio", "error", "error_ratio", "pod_processes", "pod_cpu_usage", "request",
        "response"],
       ["liveness probe incorrect port", "Liveness probe failed", "CrashLoopBackOff"])
def liveness_probe_incorrect_port(day, target, sl, rng):
    """A rollout probes the container's liveness on a port it does not listen on: each container starts, serves for
    the probe's grace, and is killed by the kubelet, then waits longer each time (CrashLoopBackOff), so its pods are
    down more and more of the window; the kubelet says the probe was refused and that it killed the container. Then
    the rollout is undone and the pods start cold."""
    port = day.topo.component(target.pods[0]).port
    wrong = port + 1 if port else 8081
    down = crash_loop(sl.stop - sl.start, rng, up=(35, 45))  # the probe's delay and three failed periods
    day.pod_kpi["pod_processes"][sl, indices(day, target.pods)] *= ~down[:, 30:31]  # sampled mid-minute
    cut_off(day, target.pods, sl, "refused", ("pod_cpu_usage", *NET_KPIS), 0.1, down=(down.mean(1) >= 0.5)[:, None])
    cold_start(day, target.pods, sl.stop)
    day.cluster.append(Change(sl.start, sl.stop, tuple(target.pods), {
        "phase": "Running", "conditions": [{"type": "Ready", "status": "False"}],
        "containerStatuses": [{"name": "server", "ready": False, "restartCount": 4,
                               "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                               "lastState": {"terminated": {"reason": "Error", "exitCode": 137}}}]},
        (("Warning", "Unhealthy", f"Liveness probe failed: dial tcp 10.0.0.1:{wrong}: connect: connection refused"),
         ("Normal", "Killing", "Container server failed liveness probe, will be restarted"),
         ("Warning", "BackOff", "Back-off restarting failed container server")),
        container={"livenessProbe": {"tcpSocket": {"port": wrong}, "initialDelaySeconds": 10, "periodSeconds": 10}}))
