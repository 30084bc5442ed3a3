"""The feature store: a catalog (the `--db` DuckDB file) and its day shards, the schema as ordered
migrations, and the ETL lock.

The ETL writes each day of a dump into a shard of its own (`load-*` files: the canonical tables), the
feature refresh each UTC day into another (`features-*`); both are DuckDB files of this same schema in a
folder beside the catalog (`STORE.shards`). The catalog keeps the manifest, the log templates, the numbers
the shards name metric series by (`series`) and the list of shards (`shards`). Its own tables of the shards'
kinds are views over the shards' (`publish`), so any DuckDB client that opens the catalog reads every row;
rcalab's connections attach the shards read-only and read them through temporary views of their own
(`shard_views`). A store built by hand, row by row (the tests' tiny stores), has no shards and is read as it is."""

from __future__ import annotations

import datetime as dt
import fcntl
import os
import re
from contextlib import contextmanager, suppress
from functools import cache
from pathlib import Path

import duckdb

from common.errors import RcalabError, StoreBusy, StoreError
from common.tasks import task_memory, worker_threads

# Ordered, append-only: each migration runs once, in a transaction, when the store opens.
MIGRATIONS = [
    ("canonical tables", """
    create table manifest (file_id integer primary key, path text unique, kind text, rows bigint, bytes bigint,
        mtime double, status text, error text, loaded_at timestamp);
    create table metric_points (ts timestamp, source text, component text, component_kind text, service text,
        node text, metric text, value double, file_id integer);
    create table log_lines (ts timestamp, component text, service text, node text, template_id integer,
        message text, file_id integer);
    create table spans (trace_id text, span_id text, parent_span_id text, ts timestamp, duration_us bigint,
        service text, pod text, node text, operation text, kind text, status_code integer, file_id integer);
    create table placement (pod text, service text, node text, first_seen timestamp, last_seen timestamp);
    """),
    ("feature tables", """
    create table log_templates (template_id integer primary key, template text, first_seen timestamp,
        lines bigint);
    create table log_masked (masked text primary key, template_id integer);
    create table drain_state (id integer primary key, state blob);
    create table log_template_minute (minute timestamp, component text, service text, template_id integer,
        lines bigint);
    create table metric_anomaly (ts timestamp, source text, component text, service text, metric text,
        value double, baseline double, z double);
    create table changepoints (ts timestamp, day date, source text, component text, service text, metric text,
        before double, after double, score double);
    create table trace_edge_minute (minute timestamp, caller text, caller_pod text, callee text, callee_pod text,
        calls bigint, errors bigint, p50_us double, p95_us double, p99_us double, callee_p95_us double);
    create table trace_edge_anomaly (minute timestamp, caller text, callee text, calls bigint, errors bigint,
        p95_us double, baseline_p95_us double, latency_z double, error_rate double, baseline_error_rate double);
    """),
    ("days whose features wait for a refresh", "create table dirty_days (day date primary key);"),
    ("span self time, link gaps and declared calls", """
    alter table trace_edge_minute add column gap_p95_us double;
    create table span_self_minute (minute timestamp, service text, pod text, spans bigint, errors bigint,
        origin_errors bigint, self_p50_us double, self_p95_us double, p95_us double);
    create table declared_calls (caller text, callee text, file_id integer);
    insert or ignore into dirty_days select distinct ts::date from spans;
    """),
    ("log severity", """
    alter table log_lines add column level text;
    alter table log_template_minute add column errors bigint;
    insert or ignore into dirty_days select distinct ts::date from log_lines;
    """),
    ("the span offset of a call (Nezha's NetworkP90)", """
    alter table trace_edge_minute add column offset_p90_us double;
    insert or ignore into dirty_days select distinct ts::date from spans;
    """),
    ("log events in their spans (code positions, event pairs)", """
    alter table log_lines add column trace_id text;
    alter table log_lines add column span_id text;
    alter table log_lines add column event text;
    create table event_pair_minute (minute timestamp, service text, a text, b text, pairs bigint);
    update manifest set mtime = -1 where kind = 'log';  -- the next run reloads logs with their spans and events
    """),
    ("spans of logging operations that logged nothing, in event paths",
     "insert or ignore into dirty_days select distinct ts::date from log_lines where span_id is not null;"),
    ("day shards", """
    alter table log_lines add column masked text;
    create table shards (build integer primary key, kind text, key text, file text, lo timestamp, hi timestamp,
        mined boolean);
    delete from metric_points; delete from log_lines; delete from spans; delete from placement;
    delete from declared_calls; delete from log_template_minute; delete from metric_anomaly; delete from changepoints;
    delete from trace_edge_minute; delete from trace_edge_anomaly; delete from span_self_minute;
    delete from event_pair_minute; delete from dirty_days;
    delete from manifest;  -- the next run loads every file again, into shards
    """),
    ("the calls of a span, in event paths", """
    insert or ignore into dirty_days select distinct ts::date from spans;  -- a store of its own tables
    insert or ignore into dirty_days select lo::date from shards where kind = 'features';
    """),
    ("the operation of an event path", """
    alter table event_pair_minute add column operation text;
    insert or ignore into dirty_days select distinct ts::date from spans;
    insert or ignore into dirty_days select lo::date from shards where kind = 'features';
    """),
    # Any DuckDB client (its CLI, Python, DBeaver; pandas and polars through it) that opens the catalog reads the
    # shards through views (`publish`) that read them with DuckDB's `read_duckdb`, by paths relative to the store.
    # DuckDB tells a view where its database file is only through its default temp_directory ('<file>.tmp');
    # where that is not this store's (the store attached to another database, a temp_directory of the client's
    # own), the view says how to open the store instead of reading another folder.
    ("the shards' tables as views any DuckDB client reads", """
    create macro shard_path(file) as
        case when split_part(parse_filename(regexp_replace(current_setting('temp_directory'), '\\.tmp$', '')), '.', 1)
                  = current_database()
             then regexp_replace(current_setting('temp_directory'), '\\.tmp$', '.shards/') || file
             else error('this store keeps its rows in day shards beside its file (STORE.shards), which its views find '
                        'through DuckDB''s default temp_directory: open the store file itself (not attached to another '
                        'database, no temp_directory set), or run: rcalab sql --db STORE QUERY') end;
    """),
    ("the peer a client span calls", "alter table spans add column peer text;"),
    ("the pod of an event path", """
    alter table event_pair_minute add column pod text;
    insert or ignore into dirty_days select distinct ts::date from spans;
    insert or ignore into dirty_days select lo::date from shards where kind = 'features';
    """),
    ("Kubernetes objects and events", """
    create table k8s_objects (snapshot text, kind text, namespace text, name text, owner text, labels json,
        spec json, status json, file_id integer);
    create table k8s_events (snapshot text, namespace text, object_kind text, object_name text, type text,
        reason text, message text, count integer, first_seen timestamp, last_seen timestamp, age_s double,
        file_id integer);
    alter table shards add column step integer;
    """),
    ("a snapshot's container logs", """
    create table k8s_logs (snapshot text, namespace text, service text, ts timestamp, message text, file_id integer);
    """),
    ("when an object was seen", "alter table k8s_objects add column seen timestamp;"),
    # A point of `metric_anomaly` names its series by a number the catalog keeps (`series`): a shard holds the points
    # without their names (a part of a wide day wrote them in a third of the time), a view joins them.
    ("metric series numbered in the catalog", """
    drop table metric_anomaly;
    create table series (sid integer, source text, component text, service text, metric text);
    create table anomaly_points (ts timestamp, sid integer, value double, baseline double, z double);
    create view metric_anomaly as
        select a.ts, s.source, s.component, s.service, s.metric, a.value, a.baseline, a.z
        from anomaly_points a join series s using (sid);
    insert or ignore into dirty_days select distinct ts::date from metric_points;
    insert or ignore into dirty_days select lo::date from shards where kind = 'features';
    """),
]
# A catalog with shards holds the tables of LOADED and FEATURES as views (`publish`): `migrate` turns them back into
# tables of the schema before its first pending step, so that a step may alter them as it would a shard's.
LOADED = ("metric_points", "log_lines", "spans", "declared_calls", "placement", "k8s_objects",
          "k8s_events", "k8s_logs")  # in `load-*` shards
