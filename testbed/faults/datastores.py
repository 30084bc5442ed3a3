"""Faults of a datastore's own parts: a slow disk (TiDB's io fault, or any part with io metrics, by their roles)."""

from __future__ import annotations

import numpy as np
from .base import callers_series, fault, indices, own_series, ramp, watcher_of


@fault("io fault", "io fault", {"io"},
       [{"type": "metric", "keyword": ["io_util"]}, {"type": "metric", "keyword": ["raft_apply_wait", "raft_propose_wait"]},
        {"type": "metric", "keyword": ["region_pending"]},
        {"type": "metric", "keyword": ["duration_99th", "duration_95th"]}, {"type": "metric", "keyword": ["rrt", "rrt_max"]}],
       ["io_util", "raft_apply_wait", "region_pending", "memory_usage", "cpu_usage", "qps"],
       ["disk IO fault", "IO latency", "storage IO errors", "slow disk IO"], own_roles=("io", "wait", "pending", "stall"))
def io_fault(day, target, sl, rng):
    """A storage part's disk becomes slow: its IO is saturated and its writes and applies wait, so work backs up (a
    backlog that builds while the disk stays slow); the backlog is pending regions and write stalls, memory held
    by queued writes and requests, cpu spent on retries and compaction, and fewer requests served; the parts that
    call it (TiDB's SQL layer) wait on it, and so do the services that call them."""
    part = day.topo.service_of[target.pods[0]]
    backlog = ramp(sl, rng, 0.7, 1.0)[:, 0] * np.minimum(1.0, (np.arange(sl.stop - sl.start) + 1) / 4)
    saturated = ramp(sl, rng, 0.85, 0.99)[:, 0]
    for series in own_series(day, part, "io", target.pods):
        series[sl] = saturated
    for series in own_series(day, part, "wait", target.pods):
        series[sl] *= 1 + 50 * backlog
    watcher = watcher_of(day, part)
    for series in own_series(day, part, "pending", target.pods) if watcher else ():
        series[sl] += np.rint(own_series(day, watcher, "regions")[0][sl] * 0.6 * backlog)
    for role, change in (("stall", None), ("memory", 0.5), ("cpu", 1.5), ("throughput", -0.6)):
        for series in own_series(day, part, role, target.pods):
            if change is None:
                series[sl] += np.rint(5 * backlog)
            else:
                series[sl] *= 1 + change * backlog
    for role, change in (("latency", 25), ("slow", None), ("throughput", -0.4), ("memory", 0.3)):
        for series in callers_series(day, part, role):
            if change is None:
                series[sl] += np.rint(15 * backlog)
            else:
                series[sl] *= 1 + change * backlog
    day.own_extra_ms[sl, indices(day, target.pods)] += 90 * backlog[:, None]
