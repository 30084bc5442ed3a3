"""Container log lines (Filebeat rows) for one hour, each component in its language's style.

Lines come from the hour's calls (a served request, a failed call logged by its
caller) and from fault or noise bursts. Text is chosen per event, then rendered
per style with polars string expressions: Go JSON, log4j JSON, Python JSON, Node pino JSON, and plain text.
"""

from __future__ import annotations

import json

import numpy as np
import polars as pl

from .failures import failure_line
from .faults import OPENING
from .system import System
from .topology import Topology
from .traces import BREAKS, KINDS, Hour
from .workload import Day, Flow, flows


def _ids_in_lines(system: System) -> bool:
    """Whether some component's log lines carry their trace and span ids (a Spring service's lines do)."""
    return any(c.log_style == "spring" for c in system.components.values())


def _optional(system: System) -> set[tuple[str, str]]:
    """Caller -> callee pairs whose every call is optional: their failures are warnings of the caller's."""
    made: dict[tuple[str, str], bool] = {}
    for flow in flows(system):
        for node in flow.nodes[1:]:
            pair = (flow.nodes[node.parent].service, node.service)
            made[pair] = made.get(pair, True) and node.optional
    return {pair for pair, optional in made.items() if optional}


def _esc(text: str) -> str:
    return json.dumps(text)[1:-1]


class _Events:
    """Log events as parallel lists: time, pod, severity, text before and after an id, and where lines carry them
    (`ids`), the trace and span each was written in."""

    def __init__(self, ids: bool) -> None:
        self.ts: list[np.ndarray] = []
        self.pod: list[np.ndarray] = []
        self.sev: list[np.ndarray] = []
        self.text: list[np.ndarray] = []
        self.extra: list[np.ndarray] = []
        self.trace: list[np.ndarray] | None = [] if ids else None
        self.span: list[np.ndarray] = []
        self.vocab: dict[str, int] = {}

    def add(self, ts, pod, severity: str, text: str, extra: str = "", trace=None, span=None) -> None:
        ts = np.atleast_1d(ts)
        n = len(ts)
        if n == 0:
            return
        self.ts.append(ts.astype(np.int64))
        self.pod.append(np.broadcast_to(pod, n).astype(int))
        self.sev.append(np.full(n, self.vocab.setdefault(severity, len(self.vocab))))
        self.text.append(np.full(n, self.vocab.setdefault(text, len(self.vocab))))
        self.extra.append(np.full(n, self.vocab.setdefault(extra, len(self.vocab))))
        if self.trace is not None:
            self.trace.append(np.full(n, "", object) if trace is None else np.asarray(trace, object))
            self.span.append(np.full(n, "", object) if span is None else np.asarray(span, object))

    def frame(self) -> pl.DataFrame:
        words = pl.Series(list(self.vocab), dtype=pl.String)
        escaped = pl.Series([_esc(w) for w in self.vocab], dtype=pl.String)
        text = np.concatenate(self.text)
        ids = {} if self.trace is None else {"trace_id": np.concatenate(self.trace).astype(str),
                                             "span_id": np.concatenate(self.span).astype(str)}
        return pl.DataFrame({
            "ts": np.concatenate(self.ts), "pod": np.concatenate(self.pod),
            "severity": words.gather(np.concatenate(self.sev)), "text": words.gather(text),
            "esc": escaped.gather(text), "extra": words.gather(np.concatenate(self.extra)), **ids,
        })


def _status(flow: Flow, failed) -> np.ndarray:
    """The entry's HTTP status: 500 for a failed request, else its operation's (a cart update redirects: 302)."""
    return np.where(failed, "500", str(flow.status))


def hour_logs(day: Day, hour: int, traffic: Hour, rng: np.random.Generator, untraced: float,
              entry_err: np.ndarray) -> pl.DataFrame:
    """All log rows of CST hour `hour`, sorted by time, with the challenge's columns.

    An entry that keeps an access log logs every request it serves: the traced ones with their calls, and `untraced`
    more a minute (at the day's mean load) whose failure ratio per minute and pod is `entry_err`."""
    topo = day.topo
    system = topo.system
    entry = system.components[system.entry]
    optional_pairs = _optional(system)
    by_route = {flow.route: flow for flow in flows(system)}
    calls = traffic.calls
    methods = list(traffic.methods.index)
    events = _Events(_ids_in_lines(system))
    _served(topo, traffic, methods, events)
    for (caller, callee, method, kind, root), idx in _groups(calls).items():
        ts = calls.ts_us[idx]
        svc_callee = topo.service_of[topo.pods[callee]]
        svc_caller = topo.service_of[topo.pods[caller]]
        if root:
            if entry.access_log:
                route = methods[method]
                http = _http(route)
                events.add(ts - calls.duration_us[idx], caller, "debug", "request started", http)
                events.add(ts, caller, "error" if kind else "debug", "request complete",
                           f'{http}"http.resp.status":{_status(by_route[route], kind)},')
        elif kind:
            text = failure_line(KINDS[kind], topo, topo.pods[callee])
            optional = (svc_caller, svc_callee) in optional_pairs
            message = "request error" if svc_caller == system.entry and entry.access_log and not optional else text
            extra = f'"error":"{_esc(text)}",' if message != text else ""
            events.add(ts, caller, "warning" if optional else "error", message, extra)
    if entry.access_log:
        _access_log(day, hour, untraced, entry_err, events, rng)
    for burst in day.bursts:
        lo, hi = max(burst.start, hour * 60), min(burst.end, hour * 60 + 60)
        for pod in burst.pods:
            for minute in range(lo, hi):
                n = rng.poisson(burst.per_minute)
                t = _minute_us(day, minute) + rng.integers(0, 60_000_000, n)
                for i, text in enumerate(rng.choice(burst.messages, n)):
                    events.add(t[i], topo.index(pod), burst.severity, str(text))
    for service, text in ((c.name, c.background_log) for c in system.components.values() if c.background_log):
        pod = topo.pods_of(service)[0]
        events.add(_minute_us(day, hour * 60) + rng.integers(0, 3_600_000_000, 6), topo.index(pod), "info", text)
    return _render(events.frame(), topo, rng)