FEATURES = ("log_template_minute", "anomaly_points", "changepoints", "trace_edge_minute", "trace_edge_anomaly",
            "span_self_minute", "event_pair_minute")  # in `features-*` shards

# The migration step that created each table: a shard built before it (its `step` in `shards`; null before steps
# were kept) does not hold the table, and is left out of the table's views.
ADDED = {table: step for step, (_, sql) in enumerate(MIGRATIONS, 1) for table in re.findall(r"create table (\w+)", sql)}
KEPT = next(step for step, (name, _) in enumerate(MIGRATIONS, 1) if name == "Kubernetes objects and events")


def holds(table: str, step: int | None) -> bool:
    """Whether a shard built at schema `step` holds `table`."""
    return (KEPT - 1 if step is None else step) >= ADDED[table]


# One line per table for `rcalab schema`.
DESCRIPTIONS = {
    "manifest": "every input file: loaded, skipped or failed (with the reason), its size, mtime and rows",
    "metric_points": "every metric value, long format; metric names verbatim from the source",
    "log_lines": "every log line with its pod, service, node, Drain3 template, severity (level), the trace and "
                 "span it was written in where the dump says, its code position (event, logger#line) if it has one, "
                 "and the masked text its template was mined from",
    "spans": "every span: trace, parent, start, duration, service, pod, node, kind, status, and the peer a client, "
             "producer or consumer span names (peer.service; a datastore or broker that writes no span of its own)",
    "placement": "which pod ran on which node, first and last seen",
    "log_templates": "Drain3 templates (ids kept across nightly runs) with line counts and their first minute",
    "log_masked": "masked message -> template id (identical masked messages are mined once)",
    "drain_state": "the Drain3 miner's saved state",
    "log_template_minute": "log lines per component, template and minute, and how many of them are errors",
    "metric_anomaly": "robust z-score of each metric point against the trailing hour (median, MAD), with its "
                      "series' names (a view of anomaly_points and series)",
    "anomaly_points": "metric_anomaly's rows as the shards keep them: its series by number (series)",
    "series": "every metric series (source, component, metric, and its service) by the number the day shards name it "
              "by",
    "changepoints": "change points per series and day (ruptures KernelCPD, linear kernel) with levels around them",
    "trace_edge_minute": "caller -> callee calls, errors, latency percentiles, the caller-side gap "
                         "(caller span minus callee span) and the span offset (caller span end minus callee "
                         "span end, p90) per minute (pods too)",
    "span_self_minute": "per service, pod and minute: spans, errors, errors that start there (no failing child), "
                        "self time (a span less its children) and span p95",
    "declared_calls": "caller -> callee calls a dump declares (a Nezha dependency.csv, Cloud-OpsBench's "
                      "GetServiceDependencies)",
    "event_pair_minute": "per service, operation, pod and minute: how often event a is followed by event b in the same "
                         "span (events: span start and end, a log line's code position or its template as "
                         "template:ID; in a track of their own, the calls a span made)",
    "k8s_objects": "Kubernetes objects as a cluster's state shows them: kind, namespace, name, owner (kind/name), labels, "
                   "spec and status in Kubernetes' own JSON (a text snapshot's fields where kubectl describe prints "
                   "them, its whole layout under status.describe), and when it was seen (an export's time, a "
                   "Collector record's); snapshot names a frozen cluster's state (a case folder), null for a live "
                   "cluster's exports",
    "k8s_events": "Kubernetes events: the object involved, type, reason, message, count, first and last time where "
                  "known (age_s: seconds before the snapshot where only that is known); a snapshot's alerts too, "
                  "as type Alert (the object alerted on, the alert's kind as reason, its evidence as message)",
    "k8s_logs": "a snapshot's container logs as kubectl logs printed them: the service, the line, and its time where "
                "kubectl printed one (--timestamps)",
    "trace_edge_anomaly": "caller -> callee minutes whose p95 latency or error rate left the trailing hour",
    "schema_version": "the migrations applied to this store",
    "dirty_days": "UTC days loaded since their features were last computed (an interrupted run resumes them)",
    "shards": "the day shards beside the catalog: each build's kind (load: a day of the dump; features: a UTC day), "
              "the schema step it was built at (step), "
              "its key, file and time span, and whether its log lines were mined",
}


