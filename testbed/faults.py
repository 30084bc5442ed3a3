"""The fault library: one entry per fault type of the 2025 challenge.

Each entry knows which components it can hit, how it changes a `Day` (metrics,
latency, errors, log lines) and what the ground truth says of it (`key_observations`,
`key_metrics`, `fault_description`, taken from the real phase-one ground truth where the
type occurs there). Callers and dependants feel the effects through `workload`, so
propagation is not written per fault.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from rcalab.errors import ScheduleError

from .topology import CALLS, GRPC, NODES, SERVICES, STORES, TIDB_PARTS, WORKERS, Topology
from .workload import Day, LogBurst, derive_node_kpis

# gRPC failures: kind -> (status name, status code, description). `{ip}`/`{port}` are the callee's.
ERRORS = {
    "refused": ("Unavailable", 14,
                'connection error: desc = "transport: Error while dialing: dial tcp {ip}:{port}: connect: connection refused"'),
    "dial": ("Unavailable", 14, 'connection error: desc = "transport: Error while dialing: dial tcp {ip}:{port}: i/o timeout"'),
    "reset": ("Unavailable", 14,
              "upstream connect error or disconnect/reset before headers. reset reason: connection failure"),
    "canceled": ("Canceled", 1, "context canceled"),
    "deadline": ("DeadlineExceeded", 4, "context deadline exceeded"),
    "dns": ("Unavailable", 14,
            'name resolver error: produced zero addresses; dial tcp: lookup {service} on 169.254.25.10:53: no such host'),
    "exception": ("Unknown", 2, "java.lang.reflect.InvocationTargetException: Caught ThrowException: injected error"),
    "internal": ("Internal", 13, "code error: panic: runtime error: invalid memory address or nil pointer dereference"),
    "storage": ("FailedPrecondition", 9,
                "Can't access cart storage. StackExchange.Redis.RedisTimeoutException: Timeout performing HGET"),
    "db": ("Unavailable", 14, "Error 9005: Region is unavailable; dial tcp {ip}:4000: connect: connection refused"),
}
TRANSIENT = ("Unavailable", 14, "transport is closing")


def status_text(kind: str, topo: Topology, pod: str) -> tuple[str, int, str]:
    """gRPC status name, code and message of a failed call to `pod`."""
    name, code, desc = TRANSIENT if kind == "transient" else ERRORS[kind]
    service = topo.service_of[pod]
    port = GRPC.get(service, ("", 6379 if service == "redis-cart" else 4000))[1]
    return name, code, desc.format(ip=topo.ip_of[pod], port=port, service=service)


@dataclass(frozen=True)
class Target:
    """What a fault hits: a service (all its pods), one pod, a node, or a caller -> callee link."""

    level: str  # service | pod | node
    pods: tuple[str, ...] = ()
    node: str = ""
    edge: tuple[str, str] | None = None

    def truth(self, topo: Topology) -> dict:
        """The ground-truth fields `instance_type, service, instance, source, destination`."""
        if self.edge:
            src, dst = self.edge
            instance = [src, dst] + ([STORES[dst]] if dst in STORES else [])
            return dict(instance_type="service", service="", instance=instance, source=src, destination=dst)
        if self.level == "node":
            return dict(instance_type="node", service="", instance=self.node, source="", destination="")
        service = topo.service_of[self.pods[0]]
        if service in TIDB_PARTS:
            instance = [self.pods[0], service]
        elif self.level == "pod":
            instance = [self.pods[0]]
        else:
            instance = service
        return dict(instance_type=self.level, service=service, instance=instance, source="", destination="")


@dataclass(frozen=True)
class Fault:
    name: str
    category: str
    targets: str  # pods | jvm | edge | node | tikv | tidb-pods
    apply: Callable[[Day, Target, slice, np.random.Generator], None]
    key_observations: list = field(default_factory=list)
    key_metrics: list = field(default_factory=list)
    fault_description: list = field(default_factory=list)
    window_seconds: int | None = None  # a window of fixed length, as the real ground truth gives it (pod kill: 1 s)

    def candidates(self, topo: Topology) -> list[Target]:
        """Every target this fault type can hit in the topology."""
        if self.targets == "node":
            return [Target("node", tuple(topo.pods_on(n)), node=n) for n in WORKERS]
        if self.targets == "edge":
            return [Target("service", edge=(c, d)) for c, ds in CALLS.items() for d in ds
                    if c in SERVICES and (d in SERVICES or d == "redis-cart")]
        if self.targets == "tikv":
            return [Target("service", ("tidb-tikv-0",))]
        services = ("adservice",) if self.targets == "jvm" else SERVICES
        out = [Target("service", tuple(topo.pods_of(s))) for s in services]
        out += [Target("pod", (p,)) for s in services for p in topo.pods_of(s)]
        if self.targets == "tidb-pods":
            out += [Target("service", (STORES[s],)) for s in TIDB_PARTS]
        return out

    def resolve(self, topo: Topology, instance) -> Target:
        """The target a ground-truth `instance` names; ScheduleError if this fault cannot hit it."""
        names = [instance] if isinstance(instance, str) else list(instance)
        for target in self.candidates(topo):
            if target.edge:
                hit = names[:2] == list(target.edge)
            elif target.level == "node":
                hit = names == [target.node]
            elif target.level == "pod":
                hit = names == [target.pods[0]]
            else:
                service = topo.service_of[target.pods[0]]
                hit = names == [service] or (service in TIDB_PARTS and bool({service, target.pods[0]} & set(names)))
            if hit:
                return target
        raise ScheduleError(f"fault type '{self.name}' cannot hit instance {instance!r}")


FAULTS: dict[str, Fault] = {}


def fault(name, category, targets, observations, metrics, descriptions, window_seconds=None):
    def register(apply):
        FAULTS[name] = Fault(name, category, targets, apply, observations, metrics, descriptions, window_seconds)
        return apply
    return register


def _idx(day: Day, pods) -> list[int]:
    return [day.topo.index(p) for p in pods]


def _ramp(sl: slice, rng: np.random.Generator, lo: float, hi: float) -> np.ndarray:
    """A fault's strength over its window: it builds up in a minute or two, then holds with jitter."""
    n = sl.stop - sl.start
    up = np.minimum(1.0, (np.arange(n) + 1) / 2.0)
    return (up * rng.uniform(lo, hi, n))[:, None]


