"""A system description drawn from a store's traces and logs: the services, the operations each serves, the calls
each operation makes (in order, how often, how many in a row) and the lines it logs as it runs, so that a system can
be simulated as its own telemetry shows it. What traces cannot tell (languages, datastores they do not trace, which
faults apply) is left for a person to add.

An operation is a span a service starts on a call from another service (or a request from outside); its calls are the
calls its own spans make into other services, and its lines are the log lines written in its spans (where the dump
joins lines to spans, by their code position), both in the order they happened. The most common order of an
operation's steps stands for it; a line another run wrote in a step's place, as a warning or an error, is that step's
other branch (`else`). The entry's requests are told apart by the first call they make (a gateway's routes)."""

from __future__ import annotations

import re
from collections import Counter, defaultdict

import duckdb

ID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}|[\w.-]{24,}"
                r"|\b\d+(\.\d+)?\b")
IDS_IN_LINE = re.compile(r"TraceID: \S+ |SpanID: \S+ ")  # the ids a Spring line carries, not its words
WORDS = 160  # characters of a line kept as its step's words
# A client span of a database call as JDBC instrumentation names it (`SELECT ts.orders`): a call to a datastore the
# traces show no span of; a message sent to a broker and taken by a consumer (`<default> send`, `topic process`).
SQL = re.compile(r"^(SELECT|INSERT|UPDATE|DELETE) \w+\.\w+$")
SENT, TAKEN = re.compile(r"(send|publish)$"), re.compile(r"^(\S+) (process|receive)$")
DATABASE, BROKER = "database", "broker"


