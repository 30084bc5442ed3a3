"""User traffic and the per-minute state of one simulated day.

A `Day` holds, for each minute of one CST day, the request rate, every metric's
baseline, and the effect fields that faults and noise change (latency factors,
error probabilities, unreachable pods, per-edge delays). Metrics, spans and logs are
all derived from the same `Day`, so a fault shows consistently in all three.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

import numpy as np

from .topology import NODES, OWN_MS, SERVICES, STORES, Topology

MINUTES = 1440
CST = dt.timezone(dt.timedelta(hours=8))

# Full-volume frontend requests per minute (APM metrics); traces and logs are a
# `scale`-sized sample of it. At scale 1.0 one day is a few million spans.
FRONTEND_RPM = 3000.0
TRACES_PER_MIN_AT_SCALE_1 = 150.0
# Share of requests that fail for no reason of a fault ("transport is closing").
BASE_ERR = 0.0005

# User flows at the frontend: (http route, share of requests, calls). A call is
# (service, method, calls made while serving it). Stores are called but not traced.
_CART = ("cartservice", "GetCart", (("redis-cart", "HGET", ()),))
_PRODUCT = ("productcatalogservice", "GetProduct", (("tidb-tidb", "SELECT", ()),))
_LIST = ("productcatalogservice", "ListProducts", (("tidb-tidb", "SELECT", ()),))
_RECS = ("recommendationservice", "ListRecommendations", (_LIST,))
_CURRENCIES = ("currencyservice", "GetSupportedCurrencies", ())
_CONVERT = ("currencyservice", "Convert", ())
_ADS = ("adservice", "GetAds", ())
_QUOTE = ("shippingservice", "GetQuote", ())
FLOWS = (
    ("GET /", 0.30, (_CURRENCIES, _LIST, _CART, _CONVERT, _ADS)),
    ("GET /product", 0.35, (_PRODUCT, _CURRENCIES, _CART, _CONVERT, _RECS, _ADS)),
    ("GET /cart", 0.15, (_CURRENCIES, _CART, _RECS, _QUOTE, _CONVERT, _PRODUCT)),
    ("POST /cart", 0.12, (_PRODUCT, ("cartservice", "AddItem", (("redis-cart", "HSET", ()),)))),
    (
        "POST /cart/checkout",
        0.08,
        (
            (
                "checkoutservice",
                "PlaceOrder",
                (
                    _CART,
                    _PRODUCT,
                    _CONVERT,
                    _QUOTE,
                    ("paymentservice", "Charge", ()),
                    ("shippingservice", "ShipOrder", ()),
                    ("emailservice", "SendOrderConfirmation", ()),
                    ("cartservice", "EmptyCart", (("redis-cart", "DEL", ()),)),
                ),
            ),
            _RECS,
            _CURRENCIES,
        ),
    ),
)
# Failures of these calls are logged by the caller but do not fail its own request.
OPTIONAL_CALLS = {("frontend", "adservice"), ("frontend", "recommendationservice")}
# TiDB serves productcatalog through tidb-tidb, which needs tikv for data and pd for timestamps.
_TIDB_CHILDREN = (("tidb-pd", "TSO", ()), ("tidb-tikv", "Get", ()))


@dataclass(frozen=True)
class Node:
    """One call in a flattened flow; index 0 is the frontend's own server span."""

    parent: int
    service: str
    method: str
    traced: bool


def flatten(route: str, calls: tuple) -> list[Node]:
    nodes = [Node(-1, "frontend", route, True)]

    def walk(parent: int, calls: tuple) -> None:
        for service, method, children in calls:
            nodes.append(Node(parent, service, method, service not in STORES))
            here = len(nodes) - 1
            walk(here, _TIDB_CHILDREN if service == "tidb-tidb" else children)

    walk(0, calls)
    return nodes


FLAT_FLOWS = tuple((route, share, flatten(route, calls)) for route, share, calls in FLOWS)


def calls_per_request() -> dict[str, dict[str, float]]:
    """Mean number of calls each service makes to each callee per request it serves."""
    served: dict[str, float] = {}
    made: dict[str, dict[str, float]] = {}
    for _, share, nodes in FLAT_FLOWS:
        for node in nodes:
            served[node.service] = served.get(node.service, 0.0) + share
            if node.parent >= 0:
                caller = nodes[node.parent].service
                made.setdefault(caller, {})
                made[caller][node.service] = made[caller].get(node.service, 0.0) + share
    return {c: {d: n / served[c] for d, n in callees.items()} for c, callees in made.items()}