def _served(topo: Topology, traffic: Hour, methods: list[str], events: _Events) -> None:
    """The lines an operation writes as it runs, its log steps spread over its span: all of them where it succeeded,
    those up to the step where a code fault broke its path (that step's other branch where a method returned a
    wrong value; the framework's error line as the request unwinds, where it threw), none where it failed otherwise.
    A callee whose caller gave up waiting still ran its code: it logs all its lines."""
    done = traffic.served
    key = np.stack([done.pod, done.method, done.cut, done.broke, done.kind != 0], 1)
    for (pod, method, cut, broke, failed), idx in _by(key).items():
        if failed and not broke:
            continue
        comp = topo.component(topo.pods[pod])
        op = comp.operations.get(methods[method])
        if op is None:
            continue
        for i, step in enumerate(op.steps):
            if not step.log or (broke and i > cut):
                continue
            ts = done.start_us[idx] + done.duration_us[idx] * i // len(op.steps)
            text, level = step.log, step.level
            if broke and i == cut and BREAKS[broke] == "return":
                text, level = step.otherwise or step.log, step.otherwise_level
            events.add(ts, pod, level, text, trace=done.trace_id[idx], span=done.span_id[idx])
            if broke and i == cut and BREAKS[broke] == "exception":  # logged as the request unwinds, at its end
                unwound = np.maximum(done.start_us[idx] + done.duration_us[idx], ts + 1000)  # a log's ms after
                events.add(unwound, pod, "error", _exception(comp, step.log), trace=done.trace_id[idx],
                           span=done.span_id[idx])


def _exception(comp, after: str) -> str:
    """What a service logs where a method throws (after the line `after`): its framework's error line."""
    if comp.log_style == "spring":
        return ("o.a.c.c.C.[.[.[.[dispatcherServlet]#175 Servlet.service() for servlet [dispatcherServlet] threw "
                "exception: java.lang.RuntimeException: injected exception")
    return f"exception after '{after.split(' ')[0]}': injected exception"


def _by(key: np.ndarray) -> dict[tuple, np.ndarray]:
    """Row indices of each distinct row of `key`."""
    if not len(key):
        return {}
    uniq, inverse = np.unique(key, axis=0, return_inverse=True)
    order = np.argsort(inverse.ravel(), kind="stable")
    bounds = np.cumsum(np.bincount(inverse.ravel(), minlength=len(uniq)))[:-1]
    return {tuple(int(v) for v in u): idx for u, idx in zip(uniq, np.split(order, bounds))}


def _http(route: str) -> str:
    verb, path = route.split()
    return f'"http.req.method":"{verb}","http.req.path":"{path}",'


def _access_log(day: Day, hour: int, per_minute: float, entry_err: np.ndarray, events: _Events, rng) -> None:
    """The entry's `request complete` line for each request that was not traced, spread over its pods."""
    pods = [day.topo.index(p) for p in day.topo.pods_of(day.topo.system.entry)]
    minutes = np.arange(hour * 60, hour * 60 + 60)
    for flow in flows(day.topo.system):
        route = flow.route
        counts = rng.poisson(per_minute * flow.share * day.load_of(route)[minutes])
        minute = np.repeat(minutes, counts)
        pod = rng.choice(len(pods), minute.size)
        failed = rng.random(minute.size) < entry_err[minute, pod]
        ts = _minute_us(day, 0) + minute * 60_000_000 + rng.integers(0, 60_000_000, minute.size)
        status = _status(flow, failed)
        for code in np.unique(status):
            for j, p in enumerate(pods):
                pick = (status == code) & (pod == j)
                events.add(ts[pick], p, "error" if code == "500" else "debug", "request complete",
                           f'{_http(route)}"http.resp.status":{code},')