def describe(con: duckdb.DuckDBPyConnection, name: str) -> dict:
    """A description (as the YAML file holds it) of the system whose telemetry the store holds."""
    spans = con.execute("""
        select s.trace_id, s.span_id, s.parent_span_id, s.service, s.operation, s.pod, s.ts, s.duration_us,
               s.kind, s.peer, p.service, p.operation
        from spans s left join spans p on p.trace_id = s.trace_id and p.span_id = s.parent_span_id""").fetchall()
    lines: dict[tuple, list] = defaultdict(list)
    said: dict[tuple, Counter] = defaultdict(Counter)  # (service, position) -> (level, words) written there
    for trace, span, service, ts, level, event, message in con.execute("""
            select trace_id, span_id, service, ts, level, event, message from log_lines
            where trace_id is not null and event is not null""").fetchall():
        lines[trace, span].append((ts, "log", event))
        said[service, event][(level or "INFO").upper(), _words(message, event)] += 1
    traced = {s[3] for s in spans}
    entries, own, kids = {}, {}, defaultdict(list)
    rpc: dict[str, str] = {}  # a service called by gRPC -> its gRPC service name
    http: set[str] = set()  # the services called over HTTP
    brokers: dict[str, set[str]] = defaultdict(set)  # a broker -> its topics
    for trace, span, parent, service, op, pod, ts, dur, kind, peer, p_service, p_op in spans:
        kids[trace, parent].append((trace, span))
        own[trace, span] = (service, op, ts, dur or 0, kind, peer)
        if p_service != service:  # a call into the service, a message it takes, or a request from outside
            taken = TAKEN.match(op) if p_op and SENT.search(p_op) else None
            if taken:
                brokers[peer or BROKER].add(taken[1])
            elif p_op and p_op.startswith("HTTP "):
                http.add(service)
                op = _http(p_op, op)
            elif p_op == op and "/" in op.strip("/"):  # gRPC's `package.Service/Method` on both sides
                rpc[service], op = op.rsplit("/", 1)
            entries[trace, span] = (service, op, ts, dur or 0, taken and (peer or BROKER, taken[1]))
    stores: dict[str, set[str]] = defaultdict(set)  # a datastore the traces show no span of -> the commands it takes
    runs: dict[tuple, list] = defaultdict(list)  # (service, operation) -> (its steps in order, its own time)
    for key, (service, op, _, dur, _) in entries.items():
        steps, called, stack = [], 0, [key]
        while stack:
            here = stack.pop()
            steps += lines.get(here, [])
            for child in kids.get(here, []):
                if child in entries:
                    c_service, c_op, c_ts, c_dur, topic = entries[child]
                    if not topic:
                        steps.append((c_ts, "call", (c_service, c_op)))
                        called += c_dur
                elif own[child][0] == service:
                    _, c_op, c_ts, _, c_kind, peer = own[child]
                    if c_kind == "producer":  # one message sent, whichever consumers take it
                        topic = next((entries[k][4] for k in kids.get(child, []) if k in entries and entries[k][4]),
                                     (peer or BROKER, c_op.rsplit(" ", 1)[0]))
                        brokers[topic[0]].add(topic[1])
                        steps.append((c_ts, "publish", topic))
                    elif peer and peer not in traced:  # a datastore its client traces the call to
                        stores[peer].add(c_op)
                        steps.append((c_ts, "call", (peer, c_op)))
                    elif SQL.match(c_op):
                        steps.append((c_ts, "call", (DATABASE, c_op.split()[0])))
                    stack.append(child)
        runs[service, op].append(([s[1:] for s in sorted(steps, key=lambda s: s[0])], max(0, dur - called)))
    roots = Counter((s[3], s[4]) for s in spans if s[2] is None)
    entry = Counter(service for service, _ in roots.elements()).most_common(1)[0][0]
    routed = len({op for service, op in roots if service == entry}) > 1  # its requests name their routes
    pods = defaultdict(set)
    for s in spans:
        pods[s[3]].add(s[5])
    components: dict[str, dict] = {}
    mix: Counter = Counter()
    for (service, op), done in sorted(runs.items()):
        comp = components.setdefault(service, {"kind": "service", "replicas": len(pods[service]), "operations": {}})
        if service == entry and not routed:  # the entry's requests, told apart by the first call they make
            for steps, own in done:
                route = next((what[1] for kind, what in steps if kind == "call"), op)
                mix[route] += 1
                comp["operations"].setdefault(route, []).append((steps, own))
        else:
            comp["operations"][op] = done
            if service == entry:
                mix[op] += len(done)
    consumed = _consumed(entries)
    for service, comp in components.items():
        times = sorted(us for done in comp["operations"].values() for _, us in done)
        comp["operations"] = {op: _operation(done, service, said) for op, done in comp["operations"].items()}
        comp["own_ms"] = round(times[len(times) // 2] / 1000, 2) if times and times[len(times) // 2] else 1.0
        for (svc, op), (broker, topic) in consumed.items():
            if svc == service:
                comp["operations"][op]["consumes"] = f"{broker}.{topic}"
        if service in http:
            comp["protocol"] = "http"
        elif service in rpc:  # the port is not in the spans: gRPC's usual one
            comp["rpc"] = {"service": rpc[service], "port": 50051}
    verbs = sorted({what[1] for done in runs.values() for steps, _ in done for kind, what in steps
                    if kind == "call" and what[0] == DATABASE})
    if verbs:  # the database the services query, which writes no span of its own
        stores[DATABASE] |= set(verbs)
    for store, commands in sorted(stores.items()):  # what the traces cannot tell (a cache, a store) is left to say
        components[store] = {"kind": "database", "client_spans": True, "operations": {c: {} for c in sorted(commands)}}
    for broker, topics in sorted(brokers.items()):
        components[broker] = {"kind": "broker", "topics": sorted(topics)}
    total = sum(mix.values())
    shares = {route: round(n / total, 4) for route, n in mix.most_common()}
    first = next(iter(shares))
    shares[first] = round(shares[first] + 1 - sum(shares.values()), 4)  # the shares add up to 1
    minutes = len({s[6].replace(second=0, microsecond=0) for s in spans})
    return {"name": name, "description": f"{name}, as its own traces and logs show it", "namespace": name,
            "nodes": {"workers": ["node-1", "node-2", "node-3", "node-4"]},
            "workload": {"entry": entry, "traces_per_minute": round(len({s[0] for s in spans}) / max(1, minutes), 1),
                         "mix": shares},
            "components": components, "faults": {}}


def _http(called: str, op: str) -> str:
    """An operation called over HTTP as a description names it: the client span's verb and the server span's route
    (`GET /cart`); a name that is no route alone, as a GET of it is simulated."""
    verb = called.removeprefix("HTTP ")
    return op if verb == "GET" and not op.startswith("/") else f"{verb} {op}"


def _consumed(entries: dict) -> dict[tuple[str, str], tuple[str, str]]:
    """(service, operation) -> the broker and topic it takes its messages from."""
    return {(service, op): topic for service, op, _, _, topic in entries.values() if topic}


def _words(message: str, event: str) -> str:
    """A log line as an operation's step: its code position, then its words, ids written `{id}`."""
    text = message.split(event, 1)[-1] if event in message else message
    text = IDS_IN_LINE.sub("", text.replace("\\n", " ").split('","stream"')[0]).strip().rstrip('"}').strip()
    text = ID.sub("{id}", text)
    return f"{event} {text if len(text) <= WORDS else text[:WORDS].rsplit(' ', 1)[0] + ' ...'}".strip()


def _shape(steps: list) -> tuple:
    """Steps with calls in a row to one operation as one step, and how many."""
    out: list = []
    for kind, what in steps:
        if out and kind == "call" and out[-1][:2] == (kind, what):
            out[-1] = (kind, what, out[-1][2] + 1)
        else:
            out.append((kind, what, 1))
    return tuple(out)


def _operation(runs: list[tuple[list, int]], service: str, said: dict) -> dict:
    """An operation from its runs: the most common order of its steps, each call with the share of the runs that
    make it and how many in a row, then the calls other runs make instead (one in twenty runs or more); a log step
    with the line other runs wrote in its place as its other branch."""
    shapes = [_shape(steps) for steps, _ in runs]
    common = Counter(shapes).most_common(1)[0][0]
    made = Counter(step for shape in shapes for step in set(shape))
    out = []
    for at, (kind, what, times) in enumerate(common):
        if kind in ("call", "publish"):
            step = {kind: f"{what[0]}.{what[1]}"}
            share = made[kind, what, times] / len(runs)
            step |= ({"p": round(share, 3)} if share < 0.995 else {}) | ({"times": times} if times > 1 else {})
        else:
            (level, words), _ = said[service, what].most_common(1)[0]
            step = {"log": words} | ({"level": level.lower()} if level != "INFO" else {})
            instead = Counter(shape[at][1] for shape in shapes if len(shape) > at and shape[:at] == common[:at]
                              and shape[at][0] == "log" and shape[at][1] != what)
            for other, _ in instead.most_common():
                (o_level, o_words), _ = said[service, other].most_common(1)[0]
                if o_level in ("WARN", "WARNING", "ERROR"):
                    step |= {"else": o_words, "else_level": "warn" if o_level.startswith("WARN") else "error"}
                    break
        out.append(step)
    for (kind, what, times), n in sorted(made.items(), key=lambda kv: -kv[1]):  # calls other runs make instead
        if kind in ("call", "publish") and (kind, what, times) not in common and n >= 0.05 * len(runs) \
                and not any(s.get(kind) == f"{what[0]}.{what[1]}" for s in out):
            out.append({kind: f"{what[0]}.{what[1]}", "p": round(n / len(runs), 3)} | ({"times": times} if times > 1 else {}))
    return {"steps": out} if out else {}
