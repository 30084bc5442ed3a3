"""User traffic and the per-minute state of one simulated day.

A `Day` holds, for each minute of one CST day, the request rate, every metric's
baseline, and the effect fields that faults and noise change (latency factors,
error probabilities, unreachable pods, per-edge delays). Metrics, spans and logs are
all derived from the same `Day`, so a fault shows consistently in all three.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from functools import cache

import numpy as np

from .system import System
from .topology import Topology

MINUTES = 1440
CST = dt.timezone(dt.timedelta(hours=8))

# Share of requests that fail for no reason of a fault ("transport is closing").
BASE_ERR = 0.0005


@dataclass(frozen=True)
class Node:
    """One call in a flattened flow; index 0 is the entry's own server span."""

    parent: int
    service: str
    method: str
    traced: bool
    p: float = 1.0  # the share of the requests that reach its parent that make this call
    optional: bool = False  # its failure does not fail its caller
    deadline_ms: float | None = None  # its caller gives up after this long
    step: int = -1  # the step of its parent's operation that makes it
    mode: str = "call"  # call | publish (a message to a broker's topic) | consume (a consumer of that message, later)


@dataclass(frozen=True)
class Flow:
    """What one kind of request at the entry does: its operation, its share of the requests, its calls."""

    route: str
    share: float
    nodes: tuple[Node, ...]
    status: int = 200  # the HTTP status the entry answers it with


@cache
def flows(system: System) -> tuple[Flow, ...]:
    """Every operation of the entry's mix flattened into the calls it makes, depth first; a message published to a
    broker's topic is followed by each operation that consumes it (asynchronously: neither its time nor its failure
    reaches the publisher)."""
    out = []
    for route, share in system.mix.items():
        nodes = [Node(-1, system.entry, route, True)]

        def walk(parent: int, service: str, operation: str) -> None:
            for i, step in enumerate(system.components[service].operations[operation].steps):
                if not step.service:
                    continue
                for _ in range(step.times):
                    comp = system.components[step.service]
                    mode = "publish" if step.publish else "call"
                    nodes.append(Node(parent, step.service, step.operation, comp.traced, step.p, step.optional,
                                      step.deadline_ms, i, mode))
                    here = len(nodes) - 1
                    if step.publish:
                        for consumer, op in system.consumers(step.service, step.operation):
                            nodes.append(Node(here, consumer, op, True, optional=True, mode="consume"))
                            walk(len(nodes) - 1, consumer, op)
                    else:
                        walk(here, step.service, step.operation)

        walk(0, system.entry, route)
        out.append(Flow(route, share, tuple(nodes), system.components[system.entry].operations[route].status))
    return tuple(out)


def reach(flow: Flow) -> list[float]:
    """The share of the flow's requests that make each of its calls."""
    out: list[float] = []
    for node in flow.nodes:
        out.append(node.p * (out[node.parent] if node.parent >= 0 else 1.0))
    return out


@cache
def calls_per_request(system: System) -> dict[str, dict[str, tuple[float, float]]]:
    """Mean number of calls each service makes to each callee per request it serves, and of them the calls whose
    failure fails it (not optional)."""
    served: dict[str, float] = {}
    made: dict[str, dict[str, list[float]]] = {}
    for flow in flows(system):
        for node, share in zip(flow.nodes, reach(flow)):
            share *= flow.share
            served[node.service] = served.get(node.service, 0.0) + share
            if node.parent >= 0 and node.mode != "consume":  # a consumer is no call its publisher waits for
                counts = made.setdefault(flow.nodes[node.parent].service, {}).setdefault(node.service, [0.0, 0.0])
                counts[0] += share
                counts[1] += 0.0 if node.optional else share
    return {c: {d: (n / served[c], m / served[c]) for d, (n, m) in callees.items()} for c, callees in made.items()}


