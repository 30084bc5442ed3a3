"""OpenTelemetry's OTLP/JSON in: the simulated demo day written as the Collector's file exporter would loads and
ranks as its parquet twin does; requests encoded by the OpenTelemetry protobuf messages' own JSON form (base64
ids, enum names; gzip and zstd) load, with their spans' errors, logs in their spans, a counter's increases and a histogram's
quantile."""

import datetime as dt
import gzip
import json
import shutil
from pathlib import Path

import pytest
import zstandard
from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from opentelemetry.proto.metrics.v1.metrics_pb2 import (AGGREGATION_TEMPORALITY_CUMULATIVE, Gauge, Histogram,
                                                       HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics,
                                                       ScopeMetrics, Sum)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

from etl import loader, store
from etl.adapters import adapter_for
from features.cases import load_questions
from features.digest import build_digest
from etl.loader import run_etl
from features.refresh import nightly
from testbed.otlp import write_otlp
from testbed.schedule import load_schedule
from testbed.simulate import simulate
from testbed.topology import Topology

DEMO = Path(__file__).resolve().parents[1] / "data" / "demo-schedule.jsonl"
T0 = dt.datetime(2025, 6, 6, 8, 0)


@pytest.fixture(scope="module")
def twins(tmp_path_factory):
    """The demo's six faults simulated once, loaded from the challenge's parquet and from OTLP."""
    root = tmp_path_factory.mktemp("twins")
    topo = Topology.build(0)
    simulate(root / "parquet", load_schedule(DEMO, topo), topo, scale=0.005, seed=0)
    write_otlp(root / "parquet", root / "otlp")
    for layout in ("parquet", "otlp"):
        nightly(root / layout, root / f"{layout}.duckdb")
    return root


def test_an_otlp_day_loads_and_ranks_as_its_parquet_twin(twins):
    assert adapter_for(twins / "otlp").NAME == "otlp"
    assert not list((twins / "otlp").rglob("*.parquet"))
    questions = load_questions(twins / "otlp" / "input.json")
    assert len(questions) == 6
    tops = {}
    for layout in ("parquet", "otlp"):
        con = store.connect(twins / f"{layout}.duckdb", read_only=True)
        tops[layout] = [(d.candidates[0].component, round(d.candidates[0].score, 6))
                        for d in (build_digest(con, q) for q in questions)]
        counts = [con.execute(f"select count(*) from {t}").fetchone()[0] for t in ("metric_points", "spans", "log_lines")]
        tops[layout].append(counts)
        con.close()
    assert tops["otlp"] == tops["parquet"]


def _resource(**attrs) -> Resource:
    return Resource(attributes=[KeyValue(key=k, value=AnyValue(string_value=v)) for k, v in attrs.items()])


def _nanos(minute: float) -> int:
    return int((T0 + dt.timedelta(minutes=minute)).replace(tzinfo=dt.timezone.utc).timestamp() * 1e9)


def _lines(path: Path, *requests) -> None:
    text = "".join(json.dumps(MessageToDict(r)) + "\n" for r in requests).encode()
    path.write_bytes(zstandard.compress(text) if path.suffix == ".zst" else gzip.compress(text))


