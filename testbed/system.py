"""A system the testbed simulates, read from its description (one YAML file, `systems/*.yaml`, checked against
`systems/schema.json` and then for what a schema cannot say: calls to what is declared, no cycle of synchronous
calls, faults that apply to what they name). A description that fails is one line naming the file and the field.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path

import jsonschema
import yaml

from common.errors import DescriptionError

# What a component's language writes its log lines as, where the description names no `log_style`.
LOG_STYLES = {"go": "go-json", "java": "log4j-json", "python": "python-json", "node": "pino", "javascript": "pino",
              "typescript": "pino"}
# How faults move a datastore's own metrics (docs/formats.md, "A system's description").
ROLES = {"stops", "uptime", "io", "wait", "pending", "stall", "memory", "cpu", "throughput", "latency",
         "tail_latency", "failures", "slow", "regions", "watched_up", "watched_down", "watched_abnormal", "lag",
         "messages"}
SHIPPED = resources.files("testbed") / "systems"


@dataclass(frozen=True)
class Step:
    """One thing an operation does, in order: a call (`service`, `operation`), a message published to a broker's
    topic (`publish`), or a log line (`log`)."""
    service: str = ""
    operation: str = ""
    p: float = 1.0  # the share of requests that make it
    times: int = 1  # calls made in a row
    optional: bool = False  # its failure is logged, and the caller's request still succeeds
    deadline_ms: float | None = None  # the caller gives up after this long
    publish: bool = False
    log: str = ""
    level: str = "info"
    otherwise: str = ""  # the line of the other branch, written where a method it relies on returned a wrong value
    otherwise_level: str = "error"


@dataclass(frozen=True)
class Operation:
    name: str
    steps: tuple[Step, ...] = ()
    method: str | None = None  # the code method that implements it (what a JVM agent's rules name)
    status: int = 200  # the HTTP status an entry answers it with
    consumes: tuple[str, str] | None = None  # (broker, topic) it serves, asynchronously

    @property
    def calls(self) -> tuple[Step, ...]:
        return tuple(s for s in self.steps if s.service)


@dataclass(frozen=True)
class Kpi:
    mean: float
    noise: float
    coupling: float  # how strongly it follows the load
    roles: frozenset[str]


@dataclass(frozen=True)
class Component:
    name: str
    kind: str  # service | database | cache | storage | coordinator | broker
    namespace: str
    replicas: int = 1
    own_ms: float = 1.0
    weight: float = 1.0
    language: str = ""
    log_style: str = "plain"
    protocol: str = "grpc"
    rpc_service: str = ""
    port: int = 0
    failure: str = ""
    wraps: str = ""
    access_log: bool = False
    apm: bool = False
    background_log: str = ""
    watches: str = ""
    logger: str = ""  # the class its lines name where they name no code position of their own
    client_spans: bool = False  # its clients trace their calls to it (a datastore seen by JDBC or a Redis client)
    topics: tuple[str, ...] = ()
    operations: dict[str, Operation] = field(default_factory=dict)
    source: str = ""  # its own metrics: their source, file and KPIs
    metrics_file: str = ""
    kpis: dict[str, Kpi] = field(default_factory=dict)

    @property
    def traced(self) -> bool:
        """Whether it writes spans of its own (a datastore or broker is seen only in its clients' spans)."""
        return self.kind == "service"


@dataclass(frozen=True, eq=False)  # one object a description (`load` caches it): known by identity
class System:
    name: str
    description: str
    namespace: str
    layout: str
    workers: tuple[str, ...]
    others: tuple[str, ...]
    entry: str
    mix: dict[str, float]
    requests_per_minute: float
    traces_per_minute: float
    components: dict[str, Component]
    faults: dict[str, tuple[str, ...]]  # fault type -> what it applies to (kinds, kind:language, link, node)
    scenarios: dict[str, dict]
    path: str

    @property
    def nodes(self) -> tuple[str, ...]:
        return self.workers + self.others

    @property
    def services(self) -> tuple[str, ...]:
        """The traced components, in the description's order."""
        return tuple(c for c, comp in self.components.items() if comp.traced)

    def callees(self, component: str) -> list[str]:
        """What a component calls, sorted."""
        comp = self.components[component]
        return sorted({s.service for op in comp.operations.values() for s in op.calls})

    def callers(self, component: str) -> list[str]:
        """The components that call `component`, sorted."""
        return sorted(c for c in self.components if component in self.callees(c))

    def calls(self) -> list[tuple[str, str]]:
        """Every caller -> callee pair, sorted."""
        return [(c, d) for c in sorted(self.components) for d in self.callees(c)]

    def consumers(self, broker: str, topic: str) -> list[tuple[str, str]]:
        """(component, operation) that consume a topic, in the description's order."""
        return [(c, name) for c, comp in self.components.items() for name, op in comp.operations.items()
                if op.consumes == (broker, topic)]


def load(name_or_path: str | Path) -> System:
    """A shipped system by name (`hipstershop`), or a description file."""
    path = Path(name_or_path)
    if not path.suffix and not path.exists():
        shipped = SHIPPED / f"{name_or_path}.yaml"
        if not shipped.is_file():
            raise DescriptionError(f"no system '{name_or_path}': give a description file or one of {', '.join(shipped_names())}")
        return _load(str(shipped))
    return _load(str(path.resolve()))


def shipped_names() -> list[str]:
    return sorted(p.name.removesuffix(".yaml") for p in SHIPPED.iterdir() if p.name.endswith(".yaml"))


MAX_VALUES = 100_000  # the values of a description with its aliases expanded (the shipped ones hold under 5,000)
# YAML 1.2's floats, as JSON writes them: 1e9 and 6.5e8 are numbers (YAML 1.1 reads them as text).
FLOAT = re.compile(r"^[-+]?(?:[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?|\.[0-9_]+(?:[eE][-+]?[0-9]+)?"
                   r"|[0-9][0-9_]*[eE][-+]?[0-9]+|\.inf|\.Inf|\.INF|\.nan|\.NaN|\.NAN)$")


class _Loader(yaml.SafeLoader):
    """YAML with floats as YAML 1.2 reads them; a key given twice in one mapping is refused (the second would
    replace the first unseen), and so is a document whose aliases expand past MAX_VALUES values or refer to
    themselves (what would exhaust the checks' time and memory)."""

    def compose_mapping_node(self, anchor):
        node = super().compose_mapping_node(anchor)
        seen = set()
        for key, _ in node.value:
            if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                if (key.tag, key.value) in seen:
                    raise yaml.composer.ComposerError(None, None, f"'{_short(key.value)}' is given twice in one "
                                                      "mapping", key.start_mark)
                seen.add((key.tag, key.value))
        return node

    def compose_document(self):
        node = super().compose_document()
        _expanded(node, {}, set())
        return node


class _Dumper(yaml.SafeDumper):
    """YAML that `_Loader` reads back as written: text that it would read as a number (`6e3`) is quoted."""


for _cls in (_Loader, _Dumper):
    _cls.add_implicit_resolver("tag:yaml.org,2002:float", FLOAT, list("-+0123456789."))


def dump(description: dict) -> str:
    """A description as YAML text that `load` reads back to the same names and values."""
    return yaml.dump(description, Dumper=_Dumper, sort_keys=False, width=118, allow_unicode=True)


def _expanded(node: yaml.Node, sizes: dict[int, int], above: set[int]) -> int:
    """How many values `node` holds with its aliases expanded; past MAX_VALUES, or an alias inside what it names,
    is a ComposerError at the node."""
    if id(node) in sizes:
        return sizes[id(node)]
    if id(node) in above:
        raise yaml.composer.ComposerError(None, None, "an alias refers to a value that holds it", node.start_mark)
    above.add(id(node))
    children = [c for pair in node.value for c in pair] if isinstance(node, yaml.MappingNode) else \
        node.value if isinstance(node, yaml.SequenceNode) else []
    size = 1 + sum(_expanded(c, sizes, above) for c in children)
    above.discard(id(node))
    if size > MAX_VALUES:
        raise yaml.composer.ComposerError(None, None, f"its aliases expand to more than {MAX_VALUES:,} values",
                                          node.start_mark)
    sizes[id(node)] = size
    return size


def _short(text, most: int = 40) -> str:
    text = str(text)
    return text if len(text) <= most else text[:most] + "..."


@cache
def _load(path: str) -> System:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise DescriptionError(f"cannot read {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise DescriptionError(f"{path}: not UTF-8 text (byte {e.start})") from None
    try:
        raw = yaml.load(text, Loader=_Loader)
    except RecursionError:
        raise DescriptionError(f"{path}: nested too deeply to read") from None
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        at = f" at line {where.line + 1}" if where else ""
        raise DescriptionError(f"{path}: not valid YAML{at} ({getattr(e, 'problem', None) or e})") from None
    e = jsonschema.exceptions.best_match(_validator().iter_errors(raw))  # the deepest, most telling error
    if e is not None and e.validator == "oneOf" and isinstance(e.instance, dict):  # a step: the kind it says it is
        meant = [i for i, sub in enumerate(e.validator_value) if set(sub.get("required", ())) <= set(e.instance)]
        inner = [c for c in e.context if meant and c.relative_schema_path[0] == meant[0]]
        e = jsonschema.exceptions.best_match(inner) if inner else e
    if e is not None:
        raise DescriptionError(f"{path}: {_field(e.absolute_path) or 'the file'}: {_said(e)}")
    if (where := _not_finite(raw, [])) is not None:
        raise DescriptionError(f"{path}: {_field(where)}: not a finite number")
    return _build(raw, path)


def _not_finite(value, where: list) -> list | None:
    """The field of the first number that is not finite (`.nan`, `.inf`: no limit of the schema holds them)."""
    if isinstance(value, float) and not math.isfinite(value):
        return where
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    return next((found for k, v in items if (found := _not_finite(v, where + [k])) is not None), None)


@cache
def _validator():
    schema = json.loads((SHIPPED / "schema.json").read_text())
    return jsonschema.Draft202012Validator(schema)


def _field(parts) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _said(e: jsonschema.ValidationError) -> str:
    """A schema error in a line: what is wrong with the field."""
    if e.validator == "oneOf" and isinstance(e.instance, dict):
        return "a step is one of {call: SERVICE.OPERATION}, {publish: BROKER.TOPIC} or {log: TEXT}"
    if e.validator == "additionalProperties":
        return _short(e.message.replace("Additional properties are not allowed", "unknown field(s)"), 200)
    # a name that becomes part of a file's path (a component, a node, a namespace, a topic, a KPI): never '/' nor a
    # leading dot, so that no name leaves the dump's folder
    if e.validator == "pattern" and e.validator_value == _validator().schema["$defs"]["name"]["pattern"]:
        return (f"'{_short(e.instance)}' is not a name (at most 63 letters, digits, '.', '_' and '-', the first a "
                "letter or a digit)")
    return _short(e.message, 200)


def _build(raw: dict, path: str) -> System:
    def fail(where: str, message: str):
        raise DescriptionError(f"{path}: {where}: {message}")

    namespace = raw["namespace"]
    members = {name: set(c.get("operations") or {}) | set(c.get("topics", ())) for name, c in raw["components"].items()}
    components: dict[str, Component] = {}
    for name, c in raw["components"].items():
        where = f"components.{name}"
        kpis = {}
        metrics = c.get("metrics", {})
        for kpi, (mean, noise, coupling, roles) in metrics.get("kpis", {}).items():
            unknown = set(roles) - ROLES
            if unknown:
                fail(f"{where}.metrics.kpis.{kpi}", f"unknown role(s) {', '.join(sorted(unknown))} "
                                                    f"(known: {', '.join(sorted(ROLES))})")
            kpis[kpi] = Kpi(float(mean), float(noise), float(coupling), frozenset(roles))
        operations = {}
        for op_name, op in (c.get("operations") or {}).items():
            at = f"{where}.operations.{op_name}"
            steps = tuple(_step(s, members, f"{at}.steps[{i}]", fail) for i, s in enumerate(op.get("steps", [])))
            consumes = _member(op["consumes"], members, f"{at}.consumes", fail) if op.get("consumes") else None
            operations[op_name] = Operation(op_name, steps, op.get("method"), op.get("status", 200), consumes)
        rpc = c.get("rpc", {})
        language = c.get("language", "")
        components[name] = Component(
            name=name, kind=c["kind"], namespace=c.get("namespace", namespace), replicas=c.get("replicas", 1),
            own_ms=float(c.get("own_ms", 1.0)), weight=float(c.get("weight", 1.0)), language=language,
            log_style=c.get("log_style", LOG_STYLES.get(language, "plain")), protocol=c.get("protocol", "grpc"),
            rpc_service=rpc.get("service", ""), port=rpc.get("port", c.get("port", 0)), failure=c.get("failure", ""),
            wraps=c.get("wraps", ""), access_log=c.get("access_log", False), apm=c.get("apm", c["kind"] == "service"),
            background_log=c.get("background_log", ""), watches=c.get("watches", ""),
            client_spans=c.get("client_spans", c["kind"] == "broker"), logger=c.get("logger", ""),
            topics=tuple(c.get("topics", ())), operations=operations, source=metrics.get("source", ""),
            metrics_file=metrics.get("file", f"infra/infra_{metrics.get('source', '')}/infra_{metrics.get('source', '')}"),
            kpis=kpis)
    work = raw["workload"]
    system = System(
        name=raw["name"], description=raw.get("description", raw["name"]), namespace=namespace,
        layout=raw.get("layout", "otlp"), workers=tuple(raw["nodes"]["workers"]),
        others=tuple(raw["nodes"].get("others", ())), entry=work["entry"], mix=dict(work["mix"]),
        requests_per_minute=float(work.get("requests_per_minute", 3000)),
        traces_per_minute=float(work.get("traces_per_minute", 150)), components=components,
        faults={k: tuple(v) for k, v in raw["faults"].items()}, scenarios=raw.get("scenarios", {}), path=path)
    _check(system, fail)
    return system


def _step(raw: dict, members: dict[str, set[str]], where: str, fail) -> Step:
    if "log" in raw:
        return Step(log=raw["log"], level=raw.get("level", "info"), otherwise=raw.get("else", ""),
                    otherwise_level=raw.get("else_level", "error"))
    field_ = "call" if "call" in raw else "publish"
    service, operation = _member(raw[field_], members, f"{where}.{field_}", fail)
    return Step(service, operation, raw.get("p", 1.0), raw.get("times", 1), raw.get("optional", False),
                raw.get("deadline_ms"), publish="publish" in raw)


def _member(ref: str, members: dict[str, set[str]], where: str, fail) -> tuple[str, str]:
    """`COMPONENT.MEMBER` (an operation or a topic) split where it names a declared component's member: names may
    hold dots, so a reference two ways could be read is refused. One that names nothing declared splits at the
    longest declared component (the first dot where none is), for `_check` to say what is missing."""
    dots = [i for i, ch in enumerate(ref) if ch == "."]
    meant = [(ref[:i], ref[i + 1:]) for i in dots if ref[i + 1:] in members.get(ref[:i], ())]
    if len(meant) > 1:
        fail(where, f"'{ref}' names both " + " and ".join(f"{c}'s '{m}'" for c, m in meant) + "; rename one")
    if meant:
        return meant[0]
    i = next((i for i in reversed(dots) if ref[:i] in members), dots[0])
    return ref[:i], ref[i + 1:]


def _check(system: System, fail) -> None:
    """What the schema cannot say: every name used is declared, synchronous calls make no cycle, the entry and its
    mix are its own (which faults apply to what is the fault library's to check: `faults.check`)."""
    comps = system.components
    for name, comp in comps.items():
        for op_name, op in comp.operations.items():
            where = f"components.{name}.operations.{op_name}"
            for i, step in enumerate(op.steps):
                if not step.service:
                    continue
                field_ = "publish" if step.publish else "call"
                callee = comps.get(step.service)
                if callee is None:
                    fail(f"{where}.steps[{i}].{field_}", f"'{step.service}' is not a declared component")
                if step.publish:
                    if callee.kind != "broker" or step.operation not in callee.topics:
                        fail(f"{where}.steps[{i}].publish", f"'{step.operation}' is not a topic of broker '{step.service}'")
                    if not system.consumers(step.service, step.operation):
                        fail(f"{where}.steps[{i}].publish", f"no operation consumes {step.service}.{step.operation}")
                elif step.operation not in callee.operations:
                    fail(f"{where}.steps[{i}].call", f"'{step.operation}' is not an operation of '{step.service}'")
            if op.consumes:
                broker, topic = op.consumes
                if broker not in comps or topic not in comps[broker].topics:
                    fail(f"{where}.consumes", f"'{broker}.{topic}' is not a declared broker's topic")
        if comp.watches and comp.watches not in comps:
            fail(f"components.{name}.watches", f"'{comp.watches}' is not a declared component")
    _no_cycle(system, fail)
    entry = comps.get(system.entry)
    if entry is None or not entry.traced:
        fail("workload.entry", f"'{system.entry}' is not a declared service")
    for op in system.mix:
        if op not in entry.operations:
            fail(f"workload.mix.{op}", f"'{op}' is not an operation of the entry '{system.entry}'")
    total = sum(system.mix.values())
    if abs(total - 1) > 1e-6:
        fail("workload.mix", f"the shares add up to {total:g}, not 1")


def _no_cycle(system: System, fail) -> None:
    """Synchronous calls must not come back to an operation they started from (a request would never end)."""
    state: dict[tuple[str, str], int] = {}  # 1: on the path, 2: done

    def visit(node: tuple[str, str], path: list[tuple[str, str]]) -> None:
        state[node] = 1
        comp, op = node
        for i, step in enumerate(system.components[comp].operations[op].steps):
            if not step.service or step.publish:
                continue
            nxt = (step.service, step.operation)
            if state.get(nxt) == 1:
                stack = path + [node]
                loop = " -> ".join(f"{c}.{o}" for c, o in stack[stack.index(nxt):] + [nxt])
                fail(f"components.{comp}.operations.{op}.steps[{i}].call", f"a cycle of synchronous calls: {loop}")
            if nxt not in state:
                visit(nxt, path + [node])
        state[node] = 2

    for comp, c in system.components.items():
        for op in c.operations:
            if (comp, op) not in state:
                visit((comp, op), [])
