"""Read-only tools the model may call: parameterised SQL over the store, bounded output.

Each tool is a typed function whose docstring is what the model is told about it. A tool
that fails returns `Error: ...` to the model instead of ending the case.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from features.cases import Question
from features.evidence import BASELINE, GAP, Item, Window, changepoints, events, flat, logs, metrics, silence, traces
from features.options import Option
from features.ranker import strength

MAX_LINES = 4


@dataclass
class Context:
    con: duckdb.DuckDBPyConnection
    question: Question

    @property
    def window(self) -> Window:
        return Window.around(self.question.start, self.question.end)


@dataclass(frozen=True)
class Result:
    text: str  # what the model reads
    keys: tuple[str, ...] = ()  # the metric names and log keywords the check found moving, verbatim
    found: bool = True  # False where the store gave nothing: the text only says what was asked
    failed: bool = False  # the check could not run (an unknown tool, a failed query): it says nothing of the store

    @classmethod
    def failure(cls, text: str) -> "Result":
        return cls(text, found=False, failed=True)

    @property
    def empty(self) -> bool:
        """Whether the store holds nothing of what was asked (a check that failed says nothing either way)."""
        return not self.found and not self.failed

    @property
    def read(self) -> str:
        """All the check read from the store: what the model reads, and the keys a reason may name (a line's
        keyword can lie past what the model reads of the line). Nothing where it found nothing: its text echoes
        the request (a keyword searched for), which is no fact of the store's."""
        return "\n".join([self.text, *self.keys]) if self.found else ""


def _names(ctx: Context, component: str) -> set[str]:
    """The component and what the ranking counts as its: a service's pods; a pod's service, whose service-wide
    evidence (traces, APM) goes to its one anomalous replica."""
    placed = ctx.con.execute("select pod, service from placement where pod = ? or service = ?",
                             [component, component]).fetchall()
    return {component, *(n for pod, service in placed for n in (pod, service))}


def _items(found: list[Item], nothing: str, names: set[str]) -> Result:
    """The lines found, strongest first; the keys only of those that are the checked component's own (a caller's
    line that names it is shown, but its keys are the caller's)."""
    found = sorted(found, key=strength)[:MAX_LINES]  # as the ranking orders them, ties broken alike
    if not found:
        return Result(nothing, found=False)
    return Result("\n".join(flat(i.text, 160) for i in found),
                  tuple(dict.fromkeys(i.key for i in found if i.component in names)))


def metric_anomalies(ctx: Context, component: str) -> Result:
    """Metrics of a component (a service covers its pods, a pod its service) that left their baseline, shifted or stopped in the window."""
    w = ctx.window
    names = _names(ctx, component)
    found = [i for family in (metrics, changepoints, silence) for i in family.collect(ctx.con, w) if i.component in names]
    return _items(found, f"no metric of {flat(component, 60)} left its baseline", names)


def log_templates(ctx: Context, component: str, keyword: str = "") -> Result:
    """Log templates of a component (a service covers its pods) in the window, optionally containing a keyword."""
    q = ctx.question
    rows = ctx.con.execute("""
        select m.component, template_id, t.template, sum(m.lines) filter (where m.minute >= ?) as during,
               coalesce(sum(m.lines) filter (where m.minute < ?), 0) as before
        from log_template_minute m join log_templates t using (template_id)
        where (m.component = ? or m.service = ?) and m.minute >= ? and m.minute <= ? and t.template ilike ?
        group by all having during > 0 order by during - before desc, m.component, template_id limit ?""",
                           [q.start, q.start - GAP, component, component, q.start - BASELINE, q.end,
                            f"%{keyword}%", MAX_LINES]).fetchall()
    if not rows:
        asked = f" contains '{flat(keyword, 40)}'" if keyword else ""
        return Result(f"no log template of {flat(component, 60)}{asked}", found=False)
    # A line of each template in the window fills its placeholders (a rule's or a callee's name), as the digest does.
    said = dict(ctx.con.execute("""
        select template_id, arg_min(message, (ts, message)) from log_lines
        where (component = ? or service = ?) and ts >= ? and ts < ? + interval 1 minute
        and template_id in (select unnest(?)) group by all""",
                                [component, component, q.start, q.end, [i for _, i, _, _, _ in rows]]).fetchall())
    filled = [(c, logs.verbatim(t, said.get(i) or ""), d, b) for c, i, t, d, b in rows]
    lines = [f"{flat(c, 60)}: {int(d)} lines (before {int(b)}): \"{flat(t, 120)}\"" for c, t, d, b in filled]
    return Result("\n".join(lines), tuple(dict.fromkeys(logs.keyword(t) for _, t, _, _ in filled)))


