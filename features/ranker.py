"""Rank root-cause candidates so that a cause outranks the components that echo it.

1. Each evidence item belongs to a unit: a pod of a one-pod service is that service; a
   node, a service, a pod of a replicated service are themselves.
2. A unit's anomaly adds its strongest signals with falling weights; echo items (measured on a
   caller's side) count little. A metric that moves on several replicas of a unit counts their z together
   (`together`). A family whose evidence is everywhere in this window (metrics
   on a noisy day) says less about any one component than a family that singles one out, so
   each family's scores shrink with the number of components it flags beyond `SPECIFIC`.
3. Level: one replica of a service that carries the fault is the pod; two or more are the service. A
   replica far weaker than its strongest sibling (a tenth of its errors, the load it took over) echoes it.
4. The graph: latency and errors travel up the call graph (to callers), traffic falls down it
   (a failing caller stops calling), resource signals (CPU, memory, disk, a stopped process, a
   slow network link, where errors start) stay where they are, but for errors that start where a
   dependency that is down is called (it has no span to fail in). So a unit keeps its local
   signals, but little of its latency and errors when a dependency (what it calls, within two
   calls, and its node when that node hosts anomalous pods of two or more services) is
   anomalous, as far as half the unit's own felt trouble (a chance blip among hundreds of dependencies explains none of
   a trouble many times its size), and little of a traffic change when a caller is, when the load fell where it comes
   in (a service that calls and that nothing calls), or when more requests came through a caller whose own requests
   rose (its callers' load, passed down). A caller whose callees lost their traffic stopped
   calling them, unless a callee is down itself (its processes stopped, it says it is not up): then
   no call could reach it, and the fall is its own (a storage part that restarts, not the SQL layer). A consumer's lag
   (its messages waiting) is explained by an anomalous dependency (its broker, anomalous too in what it holds: its
   memory swells with the messages it keeps, which no call feels), or by an anomalous caller where it took more
   messages than before (its producers' load), and is its own where neither is. A unit
   with no local signal, or none that says more than what is left of an anomalous unit's trouble once explained
   (`WEAK`: a line it had not logged before, once, beside requests that tripled), is an echo of something it
   calls, seen or not; but one that is called and
   calls nothing, traced or declared, waits on nothing: its latency is its own work (its errors may still be
   what its callers sent it). A change explains another only while it holds: a dependency's change undone before it
   held half the window explains none of a caller's trouble that held. The deepest anomalous unit with healthy
   dependencies ranks first.
5. Where a component's own code path broke in its spans (as much as makes a unit anomalous), a component whose
   evidence is one resource metric's change (no failed or slowed call reaches it, its paths held: nothing felt it)
   counts as an echo does.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from functools import cached_property

import networkx as nx

from .evidence import Item, Window, collect
from .evidence.metrics import Z_FULL, Z_MIN
from .graph import call_edges, callees, callers, dependency_graph, depends_on, entries, topology

WEIGHTS = (1.0, 0.3, 0.15)  # the strongest signal, the second, the third
ECHO_WEIGHT = 0.3
EXPLAINED = 0.2  # what is left of a propagating signal that an anomalous dependency explains
UPWARD = {"latency", "errors"}  # explained by an anomalous dependency
# A consumer's lag (its messages waiting) is explained by an anomalous dependency too (its broker backed up), and by
# an anomalous caller (a producer) where it rose with the messages the consumer took; it is its own where neither
# is (a consumer that stalls): nobody waits on a consumer, so nothing echoes into its lag.
LAG = "lag"
EXPLAINABLE = UPWARD | {LAG}  # what an anomalous dependency explains of a unit's trouble
DOWNWARD = {"traffic"}  # explained by an anomalous caller
LIVENESS = {"processes", "up"}  # a unit whose processes stopped or that says it is not up is down
ERROR_ORIGIN = "error origin"  # the trace signal of errors that start in a component's own spans
# What a component's callers feel of its trouble: it answers slower, fails, answers otherwise, or is gone. Its
# resources (CPU, memory, disk, bytes, load) moving reach its callers only through one of these.
PATH = "path"  # the signal of a component's own code path that changed in its spans
FELT = UPWARD | LIVENESS | {ERROR_ORIGIN, PATH, "link", "self time", "log", "silence"}
METRIC_KINDS = {"metric", "changepoint"}  # the families that read metric series
ANOMALOUS = 0.2
# A local signal weaker than this is no account of a unit's trouble: what is left of an anomalous unit's once explained.
# A constant (two chosen ones multiplied), not fitted: the weak local signals seen beside a unit's trouble that was
# not its own were 0.01 and 0.001 (a new line, once); a real fault's own, 0.18 (Online Boutique's adservice exception).
WEAK = EXPLAINED * ANOMALOUS
CARRIES = 0.5  # a replica whose own anomaly is at least this share of the strongest replica's carries the fault
SPECIFIC = 3  # a family that flags this many components or fewer keeps its scores whole
MAX_EVIDENCE = 4
MISSING_CALLS = "missing calls"  # the signal of a caller's evidence the ranker derives from its callees' falls


@dataclass
class Candidate:
    component: str
    level: str  # service | pod | node
    score: float = 0.0
    evidence: list[Item] = field(default_factory=list)  # what a digest shows: the strongest of each kind first
    explained_by: str | None = None  # the dependency that explains part of the anomaly
    found: list[Item] = field(default_factory=list)  # every item of its own, strongest first


def local(item: Item) -> bool:
    return not item.echo and (item.signal == LAG or item.signal not in UPWARD | DOWNWARD)


def anomaly(items: list[Item], up: bool = False, down: bool = False, unreachable: bool = False,
            slow_alone: bool = False, *, replicas: Collection[str]) -> float:
    """The strongest signals with falling weights; echoes, and what a dependency (`up`) or a caller (`down`)
    explains, weigh less; so do errors that start here where a dependency is down (`unreachable`): a call to a
    part that is not there fails where it is made, and an untraced part (a database) has no span to fail in. A unit
    that calls nothing (`slow_alone`) waits on nothing: its latency is its own work (its errors may still be what
    its callers sent it). A metric that moves on several of the `replicas` counts their z together; a service's own
    series sums its replicas' and is no test of its own."""
    best: dict[str, float] = {}
    upward = (EXPLAINABLE - {"latency"} if slow_alone else EXPLAINABLE) | ({ERROR_ORIGIN} if unreachable else set())
    downward = DOWNWARD | ({LAG} if fed(items) else set())
    moved: dict[tuple, dict[str, float]] = defaultdict(dict)  # a metric's z on each replica that shows it
    for it in items:
        explained = ((up or unreachable) and (it.echo or it.signal in upward)) or (down and it.signal in downward)
        weight = (ECHO_WEIGHT if it.echo else 1.0) * (EXPLAINED if explained else 1.0)
        best[it.signal] = max(best.get(it.signal, 0.0), it.blame * weight)
        if it.kind == "metric" and not it.echo and it.component in replicas:
            shown = moved[it.signal, it.key, it.fell, weight]
            shown[it.component] = max(shown.get(it.component, 0.0), it.blame)
    for (signal, _, _, weight), shown in moved.items():
        if len(shown) > 1:  # a lone replica's is its own, already counted
            best[signal] = max(best[signal], together(list(shown.values())) * weight)
    return sum(w * s for w, s in zip(WEIGHTS, sorted(best.values(), reverse=True)))