def test_requests_in_the_protobuf_messages_json_form_load(tmp_path):
    dump = tmp_path / "collector"
    dump.mkdir()
    cart = _resource(**{"service.name": "cart", "k8s.pod.name": "cart-0", "k8s.node.name": "node-1"})
    trace, server, client = bytes.fromhex("0af7651916cd43dd8448eb211c80319c"), bytes(range(1, 9)), bytes(range(9, 17))
    spans = ExportTraceServiceRequest(resource_spans=[ResourceSpans(resource=cart, scope_spans=[ScopeSpans(spans=[
        Span(trace_id=trace, span_id=server, name="GetCart", kind=Span.SPAN_KIND_SERVER,
             start_time_unix_nano=_nanos(1), end_time_unix_nano=_nanos(1) + 50_000_000,
             status=Status(code=Status.STATUS_CODE_ERROR)),
        Span(trace_id=trace, span_id=client, parent_span_id=server, name="redis GET", kind=Span.SPAN_KIND_CLIENT,
             start_time_unix_nano=_nanos(1) + 1_000_000, end_time_unix_nano=_nanos(1) + 2_000_000)])])])
    logs = ExportLogsServiceRequest(resource_logs=[ResourceLogs(resource=cart, scope_logs=[ScopeLogs(log_records=[
        LogRecord(time_unix_nano=_nanos(1) + 10, severity_text="ERROR", trace_id=trace, span_id=server,
                  body=AnyValue(string_value="could not reach redis-cart"))])])])
    counter = [NumberDataPoint(time_unix_nano=_nanos(m), as_int=100 * m * m) for m in range(3)]
    histogram = [HistogramDataPoint(time_unix_nano=_nanos(m), count=100 * m, sum=10.0 * m,
                                    bucket_counts=[50 * m, 40 * m, 10 * m], explicit_bounds=[0.1, 0.5])
                 for m in range(3)]
    metrics = ExportMetricsServiceRequest(resource_metrics=[ResourceMetrics(resource=cart, scope_metrics=[ScopeMetrics(
        metrics=[Metric(name="cpu", gauge=Gauge(data_points=[NumberDataPoint(time_unix_nano=_nanos(0), as_double=0.5)])),
                 Metric(name="requests", sum=Sum(data_points=counter, is_monotonic=True,
                                                 aggregation_temporality=AGGREGATION_TEMPORALITY_CUMULATIVE)),
                 Metric(name="latency", histogram=Histogram(
                     data_points=histogram, aggregation_temporality=AGGREGATION_TEMPORALITY_CUMULATIVE))])])])
    _lines(dump / "traces.jsonl.gz", spans)
    _lines(dump / "logs.jsonl.gz", logs)
    _lines(dump / "metrics.jsonl.zst", metrics)  # the file exporter's own compression
    (dump / "notes.json").write_text('{"not": "telemetry"}\n')
    (dump / "cut.jsonl.gz").write_bytes(gzip.compress(b'{"resourceSpans": []}\n' * 100)[:30])  # cut short
    db = tmp_path / "store.duckdb"
    report = nightly(dump, db)
    assert report.format == "otlp" and len(report.loaded) == 3
    assert [(Path(path).name, why.split(":")[0]) for path, why in report.failed] == [("cut.jsonl.gz", "cannot be read")]
    con = store.connect(db, read_only=True)
    assert con.execute("select span_id, parent_span_id, kind, status_code, duration_us, service, pod, node "
                       "from spans order by ts").fetchall() == [
        ("0102030405060708", None, "server", 2, 50_000, "cart", "cart-0", "node-1"),
        ("090a0b0c0d0e0f10", "0102030405060708", "client", 0, 1_000, "cart", "cart-0", "node-1")]
    assert con.execute("select trace_id, span_id, level, message from log_lines").fetchall() == [
        ("0af7651916cd43dd8448eb211c80319c", "0102030405060708", "ERROR", "could not reach redis-cart")]
    assert con.execute("select metric, value from metric_points order by metric, ts").fetchall() == [
        ("cpu", 0.5), ("latency_count", 100.0), ("latency_count", 100.0), ("latency_mean", 0.1), ("latency_mean", 0.1),
        ("latency_p95", 0.5), ("latency_p95", 0.5), ("requests", 100.0), ("requests", 300.0)]
    assert con.execute("select distinct component, component_kind, source from metric_points").fetchall() == [
        ("cart-0", "pod", "otlp")]


def _rows_by_file(db: Path) -> dict[str, list]:
    """Every loaded row of every table that holds telemetry, with its file's path in place of its id."""
    con = store.connect(db, read_only=True)
    try:
        return {table: sorted(map(str, con.execute(f"select m.path, t.* exclude (file_id) from {table} t "
                                                   "join manifest m using (file_id)").fetchall()))
                for table in ("metric_points", "spans", "log_lines")}
    finally:
        con.close()