def _minute_us(day: Day, minute: int) -> int:
    return int(day.start_utc.timestamp() * 1e6) + minute * 60_000_000


def _groups(calls) -> dict[tuple, np.ndarray]:
    return _by(np.stack([calls.caller, calls.callee, calls.method, calls.kind, calls.root], 1))


def _render(df: pl.DataFrame, topo: Topology, rng: np.random.Generator) -> pl.DataFrame:
    n = df.height
    ids = np.frombuffer(rng.bytes(n * 4).hex().encode(), dtype="S8").astype(str)
    pods = pl.Series([p for p in topo.pods])
    services = pl.Series([topo.service_of[p] for p in topo.pods])
    nodes = pl.Series([topo.node_of[p] for p in topo.pods])
    agents = {node: f"filebeat-filebeat-{rng.integers(36**5):07x}"[:23] for node in topo.system.nodes}
    loggers = pl.Series([topo.component(p).logger or topo.component(p).rpc_service or topo.service_of[p]
                         for p in topo.pods])
    df = df.sort("ts")
    df = df.with_columns(
        time=pl.from_epoch("ts", time_unit="us").dt.replace_time_zone("UTC"),
        pod_name=pods.gather(df["pod"].to_numpy()),
        service=services.gather(df["pod"].to_numpy()),
        node=nodes.gather(df["pod"].to_numpy()),
        id=pl.Series(ids),
        logger=loggers.gather(df["pod"].to_numpy()),
    ).with_columns(pl.col("text", "esc").str.replace("{id}", pl.col("id"), literal=True))
    style = pl.col("service").replace_strict({c.name: c.log_style for c in topo.system.components.values()})
    sev_lower, sev_upper = pl.col("severity").str.to_lowercase(), pl.col("severity").str.to_uppercase()
    esc = pl.col("esc")
    iso = pl.col("time").dt.strftime("%Y-%m-%dT%H:%M:%S%.9fZ")
    epoch_us = pl.col("ts")
    message = (
        pl.when(style == "go-json").then(pl.concat_str([
            pl.lit("{"), pl.col("extra"), pl.lit('"message":"'), esc, pl.lit('","severity":"'), sev_lower,
            pl.lit('","timestamp":"'), iso, pl.lit('"}')]))
        .when(style == "log4j-json").then(pl.concat_str([
            pl.lit('{"instant":{"epochSecond":'), (epoch_us // 1_000_000).cast(pl.String),
            pl.lit(',"nanoOfSecond":'), (epoch_us % 1_000_000 * 1000).cast(pl.String),
            pl.lit('},"thread":"grpc-default-executor-'), (epoch_us % 7).cast(pl.String), pl.lit('","level":"'),
            sev_upper.replace("WARNING", "WARN"), pl.lit('","loggerName":"'), pl.col("logger"), pl.lit('","message":"'), esc,
            pl.lit('","endOfBatch":false,"loggerFqcn":"org.apache.logging.log4j.spi.AbstractLogger"}')]))
        .when(style == "python-json").then(pl.concat_str([
            pl.lit('{"timestamp": '), (epoch_us / 1e6).round(3).cast(pl.String), pl.lit(', "severity": "'), sev_upper,
            pl.lit('", "name": "'), pl.col("service"), pl.lit('-server", "message": "'), esc, pl.lit('"}')]))
        .when(style == "pino").then(pl.concat_str([
            pl.lit('{"severity":"'), sev_lower, pl.lit('","time":'), (epoch_us // 1000).cast(pl.String),
            pl.lit(',"pid":1,"hostname":"'), pl.col("pod_name"), pl.lit('","name":"'), pl.col("service"),
            pl.lit('-server","message":"'), esc, pl.lit('"}')]))
        .otherwise(pl.col("text"))
    )
    ids = []
    if "trace_id" in df.columns:  # Spring Boot's pattern as Train Ticket logs it (a CST clock), its ids in the line
        message = pl.when(style == "spring").then(pl.concat_str([
            (pl.col("time") + pl.duration(hours=8)).dt.strftime("%H:%M:%S%.3f"), pl.lit(" "),
            sev_upper.replace("WARNING", "WARN"), pl.lit("  "),
            pl.col("text").str.extract(OPENING.pattern, 1).fill_null(pl.col("logger")),
            pl.lit(" TraceID: "), pl.col("trace_id"), pl.lit(" SpanID: "), pl.col("span_id"), pl.lit(" "),
            pl.col("text").str.replace(OPENING.pattern, "")])).otherwise(message)
        ids = [pl.col("trace_id"), pl.col("span_id")]
    return df.select(
        pl.lit(topo.system.namespace).alias("k8_namespace"),
        pl.col("time").dt.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").alias("@timestamp"),
        pl.col("node").replace_strict(agents).alias("agent_name"),
        pl.col("pod_name").alias("k8_pod"),
        message.alias("message"),
        pl.col("node").alias("k8_node_name"),
        *ids,
    )