def together(blames: list[float]) -> float:
    """What one metric moving on several replicas of a unit says, each a blame on the metric family's log-z scale:
    their z combined as independent tests are (Stouffer's sum over the square root of their number). Replicas that
    move together are past chance as no one of them is: five at z 16 count as one at z 36 (a blame of 0.48 each,
    0.71 together); a lone replica keeps its own."""
    z = sum(Z_MIN * (Z_FULL / Z_MIN) ** b for b in blames) / math.sqrt(len(blames))
    return min(1.0, math.log(z / Z_MIN) / math.log(Z_FULL / Z_MIN))


def fed(items: list[Item]) -> bool:
    """Whether a unit took more than before: a consumer whose lag rose with the messages it took lags on its
    producers' load (a stalled consumer takes fewer)."""
    return any(it.signal in DOWNWARD and not it.fell and not it.echo for it in items)


def unfelt(items: list[Item]) -> bool:
    """Whether a unit's evidence is one resource metric's change, which nothing felt: no call failed or slowed, no
    path changed, no line was logged."""
    return all(it.kind in METRIC_KINDS and it.signal not in FELT for it in items) and len({it.key for it in items}) == 1


def strength(item: Item) -> tuple:
    """Strongest first, own evidence before echoes; of equal strength, what the component does before what it is
    no longer asked to do (a dead process before the traffic it stopped serving); ties broken by text, so that
    reruns agree."""
    return item.echo, -item.blame, item.kind, item.signal == "traffic", item.text


def own(items: list[Item], replicas: Collection[str]) -> float:
    return anomaly([i for i in items if not i.echo], replicas=replicas)


def fell(item: Item) -> bool:
    return item.signal == "traffic" and (item.fell or item.kind == "silence") and not item.echo


def felt(units: dict[str, list[Item]], traced: set[str], replicas: Collection[str]) -> dict[str, float]:
    """How anomalous each unit is to its callers: a traced one only by trouble they can feel (the traces would show
    it)."""
    return {u: own([i for i in its if i.signal in FELT] if u in traced else its, replicas) for u, its in units.items()}