@cache
def operations_per_entry_request(system: System) -> dict[tuple[str, str], float]:
    """Mean number of times each (service, operation) serves a request per request at the entry."""
    out: dict[tuple[str, str], float] = {}
    for flow in flows(system):
        for node, share in zip(flow.nodes, reach(flow)):
            out[node.service, node.method] = out.get((node.service, node.method), 0.0) + share * flow.share
    return out


@cache
def requests_per_entry_request(system: System) -> dict[str, float]:
    out: dict[str, float] = {}
    for (service, _), n in operations_per_entry_request(system).items():
        out[service] = out.get(service, 0.0) + n
    return out


@cache
def requests_per_route(system: System) -> dict[str, dict[str, float]]:
    """Mean number of requests each service serves per request at the entry, of each of the entry's routes."""
    out: dict[str, dict[str, float]] = {}
    for flow in flows(system):
        per = out.setdefault(flow.route, {})
        for node, share in zip(flow.nodes, reach(flow)):
            per[node.service] = per.get(node.service, 0.0) + share * flow.share
    return out


# Infra metric baselines: KPI -> (mean, relative noise, how strongly it follows load).
POD_KPIS = {
    "pod_cpu_usage": (0.08, 0.15, 0.8),
    "pod_processes": (2.0, 0.0, 0.0),
    "pod_memory_working_set_bytes": (180e6, 0.02, 0.05),
    "pod_fs_reads_bytes": (2e4, 0.5, 0.3),
    "pod_fs_writes_bytes": (6e4, 0.4, 0.3),
    "pod_network_receive_bytes": (9e4, 0.12, 1.0),
    "pod_network_transmit_bytes": (1.1e5, 0.12, 1.0),
    "pod_network_receive_packets": (120.0, 0.12, 1.0),
    "pod_network_transmit_packets": (130.0, 0.12, 1.0),
}
NODE_KPIS = {
    "node_cpu_usage_rate": (22.0, 0.08, 0.5),
    "node_memory_usage_rate": (48.0, 0.01, 0.02),
    "node_memory_MemAvailable_bytes": (0.0, 0.0, 0.0),  # derived from the usage rate
    "node_memory_MemTotal_bytes": (32 * 2**30, 0.0, 0.0),
    "node_filesystem_usage_rate": (41.0, 0.002, 0.0),
    "node_filesystem_size_bytes": (200 * 2**30, 0.0, 0.0),
    "node_filesystem_free_bytes": (0.0, 0.0, 0.0),  # derived from the usage rate
    "node_disk_read_bytes_total": (3e5, 0.4, 0.3),
    "node_disk_read_time_seconds_total": (0.004, 0.4, 0.3),
    "node_disk_written_bytes_total": (2.5e6, 0.3, 0.4),
    "node_disk_write_time_seconds_total": (0.03, 0.3, 0.4),
    "node_network_receive_bytes_total": (1.5e6, 0.1, 1.0),
    "node_network_receive_packets_total": (1800.0, 0.1, 1.0),
    "node_network_transmit_bytes_total": (1.6e6, 0.1, 1.0),
    "node_network_transmit_packets_total": (1900.0, 0.1, 1.0),
    "node_sockstat_TCP_inuse": (180.0, 0.05, 0.5),
}
APM_COUNTS = ("request", "response", "error", "client_error", "server_error", "timeout")
APM_SERIES = (*APM_COUNTS, "rrt", "rrt_max", "error_ratio", "client_error_ratio", "server_error_ratio")


def series_names(system: System) -> set[str]:
    """The name of every metric a simulated dump of `system` writes (`metrics.py` writes them)."""
    return {*APM_SERIES, *POD_KPIS, "consumer_lag", *NODE_KPIS, *(k for c in system.components.values() for k in c.kpis)}


@dataclass(frozen=True)
class LogBurst:
    """Log lines a fault (or noise) adds: `per_minute` lines from each pod, drawn from `messages`."""

    pods: tuple[str, ...]
    start: int
    end: int
    messages: tuple[str, ...]
    per_minute: float
    severity: str = "error"