def requests_per_frontend_request() -> dict[str, float]:
    out: dict[str, float] = {}
    for _, share, nodes in FLAT_FLOWS:
        for node in nodes:
            out[node.service] = out.get(node.service, 0.0) + share
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
TIDB_KPIS = {
    "tidb": {
        "connection_count": (24.0, 0.05, 0.3),
        "failed_query_ops": (0.0, 0.0, 0.0),
        "duration_99th": (0.012, 0.1, 0.3),
        "duration_95th": (0.006, 0.1, 0.3),
        "duration_avg": (0.002, 0.1, 0.3),
        "qps": (95.0, 0.08, 1.0),
        "slow_query": (0.0, 0.0, 0.0),
        "block_cache_size": (1.6e8, 0.01, 0.0),
        "uptime": (0.0, 0.0, 0.0),  # seconds since start, derived
        "cpu_usage": (0.25, 0.1, 0.8),
        "memory_usage": (6.5e8, 0.02, 0.1),
        "statement_avg_queries": (48.0, 0.08, 1.0),
        "transaction_retry": (0.0, 0.0, 0.0),
        "ddl_job_count": (0.0, 0.0, 0.0),
        "top_sql_cpu": (0.05, 0.2, 0.8),
        "server_is_up": (1.0, 0.0, 0.0),
    },
    "pd": {
        "storage_capacity": (1.0e11, 0.0, 0.0),
        "storage_size": (2.1e9, 0.0, 0.0),
        "storage_used_ratio": (0.021, 0.0, 0.0),
        "store_up_count": (1.0, 0.0, 0.0),
        "store_down_count": (0.0, 0.0, 0.0),
        "store_unhealth_count": (0.0, 0.0, 0.0),
        "store_low_space_count": (0.0, 0.0, 0.0),
        "store_slow_count": (0.0, 0.0, 0.0),
        "abnormal_region_count": (0.0, 0.0, 0.0),
        "region_health": (0.0, 0.0, 0.0),
        "leader_primary": (1.0, 0.0, 0.0),
        "region_count": (63.0, 0.0, 0.0),
        "leader_count": (63.0, 0.0, 0.0),
        "learner_count": (0.0, 0.0, 0.0),
        "witness_count": (0.0, 0.0, 0.0),
        "cpu_usage": (0.04, 0.15, 0.5),
        "memory_usage": (1.8e8, 0.02, 0.0),
    },
    "tikv": {
        "store_size": (2.1e9, 0.0, 0.0),
        "available_size": (8.7e10, 0.0, 0.0),
        "capacity_size": (1.0e11, 0.0, 0.0),
        "cpu_usage": (0.3, 0.1, 0.8),
        "memory_usage": (1.4e9, 0.02, 0.1),
        "io_util": (0.04, 0.2, 0.5),
        "write_wal_mbps": (0.4, 0.2, 0.6),
        "read_mbps": (0.8, 0.2, 0.8),
        "qps": (150.0, 0.08, 1.0),
        "grpc_qps": (160.0, 0.08, 1.0),
        "threadpool_readpool_cpu": (0.05, 0.15, 0.8),
        "raft_propose_wait": (0.0008, 0.15, 0.3),
        "raft_apply_wait": (0.0006, 0.15, 0.3),
        "region_pending": (0.0, 0.0, 0.0),
        "rocksdb_write_stall": (0.0, 0.0, 0.0),
        "snapshot_apply_count": (0.0, 0.0, 0.0),
        "server_is_up": (1.0, 0.0, 0.0),
    },
}
# Per-service scale of pod baselines (JVM and Python services are heavier).
SERVICE_WEIGHT = {
    "adservice": 2.5,
    "recommendationservice": 1.6,
    "emailservice": 1.3,
    "frontend": 1.8,
    "redis-cart": 0.6,
    "tidb-tidb": 3.0,
    "tidb-tikv": 4.0,
    "tidb-pd": 1.2,
}


@dataclass(frozen=True)
class LogBurst:
    """Log lines a fault (or noise) adds: `per_minute` lines from each pod, drawn from `messages`."""

    pods: tuple[str, ...]
    start: int
    end: int
    messages: tuple[str, ...]
    per_minute: float
    severity: str = "error"


