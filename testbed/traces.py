"""Jaeger spans for one hour of simulated traffic, in the challenge's nested parquet types.

Every user request walks one flow (`workload.flows`). Per flow and hour all requests
are drawn at once (numpy arrays, one per call in the flow): which pod serves each
call, its own time, delays and failures from the `Day`'s effect fields; durations are
summed bottom-up and start times laid out top-down. A client span lives in the
caller's process and the callee's server span is its child, as in
`trace-sample-rows.csv`. The same arrays give the call events that logs are made from.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from .failures import ERRORS, TRANSIENT, status_text
from .topology import Topology
from .workload import BASE_ERR, FAILING, MINUTES, Day, flows

KINDS = ("ok", "transient", *ERRORS)  # index 0 means no error
_CONNECT = {"refused", "dns", "dial"}  # the callee's server span never starts
_DEADLINE_MS = 1000.0  # a call's deadline where its step names none
# Spans an hour's table is built of at a time: pyarrow converts a NumPy array of more than 2**22 strings into a
# ChunkedArray, which an Arrow struct cannot hold (a span has 8 strings of message events).
SPANS_AT_ONCE = 250_000

KV = pa.struct([("key", pa.string()), ("type", pa.string()), ("value", pa.string())])
SPAN_SCHEMA = pa.schema([
    ("traceID", pa.string()),
    ("spanID", pa.string()),
    ("flags", pa.float64()),
    ("operationName", pa.string()),
    ("references", pa.list_(pa.struct([("refType", pa.string()), ("spanID", pa.string()),
                                       ("traceID", pa.string())]))),
    ("startTime", pa.int64()),
    ("startTimeMillis", pa.int64()),
    ("duration", pa.int64()),
    ("tags", pa.list_(KV)),
    ("logs", pa.list_(pa.struct([("fields", pa.list_(KV)), ("timestamp", pa.int64())]))),
    ("process", pa.struct([("serviceName", pa.string()), ("tags", pa.list_(KV))])),
])
_TAG_KEYS = ("rpc.system", "rpc.service", "rpc.method", "net.peer.ip", "net.peer.port", "instrumentation.name",
             "status.code", "status.message", "span.kind", "internal.span.format")
_TAG_TYPES = ("string",) * 6 + ("int64",) + ("string",) * 3


class Vocab:
    """Interns strings so that a column of millions is built with one `take`."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        return self.index.setdefault(text, len(self.index))

    def take(self, idx: np.ndarray) -> pa.Array:
        return pa.array(list(self.index), pa.string()).take(pa.array(idx.ravel()))


@dataclass
class Calls:
    """Call events of one hour (all arrays of one length): input for the log writer."""

    ts_us: np.ndarray  # when the call ended (the caller logs then)
    caller: np.ndarray  # pod index of the caller
    callee: np.ndarray  # pod index of the callee
    method: np.ndarray  # vocabulary index of the method (or route for frontend requests)
    kind: np.ndarray  # index into KINDS; 0 = success
    duration_us: np.ndarray
    root: np.ndarray  # bool: the user's request at the frontend (caller == callee)


@dataclass
class Served:
    """Server spans of one hour that ran (all arrays of one length): where an operation's own log lines go."""

    start_us: np.ndarray
    duration_us: np.ndarray
    pod: np.ndarray
    method: np.ndarray  # vocabulary index of the operation
    kind: np.ndarray  # index into KINDS of how its code ended; 0 = it ran to its end (its caller may have given up)
    cut: np.ndarray  # the step at which a code fault broke its path (-1: none)
    broke: np.ndarray  # how: index into BREAKS
    trace_id: np.ndarray  # hex, as its spans carry them
    span_id: np.ndarray


@dataclass
class Hour:
    spans: pa.Table
    calls: Calls
    methods: Vocab
    served: Served


BREAKS = ("", "exception", "return", "fail")  # how a fault breaks an operation's path (`workload.PathBreak`)


