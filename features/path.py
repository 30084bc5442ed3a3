"""The fault's path: the way a fault travelled from its cause to where users meet it, as an operator walks it back.

From an entry (a service that calls others and that nothing calls) along the calls to the cause: each component on
the way with what moved in it (its own lines and what its calls saw), when it started, and the call into the next
one. A path told in an answer is grounded (OpenRCA 2.0's rule for an explanation) when every hop is a link of the
dependency graph (a call, a service's pod, a pod's node), every component on it left its baseline in the window, and
the onsets run from the cause outward: nothing moved before what it waits on, give or take `SLACK`.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field

import duckdb
import networkx as nx

from .evidence import MIN_RATIO, Item, Window
from .evidence.traces import ERROR_RISE, call_figures, failing
from .graph import call_edges, entries
from .ranker import Ranking, strength

ONSET_Z = 3.0  # a metric has started moving at its first minute this many robust deviations from its baseline
SLACK = dt.timedelta(minutes=1)  # the clocks of metrics, logs and spans agree to about a minute
ARROW = " -> "
WRITTEN = re.compile(r"\(([^()]*->[^()]*)\)")  # a path as an action writes it: TraceAnalysis(a -> b -> c)


@dataclass
class Hop:
    component: str
    items: list[Item]  # what moved in it, strongest first
    onset: dt.datetime | None  # the first minute any of it moved
    call: dict | None = None  # its traced call into the next hop: errors and p95 in the window and the baseline
    statuses: list[tuple[str, int, int]] = field(default_factory=list)  # an entry's answers: status, now, before
    also: list[str] = field(default_factory=list)  # a cause's metrics that moved less than evidence does, by name


# The HTTP status an access log line gives its answer (HipsterShop's frontend: `"http.resp.status":500`).
STATUS = r'(?:http\.resp\.status|status_code|"status")"?[\s:=]+"?([1-5][0-9][0-9])\b'


ALSO_Z = 2.0  # a cause's series this far from its trailing hour moved, if less than the evidence families ask


def also_moved(con: duckdb.DuckDBPyConnection, w: Window, names: list[str], shown: set[str]) -> list[str]:
    """The metrics of a component (its pods, its service) whose window moved `ALSO_Z` robust deviations or more from
    their trailing hour, strongest first, by the names the dump gives them, but for those already `shown`."""
    return [m for m, in con.execute("""
        select metric from metric_anomaly where component in (select unnest(?)) and ts >= ? and ts <= ?
        group by metric having median(abs(z)) >= ? order by median(abs(z)) desc, metric""",
                                     [names, w.start, w.end, ALSO_Z]).fetchall() if m not in shown]


def statuses(con: duckdb.DuckDBPyConnection, w: Window, names: list[str]) -> list[tuple[str, int, int]]:
    """The status codes a component's access log gives its answers, with their counts in the window and in as long
    a time before it, the codes that rose most first."""
    before = w.start - (w.end - w.start)
    return [(code, now, then) for code, now, then in con.execute(f"""
        select regexp_extract(message, '{STATUS}', 1) as code, count(*) filter (where ts >= $start),
               count(*) filter (where ts < $start)
        from log_lines where component in (select unnest($names)) and ts >= $before and ts <= $end
          and regexp_matches(message, '{STATUS}')
        group by 1 order by count(*) filter (where ts >= $start) - count(*) filter (where ts < $start) desc, 1""",
        {"names": names, "before": before, "start": w.start, "end": w.end}).fetchall()]


def written(hops: list[Hop]) -> str:
    return ARROW.join(h.component for h in hops)


def read(action: str) -> list[str]:
    """The components of a path an action names ("TraceAnalysis(a -> b -> c)"), or []."""
    found = WRITTEN.search(action)
    return [c.strip() for c in found.group(1).split("->")] if found else []


def walked(answer: dict) -> list[str]:
    """The path an answer's trace walks (the first step whose action names one), or []."""
    trace = answer.get("reasoning_trace")
    steps = [s for s in trace if isinstance(s, dict)] if isinstance(trace, list) else []
    return next((path for path in (read(str(s.get("action", ""))) for s in steps) if path), [])


def _members(ranking: Ranking, component: str) -> set[str]:
    """A component and what it stands for: a service its pods, a pod its service's calls."""
    service = ranking.service_of.get(component)
    return {component} | ranking.pods_of.get(component, set()) | ({service} if service else set())


def _items(ranking: Ranking, component: str) -> list[Item]:
    """What moved in a component, strongest first: in a service or its pods; in a pod or its service (whose
    service-wide evidence, its calls and APM, the ranking gives its one anomalous replica)."""
    names = _members(ranking, component)
    return sorted((it for it in ranking.items if it.component in names), key=strength)


