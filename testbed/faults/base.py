"""The library's contract: a fault type (`Fault`) and what it hits (`Target`), the registry its entries join
(`fault`), what a description may apply each to (`applies`, `can`), where a code fault acts (`code_site`), and the
moves its mechanisms share (a failing share of requests, a pod cut off, a burst of lines, a crash loop)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from common.errors import ScheduleError
from etl.loglines import POSITION

from ..failures import HTTP_WORDS, failure_line
from ..system import Component, System
from ..topology import Topology
from ..workload import MINUTES, Day, LogBurst, operations_per_entry_request, series_names


JVM = {"java", "kotlin", "scala"}  # languages whose services run on a JVM (Byteman's rules, garbage collection)
KINDS = ("service", "database", "cache", "storage", "coordinator", "broker")


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
    # What comes through the service's Service (users' requests), which spreads it over its replicas: never one pod's
    spread: bool = False

    @property
    def cluster(self) -> bool:
        """A fault of the cluster's own making: it acts on any system's workloads (a spec is a workload's, never one
        pod's), where the system's description names none."""
        return self.category == "kubernetes"

    def candidates(self, topo: Topology) -> list[Target]:
        """Every target this fault type can hit in the topology, as its system's description says."""
        system = topo.system
        if self.target:
            return [Target("service", tuple(topo.pods_of(self.target)))]
        out = []
        for spec in system.faults.get(self.name, ("service",) if self.cluster else ()):
            if spec == "node":
                out += [Target("node", tuple(topo.pods_on(n)), node=n) for n in system.workers]
            elif spec == "link":
                out += [Target("service", edge=edge) for edge in links(system)]
            else:
                # a network fault acts on a service's links: one that only takes messages has none
                comps = [c.name for c in system.components.values() if matches(c, spec) and can(self, c)
                         and ("link" not in self.acts_on or system.callers(c.name) or system.callees(c.name))]
                out += [Target("service", tuple(topo.pods_of(c))) for c in comps]
                # a network fault acts on a service's links, the cluster's on a workload's spec, and users' load
                # comes through the Service: none of them on one pod
                if "link" not in self.acts_on and not self.cluster and not self.spread:
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


def fault(name, category, acts_on, observations, metrics, descriptions, window_seconds=None, own_roles=(),
          spread=False):
    def register(apply):
        FAULTS[name] = Fault(name, category, frozenset(acts_on), apply, observations, metrics, descriptions,
                             window_seconds, own_roles=tuple(own_roles), spread=spread)
        return apply
    return register


def indices(day: Day, pods) -> list[int]:
    return [day.topo.index(p) for p in pods]


def ramp(sl: slice, rng: np.random.Generator, lo: float, hi: float) -> np.ndarray:
    """A fault's strength over its window: it builds up in a minute or two, then holds with jitter."""
    n = sl.stop - sl.start
    up = np.minimum(1.0, (np.arange(n) + 1) / 2.0)
    return (up * rng.uniform(lo, hi, n))[:, None]


def fail_inside(day: Day, pods, sl: slice, p, kind: str) -> None:
    idx = indices(day, pods)
    day.own_err[sl, idx] = np.maximum(day.own_err[sl, idx], p)
    day.own_err_kind.update({pod: kind for pod in pods})


def cut_off(day: Day, pods, sl: slice, kind: str, kpis, factor: float, logged=None, down=True) -> None:
    """Connections to `pods` fail with `kind` in the minutes of `sl` they are `down` (all, or a column of one flag a
    minute); their `kpis` drop to `factor` of normal then; their clients log the failures (`logged`, by default
    `kind`)."""
    idx = indices(day, pods)
    day.unreachable[sl, idx] |= down
    day.unreachable_kind.update({pod: kind for pod in pods})
    for k in kpis:
        day.pod_kpi[k][sl, idx] *= np.where(down, factor, 1.0)
    client_logs(day, pods, sl, logged or (kind,))


def burst(day: Day, pods, sl: slice, messages, per_minute: float, severity="error") -> None:
    day.bursts.append(LogBurst(tuple(pods), sl.start, sl.stop, tuple(messages), per_minute, severity))


def client_logs(day: Day, callees, sl: slice, kinds, per_minute: float = 1.0, callers=None) -> None:
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
        burst(day, pods, sl, dict.fromkeys(errors), per_minute)
        wrapper = system.components[caller]
        if wrapper.wraps:
            wrapped = [f"{wrapper.failure}: rpc error: code = Internal desc = {wrapper.wraps}: {e}" for e in errors]
            for above in system.callers(caller):
                burst(day, topo.pods_of(above), sl, dict.fromkeys(wrapped), per_minute)


def cold_start(day: Day, pods, minute: int) -> None:
    """A fresh container from `minute` on: memory starts low and warms up over half an hour, caches are cold."""
    idx = indices(day, pods)
    after = slice(minute, min(MINUTES, minute + 30))
    warm = np.minimum(1.0, 0.15 + np.arange(after.stop - after.start) / 30.0)[:, None]
    day.pod_kpi["pod_memory_working_set_bytes"][after, idx] *= warm
    day.own_factor[after, idx] *= 1 + 1.5 * (1 - warm)


def crash_loop(minutes: int, rng: np.random.Generator, up: tuple[float, float] = (3, 15)) -> np.ndarray:
    """Second by second, a server that crashes soon after each start: up `up` seconds (by default a few: start-up,
    then the first request that hits the defect), then down for kubelet's restart back-off (10 s, doubling, at most
    300 s). Whether it is down, for each second of `minutes`."""
    down = np.zeros(minutes * 60, bool)
    t, backoff = 0.0, 10.0
    while t < down.size:
        t += rng.uniform(*up)
        down[int(t):int(t + backoff)] = True
        t += backoff
        backoff = min(2 * backoff, 300.0)
    return down.reshape(minutes, 60)


def own_series(day: Day, component: str, role: str, pods: Collection[str] = ()) -> list[np.ndarray]:
    """A datastore part's own metrics of one role, each a series over the day, of every replica (or of `pods`): each
    replica reports its own."""
    comp = day.topo.system.components[component]
    replicas = day.topo.pods_of(component)
    columns = [replicas.index(p) for p in pods] if pods else range(len(replicas))
    return [day.db_kpi[component][k][:, i] for k, kpi in comp.kpis.items() if role in kpi.roles for i in columns]


def callers_series(day: Day, component: str, role: str) -> list[np.ndarray]:
    """The metrics of one role of the datastore parts that call `component` (TiDB's SQL layer above its storage)."""
    return [series for caller in day.topo.system.callers(component) for series in own_series(day, caller, role)]


def watcher_of(day: Day, component: str) -> str | None:
    """The part that watches `component` (counts its stores and regions), if the description names one."""
    return next((c for c, comp in day.topo.system.components.items() if comp.watches == component), None)


NET_KPIS = ("pod_network_receive_bytes", "pod_network_transmit_bytes",
             "pod_network_receive_packets", "pod_network_transmit_packets")
# What holds where a network fault acts on a whole service rather than on one link (`_link`): its callers wait on it
# and give up no call, so its request counts and its bytes keep their level.
_HELD = ("request", "response", *NET_KPIS)
