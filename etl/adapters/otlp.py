"""OpenTelemetry's OTLP in its JSON encoding, as the Collector's `file` exporter writes it: one export request a
line (`resourceSpans`, `resourceMetrics` or `resourceLogs`), plain, gzip or zstd (the exporter's own
compression), any file names under the dump.

Components come from the resource's semantic-convention attributes: `service.name`, `k8s.pod.name`,
`k8s.node.name`. Ids are hex as OTLP/JSON says, or base64 as protobuf's generic JSON writes them; enums are
numbers or names; 64-bit numbers strings or numbers. Metrics: a gauge's points as they are; a sum's that is
cumulative as its increase since the point before (a counter's reset starts it again, as Prometheus's `rate`
does); a histogram as `_count`, `_mean` and `_p95` (interpolated in its bucket, as Prometheus's
`histogram_quantile` does) of each interval; a count left out is zero, as proto3's JSON leaves zeros out. A point's attributes name its series as Prometheus writes them,
`name{key=value,...}`. A span is an error where its status is ERROR; a log record is joined to its span by
`traceId`/`spanId`, as on the Nezha days; a body that is a structured logger's JSON record is read as the
challenge's are (its severity, message and error).
"""

from __future__ import annotations

import re
from pathlib import Path

import duckdb

from common.errors import LoadError

from . import kubernetes
from .base import InputFile, Query, record_text

NAME = "otlp"
SIGNALS = {"resourceSpans": "trace", "resourceMetrics": "metric", "resourceLogs": "log"}
SUFFIXES = (".json", ".jsonl", ".json.gz", ".jsonl.gz", ".json.zst", ".jsonl.zst")

ANY = "STRUCT(stringValue VARCHAR, intValue VARCHAR, doubleValue DOUBLE, boolValue BOOLEAN)"
ATTRS = f"STRUCT(key VARCHAR, value {ANY})[]"
RESOURCE = f"STRUCT(attributes {ATTRS})"
SCOPE = "STRUCT(name VARCHAR)"
SPAN = (f"STRUCT(traceId VARCHAR, spanId VARCHAR, parentSpanId VARCHAR, name VARCHAR, kind VARCHAR, "
        f"startTimeUnixNano VARCHAR, endTimeUnixNano VARCHAR, attributes {ATTRS}, "
        f"status STRUCT(code VARCHAR, message VARCHAR))")
RECORD = (f"STRUCT(timeUnixNano VARCHAR, observedTimeUnixNano VARCHAR, severityText VARCHAR, body {ANY}, "
          f"attributes {ATTRS}, traceId VARCHAR, spanId VARCHAR)")
NUMBER = f"STRUCT(attributes {ATTRS}, timeUnixNano VARCHAR, asDouble DOUBLE, asInt VARCHAR)"
BUCKETS = (f"STRUCT(attributes {ATTRS}, timeUnixNano VARCHAR, count VARCHAR, sum DOUBLE, bucketCounts VARCHAR[], "
           f"explicitBounds DOUBLE[])")
METRIC = (f"STRUCT(name VARCHAR, gauge STRUCT(dataPoints {NUMBER}[]), "
          f"sum STRUCT(dataPoints {NUMBER}[], aggregationTemporality VARCHAR, isMonotonic BOOLEAN), "
          f"histogram STRUCT(dataPoints {BUCKETS}[], aggregationTemporality VARCHAR))")
COLUMNS = {
    "trace": ("resourceSpans", f"STRUCT(resource {RESOURCE}, scopeSpans STRUCT(scope {SCOPE}, spans {SPAN}[])[])[]", "scopeSpans",
              "spans"),
    "log": ("resourceLogs", f"STRUCT(resource {RESOURCE}, scopeLogs STRUCT(scope {SCOPE}, logRecords {RECORD}[])[])[]",
            "scopeLogs", "logRecords"),
    "metric": ("resourceMetrics", f"STRUCT(resource {RESOURCE}, scopeMetrics STRUCT(scope {SCOPE}, metrics {METRIC}[])[])[]",
               "scopeMetrics", "metrics"),
}
CUMULATIVE = "({} in ('2', 'AGGREGATION_TEMPORALITY_CUMULATIVE'))"
QUANTILE = 0.95