@dataclass
class Day:
    """Everything that varies by minute over one CST day; faults edit it in place."""

    date: dt.date
    topo: Topology
    load: np.ndarray  # (M,) traffic relative to the daily mean
    pod_kpi: dict[str, np.ndarray]  # KPI -> (M, pods)
    node_kpi: dict[str, np.ndarray]  # KPI -> (M, nodes)
    db_kpi: dict[str, dict[str, np.ndarray]]  # tidb|tikv|pd -> KPI -> (M,)
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

    @property
    def start_utc(self) -> dt.datetime:
        """UTC instant of this CST day's midnight."""
        return dt.datetime.combine(self.date, dt.time(), CST).astimezone(dt.timezone.utc)

    def minute_of(self, ts: dt.datetime) -> int:
        """Minute index of a UTC instant within this day, clipped to the day."""
        return int(np.clip((ts - self.start_utc).total_seconds() // 60, 0, MINUTES))

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
    weight = np.array([SERVICE_WEIGHT.get(topo.service_of[p], 1.0) for p in pods])
    pod_kpi = {k: _series(rng, shape_p, spec, load, weight) for k, spec in POD_KPIS.items()}
    pod_kpi["pod_processes"] = np.rint(pod_kpi["pod_processes"])
    node_kpi = {k: _series(rng, (MINUTES, len(NODES)), spec, load) for k, spec in NODE_KPIS.items()}
    node_base = rng.uniform(0.8, 1.25, len(NODES))
    for k in ("node_memory_usage_rate", "node_filesystem_usage_rate", "node_cpu_usage_rate"):
        node_kpi[k] *= node_base
    derive_node_kpis(node_kpi)
    db_kpi = {
        part: {k: _series(rng, (MINUTES, 1), spec, load)[:, 0] for k, spec in kpis.items()}
        for part, kpis in TIDB_KPIS.items()
    }
    db_kpi["tidb"]["uptime"] = 86400.0 * 30 + np.arange(MINUTES) * 60.0
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


def expected_latency(day: Day) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean server time (ms), failure ratio and the time of the slowest operation (ms) per minute and pod, from the
    effect fields.

    Each service's time is its own processing plus the calls it makes (edge delay
    plus the callee's mean), so a slow callee shows in every caller above it; an operation's time is its own
    processing plus the time of the calls it makes, so a slow call shows in the slowest requests of every caller
    above it however rare it is among their requests.
    """
    topo = day.topo
    kids = calls_per_request()
    own = np.array([OWN_MS[topo.service_of[p]] for p in topo.pods]) * 1.06  # lognormal mean
    pod_ms = own * day.own_factor + day.own_extra_ms
    pod_err = np.clip(BASE_ERR + day.own_err + day.unreachable, 0, 1)
    svc_ms: dict[str, np.ndarray] = {}
    svc_err: dict[str, np.ndarray] = {}
    for service in _callee_first(kids):
        idx = [topo.index(p) for p in topo.pods_of(service)]
        extra_ms = np.zeros(MINUTES)
        extra_err = np.zeros(MINUTES)
        for callee, n in kids.get(service, {}).items():
            e_ms = day.edge_ms.get((service, callee), 0.0)
            e_err = day.edge_err.get((service, callee), 0.0)
            extra_ms += n * (0.3 + e_ms + svc_ms[callee])
            if (service, callee) not in OPTIONAL_CALLS:
                extra_err += n * (e_err + svc_err[callee])
        pod_ms[:, idx] += extra_ms[:, None]
        pod_err[:, idx] = np.clip(pod_err[:, idx] + extra_err[:, None], 0, 1)
        routed = ~day.unrouted[:, idx]
        weights = np.where(routed.any(1, keepdims=True), routed, True).astype(float)
        weights /= weights.sum(1, keepdims=True)
        svc_ms[service] = (pod_ms[:, idx] * weights).sum(1)
        svc_err[service] = (pod_err[:, idx] * weights).sum(1)
    return pod_ms, pod_err, _slowest(day, own * day.own_factor + day.own_extra_ms)


def _slowest(day: Day, own_ms: np.ndarray) -> np.ndarray:
    """The time (ms) of each pod's slowest operation, per minute: its own processing plus its calls, each the
    link's delay and the mean over the callee's routed pods of the operation it asks for."""
    topo = day.topo
    children: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for _, _, nodes in FLAT_FLOWS:
        for k, node in enumerate(nodes):
            children.setdefault((node.service, node.method),
                                [(n.service, n.method) for n in nodes if n.parent == k])
    op_ms: dict[tuple[str, str], np.ndarray] = {}  # per minute and pod of the operation's service

    def time_of(op: tuple[str, str]) -> np.ndarray:
        if op not in op_ms:
            service = op[0]
            idx = [topo.index(p) for p in topo.pods_of(service)]
            total = own_ms[:, idx].copy()
            for callee in children[op]:
                routed = ~day.unrouted[:, [topo.index(p) for p in topo.pods_of(callee[0])]]
                weights = np.where(routed.any(1, keepdims=True), routed, True).astype(float)
                weights /= weights.sum(1, keepdims=True)
                e_ms = day.edge_ms.get((service, callee[0]), 0.0)
                total += (0.3 + e_ms + (time_of(callee) * weights).sum(1))[:, None]
            op_ms[op] = total
        return op_ms[op]

    slowest = np.zeros_like(own_ms)
    for op in children:
        idx = [topo.index(p) for p in topo.pods_of(op[0])]
        slowest[:, idx] = np.maximum(slowest[:, idx], time_of(op))
    return slowest


def _callee_first(kids: dict[str, dict[str, float]]) -> list[str]:
    order: list[str] = []

    def visit(s: str) -> None:
        if s in order:
            return
        for c in kids.get(s, {}):
            visit(c)
        order.append(s)

    for s in SERVICES + tuple(STORES):
        visit(s)
    return order