REACH = dt.timedelta(hours=1)  # a UTC day's features read its rows and those within an hour of it (baselines)
HEADER_BYTES = 3 * 4096  # a DuckDB file's headers, before its blocks


def damaged(path: Path | str, why: str) -> StoreError:
    return StoreError(f"the store {path} is damaged: {why}; rebuild it with 'rcalab etl DUMP --db NEW'")


def shard_lost(db: Path | str, why: str) -> StoreError:
    """A shard missing or unreadable: the next load of its dump writes it again (`etl.loader`), the catalog is whole."""
    return StoreError(f"the store {db} is damaged: {why}; 'rcalab etl DUMP --db {db}' of its dump mends it (the day "
                      "loads again)")


def _short_of(con: duckdb.DuckDBPyConnection, database: str, path: Path) -> str:
    """Why the DuckDB file attached as `database` is cut short ('' where it is whole): every block its header counts
    as used is in the file (free blocks at the end are cut from it)."""
    (block, blocks), = con.execute("select block_size, used_blocks from pragma_database_size() "
                                    "where database_name = ?", [database]).fetchall()
    size, needed = os.path.getsize(path), HEADER_BYTES + block * blocks
    return f"the file has {size:,} bytes of the {needed:,} its used blocks take at least" if blocks and size < needed \
        else ""