def _hex_ids(rng: np.random.Generator, n: int, nbytes: int) -> np.ndarray:
    return np.frombuffer(rng.bytes(n * nbytes).hex().encode(), dtype=f"S{2 * nbytes}")


def _pick(rng, candidates: list[int], minute: np.ndarray, unrouted: np.ndarray) -> np.ndarray:
    """A pod for each request: uniform over the routable replicas (all of them if none is)."""
    ok = ~unrouted[np.ix_(minute, candidates)]
    ok[~ok.any(1)] = True
    cum = np.cumsum(ok / ok.sum(1, keepdims=True), axis=1)
    choice = (rng.random(len(minute))[:, None] > cum).sum(1)
    return np.asarray(candidates)[np.minimum(choice, len(candidates) - 1)]


def span_names(system, node, route: str) -> tuple[str, str]:
    """The operation names of a call's client span and of its server span: gRPC's `Service/Method` on both sides;
    HTTP's `HTTP VERB` at the client and the route at the server; a datastore's command; a topic's
    `publish` and `process`."""
    if node.parent < 0:
        return "", route
    comp = system.components[node.service]
    if node.mode == "publish":
        return f"{node.method} publish", ""
    if node.mode == "consume":
        return "", f"{system.components[node.service].operations[node.method].consumes[1]} process"
    if not comp.traced:  # its clients trace their calls where their instrumentation does (JDBC, a Redis client)
        return (node.method if comp.client_spans else ""), ""
    if comp.protocol == "http":
        verb, _, path = node.method.partition(" ")
        return (f"HTTP {verb}", path) if path else ("HTTP GET", node.method)
    return (f"{comp.rpc_service}/{node.method}",) * 2