def stored(items: list[Item], held: bool, replicas: Collection[str]) -> float:
    """How anomalous a dependency is in what it holds, to a consumer that lags: a broker that backs up holds the
    messages its consumers wait for (its memory and disk swell), which no call of theirs feels. Its traffic is not
    what it holds (it falls when its consumers stall)."""
    return own([i for i in items if i.signal not in DOWNWARD and not (held and i.brief)], replicas)


def load_fell(units: dict[str, list[Item]], g: nx.DiGraph, service_of: dict[str, str]) -> set[str]:
    """The units where the load comes in (a service that calls and that nothing calls) whose traffic fell:
    where there are any, every fall below them follows theirs."""
    entry = entries(g)
    return {u for u, its in units.items() if service_of.get(u, u) in entry and any(fell(it) for it in its)}


def leaf(g: nx.DiGraph, u: str) -> bool:
    """Whether a unit is called and calls nothing, traced or declared."""
    return bool(callers(g, u, 1)) and not callees(g, u, 1)


def down(items: list[Item]) -> bool:
    """Whether a unit's own liveness broke: its processes stopped, or it says it is not up (a restart)."""
    return any(it.signal in LIVENESS and (it.fell or it.kind == "silence") and not it.echo for it in items)


def failed(items: list[Item]) -> bool:
    """Whether a unit's own errors rose: calls reached it (or tried to) and failed there."""
    return any(it.signal == "errors" and not it.echo for it in items)


def missing_calls(units: dict[str, list[Item]], g: nx.DiGraph) -> list[tuple[str, Item]]:
    """A caller that still serves but whose callees lost their traffic stopped calling them (an exception
    or a wrong return before the call): the callees' falls are evidence for the caller, unless the callee
    is down itself (then no call could reach it, and its fall is its own) or its own errors rose (calls still
    came, and failed there)."""
    callees_of: dict[str, list[str]] = defaultdict(list)
    for a, b in call_edges(g):
        callees_of[a].append(b)
    found = []
    for caller, callees in callees_of.items():
        if any(fell(it) for it in units.get(caller, [])):
            continue  # its own traffic fell too: its callers stopped calling it, or it is gone
        falls = [(max(it.score for it in units[b] if fell(it)), b) for b in callees
                 if any(fell(it) for it in units.get(b, [])) and not down(units[b]) and not failed(units[b])]
        if falls:
            score = max(s for s, _ in falls) * len(falls) / len(callees)
            names = ", ".join(sorted(b for _, b in falls))
            found.append((caller, Item(caller, "trace", score, MISSING_CALLS,
                                       f"calls from {caller} went missing: traffic of {names} fell", MISSING_CALLS)))
    return found