def trace_edges(ctx: Context, component: str) -> Result:
    """Traced calls into and out of a service (or a pod's service) in the window: errors, call gaps, its self time,
    and the paths of events in its spans that changed."""
    names = _names(ctx, component)
    found = [i for family in (traces, events) for i in family.collect(ctx.con, ctx.window)
             if i.component in names or component in i.text]
    return _items(found, f"no traced calls of {flat(component, 60)} changed", names)


def neighbours(ctx: Context, component: str) -> Result:
    """Replicas of a pod's service and the pods sharing its node (or the pods on a node)."""
    rows = ctx.con.execute("select pod, service, node from placement").fetchall()
    node_of = {p: n for p, _, n in rows}
    service = next((s for p, s, _ in rows if component in (p, s)), None)
    node = component if component in {n for _, _, n in rows} else node_of.get(component)
    parts = []
    if service:
        parts.append(f"replicas of {service}: " + ", ".join(sorted(p for p, s, _ in rows if s == service)))
    if node:
        parts.append(f"pods on {node}: " + ", ".join(sorted(p for p, _, n in rows if n == node and p != component)))
    if not parts:
        return Result(f"{flat(component, 60)} is not in the topology", found=False)
    return Result("\n".join(flat(part, 400) for part in parts))


TOOLS = {f.__name__: f for f in (metric_anomalies, log_templates, trace_edges, neighbours)}
# How each tool appears in the reasoning trace (the judge reads these action names).
TRACE_ACTION = {"metric_anomalies": "MetricAnalysis", "log_templates": "LogSearch", "trace_edges": "TraceAnalysis",
                "neighbours": "TopologyLookup"}


# An option is tested where its evidence was read (the kind it rests on) and where its fault type shows: code and
# JVM faults, DNS and port errors in the logs (the exception, the rule, the name), network faults in the traces,
# the rest in the metrics.
CHECK_OF_KIND = {"metric": "metric_anomalies", "changepoint": "metric_anomalies", "silence": "metric_anomalies",
                 "log": "log_templates", "trace": "trace_edges", "event": "trace_edges"}
SHOWS_IN = {**dict.fromkeys(("jvm cpu", "jvm gc", "jvm latency", "jvm exception", "code error", "dns error",
                             "target port misconfig"), "log_templates"),
            **dict.fromkeys(("network delay", "network loss", "network corrupt"), "trace_edges")}


def checks_of(option: Option) -> list[str]:
    """The tools that test an option: the one that reads its evidence, then the one where its fault type shows."""
    return list(dict.fromkeys((CHECK_OF_KIND.get(option.kind, "metric_anomalies"),
                               SHOWS_IN.get(option.fault_type, "metric_anomalies"))))


def run_tool(ctx: Context, name: str, component: str, keyword: str = "") -> Result:
    if name not in TOOLS:
        return Result.failure(f"Error: unknown tool '{name}' (tools: {', '.join(TOOLS)})")
    try:
        if name == "log_templates":
            return log_templates(ctx, component, keyword)
        return TOOLS[name](ctx, component)
    except duckdb.Error as e:
        return Result.failure(f"Error: {str(e).splitlines()[0]}")