def simulate_hour(day: Day, hour: int, scale: float, rng: np.random.Generator) -> Hour:
    """All spans whose request starts in CST hour `hour` of `day`."""
    topo = day.topo
    system = topo.system
    t_day = int(day.start_utc.timestamp() * 1e6)
    minutes = np.arange(hour * 60, hour * 60 + 60)
    vocab, methods = Vocab(), Vocab()
    spans: dict[str, list] = {k: [] for k in ("trace", "span", "parent", "start", "dur", "pod", "op", "vals")}
    calls: dict[str, list] = {k: [] for k in ("ts", "caller", "callee", "method", "kind", "dur", "root")}
    served: dict[str, list] = {k: [] for k in ("start", "dur", "pod", "method", "kind", "cut", "broke", "trace",
                                               "span")}
    n_traces = 0
    kind_code = np.array([0] + [(TRANSIENT if k == "transient" else ERRORS[k])[1] for k in KINDS[1:]])
    msg_table = np.array([[vocab("")] * len(topo.pods)] + [
        [vocab(status_text(k, topo, p)[2]) for p in topo.pods] for k in KINDS[1:]])
    code_vocab = np.array([vocab(str(c)) for c in kind_code])
    fixed = [vocab(s) for s in ("grpc", "go.opentelemetry.io/otel/sdk/tracer", "server", "client", "jaeger",
                                "producer", "consumer")]
    ip_vocab = np.array([vocab(topo.ip_of[p]) for p in topo.pods])
    ports = np.array([vocab(str(p)) for p in range(33000, 33400)])
    trace_hex = []

    for flow in flows(system):
        route, nodes = flow.route, flow.nodes
        counts = rng.poisson(system.traces_per_minute * scale * day.load_of(route)[minutes] * flow.share)
        n = int(counts.sum())
        if n == 0:
            continue
        minute = np.repeat(minutes, counts)
        t0 = t_day + minute * 60_000_000 + rng.integers(0, 60_000_000, n)
        trace_ids = np.arange(n_traces, n_traces + n)
        n_traces += n
        k_nodes = len(nodes)
        pod = np.zeros((k_nodes, n), int)
        own = np.zeros((k_nodes, n))
        net = np.zeros((k_nodes, n))
        kind = np.zeros((k_nodes, n), int)  # failure of the call (client side)
        connect = np.zeros((k_nodes, n), bool)
        made = np.ones((k_nodes, n), bool)  # the request makes this call (the calls a code fault cut off are not)
        cut = np.full((k_nodes, n), np.iinfo(np.int32).max)  # the step at which a code fault broke the path
        broke = np.zeros((k_nodes, n), int)
        wait = np.zeros((k_nodes, n))  # ms a message waited in its topic before its consumer took it
        # the call failed on the wire or its caller gave up on it, though the callee's code ran to its end
        abandoned = np.zeros((k_nodes, n), bool)
        children: list[list[int]] = [[] for _ in nodes]
        for k, node in enumerate(nodes):
            cands = [topo.index(p) for p in topo.pods_of(node.service)]
            pod[k] = _pick(rng, cands, minute, day.unrouted)
            own[k] = (system.components[node.service].own_ms * rng.lognormal(0, 0.35, n)
                      * day.own_factor[minute, pod[k]] + day.own_extra_ms[minute, pod[k]])
            own_fail = rng.random(n) < day.own_err[minute, pod[k]]
            own_kinds = np.array([KINDS.index(day.own_err_kind.get(topo.pods[i], "transient")) for i in cands])
            transient = np.where(rng.random(n) < BASE_ERR, KINDS.index("transient"), 0)
            kind[k] = np.where(own_fail, own_kinds[np.searchsorted(cands, pod[k])], transient)
            for b in day.breaks.get((node.service, node.method), ()):
                hit = (rng.random(n) < b.share[minute, pod[k]]) & (cut[k] > b.step)
                cut[k] = np.where(hit, b.step, cut[k])
                broke[k] = np.where(hit, BREAKS.index(b.kind), broke[k])
                if b.kind in FAILING:
                    kind[k] = np.where(hit, KINDS.index("exception" if b.kind == "exception" else "failed"), kind[k])
            if node.parent < 0:
                continue
            children[node.parent].append(k)
            made[k] = made[node.parent] & (cut[node.parent] > node.step)
            if node.p < 1:
                made[k] &= rng.random(n) < node.p
            if node.mode == "consume":  # a message waits in its topic for its consumer
                wait[k] = rng.lognormal(1.0, 0.5, n) + day.lag_ms.get(node.service, np.zeros(MINUTES))[minute]
                continue
            caller = nodes[node.parent].service
            e_ms, e_err = day.edge_ms.get((caller, node.service)), day.edge_err.get((caller, node.service))
            net[k] = 0.3 * rng.lognormal(0, 0.3, n)
            if e_ms is not None:
                net[k] += e_ms[minute] * rng.lognormal(0, 0.25, n)
                edge_fail = rng.random(n) < e_err[minute]
                if edge_fail.any():  # a link may fail in several ways
                    names = day.edge_err_kind.get((caller, node.service), "transient")
                    names = (names,) if isinstance(names, str) else names
                    kind[k] = np.where(edge_fail, rng.choice([KINDS.index(x) for x in names], n), kind[k])
                    abandoned[k] = edge_fail
            down = day.unreachable[minute, pod[k]]
            down_kinds = np.array([KINDS.index(day.unreachable_kind.get(topo.pods[i], "refused")) for i in cands])
            kind[k] = np.where(down, down_kinds[np.searchsorted(cands, pod[k])], kind[k])
            abandoned[k] &= ~down
            connect[k] = np.isin(kind[k], [KINDS.index(c) for c in _CONNECT])
        kind &= np.where(made, -1, 0)  # a call not made does not fail

        # Bottom-up: durations and failures; a failed required call fails its caller. A consumer works apart.
        client = np.zeros((k_nodes, n))
        server = np.zeros((k_nodes, n))
        for k in reversed(range(k_nodes)):
            waits = [c for c in children[k] if nodes[c].mode != "consume"]
            server[k] = own[k] + sum((np.where(made[c], client[c], 0.0) for c in waits), np.zeros(n))
            for c in waits:
                if not nodes[c].optional:
                    kind[k] = np.where((kind[k] == 0) & (kind[c] > 0), kind[c], kind[k])
            client[k] = np.where(connect[k], rng.uniform(0.5, 3.0, n), server[k] + net[k])
            if nodes[k].parent >= 0 and nodes[k].mode != "consume":  # a caller gives up at its deadline
                limit = nodes[k].deadline_ms or _DEADLINE_MS
                gave_up = (kind[k] == 0) & (client[k] > limit)
                abandoned[k] |= gave_up
                kind[k] = np.where(gave_up, KINDS.index("deadline"), kind[k])
                late = kind[k] == KINDS.index("deadline")
                client[k] = np.where(late, limit * rng.uniform(1.0, 1.05, n), client[k])

        # Top-down: start times and which spans exist.
        cursor = np.zeros((k_nodes, n))
        s_start = np.zeros((k_nodes, n))
        c_start = np.zeros((k_nodes, n))
        reached = np.ones((k_nodes, n), bool)  # the server span ran
        s_start[0] = t0
        cursor[0] = t0 + 200 * own[0]
        span_id = {}
        for k, node in enumerate(nodes):
            p = node.parent
            if p >= 0:
                asked = reached[p] & made[k]
                if node.mode == "consume":  # after the message was published and waited in its topic
                    s_start[k] = c_start[p] + (client[p] + wait[k]) * 1000
                    reached[k] = asked & (kind[p] == 0)
                    cursor[k] = s_start[k] + 200 * own[k]
                else:
                    c_start[k] = np.where(made[k], cursor[p], 0.0)
                    cursor[p] += np.where(made[k], (client[k] + 0.05) * 1000, 0.0)
                    s_start[k] = c_start[k] + net[k] * 500
                    cursor[k] = s_start[k] + 200 * own[k]
                    reached[k] = asked & ~connect[k]
                    calls["ts"].append((c_start[k] + client[k] * 1000)[asked])
                    calls["caller"].append(pod[p][asked])
                    calls["callee"].append(pod[k][asked])
                    calls["method"].append(np.full(asked.sum(), methods(node.method)))
                    calls["kind"].append(kind[k][asked])
                    calls["dur"].append(client[k][asked] * 1000)
                    calls["root"].append(np.zeros(asked.sum(), bool))
            client_op, server_op = span_names(system, node, route)
            if server_op:
                span_id[k, "server"] = _hex_ids(rng, n, 8)
            if client_op:
                span_id[k, "client"] = _hex_ids(rng, n, 8)
            rows = []  # (mask, span ids, parent ids, start, duration, pod, kind value, peer ip, peer port, status)
            if client_op:
                port = system.components[node.service].port
                rows.append((reached[p] & made[k], span_id[k, "client"], span_id[p, "server"], c_start[k], client[k],
                             pod[p], fixed[5] if node.mode == "publish" else fixed[3],
                             np.full(n, vocab(node.service)), np.full(n, vocab(str(port))), kind[k], client_op))
            if server_op:
                # a call that failed on the wire or that its caller gave up on ran to its end here
                server_kind = np.where(connect[k] | abandoned[k], 0, kind[k]) if p >= 0 else kind[0]
                if p < 0:
                    rows.append((reached[k], span_id[k, "server"], np.full(n, b"", "S16"), s_start[k], server[k],
                                 pod[k], fixed[2], np.full(n, vocab("")), np.full(n, vocab("")), server_kind,
                                 server_op))
                else:
                    parent = span_id[k, "client"] if client_op else span_id[p, "client"]
                    consumer = node.mode == "consume"  # it names the broker it takes its messages from
                    rows.append((reached[k], span_id[k, "server"], parent, s_start[k], server[k], pod[k],
                                 fixed[6] if consumer else fixed[2],
                                 np.full(n, vocab(nodes[p].service)) if consumer else ip_vocab[pod[p]],
                                 ports[rng.integers(0, len(ports), n)], server_kind, server_op))
                served["start"].append(s_start[k][reached[k]])
                served["dur"].append(server[k][reached[k]] * 1000)
                served["pod"].append(pod[k][reached[k]])
                served["method"].append(np.full(reached[k].sum(), methods(node.method)))
                served["kind"].append(server_kind[reached[k]])
                served["cut"].append(np.where(broke[k], cut[k], -1)[reached[k]])
                served["broke"].append(broke[k][reached[k]])
                served["trace"].append(trace_ids[reached[k]])
                served["span"].append(span_id[k, "server"][reached[k]])
            for mask, sid, parent, start, dur, span_pod, kind_v, peer_ip, peer_port, status, op in rows:
                callee = system.components[node.service]
                rpc_name = callee.rpc_service if p >= 0 else ""
                rpc_service = vocab(rpc_name or (node.service if p >= 0 else system.entry))
                vals = np.stack([
                    np.full(n, vocab(callee.protocol if callee.traced or p < 0 else callee.kind)), np.full(n, rpc_service),
                    np.full(n, vocab(node.method)), peer_ip, peer_port,
                    np.full(n, fixed[1]), code_vocab[status], msg_table[status, pod[k]], np.full(n, kind_v),
                    np.full(n, fixed[4]),
                ], axis=1)
                spans["trace"].append(trace_ids[mask])
                spans["span"].append(sid[mask])
                spans["parent"].append(parent[mask])
                spans["start"].append(start[mask])
                spans["dur"].append(np.maximum(1, dur[mask] * 1000))
                spans["pod"].append(span_pod[mask])
                spans["op"].append(np.full(mask.sum(), vocab(op)))
                spans["vals"].append(vals[mask])
        calls["ts"].append(t0 + server[0] * 1000)
        calls["caller"].append(pod[0])
        calls["callee"].append(pod[0])
        calls["method"].append(np.full(n, methods(route)))
        calls["kind"].append(kind[0])
        calls["dur"].append(server[0] * 1000)
        calls["root"].append(np.ones(n, bool))

    trace_hex = _hex_ids(rng, n_traces, 16)
    table = _span_table(spans, vocab, trace_hex, topo, rng)
    cat = {k: np.concatenate(v) if v else np.zeros(0) for k, v in calls.items()}
    done = {k: np.concatenate(v) if v else np.zeros(0) for k, v in served.items()}
    return Hour(table, Calls(cat["ts"].astype(np.int64), cat["caller"].astype(int), cat["callee"].astype(int),
                             cat["method"].astype(int), cat["kind"].astype(int), cat["dur"].astype(np.int64),
                             cat["root"].astype(bool)), methods,
                Served(done["start"].astype(np.int64), done["dur"].astype(np.int64), done["pod"].astype(int),
                       done["method"].astype(int), done["kind"].astype(int), done["cut"].astype(int),
                       done["broke"].astype(int), trace_hex[done["trace"].astype(int)].astype(str),
                       done["span"].astype(str)))


