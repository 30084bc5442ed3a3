"""The simulated system's pods: which component each runs, on which node, at which address (drawn from the seed)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .system import Component, System, load


@dataclass(frozen=True)
class Topology:
    """Pods, their components and the nodes they run on, for one system."""

    system: System
    pods: tuple[str, ...]
    service_of: dict[str, str]
    node_of: dict[str, str]
    ip_of: dict[str, str]

    @classmethod
    def build(cls, seed: int, system: System | None = None) -> "Topology":
        system = system or load("hipstershop")
        rng = np.random.default_rng([seed, 1])
        service_of = {f"{name}-{i}": name for name, comp in system.components.items() for i in range(comp.replicas)}
        pods = list(service_of)
        workers = system.workers
        node_of = {pod: workers[int(rng.integers(len(workers)))] for pod in pods}
        ip_of = {pod: f"10.233.{int(rng.integers(64, 128))}.{int(rng.integers(2, 250))}" for pod in pods}
        return cls(system, tuple(pods), service_of, node_of, ip_of)

    def pods_of(self, service: str) -> list[str]:
        return [p for p in self.pods if self.service_of[p] == service]

    def pods_on(self, node: str) -> list[str]:
        return [p for p in self.pods if self.node_of[p] == node]

    def index(self, pod: str) -> int:
        return self.pods.index(pod)

    def component(self, name: str) -> Component:
        """A component, or the component a pod runs."""
        return self.system.components[self.service_of.get(name, name)]

    @property
    def services(self) -> tuple[str, ...]:
        """Every component, in the description's order."""
        return tuple(self.system.components)
