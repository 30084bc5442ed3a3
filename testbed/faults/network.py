"""Faults of the network: a caller -> callee link (or every link into a service) delayed, lossy or corrupt; names that
do not resolve; a port nothing listens on; a service no caller can reach."""

from __future__ import annotations

import numpy as np

from ..failures import ERRORS
from ..topology import Topology
from ..workload import Day
from .base import burst, client_logs, cut_off, fail_inside, fault, indices, NET_KPIS, ramp, SERVICE, Target


_NET_OBS = [{"type": "metric", "keyword": ["rrt", "rrt_max"]}, {"type": "metric", "keyword": ["request", "response"]},
            {"type": "metric", "keyword": list(NET_KPIS)}]
_NET_METRICS = ["rrt", "rrt_max", "request", "response", *NET_KPIS]
_NET_LOGS = [{"type": "log", "keyword": ["Error", "while", "dialing"]}, {"type": "log", "keyword": ["failure"]},
             {"type": "log", "keyword": ["Rpc", "error", "code", "canceled", "desc", "context canceled"]},
             {"type": "log", "keyword": ["timeout"]}, {"type": "log", "keyword": ["unavailable"]}]
_FRONT_TRACE = [{"type": "trace", "subtype": "latency_anomalies", "keyword": ["{entry}"]}]


def _links(topo: Topology, target: Target) -> list[tuple[str, str]]:
    """The caller -> callee links a network fault degrades: its link, or every link into its service; the entry,
    which only its users call, meets the fault on every call it makes (its users' link is not simulated)."""
    if target.edge:
        return [target.edge]
    service = topo.service_of[target.pods[0]]
    return ([(caller, service) for caller in topo.system.callers(service)]
            or [(service, callee) for callee in topo.system.callees(service)])


def _link(day: Day, target: Target, sl: slice, ms: float, err: float, kind: str | tuple[str, ...], net_mult: float,
          rng, traffic: float) -> None:
    """A degraded caller -> callee link (or every link into a service, where a service's own network is the
    target): slower or failing calls, and fewer of them at both ends (clients wait or give up), so both ends'
    request and response counts fall, as the real key metrics say."""
    topo = day.topo
    links = _links(topo, target)
    if not target.edge:  # a service's own network: its callers wait on it (they give up no call), its bytes hold
        traffic, net_mult = 1.0, 1.0
    delay = ramp(sl, rng, 0.8 * ms, 1.2 * ms)[:, 0]
    pods: dict[str, None] = {}
    for src, dst in links:
        e_ms, e_err = day.edge(src, dst)
        e_ms[sl] += delay
        e_err[sl] = np.maximum(e_err[sl], err)
        day.edge_err_kind[(src, dst)] = kind
        pods |= dict.fromkeys(topo.pods_of(src) + topo.pods_of(dst))
        if err:
            client_logs(day, topo.pods_of(dst), sl, (kind,) if isinstance(kind, str) else kind,
                         callers=topo.pods_of(src))
    idx = indices(day, list(pods))
    day.traffic[sl, idx] *= traffic
    for k in NET_KPIS:
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
        day.pod_kpi["pod_cpu_usage"][sl, indices(day, day.topo.pods_of(src) + day.topo.pods_of(dst))] *= 1.3


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
        burst(day, [p for src, _ in links for p in day.topo.pods_of(src)], sl,
               (ERRORS["storage"][2].format(failure=callee.failure),), 2)


@fault("dns error", "network attack", SERVICE,
       [{"type": "log", "keyword": ["no such host"]}, {"type": "log", "keyword": ["Internal"]},
        {"type": "metric", "keyword": ["server_error", "server_error_ratio", "error", "error_ratio"]}],
       ["error", "error_ratio", "server_error", "server_error_ratio", "no such host"],
       ["DNS resolution failure", "DNS lookup error", "name resolution failed", "dns error"])
def dns_error(day, target, sl, rng):
    """The target's name lookups fail: each call it makes (to a service it needs, its database, its telemetry)
    cannot find an address, so most of its requests fail inside it and it answers its callers `Internal`
    (server errors at the target; its callers log them); it logs the lookups that fail."""
    fail_inside(day, target.pods, sl, ramp(sl, rng, 0.6, 0.8), "lookup")
    service = day.topo.service_of[target.pods[0]]
    needs = day.topo.system.callees(service) or ["opentelemetry-collector"]
    burst(day, target.pods, sl, [f"dial tcp: lookup {c} on 169.254.25.10:53: no such host" for c in needs], 2)
    client_logs(day, target.pods, sl, ("lookup",))


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
    cut_off(day, target.pods, sl, "refused", ("pod_cpu_usage", *NET_KPIS), 0.1)


@fault("unreachable", "network attack", SERVICE,
       [{"type": "log", "keyword": ["no such host"]},
        {"type": "metric", "keyword": ["client_error", "client_error_ratio", "error", "error_ratio"]}],
       ["client_error", "error", "error_ratio", "request"], ["service unreachable", "name resolution failed"])
def unreachable(day, target, sl, rng):
    """No caller can reach it (its address leads nowhere): every call to it fails to connect, so it serves nothing
    and its cpu and network fall to a tenth."""
    cut_off(day, target.pods, sl, "dns", ("pod_cpu_usage", *NET_KPIS), 0.1)
