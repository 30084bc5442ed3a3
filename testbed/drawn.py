"""Systems nobody here chose: descriptions drawn at random from the schema's space, so that the ranking is measured on
shapes its authors did not write (`rcalab bench systems`). A drawn system has 5 to 60 components of every kind: an
entry, services in layers (chains up to eight calls deep, fan-out, optional and repeated calls) of every language,
log style and protocol, with code positions or none; datastores of a few kinds, several instances of one kind, each
with its own metrics; brokers whose topics have one consumer or several. It applies every fault of the library that
can act on it, so every description drawn passes the schema and the checks (a test holds that for 200 seeds)."""

from __future__ import annotations

import numpy as np

from .faults import FAULTS, applies

LANGUAGES = {"go": "go-json", "java": "log4j-json", "python": "python-json", "node": "pino", "kotlin": "spring",
             "rust": "plain"}
# A datastore kind: its component kind, port, operations and KPIs (mean, noise, coupling, roles).
DATASTORES = {
    "mongodb": ("database", 27017, ["find", "insert"],
                {"mongodb_up": [1.0, 0.0, 0.0, ["stops"]], "mongodb_op_latency_ms": [2.0, 0.1, 0.5, ["io", "wait"]],
                 "mongodb_ops": [40.0, 0.1, 1.0, ["stops", "throughput"]]}),
    "postgresql": ("database", 5432, ["SELECT", "INSERT"],
                   {"pg_up": [1.0, 0.0, 0.0, ["stops"]], "pg_io_wait_ms": [1.5, 0.1, 0.5, ["io", "wait"]],
                    "pg_commits": [20.0, 0.1, 1.0, ["stops", "throughput"]]}),
    "redis": ("cache", 6379, ["GET", "SET"],
              {"redis_up": [1.0, 0.0, 0.0, ["stops"]], "redis_memory_bytes": [5e8, 0.02, 0.1, ["memory"]]}),
    "memcached": ("cache", 11211, ["get", "set"], {"memcached_up": [1.0, 0.0, 0.0, ["stops"]]}),
    "minio": ("storage", 9000, ["GetObject", "PutObject"],
              {"minio_up": [1.0, 0.0, 0.0, ["stops"]], "minio_disk_busy": [0.2, 0.1, 0.5, ["io"]]}),
    "etcd": ("coordinator", 2379, ["Range", "Put"], {"etcd_up": [1.0, 0.0, 0.0, ["stops"]]}),
}


