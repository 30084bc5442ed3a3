"""Faults of the cluster's own making: what Kubernetes does wrong (or is told to), with the telemetry it leaves and
the pod states and events it writes (`testbed.cluster`)."""

from __future__ import annotations

from ..cluster import RUNNING, Change
from .base import NET_KPIS, SERVICE, cold_start, cut_off, fault, indices


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
