"""The fault library: one entry per fault type, and the system description says which apply to which of its
components (by kind, by kind and language, to links, to nodes).

Each entry knows what it can act on, how it changes a `Day` (metrics, latency, errors, log lines) and what the ground
truth says of it (`key_observations`, `key_metrics`, `fault_description`, taken from the real phase-one ground truth
of the 2025 challenge where the type occurs there; `{service}` and `{method}` name the target, `{entry}` the system's
entry, and a gRPC error's words become an HTTP client's where the target speaks HTTP: `HTTP_WORDS`). Callers and
dependants feel the effects through `workload`, so propagation is not written per fault; a datastore's own metrics
move by the roles its description gives them (`system.ROLES`).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Callable

import numpy as np

from etl.loglines import POSITION
from rcalab.errors import ScheduleError

from .system import Component, System
from .topology import Topology
from .workload import (MINUTES, Day, LogBurst, PathBreak, derive_node_kpis, operations_per_entry_request,
                       series_names)

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
                "{failure}. StackExchange.Redis.RedisTimeoutException: Timeout performing HGET"),
    "db": ("Unavailable", 14, "Error 9005: Region is unavailable; dial tcp {ip}:4000: connect: connection refused"),
    "lookup": ("Internal", 13, "rpc error: code = Unavailable desc = name resolver error: produced zero addresses; "
                               "lookup failed on 169.254.25.10:53: no such host"),
    "failed": ("Internal", 13, "{failure}"),
}
TRANSIENT = ("Unavailable", 14, "transport is closing")
# The same failures as a Spring service's HTTP client reports them (RestTemplate), where a call is over HTTP.
HTTP_ERRORS = {
    "refused": 'I/O error on request for "http://{service}:{port}": Connection refused (Connection refused)',
    "dial": 'I/O error on request for "http://{service}:{port}": connect timed out',
    "reset": 'I/O error on request for "http://{service}:{port}": Connection reset',
    "canceled": "Request processing failed; nested exception is java.util.concurrent.CancellationException",
    "deadline": 'I/O error on request for "http://{service}:{port}": Read timed out',
    "dns": 'I/O error on request for "http://{service}:{port}": {service}: Name or service not known',
    "exception": '500 Internal Server Error: [{{"status":500,"error":"Internal Server Error","path":"/{service}"}}]',
    "internal": '500 Internal Server Error: [{{"status":500,"error":"Internal Server Error","path":"/{service}"}}]',
    "transient": 'I/O error on request for "http://{service}:{port}": Unexpected end of file from server',
    "failed": '500 Internal Server Error: [{{"status":500,"error":"{failure}","path":"/{service}"}}]',
}
# A key observation's gRPC words as an HTTP client writes the same failure (HTTP_ERRORS), none where it has no such
# words (a status name): a system's truth names what its own lines say.
HTTP_WORDS = {
    ("deadlineexceeded",): ["Read timed out"], ("timeout",): ["timed out"],
    ("Error", "while", "dialing"): ["I/O error on request"], ("unavailable",): [],
    ("failure",): ["Connection reset"], ("no such host",): ["Name or service not known"],
    ("context canceled",): ["CancellationException"],
    ("Rpc", "error", "code", "canceled", "desc", "context canceled"): ["CancellationException"],
    ("rpc", "error"): ["I/O error"], ("Internal",): ["500 Internal Server Error"],
    ("code error",): ["500 Internal Server Error"],
}
JVM = {"java", "kotlin", "scala"}  # languages whose services run on a JVM (Byteman's rules, garbage collection)
KINDS = ("service", "database", "cache", "storage", "coordinator", "broker")


def status_text(kind: str, topo: Topology, pod: str) -> tuple[str, int, str]:
    """Status name, code and message of a failed call to `pod` (gRPC's; an HTTP client's message over HTTP)."""
    name, code, desc = TRANSIENT if kind == "transient" else ERRORS[kind]
    comp = topo.component(pod)
    if comp.protocol == "http" and kind in HTTP_ERRORS:
        desc = HTTP_ERRORS[kind]
    return name, code, desc.format(ip=topo.ip_of[pod], port=comp.port, service=comp.name, failure=comp.failure)


def failure_line(kind: str, topo: Topology, pod: str) -> str:
    """What a caller logs when its call to `pod` failed so: the callee's `failure` words, then the error."""
    name, _, desc = status_text(kind, topo, pod)
    comp = topo.component(pod)
    return f"{comp.failure}: {desc}" if comp.protocol == "http" else f"{comp.failure}: rpc error: code = {name} desc = {desc}"