def onset(con: duckdb.DuckDBPyConnection, w: Window, ranking: Ranking, items: list[Item]) -> dt.datetime | None:
    """The first minute any of a component's items moved: a metric past `ONSET_Z` (in the way it moved), a log
    keyword's first line, calls' first slow or failing minute; None where the store cannot say (a silence, an event
    path). A query for each kind of item, not for each item (a digest asks of dozens)."""
    found = []
    span = {"start": w.start, "end": w.end}
    metrics = [(it.key, it.fell, _members(ranking, it.component)) for it in items
               if it.kind in ("metric", "changepoint")]
    if metrics:
        first = {(metric, component): (up, down) for metric, component, up, down in con.execute("""
            select metric, component, min(ts) filter (where z >= $z), min(ts) filter (where z <= -$z)
            from metric_anomaly where metric in (select unnest($keys)) and component in (select unnest($names))
              and ts between $start and $end group by all""",
            span | {"z": ONSET_Z, "keys": sorted({key for key, _, _ in metrics}),
                    "names": sorted(set().union(*(names for _, _, names in metrics)))}).fetchall()}
        found += [first.get((key, c), (None, None))[fell] for key, fell, names in metrics for c in names]
    logs = [(it.key, _members(ranking, it.component)) for it in items if it.kind == "log"]
    if logs:
        first = {(key, component): ts for key, component, ts in con.execute("""
            select k.key, l.component, min(l.ts) from log_lines l join (select unnest($keys) as key) k
                on contains(l.message, k.key)
            where l.component in (select unnest($names)) and l.ts between $start and $end group by all""",
            span | {"keys": sorted({key for key, _ in logs}),
                    "names": sorted(set().union(*(names for _, names in logs)))}).fetchall()}
        found += [first.get((key, c)) for key, names in logs for c in names]
    traced = set().union(*(_members(ranking, it.component) for it in items if it.kind == "trace"))
    if traced:  # the first minute of any of them is the first of their union
        found.append(con.execute("""
            select min(minute) from trace_edge_anomaly where (caller in (select unnest($names))
                or callee in (select unnest($names))) and minute between $start and $end
              and (latency_z >= $z or error_rate - baseline_error_rate >= $rise)""",
            span | {"names": sorted(traced), "z": ONSET_Z, "rise": ERROR_RISE}).fetchone()[0])
    return min((t for t in found if t is not None), default=None)


class Walker:
    """Walks chains of components in one window: the calls' figures read once, each component's evidence and
    onset once, however many paths (the digest's candidates, a told path) go through it."""

    def __init__(self, con: duckdb.DuckDBPyConnection, w: Window, ranking: Ranking):
        self.con, self.w, self.ranking = con, w, ranking
        self.figures = calls_by_edge(con, w)
        self._seen: dict[str, tuple[list[Item], dt.datetime | None]] = {}

    def hop(self, component: str) -> Hop:
        if component not in self._seen:
            items = _items(self.ranking, component)
            self._seen[component] = items, onset(self.con, self.w, self.ranking, items)
        return Hop(component, *self._seen[component])

    def walk(self, chain: list[str]) -> list[Hop]:
        """The hops of a chain of components, each with the traced call into the next."""
        service_of = self.ranking.service_of
        hops = [self.hop(c) for c in chain]
        for a, b in zip(hops, hops[1:]):
            a.call = self.figures.get((service_of.get(a.component, a.component),
                                       service_of.get(b.component, b.component)))
        return hops


def _linked(ranking: Ranking, a: str, b: str) -> bool:
    """Whether `a` depends on `b` in the graph: a call between their services, a service's pod, a pod's node."""
    g, service = ranking.graph, ranking.service_of
    if g.has_edge(a, b):
        return True
    a, b = service.get(a, a), service.get(b, b)
    return g.has_edge(a, b) and g[a][b].get("kind") in ("call", "declared")


def calls_by_edge(con, w: Window) -> dict[tuple[str, str], dict]:
    """The traced calls' figures in the window and its baseline, by (caller, callee)."""
    return {(e["caller"], e["callee"]): e for e in call_figures(con, w)}


def failed(call: dict) -> bool:
    """A traced call's errors rose in the window (`failing`), tested at the full level: a path asks about the few
    calls it walks, where the evidence family shares the level among every call a window tests, so a hop's call may
    read as failed though the family counted it as chance."""
    return failing(call["errors"], call["calls"], call["errors_before"], call["calls_before"])


