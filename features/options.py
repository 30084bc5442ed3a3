"""Fault-type hypotheses from a candidate's evidence signature, each with the key metric or
log keyword that supports it. Fault types are the challenge's 18; a Nezha fault maps to the
nearest of them (its ground truth lists both names)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .evidence import Item
from .ranker import ERROR_ORIGIN, METRIC_KINDS, MISSING_CALLS, PATH

# Evidence the ranker made from other components' (a caller's missing calls, from its callees' falls): no check of
# the component itself reads it, so none can find it gone.
DERIVED = "derived"

FAULT_TYPES = (
    "cpu stress", "memory stress", "network delay", "network loss", "network corrupt", "pod failure", "pod kill",
    "jvm cpu", "jvm gc", "jvm latency", "jvm exception", "dns error", "target port misconfig", "code error",
    "io fault", "node cpu stress", "node memory stress", "node disk fill",
)
# Log and trace words -> fault type, first match wins.
WORDS = (
    (re.compile(r"no such host|dns|lookup", re.I), "dns error"),
    (re.compile(r"refused", re.I), "target port misconfig"),
    (re.compile(r"\bgc\b|garbage", re.I), "jvm gc"),
    (re.compile(r"stress|cpu", re.I), "jvm cpu"),
    (re.compile(r"latency|delay", re.I), "jvm latency"),
    (re.compile(r"exception|throw", re.I), "jvm exception"),
    (re.compile(r"deadline|timeout|unavailable|cancel|reset|dial", re.I), "network loss"),
    (re.compile(r"error|fail|panic", re.I), "code error"),
)
BY_SIGNAL = {
    "cpu": ("cpu stress", "node cpu stress"), "processes": ("cpu stress", "cpu stress"),
    "memory": ("memory stress", "node memory stress"), "disk": ("io fault", "node disk fill"),
    "network": ("network loss", "network loss"), "link": ("network delay", "network delay"),
    "latency": ("network delay", "network delay"), "self time": ("cpu stress", "node cpu stress"),
    "silence": ("pod failure", "pod failure"), "up": ("pod failure", "pod failure"),
    "traffic": ("pod kill", "pod kill"), "errors": ("code error", "code error"),
    "path": ("code error", "code error"),
}


@dataclass(frozen=True)
class Option:
    fault_type: str
    key: str  # the key metric or keyword, verbatim
    evidence: str  # the evidence line it rests on
    kind: str = "metric"  # that evidence's kind (metric, changepoint, silence, log, trace), or DERIVED


def fault_type(item: Item, level: str) -> str:
    if item.kind == "state":  # the cluster's own words name it, in its taxonomy
        return item.key
    if item.kind in ("log", "trace") and item.signal in ("log", "errors"):
        word = next((t for pattern, t in WORDS if pattern.search(item.text)), None)
        if word:
            return word
    if item.kind == "silence":  # what stops: a pod that is gone, or a process that died and was started again
        return "pod kill" if item.back else "pod failure"
    if item.fell and item.signal in ("memory", "processes") and level != "node":  # a container started afresh
        return "pod kill"  # (a node's available memory that falls is its memory filling)
    pair = BY_SIGNAL.get(item.signal, ("code error", "code error"))
    return pair[1] if level == "node" else pair[0]


def options(evidence: list[Item], level: str, limit: int = 2, found: list[Item] = ()) -> list[Option]:
    """The fault types `evidence` (a candidate's shown evidence, strongest first) supports, each with its key; where
    errors lead it, a broken code path among everything `found` of its own names the fault first."""
    if any(i.signal in ("cpu", "processes") and not i.fell for i in evidence):
        # A component's own latency and self time are what its cpu rising produces: the cpu names the fault.
        evidence = sorted(evidence, key=lambda i: i.signal in ("latency", "self time"))
    broke = next((i for i in [*evidence, *found] if i.signal == PATH and not i.echo), None)
    if broke and evidence and evidence[0].signal in ("errors", ERROR_ORIGIN):
        # Its errors are what its own code path breaking produces: the break names the fault.
        evidence = sorted([broke, *(i for i in evidence if i is not broke)],
                          key=lambda i: i.signal in ("errors", ERROR_ORIGIN))
    # What the telemetry shows of a pod (its silence, its callers' errors) the cluster's own state says the why of:
    # its words name the fault.
    said = next((i for i in [*evidence, *found] if i.kind == "state"), None)
    if said:
        evidence = [said, *(i for i in evidence if i is not said)]
    # A process that stopped after its memory rose was killed for its memory (out of memory), whether the telemetry
    # shows it gone or back or the cluster says OOMKilled: what filled the memory is the fault.
    grew = next((i for i in [*evidence, *found]
                 if i.signal == "memory" and i.kind in METRIC_KINDS and not i.fell and not i.echo), None)
    found: dict[str, Option] = {}
    for item in evidence:  # strongest first, as the ranker orders it
        kind = fault_type(item, level)
        if kind in ("pod kill", "pod failure", "oom_killed", "container_memory_limit_too_low") and grew:
            kind, item = "memory stress", grew
        if kind not in found:
            found[kind] = Option(kind, item.key, item.text, DERIVED if item.signal == MISSING_CALLS else item.kind)
        if len(found) == limit:
            break
    return list(found.values())