def _single(comp: Component) -> bool:
    """A datastore part that runs as one pod: the ground truth names it by its pod and its service."""
    return not comp.traced and comp.replicas == 1


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
            instance = [src, dst] + (topo.pods_of(dst) if _single(topo.component(dst)) else [])
            return dict(instance_type="service", service="", instance=instance, source=src, destination=dst)
        if self.level == "node":
            return dict(instance_type="node", service="", instance=self.node, source="", destination="")
        service = topo.service_of[self.pods[0]]
        if _single(topo.component(service)):
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
    acts_on: frozenset[str]  # component kinds, "jvm" (a service on a JVM), "io" (a part with io metrics), link, node
    apply: Callable[[Day, Target, slice, np.random.Generator], None]
    key_observations: list = field(default_factory=list)
    key_metrics: list = field(default_factory=list)
    fault_description: list = field(default_factory=list)
    window_seconds: int | None = None  # a window of fixed length, as the real ground truth gives it (pod kill: 1 s)
    target: str | None = None  # the one component a system's scenario acts on
    # The roles of the target's own metrics its truth names where the system writes none of the names it gives (a
    # datastore other than TiDB): a fault on a datastore's own series names them by what they are, not by TiDB's.
    own_roles: tuple[str, ...] = ()

    def candidates(self, topo: Topology) -> list[Target]:
        """Every target this fault type can hit in the topology, as its system's description says."""
        system = topo.system
        if self.target:
            return [Target("service", tuple(topo.pods_of(self.target)))]
        out = []
        for spec in system.faults.get(self.name, ()):
            if spec == "node":
                out += [Target("node", tuple(topo.pods_on(n)), node=n) for n in system.workers]
            elif spec == "link":
                out += [Target("service", edge=edge) for edge in links(system)]
            else:
                comps = [c.name for c in system.components.values() if matches(c, spec) and can(self, c)]
                out += [Target("service", tuple(topo.pods_of(c))) for c in comps]
                if "link" not in self.acts_on:  # a network fault acts on a service's links, not on one of its pods
                    out += [Target("pod", (p,)) for c in comps if system.components[c].replicas > 1
                            for p in topo.pods_of(c)]
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
                hit = names == [service] or (_single(topo.component(service))
                                             and bool({service, target.pods[0]} & set(names)))
            if hit:
                return target
        raise ScheduleError(f"fault type '{self.name}' cannot hit instance {instance!r}")

    def truth(self, topo: Topology, target: Target, start: str, end: str, uuid: str) -> dict:
        """The ground truth of this fault on `target` from `start` to `end`: where, and the keys its signature
        shows."""
        service = topo.service_of.get(target.pods[0], "") if target.pods and not target.edge else ""
        comp = topo.system.components.get(service)
        method = next((op.method or name for name, op in comp.operations.items()), "") if comp else ""
        site = busiest_site(topo.system, service, self.name) if comp and "code" in self.acts_on else None
        pair = site[2] if site else ""

        callee = topo.system.components.get(target.edge[1] if target.edge else service)
        http = callee is not None and callee.protocol == "http"

        def named(text: str) -> str:
            return text.replace("{service}", service).replace("{method}", method).replace(
                "{method_lower}", method.lower()).replace("{pair}", pair).replace("{entry}", topo.system.entry)

        held = _HELD if "link" in self.acts_on and not target.edge else ()
        key_observations, key_metrics = self._own_series(topo, target)
        observations = []
        for o in key_observations:
            keywords = HTTP_WORDS.get(tuple(o["keyword"]), o["keyword"]) if http and o["type"] == "log" else o["keyword"]
            keywords = [k for k in keywords if o["type"] != "metric" or k not in held]
            observation = dict(o, keyword=[named(k) for k in keywords])
            if keywords and observation not in observations:
                observations.append(observation)
        return dict(fault_category=self.category, fault_type=self.name, **target.truth(topo), start_time=start,
                    end_time=end, uuid=uuid, key_observations=observations,
                    key_metrics=[named(m) for m in key_metrics if m not in held],
                    fault_description=self.fault_description)

    def _own_series(self, topo: Topology, target: Target) -> tuple[list, list]:
        """The observations and key metrics of the truth: as the fault gives them, or, for a fault on the target's own
        series (`own_roles`) where the system does not write every name it gives, the target's own series of each
        role (an observation a role) before the names the system does write."""
        if not self.own_roles or not target.pods:
            return self.key_observations, self.key_metrics
        written = series_names(topo.system)
        if set(self.key_metrics) <= written:
            return self.key_observations, self.key_metrics
        kpis = topo.component(topo.service_of[target.pods[0]]).kpis
        roles = [[k for k, kpi in kpis.items() if role in kpi.roles] for role in self.own_roles]
        own = [{"type": "metric", "keyword": names} for names in roles if names]
        kept = [dict(o, keyword=[k for k in o["keyword"] if k in written]) if o["type"] == "metric" else o
                for o in self.key_observations]
        return own + [o for o in kept if o["keyword"]], [k for names in roles for k in names] + \
            [m for m in self.key_metrics if m in written]


# A log line that opens with its code position (`logger#line`), as the store reads one (`etl.loglines.POSITION`).
OPENING = re.compile(rf"^({POSITION}) ?")


