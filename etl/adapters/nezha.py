"""The Nezha layout (real Train Ticket data): per-pod metric CSVs, per-minute log and trace CSVs."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import duckdb

from common.errors import DumpError, LoadError, read_json

from .base import InputFile, Query, ident

NAME = "nezha"
# ts-contacts-service-866bd68c97-dzqgd -> ts-contacts-service (Deployment pod names)
SERVICE_OF_POD = r"regexp_replace({}, '-[a-z0-9]{{6,10}}-[a-z0-9]{{5}}$', '')"


def detect(root: Path) -> bool:
    root = Path(root)
    return root.is_dir() and (any(root.rglob("*fault_list.json")) or any(root.rglob("metric/*_metric.csv")))


def discover(root: Path) -> list[InputFile]:
    """The published tree: `rca_data` holds the days, `construct_data` minutes of a normal period. Its logs
    and traces load like the rest, so that they join the baseline of every case within reach; its metric
    files repeat the day's series of `rca_data` and are skipped."""
    root = Path(root)
    normal = root / "construct_data"
    if (root / "rca_data").is_dir():
        root = root / "rca_data"
    files = [InputFile(path, "skip", "the normal period's metrics repeat the day's series in rca_data")
             if path.parent.name == "metric" else _file(path)
             for path in sorted(normal.rglob("*.csv"))] if normal.is_dir() else []
    files += [_file(path) for path in sorted(root.rglob("*.csv"))]
    files += [InputFile(p, "skip", "fault labels (read by 'rcalab cases')") for p in sorted(root.rglob("*.json"))]
    return files


def _file(path: Path) -> InputFile:
    folder = path.parent.name
    if path.name == "dependency.csv":
        return InputFile(path, "calls")
    if path.name in ("source_50.csv", "destination_50.csv"):
        return InputFile(path, "skip", "per-call latency between services; the traces carry it")
    if folder in ("metric", "log", "trace"):
        return InputFile(path, folder)
    return InputFile(path, "skip", "not metrics, logs or traces")


# The layout's dialect is stated, never sniffed: a sniffer once took the tabs inside log lines for the delimiter.
DIALECT = "header = true, delim = ',', quote = '\"', escape = '\"'"
COLUMNS = {
    "log": ("Timestamp", "TimeUnixNano", "Node", "PodName", "Container", "TraceID", "SpanID", "Log"),
    "trace": ("TraceID", "SpanID", "ParentID", "PodName", "OperationName", "StartTimeUnixNano", "EndTimeUnixNano",
              "Duration"),
}


def _csv(columns: tuple[str, ...] | None) -> str:
    """`read_csv` of `$path` in the layout's dialect; with the file's columns named, every value is text and a
    malformed row (a line whose quotes are broken) is left out and counted by the loader."""
    if columns is None:  # metric files: their KPI columns vary, their types are read from the values
        return f"read_csv($path, {DIALECT})"
    names = ", ".join(f"'{c}': 'VARCHAR'" for c in columns)
    return (f"read_csv($path, {DIALECT}, auto_detect = false, columns = {{{names}}}, "
            "ignore_errors = true, store_rejects = true)")