def signal(con: duckdb.DuckDBPyConnection, path: Path) -> str | None:
    """The kind of telemetry a file's first export request holds (the Collector's records of a cluster's objects:
    `kubernetes.KIND`), or None where it is no OTLP JSON. Its first bytes tell most files (`_peek`); elsewhere DuckDB
    reads it as the load will (plain, gzip or zstd, by the file's suffix), and a line it cannot read is passed over
    here, for the load to name."""
    if kind := _peek(path):
        return kind
    try:
        first = con.execute("""select json_keys(json), regexp_matches(json::varchar, ?)
                               from read_json_objects(?, format = 'newline_delimited', ignore_errors = true)
                               where json is not null limit 1""",
                            [kubernetes.COLLECTOR.pattern, str(path)]).fetchone()
    except duckdb.InvalidInputException:  # not JSON lines
        return None
    keys, objects = first or ([], False)
    kind = next((SIGNALS[k] for k in keys if k in SIGNALS), None)
    return kubernetes.KIND if kind == "log" and objects else kind


KEY_CHARS = 1024  # read first: a file's key is within them (12,000 files told in 1.8 s, in 2.5 s reading PEEK of each)
FIRST_KEY = re.compile(r'\{\s*"(' + "|".join(SIGNALS) + r')"\s*:')  # an export request's one key


def _peek(path: Path) -> str | None:
    """A file's signal as its first characters tell it, where they do: an export request's one key opens its first
    line, and the Collector's records of objects say so within it. Reading them costs a twentieth of DuckDB's reading
    the first line (of a dump's thousands of small files, most of the time its discovery took); None where they do
    not tell (zstd, another first line, a log line longer than they are)."""
    if path.name.endswith(".zst"):
        return None
    try:
        # a metric or trace file's first characters say all; a log file's first line may say it is the cluster's
        if (key := FIRST_KEY.match(kubernetes.head(path, KEY_CHARS).lstrip())) and SIGNALS[key[1]] != "log":
            return SIGNALS[key[1]]
        first = kubernetes.head(path)
    except (OSError, EOFError, UnicodeError):
        return None
    text = first.lstrip()
    if not (key := FIRST_KEY.match(text)):
        return None
    line, *rest = text.split("\n", 1)
    if (kind := SIGNALS[key[1]]) != "log":
        return kind
    if kubernetes.COLLECTOR.search(line):
        return kubernetes.KIND
    return "log" if rest or len(first) < kubernetes.PEEK else None


def _files(root: Path) -> list[Path]:
    root = Path(root)
    if root.is_file():
        return [root]
    return sorted(p for p in root.rglob("*") if p.name.endswith(SUFFIXES) and p.is_file()) if root.is_dir() else []


def _signals(root: Path):
    """Each file with its signal, or why it cannot be read; one in-memory DuckDB reads them all (a connection a
    file cost more than reading a small file's first line)."""
    with duckdb.connect() as con:
        for path in _files(root):
            try:
                yield path, signal(con, path), ""
            except duckdb.Error as e:  # a truncated or corrupt archive, a file that went away
                yield path, None, f"cannot be read: {str(e).splitlines()[0]}"


def detect(root: Path) -> bool:
    """Whether the dump holds OTLP telemetry (the Collector's records of a cluster's objects alone are not)."""
    return any(kind not in (None, kubernetes.KIND) for _, kind, _ in _signals(root))


def discover(root: Path) -> list[InputFile]:
    out = []
    for path, kind, problem in _signals(root):
        if problem:
            out.append(InputFile(path, "unreadable", problem))
        else:
            out.append(InputFile(path, kind) if kind else
                       InputFile(path, "skip", "no OTLP export request on its first line"))
    return out


def _text(value: str) -> str:
    """An AnyValue as text."""
    return (f"coalesce({value}.stringValue, {value}.intValue, cast({value}.doubleValue as varchar), "
            f"cast({value}.boolValue as varchar))")


def _attr(attrs: str, key: str) -> str:
    """The text of attribute `key` in the list `attrs` (a key bound as a literal of this module, never a dump's)."""
    return _text(f"list_filter({attrs}, lambda a: a.key = '{key}')[1].value")