def slowed(call: dict) -> bool:
    """A traced call's p95 grew by `MIN_RATIO` in the window."""
    return bool(call["p95"] and call["p95_before"] and call["p95"] >= MIN_RATIO * call["p95_before"])


def troubled(call: dict | None) -> bool:
    """Whether a traced call failed or slowed in the window."""
    return bool(call) and (failed(call) or slowed(call))


def deviates(hop: Hop) -> bool:
    """A component left its baseline: evidence of its own, or its calls into the next hop failed or slowed."""
    return bool(hop.items) or troubled(hop.call)


def calls_graph(g: nx.DiGraph) -> nx.DiGraph:
    """The calls of a dependency graph alone, in a fixed order (ties between paths fall the same way every run)."""
    return nx.DiGraph(sorted(call_edges(g)))


def fault_paths(con: duckdb.DuckDBPyConnection, w: Window, ranking: Ranking, causes) -> dict[str, list[Hop]]:
    """`fault_path` of each cause, walked together."""
    walker = Walker(con, w, ranking)
    return {cause: fault_path(walker, cause) for cause in causes}


def fault_path(walker: Walker, cause: str) -> list[Hop]:
    """The way the fault took from an entry to `cause`: the path of calls, from any entry to the cause's service,
    that runs most along calls that failed or slowed and through components that moved, then the shortest; from
    the hop past its last component that did not move (the fault showed no further out). A pod cause ends the path
    in place of its service; a node cause after one of its pods that moved (it reaches users through each: the one
    the best way leads to, then the one that moved most; where none moved, the node alone)."""
    ranking, figures = walker.ranking, walker.figures
    service_of = ranking.service_of
    tails = [[cause]]
    if cause in set(ranking.node_of.values()) and cause not in service_of:
        blame = {p: sum(it.blame for it in _items(ranking, p)) for p, n in ranking.node_of.items()
                 if n == cause and p in service_of}
        tails = [[p, cause] for p in sorted((p for p in blame if blame[p] > 0), key=lambda p: (-blame[p], p))] or tails
    moved = {it.component for it in ranking.items} | {service_of.get(it.component) for it in ranking.items}
    calls = calls_graph(ranking.graph)

    def cost(a: str, b: str, _) -> int:  # a call that held costs more than one that failed, a quiet callee too
        return 1 + 2 * (not troubled(figures.get((a, b)))) + (b not in moved)

    # One search from each entry gives its cheapest way to every service, whatever the tails.
    reached = [nx.single_source_dijkstra(calls, e, weight=cost) for e in sorted(entries(ranking.graph)) if e in calls]
    ways = [(lengths[target], len(paths[target]), paths[target][:-1] + tail)
            for tail in tails for target in [service_of.get(tail[0], tail[0])]
            for lengths, paths in reached if target in lengths]
    # ties: the pod that moved most, then the first entry; where no entry leads to any, the first tail alone
    best = min(ways, key=lambda way: way[:2], default=(0, 0, tails[0]))[2]
    hops = walker.walk(best)
    entry = hops[0]
    entry.statuses = statuses(walker.con, walker.w, sorted(_members(ranking, entry.component)))
    hops[-1].also = also_moved(walker.con, walker.w, sorted(_members(ranking, cause)), {it.key for it in hops[-1].items})
    quiet = [i for i, h in enumerate(hops[:-1]) if not deviates(h)]
    return hops[quiet[-1] + 1:] if quiet else hops


def ungrounded(con: duckdb.DuckDBPyConnection, w: Window, ranking: Ranking, path: list[str]) -> list[str]:
    """What does not hold of a path an answer tells (outermost first, the cause last): [] when it is grounded."""
    if not path:
        return ["no path"]
    found = []
    calls = calls_graph(ranking.graph)
    first = ranking.service_of.get(path[0], path[0])
    if not any(e == first or (e in calls and first in calls and nx.has_path(calls, e, first))
               for e in entries(ranking.graph)):
        found.append(f"no call path leads from where the load comes in to {path[0]}")
    for a, b in zip(path, path[1:]):
        if not _linked(ranking, a, b):
            found.append(f"no call or placement links {a} to {b}")
    hops = Walker(con, w, ranking).walk(path)
    found += [f"{h.component} did not leave its baseline" for h in hops if not deviates(h)]
    timed = [h for h in hops if h.onset is not None]
    for i, outer in enumerate(timed):
        for inner in timed[i + 1:]:
            if outer.onset + SLACK < inner.onset:
                found.append(f"{outer.component} moved at {outer.onset:%H:%M}, before {inner.component} "
                             f"({inner.onset:%H:%M}) on which it waits")
    return found