def _fail(day: Day, pods, sl: slice, p, kind: str) -> None:
    idx = _idx(day, pods)
    day.own_err[sl, idx] = np.maximum(day.own_err[sl, idx], p)
    day.own_err_kind.update({pod: kind for pod in pods})


def _cut_off(day: Day, pods, sl: slice, kind: str, kpis, factor: float) -> None:
    """Connections to `pods` fail with `kind` during `sl`; their `kpis` drop to `factor` of normal."""
    idx = _idx(day, pods)
    day.unreachable[sl, idx] = True
    day.unreachable_kind.update({pod: kind for pod in pods})
    for k in kpis:
        day.pod_kpi[k][sl, idx] *= factor


def _burst(day: Day, pods, sl: slice, messages, per_minute: float, severity="error") -> None:
    day.bursts.append(LogBurst(tuple(pods), sl.start, sl.stop, tuple(messages), per_minute, severity))


def _client_logs(day: Day, callers, callees, sl: slice, kinds, per_minute: float = 1.0) -> None:
    """Clients log failing connections and calls at a pace of their own (gRPC reconnects and retries), not
    only when a user's request happens to fail: each caller pod logs the errors `kinds` to `callees`."""
    messages = tuple(dict.fromkeys(f"rpc error: code = {name} desc = {desc}" for kind in kinds for pod in callees
                                   for name, _, desc in [status_text(kind, day.topo, pod)]))
    _burst(day, callers, sl, messages, per_minute)


