"""The 2025 AIOps Challenge layout (DATA.md): CST day folders of parquet, UTC times inside."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb

from common.errors import LoadError

from .base import InputFile, Query, ident, record_text

NAME = "challenge2025"
APM_METRICS = ("request", "response", "rrt", "rrt_max", "error", "client_error", "server_error", "timeout",
               "error_ratio", "client_error_ratio", "server_error_ratio")
INFRA_LABELS = {"time", "cf", "device", "instance", "kpi_key", "kpi_name", "kubernetes_node", "mountpoint",
                "namespace", "object_type", "pod", "sql_type", "type"}
# infra family folder or file prefix -> (source, service of the TiDB part or None)
FAMILIES = {"infra_pod": ("infra_pod", None), "infra_node": ("infra_node", None),
            "infra_tidb": ("tidb", "tidb-tidb"), "infra_tikv": ("tikv", "tidb-tikv"), "infra_pd": ("pd", "tidb-pd")}
_DAY = re.compile(r"\d{4}-\d{2}-\d{2}$")
FAMILY = re.compile(r"infra_([a-z0-9]+)_")  # an infra file's family, the word after `infra_` in its name
UTC_TS = "cast(cast({} as timestamptz) as timestamp)"
SERVICE_OF_POD = r"regexp_replace({}, '-\d+$', '')"


def detect(root: Path) -> bool:
    return any((d / sub).is_dir() for d in _days(root) for sub in ("metric-parquet", "trace-parquet", "log-parquet"))


def _days(root: Path) -> list[Path]:
    root = Path(root)
    days = [d for d in root.iterdir() if d.is_dir() and _DAY.match(d.name)] if root.is_dir() else []
    return sorted(days) or ([root] if _DAY.match(root.name) else [])


def discover(root: Path):
    files = []
    for day in _days(root):
        for path in sorted(day.rglob("*.parquet")):
            rel = path.relative_to(day).as_posix()
            if "deleted" in path.name:
                files.append(InputFile(path, "skip", "a 'deleted' file"))
            elif rel.startswith("log-parquet/"):
                files.append(InputFile(path, "log"))
            elif rel.startswith("trace-parquet/"):
                files.append(InputFile(path, "trace"))
            elif rel.startswith("metric-parquet/apm/pod_ns_"):
                files.append(InputFile(path, "skip", "the union of apm/pod and apm/service"))
            elif rel.startswith("metric-parquet/"):
                files.append(InputFile(path, "metric"))
            else:
                files.append(InputFile(path, "skip", "not part of the layout"))
    return files


def batch(file) -> str | None:
    """A day's spans and its many APM files (one a pod or service) are each read in one scan (the loader binds
    `$path` to a list of them); a log or infra file's query depends on its own columns."""
    return "apm" if file.kind == "metric" and "/apm/" in file.path.as_posix() else (
        "trace" if file.kind == "trace" else None)


def query(con: duckdb.DuckDBPyConnection, file) -> Query:
    """The file's rows in canonical columns; its path and names are bound, never pasted."""
    params = {"path": str(file.path)}
    src = "read_parquet($path)"
    files = "read_parquet($path, filename = true)"  # where `batch` reads many
    if file.kind == "log":  # the testbed's logs of other systems carry the trace and span of each line
        columns = {r[0] for r in con.execute(f"describe select * from {src}", params).fetchall()}
        ids = "nullif(trace_id, '') as trace_id, nullif(span_id, '') as span_id" if {"trace_id", "span_id"} <= columns else \
            "cast(null as text) as trace_id, cast(null as text) as span_id"
        return Query(f"""
        select {UTC_TS.format('"@timestamp"')} as ts, k8_pod as component, {SERVICE_OF_POD.format('k8_pod')} as service,
               k8_node_name as node, message, {record_text('message')} as text, {ids}
        from {src}""", params)
    if file.kind == "trace":
        def tag(col, key):
            return f"list_filter({col}, lambda t: t.key = '{key}')[1].value"
        return Query(f"""
        select traceID as trace_id, spanID as span_id,
               list_filter("references", lambda r: r.refType = 'CHILD_OF')[1].spanID as parent_span_id,
               make_timestamp(startTime) as ts, duration as duration_us, process.serviceName as service,
               {tag('process.tags', 'name')} as pod, {tag('process.tags', 'node_name')} as node,
               operationName as operation, {tag('tags', 'span.kind')} as kind,
               try_cast({tag('tags', 'status.code')} as integer) as status_code,
               case when {tag('tags', 'span.kind')} in ('client', 'producer', 'consumer') then coalesce(
                   {tag('tags', 'peer.service')}, nullif(regexp_extract({tag('tags', 'net.peer.ip')}, '^[a-z][a-z0-9-]*$'), ''))
               end as peer, filename
        from {files}""", params)
    rel = file.path.as_posix()
    if "/apm/" in rel:
        metrics = ", ".join(APM_METRICS)
        doubles = ", ".join(f"cast({m} as double) as {m}" for m in APM_METRICS)
        return Query(f"""
        select {UTC_TS.format('time')} as ts, 'apm' as source, object_id as component, object_type as component_kind,
               case when object_type = 'pod' then {SERVICE_OF_POD.format('object_id')} else object_id end as service,
               cast(null as text) as node, metric, value, filename
        from (unpivot (select time, object_id, object_type, filename, {doubles} from {files})
              on {metrics} into name metric value value)""", params)
    family = FAMILY.search(file.path.name)
    if family is None:
        raise LoadError("not an apm or infra metric file")
    columns = [r[0] for r in con.execute(f"describe select * from {src}", params).fetchall()]
    values = [c for c in columns if c not in INFRA_LABELS]
    if len(values) != 1:
        raise LoadError(f"expected one value column besides {sorted(INFRA_LABELS)}, found {values}")
    family = f"infra_{family[1]}"
    source, part = FAMILIES.get(family, (family[len("infra_"):], None))  # another datastore the testbed writes
    params |= {"kpi": values[0], "source": source}
    if family == "infra_pod":
        who = f"pod as component, 'pod' as component_kind, {SERVICE_OF_POD.format('pod')} as service, instance as node"
    elif family == "infra_node":
        who = ("coalesce(nullif(kubernetes_node, ''), instance) as component, 'node' as component_kind, "
               "cast(null as text) as service, coalesce(nullif(kubernetes_node, ''), instance) as node")
    elif part:
        params["part"] = part
        who = ("coalesce(nullif(pod, ''), $part) as component, 'tidb' as component_kind, $part as service, "
               "nullif(instance, '') as node")
    else:
        who = (f"pod as component, $source as component_kind, {SERVICE_OF_POD.format('pod')} as service, "
               "nullif(instance, '') as node")
    return Query(f"""
    select {UTC_TS.format('time')} as ts, $source as source, {who}, $kpi as metric,
           cast({ident(values[0])} as double) as value
    from {src}""", params)
