"""The simulated day in OpenTelemetry's layout: each file of a challenge-layout dump, read as the ETL reads it
(its adapter's canonical rows), written as the Collector's `file` exporter would (OTLP/JSON lines, gzip): one
export request per resource (a pod, a service or a node) and file, its attributes the semantic conventions'
(`service.name`, `k8s.pod.name`, `k8s.node.name`), hex ids, numeric enums, 64-bit numbers as strings. Metrics
are gauges, each source an instrumentation scope. The labels (`groundtruth.jsonl`, `input.json`) are copied."""

from __future__ import annotations

import gzip
import json
import shutil
from collections import defaultdict
from pathlib import Path

import duckdb

from etl.adapters import challenge2025

KINDS = {"internal": 1, "server": 2, "client": 3, "producer": 4, "consumer": 5}
FIELDS = {"trace": "resourceSpans", "log": "resourceLogs", "metric": "resourceMetrics"}


def _resource(service, pod, node) -> dict:
    pairs = (("service.name", service), ("k8s.pod.name", pod), ("k8s.node.name", node))
    return {"attributes": [{"key": k, "value": {"stringValue": v}} for k, v in pairs if v]}


def _span(r: dict) -> dict:
    span = {"traceId": r["trace_id"], "spanId": r["span_id"], "name": r["operation"] or "",
            "kind": KINDS.get(r["kind"] or "", 0), "startTimeUnixNano": str(r["ns"]),
            "endTimeUnixNano": str(r["ns"] + int(r["duration_us"] or 0) * 1000),
            "status": {"code": 2} if r["status_code"] else {}}
    if r["parent_span_id"]:
        span["parentSpanId"] = r["parent_span_id"]
    if r["peer"]:
        span["attributes"] = [{"key": "peer.service", "value": {"stringValue": r["peer"]}}]
    return span


def _record(r: dict) -> dict:
    record = {"timeUnixNano": str(r["ns"]), "body": {"stringValue": r["message"]}}
    if r["trace_id"]:
        record |= {"traceId": r["trace_id"], "spanId": r["span_id"]}
    return record


def _requests(kind: str, rows: list[dict]) -> list[dict]:
    """One export request per resource."""
    by_resource: dict[tuple, list[dict]] = defaultdict(list)
    if kind == "metric":
        for r in rows:
            kind = r["component_kind"]
            pod = r["component"] if kind not in ("service", "node") else None
            node = r["component"] if kind == "node" else r["node"]
            by_resource[r["service"], pod, node, r["source"]].append(r)
        out = []
        for (service, pod, node, source), points in by_resource.items():
            series: dict[str, list] = defaultdict(list)
            for r in points:
                series[r["metric"]].append({"timeUnixNano": str(r["ns"]), "asDouble": r["value"]})
            metrics = [{"name": name, "gauge": {"dataPoints": p}} for name, p in series.items()]
            out.append({"resource": _resource(service, pod, node),
                        "scopeMetrics": [{"scope": {"name": source}, "metrics": metrics}]})
        return out
    for r in rows:
        pod = r["pod"] if kind == "trace" else r["component"]
        by_resource[r["service"], pod, r["node"]].append(r)
    if kind == "trace":
        return [{"resource": _resource(*who), "scopeSpans": [{"spans": [_span(r) for r in group]}]}
                for who, group in by_resource.items()]
    return [{"resource": _resource(*who), "scopeLogs": [{"logRecords": [_record(r) for r in group]}]}
            for who, group in by_resource.items()]


def write_otlp(dump: Path, out: Path) -> int:
    """Write `dump` (challenge layout) as OTLP/JSON files under `out`; returns how many."""
    out.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    written = 0
    try:
        for file in challenge2025.discover(dump):
            if file.kind not in FIELDS:
                continue
            query = challenge2025.query(con, file)
            # a row's time (naive UTC, the store's) as OTLP's nanoseconds since the epoch
            cur = con.execute(f"select *, epoch_ns(ts) as ns from ({query.sql})", query.params)
            names = [d[0] for d in cur.description]
            rows = [dict(zip(names, row)) for row in cur.fetchall()]
            relative = file.path.relative_to(dump)
            folder = Path(*(part.removesuffix("-parquet") for part in relative.parent.parts))
            target = out / folder / (relative.stem + ".json.gz")
            target.parent.mkdir(parents=True, exist_ok=True)
            with gzip.GzipFile(target, "wb", compresslevel=1, mtime=0) as f:  # no time in the header: same seed, same bytes
                for request in _requests(file.kind, rows):
                    f.write((json.dumps({FIELDS[file.kind]: [request]}) + "\n").encode())
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