def test_many_small_files_load_in_one_scan_into_the_rows_each_gives_alone(twins, tmp_path, monkeypatch):
    """A dump of many small files is read a few scans at a time (issue 73): the rows are those each file gives read
    alone, a file broken after its first line is named and its neighbours in the scan still load, and the rows of
    many files are those of one file that holds them all."""
    dump = tmp_path / "otlp"
    shutil.copytree(twins / "otlp", dump)
    pods = sorted((dump).rglob("metric/apm/pod/*.json.gz"))
    assert len(pods) > 20
    broken = pods[len(pods) // 2]
    broken.write_bytes(gzip.compress(gzip.decompress(broken.read_bytes()) + b'{"resourceMetrics": [{"resource": \n'))
    many = run_etl(dump, tmp_path / "many.duckdb")
    assert [path for path, _ in many.failed] == [str(broken)] and "JSON" in many.failed[0][1]
    assert len(many.loaded) == len(pods) - 1 + sum(1 for f in dump.rglob("*.json.gz") if "/apm/pod/" not in str(f))
    monkeypatch.setattr(loader, "BATCH_FILES", 1)
    alone = run_etl(dump, tmp_path / "alone.duckdb")
    assert alone.failed == many.failed and alone.rows == many.rows
    assert _rows_by_file(tmp_path / "many.duckdb") == _rows_by_file(tmp_path / "alone.duckdb")

    one = tmp_path / "one" / pods[0].relative_to(dump).parent
    one.mkdir(parents=True)
    (one / "all.json").write_bytes(b"".join(gzip.decompress(p.read_bytes()) for p in pods if p != broken))
    run_etl(tmp_path / "one", tmp_path / "one.duckdb")
    con = store.connect(tmp_path / "one.duckdb", read_only=True)
    together = sorted(map(str, con.execute("select * exclude (file_id) from metric_points").fetchall()))
    con.close()
    con = store.connect(tmp_path / "many.duckdb", read_only=True)
    apart = sorted(map(str, con.execute("select t.* exclude (file_id) from metric_points t join manifest m using (file_id) "
                                        "where m.path like '%/apm/pod/%'").fetchall()))
    con.close()
    assert together == apart


def test_a_scan_reads_the_files_of_one_reader_and_a_cluster_s_exports_each_alone(tmp_path):
    """The Collector's records of a cluster's objects beside an OTLP dump are the `kubernetes` reader's, which
    reads a file a query: they are never put in one scan with each other or with the dump's telemetry."""
    from etl.adapters import kubernetes, otlp

    paths = [tmp_path / f"{i}.json" for i in range(4)]
    for p in paths:
        p.write_text("{}\n")
    sources = [loader.Source(str(p), kind, "", i) for i, (p, kind) in
               enumerate(zip(paths, [kubernetes.KIND, kubernetes.KIND, "metric", "metric"]))]
    assert sorted(map(len, loader.units(otlp, sources))) == [1, 1, 2]


def test_a_file_s_first_characters_tell_its_signal_as_duckdb_reading_its_first_line_does(tmp_path, monkeypatch):
    """Discovery tells most files by their first characters (issue 73: reading each first line with DuckDB took most
    of a wide dump's discovery); where they tell, it is what DuckDB tells, and where they do not, DuckDB tells."""
    import duckdb

    from etl.adapters import kubernetes, otlp

    objects = '{"key": "event.domain", "value": {"stringValue": "k8s"}}'
    texts = {"spans.json": '{"resourceSpans": []}\n',
             "metrics.jsonl.gz": ' { "resourceMetrics" : [] }\n{"resourceSpans": []}\n',
             "logs.jsonl": '\n{"resourceLogs": [{"resource": {}}]}\n' + objects + "\n",
             "objects.jsonl": '{"resourceLogs": [{"attributes": [' + objects + "]}]}",
             "long.jsonl": '{"resourceLogs": [' + " " * kubernetes.PEEK + '{"attributes": [' + objects + "]}]}\n",
             "notes.json": '{"not": "telemetry"}\n', "list.json": "[1, 2]\n", "metrics.jsonl.zst": '{"resourceMetrics": []}\n',
             "padded.json": " " * otlp.KEY_CHARS + '{"resourceSpans": []}\n'}  # its key past the first characters read
    for name, text in texts.items():
        path = tmp_path / name
        path.write_bytes(gzip.compress(text.encode()) if name.endswith(".gz") else
                         zstandard.compress(text.encode()) if name.endswith(".zst") else text.encode())
    con = duckdb.connect()
    told = {name: otlp.signal(con, tmp_path / name) for name in texts}
    assert told == {"spans.json": "trace", "metrics.jsonl.gz": "metric", "logs.jsonl": "log",
                    "objects.jsonl": kubernetes.KIND, "long.jsonl": kubernetes.KIND, "notes.json": None,
                    "list.json": None, "metrics.jsonl.zst": "metric", "padded.json": "trace"}
    assert {name for name in texts if otlp._peek(tmp_path / name)} == {"spans.json", "metrics.jsonl.gz", "logs.jsonl",
                                                                        "objects.jsonl", "padded.json"}
    monkeypatch.setattr(otlp, "_peek", lambda path: None)
    assert {name: otlp.signal(con, tmp_path / name) for name in texts} == told


def test_a_time_is_read_as_a_128_bit_count_of_nanoseconds_would_be():
    """Times are read as 64-bit integers first (issue 73: 128 bits for each took a twentieth of a wide day's load);
    whatever the text, the time is the one a 128-bit read gives: past 64 bits, negative, fractional, malformed."""
    import duckdb

    from etl.adapters import otlp

    texts = ["1749139200000000000", "0", "-1", "-1999", "1999", "17.5", "-17.5", "1e3", "1e19", "9223372036854775807",
             "9223372036854775808", "18446744073709551615", "-9223372036854775809", " +17 ", "0x11", "1_000", "",
             "abc", None, "1749139200123456789.9", "inf", "1e400"]
    wide = "make_timestamp(cast(try_cast(t as hugeint) // 1000 as bigint))"
    read, as_wide = duckdb.connect().execute(
        f"select list({otlp._time('t')} order by i), list({wide} order by i) "
        "from (select unnest(?::varchar[]) as t, unnest(range(?)) as i)", [texts, len(texts)]).fetchone()
    assert read == as_wide and read[0] == dt.datetime(2025, 6, 5, 16)