FAILING = ("exception", "fail")  # the kinds of `PathBreak` that fail the request they hit


@dataclass(frozen=True)
class PathBreak:
    """A fault in an operation's code: at its step `step`, for `share` of its requests per minute and pod (M, pods),
    it throws (`exception`: the rest of its steps do not run and its caller gets an error), a method it calls
    returns a wrong value (`return`: it takes the step's other branch and returns), or it fails before its first
    step (`fail`, step -1: a failure switch)."""

    kind: str
    step: int
    share: np.ndarray


@dataclass
class Day:
    """Everything that varies by minute over one CST day; faults edit it in place."""

    date: dt.date
    topo: Topology
    load: np.ndarray  # (M,) traffic relative to the daily mean
    pod_kpi: dict[str, np.ndarray]  # KPI -> (M, pods)
    node_kpi: dict[str, np.ndarray]  # KPI -> (M, nodes)
    db_kpi: dict[str, dict[str, np.ndarray]]  # component -> its own KPI -> (M, its replicas) (a datastore's metrics)
    own_factor: np.ndarray  # (M, pods) multiplies own processing time
    own_extra_ms: np.ndarray  # (M, pods) added to own processing time
    own_err: np.ndarray  # (M, pods) probability a request fails inside the pod
    unreachable: np.ndarray  # (M, pods) bool: connections to the pod fail
    unrouted: np.ndarray  # (M, pods) bool: the pod gets no traffic (restarting)
    traffic: np.ndarray  # (M, pods) share of its usual requests a pod gets (slow or lossy links: fewer)
    own_err_kind: dict[str, str] = field(default_factory=dict)  # pod -> error kind
    edge_ms: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)
    edge_err: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)
    edge_err_kind: dict[tuple[str, str], str | tuple[str, ...]] = field(default_factory=dict)
    unreachable_kind: dict[str, str] = field(default_factory=dict)  # pod -> error kind
    bursts: list[LogBurst] = field(default_factory=list)
    breaks: dict[tuple[str, str], list[PathBreak]] = field(default_factory=dict)  # (service, operation) -> code faults
    lag_ms: dict[str, np.ndarray] = field(default_factory=dict)  # consumer -> (M,) extra wait of its messages
    route_load: dict[str, np.ndarray] = field(default_factory=dict)  # entry route -> (M,) its load beyond the day's
    cluster: list = field(default_factory=list)  # what Kubernetes shows of a fault (`testbed.cluster.Change`)
    # The minutes its files hold (its state is drawn for the whole day either way).
    written: slice = field(default_factory=lambda: slice(0, MINUTES))

    @property
    def start_utc(self) -> dt.datetime:
        """UTC instant of this CST day's midnight."""
        return dt.datetime.combine(self.date, dt.time(), CST).astimezone(dt.timezone.utc)

    def minute_of(self, ts: dt.datetime) -> int:
        """Minute index of a UTC instant within this day, clipped to the day."""
        return int(np.clip((ts - self.start_utc).total_seconds() // 60, 0, MINUTES))

    def load_of(self, route: str) -> np.ndarray:
        """(M,) the load of one of the entry's routes, relative to the daily mean."""
        return self.load * self.route_load[route] if route in self.route_load else self.load

    def requests(self, service: str) -> np.ndarray:
        """(M,) the requests a service serves a minute, of every route that reaches it."""
        return self.topo.system.requests_per_minute * sum(
            (self.load_of(route) * per.get(service, 0.0) for route, per in requests_per_route(self.topo.system).items()),
            np.zeros(MINUTES))

    def edge(self, caller: str, callee: str) -> tuple[np.ndarray, np.ndarray]:
        key = (caller, callee)
        if key not in self.edge_ms:
            self.edge_ms[key] = np.zeros(MINUTES)
            self.edge_err[key] = np.zeros(MINUTES)
        return self.edge_ms[key], self.edge_err[key]


def _series(rng: np.random.Generator, shape, spec, load: np.ndarray, weight=1.0) -> np.ndarray:
    mean, noise, coupling = spec
    lvl = mean * np.asarray(weight) * (1 + coupling * (load[:, None] - 1))
    return np.maximum(lvl * (1 + noise * rng.standard_normal(shape)), 0.0)


def build_day(date: dt.date, topo: Topology, seed: int) -> Day:
    """The fault-free day: load curve, metric baselines, neutral effect fields."""
    rng = np.random.default_rng([seed, date.toordinal(), 2])
    hours = np.arange(MINUTES) / 60.0  # CST hour of day
    drift = np.cumsum(rng.standard_normal(MINUTES)) * 0.004
    load = 1 + 0.35 * np.sin(2 * np.pi * (hours - 9) / 24) + drift - drift.mean()
    pods = topo.pods
    shape_p = (MINUTES, len(pods))
    system = topo.system
    weight = np.array([topo.component(p).weight for p in pods])
    pod_kpi = {k: _series(rng, shape_p, spec, load, weight) for k, spec in POD_KPIS.items()}
    pod_kpi["pod_processes"] = np.rint(pod_kpi["pod_processes"])
    node_kpi = {k: _series(rng, (MINUTES, len(system.nodes)), spec, load) for k, spec in NODE_KPIS.items()}
    node_base = rng.uniform(0.8, 1.25, len(system.nodes))
    for k in ("node_memory_usage_rate", "node_filesystem_usage_rate", "node_cpu_usage_rate"):
        node_kpi[k] *= node_base
    derive_node_kpis(node_kpi)
    db_kpi = {name: {k: _series(rng, (MINUTES, len(topo.pods_of(name))), (kpi.mean, kpi.noise, kpi.coupling), load)
                     for k, kpi in comp.kpis.items()} for name, comp in system.components.items() if comp.kpis}
    for name, comp in system.components.items():
        for k, kpi in comp.kpis.items():
            if "uptime" in kpi.roles:  # seconds since the process started, a month ago
                db_kpi[name][k][:] = (86400.0 * 30 + np.arange(MINUTES) * 60.0)[:, None]
    zeros = np.zeros(shape_p)
    return Day(
        date=date,
        topo=topo,
        load=load,
        pod_kpi=pod_kpi,
        node_kpi=node_kpi,
        db_kpi=db_kpi,
        own_factor=np.ones(shape_p),
        own_extra_ms=zeros.copy(),
        own_err=zeros.copy(),
        unreachable=np.zeros(shape_p, bool),
        unrouted=np.zeros(shape_p, bool),
        traffic=np.ones(shape_p),
    )


def derive_node_kpis(node_kpi: dict[str, np.ndarray]) -> None:
    """Keep byte gauges consistent with the usage rates (call again after a fault edits a rate)."""
    total = node_kpi["node_memory_MemTotal_bytes"]
    node_kpi["node_memory_MemAvailable_bytes"] = total * (1 - node_kpi["node_memory_usage_rate"] / 100)
    size = node_kpi["node_filesystem_size_bytes"]
    node_kpi["node_filesystem_free_bytes"] = size * (1 - node_kpi["node_filesystem_usage_rate"] / 100)


def own_failures(day: Day) -> np.ndarray:
    """(M, pods) the share of each pod's requests that fail inside it: its own errors, and the requests a code fault
    fails, as the broken operation's share of the requests its service serves."""
    per_operation = operations_per_entry_request(day.topo.system)
    per_service = requests_per_entry_request(day.topo.system)
    err = BASE_ERR + day.own_err
    for (service, operation), breaks in day.breaks.items():
        weight = per_operation.get((service, operation), 0.0) / max(per_service.get(service, 0.0), 1e-12)
        for b in breaks:
            if b.kind in FAILING:
                err = err + weight * b.share
    return np.clip(err, 0, 1)


def expected_latency(day: Day) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean server time (ms), failure ratio and the time of the slowest operation (ms) per minute and pod, from the
    effect fields.

    Each service's time is its own processing plus the calls it makes (edge delay
    plus the callee's mean), so a slow callee shows in every caller above it; an operation's time is its own
    processing plus the time of the calls it makes, so a slow call shows in the slowest requests of every caller
    above it however rare it is among their requests.
    """
    topo = day.topo
    kids = calls_per_request(topo.system)
    own = np.array([topo.component(p).own_ms for p in topo.pods]) * 1.06  # lognormal mean
    pod_ms = own * day.own_factor + day.own_extra_ms
    pod_err = np.clip(own_failures(day) + day.unreachable, 0, 1)
    svc_ms: dict[str, np.ndarray] = {}
    svc_err: dict[str, np.ndarray] = {}
    for service in _callee_first(kids, topo.system.components):
        idx = [topo.index(p) for p in topo.pods_of(service)]
        extra_ms = np.zeros(MINUTES)
        extra_err = np.zeros(MINUTES)
        for callee, (n, required) in kids.get(service, {}).items():
            e_ms = day.edge_ms.get((service, callee), 0.0)
            e_err = day.edge_err.get((service, callee), 0.0)
            extra_ms += n * (0.3 + e_ms + svc_ms[callee])
            if required:
                extra_err += required * (e_err + svc_err[callee])
        pod_ms[:, idx] += extra_ms[:, None]
        pod_err[:, idx] = np.clip(pod_err[:, idx] + extra_err[:, None], 0, 1)
        weights = routed_weights(day, idx)
        svc_ms[service] = (pod_ms[:, idx] * weights).sum(1)
        svc_err[service] = (pod_err[:, idx] * weights).sum(1)
    return pod_ms, pod_err, _slowest(day, own * day.own_factor + day.own_extra_ms)


def _slowest(day: Day, own_ms: np.ndarray) -> np.ndarray:
    """The time (ms) of each pod's slowest operation, per minute: its own processing plus its calls, each the
    link's delay and the mean over the callee's routed pods of the operation it asks for."""
    topo = day.topo
    children: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for flow in flows(topo.system):
        for k, node in enumerate(flow.nodes):
            children.setdefault((node.service, node.method),
                                [(n.service, n.method) for n in flow.nodes if n.parent == k and n.mode != "consume"])
    op_ms: dict[tuple[str, str], np.ndarray] = {}  # per minute and pod of the operation's service

    def time_of(op: tuple[str, str]) -> np.ndarray:
        if op not in op_ms:
            service = op[0]
            idx = [topo.index(p) for p in topo.pods_of(service)]
            total = own_ms[:, idx].copy()
            for callee in children[op]:
                weights = routed_weights(day, [topo.index(p) for p in topo.pods_of(callee[0])])
                e_ms = day.edge_ms.get((service, callee[0]), 0.0)
                total += (0.3 + e_ms + (time_of(callee) * weights).sum(1))[:, None]
            op_ms[op] = total
        return op_ms[op]

    slowest = np.zeros_like(own_ms)
    for op in children:
        idx = [topo.index(p) for p in topo.pods_of(op[0])]
        slowest[:, idx] = np.maximum(slowest[:, idx], time_of(op))
    return slowest


def routed_weights(day: Day, idx: list[int]) -> np.ndarray:
    """Each minute, the share of a service's calls each of its pods (`idx`) gets: its routed pods alike, or all
    of them where none is routed."""
    routed = ~day.unrouted[:, idx]
    weights = np.where(routed.any(1, keepdims=True), routed, True).astype(float)
    return weights / weights.sum(1, keepdims=True)


def _callee_first(kids: dict[str, dict], components) -> list[str]:
    order: list[str] = []

    def visit(s: str) -> None:
        if s in order:
            return
        for c in kids.get(s, {}):
            visit(c)
        order.append(s)

    for s in components:
        visit(s)
    return order