def draw(seed: int, size: int | None = None) -> dict:
    """A random system's description, as its YAML file holds it; the same seed, the same description. `size`: how
    many components (drawn from 5 to 60 where not given)."""
    rng = np.random.default_rng([seed, 71])
    total = int(rng.integers(5, 61))
    total = size or total
    stores = _datastores(rng, max(1, total // 5))
    brokers = {f"bus{i}": {"kind": "broker", "replicas": 1, "own_ms": 0.5, "port": 9092, "client_spans": True,
                           "topics": [f"events{i}"], "failure": "broker unreachable", "operations": {}}
               for i in range(int(rng.integers(0, 3)) if total - len(stores) > 6 else 0)}
    count = max(3, total - len(stores) - len(brokers))
    depth = min(7, count - 1)
    layer = [0] + sorted([*range(1, depth + 1), *rng.integers(1, depth + 1, count - 1 - depth).tolist()])
    names = ["entry"] + [f"svc{i}" for i in range(1, count)]
    coded = rng.random() < 0.7  # some services' lines carry code positions, or none do
    services = {name: _service(rng, name, i, coded) for i, name in enumerate(names)}
    services["entry"] |= {"protocol": "http", "port": 8080, "access_log": True}
    services["entry"].pop("rpc", None)
    consumers = {b: names[-int(rng.integers(1, 3)):] for b in brokers}  # one consumer or two, of the deepest layer
    takes = {c for cs in consumers.values() for c in cs}
    for i, name in enumerate(names[1:], 1):  # each called from the layer above, so that every one has traffic
        above = [n for n, d in zip(names, layer) if d == layer[i] - 1 and n not in takes]
        caller = above[int(rng.integers(len(above)))] if above else "entry"
        if name not in takes:
            _add_call(rng, services[caller], name, services[name], first=True)
    for i, name in enumerate(names):  # fan-out: more calls deeper down
        deeper = [n for n, d in zip(names, layer) if d > layer[i] and n not in takes]
        for callee in rng.choice(deeper, size=min(len(deeper), int(rng.integers(0, 3))), replace=False).tolist():
            _add_call(rng, services[name], callee, services[callee])
    users = [n for n in names if n not in takes]
    for store, spec in stores.items():  # every instance has a caller of its own
        caller = services[users[int(rng.integers(len(users)))]]
        _op(caller)["steps"].append({"call": f"{store}.{next(iter(spec['operations']))}"})
    for reader in takes:  # a consumer serves its topics' messages alone
        services[reader]["operations"] = {}
    for broker, readers in consumers.items():
        topic = brokers[broker]["topics"][0]
        writer = next(n for n in reversed(users) if n != "entry" or len(users) == 1)
        _op(services[writer])["steps"].append({"publish": f"{broker}.{topic}"})
        for reader in readers:
            services[reader]["operations"][f"{topic} process"] = {"consumes": f"{broker}.{topic}",
                                                                  "steps": [{"log": f"took {{id}} from {topic}"}]}
    routes = list(services["entry"]["operations"])
    shares = np.round(rng.dirichlet(np.ones(len(routes))) * 1000).astype(int)
    shares[0] += 1000 - shares.sum()
    pods = sum(c.get("replicas", 1) for c in (*services.values(), *stores.values(), *brokers.values()))
    description = {
        "name": f"drawn-{seed}", "description": f"a system drawn at random (seed {seed})", "namespace": f"drawn{seed}",
        "nodes": {"workers": [f"node-{k}" for k in range(max(2, pods // 8))]},
        "workload": {"entry": "entry", "requests_per_minute": 1500, "traces_per_minute": 120,
                     "mix": {r: int(s) / 1000 for r, s in zip(routes, shares)}},
        "components": {**services, **stores, **brokers}, "faults": {}}
    description["faults"] = _faults(description)
    return description


def _datastores(rng, n: int) -> dict[str, dict]:
    """`n` datastores of one to three kinds: several instances of one kind, each with its own metrics."""
    kinds = rng.choice(sorted(DATASTORES), size=int(rng.integers(1, 4)), replace=False).tolist()
    out = {}
    for i in range(n):
        source = kinds[i % len(kinds)]
        kind, port, ops, kpis = DATASTORES[source]
        out[f"{source}-{i}"] = {"kind": kind, "replicas": int(rng.integers(1, 3)), "own_ms": 0.8, "port": port,
                                "client_spans": True, "failure": f"{source} unreachable",
                                "operations": {op: {} for op in ops}, "metrics": {"source": source, "kpis": kpis}}
    return out


def _service(rng, name: str, i: int, coded: bool) -> dict:
    language = list(LANGUAGES)[int(rng.integers(len(LANGUAGES)))]
    style = LANGUAGES[language] if rng.random() < 0.7 else ["go-json", "log4j-json", "spring", "python-json", "pino",
                                                            "plain"][int(rng.integers(6))]
    service = {"kind": "service", "language": language, "log_style": style, "replicas": int(rng.integers(1, 6)),
               "own_ms": round(float(rng.uniform(0.5, 4.0)), 2), "protocol": "grpc" if rng.random() < 0.6 else "http",
               "rpc": {"service": f"drawn.{name.title()}", "port": 7000 + i}, "failure": f"{name} request failed",
               "operations": {}}
    if service["protocol"] == "http":
        service.pop("rpc")
        service["port"] = 8000 + i
    positions = coded and rng.random() < 0.5  # lines with code positions (`Logger#line`), where code faults act
    for k in range(int(rng.integers(1, 5)) if name == "entry" else 1):  # the entry's routes
        op = f"GET /r{k}" if name == "entry" else f"Op{k}"
        steps = [{"log": f"{name.title()}Handler#{10 + k}0 handling {{id}}" if positions else "handling {id}"}]
        if positions:
            steps.append({"log": f"{name.title()}Service#{20 + k}0 checked {{id}}",
                          "else": f"{name.title()}Service#{20 + k}0 unexpected value for {{id}}", "else_level": "error"})
        service["operations"][op] = {"steps": steps}
    return service


def _op(service: dict) -> dict:
    return next(iter(service["operations"].values()))


def _add_call(rng, caller: dict, name: str, callee: dict, first: bool = False) -> None:
    """A call from each of the caller's operations (the first: every one, so that each is reached), some optional,
    some made only by a share of the requests, some several times in a row."""
    target = f"{name}.{next(iter(callee['operations']))}"
    for op in caller["operations"].values():
        if any(s.get("call") == target for s in op["steps"]):
            continue
        step = {"call": target}
        if not first and rng.random() < 0.3:
            step["p"] = round(float(rng.uniform(0.3, 0.9)), 2)
        if not first and rng.random() < 0.2:
            step["optional"] = True
        if rng.random() < 0.1:
            step["times"] = int(rng.integers(2, 4))
        op["steps"].append(step)


def _faults(description: dict) -> dict[str, list[str]]:
    """Every fault of the library, on every kind of component (and language) it can act on here; the cluster's own
    faults once a drawn system's dump holds the cluster's state (`bench systems` simulates without it: in its
    telemetry alone such a fault is a pod's failure)."""
    from .system import _build

    system = _build({**description, "faults": {}}, f"drawn-{description['name']}")
    specs = sorted({c["kind"] for c in description["components"].values()} |
                   {f"service:{c['language']}" for c in description["components"].values() if c["kind"] == "service"})
    out: dict[str, list[str]] = {}
    for name in sorted(n for n, f in FAULTS.items() if not f.cluster):
        kinds = [s for s in ("link", "node") if applies(name, s, system) is None]
        kinds += [s for s in specs if ":" not in s and applies(name, s, system) is None]
        if not kinds:  # a fault for services of some languages only (on a JVM)
            kinds = [s for s in specs if ":" in s and applies(name, s, system) is None]
        if kinds:
            out[name] = kinds
    return out
