"""RCAEval's case folders (the RE1/RE2/RE3 benchmark: `<dataset>/<service>_<fault>/<n>/`), as the `rcaeval`
package's readers (`RCAEval.utility`) read them: metrics wide (`time` in unix seconds, a column per
`<service>_<metric>`; `metrics.parquet`, `data.csv` or `simple_metrics.csv`) or as `metrics.json` (each metric's
`[time, value]` pairs); `logs.csv` (`container_name`, `message` and a `time` or `timestamp`); `traces.csv`
(`traceID`, `spanID`, `parentSpanID`, `serviceName`, `operationName`, `startTime` and `duration` in
microseconds); `inject_time.txt`, the fault's start in unix seconds. A column's service is its name up to its
first `_`, as RCAEval splits it. Times in seconds, milliseconds, microseconds or nanoseconds are told apart by
their size.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import duckdb

from common.errors import DumpError, LoadError

from .base import InputFile, Query, ident

NAME = "rcaeval"
INJECT = "inject_time.txt"
METRICS = ("metrics.parquet", "metrics.json", "simple_metrics.csv", "data.csv")  # the first a case has is read
SIGNALS = {"logs.csv": "log", "logs.parquet": "log", "traces.csv": "trace", "traces.parquet": "trace"}
WINDOW = dt.timedelta(minutes=5)  # a case's question: the five minutes from its inject time (chosen, not fitted)


def _cases(root: Path) -> list[Path]:
    root = Path(root)
    if root.is_file() or not root.is_dir():
        return []
    return sorted(p.parent for p in root.rglob(INJECT))


def detect(root: Path) -> bool:
    return bool(_cases(root))


def discover(root: Path) -> list[InputFile]:
    files = []
    for case in _cases(root):
        metrics = next((case / m for m in METRICS if (case / m).is_file()), None)
        for path in sorted(p for p in case.iterdir() if p.is_file()):
            if path == metrics:
                files.append(InputFile(path, "metric"))
            elif path.name in METRICS:
                files.append(InputFile(path, "skip", f"the case's metrics are read from {metrics.name}"))
            elif path.name in SIGNALS:
                files.append(InputFile(path, SIGNALS[path.name]))
            else:
                files.append(InputFile(path, "skip", "the fault's start (read by 'rcalab cases')" if path.name == INJECT
                                       else "not metrics, logs or traces"))
    return files


def _time(column: str) -> str:
    """Unix time in s, ms, us or ns (told by its size), or ISO text, as a naive UTC timestamp."""
    number = f"try_cast({column} as double)"
    return (f"coalesce(make_timestamp(cast({number} * case when abs({number}) >= 1e17 then 1e-3 "
            f"when abs({number}) >= 1e14 then 1 when abs({number}) >= 1e11 then 1e3 else 1e6 end as bigint)), "
            f"cast(try_cast({column} as timestamptz) as timestamp))")


def _reader(path: Path) -> str:
    return "read_parquet($path)" if path.suffix == ".parquet" else "read_csv($path, header = true, all_varchar = true)"


def _columns(con, path: Path) -> list[str]:
    return [r[0] for r in con.execute(f"describe select * from {_reader(path)}", {"path": str(path)}).fetchall()]


def query(con: duckdb.DuckDBPyConnection, file: InputFile) -> Query:
    params = {"path": str(file.path)}
    if file.kind == "metric":
        if file.path.suffix == ".json":
            long = """(select e.key as name, pt[1] as time, pt[2] as value from (
                           select e, unnest(e.value) as pt from (
                               select unnest(map_entries(cast(json as map(varchar, double[][])))) as e
                               from read_json_objects($path))))"""
        else:
            columns = _columns(con, file.path)
            if "time" not in columns:
                raise LoadError("a wide metrics file needs a 'time' column")
            values = ", ".join(f"try_cast({ident(c)} as double) as {ident(c)}" for c in columns if c != "time")
            long = f"""(unpivot (select time, {values} from {_reader(file.path)})
                        on columns(* exclude (time)) into name name value value)"""
        return Query(f"""
        select {_time('time')} as ts, 'rcaeval' as source, split_part(name, '_', 1) as component,
               'service' as component_kind, split_part(name, '_', 1) as service, cast(null as text) as node,
               substr(name, length(split_part(name, '_', 1)) + 2) as metric, value
        from {long} where contains(name, '_')""", params)
    columns = _columns(con, file.path)
    if file.kind == "log":
        when = next((c for c in ("timestamp", "time", "ts") if c in columns), None)
        if when is None or "container_name" not in columns or "message" not in columns:
            raise LoadError("a logs file needs container_name, message and a time or timestamp column")
        return Query(f"""
        select {_time(ident(when))} as ts, container_name as component, container_name as service,
               cast(null as text) as node, message, message as text, cast(null as text) as trace_id,
               cast(null as text) as span_id
        from {_reader(file.path)}""", params)
    needed = {"traceID", "spanID", "parentSpanID", "serviceName", "startTime", "duration"}
    if not needed <= set(columns):
        raise LoadError(f"a traces file needs the columns {', '.join(sorted(needed))}")
    operation = "operationName" if "operationName" in columns else "methodName" if "methodName" in columns else None
    status = "try_cast(statusCode as integer)" if "statusCode" in columns else "cast(null as integer)"
    return Query(f"""
    select traceID as trace_id, spanID as span_id, nullif(parentSpanID, '') as parent_span_id,
           {_time('startTime')} as ts, cast(try_cast(duration as double) as bigint) as duration_us,
           serviceName as service, cast(null as text) as pod, cast(null as text) as node,
           {operation or 'cast(null as text)'} as operation, cast(null as text) as kind,
           case when {status} >= 400 or {status} = 2 then {status} else 0 end as status_code, cast(null as text) as peer
    from {_reader(file.path)}""", params)


def labels(root: Path) -> list[dict]:
    """A ground-truth row per case: the service and fault from its folder's name, the window from its inject time."""
    rows = []
    for case in _cases(root):
        named = case.parent.name if case.name.isdigit() else case.name  # <service>_<fault>[/<n>]
        service, _, fault = named.partition("_")
        try:
            start = dt.datetime.fromtimestamp(float((case / INJECT).read_text().split()[0]), dt.timezone.utc)
        except (ValueError, IndexError, OSError) as e:
            raise DumpError(f"{case / INJECT}: not a unix time ({e})") from None
        if not fault:
            raise DumpError(f"{case}: the folder's name is not <service>_<fault>")
        dataset = case.parent.parent.name if case.name.isdigit() else case.parent.name
        rows.append({
            "fault_category": "rcaeval", "system": dataset, "fault_type": fault, "instance_type": "service",
            "service": service, "instance": service, "source": "", "destination": "",
            "start_time": start.strftime("%Y-%m-%dT%H:%M:%SZ"), "end_time": (start + WINDOW).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "uuid": f"rcaeval-{dataset}-{named}" + (f"-{case.name}" if case.name.isdigit() else ""),
            "key_observations": [], "key_metrics": [], "fault_description": [fault]})
    return sorted(rows, key=lambda r: (r["start_time"], r["uuid"]))
