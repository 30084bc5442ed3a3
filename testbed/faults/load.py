"""Faults of load and queues: a flood of requests, a producer that floods its topic, a consumer that stalls, a broker
that backs up."""

from __future__ import annotations

import numpy as np

from ..system import System
from ..workload import MINUTES, Day, requests_per_route
from .base import fault, indices, own_series, ramp, SERVICE


@fault("flood", "traffic surge", SERVICE,
       [{"type": "metric", "keyword": ["request", "response"]}, {"type": "metric", "keyword": ["pod_cpu_usage"]}],
       ["request", "response", "pod_cpu_usage"], ["request flood", "traffic surge", "load spike"], spread=True)
def flood(day, target, sl, rng):
    """Users flood the service with requests (three to four times its load, by the entry's routes that reach it, and
    the services on those routes take them too): its pods, among which its Service spreads them, saturate their cpu
    and work slower."""
    surge = ramp(sl, rng, 2.5, 4.0)
    service = day.topo.service_of[target.pods[0]]
    for route, served in requests_per_route(day.topo.system).items():
        if served.get(service):
            day.route_load.setdefault(route, np.ones(MINUTES))[sl] *= surge[:, 0]
    idx = indices(day, target.pods)
    day.pod_kpi["pod_cpu_usage"][sl, idx] *= surge
    day.own_factor[sl, idx] *= 1 + 0.3 * surge


def _consumers(system: System, broker: str) -> list[str]:
    return sorted({c for topic in system.components[broker].topics for c, _ in system.consumers(broker, topic)})


def _published(system: System, producer: str) -> list[tuple[str, str]]:
    """The (broker, topic) a service publishes to."""
    return sorted({(s.service, s.operation) for op in system.components[producer].operations.values()
                   for s in op.steps if s.publish})


def _lag(day: Day, consumers: list[str], sl: slice, wait_ms: np.ndarray) -> None:
    for consumer in consumers:
        day.lag_ms.setdefault(consumer, np.zeros(MINUTES))[sl] += wait_ms


def _broker_swells(day: Day, broker: str, sl: slice, backlog: np.ndarray, messages: float) -> None:
    """A broker whose queues back up: its messages waiting (role `lag`) swell with the backlog, and those it takes
    in (role `messages`) by `messages` times. A broker that declares no series of its waiting messages still holds
    them, in its process: its pods' memory and disk writes swell instead."""
    waiting = own_series(day, broker, "lag")
    for series in waiting:
        series[sl] *= 1 + 100 * backlog
    for series in own_series(day, broker, "messages"):
        series[sl] *= 1 + messages * backlog
    if not waiting:
        idx = indices(day, day.topo.pods_of(broker))
        for kpi in ("pod_memory_working_set_bytes", "pod_fs_writes_bytes"):
            day.pod_kpi[kpi][sl, idx] *= 1 + backlog[:, None]


@fault("consumer stall", "performance", {"consumer"},
       [{"type": "metric", "keyword": ["consumer_lag"]}], ["consumer_lag"],
       ["consumer lag", "stalled consumer", "message backlog"])
def consumer_stall(day, target, sl, rng):
    """A consumer takes its messages late (a stuck poll loop): its messages wait half a minute or more in their
    topic, nothing fails; its work comes in bursts."""
    service = day.topo.service_of[target.pods[0]]
    _lag(day, [service], sl, ramp(sl, rng, 20_000, 60_000)[:, 0])
    day.pod_kpi["pod_cpu_usage"][sl, indices(day, target.pods)] *= 0.5


@fault("producer flood", "traffic surge", {"producer"},
       [{"type": "metric", "keyword": ["consumer_lag"]},
        {"type": "metric", "keyword": ["pod_network_transmit_bytes", "pod_network_transmit_packets"]}],
       ["pod_network_transmit_bytes", "pod_cpu_usage"], ["message flood", "producer overload", "topic flood"])
def producer_flood(day, target, sl, rng):
    """A producer floods its topics (a hundred messages where it sent one): its cpu and sent bytes swell, the broker
    takes in many more messages, and every consumer of them falls behind (their lag grows, nothing fails)."""
    service = day.topo.service_of[target.pods[0]]
    backlog = ramp(sl, rng, 0.7, 1.0)
    idx = indices(day, target.pods)
    day.pod_kpi["pod_cpu_usage"][sl, idx] += 0.6 * backlog
    for k in ("pod_network_transmit_bytes", "pod_network_transmit_packets"):
        day.pod_kpi[k][sl, idx] *= 1 + 4 * backlog
    for broker, topic in _published(day.topo.system, service):
        _broker_swells(day, broker, sl, backlog[:, 0], 5)
        _lag(day, [c for c, _ in day.topo.system.consumers(broker, topic)], sl, 30_000 * backlog[:, 0])


@fault("queue overload", "performance", {"broker"},
       [{"type": "metric", "keyword": ["consumer_lag"]}], ["consumer_lag"],
       ["queue overload", "broker backlog", "consumer lag spike"])
def queue_overload(day, target, sl, rng):
    """The broker's queues back up (overloaded, its consumers slowed): every consumer's messages wait long in their
    topics and the broker's own backlog swells."""
    broker = day.topo.service_of[target.pods[0]]
    backlog = ramp(sl, rng, 0.7, 1.0)[:, 0]
    _broker_swells(day, broker, sl, backlog, 2)
    _lag(day, _consumers(day.topo.system, broker), sl, 40_000 * backlog)
    for series in own_series(day, broker, "memory"):
        series[sl] *= 1 + 0.5 * backlog