def rank(items: list[Item], g: nx.DiGraph, pods_of: dict[str, set[str]], nodes: set[str],
         limit: int = 5) -> list[Candidate]:
    service_of = {p: s for s, pods in pods_of.items() for p in pods}
    flagged: dict[str, set[str]] = defaultdict(set)
    for it in items:
        if not it.echo and it.blame >= 0.3:
            flagged[it.kind].add(service_of.get(it.component, it.component))
    weight = {kind: min(1.0, SPECIFIC / len(comps)) ** 0.5 for kind, comps in flagged.items()}
    by_component: dict[str, list[Item]] = defaultdict(list)
    for it in items:
        by_component[it.component].append(replace(it, score=it.score * weight.get(it.kind, 1.0)))
    units: dict[str, list[Item]] = defaultdict(list)
    level: dict[str, str] = {}
    for comp, its in by_component.items():
        service = service_of.get(comp)
        if comp in nodes:
            units[comp] += its
            level[comp] = "node"
        elif service and len(pods_of[service]) == 1:
            units[service] += its
            level[service] = "service"
        else:
            units[comp] += its
            level[comp] = "pod" if service else "service"
    # Level: one replica that carries the fault is the pod; two or more, the service. Once the strongest replica is
    # anomalous, a replica carries it when its own anomaly is of the strongest's order (the floor of an anomaly does
    # not part replicas that moved alike): siblings that took over a sick pod's load, with its retries' few errors,
    # echo it.
    for service, pods in pods_of.items():
        if len(pods) < 2:
            continue
        owns = {p: own(units[p], service_of) for p in pods if p in units}
        strongest = max(owns.values(), default=0.0)
        hit = [p for p, o in owns.items() if o >= CARRIES * strongest] if strongest >= ANOMALOUS else []
        if len(hit) == 1:
            units[hit[0]] += units.pop(service, [])
        elif len(hit) >= 2:
            units[service] += [it for p in hit for it in units.pop(p)]
            level[service] = "service"
    fallen = load_fell(units, g, service_of)
    entry = entries(g)
    if not fallen:  # where the load fell, the falls below follow it: no caller stopped calling
        for u, item in missing_calls(units, g):
            units[u].append(item)
            level.setdefault(u, "pod" if u in service_of else "node" if u in nodes else "service")
    cands = {u: Candidate(u, level[u], evidence=sorted(its, key=strength))
             for u, its in units.items()}
    own_of = {u: own(units[u], service_of) for u in cands}
    called = {b for _, b, k in g.edges(data="kind") if k == "call"}
    traced = {u for u in units if service_of.get(u, u) in called}
    # A change explains another only while it holds: a dependency's change that was over within the window (`brief`)
    # explains none of a caller's trouble that held.
    felt_any = felt(units, traced, service_of)
    felt_held = felt({u: [i for i in its if not i.brief] for u, its in units.items()}, traced, service_of)
    # A node explains its pods only when it hosts anomalous pods of two or more services.
    hosted: dict[str, set[str]] = defaultdict(set)
    for u in cands:
        for _, node, kind in (g.out_edges(u, data="kind") if u in g else []):
            if kind == "runs on" and own_of[u] >= ANOMALOUS:
                hosted[node].add(service_of.get(u, u))
    broke = {u for u, its in units.items() if any(it.signal == PATH and not it.echo and it.blame >= ANOMALOUS
                                                  for it in its)}
    for u, c in cands.items():
        deps = {d for d in depends_on(g, u) if d not in nodes or len(hosted[d]) >= 2}
        deps |= {service_of[d] for d in deps if d in service_of}  # a pod's trouble is its service's too
        deps |= {p for d in deps for p in pods_of.get(d, ())}  # and a service's trouble, carried by one of its pods
        held = any(not it.brief and (it.echo or it.signal in EXPLAINABLE) for it in units[u])
        measure = felt_held if held else felt_any
        lags = any(it.signal == LAG and not it.echo for it in units[u])
        worst, by = max(((max(measure[d], stored(units[d], held, service_of) if lags else 0.0), d)
                         for d in deps if d in cands and d != u), default=(0.0, None))
        c.explained_by = by if worst >= max(ANOMALOUS, CARRIES * measure[u]) else None
        calling = max((own_of[d] for d in callers(g, u) if d in cands and d != u), default=0.0)
        # more requests came through a caller whose own requests rose: its callers' load, passed down
        passed = any(fed(units[p]) for d in callers(g, u) if service_of.get(d, d) != service_of.get(u, u)
                     for p in {d} | pods_of.get(d, set()) if p in units)
        unexplained = not any(local(it) and it.blame >= WEAK for it in units[u])
        # more load where it comes in is the users' doing (a series gone silent took none)
        users = service_of.get(u, u) in entry and fed([it for it in units[u] if it.kind != "silence"])
        c.score = anomaly(units[u], up=c.explained_by is not None or unexplained,
                          down=calling >= ANOMALOUS or unexplained or bool(fallen - {u}) or users or passed,
                          unreachable=any(down(units[d]) for d in deps if d in units and d != u),
                          slow_alone=c.explained_by is None and leaf(g, u), replicas=service_of)
        if broke - {u} and unfelt(units[u]):
            c.score *= ECHO_WEIGHT
        if c.level == "node" and len(hosted[u]) >= 2:
            c.score += 0.1 * len(hosted[u])
    ranked = sorted(cands.values(), key=lambda c: (-c.score, c.component))[:limit]
    for c in ranked:
        c.found, c.evidence = c.evidence, shown(c.evidence)
    return ranked


def shown(evidence: list[Item], limit: int = MAX_EVIDENCE) -> list[Item]:
    """The evidence a digest shows: the strongest item of each kind first (a GC log beside a latency
    rise, not the same latency rise three times), then the rest; strongest first."""
    seen: set[str] = set()
    firsts, rest = [], []
    for it in evidence:  # strongest first
        (rest if it.kind in seen else firsts).append(it)
        seen.add(it.kind)
    return sorted((firsts + rest)[:limit], key=strength)


@dataclass
class Ranking:
    """A window of a store ranked: its candidates, and what they were ranked from."""
    candidates: list[Candidate]
    items: list[Item]  # every family's evidence in the window
    graph: nx.DiGraph
    pods_of: dict[str, set[str]]  # the pods of each service
    node_of: dict[str, str]  # each pod's node

    @cached_property
    def service_of(self) -> dict[str, str]:
        """Each pod's service."""
        return {p: s for s, pods in self.pods_of.items() for p in pods}


def rank_window(con, w: Window, limit: int) -> Ranking:
    pods_of, nodes, node_of = topology(con, w)
    items, g = collect(con, w), dependency_graph(con, w)
    return Ranking(rank(items, g, pods_of, nodes, limit), items, g, pods_of, node_of)