def query(con: duckdb.DuckDBPyConnection, file: InputFile) -> Query:
    """The file's rows in canonical columns; its path is bound and its column names quoted."""
    params = {"path": str(file.path)}
    src = _csv(COLUMNS.get(file.kind))
    if file.kind == "log":  # TimeUnixNano overflows on some real rows; the ISO Timestamp is right
        return Query(f"""
        select cast(cast(Timestamp as timestamptz) as timestamp) as ts, PodName as component,
               {SERVICE_OF_POD.format('PodName')} as service, Node as node, Log as message,
               coalesce(case when json_valid(Log) then trim(json_extract_string(Log, '$.log')) end, Log) as text,
               nullif(TraceID, '') as trace_id, nullif(SpanID, '') as span_id
        from {src}""", params, rejects=True)
    if file.kind == "calls":
        return Query(f"select Source as caller, Target as callee from {src}", params)
    if file.kind == "trace":
        return Query(f"""
        select TraceID as trace_id, SpanID as span_id, nullif(ParentID, 'root') as parent_span_id,
               make_timestamp(cast(StartTimeUnixNano as bigint) // 1000) as ts,
               cast(Duration as bigint) as duration_us, {SERVICE_OF_POD.format('PodName')} as service,
               PodName as pod, cast(null as text) as node, OperationName as operation, cast(null as text) as kind,
               cast(null as integer) as status_code, cast(null as text) as peer
        from {src}""", params, rejects=True)
    columns = [r[0] for r in con.execute(f"describe select * from {src}", params).fetchall()]
    who = "PodName" if "PodName" in columns else "ServiceName"
    if who not in columns or "TimeStamp" not in columns:
        raise LoadError("a metric file needs TimeStamp and PodName or ServiceName columns")
    kind = "pod" if who == "PodName" else "service"
    keep = ", ".join(f"cast({ident(c)} as double) as {ident(c)}" for c in columns if c not in ("Time", "TimeStamp", who))
    # The text `Time` (2022-08-22 03:51:19.60 +0000 UTC m=+0.11) is right where the epoch `TimeStamp` is not (a
    # real Online Boutique file is 200,000,000 s ahead): the text wins, the epoch stands in where it is missing.
    time = ("coalesce(try_strptime(left(Time::varchar, 19), '%Y-%m-%d %H:%M:%S'), "
            "to_timestamp(cast(TimeStamp as bigint))::timestamp)" if "Time" in columns
            else "to_timestamp(cast(TimeStamp as bigint))::timestamp")
    service = SERVICE_OF_POD.format("component") if kind == "pod" else "component"
    return Query(f"""
    select ts, '{kind}' as source, component, '{kind}' as component_kind, {service} as service,
           cast(null as text) as node, metric, value
    from (unpivot (select {time} as ts, {who} as component, {keep} from {src})
          on columns(* exclude (ts, component)) into name metric value value)""", params)


WINDOW = dt.timedelta(minutes=3)  # the inject minute and the two after it, as the dump keeps them
# Nezha fault types -> the nearest challenge fault type (used in `fault_description`).
NEAREST = {"network_delay": "network delay", "cpu_contention": "cpu stress", "cpu_consumed": "cpu stress",
           "exception": "code error", "return": "code error"}


def labels(root: Path) -> list[dict]:
    """Ground-truth rows from the fault lists (`*fault_list.json`, and `root_cause_*.json`'s indicators), by time."""
    root = Path(root)
    indicators_file = next(root.rglob("root_cause_*.json"), None)  # root_cause_ts.json, root_cause_hipster.json
    indicators = read_json(indicators_file) if indicators_file else {}
    if not isinstance(indicators, dict) or not all(isinstance(v, dict) for v in indicators.values()):
        raise DumpError(f"{indicators_file}: expected an object of services, each an object of fault types")
    system = indicators_file.stem.removeprefix("root_cause_") if indicators_file else ""  # Nezha's namespace
    rows = []
    for path in sorted(root.rglob("*fault_list.json")):
        try:
            faults = [f for hour in read_json(path).values() for f in hour]
        except (AttributeError, TypeError) as e:
            raise DumpError(f"{path}: not a fault list ({e})") from None
        for i, fault in enumerate(faults):
            try:
                start = dt.datetime.fromisoformat(fault["inject_time"])  # UTC, like the telemetry
                pod, kind = fault["inject_pod"], fault["inject_type"]
                if not (isinstance(pod, str) and isinstance(kind, str)):
                    raise ValueError("inject_pod and inject_type must be text")
            except (KeyError, ValueError, TypeError) as e:
                raise DumpError(f"{path}: fault {i}: {e}") from None
            service = pod.rsplit("-", 2)[0]
            indicator = indicators.get(service, {}).get(kind)
            rows.append({
                "fault_category": "nezha", "system": system, "fault_type": kind, "instance_type": "service",
                "service": service, "instance": service, "source": "", "destination": "",
                "start_time": start.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "end_time": (start + WINDOW).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "uuid": f"nezha-{start:%Y%m%d-%H%M%S}", "key_observations": [],
                "key_metrics": [indicator] if indicator else [], "inject_pod": pod,
                "fault_description": [kind.replace("_", " "), NEAREST.get(kind, kind.replace("_", " "))],
            })
    return sorted(rows, key=lambda r: r["start_time"])