def _callers(service: str) -> list[str]:
    """The services that call `service`, in the topology's order (so that a seed gives the same dump)."""
    return [caller for caller, callees in CALLS.items() if service in callees and caller in SERVICES]


_NET_KPIS = ("pod_network_receive_bytes", "pod_network_transmit_bytes",
             "pod_network_receive_packets", "pod_network_transmit_packets")
_JVM_AGENT = (
    "org.jboss.byteman.agent.TransformListener: retransforming class hipstershop.AdService",
    "java.lang.reflect.InvocationTargetException at sun.reflect.NativeMethodAccessorImpl.invoke0(Native Method)",
)


def _jvm_rule(rule: str) -> tuple[str, ...]:
    return (f"Rule.execute called for {rule}_0:0 rule {rule} fired",) + _JVM_AGENT


# --- stress -----------------------------------------------------------------------

@fault("cpu stress", "stress test", "pods",
       [{"type": "metric", "keyword": ["pod_cpu_usage"]}, {"type": "metric", "keyword": ["pod_processes"]},
        {"type": "metric", "keyword": ["rrt", "rrt_max"]}],
       ["pod_cpu_usage"],
       ["high CPU utilization", "CPU saturation", "CPU overload", "CPU usage spike", "cpu stress"])
def cpu_stress(day, target, sl, rng):
    idx = _idx(day, target.pods)
    day.pod_kpi["pod_cpu_usage"][sl, idx] += _ramp(sl, rng, 1.6, 2.0)
    day.pod_kpi["pod_processes"][sl, idx] += 4
    day.own_factor[sl, idx] *= _ramp(sl, rng, 2.0, 3.5) + 1


@fault("memory stress", "stress test", "pods",
       [{"type": "metric", "keyword": ["pod_memory_working_set_bytes"]},
        {"type": "metric", "keyword": ["pod_processes"]}],
       ["pod_memory_working_set_bytes"],
       ["high memory usage", "memory saturation", "memory exhaustion", "memory leak", "memory stress"])
