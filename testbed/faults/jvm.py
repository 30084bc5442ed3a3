"""Faults of a service on a JVM, as Byteman rules inject them: CPU, garbage collection, latency, an exception."""

from __future__ import annotations

from ..workload import Day
from .base import burst, fail_inside, fault, indices, ramp, Target


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


@fault("jvm cpu", "jvm fault", {"jvm"},
       [{"type": "log", "keyword": ["{service}--stress"]}, {"type": "log", "keyword": ["invocationtargetexception"]},
        {"type": "log", "keyword": ["transformlistener"]},
        {"type": "trace", "subtype": "latency_anomalies", "keyword": ["{entry}"]},
        {"type": "metric", "keyword": ["pod_cpu_usage"]}, {"type": "metric", "keyword": ["rrt", "rrt_max"]}],
       ["pod_cpu_usage", "{service}--stress"],
       ["JVM CPU spike", "JVM CPU overload", "JVM high CPU usage", "JVM CPU saturation"])
def jvm_cpu(day, target, sl, rng):
    """A Byteman rule makes the JVM spin on cpu (its agent logs the rule firing); requests wait for the cpu."""
    idx = indices(day, target.pods)
    day.pod_kpi["pod_cpu_usage"][sl, idx] += ramp(sl, rng, 0.9, 1.2)
    day.own_factor[sl, idx] *= ramp(sl, rng, 3.0, 5.0) + 1
    burst(day, target.pods, sl, _jvm_rule(day, target, "{service}--stress"), 3, "warn")


@fault("jvm gc", "jvm fault", {"jvm"},
       [{"type": "log", "keyword": ["{service}--gc"]}, {"type": "log", "keyword": ["GCHelper"]},
        {"type": "log", "keyword": ["invocationtargetexception"]}, {"type": "log", "keyword": ["transformlistener"]}],
       ["{service}--gc", "GCHelper", "gc", "garbage collection"],
       ["frequent GC pauses", "long GC pause", "JVM garbage collection spike", "excessive GC activity"])
def jvm_gc(day, target, sl, rng):
    """A Byteman rule forces full garbage collections: pauses add to every request, the collector uses cpu."""
    idx = indices(day, target.pods)
    day.own_extra_ms[sl, idx] += ramp(sl, rng, 30, 120)
    day.pod_kpi["pod_cpu_usage"][sl, idx] += ramp(sl, rng, 0.3, 0.5)
    messages = _jvm_rule(day, target, "{service}--gc") + ("GCHelper: forcing full garbage collection (System.gc) pause 412 ms",)
    burst(day, target.pods, sl, messages, 4, "warn")


@fault("jvm latency", "jvm fault", {"jvm"},
       [{"type": "log", "keyword": ["{service}-{method}-latency"]},
        {"type": "log", "keyword": ["invocationtargetexception"]}, {"type": "log", "keyword": ["transformlistener"]},
        {"type": "trace", "subtype": "latency_anomalies", "keyword": ["{entry}"]}],
       ["{service}-{method}-latency", "rrt", "rrt_max"],
       ["high JVM latency", "JVM response delay", "elevated request latency", "JVM slow response"])
def jvm_latency(day, target, sl, rng):
    """A Byteman rule sleeps in the service's method: every request takes about a second longer."""
    idx = indices(day, target.pods)
    day.own_extra_ms[sl, idx] += ramp(sl, rng, 900, 1500)
    burst(day, target.pods, sl, _jvm_rule(day, target, "{service}-{method}-latency"), 3, "warn")


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
    fail_inside(day, target.pods, sl, 0.6, "exception")
    messages = _jvm_rule(day, target, "{service}-{method_lower}-exception") + (
        "Exception in thread grpc-default-executor-2: Caught ThrowException java.lang.Exception: injected error",)
    burst(day, target.pods, sl, messages, 3)