def _id(column: str) -> str:
    """A trace or span id as lowercase hex, from hex or base64; null where empty."""
    return (f"case when coalesce({column}, '') = '' then null "
            f"when regexp_full_match({column}, '[0-9a-fA-F]{{16}}|[0-9a-fA-F]{{32}}') then lower({column}) "
            f"else lower(hex(from_base64({column}))) end")


def _time(nanos: str) -> str:
    """Nanoseconds as a timestamp: read as a 64-bit integer, and as a 128-bit one only past its range (OTLP's are
    unsigned): the same times, where reading every one as 128 bits took a twentieth of a wide day's load's CPU."""
    return (f"make_timestamp(coalesce(try_cast({nanos} as bigint) // 1000, "
            f"cast(try_cast({nanos} as hugeint) // 1000 as bigint)))")


def scan(kind: str, path: str = "$path") -> str:
    """DuckDB's read of the files `path` names (a parameter) of one kind: an export request a line, in the columns
    this adapter reads, with each row's `filename`. Told that a line is a record (its keys the columns), DuckDB does
    not sample files to find out: a thousand files of one pod's series read in a third of the CPU."""
    key, typ, *_ = COLUMNS[kind]
    return (f"read_json({path}, format = 'newline_delimited', records = true, columns = {{'{key}': '{typ}'}}, "
            "filename = true)")


def _rows(kind: str) -> str:
    """The files' items (spans, log records or metrics), each with its resource's attributes as `res` and its
    file's `filename`."""
    key, _, scopes, items = COLUMNS[kind]
    return f"""(select res, sc.scope.name as scope, unnest(sc.{items}) as it, filename from (
                   select r.resource.attributes as res, unnest(r.{scopes}) as sc, filename from (
                       select unnest({key}) as r, filename from {scan(kind)})))"""


def _series(points: str) -> str:
    """A point's series: its metric's name, with its attributes as Prometheus writes them."""
    pairs = f"list_transform({points}.attributes, lambda a: a.key || '=' || {_text('a.value')})"
    return (f"it.name || case when len(coalesce({points}.attributes, [])) = 0 then '' "
            f"else '{{' || array_to_string(list_sort({pairs}), ',') || '}}' end")


WHO = f"""{_attr('res', 'k8s.pod.name')} as pod, {_attr('res', 'service.name')} as svc,
          {_attr('res', 'k8s.node.name')} as node"""


def batch(file: InputFile) -> str:
    """Files of one kind are read in one scan (the loader binds `$path` to a list of them)."""
    return file.kind