def memory_stress(day, target, sl, rng):
    idx = _idx(day, target.pods)
    day.pod_kpi["pod_memory_working_set_bytes"][sl, idx] += _ramp(sl, rng, 1.2e9, 1.4e9)
    day.pod_kpi["pod_processes"][sl, idx] += 2
    day.own_factor[sl, idx] *= 1.3
    # At its peak the container hits its limit and is OOM-killed: a minute of refused connections, then a
    # cold start.
    oom = slice(sl.start + (sl.stop - sl.start) // 2, sl.start + (sl.stop - sl.start) // 2 + 1)
    _cut_off(day, target.pods, oom, "refused", (), 1.0)
    callers = [p for c in _callers(day.topo.service_of[target.pods[0]]) for p in day.topo.pods_of(c)]
    _client_logs(day, callers, target.pods, oom, ("refused",), 2)
    _burst(day, target.pods, oom, ("could not load the warm cache after an OOM restart, starting cold",), 2,
           "warning")


# --- pods ------------------------------------------------------------------------

@fault("pod failure", "pod fault", "tidb-pods",
       [{"type": "log", "keyword": ["Connection", "refused"]}, {"type": "log", "keyword": ["Error", "while", "dialing"]},
        {"type": "log", "keyword": ["failure"]}, {"type": "log", "keyword": ["unavailable"]},
        {"type": "metric", "keyword": ["client_error", "client_error_ratio", "error", "error_ratio"]},
        {"type": "metric", "keyword": ["pod_cpu_usage"]},
        {"type": "metric", "keyword": list(_NET_KPIS)}],
       ["client_error", "client_error_ratio", "error", "error_ratio", "pod_processes", "request", "response"],
       ["pod crash", "pod terminated unexpectedly", "container exit", "pod failure"])
def pod_failure(day, target, sl, rng):
    _cut_off(day, target.pods, sl, "refused", ("pod_cpu_usage", "pod_processes", *_NET_KPIS), 0.02)
    part = {"tidb-tidb-0": "tidb", "tidb-tikv-0": "tikv", "tidb-pd-0": "pd"}.get(target.pods[0])
    if part:
        kpis = day.db_kpi[part]
        for k in ("server_is_up", "cpu_usage", "qps", "connection_count", "grpc_qps"):
            if k in kpis:
                kpis[k][sl] = 0.0
        if part != "tidb":
            day.db_kpi["tidb"]["duration_99th"][sl] *= 40
            day.db_kpi["tidb"]["failed_query_ops"][sl] += 30
            day.db_kpi["pd"]["store_down_count"][sl] = 1.0 if part == "tikv" else 0.0


@fault("pod kill", "pod fault", "pods",
       [{"type": "trace", "subtype": "request_proportion_anomalies", "keyword": ["frontend"]},
        {"type": "metric", "keyword": ["request", "response"]},
        {"type": "metric", "keyword": ["pod_memory_working_set_bytes"]},
        {"type": "metric", "keyword": list(_NET_KPIS)}],
       ["client_error", "client_error_ratio", "error", "error_ratio", "pod_processes", "request", "response"],
       ["pod killed", "forceful pod termination", "container killed", "pod eviction"], window_seconds=1)
def pod_kill(day, target, sl, rng):
    idx = _idx(day, target.pods)
    # The first minute, calls in flight and new ones fail (client errors); the next, the pod restarts unrouted.
    day.unreachable[sl.start:sl.start + 1, idx] = True
    day.unrouted[sl.start + 1:sl.start + 2, idx] = True
    down = slice(sl.start, sl.start + 2)
    # Until the pod is back, clients holding connections to it wait out a reconnect backoff before another
    # replica answers.
    service = day.topo.service_of[target.pods[0]]
    for caller in _callers(service):
        day.edge(caller, service)[0][down] += 800.0 / len(day.topo.pods_of(service)) * len(target.pods)
    for k in _NET_KPIS:
        day.pod_kpi[k][down, idx] *= 0.05
    day.pod_kpi["pod_processes"][down, idx] = 0
    # A fresh container, whatever the window's length: memory starts low and warms up, caches are cold.
    after = slice(sl.start, min(day.own_factor.shape[0], sl.start + 30))
    warm = np.minimum(1.0, 0.15 + np.arange(after.stop - after.start) / 30.0)[:, None]
    day.pod_kpi["pod_memory_working_set_bytes"][after, idx] *= warm
    day.own_factor[after.start + 2:after.stop, idx] *= 1 + 1.5 * (1 - warm[2:])


# --- JVM (adservice, via Byteman rules) --------------------------------------------

@fault("jvm cpu", "jvm fault", "jvm",
       [{"type": "log", "keyword": ["adservice--stress"]}, {"type": "log", "keyword": ["invocationtargetexception"]},
        {"type": "log", "keyword": ["transformlistener"]},
        {"type": "trace", "subtype": "latency_anomalies", "keyword": ["frontend"]},
        {"type": "metric", "keyword": ["pod_cpu_usage"]}, {"type": "metric", "keyword": ["rrt", "rrt_max"]}],
       ["pod_cpu_usage", "adservice--stress"],
       ["JVM CPU spike", "JVM CPU overload", "JVM high CPU usage", "JVM CPU saturation"])
def jvm_cpu(day, target, sl, rng):
    idx = _idx(day, target.pods)
    day.pod_kpi["pod_cpu_usage"][sl, idx] += _ramp(sl, rng, 0.9, 1.2)
    day.own_factor[sl, idx] *= _ramp(sl, rng, 3.0, 5.0) + 1
    _burst(day, target.pods, sl, _jvm_rule("adservice--stress"), 3, "warn")


@fault("jvm gc", "jvm fault", "jvm",
       [{"type": "log", "keyword": ["adservice--gc"]}, {"type": "log", "keyword": ["GCHelper"]},
        {"type": "log", "keyword": ["invocationtargetexception"]}, {"type": "log", "keyword": ["transformlistener"]}],
       ["adservice--gc", "GCHelper", "gc", "garbage collection"],
       ["frequent GC pauses", "long GC pause", "JVM garbage collection spike", "excessive GC activity"])
def jvm_gc(day, target, sl, rng):
    idx = _idx(day, target.pods)
    day.own_extra_ms[sl, idx] += _ramp(sl, rng, 30, 120)
    day.pod_kpi["pod_cpu_usage"][sl, idx] += _ramp(sl, rng, 0.3, 0.5)
    messages = _jvm_rule("adservice--gc") + ("GCHelper: forcing full garbage collection (System.gc) pause 412 ms",)
    _burst(day, target.pods, sl, messages, 4, "warn")


@fault("jvm latency", "jvm fault", "jvm",
       [{"type": "log", "keyword": ["adservice-getRandomAds-latency"]},
        {"type": "log", "keyword": ["invocationtargetexception"]}, {"type": "log", "keyword": ["transformlistener"]},
        {"type": "trace", "subtype": "latency_anomalies", "keyword": ["frontend"]}],
       ["adservice-getRandomAds-latency", "rrt", "rrt_max"],
       ["high JVM latency", "JVM response delay", "elevated request latency", "JVM slow response"])
def jvm_latency(day, target, sl, rng):
    idx = _idx(day, target.pods)
    day.own_extra_ms[sl, idx] += _ramp(sl, rng, 900, 1500)
    _burst(day, target.pods, sl, _jvm_rule("adservice-getRandomAds-latency"), 3, "warn")


@fault("jvm exception", "jvm fault", "jvm",
       [{"type": "log", "keyword": ["adservice-getrandomads-exception"]},
        {"type": "log", "keyword": ["Caught", "throwexception"]}, {"type": "log", "keyword": ["grpc-default-executor"]},
        {"type": "log", "keyword": ["injected", "error"]}, {"type": "log", "keyword": ["invocationtargetexception"]},
        {"type": "log", "keyword": ["transformlistener"]},
        {"type": "metric", "keyword": ["client_error", "client_error_ratio", "error", "error_ratio"]}],
       ["adservice-getrandomads-exception"],
       ["JVM exception thrown", "application exception", "runtime error", "exception stack trace"])
def jvm_exception(day, target, sl, rng):
    _fail(day, target.pods, sl, 0.6, "exception")
    messages = _jvm_rule("adservice-getrandomads-exception") + (
        "Exception in thread grpc-default-executor-2: Caught ThrowException java.lang.Exception: injected error",)
    _burst(day, target.pods, sl, messages, 3)


# --- network (caller -> callee link) ------------------------------------------------

_NET_OBS = [{"type": "metric", "keyword": ["rrt", "rrt_max"]}, {"type": "metric", "keyword": ["request", "response"]},
            {"type": "metric", "keyword": list(_NET_KPIS)}]
_NET_METRICS = ["rrt", "rrt_max", "request", "response", *_NET_KPIS]
_NET_LOGS = [{"type": "log", "keyword": ["Error", "while", "dialing"]}, {"type": "log", "keyword": ["failure"]},
             {"type": "log", "keyword": ["Rpc", "error", "code", "canceled", "desc", "context canceled"]},
             {"type": "log", "keyword": ["timeout"]}, {"type": "log", "keyword": ["unavailable"]}]
_FRONT_TRACE = [{"type": "trace", "subtype": "latency_anomalies", "keyword": ["frontend"]}]


def _link(day: Day, target: Target, sl: slice, ms: float, err: float, kind: str | tuple[str, ...], net_mult: float,
          rng, traffic: float) -> None:
    """A degraded caller -> callee link: slower or failing calls, and fewer of them at both ends (clients wait
    or give up), so both ends' request and response counts fall, as the real key metrics say."""
    src, dst = target.edge
    e_ms, e_err = day.edge(src, dst)
    e_ms[sl] += _ramp(sl, rng, 0.8 * ms, 1.2 * ms)[:, 0]
    e_err[sl] = np.maximum(e_err[sl], err)
    day.edge_err_kind[(src, dst)] = kind
    idx = _idx(day, day.topo.pods_of(src) + day.topo.pods_of(dst))
    day.traffic[sl, idx] *= traffic
    for k in _NET_KPIS:
        day.pod_kpi[k][sl, idx] *= net_mult
    if err:
        _client_logs(day, day.topo.pods_of(src), day.topo.pods_of(dst), sl, (kind,) if isinstance(kind, str) else kind)


@fault("network delay", "network attack", "edge", _FRONT_TRACE + _NET_OBS, _NET_METRICS,
       ["high network latency", "increased RTT", "network delay spike", "elevated transmission delay"])
def network_delay(day, target, sl, rng):
    _link(day, target, sl, 200.0, 0.0, "deadline", 0.5, rng, traffic=0.6)


@fault("network loss", "network attack", "edge",
       [{"type": "log", "keyword": ["deadlineexceeded"]}] + _FRONT_TRACE + _NET_OBS, _NET_METRICS,
       ["packet loss", "network packet drop", "high loss rate", "dropped packets"])
def network_loss(day, target, sl, rng):
    # Lost packets: calls time out, are given up, or cannot even connect.
    _link(day, target, sl, 350.0, 0.25, ("deadline", "canceled", "dial"), 0.5, rng, traffic=0.5)


@fault("network corrupt", "network attack", "edge",
       _NET_LOGS + _FRONT_TRACE + [{"type": "metric", "keyword": ["client_error", "client_error_ratio", "error",
                                                                    "error_ratio"]}] + _NET_OBS,
       _NET_METRICS, ["packet corruption", "data corruption", "bit errors on network", "corrupted packets"])
def network_corrupt(day, target, sl, rng):
    # Corrupt packets: connections are reset, calls given up, handshakes time out.
    _link(day, target, sl, 120.0, 0.3, ("reset", "canceled", "dial"), 1.6, rng, traffic=0.6)
    src, dst = target.edge
    if dst == "redis-cart":
        _burst(day, day.topo.pods_of(src), sl, (ERRORS["storage"][2],), 2)


# --- misconfiguration and code ---------------------------------------------------

_CALLER_ERRORS = [{"type": "metric", "keyword": ["client_error", "client_error_ratio", "error", "error_ratio"]},
                  {"type": "metric", "keyword": ["request", "response"]}]


@fault("dns error", "network attack", "pods",
       [{"type": "log", "keyword": ["no such host"]}, {"type": "log", "keyword": ["unavailable"]}] + _CALLER_ERRORS,
       ["error", "error_ratio", "client_error", "no such host"],
       ["DNS resolution failure", "DNS lookup error", "name resolution failed", "dns error"])
def dns_error(day, target, sl, rng):
    _cut_off(day, target.pods, sl, "dns", _NET_KPIS, 0.05)


@fault("target port misconfig", "misconfiguration", "pods",
       [{"type": "log", "keyword": ["Connection", "refused"]}, {"type": "log", "keyword": ["Error", "while", "dialing"]}]
       + _CALLER_ERRORS,
       ["error", "error_ratio", "client_error", "connection refused"],
       ["target port misconfiguration", "wrong service port", "port mismatch", "connection refused on port"])
def target_port_misconfig(day, target, sl, rng):
    _cut_off(day, target.pods, sl, "refused", ("pod_cpu_usage", *_NET_KPIS), 0.1)


@fault("code error", "code defect", "pods",
       [{"type": "log", "keyword": ["code error"]}, {"type": "log", "keyword": ["nil pointer dereference"]},
        {"type": "metric", "keyword": ["server_error", "server_error_ratio", "error", "error_ratio"]}],
       ["error", "error_ratio", "server_error", "code error"],
       ["code defect", "application bug", "software error", "code error"])
def code_error(day, target, sl, rng):
    _fail(day, target.pods, sl, 0.5, "internal")
    _burst(day, target.pods, sl, ("code error: panic: runtime error: invalid memory address or nil pointer "
                                  "dereference [signal SIGSEGV: segmentation violation]",), 2)


# --- TiDB ---------------------------------------------------------------------------

@fault("io fault", "io fault", "tikv",
       [{"type": "metric", "keyword": ["io_util"]}, {"type": "metric", "keyword": ["raft_apply_wait", "raft_propose_wait"]},
        {"type": "metric", "keyword": ["duration_99th", "duration_95th"]}, {"type": "metric", "keyword": ["rrt", "rrt_max"]}],
       ["io_util", "raft_apply_wait", "duration_99th"],
       ["disk IO fault", "IO latency", "storage IO errors", "slow disk IO"])
def io_fault(day, target, sl, rng):
    tikv, tidb = day.db_kpi["tikv"], day.db_kpi["tidb"]
    tikv["io_util"][sl] = _ramp(sl, rng, 0.85, 0.99)[:, 0]
    for k in ("raft_apply_wait", "raft_propose_wait"):
        tikv[k][sl] *= _ramp(sl, rng, 30, 60)[:, 0]
    tikv["rocksdb_write_stall"][sl] = _ramp(sl, rng, 1, 5)[:, 0]
    for k in ("duration_99th", "duration_95th", "duration_avg"):
        tidb[k][sl] *= _ramp(sl, rng, 15, 30)[:, 0]
    tidb["slow_query"][sl] += _ramp(sl, rng, 5, 20)[:, 0]
    day.own_extra_ms[sl, _idx(day, target.pods)] += _ramp(sl, rng, 40, 90)


# --- nodes ---------------------------------------------------------------------------

def _node(target: Target) -> int:
    return NODES.index(target.node)


@fault("node cpu stress", "node fault", "node", [{"type": "metric", "keyword": ["node_cpu_usage_rate"]}],
       ["node_cpu_usage_rate"],
       ["node CPU overload", "node high CPU usage", "node CPU saturation", "node CPU spike", "node cpu stress"])
def node_cpu_stress(day, target, sl, rng):
    n = _node(target)
    day.node_kpi["node_cpu_usage_rate"][sl, n] = np.minimum(99.0, 80 + _ramp(sl, rng, 8, 18)[:, 0])
    day.own_factor[sl, _idx(day, target.pods)] *= 1.4


@fault("node memory stress", "node fault", "node",
       [{"type": "metric", "keyword": ["node_memory_usage_rate", "node_memory_MemAvailable_bytes"]}],
       ["node_memory_usage_rate"],
       ["node memory exhaustion", "node memory saturation", "node high memory usage", "node memory leak"])
def node_memory_stress(day, target, sl, rng):
    n = _node(target)
    rate = day.node_kpi["node_memory_usage_rate"]
    rate[sl, n] = np.minimum(97.0, rate[sl, n] + _ramp(sl, rng, 35, 42)[:, 0])
    derive_node_kpis(day.node_kpi)


@fault("node disk fill", "node fault", "node", [{"type": "metric", "keyword": ["node_filesystem_usage_rate"]}],
       ["node_filesystem_usage_rate"],
       ["node disk full", "high disk utilization", "disk space exhaustion", "disk saturation"])
def node_disk_fill(day, target, sl, rng):
    n = _node(target)
    rate = day.node_kpi["node_filesystem_usage_rate"]
    fill = np.minimum(1.0, (np.arange(sl.stop - sl.start) + 1) / 3.0)
    rate[sl, n] = rate[sl, n] + (96.0 - rate[sl, n]) * fill
    day.node_kpi["node_disk_written_bytes_total"][sl.start:sl.start + 3, n] *= 60
    derive_node_kpis(day.node_kpi)


def get(name: str) -> Fault:
    try:
        return FAULTS[name]
    except KeyError:
        raise ScheduleError(f"unknown fault type '{name}' (known: {', '.join(sorted(FAULTS))})") from None