def unreadable(con: duckdb.DuckDBPyConnection, db: Path | str, alias: str, file: str) -> str:
    """Why a shard the catalog lists cannot be read ('' where it can), attaching it as `alias` where it can."""
    path = shard_dir(db) / file
    if not path.is_file():
        return "is missing"
    try:
        attach(con, path, alias)
        short = _short_of(con, alias, path)
    except duckdb.Error as e:
        return f"cannot be read ({str(e).splitlines()[0]})"
    return f"is cut short ({short})" if short else ""


def unwritable(e: duckdb.Error) -> bool:
    """Whether DuckDB failed because the store's file system refused a write (full, read-only): the store is
    whole, and nothing more can be loaded into it until that is mended."""
    return any(cause in str(e) for cause in ("No space left", "Read-only file system", "Disk quota exceeded"))


def tables(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str, str]]:
    """Every table of a store: its name, what it holds, its columns with their types."""
    rows = con.execute("""select table_name, string_agg(column_name || ' ' || data_type, ', ' order by ordinal_position)
                          from information_schema.columns where table_catalog = current_database()
                          group by table_name order by table_name""").fetchall()
    return [(name, DESCRIPTIONS.get(name, ""), columns) for name, columns in rows]


def connect(path: Path | str, read_only: bool = False, shards: bool = True) -> duckdb.DuckDBPyConnection:
    """Open (creating if needed) a store and bring its schema up to date. A store cut short (a copy or a disk
    that stopped half way) is refused as damaged before anything reads or writes it; a file of another kind is
    refused as it is. Its shards are attached (`open_shards`) unless `shards` is False (the ETL mends them first)."""
    path = Path(path)
    if path.is_file() and path.stat().st_size >= 12:
        with open(path, "rb") as f:
            if f.read(12)[8:] != b"DUCK":
                raise StoreError(f"{path} is not a DuckDB store; name a new file or a store built by 'rcalab etl'")
    try:
        con = duckdb.connect(str(path), read_only=read_only)
        short = _short_of(con, con.execute("select current_database()").fetchall()[0][0], path)
    except duckdb.IOException as e:
        if "Could not set lock" in str(e):  # DuckDB names the holder: "... is held in /usr/bin/python3 (PID 12)"
            holder = re.search(r"held in (.+?) \(PID (\d+)\)", str(e))
            holder = f" ({holder[1]}, PID {holder[2]})" if holder else ""
            raise StoreBusy(f"the store {path} is in use by another rcalab process{holder}; try again when it ends") \
                from None
        raise damaged(path, str(e).splitlines()[0]) from None
    except (duckdb.SerializationException, duckdb.InternalException) as e:
        raise damaged(path, str(e).splitlines()[0]) from None
    except duckdb.Error as e:
        raise StoreError(f"cannot open store {path}: {str(e).splitlines()[0]}") from None
    if short:
        con.close()
        raise damaged(path, short)
    con.execute("set TimeZone = 'UTC'")  # the store's timestamps are naive UTC
    # Progress is rcalab's to show: DuckDB draws a bar of its own on any query past two seconds, which on a wide day
    # broke into the etl's progress, from each Dask worker too. In Jupyter without ipywidgets it draws none, and
    # refuses the setting.
    with suppress(duckdb.InvalidInputException):
        con.execute("set enable_progress_bar = false")
    if not read_only:
        migrate(con)
    elif not con.execute("select 1 from information_schema.tables where table_name = 'schema_version'").fetchall():
        con.close()
        raise StoreError(f"{path} is a DuckDB file but not an rcalab store; build one with 'rcalab etl DUMP --db {path}'")
    elif (step := con.execute("select max(step) from schema_version").fetchall()[0][0] or 0) < len(MIGRATIONS):
        con.close()
        raise StoreError(f"{path} was built by an older rcalab (schema {step} of {len(MIGRATIONS)}); "
                         f"bring it up to date with 'rcalab etl DUMP --db {path}'")
    try:
        if shards:
            open_shards(con, path)
    except StoreError:
        con.close()
        raise
    return con


