"""Faults of a service's code: a defect that panics, an exception or a wrong return at a code site (as Nezha injects
them), an operation that fails (a failure switch, a feature flag), responses held back."""

from __future__ import annotations

import numpy as np

from ..workload import Day, PathBreak
from .base import (burst, busiest_site, cold_start, crash_loop, cut_off, fail_inside, fault, indices, NET_KPIS, ramp,
                   SERVICE, Target)


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
    down = crash_loop(sl.stop - sl.start, rng)
    mostly = (down.mean(1) >= 0.5)[:, None]
    day.pod_kpi["pod_processes"][sl, indices(day, target.pods)] *= ~down[:, 30:31]  # sampled mid-minute
    cut_off(day, target.pods, sl, "refused", ("pod_cpu_usage", *NET_KPIS), 0.1,
             logged=("canceled", "refused", "dial"), down=mostly)
    fail_inside(day, target.pods, sl, np.where(mostly, 0.0, 0.5), "internal")
    burst(day, target.pods, sl, ("code error: panic: runtime error: invalid memory address or nil pointer "
                                  "dereference [signal SIGSEGV: segmentation violation]",), 1)
    cold_start(day, target.pods, sl.stop)


# --- code (Byteman rules in a method, as Nezha injects them) ------------------------------

def _break(day: Day, target: Target, sl: slice, rng, kind: str) -> None:
    """A share of the target operation's requests break at its code site (`busiest_site`), growing in a minute."""
    service = day.topo.service_of[target.pods[0]]
    op, step, _ = busiest_site(day.topo.system, service, kind)
    share = np.zeros_like(day.own_err)
    share[sl, indices(day, target.pods)] = ramp(sl, rng, 0.5, 0.8)
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
    hit[sl, indices(day, target.pods)] = share
    day.breaks.setdefault((service, op), []).append(PathBreak("fail", -1, hit))
    text = message or f"{op} failed: {day.topo.system.components[service].failure}"
    burst(day, target.pods, sl, (text,), 1 + 4 * share)


@fault("slow responses", "performance", SERVICE,
       [{"type": "metric", "keyword": ["rrt", "rrt_max"]},
        {"type": "trace", "subtype": "latency_anomalies", "keyword": ["{service}"]}],
       ["rrt", "rrt_max"], ["slow responses", "high latency", "delayed responses"])
def slow_responses(day, target, sl, rng):
    """Every response of the service is held back about a second (an injected delay before it answers)."""
    day.own_extra_ms[sl, indices(day, target.pods)] += ramp(sl, rng, 800, 1500)
