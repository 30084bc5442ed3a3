"""The fault library: one entry per fault type, and the system description says which apply to which of its
components (by kind, by kind and language, to links, to nodes).

Each entry knows what it can act on, how it changes a `Day` (metrics, latency, errors, log lines) and what the ground
truth says of it (`key_observations`, `key_metrics`, `fault_description`, taken from the real phase-one ground truth
of the 2025 challenge where the type occurs there; `{service}` and `{method}` name the target, `{entry}` the system's
entry, and a gRPC error's words become an HTTP client's where the target speaks HTTP: `HTTP_WORDS`). Callers and
dependants feel the effects through `workload`, so propagation is not written per fault; a datastore's own metrics
move by the roles its description gives them (`system.ROLES`).

The library is split by what a fault acts on (pods, JVMs, the network, code, datastores, load and queues, nodes, the
cluster itself), each
module's entries registered as it is imported; `base` holds the contract they share. The library checks which faults a
description applies (`check`); a description knows nothing of the library.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

from common.errors import DescriptionError, ScheduleError

from ..system import System
from . import code, datastores, jvm, kubernetes, load, network, nodes, pods
from .base import FAULTS, OPENING, Fault, Target, applies, busiest_site, can, code_site

__all__ = ["CLUSTER", "FAULTS", "OPENING", "Fault", "Target", "applies", "busiest_site", "can", "check", "code_site",
           "fault_types", "get", "scenario"]
LIBRARY = (pods, jvm, network, code, datastores, load, nodes, kubernetes)  # the modules whose entries FAULTS holds, as imported
# The cluster's own faults act on any system's services, as every system here runs on Kubernetes: a schedule may name
# them where its description does not. Their evidence is the cluster's state (`simulate --cluster-state`).
CLUSTER = tuple(sorted(name for name, f in FAULTS.items() if f.cluster))


def check(system: System) -> System:
    """The system, once each fault its description applies can act on what it names, and each scenario's mechanism
    on its target; DescriptionError naming the file and the field where one cannot."""
    def fail(where: str, message: str):
        raise DescriptionError(f"{system.path or system.name}: {where}: {message}")

    comps = system.components
    for fault, kinds in system.faults.items():
        for i, kind in enumerate(kinds):
            problem = applies(fault, kind, system)
            if problem:
                fail(f"faults.{fault}[{i}]", problem)
    for name, spec in system.scenarios.items():
        where = f"scenarios.{name}"
        if name in system.faults:
            fail(where, "a scenario is named as a fault of the library the description applies already")
        target = comps.get(spec["target"])
        if target is None:
            fail(f"{where}.target", f"'{spec['target']}' is not a declared component")
        problem = applies(spec["mechanism"], target.kind + (f":{target.language}" if target.language else ""), system)
        if problem:
            fail(f"{where}.mechanism", problem)
        if not can(FAULTS[spec["mechanism"]], target):
            fail(f"{where}.target", f"'{spec['mechanism']}' cannot act on '{spec['target']}'")
        if spec.get("operation") and spec["operation"] not in target.operations:
            fail(f"{where}.operation", f"'{spec['operation']}' is not an operation of '{spec['target']}'")
    return system


def get(name: str, system: System) -> Fault:
    """A fault type the system's description applies (a fault of the library, or one of its scenarios), or one of
    the cluster's own."""
    if name in system.scenarios:
        return scenario(system, name)
    if name not in system.faults and name not in CLUSTER:
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
