"""Faults of a pod's resources and life: CPU and memory stress, a memory leak, a pod that fails or is killed."""

from __future__ import annotations

import numpy as np

from ..cluster import Change, restarted
from ..workload import MINUTES
from .base import (ANY, burst, callers_series, cold_start, cut_off, fault, indices, NET_KPIS, own_series, ramp, SERVICE,
                   watcher_of)


# What a container may hold above its usual working set before it is OOM-killed: a stress is killed at its peak, a
# leak once it has grown past it (in about half its windows).
LIMIT = 1.4e9


# --- stress -----------------------------------------------------------------------

@fault("cpu stress", "stress test", SERVICE,
       [{"type": "metric", "keyword": ["pod_cpu_usage"]}, {"type": "metric", "keyword": ["pod_processes"]},
        {"type": "metric", "keyword": ["rrt", "rrt_max"]}],
       ["pod_cpu_usage"],
       ["high CPU utilization", "CPU saturation", "CPU overload", "CPU usage spike", "cpu stress"])
def cpu_stress(day, target, sl, rng):
    """Stress processes in the pod burn cpu (usage up, more processes); the server competes with them for the
    cpu, so its own work takes longer."""
    idx = indices(day, target.pods)
    day.pod_kpi["pod_cpu_usage"][sl, idx] += ramp(sl, rng, 1.6, 2.0)
    day.pod_kpi["pod_processes"][sl, idx] += 4
    day.own_factor[sl, idx] *= ramp(sl, rng, 2.0, 3.5) + 1


@fault("memory stress", "stress test", SERVICE,
       [{"type": "metric", "keyword": ["pod_memory_working_set_bytes"]},
        {"type": "metric", "keyword": ["pod_processes"]}],
       ["pod_memory_working_set_bytes"],
       ["high memory usage", "memory saturation", "memory exhaustion", "memory leak", "memory stress"])