def _kv(keys: pa.Array, types: pa.Array, values: pa.Array, per_row: int) -> pa.ListArray:
    n = len(keys) // per_row
    items = pa.StructArray.from_arrays([keys, types, values], fields=list(KV))
    return pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32) * per_row), items)


def _tile(strings, n: int) -> pa.Array:
    return pa.array(list(strings), pa.string()).take(pa.array(np.tile(np.arange(len(strings)), n)))


def _process_tags(topo: Topology) -> pa.ListArray:
    keys = ("exporter", "float", "ip", "name", "node_name", "namespace")
    types = ("string", "float64", "string", "string", "string", "string")
    namespace = topo.system.namespace
    values = [v for p in topo.pods for v in ("jaeger", "312.23", topo.ip_of[p], p, topo.node_of[p], namespace)]
    return _kv(_tile(keys, len(topo.pods)), _tile(types, len(topo.pods)), pa.array(values), len(keys))


def _span_table(spans: dict, vocab: Vocab, trace_hex: np.ndarray, topo: Topology, rng) -> pa.Table:
    """An hour's spans in order of their start, built `SPANS_AT_ONCE` at a time."""
    if not spans["span"]:
        return SPAN_SCHEMA.empty_table()
    cols = {k: np.concatenate(v) for k, v in spans.items()}
    order = np.argsort(cols["start"], kind="stable")
    cols = {k: v[order] for k, v in cols.items()}
    cols["sizes"] = rng.integers(8, 400, (len(order), 2))  # each message's, drawn for the hour at once
    process = pa.StructArray.from_arrays(  # each pod's, as a span carries it
        [pa.array([topo.service_of[p] for p in topo.pods]), _process_tags(topo)],
        fields=list(SPAN_SCHEMA.field("process").type))
    return pa.concat_tables([_spans({k: v[at:at + SPANS_AT_ONCE] for k, v in cols.items()}, vocab, trace_hex, process)
                             for at in range(0, len(order), SPANS_AT_ONCE)])


