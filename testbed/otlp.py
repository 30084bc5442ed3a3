"""The simulated day in OpenTelemetry's layout: each file of a challenge-layout dump, read as the ETL reads it
(its adapter's canonical rows), written as the Collector's `file` exporter would (OTLP/JSON lines, gzip): one
export request per resource (a pod, a service or a node) and file, its attributes the semantic conventions'
(`service.name`, `k8s.pod.name`, `k8s.node.name`), hex ids, numeric enums, 64-bit numbers as strings, empty fields
left out. Metrics are gauges, each source an instrumentation scope. The labels (`groundtruth.jsonl`, `input.json`)
are copied. DuckDB builds each request's JSON; Python only compresses the lines."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import duckdb

from common.tasks import Behind
from etl.adapters import challenge2025

FIELDS = {"trace": "resourceSpans", "log": "resourceLogs", "metric": "resourceMetrics"}

# A resource's attributes, those it has; a JSON object without its null members (RFC 7396: a patch to {}).
_RESOURCE = """{'attributes': list_filter([{'key': 'service.name', 'value': {'stringValue': nullif(service, '')}},
                                           {'key': 'k8s.pod.name', 'value': {'stringValue': nullif(pod, '')}},
                                           {'key': 'k8s.node.name', 'value': {'stringValue': nullif(node, '')}}],
                                          lambda a: a.value.stringValue is not null)}"""
_PLAIN = "json_merge_patch('{{}}', to_json({}))"

_ITEMS = {  # a row as one span or log record, with the resource it belongs to
    "trace": ("pod", _PLAIN.format("""{
        'traceId': trace_id, 'spanId': span_id, 'parentSpanId': nullif(parent_span_id, ''),
        'name': coalesce(operation, ''),
        'kind': case kind when 'internal' then 1 when 'server' then 2 when 'client' then 3 when 'producer' then 4
                          when 'consumer' then 5 else 0 end,
        'startTimeUnixNano': ns::varchar,
        'endTimeUnixNano': (ns + trunc(coalesce(duration_us, 0))::bigint * 1000)::varchar,
        'status': case when status_code then '{"code": 2}'::json else '{}'::json end,
        'attributes': case when peer <> '' then [{'key': 'peer.service', 'value': {'stringValue': peer}}] end}"""),
              "scopeSpans", "spans"),
    "log": ("component", _PLAIN.format("""{'timeUnixNano': ns::varchar, 'body': {'stringValue': message},
                                           'traceId': nullif(trace_id, ''),
                                           'spanId': case when trace_id <> '' then span_id end}"""),
            "scopeLogs", "logRecords"),
}


def _lines(con: duckdb.DuckDBPyConnection, kind: str, query) -> list[str]:
    """The file's export requests, a JSON line each: one per resource, in a stable order."""
    rows = f"(select *, epoch_ns(ts) as ns from ({query.sql}))"
    if kind == "metric":  # a series' points, a resource's series, its source the scope
        sql = f"""
            with r as (select service, node as host, component, component_kind, source, metric, value, ns
                       from {rows}),
            points as (
                select service,
                       case when component_kind not in ('service', 'node') then component end as pod,
                       case when component_kind = 'node' then component else host end as node, source,
                       {{'name': metric, 'gauge': {{'dataPoints': list({{'timeUnixNano': ns::varchar,
                                                                       'asDouble': value}} order by ns)}}}} as m
                from r group by service, pod, node, source, metric)
            select to_json({{'{FIELDS[kind]}': [{{'resource': {_RESOURCE},
                             'scopeMetrics': [{{'scope': {{'name': source}},
                                               'metrics': list(m order by m.name)}}]}}]}})
            from points group by service, pod, node, source order by service, pod, node, source"""
    else:
        who, item, scopes, items = _ITEMS[kind]
        sql = f"""
            with r as (select service, {who} as pod, node, {item} as item, ns from {rows})
            select to_json({{'{FIELDS[kind]}': [{{'resource': {_RESOURCE},
                             '{scopes}': [{{'{items}': list(item order by ns, item)}}]}}]}})
            from r group by service, pod, node order by service, pod, node"""
    return [line for (line,) in con.execute(sql, query.params).fetchall()]


def _write(target: Path, lines: list[str]) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with gzip.GzipFile(target, "wb", compresslevel=1, mtime=0) as f:  # no time in the header: same seed, same bytes
        f.write("".join(line + "\n" for line in lines).encode())


def write_otlp(dump: Path, out: Path) -> int:
    """Write `dump` (challenge layout) as OTLP/JSON files under `out`; returns how many. A file is compressed in a
    thread of its own while DuckDB builds the next one's requests (both let go of Python's lock)."""
    out.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    written = 0
    try:
        with Behind() as writer:
            for file in challenge2025.discover(dump):
                if file.kind not in FIELDS:
                    continue
                lines = _lines(con, file.kind, challenge2025.query(con, file))
                relative = file.path.relative_to(dump)
                folder = Path(*(part.removesuffix("-parquet") for part in relative.parent.parts))
                writer.put(_write, out / folder / (relative.stem + ".json.gz"), lines)
                written += 1
    finally:
        con.close()
    for label in ("groundtruth.jsonl", "input.json"):
        if (dump / label).exists():
            shutil.copy(dump / label, out / label)
    for state in dump.glob("*/k8s/*"):  # the cluster's state is OTLP already
        (out / state.relative_to(dump)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(state, out / state.relative_to(dump))
        written += 1
    return written