def code_site(comp: Component, fault: str, served: dict[str, float] | None = None) -> tuple[str, int, str] | None:
    """Where a code fault acts in a component: of its operations that have a step to break, the one that serves
    the most requests (`served`, by operation), then the one with the most steps; the step, and the pair of code
    positions whose order it breaks (`A_B`: A was followed by B). An exception is thrown in the middle of the
    operation, after a log step that a later log step follows (A that step, B the next); a wrong return is a
    method's value that a step with another branch (`else`) tests (A the log step before it, B that step). A is a
    position the operation logs once: one logged twice on its path (a loop's) is followed by more than one line, and a
    pair that starts there names no one place in the code."""
    served = served or {}
    for name, op in sorted(comp.operations.items(), key=lambda kv: (-served.get(kv[0], 0.0), -len(kv[1].steps))):
        logs = [(i, m) for i, s in enumerate(op.steps) if s.log and (m := OPENING.match(s.log))]
        times = Counter(m[1] for _, m in logs)
        pairs = [(a, b) for a, b in zip(logs, logs[1:]) if times[a[1][1]] == 1]
        if fault == "exception" and pairs:
            (i, a), (_, b) = pairs[(len(pairs) - 1) // 2]
            return name, i, f"{a[1]}_{b[1]}"
        for (_, a), (j, b) in pairs:
            if fault != "exception" and op.steps[j].otherwise:
                return name, j, f"{a[1]}_{b[1]}"
    return None


def busiest_site(system: System, service: str, fault: str) -> tuple[str, int, str] | None:
    """The code site of a fault in a service (`code_site`) where the workload meets it: a fault injected in code no
    request runs leaves nothing abnormal to diagnose."""
    served = {op: n for (s, op), n in operations_per_entry_request(system).items() if s == service}
    return code_site(system.components[service], fault, served)


def matches(comp: Component, spec: str) -> bool:
    """Whether a component is what a description's fault entry names: a kind, or a kind and language."""
    kind, _, language = spec.partition(":")
    return comp.kind == kind and (not language or comp.language == language)


def links(system: System) -> list[tuple[str, str]]:
    """The caller -> callee links a network fault can hit: calls between components of the system's own
    namespace (a datastore run apart, in a namespace of its own, is not reached by the system's network chaos)."""
    return [(c, d) for c, d in system.calls() if system.components[c].namespace == system.namespace
            and system.components[d].namespace == system.namespace]


# What a fault may act on besides a kind of component: each a test of a component.
TRAITS = {
    "jvm": ("services on a JVM", lambda c, fault: c.kind == "service" and c.language in JVM),
    "io": ("parts with io metrics", lambda c, fault: any("io" in k.roles for k in c.kpis.values())),
    "code": ("services with an operation that logs two code positions in a row (for a wrong return, the second a "
             "step with another branch, `else`)", lambda c, fault: bool(code_site(c, fault))),
    "consumer": ("services that consume a topic", lambda c, fault: any(op.consumes for op in c.operations.values())),
    "producer": ("services that publish to a topic",
                 lambda c, fault: any(s.publish for op in c.operations.values() for s in op.steps)),
}


def can(fault: Fault, comp: Component) -> bool:
    """Whether a fault can act on a component."""
    traits = fault.acts_on & TRAITS.keys()
    if traits:
        return all(TRAITS[t][1](comp, fault.name) for t in traits)
    return comp.kind in fault.acts_on


def applies(name: str, spec: str, system: System) -> str | None:
    """Why a system's description may not apply fault `name` to `spec` (None where it may)."""
    fault = FAULTS.get(name)
    if fault is None:
        return f"unknown fault type '{name}' (known: {', '.join(sorted(FAULTS))})"
    if spec in ("link", "node"):
        return None if spec in fault.acts_on else f"it acts on {_acts(fault)}, not on a {spec}"
    kind, _, language = spec.partition(":")
    if kind not in KINDS:
        return f"'{spec}' is no kind of component (kinds: {', '.join(KINDS)}, link, node; kind:language)"
    hit = [c for c in system.components.values() if matches(c, spec)]
    if not hit:
        return f"no component is a {spec}"
    if not any(can(fault, c) for c in hit):
        return f"it acts on {_acts(fault)}, and no {spec} is one"
    return None


def _acts(fault: Fault) -> str:
    words = {"link": "links", "node": "nodes", **{t: w for t, (w, _) in TRAITS.items()}}
    return ", ".join(words.get(a, a) for a in sorted(fault.acts_on))


FAULTS: dict[str, Fault] = {}
SERVICE = frozenset({"service"})
ANY = frozenset(KINDS)


def fault(name, category, acts_on, observations, metrics, descriptions, window_seconds=None, own_roles=()):
    def register(apply):
        FAULTS[name] = Fault(name, category, frozenset(acts_on), apply, observations, metrics, descriptions,
                             window_seconds, own_roles=tuple(own_roles))
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


def _cut_off(day: Day, pods, sl: slice, kind: str, kpis, factor: float, logged=None, down=True) -> None:
    """Connections to `pods` fail with `kind` in the minutes of `sl` they are `down` (all, or a column of one flag a
    minute); their `kpis` drop to `factor` of normal then; their clients log the failures (`logged`, by default
    `kind`)."""
    idx = _idx(day, pods)
    day.unreachable[sl, idx] |= down
    day.unreachable_kind.update({pod: kind for pod in pods})
    for k in kpis:
        day.pod_kpi[k][sl, idx] *= np.where(down, factor, 1.0)
    _client_logs(day, pods, sl, logged or (kind,))


def _burst(day: Day, pods, sl: slice, messages, per_minute: float, severity="error") -> None:
    day.bursts.append(LogBurst(tuple(pods), sl.start, sl.stop, tuple(messages), per_minute, severity))


def _client_logs(day: Day, callees, sl: slice, kinds, per_minute: float = 1.0, callers=None) -> None:
    """Clients log failing connections and calls at a pace of their own (gRPC reconnects and retries), not only
    when a user's request happens to fail: each caller pod (by default every pod of a service that calls them) logs
    the errors `kinds` of calls to `callees`, in its own words; a caller that wraps errors (`wraps`) answers its
    own callers `Internal`, and they log that."""
    topo = day.topo
    system = topo.system
    callee = topo.component(callees[0])
    sources = ([(caller, topo.pods_of(caller)) for caller in system.callers(callee.name)] if callers is None
               else [(topo.service_of[callers[0]], callers)])
    if not sources:  # the entry: its users see the failures, no service logs them
        return
    errors = [failure_line(kind, topo, pod) for kind in kinds for pod in callees]
    for caller, pods in sources:
        _burst(day, pods, sl, dict.fromkeys(errors), per_minute)
        wrapper = system.components[caller]
        if wrapper.wraps:
            wrapped = [f"{wrapper.failure}: rpc error: code = Internal desc = {wrapper.wraps}: {e}" for e in errors]
            for above in system.callers(caller):
                _burst(day, topo.pods_of(above), sl, dict.fromkeys(wrapped), per_minute)


def _cold_start(day: Day, pods, minute: int) -> None:
    """A fresh container from `minute` on: memory starts low and warms up over half an hour, caches are cold."""
    idx = _idx(day, pods)
    after = slice(minute, min(MINUTES, minute + 30))
    warm = np.minimum(1.0, 0.15 + np.arange(after.stop - after.start) / 30.0)[:, None]
    day.pod_kpi["pod_memory_working_set_bytes"][after, idx] *= warm
    day.own_factor[after, idx] *= 1 + 1.5 * (1 - warm)


def _crash_loop(minutes: int, rng: np.random.Generator) -> np.ndarray:
    """Second by second, a server that crashes soon after each start: up a few seconds (start-up, then the first
    request that hits the defect), then down for kubelet's restart back-off (10 s, doubling, at most 300 s).
    Whether it is down, for each second of `minutes`."""
    down = np.zeros(minutes * 60, bool)
    t, backoff = 0.0, 10.0
    while t < down.size:
        t += rng.uniform(3, 15)
        down[int(t):int(t + backoff)] = True
        t += backoff
        backoff = min(2 * backoff, 300.0)
    return down.reshape(minutes, 60)


def _own(day: Day, component: str, role: str) -> list[np.ndarray]:
    """A datastore part's own metrics of one role (each a series over the day)."""
    comp = day.topo.system.components[component]
    return [day.db_kpi[component][k] for k, kpi in comp.kpis.items() if role in kpi.roles]


def _callers_own(day: Day, component: str, role: str) -> list[np.ndarray]:
    """The metrics of one role of the datastore parts that call `component` (TiDB's SQL layer above its storage)."""
    return [series for caller in day.topo.system.callers(component) for series in _own(day, caller, role)]


def _watcher(day: Day, component: str) -> str | None:
    """The part that watches `component` (counts its stores and regions), if the description names one."""
    return next((c for c, comp in day.topo.system.components.items() if comp.watches == component), None)


_NET_KPIS = ("pod_network_receive_bytes", "pod_network_transmit_bytes",
             "pod_network_receive_packets", "pod_network_transmit_packets")
_JVM_AGENT = (
    "org.jboss.byteman.agent.TransformListener: retransforming class {code}",
    "java.lang.reflect.InvocationTargetException at sun.reflect.NativeMethodAccessorImpl.invoke0(Native Method)",
)


def _jvm_rule(day: Day, target: Target, rule: str) -> tuple[str, ...]:
    """What a Byteman rule named `rule` ({service}, {method} the target's) writes in the target's log when it fires."""
    comp = day.topo.component(target.pods[0])
    method = next((op.method or name for name, op in comp.operations.items()), "")
    rule = rule.replace("{service}", comp.name).replace("{method}", method).replace("{method_lower}", method.lower())
    code = comp.rpc_service or comp.name
    return (f"Rule.execute called for {rule}_0:0 rule {rule} fired",) + tuple(t.format(code=code) for t in _JVM_AGENT)


# --- stress -----------------------------------------------------------------------

@fault("cpu stress", "stress test", SERVICE,
       [{"type": "metric", "keyword": ["pod_cpu_usage"]}, {"type": "metric", "keyword": ["pod_processes"]},
        {"type": "metric", "keyword": ["rrt", "rrt_max"]}],
       ["pod_cpu_usage"],
       ["high CPU utilization", "CPU saturation", "CPU overload", "CPU usage spike", "cpu stress"])
def cpu_stress(day, target, sl, rng):
    """Stress processes in the pod burn cpu (usage up, more processes); the server competes with them for the
    cpu, so its own work takes longer."""
    idx = _idx(day, target.pods)
    day.pod_kpi["pod_cpu_usage"][sl, idx] += _ramp(sl, rng, 1.6, 2.0)
    day.pod_kpi["pod_processes"][sl, idx] += 4
    day.own_factor[sl, idx] *= _ramp(sl, rng, 2.0, 3.5) + 1


@fault("memory stress", "stress test", SERVICE,
       [{"type": "metric", "keyword": ["pod_memory_working_set_bytes"]},
        {"type": "metric", "keyword": ["pod_processes"]}],
       ["pod_memory_working_set_bytes"],
       ["high memory usage", "memory saturation", "memory exhaustion", "memory leak", "memory stress"])
def memory_stress(day, target, sl, rng):
    """A process in the pod allocates and holds memory (working set up, one more process); at the peak the
    container hits its limit and is OOM-killed: a minute with no process and refused connections, then a cold
    start."""
    idx = _idx(day, target.pods)
    day.pod_kpi["pod_memory_working_set_bytes"][sl, idx] += _ramp(sl, rng, 1.2e9, 1.4e9)
    day.pod_kpi["pod_processes"][sl, idx] += 2
    day.own_factor[sl, idx] *= 1.3
    oom = slice(sl.start + (sl.stop - sl.start) // 2, sl.start + (sl.stop - sl.start) // 2 + 1)
    _cut_off(day, target.pods, oom, "refused", ("pod_processes",), 0.0)
    _cold_start(day, target.pods, oom.stop)
    _burst(day, target.pods, oom, ("could not load the warm cache after an OOM restart, starting cold",), 2,
           "warning")


# --- pods ------------------------------------------------------------------------

@fault("pod failure", "pod fault", ANY,
       [{"type": "log", "keyword": ["Connection", "refused"]}, {"type": "log", "keyword": ["Error", "while", "dialing"]},
        {"type": "log", "keyword": ["failure"]}, {"type": "log", "keyword": ["unavailable"]},
        {"type": "metric", "keyword": ["client_error", "client_error_ratio", "error", "error_ratio"]},
        {"type": "metric", "keyword": ["pod_cpu_usage"]},
        {"type": "metric", "keyword": list(_NET_KPIS)}],
       ["client_error", "client_error_ratio", "error", "error_ratio", "pod_processes", "request", "response"],
       ["pod crash", "pod terminated unexpectedly", "container exit", "pod failure"])
def pod_failure(day, target, sl, rng):
    """The pod's container is replaced by one that does nothing for the window: no process, no cpu, no traffic;
    connections held by clients are reset (`connection failure`), new ones refused; the idle container holds almost
    no memory; then it starts again, cold.
    A datastore part that fails stops reporting work (its metrics of role `stops`) and restarts its uptime; a part
    another watches (a storage its coordinator counts) leaves its regions pending and counted abnormal until it is
    back; the parts that call it see their slowest queries and failures grow."""
    _cut_off(day, target.pods, sl, "refused", ("pod_cpu_usage", "pod_processes", *_NET_KPIS), 0.0,
             logged=("reset", "refused"))
    day.pod_kpi["pod_memory_working_set_bytes"][sl, _idx(day, target.pods)] *= 0.05  # an idle container's
    _cold_start(day, target.pods, sl.stop)
    part = day.topo.service_of[target.pods[0]]
    if part not in day.db_kpi:
        return
    for series in _own(day, part, "stops"):
        series[sl] = 0.0
    for series in _own(day, part, "uptime"):  # counted afresh from the restart
        series[sl] = 0.0
        series[sl.stop:] = np.arange(MINUTES - sl.stop) * 60.0
    watcher = _watcher(day, part)
    if watcher:  # its regions lose a peer: pending while it is down, catching up after
        regions = _own(day, watcher, "regions")[0]
        catch_up = slice(sl.stop, min(MINUTES, sl.stop + 10))
        for series in _own(day, part, "pending"):
            series[sl] += regions[sl]
            series[catch_up] += np.linspace(30, 0, catch_up.stop - catch_up.start)
        for series in _own(day, watcher, "watched_abnormal"):
            series[sl] += regions[sl]
        for series in _own(day, watcher, "watched_down"):
            series[sl] = 1.0
        for series in _own(day, watcher, "watched_up"):
            series[sl] = 0.0
    for series in _callers_own(day, part, "tail_latency"):
        series[sl] *= 40
    for series in _callers_own(day, part, "failures"):
        series[sl] += 30


@fault("pod kill", "pod fault", SERVICE,
       [{"type": "trace", "subtype": "request_proportion_anomalies", "keyword": ["{entry}"]},
        {"type": "metric", "keyword": ["request", "response"]},
        {"type": "metric", "keyword": ["pod_memory_working_set_bytes"]},
        {"type": "metric", "keyword": list(_NET_KPIS)}],
       ["client_error", "client_error_ratio", "error", "error_ratio", "pod_processes", "request", "response"],
       ["pod killed", "forceful pod termination", "container killed", "pod eviction"], window_seconds=1)
def pod_kill(day, target, sl, rng):
    """The pod is deleted and its replacement started: the first minute calls in flight are cut and new ones
    refused (client errors), the next the new pod starts and gets no traffic; no process for those two minutes;
    clients wait out a reconnect back-off; the new container starts cold."""
    idx = _idx(day, target.pods)
    _cut_off(day, target.pods, slice(sl.start, sl.start + 1), "refused", (), 1.0, logged=("canceled", "refused"))
    day.unrouted[sl.start + 1:sl.start + 2, idx] = True
    down = slice(sl.start, sl.start + 2)
    # Until the pod is back, clients holding connections to it wait out a reconnect backoff before another
    # replica answers.
    service = day.topo.service_of[target.pods[0]]
    for caller in day.topo.system.callers(service):
        day.edge(caller, service)[0][down] += 800.0 / len(day.topo.pods_of(service)) * len(target.pods)
    for k in _NET_KPIS:
        day.pod_kpi[k][down, idx] *= 0.05
    day.pod_kpi["pod_processes"][down, idx] = 0
    _cold_start(day, target.pods, sl.start)


# --- JVM (via Byteman rules) -----------------------------------------------------------

@fault("jvm cpu", "jvm fault", {"jvm"},
       [{"type": "log", "keyword": ["{service}--stress"]}, {"type": "log", "keyword": ["invocationtargetexception"]},
        {"type": "log", "keyword": ["transformlistener"]},
        {"type": "trace", "subtype": "latency_anomalies", "keyword": ["{entry}"]},
        {"type": "metric", "keyword": ["pod_cpu_usage"]}, {"type": "metric", "keyword": ["rrt", "rrt_max"]}],
       ["pod_cpu_usage", "{service}--stress"],
       ["JVM CPU spike", "JVM CPU overload", "JVM high CPU usage", "JVM CPU saturation"])
def jvm_cpu(day, target, sl, rng):
    """A Byteman rule makes the JVM spin on cpu (its agent logs the rule firing); requests wait for the cpu."""
    idx = _idx(day, target.pods)
    day.pod_kpi["pod_cpu_usage"][sl, idx] += _ramp(sl, rng, 0.9, 1.2)
    day.own_factor[sl, idx] *= _ramp(sl, rng, 3.0, 5.0) + 1
    _burst(day, target.pods, sl, _jvm_rule(day, target, "{service}--stress"), 3, "warn")


@fault("jvm gc", "jvm fault", {"jvm"},
       [{"type": "log", "keyword": ["{service}--gc"]}, {"type": "log", "keyword": ["GCHelper"]},
        {"type": "log", "keyword": ["invocationtargetexception"]}, {"type": "log", "keyword": ["transformlistener"]}],
       ["{service}--gc", "GCHelper", "gc", "garbage collection"],
       ["frequent GC pauses", "long GC pause", "JVM garbage collection spike", "excessive GC activity"])
def jvm_gc(day, target, sl, rng):
    """A Byteman rule forces full garbage collections: pauses add to every request, the collector uses cpu."""
    idx = _idx(day, target.pods)
    day.own_extra_ms[sl, idx] += _ramp(sl, rng, 30, 120)
    day.pod_kpi["pod_cpu_usage"][sl, idx] += _ramp(sl, rng, 0.3, 0.5)
    messages = _jvm_rule(day, target, "{service}--gc") + ("GCHelper: forcing full garbage collection (System.gc) pause 412 ms",)
    _burst(day, target.pods, sl, messages, 4, "warn")


@fault("jvm latency", "jvm fault", {"jvm"},
       [{"type": "log", "keyword": ["{service}-{method}-latency"]},
        {"type": "log", "keyword": ["invocationtargetexception"]}, {"type": "log", "keyword": ["transformlistener"]},
        {"type": "trace", "subtype": "latency_anomalies", "keyword": ["{entry}"]}],
       ["{service}-{method}-latency", "rrt", "rrt_max"],
       ["high JVM latency", "JVM response delay", "elevated request latency", "JVM slow response"])
def jvm_latency(day, target, sl, rng):
    """A Byteman rule sleeps in the service's method: every request takes about a second longer."""
    idx = _idx(day, target.pods)
    day.own_extra_ms[sl, idx] += _ramp(sl, rng, 900, 1500)
    _burst(day, target.pods, sl, _jvm_rule(day, target, "{service}-{method}-latency"), 3, "warn")


@fault("jvm exception", "jvm fault", {"jvm"},
       [{"type": "log", "keyword": ["{service}-{method_lower}-exception"]},
        {"type": "log", "keyword": ["Caught", "throwexception"]}, {"type": "log", "keyword": ["grpc-default-executor"]},
        {"type": "log", "keyword": ["injected", "error"]}, {"type": "log", "keyword": ["invocationtargetexception"]},
        {"type": "log", "keyword": ["transformlistener"]},
        {"type": "metric", "keyword": ["client_error", "client_error_ratio", "error", "error_ratio"]}],
       ["{service}-{method_lower}-exception"],
       ["JVM exception thrown", "application exception", "runtime error", "exception stack trace"])
def jvm_exception(day, target, sl, rng):
    """A Byteman rule throws in the service's method: most requests fail, and the JVM logs the exception."""
    _fail(day, target.pods, sl, 0.6, "exception")
    messages = _jvm_rule(day, target, "{service}-{method_lower}-exception") + (
        "Exception in thread grpc-default-executor-2: Caught ThrowException java.lang.Exception: injected error",)
    _burst(day, target.pods, sl, messages, 3)


# --- network (caller -> callee link) ------------------------------------------------

_NET_OBS = [{"type": "metric", "keyword": ["rrt", "rrt_max"]}, {"type": "metric", "keyword": ["request", "response"]},
            {"type": "metric", "keyword": list(_NET_KPIS)}]
_NET_METRICS = ["rrt", "rrt_max", "request", "response", *_NET_KPIS]
# What holds where a network fault acts on a whole service rather than on one link (`_link`): its callers wait on it
# and give up no call, so its request counts and its bytes keep their level.
_HELD = ("request", "response", *_NET_KPIS)
_NET_LOGS = [{"type": "log", "keyword": ["Error", "while", "dialing"]}, {"type": "log", "keyword": ["failure"]},
             {"type": "log", "keyword": ["Rpc", "error", "code", "canceled", "desc", "context canceled"]},
             {"type": "log", "keyword": ["timeout"]}, {"type": "log", "keyword": ["unavailable"]}]
_FRONT_TRACE = [{"type": "trace", "subtype": "latency_anomalies", "keyword": ["{entry}"]}]


def _links(topo: Topology, target: Target) -> list[tuple[str, str]]:
    """The caller -> callee links a network fault degrades: its link, or every link into its service."""
    if target.edge:
        return [target.edge]
    service = topo.service_of[target.pods[0]]
    return [(caller, service) for caller in topo.system.callers(service)]


def _link(day: Day, target: Target, sl: slice, ms: float, err: float, kind: str | tuple[str, ...], net_mult: float,
          rng, traffic: float) -> None:
    """A degraded caller -> callee link (or every link into a service, where a service's own network is the
    target): slower or failing calls, and fewer of them at both ends (clients wait or give up), so both ends'
    request and response counts fall, as the real key metrics say."""
    topo = day.topo
    links = _links(topo, target)
    if not target.edge:  # a service's own network: its callers wait on it (they give up no call), its bytes hold
        traffic, net_mult = 1.0, 1.0
    delay = _ramp(sl, rng, 0.8 * ms, 1.2 * ms)[:, 0]
    pods: dict[str, None] = {}
    for src, dst in links:
        e_ms, e_err = day.edge(src, dst)
        e_ms[sl] += delay
        e_err[sl] = np.maximum(e_err[sl], err)
        day.edge_err_kind[(src, dst)] = kind
        pods |= dict.fromkeys(topo.pods_of(src) + topo.pods_of(dst))
        if err:
            _client_logs(day, topo.pods_of(dst), sl, (kind,) if isinstance(kind, str) else kind,
                         callers=topo.pods_of(src))
    idx = _idx(day, list(pods))
    day.traffic[sl, idx] *= traffic
    for k in _NET_KPIS:
        day.pod_kpi[k][sl, idx] *= net_mult


@fault("network delay", "network attack", {"link", "service"}, _FRONT_TRACE + _NET_OBS, _NET_METRICS,
       ["high network latency", "increased RTT", "network delay spike", "elevated transmission delay"])
def network_delay(day, target, sl, rng):
    """The link's packets are held back: every call over it is slower, and fewer are made while users wait."""
    _link(day, target, sl, 200.0, 0.0, "deadline", 0.5, rng, traffic=0.6)


@fault("network loss", "network attack", {"link", "service"},
       [{"type": "log", "keyword": ["deadlineexceeded"]}] + _FRONT_TRACE + _NET_OBS, _NET_METRICS,
       ["packet loss", "network packet drop", "high loss rate", "dropped packets"])
def network_loss(day, target, sl, rng):
    """The link drops packets: retransmissions slow calls, some time out, are given up or cannot connect; the
    retransmissions and retries cost both ends cpu."""
    _link(day, target, sl, 350.0, 0.25, ("deadline", "canceled", "dial"), 0.5, rng, traffic=0.5)
    src, dst = target.edge or (None, None)
    if src:
        day.pod_kpi["pod_cpu_usage"][sl, _idx(day, day.topo.pods_of(src) + day.topo.pods_of(dst))] *= 1.3


@fault("network corrupt", "network attack", {"link", "service"},
       _NET_LOGS + _FRONT_TRACE + [{"type": "metric", "keyword": ["client_error", "client_error_ratio", "error",
                                                                    "error_ratio"]}] + _NET_OBS,
       _NET_METRICS, ["packet corruption", "data corruption", "bit errors on network", "corrupted packets"])
def network_corrupt(day, target, sl, rng):
    """The link corrupts packets: connections are reset, calls given up, handshakes time out; retransmissions
    raise the traffic."""
    _link(day, target, sl, 120.0, 0.3, ("reset", "canceled", "dial"), 1.6, rng, traffic=0.6)
    links = _links(day.topo, target)
    callee = day.topo.system.components[links[0][1]] if links else None
    if callee and callee.kind == "cache":  # its clients time out on the corrupted replies
        _burst(day, [p for src, _ in links for p in day.topo.pods_of(src)], sl,
               (ERRORS["storage"][2].format(failure=callee.failure),), 2)


# --- misconfiguration and code ---------------------------------------------------

_CALLER_ERRORS = [{"type": "metric", "keyword": ["client_error", "client_error_ratio", "error", "error_ratio"]},
                  {"type": "metric", "keyword": ["request", "response"]}]


@fault("dns error", "network attack", SERVICE,
       [{"type": "log", "keyword": ["no such host"]}, {"type": "log", "keyword": ["Internal"]},
        {"type": "metric", "keyword": ["server_error", "server_error_ratio", "error", "error_ratio"]}],
       ["error", "error_ratio", "server_error", "server_error_ratio", "no such host"],
       ["DNS resolution failure", "DNS lookup error", "name resolution failed", "dns error"])
def dns_error(day, target, sl, rng):
    """The target's name lookups fail: each call it makes (to a service it needs, its database, its telemetry)
    cannot find an address, so most of its requests fail inside it and it answers its callers `Internal`
    (server errors at the target; its callers log them); it logs the lookups that fail."""
    _fail(day, target.pods, sl, _ramp(sl, rng, 0.6, 0.8), "lookup")
    service = day.topo.service_of[target.pods[0]]
    needs = day.topo.system.callees(service) or ["opentelemetry-collector"]
    _burst(day, target.pods, sl, [f"dial tcp: lookup {c} on 169.254.25.10:53: no such host" for c in needs], 2)
    _client_logs(day, target.pods, sl, ("lookup",))


@fault("target port misconfig", "misconfiguration", SERVICE,
       [{"type": "log", "keyword": ["Connection", "refused"]}, {"type": "log", "keyword": ["Error", "while", "dialing"]},
        {"type": "log", "keyword": ["rpc", "error"]},
        {"type": "metric", "keyword": ["client_error", "client_error_ratio", "error", "error_ratio"]},
        {"type": "metric", "keyword": ["request", "response"]}],
       ["request", "response", "error", "error_ratio", "client_error", "connection refused"],
       ["target port misconfiguration", "wrong service port", "port mismatch", "connection refused on port"])
def target_port_misconfig(day, target, sl, rng):
    """The target's service sends connections to a port nothing listens on: they are refused, so the target
    serves almost nothing (requests, cpu and traffic down) and its clients fail and log it (a checkout that
    needs it answers the frontend `Internal`)."""
    _cut_off(day, target.pods, sl, "refused", ("pod_cpu_usage", *_NET_KPIS), 0.1)


@fault("code error", "code defect", SERVICE,
       [{"type": "log", "keyword": ["code error"]}, {"type": "log", "keyword": ["nil pointer dereference"]},
        {"type": "log", "keyword": ["context canceled"]}, {"type": "log", "keyword": ["timeout"]},
        {"type": "metric", "keyword": ["pod_processes"]},
        {"type": "metric", "keyword": ["client_error", "client_error_ratio", "error", "error_ratio"]}],
       ["pod_processes", "error", "error_ratio", "code error"],
       ["code defect", "application bug", "software error", "code error"])
def code_error(day, target, sl, rng):
    """A defect on a request path panics and the process exits (it logs the panic); kubelet restarts it with a
    growing back-off, so the pod is down more and more of the window (no process while it waits): requests that
    hit the defect fail, calls in flight at each crash are canceled, calls made while it is down are refused or
    time out."""
    down = _crash_loop(sl.stop - sl.start, rng)
    mostly = (down.mean(1) >= 0.5)[:, None]
    day.pod_kpi["pod_processes"][sl, _idx(day, target.pods)] *= ~down[:, 30:31]  # sampled mid-minute
    _cut_off(day, target.pods, sl, "refused", ("pod_cpu_usage", *_NET_KPIS), 0.1,
             logged=("canceled", "refused", "dial"), down=mostly)
    _fail(day, target.pods, sl, np.where(mostly, 0.0, 0.5), "internal")
    _burst(day, target.pods, sl, ("code error: panic: runtime error: invalid memory address or nil pointer "
                                  "dereference [signal SIGSEGV: segmentation violation]",), 1)
    _cold_start(day, target.pods, sl.stop)


# --- TiDB ---------------------------------------------------------------------------

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
    backlog = _ramp(sl, rng, 0.7, 1.0)[:, 0] * np.minimum(1.0, (np.arange(sl.stop - sl.start) + 1) / 4)
    saturated = _ramp(sl, rng, 0.85, 0.99)[:, 0]
    for series in _own(day, part, "io"):
        series[sl] = saturated
    for series in _own(day, part, "wait"):
        series[sl] *= 1 + 50 * backlog
    watcher = _watcher(day, part)
    for series in _own(day, part, "pending") if watcher else ():
        series[sl] += np.rint(_own(day, watcher, "regions")[0][sl] * 0.6 * backlog)
    for role, change in (("stall", None), ("memory", 0.5), ("cpu", 1.5), ("throughput", -0.6)):
        for series in _own(day, part, role):
            if change is None:
                series[sl] += np.rint(5 * backlog)
            else:
                series[sl] *= 1 + change * backlog
    for role, change in (("latency", 25), ("slow", None), ("throughput", -0.4), ("memory", 0.3)):
        for series in _callers_own(day, part, role):
            if change is None:
                series[sl] += np.rint(15 * backlog)
            else:
                series[sl] *= 1 + change * backlog
    day.own_extra_ms[sl, _idx(day, target.pods)] += 90 * backlog[:, None]


# --- code (Byteman rules in a method, as Nezha injects them) ------------------------------

def _break(day: Day, target: Target, sl: slice, rng, kind: str) -> None:
    """A share of the target operation's requests break at its code site (`busiest_site`), growing in a minute."""
    service = day.topo.service_of[target.pods[0]]
    op, step, _ = busiest_site(day.topo.system, service, kind)
    share = np.zeros_like(day.own_err)
    share[sl, _idx(day, target.pods)] = _ramp(sl, rng, 0.5, 0.8)
    day.breaks.setdefault((service, op), []).append(PathBreak(kind, step, share))


@fault("exception", "code defect", {"code"},
       [{"type": "log", "keyword": ["{pair}"]}, {"type": "trace", "subtype": "error_anomalies", "keyword": ["{service}"]}],
       ["{pair}"], ["exception thrown", "application exception", "code defect", "exception"])
def exception(day, target, sl, rng):
    """A method throws: the operation stops after the step where it did (the lines and calls after it vanish), its
    span fails and its caller gets an error."""
    _break(day, target, sl, rng, "exception")


@fault("wrong return", "code defect", {"code"}, [{"type": "log", "keyword": ["{pair}"]}], ["{pair}"],
       ["wrong return value", "incorrect result", "logic error", "wrong return"])
def wrong_return(day, target, sl, rng):
    """A method returns a wrong value: the operation takes the other branch of the step that tests it (its `else`
    line) and returns; nothing fails, the path changed."""
    _break(day, target, sl, rng, "return")


# --- what a service's own switches and queues can do (a system's scenarios name them) ---------------

def _operation(day: Day, target: Target, operation: str | None) -> tuple[str, str]:
    service = day.topo.service_of[target.pods[0]]
    return service, operation or next(iter(day.topo.system.components[service].operations))


@fault("operation failure", "code defect", SERVICE,
       [{"type": "metric", "keyword": ["error", "error_ratio", "server_error", "server_error_ratio"]},
        {"type": "trace", "subtype": "error_anomalies", "keyword": ["{service}"]}],
       ["error", "error_ratio", "server_error"], ["operation failure", "request failures", "feature flag failure"])
def operation_failure(day, target, sl, rng, operation: str | None = None, share: float = 0.5,
                      message: str | None = None):
    """One operation of the service fails `share` of its requests before it does anything (a failure switch, a
    feature flag): its callers get errors, and it logs `message` as it fails them."""
    service, op = _operation(day, target, operation)
    hit = np.zeros_like(day.own_err)
    hit[sl, _idx(day, target.pods)] = share
    day.breaks.setdefault((service, op), []).append(PathBreak("fail", -1, hit))
    text = message or f"{op} failed: {day.topo.system.components[service].failure}"
    _burst(day, target.pods, sl, (text,), 1 + 4 * share)


@fault("unreachable", "network attack", SERVICE,
       [{"type": "log", "keyword": ["no such host"]},
        {"type": "metric", "keyword": ["client_error", "client_error_ratio", "error", "error_ratio"]}],
       ["client_error", "error", "error_ratio", "request"], ["service unreachable", "name resolution failed"])
def unreachable(day, target, sl, rng):
    """No caller can reach it (its address leads nowhere): every call to it fails to connect, so it serves nothing
    and its cpu and network fall to a tenth."""
    _cut_off(day, target.pods, sl, "dns", ("pod_cpu_usage", *_NET_KPIS), 0.1)


@fault("memory leak", "stress test", SERVICE,
       [{"type": "metric", "keyword": ["pod_memory_working_set_bytes"]}, {"type": "metric", "keyword": ["rrt"]}],
       ["pod_memory_working_set_bytes"], ["memory leak", "growing memory usage", "cache leak"])
def memory_leak(day, target, sl, rng):
    """The service keeps what it should let go (a cache that never evicts): its memory grows all through the window,
    and the collector's pauses and work grow with it."""
    idx = _idx(day, target.pods)
    grown = np.linspace(0, 1, sl.stop - sl.start)[:, None]
    day.pod_kpi["pod_memory_working_set_bytes"][sl, idx] += grown * _ramp(sl, rng, 1.2e9, 1.6e9)
    day.pod_kpi["pod_cpu_usage"][sl, idx] += 0.3 * grown
    day.own_factor[sl, idx] *= 1 + 1.5 * grown


@fault("slow responses", "performance", SERVICE,
       [{"type": "metric", "keyword": ["rrt", "rrt_max"]},
        {"type": "trace", "subtype": "latency_anomalies", "keyword": ["{service}"]}],
       ["rrt", "rrt_max"], ["slow responses", "high latency", "delayed responses"])
def slow_responses(day, target, sl, rng):
    """Every response of the service is held back about a second (an injected delay before it answers)."""
    day.own_extra_ms[sl, _idx(day, target.pods)] += _ramp(sl, rng, 800, 1500)


@fault("flood", "traffic surge", SERVICE,
       [{"type": "metric", "keyword": ["request", "response"]}, {"type": "metric", "keyword": ["pod_cpu_usage"]}],
       ["request", "response", "pod_cpu_usage"], ["request flood", "traffic surge", "load spike"])
def flood(day, target, sl, rng):
    """Users flood the service with requests (three to four times its load, from its entry down): it saturates its
    cpu and works slower."""
    surge = _ramp(sl, rng, 2.5, 4.0)
    day.load[sl] *= surge[:, 0]
    idx = _idx(day, target.pods)
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
    in (role `messages`) by `messages` times."""
    for series in _own(day, broker, "lag"):
        series[sl] *= 1 + 100 * backlog
    for series in _own(day, broker, "messages"):
        series[sl] *= 1 + messages * backlog


@fault("consumer stall", "performance", {"consumer"},
       [{"type": "metric", "keyword": ["consumer_lag"]}], ["consumer_lag"],
       ["consumer lag", "stalled consumer", "message backlog"])
def consumer_stall(day, target, sl, rng):
    """A consumer takes its messages late (a stuck poll loop): its messages wait half a minute or more in their
    topic, nothing fails; its work comes in bursts."""
    service = day.topo.service_of[target.pods[0]]
    _lag(day, [service], sl, _ramp(sl, rng, 20_000, 60_000)[:, 0])
    day.pod_kpi["pod_cpu_usage"][sl, _idx(day, target.pods)] *= 0.5


@fault("producer flood", "traffic surge", {"producer"},
       [{"type": "metric", "keyword": ["consumer_lag"]},
        {"type": "metric", "keyword": ["pod_network_transmit_bytes", "pod_network_transmit_packets"]}],
       ["pod_network_transmit_bytes", "pod_cpu_usage"], ["message flood", "producer overload", "topic flood"])
def producer_flood(day, target, sl, rng):
    """A producer floods its topics (a hundred messages where it sent one): its cpu and sent bytes swell, the broker
    takes in many more messages, and every consumer of them falls behind (their lag grows, nothing fails)."""
    service = day.topo.service_of[target.pods[0]]
    backlog = _ramp(sl, rng, 0.7, 1.0)
    idx = _idx(day, target.pods)
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
    backlog = _ramp(sl, rng, 0.7, 1.0)[:, 0]
    _broker_swells(day, broker, sl, backlog, 2)
    _lag(day, _consumers(day.topo.system, broker), sl, 40_000 * backlog)
    for series in _own(day, broker, "memory"):
        series[sl] *= 1 + 0.5 * backlog


# --- nodes ---------------------------------------------------------------------------

def _node(day: Day, target: Target) -> int:
    return day.topo.system.nodes.index(target.node)


@fault("node cpu stress", "node fault", {"node"}, [{"type": "metric", "keyword": ["node_cpu_usage_rate"]}],
       ["node_cpu_usage_rate"],
       ["node CPU overload", "node high CPU usage", "node CPU saturation", "node CPU spike", "node cpu stress"])
def node_cpu_stress(day, target, sl, rng):
    """Stress processes on the node burn its cpu; every pod on it gets less cpu and works slower."""
    n = _node(day, target)
    day.node_kpi["node_cpu_usage_rate"][sl, n] = np.minimum(99.0, 80 + _ramp(sl, rng, 8, 18)[:, 0])
    day.own_factor[sl, _idx(day, target.pods)] *= 1.4


@fault("node memory stress", "node fault", {"node"},
       [{"type": "metric", "keyword": ["node_memory_usage_rate", "node_memory_MemAvailable_bytes"]}],
       ["node_memory_usage_rate"],
       ["node memory exhaustion", "node memory saturation", "node high memory usage", "node memory leak"])
def node_memory_stress(day, target, sl, rng):
    """A process on the node takes most of its free memory (usage up, available bytes down); the page cache
    gives way, so files are read from disk again."""
    n = _node(day, target)
    rate = day.node_kpi["node_memory_usage_rate"]
    rate[sl, n] = np.minimum(97.0, rate[sl, n] + _ramp(sl, rng, 35, 42)[:, 0])
    derive_node_kpis(day.node_kpi)
    # The page cache gives way: files the node's pods use are read from disk again.
    for k in ("node_disk_read_bytes_total", "node_disk_read_time_seconds_total"):
        day.node_kpi[k][sl, n] *= _ramp(sl, rng, 3, 6)[:, 0]


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


def get(name: str, system: System) -> Fault:
    """A fault type the system's description applies: a fault of the library, or one of its scenarios."""
    if name in system.scenarios:
        return scenario(system, name)
    if name not in system.faults:
        raise ScheduleError(f"unknown fault type '{name}' (known: {', '.join(fault_types(system))})")
    return FAULTS[name]


def fault_types(system: System) -> list[str]:
    """Every fault type a system's description applies, sorted: the library's and its scenarios."""
    return sorted({*system.faults, *system.scenarios})


def scenario(system: System, name: str) -> Fault:
    """A system's scenario as a fault type: a fault of the library on one component, with the settings the
    description gives it (an operation, the share of requests it hits, the message it logs), its ground truth the
    library fault's and the message's."""
    spec = system.scenarios[name]
    base = FAULTS[spec["mechanism"]]
    settings = {k: spec[k] for k in ("operation", "share", "message") if k in spec}
    words = spec.get("keywords") or ([spec["message"]] if "message" in spec else [])
    observations = base.key_observations
    if "key_metrics" in spec:  # the metrics it names are those its metric observation looks for
        observations = [o for o in observations if o["type"] != "metric"] + [
            {"type": "metric", "keyword": list(spec["key_metrics"])}]
    return replace(base, name=name, category=spec.get("category", base.category), target=spec["target"],
                   apply=partial(base.apply, **settings) if settings else base.apply,
                   key_observations=observations + [{"type": "log", "keyword": [w]} for w in words],
                   key_metrics=spec.get("key_metrics", base.key_metrics),
                   fault_description=spec.get("description", base.fault_description))