@contextmanager
def write_shard(out: Path):
    """A shard written for one task: a connection to it under a temporary name (what an interrupted task left
    there removed), whose DuckDB takes the threads of the worker it runs on and holds at most `task_memory` (it
    spills the rest to disk); renamed into place when the block ends, left unseen and removed when it fails. A
    refusal of the store's disk is a StoreError."""
    tmp = out.with_name(out.name + ".tmp")
    for left in (tmp, tmp.with_name(tmp.name + ".wal")):
        left.unlink(missing_ok=True)
    con = connect(tmp)
    try:
        if threads := worker_threads():
            con.execute(f"set threads = {int(threads)}")
        con.execute(f"set memory_limit = '{task_memory() // 2**20}MiB'")  # beyond it DuckDB spills to disk
        yield con
        con.execute("checkpoint")
    except BaseException as e:
        con.close()
        tmp.unlink(missing_ok=True)
        if isinstance(e, duckdb.Error) and unwritable(e):
            raise StoreError(f"the store cannot be written ({str(e).splitlines()[0]})") from None
        raise
    con.close()
    os.replace(tmp, out)


def next_build(con: duckdb.DuckDBPyConnection) -> int:
    """The build number of the next shard (its file name and the alias it is attached as)."""
    return con.execute("select coalesce(max(build), 0) + 1 from shards").fetchall()[0][0]


def shard_dir(db: Path | str) -> Path:
    return Path(f"{db}.shards")


def cache_dir(db: Path | str) -> Path:
    """What reads keep beside the shards for other processes (a day's reference levels): never a shard, and never
    needed (a read-only store's readers go without)."""
    return shard_dir(db) / "cache"


def attach(con: duckdb.DuckDBPyConnection, path: Path | str, alias: str) -> None:
    """Attach a shard read-only (the path is the store's, never a dump's; quoted all the same)."""
    literal = "'" + str(path).replace("'", "''") + "'"
    con.execute(f"attach if not exists {literal} as {alias} (read_only)")


def _listed(con: duckdb.DuckDBPyConnection, lo: dt.datetime | None = None, hi: dt.datetime | None = None
            ) -> dict[str, tuple[str, str, int | None]]:
    """The catalog's shards by alias: their kind, file name and schema step; those that hold rows between `lo` and
    `hi`, where given."""
    within = "" if lo is None else "where hi >= ? and lo <= ?"
    return {f"shard_{build}": (kind, file, step) for build, kind, file, step in con.execute(
        f"select build, kind, file, step from shards {within} order by kind, key",
        [] if lo is None else [lo, hi]).fetchall()}


def _views(con: duckdb.DuckDBPyConnection, listed: dict[str, tuple[str, str, int | None]]) -> None:
    shard_views(con, {a: step for a, (kind, _, step) in listed.items() if kind == "load"},
                {a: step for a, (kind, _, step) in listed.items() if kind == "features"})


