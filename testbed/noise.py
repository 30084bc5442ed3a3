"""Unrelated trouble that real days have, so that the root cause is not simply the loudest series."""

from __future__ import annotations

import numpy as np

from .workload import MINUTES, Day, LogBurst


def add_noise(day: Day, rng: np.random.Generator) -> None:
    """A busy node, short pod CPU spikes, a slow dependency and stray warnings, placed at random."""
    topo = day.topo
    system = topo.system

    def window(lo: int, hi: int) -> slice:
        length = int(rng.integers(lo, hi))
        start = int(rng.integers(0, MINUTES - length))
        return slice(start, start + length)

    for _ in range(3):  # a batch job keeps a node busy
        sl, node = window(20, 45), system.nodes.index(str(rng.choice(system.workers)))
        day.node_kpi["node_cpu_usage_rate"][sl, node] += rng.uniform(15, 30)
    for _ in range(6):  # a pod's CPU spikes for a few minutes
        sl, pod = window(2, 6), int(rng.integers(len(topo.pods)))
        day.pod_kpi["pod_cpu_usage"][sl, pod] *= rng.uniform(2, 4)
    for _ in range(3):  # a dependency is slow for a while
        sl, service = window(4, 10), str(rng.choice(system.services))
        day.own_factor[sl, [topo.index(p) for p in topo.pods_of(service)]] *= rng.uniform(1.3, 1.8)
    for _ in range(4):  # stray warnings
        sl, pod = window(3, 8), str(rng.choice(topo.pods))
        day.bursts.append(LogBurst((pod,), sl.start, sl.stop,
                                   ("slow request detected, took longer than 500ms",
                                    "retrying request after transient error"), 2.0, "warning"))
