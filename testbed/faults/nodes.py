"""Faults of a node: its CPU or memory stressed, its disk filled."""

from __future__ import annotations

import numpy as np

from ..workload import Day, derive_node_kpis
from .base import fault, indices, ramp, Target


def _node(day: Day, target: Target) -> int:
    return day.topo.system.nodes.index(target.node)


@fault("node cpu stress", "node fault", {"node"}, [{"type": "metric", "keyword": ["node_cpu_usage_rate"]}],
       ["node_cpu_usage_rate"],
       ["node CPU overload", "node high CPU usage", "node CPU saturation", "node CPU spike", "node cpu stress"])
def node_cpu_stress(day, target, sl, rng):
    """Stress processes on the node burn its cpu; every pod on it gets less cpu and works slower."""
    n = _node(day, target)
    day.node_kpi["node_cpu_usage_rate"][sl, n] = np.minimum(99.0, 80 + ramp(sl, rng, 8, 18)[:, 0])
    day.own_factor[sl, indices(day, target.pods)] *= 1.4


@fault("node memory stress", "node fault", {"node"},
       [{"type": "metric", "keyword": ["node_memory_usage_rate", "node_memory_MemAvailable_bytes"]}],
       ["node_memory_usage_rate"],
       ["node memory exhaustion", "node memory saturation", "node high memory usage", "node memory leak"])
def node_memory_stress(day, target, sl, rng):
    """A process on the node takes most of its free memory (usage up, available bytes down); the page cache
    gives way, so files are read from disk again."""
    n = _node(day, target)
    rate = day.node_kpi["node_memory_usage_rate"]
    rate[sl, n] = np.minimum(97.0, rate[sl, n] + ramp(sl, rng, 35, 42)[:, 0])
    derive_node_kpis(day.node_kpi)
    # The page cache gives way: files the node's pods use are read from disk again.
    for k in ("node_disk_read_bytes_total", "node_disk_read_time_seconds_total"):
        day.node_kpi[k][sl, n] *= ramp(sl, rng, 3, 6)[:, 0]


@fault("node disk fill", "node fault", {"node"}, [{"type": "metric", "keyword": ["node_filesystem_usage_rate"]}],
       ["node_filesystem_usage_rate"],
       ["node disk full", "high disk utilization", "disk space exhaustion", "disk saturation"])
def node_disk_fill(day, target, sl, rng):
    """A process fills the node's file system within minutes, writing fast while it does."""
    n = _node(day, target)
    rate = day.node_kpi["node_filesystem_usage_rate"]
    fill = np.minimum(1.0, (np.arange(sl.stop - sl.start) + 1) / 3.0)
    rate[sl, n] = rate[sl, n] + (96.0 - rate[sl, n]) * fill
    day.node_kpi["node_disk_written_bytes_total"][sl.start:sl.start + 3, n] *= 60
    derive_node_kpis(day.node_kpi)