def query(con: duckdb.DuckDBPyConnection, file: InputFile) -> Query:
    params = {"path": str(file.path)}
    if file.kind == "trace":
        return Query(f"""
        select {_id('it.traceId')} as trace_id, {_id('it.spanId')} as span_id, {_id('it.parentSpanId')} as parent_span_id,
               {_time('it.startTimeUnixNano')} as ts,
               cast((try_cast(it.endTimeUnixNano as hugeint) - try_cast(it.startTimeUnixNano as hugeint)) // 1000
                    as bigint) as duration_us,
               coalesce(svc, pod) as service, pod, node, it.name as operation,
               case when it.kind in ('1', 'SPAN_KIND_INTERNAL') then 'internal' when it.kind in ('2', 'SPAN_KIND_SERVER')
                    then 'server' when it.kind in ('3', 'SPAN_KIND_CLIENT') then 'client'
                    when it.kind in ('4', 'SPAN_KIND_PRODUCER') then 'producer'
                    when it.kind in ('5', 'SPAN_KIND_CONSUMER') then 'consumer' end as kind,
               case when it.status.code in ('2', 'STATUS_CODE_ERROR') then 2 else 0 end as status_code,
               case when it.kind in ('3', '4', '5', 'SPAN_KIND_CLIENT', 'SPAN_KIND_PRODUCER', 'SPAN_KIND_CONSUMER')
                    then coalesce({_attr('it.attributes', 'peer.service')}, {_attr('it.attributes', 'server.address')},
                                  {_attr('it.attributes', 'net.peer.name')}) end as peer, filename
        from (select *, {WHO} from {_rows('trace')})""", params)
    if file.kind == "log":
        body = f"coalesce({_text('it.body')}, '')"
        return Query(f"""
        select {_time("coalesce(nullif(it.timeUnixNano, '0'), it.observedTimeUnixNano)")} as ts,
               coalesce(pod, svc) as component, coalesce(svc, pod) as service, node, {body} as message,
               trim(concat_ws(' ', it.severityText, {record_text(body)})) as text,
               {_id('it.traceId')} as trace_id, {_id('it.spanId')} as span_id, filename
        from (select *, {WHO} from {_rows('log')})""", params)
    if file.kind != "metric":
        raise LoadError(f"not a kind of OTLP telemetry: {file.kind}")
    # The instrumentation scope is the source; a node's series say so (a node's metrics read on a pod are shared).
    who = """coalesce(pod, svc, node) as component,
             case when pod is null and svc is null and not contains(coalesce(scope, ''), 'node')
                  then coalesce(scope || ' ', '') || 'node' else coalesce(scope, 'otlp') end as source,
             case when pod is not null then 'pod' when svc is not null then 'service' else 'node' end as component_kind,
             svc as service, node"""
    return Query(f"""
    with m as (select *, {who} from (select *, {WHO} from {_rows('metric')})),
         numbers as (
             select filename, source, component, component_kind, service, node, {_series('p')} as metric,
                    {_time('p.timeUnixNano')} as ts, coalesce(p.asDouble, try_cast(p.asInt as double)) as value,
                    it.sum is not null and {CUMULATIVE.format('it.sum.aggregationTemporality')} as cumulative
             from (select *, unnest(coalesce(it.gauge.dataPoints, it.sum.dataPoints)) as p from m)),
         increases as (  -- a cumulative sum's; a gauge's points are as they are
             select *, value - lag(value) over (partition by filename, component, metric order by ts) as rise
             from numbers where cumulative),
         buckets as (
             select filename, source, component, component_kind, service, node, {_series('p')} as metric,
                    {_time('p.timeUnixNano')} as ts, coalesce(try_cast(p.count as double), 0) as n,
                    coalesce(p.sum, 0) as total, p.explicitBounds as bounds,
                    coalesce(list_transform(p.bucketCounts, lambda c: try_cast(c as double)),
                             list_transform(range(len(p.explicitBounds) + 1), lambda i: 0.0)) as counts,
                    {CUMULATIVE.format('it.histogram.aggregationTemporality')} as cumulative
             from (select *, unnest(it.histogram.dataPoints) as p from m)),
         intervals as (
             select *, case when not cumulative then counts else list_transform(
                           list_zip(counts, lag(counts) over w), lambda x: x[1] - x[2]) end as b,
                    case when not cumulative then n else n - lag(n) over w end as dn,
                    case when not cumulative then total else total - lag(total) over w end as dsum
             from buckets window w as (partition by filename, component, metric order by ts)),
         ranked as (
             select *, list_transform(range(1, len(b) + 1), lambda i: list_sum(b[1:i])) as cum from intervals
             where dn > 0 and len(b) > 0),
         quantiles as (
             select *, list_position(list_transform(cum, lambda c: c >= {QUANTILE} * dn), true) as k from ranked)
    select filename, ts, source, component, component_kind, service, node, metric, value from numbers
    where not cumulative
    union all
    select filename, ts, source, component, component_kind, service, node, metric,
           case when rise < 0 then value else rise end from increases where rise is not null
    union all
    select filename, ts, source, component, component_kind, service, node, metric || '_count', dn from intervals
    where dn is not null and dn >= 0
    union all
    select filename, ts, source, component, component_kind, service, node, metric || '_mean', dsum / dn from intervals
    where dn > 0
    union all
    select filename, ts, source, component, component_kind, service, node, metric || '_p95',
           case when k > len(bounds) then bounds[len(bounds)]
                else coalesce(bounds[k - 1], 0) + (bounds[k] - coalesce(bounds[k - 1], 0))
                     * ({QUANTILE} * dn - coalesce(cum[k - 1], 0)) / nullif(b[k], 0) end
    from quantiles where k is not null and len(bounds) > 0""", params)