def open_shards(con: duckdb.DuckDBPyConnection, db: Path | str) -> None:
    """Attach the catalog's shards (again, after a run changed them) and name their tables (`shard_views`)."""
    current = _listed(con)
    for alias, in con.execute("select database_name from duckdb_databases() where database_name like 'shard\\_%' "
                              "escape '\\'").fetchall():
        if alias not in current:
            con.execute(f"detach {alias}")
    for alias, (_, file, _) in current.items():
        if why := unreadable(con, db, alias, file):
            raise shard_lost(db, f"its shard {shard_dir(db) / file} {why}")
    _views(con, current)


READS = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}  # select, with, from, describe, show, summarize


def read(con: duckdb.DuckDBPyConnection, query: str) -> duckdb.DuckDBPyConnection:
    """Run one query that reads (READS) on a store's read-only connection, which is first closed to the outside
    world (no file, extension or setting beyond the store: DuckDB's enable_external_access and lock_configuration).
    A statement that would write, attach, detach, install, load or set is refused before it runs, as is a text of
    several statements: attaching a shard again, read-write, is an ATTACH, which the settings alone let through."""
    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error as e:
        raise RcalabError(f"the query failed: {str(e).splitlines()[0]}") from None
    if len(statements) != 1:
        raise RcalabError(f"the query holds {len(statements)} statements; give one that reads (select, describe, "
                          "show, summarize, explain)")
    if statements[0].type not in READS:
        kind = {duckdb.StatementType.LOAD: "install or load"}.get(statements[0].type, statements[0].type.name.lower())
        raise RcalabError(f"the query is {kind}, not a read: rcalab sql runs one query "
                          "that reads the store (select, describe, show, summarize, explain) and nothing that writes, "
                          "attaches or reaches outside it")
    con.execute("set enable_external_access = false")
    con.execute("set lock_configuration = true")
    try:
        return con.execute(query)
    except duckdb.PermissionException as e:
        raise RcalabError(f"the query reaches outside the store, which rcalab sql does not allow "
                          f"({str(e).splitlines()[0]})") from None
    except (duckdb.IOException, duckdb.SerializationException, duckdb.InternalException, duckdb.InterruptException):
        raise  # the store's own trouble, or a Ctrl-C: the command line says which
    except duckdb.Error as e:
        raise RcalabError(f"the query failed: {str(e).splitlines()[0]}") from None


def threads(con: duckdb.DuckDBPyConnection) -> int:
    """The threads DuckDB gives a query on this connection."""
    return int(con.execute("select current_setting('threads')").fetchall()[0][0])


def cursor(con: duckdb.DuckDBPyConnection, lo: dt.datetime | None = None, hi: dt.datetime | None = None
           ) -> duckdb.DuckDBPyConnection:
    """A cursor of a store's connection (one per thread) that reads the shards' tables (temporary views are a
    connection's own; the shards are attached already): those of `focus(lo, hi)` where given."""
    cur = con.cursor()
    _views(cur, _listed(cur, lo, hi))
    return cur


def focus(con: duckdb.DuckDBPyConnection, lo: dt.datetime, hi: dt.datetime) -> None:
    """Read only the shards that hold rows between `lo` and `hi` (a case's window or a day's scan, and as far as
    their baselines and reference windows reach): a read costs the same on the thirtieth day of a store as on the
    second. A store without shards is read as it is."""
    _views(con, _listed(con, lo, hi))


def shard_views(con: duckdb.DuckDBPyConnection, loads: dict[str, int | None], features: dict[str, int | None]
                ) -> None:
    """Temporary views that name each table as the union of the attached shards' (`loads` hold the canonical
    tables, `features` the feature tables; each alias with the schema step it was built at); a table no shard holds
    keeps its own."""
    for tables, steps in ((LOADED, loads), (FEATURES, features)):
        for table in tables:
            con.execute(f"drop view if exists temp.{table}")
            aliases = [alias for alias, step in steps.items() if holds(table, step)]
            if aliases:
                # a shard built before a column was added reads it null
                union = " union all by name ".join(f"select * from {a}.{table}" for a in aliases)
                con.execute(f"create temp view {table} as {as_read(table, union)}")


def as_read(table: str, rows: str) -> str:
    """A shard table as readers see it, from `rows`, its rows in the shards: a log line's template is its masked
    text's (`log_masked`, which the catalog mines once the day's shard is loaded); a pod's placement spans every
    shard's."""
    if table == "log_lines":
        return (f"select l.* replace (m.template_id as template_id) from ({rows}) l "
                "left join log_masked m on m.masked = l.masked")
    if table == "placement":
        return (f"select pod, service, node, min(first_seen) as first_seen, max(last_seen) as last_seen "
                f"from ({rows}) group by all")
    return rows


