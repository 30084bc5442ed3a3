"""The dependency graph of a system around a case window (networkx).

Edges point from a component to what it depends on:
- traced calls (caller service -> callee service) within reach of the window;
- calls the dump declares (`declared_calls`, from a Nezha `dependency.csv`);
- calls a system declares but does not trace (`systems/*.json`, data per system), kept only
  where both ends exist in the store;
- placement: a pod runs on its node (pod -> node), a service has its pods (service -> pod,
  kind "has", which is membership rather than dependency).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from functools import cache, partial
from importlib import resources

import duckdb
import networkx as nx

from .evidence import BASELINE, TRACE_REACH, Window, kept


@cache
def declared_by_systems() -> tuple[tuple[str, str], ...]:
    calls = []
    for entry in resources.files("features.systems").iterdir():
        if entry.name.endswith(".json"):
            calls += [tuple(pair) for pair in json.loads(entry.read_text())["calls_not_traced"]]
    return tuple(calls)


def dependency_graph(con: duckdb.DuckDBPyConnection, w: Window) -> nx.DiGraph:
    g = nx.DiGraph()
    for caller, callee, calls in con.execute("""
            select caller, callee, sum(calls) from trace_edge_minute
            where minute >= ? and minute <= ? and callee is not null and caller <> callee group by all""",
                                             [w.start - TRACE_REACH, w.end + TRACE_REACH]).fetchall():
        g.add_edge(caller, callee, kind="call", calls=int(calls))
    for caller, callee in con.execute("select distinct caller, callee from declared_calls").fetchall():
        if not g.has_edge(caller, callee):
            g.add_edge(caller, callee, kind="declared")
    services = {r[0] for r in con.execute("select distinct service from series where sid in (select distinct sid from "
                                          "anomaly_points where ts >= ? and ts <= ?)",
                                          [w.start - TRACE_REACH, w.end]).fetchall()} | set(g)
    for caller, callee in declared_by_systems():
        if caller in services and callee in services and not g.has_edge(caller, callee):
            g.add_edge(caller, callee, kind="declared")
    for pod, service, node in con.execute("select pod, service, node from placement").fetchall():
        g.add_edge(service, pod, kind="has")
        g.add_edge(pod, node, kind="runs on")
    return g


CALLS = ("call", "declared")


def service_of(component: str) -> str:
    """The service of a pod name (HipsterShop `name-0`, Kubernetes `name-<hash>-<id>`)."""
    component = re.sub(r"-[a-z0-9]{6,10}-[a-z0-9]{5}$", "", component)
    return re.sub(r"-\d+$", "", component)


def call_edges(g: nx.DiGraph) -> list[tuple[str, str]]:
    """Caller -> callee, traced or declared."""
    return [(a, b) for a, b, k in g.edges(data="kind") if k in CALLS]


def entries(g: nx.DiGraph) -> set[str]:
    """Where the load comes in: the services that call others and that nothing calls."""
    calls = call_edges(g)
    return {a for a, _ in calls} - {b for _, b in calls}


def _calls(g: nx.DiGraph, component: str, hops: int, upstream: bool) -> set[str]:
    """Components within `hops` calls down (what it calls) or up (what calls it); a pod as its service."""
    if component not in g:
        return set()
    start = {component} | {s for s, _, k in g.in_edges(component, data="kind") if k == "has"}
    found: set[str] = set()
    frontier = set(start)
    for _ in range(hops):
        edges = (g.in_edges(u, data="kind") for u in frontier) if upstream else \
            (g.out_edges(u, data="kind") for u in frontier)
        frontier = {(a if upstream else b) for batch in edges for a, b, k in batch if k in CALLS} - found
        found |= frontier
    return found - start


def depends_on(g: nx.DiGraph, component: str, hops: int = 2) -> set[str]:
    """What a component calls within `hops` calls (a pod calls what its service calls), and its node."""
    nodes = {v for _, v, k in g.out_edges(component, data="kind") if k == "runs on"} if component in g else set()
    return callees(g, component, hops) | nodes


def callees(g: nx.DiGraph, component: str, hops: int = 2) -> set[str]:
    """What a component calls within `hops` calls (a pod calls what its service calls)."""
    return _calls(g, component, hops, upstream=False)


def callers(g: nx.DiGraph, component: str, hops: int = 2) -> set[str]:
    """What calls a component within `hops` calls (what calls a pod's service calls the pod)."""
    return _calls(g, component, hops, upstream=True)


def topology(con: duckdb.DuckDBPyConnection, w: Window) -> tuple[dict[str, set[str]], set[str], dict[str, str]]:
    """Pods of each service, the nodes, and each pod's node, around the window."""
    pods_of: dict[str, set[str]] = {}
    node_of: dict[str, str] = {}
    for pod, service, node in con.execute("select pod, service, node from placement").fetchall():
        pods_of.setdefault(service, set()).add(pod)
        node_of[pod] = node
    for comp, kind, service in seen(con, w.start - BASELINE, w.end):
        if kind == "pod" and service:
            pods_of.setdefault(service, set()).add(comp)
        elif kind == "node":
            node_of.setdefault(comp, comp)
    nodes = set(node_of.values())
    return pods_of, nodes, node_of


HOUR = dt.timedelta(hours=1)


def seen(con: duckdb.DuckDBPyConnection, lo: dt.datetime, hi: dt.datetime) -> set[tuple[str, str, str]]:
    """The pods and nodes with metric points from lo to hi (more than an hour apart), with their kind and service.
    Each hour's are read once in a process (`kept`): the windows of a scan share them. A component with points in
    an hour before lo and after hi has points in between, hi - lo being longer than the hour."""
    found = set()
    hour = lo.replace(minute=0, second=0, microsecond=0)
    while hour <= hi:
        found |= {(comp, kind, service) for comp, kind, service, first, last
                  in kept(con, ("seen", hour), partial(_seen_in_hour, con, hour)) if first <= hi and last >= lo}
        hour += HOUR
    return found


def _seen_in_hour(con: duckdb.DuckDBPyConnection, hour: dt.datetime) -> list[tuple]:
    return con.execute("""
        select component, component_kind, service, min(ts), max(ts) from metric_points
        where ts >= ? and ts < ? and component_kind in ('pod', 'node') group by all""", [hour, hour + HOUR]).fetchall()
