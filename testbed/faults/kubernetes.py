"""Faults of the cluster's own making: what Kubernetes does wrong (or is told to), with the telemetry it leaves and
the pod states and events it writes (`testbed.cluster`)."""

from __future__ import annotations

from ..cluster import Change
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