def publish(con: duckdb.DuckDBPyConnection) -> None:
    """The catalog's tables of the shards' kinds as views over the shards its `shards` table lists, read by any
    DuckDB client (`shard_path`); a kind no shard holds keeps (or gets back) a table of its own. Called in the
    transaction that changes the list."""
    views, own = _views_of(con), _own(con)
    files: dict[str, list[tuple[str, int | None]]] = {"load": [], "features": []}
    for kind, file, step in con.execute("select kind, file, step from shards order by kind, key").fetchall():
        files[kind].append((file, step))
    for tables, shards in ((LOADED, files["load"]), (FEATURES, files["features"])):
        for table in tables:
            listed = [file for file, step in shards if holds(table, step)]
            if listed:
                paths = ", ".join(f"shard_path({_literal(f)})" for f in listed)
                rows = f"select * from read_duckdb([{paths}], table_name := '{table}', union_by_name := true)"
                if table not in views:
                    con.execute(f"drop table {own}.{table}")
                con.execute(f"create or replace view {own}.{table} as {as_read(table, rows)}")
            elif table in views:
                _table_back(con, table, len(MIGRATIONS))


def _views_of(con: duckdb.DuckDBPyConnection) -> set[str]:
    return {name for name, in con.execute("select view_name from duckdb_views() where database_name = "
                                          "current_database() and schema_name = 'main' and not internal").fetchall()}


def _own(con: duckdb.DuckDBPyConnection) -> str:
    """The catalog's own schema, named whole: a connection's temporary views of the same names come first
    otherwise (`temp.main`)."""
    name = con.execute("select current_database()").fetchall()[0][0]
    return '"' + name.replace('"', '""') + '".main'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@cache
def _columns_at(step: int) -> dict[str, str]:
    """The columns of each table as the schema stood after `step` migrations (its tables, not its views)."""
    con = duckdb.connect()
    for _, sql in MIGRATIONS[:step]:
        con.execute(sql)
    return dict(con.execute("""select table_name, string_agg(format('"{}" {}', column_name, data_type), ', '
                                                          order by column_index)
                               from duckdb_columns() where table_oid in (select table_oid from duckdb_tables())
                               group by all""").fetchall())


def _table_back(con: duckdb.DuckDBPyConnection, table: str, step: int) -> None:
    """A view over the shards back to the catalog's own (empty) table of the schema after `step` migrations."""
    own = _own(con)
    con.execute(f"drop view {own}.{table}")
    con.execute(f"create table {own}.{table} ({_columns_at(step)[table]})")


def migrate(con: duckdb.DuckDBPyConnection) -> None:
    """Apply the pending migrations in order, all in one transaction; a catalog's views over its shards are tables
    of the schema as it stood while the steps run (a table no step keeps among them), and views again after."""
    con.execute("create table if not exists schema_version (step integer primary key, name text)")
    done = {row[0] for row in con.execute("select step from schema_version").fetchall()}
    pending = [(step, name, sql) for step, (name, sql) in enumerate(MIGRATIONS, 1) if step not in done]
    if not pending:
        return
    con.execute("begin")
    before = _columns_at(pending[0][0] - 1)
    for table in _views_of(con) & set(before):  # a table made later stays as it is
        _table_back(con, table, pending[0][0] - 1)
    for step, name, sql in pending:
        con.execute(sql)
        con.execute("insert into schema_version values (?, ?)", [step, name])
    publish(con)
    con.execute("commit")


@contextmanager
def exclusive(path: Path | str, what: str = "ETL"):
    """Hold the lock of a file being written (a store, an answers file); a second writer fails at once."""
    lock_path = Path(str(path) + ".lock")
    try:
        fd = os.open(lock_path, os.O_CREAT | os.O_RDWR)
    except OSError as e:
        raise StoreError(f"cannot write beside {path}: {e.strerror} ({lock_path})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StoreBusy(f"another {what} is writing {path} (lock {lock_path}); try again when it ends") from None
        yield
    finally:
        os.close(fd)