def memory_stress(day, target, sl, rng):
    """A process in the pod allocates and holds memory (working set up, one more process); at the peak the
    container hits its limit and is OOM-killed."""
    idx = indices(day, target.pods)
    day.pod_kpi["pod_memory_working_set_bytes"][sl, idx] += ramp(sl, rng, 1.2e9, 1.4e9)
    day.pod_kpi["pod_processes"][sl, idx] += 2
    day.own_factor[sl, idx] *= 1.3
    oom_kill(day, target.pods, sl.start + (sl.stop - sl.start) // 2)


def oom_kill(day, pods, minute: int) -> None:
    """The container reaches its memory limit at `minute` and is OOM-killed: a minute with no process and refused
    connections, then a cold start. Kubernetes counts the restart, its last state OOMKilled (exit 137), the pod not
    ready for that minute."""
    oom = slice(minute, minute + 1)
    cut_off(day, pods, oom, "refused", ("pod_processes",), 0.0)
    cold_start(day, pods, oom.stop)
    burst(day, pods, oom, ("could not load the warm cache after an OOM restart, starting cold",), 2, "warning")
    pods = tuple(pods)
    day.cluster.append(Change(oom.start, oom.stop, pods, restarted(1, "OOMKilled", 137, ready=False),
                              (("Normal", "Started", "Started container server"),)))
    day.cluster.append(Change(oom.stop, MINUTES, pods, restarted(1, "OOMKilled", 137)))


# --- pods ------------------------------------------------------------------------

@fault("pod failure", "pod fault", ANY,
       [{"type": "log", "keyword": ["Connection", "refused"]}, {"type": "log", "keyword": ["Error", "while", "dialing"]},
        {"type": "log", "keyword": ["failure"]}, {"type": "log", "keyword": ["unavailable"]},
        {"type": "metric", "keyword": ["client_error", "client_error_ratio", "error", "error_ratio"]},
        {"type": "metric", "keyword": ["pod_cpu_usage"]},
        {"type": "metric", "keyword": list(NET_KPIS)}],
       ["client_error", "client_error_ratio", "error", "error_ratio", "pod_processes", "request", "response"],
       ["pod crash", "pod terminated unexpectedly", "container exit", "pod failure"])
def pod_failure(day, target, sl, rng):
    """The pod's container is replaced by one that does nothing for the window: no process, no cpu, no traffic;
    connections held by clients are reset (`connection failure`), new ones refused; the idle container holds almost
    no memory; then it starts again, cold.
    A datastore part that fails stops reporting work (its metrics of role `stops`) and restarts its uptime; a part
    another watches (a storage its coordinator counts) leaves its regions pending and counted abnormal until it is
    back; the parts that call it see their slowest queries and failures grow."""
    cut_off(day, target.pods, sl, "refused", ("pod_cpu_usage", "pod_processes", *NET_KPIS), 0.0,
             logged=("reset", "refused"))
    day.pod_kpi["pod_memory_working_set_bytes"][sl, indices(day, target.pods)] *= 0.05  # an idle container's
    cold_start(day, target.pods, sl.stop)
    _failed_pods(day, tuple(target.pods), sl)
    part = day.topo.service_of[target.pods[0]]
    if part not in day.db_kpi:
        return
    for series in own_series(day, part, "stops", target.pods):
        series[sl] = 0.0
    for series in own_series(day, part, "uptime", target.pods):  # counted afresh from the restart
        series[sl] = 0.0
        series[sl.stop:] = np.arange(MINUTES - sl.stop) * 60.0
    watcher = watcher_of(day, part)
    if watcher:  # its regions lose a peer: pending while it is down, catching up after
        regions = own_series(day, watcher, "regions")[0]
        catch_up = slice(sl.stop, min(MINUTES, sl.stop + 10))
        for series in own_series(day, part, "pending", target.pods):
            series[sl] += regions[sl]
            series[catch_up] += np.linspace(30, 0, catch_up.stop - catch_up.start)
        for series in own_series(day, watcher, "watched_abnormal"):
            series[sl] += regions[sl]
        for series in own_series(day, watcher, "watched_down"):
            series[sl] = 1.0
        for series in own_series(day, watcher, "watched_up"):
            series[sl] = 0.0
    for series in callers_series(day, part, "tail_latency"):
        series[sl] *= 40
    for series in callers_series(day, part, "failures"):
        series[sl] += 30


def _failed_pods(day, pods: tuple[str, ...], sl: slice) -> None:
    """What Kubernetes shows of a pod whose container image is swapped for one that does nothing (Chaos Mesh's pod
    failure): the kubelet restarts the container for its changed definition, the pod is not ready while it idles,
    and it restarts again when the image is put back."""
    swapped = (("Normal", "Killing", "Container server definition changed, will be restarted"),
               ("Normal", "Started", "Started container server"))
    day.cluster.append(Change(sl.start, sl.stop, pods, restarted(1, "Completed", 0, ready=False), swapped))
    day.cluster.append(Change(sl.stop, MINUTES, pods, restarted(2, "Completed", 0), swapped))


@fault("pod kill", "pod fault", SERVICE,
       [{"type": "trace", "subtype": "request_proportion_anomalies", "keyword": ["{entry}"]},
        {"type": "metric", "keyword": ["request", "response"]},
        {"type": "metric", "keyword": ["pod_memory_working_set_bytes"]},
        {"type": "metric", "keyword": list(NET_KPIS)}],
       ["client_error", "client_error_ratio", "error", "error_ratio", "pod_processes", "request", "response"],
       ["pod killed", "forceful pod termination", "container killed", "pod eviction"], window_seconds=1)
def pod_kill(day, target, sl, rng):
    """The pod is deleted and its replacement started: the first minute calls in flight are cut and new ones
    refused (client errors), the next the new pod starts and gets no traffic; no process for those two minutes;
    clients wait out a reconnect back-off; the new container starts cold."""
    idx = indices(day, target.pods)
    cut_off(day, target.pods, slice(sl.start, sl.start + 1), "refused", (), 1.0, logged=("canceled", "refused"))
    day.unrouted[sl.start + 1:sl.start + 2, idx] = True
    down = slice(sl.start, sl.start + 2)
    # Until the pod is back, clients holding connections to it wait out a reconnect backoff before another
    # replica answers.
    service = day.topo.service_of[target.pods[0]]
    for caller in day.topo.system.callers(service):
        day.edge(caller, service)[0][down] += 800.0 / len(day.topo.pods_of(service)) * len(target.pods)
    for k in NET_KPIS:
        day.pod_kpi[k][down, idx] *= 0.05
    day.pod_kpi["pod_processes"][down, idx] = 0
    cold_start(day, target.pods, sl.start)
    # Kubernetes: the container killed and started again, not ready until it is (its restart counted from then)
    day.cluster.append(Change(down.start, down.stop, tuple(target.pods), restarted(1, "Error", 137, ready=False),
                              (("Normal", "Killing", "Stopping container server"),
                               ("Normal", "Started", "Started container server"))))
    day.cluster.append(Change(down.stop, MINUTES, tuple(target.pods), restarted(1, "Error", 137)))


@fault("memory leak", "stress test", SERVICE,
       [{"type": "metric", "keyword": ["pod_memory_working_set_bytes"]}, {"type": "metric", "keyword": ["rrt"]}],
       ["pod_memory_working_set_bytes"], ["memory leak", "growing memory usage", "cache leak"])
def memory_leak(day, target, sl, rng):
    """The service keeps what it should let go (a cache that never evicts): its memory grows all through the window,
    and the collector's pauses and work grow with it. A leak that has grown past the container's limit by the
    window's last minute is OOM-killed then (a stress is killed at its peak)."""
    idx = indices(day, target.pods)
    grown = np.linspace(0, 1, sl.stop - sl.start)[:, None]
    leaked = grown * ramp(sl, rng, 1.2e9, 1.6e9)
    day.pod_kpi["pod_memory_working_set_bytes"][sl, idx] += leaked
    day.pod_kpi["pod_cpu_usage"][sl, idx] += 0.3 * grown
    day.own_factor[sl, idx] *= 1 + 1.5 * grown
    if leaked[-1, 0] > LIMIT:  # it grew as far as the container's limit before the window ended
        oom_kill(day, target.pods, sl.stop - 1)
