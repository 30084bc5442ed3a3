"""The simulated system: HipsterShop (Online Boutique) with redis-cart and TiDB, as in DATA.md."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NAMESPACE = "hipstershop"

SERVICES = (
    "adservice",
    "cartservice",
    "checkoutservice",
    "currencyservice",
    "emailservice",
    "frontend",
    "paymentservice",
    "productcatalogservice",
    "recommendationservice",
    "shippingservice",
)
REPLICAS = 3
# Single-pod components: service -> pod.
STORES = {
    "redis-cart": "redis-cart-0",
    "tidb-tidb": "tidb-tidb-0",
    "tidb-pd": "tidb-pd-0",
    "tidb-tikv": "tidb-tikv-0",
}
TIDB_PARTS = ("tidb-tidb", "tidb-pd", "tidb-tikv")
WORKERS = tuple(f"aiops-k8s-{i:02d}" for i in range(1, 9))
MASTERS = ("k8s-master1", "k8s-master2", "k8s-master3")
NODES = WORKERS + MASTERS

# Who calls whom (Online Boutique); cartservice keeps carts in redis, productcatalog reads TiDB.
CALLS = {
    "frontend": (
        "adservice",
        "cartservice",
        "checkoutservice",
        "currencyservice",
        "productcatalogservice",
        "recommendationservice",
        "shippingservice",
    ),
    "checkoutservice": (
        "cartservice",
        "currencyservice",
        "emailservice",
        "paymentservice",
        "productcatalogservice",
        "shippingservice",
    ),
    "recommendationservice": ("productcatalogservice",),
    "cartservice": ("redis-cart",),
    "productcatalogservice": ("tidb-tidb",),
    "tidb-tidb": ("tidb-pd", "tidb-tikv"),
}

# gRPC service name and port of each traced service.
GRPC = {
    "adservice": ("hipstershop.AdService", 9555),
    "cartservice": ("hipstershop.CartService", 7070),
    "checkoutservice": ("hipstershop.CheckoutService", 5050),
    "currencyservice": ("hipstershop.CurrencyService", 7000),
    "emailservice": ("hipstershop.EmailService", 5000),
    "paymentservice": ("hipstershop.PaymentService", 50051),
    "productcatalogservice": ("hipstershop.ProductCatalogService", 3550),
    "recommendationservice": ("hipstershop.RecommendationService", 8080),
    "shippingservice": ("hipstershop.ShippingService", 50051),
}

# Mean own processing time (ms) of one request, before faults.
OWN_MS = {
    "frontend": 2.0,
    "adservice": 3.0,
    "cartservice": 2.5,
    "checkoutservice": 3.0,
    "currencyservice": 1.2,
    "emailservice": 4.0,
    "paymentservice": 1.5,
    "productcatalogservice": 4.0,
    "recommendationservice": 3.5,
    "shippingservice": 1.5,
    "redis-cart": 0.4,
    "tidb-tidb": 1.5,
    "tidb-pd": 0.3,
    "tidb-tikv": 1.0,
}


@dataclass(frozen=True)
class Topology:
    """Pods, their services and the nodes they run on (placement is drawn from the seed)."""

    pods: tuple[str, ...]
    service_of: dict[str, str]
    node_of: dict[str, str]
    ip_of: dict[str, str]

    @classmethod
    def build(cls, seed: int) -> "Topology":
        rng = np.random.default_rng([seed, 1])
        pods = [f"{s}-{i}" for s in SERVICES for i in range(REPLICAS)] + list(STORES.values())
        service_of = {f"{s}-{i}": s for s in SERVICES for i in range(REPLICAS)}
        service_of.update({pod: svc for svc, pod in STORES.items()})
        node_of = {pod: WORKERS[int(rng.integers(len(WORKERS)))] for pod in pods}
        ip_of = {pod: f"10.233.{int(rng.integers(64, 128))}.{int(rng.integers(2, 250))}" for pod in pods}
        return cls(tuple(pods), service_of, node_of, ip_of)

    def pods_of(self, service: str) -> list[str]:
        return [p for p in self.pods if self.service_of[p] == service]

    def pods_on(self, node: str) -> list[str]:
        return [p for p in self.pods if self.node_of[p] == node]

    def index(self, pod: str) -> int:
        return self.pods.index(pod)

    @property
    def services(self) -> tuple[str, ...]:
        return SERVICES + tuple(STORES)