def _spans(cols: dict, vocab: Vocab, trace_hex: np.ndarray, process: pa.StructArray) -> pa.Table:
    n = len(cols["start"])
    start = cols["start"].astype(np.int64)
    dur = cols["dur"].astype(np.int64)
    trace_id = pa.array(trace_hex[cols["trace"]]).cast(pa.string())
    span_id = pa.array(cols["span"]).cast(pa.string())
    has_parent = cols["parent"] != b""
    ref_offsets = np.concatenate([[0], np.cumsum(has_parent)]).astype(np.int32)
    refs = pa.StructArray.from_arrays(
        [pa.array(np.full(has_parent.sum(), "CHILD_OF")), pa.array(cols["parent"][has_parent]).cast(pa.string()),
         trace_id.filter(pa.array(has_parent))], fields=list(SPAN_SCHEMA.field("references").type.value_type))
    tags = _kv(_tile(_TAG_KEYS, n), _tile(_TAG_TYPES, n), vocab.take(cols["vals"]), len(_TAG_KEYS))
    # Two message events per span: the request going out/in and the reply.
    is_client = cols["vals"][:, 8] == vocab("client")
    first, second = np.where(is_client, "SENT", "RECEIVED"), np.where(is_client, "RECEIVED", "SENT")
    sizes = cols["sizes"].astype(str)
    fvals = np.stack([np.stack([first, np.full(n, "1"), sizes[:, 0], np.full(n, "message")], 1),
                      np.stack([second, np.full(n, "1"), sizes[:, 1], np.full(n, "message")], 1)], 1)
    fields = _kv(_tile(("message.type", "message.id", "message.uncompressed_size", "name"), 2 * n),
                 _tile(("string", "int64", "int64", "string"), 2 * n), pa.array(fvals.ravel()), 4)
    stamps = np.stack([start + 40, start + np.maximum(dur - 10, 1)], 1).ravel()
    events = pa.StructArray.from_arrays([fields, pa.array(stamps)], fields=list(SPAN_SCHEMA.field("logs").type.value_type))
    logs = pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32) * 2), events)
    return pa.Table.from_arrays([
        trace_id, span_id, pa.array(np.ones(n)), vocab.take(cols["op"]),
        pa.ListArray.from_arrays(pa.array(ref_offsets), refs), pa.array(start), pa.array(start // 1000),
        pa.array(dur), tags, logs, process.take(pa.array(cols["pod"])),
    ], schema=SPAN_SCHEMA)
