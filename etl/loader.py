"""The ETL run: find the dump's files, load new and changed ones, and mark the days their rows fall on
(`dirty_days`) for the features' refresh (`features/refresh.py`).

Each file loads in one transaction (its old rows out, its new rows in, its manifest row),
so an interrupted run leaves every file either fully loaded or not at all. A file that
fails is recorded in the manifest with the reason and the run goes on.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from stat import S_ISREG
from typing import Callable

import duckdb

from rcalab.errors import LoadError, StoreError

from . import store
from .adapters import TABLES, InputFile, adapter_for
from .loglines import event_sql, level_sql, mask_sql, mine_new

log = logging.getLogger(__name__)


@dataclass
class Report:
    format: str
    loaded: list[str] = field(default_factory=list)
    unchanged: int = 0
    skipped: int = 0
    removed: int = 0  # files gone from the dump since the last run: their rows were dropped
    failed: list[tuple[str, str]] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)  # files some of whose rows no system can produce
    rows: int = 0
    feature_rows: dict[str, int] = field(default_factory=dict)
    rows_by_kind: dict[str, int] = field(default_factory=dict)
    seconds_by_kind: dict[str, float] = field(default_factory=dict)  # "features" for the refresh

    @property
    def partial(self) -> bool:
        return bool(self.failed)


def run_etl(dump: Path, db: Path, fmt: str = "auto", progress: Callable[[int, str], None] | None = None,
            then: Callable[[duckdb.DuckDBPyConnection, Report], None] | None = None) -> Report:
    """Load `dump` into the store `db` incrementally (see the module docstring). `then(con, report)` runs once
    the files are in, on the same connection and under the same lock (the nightly job refreshes the features)."""
    dump = Path(dump).resolve()  # a file is known by its real path, however the dump was named
    adapter = adapter_for(dump, fmt)
    with store.exclusive(db):
        con = store.connect(db)
        try:
            report = _run(con, adapter, dump, progress)
            if then:
                then(con, report)
            return report
        finally:
            con.close()


def _run(con, adapter, dump: Path, progress) -> Report:
    report = Report(adapter.NAME)
    files = adapter.discover(dump)
    known = {row[0]: row[1:] for row in con.execute("select path, bytes, mtime, status, file_id from manifest").fetchall()}
    present = {str(f.path) for f in files}
    for path, (_, _, status, fid) in known.items():
        if status == "loaded" and path.startswith(f"{dump}/") and path not in present:
            _drop(con, fid, path)
            report.removed += 1
    todo = []
    for file in files:
        stat, problem = _stat(file.path)
        if problem:  # only regular files are read: a pipe would block the run, a dangling link has nothing
            file = InputFile(file.path, "skip", problem)
        prev = known.get(str(file.path))
        if prev and prev[0] == stat.st_size and prev[1] == stat.st_mtime and prev[2] in ("loaded", "skipped"):
            report.unchanged += 1
        elif file.kind == "skip":
            _record(con, file, _file_id(con, prev), 0, "skipped", file.reason)
            report.skipped += 1
        else:
            todo.append((file, prev))
    for i, (file, prev) in enumerate(todo):
        if progress:
            progress(i, file.path.name)
        started = time.perf_counter()
        try:
            rows, left_out = _load(con, adapter, file, prev)
        except duckdb.InterruptException:  # a Ctrl-C inside a query: the file is left as it was, the run ends
            _rollback(con)
            raise
        except (duckdb.Error, ValueError, LoadError) as e:
            _rollback(con)
            if isinstance(e, duckdb.Error) and store.unwritable(e):  # the store's disk, not the file: stop here
                raise StoreError(f"the store cannot be written ({str(e).splitlines()[0]}); the {len(report.loaded)} "
                                 "files loaded before are kept; run the same command again once that is mended") \
                    from None
            reason = str(e).splitlines()[0]
            fid = _file_id(con, prev)
            kept = sum(con.execute(f"select count(*) from {table} where file_id = ?", [fid]).fetchone()[0]
                       for table in TABLES.values())  # under whatever kind it loaded as before
            if kept:  # a failed reload: the previous load's rows stay, and the manifest says so
                reason += f"; the {kept} rows of its previous load are kept"
            _record(con, file, fid, kept, "failed", reason)
            report.failed.append((str(file.path), reason))
            log.warning("%s: %s", file.path, reason)
            continue
        report.loaded.append(str(file.path))
        if left_out:
            report.left_out.append(str(file.path))
        report.rows += rows
        report.rows_by_kind[file.kind] = report.rows_by_kind.get(file.kind, 0) + rows
        report.seconds_by_kind[file.kind] = report.seconds_by_kind.get(file.kind, 0.0) + time.perf_counter() - started
    con.execute("delete from dirty_days where day not between ? and ?", [FIRST_DAY, last_day()])  # none can load
    return report


def _mark_days(con, table: str, fid: int) -> None:
    """The days a file's rows fall on wait for a feature refresh."""
    con.execute(f"insert or ignore into dirty_days select distinct ts::date from {table} where file_id = ?", [fid])


def last_day() -> dt.date:
    return dt.date.today() + dt.timedelta(days=366)


def _drop(con, fid: int, path: str) -> None:
    """A file gone from the dump: its rows go too (their days are refreshed), the manifest says why."""
    kind = con.execute("select kind from manifest where file_id = ?", [fid]).fetchall()[0][0]
    table = TABLES[kind]
    con.execute("begin")
    if kind in PLACEMENT_SOURCES:
        _mark_days(con, table, fid)
    con.execute(f"delete from {table} where file_id = ?", [fid])
    con.execute("update manifest set status = 'removed', rows = 0, error = ?, loaded_at = current_timestamp::timestamp "
                "where file_id = ?", ["the file is gone from the dump; its rows were dropped", fid])
    con.execute("commit")
    log.info("%s: gone from the dump, rows dropped", path)


def _rollback(con) -> None:
    try:
        con.execute("rollback")
    except duckdb.Error:
        pass  # the failure came before the transaction began


def _file_id(con, prev) -> int:
    if prev:
        return prev[3]
    return con.execute("select coalesce(max(file_id), 0) + 1 from manifest").fetchall()[0][0]


def _stat(path: Path) -> tuple[os.stat_result, str]:
    """A file's stat, and why it cannot be read as a file of the dump ('' when it can)."""
    try:
        stat = path.stat()
    except OSError as e:  # a link that leads nowhere or loops
        return path.lstat(), f"a link that cannot be followed ({e.strerror})"
    if not S_ISREG(stat.st_mode):
        return stat, "not a regular file (a named pipe, a socket or a device is not read)"
    return stat, ""


def _record(con, file: InputFile, fid: int, rows: int, status: str, error: str) -> None:
    stat, _ = _stat(file.path)
    con.execute("delete from manifest where file_id = ?", [fid])
    con.execute("insert into manifest values (?, ?, ?, ?, ?, ?, ?, ?, current_timestamp::timestamp)",
                [fid, str(file.path), file.kind, rows, stat.st_size, stat.st_mtime, status, error or None])


def _load(con, adapter, file: InputFile, prev) -> tuple[int, bool]:
    """Load one file in one transaction; returns its row count and whether rows no system can produce were left
    out."""
    if file.kind == "unreadable":  # the adapter could not read it to tell what it holds
        raise LoadError(file.reason)
    table = TABLES[file.kind]
    query = adapter.query(con, file)
    select, params = query.sql, query.params
    fid = _file_id(con, prev)
    left_out: list[str] = []
    con.execute("begin")
    if file.kind in PLACEMENT_SOURCES:  # the days of the rows it replaces are refreshed too
        _mark_days(con, table, fid)
    con.execute(f"delete from {table} where file_id = ?", [fid])
    if file.kind == "log":  # lines repeat: each distinct text is masked once
        con.execute(f"create or replace temp table staged as {select}", params)
        con.execute(f"""create or replace temp table masks as
                        select text, {mask_sql('text')} as masked, {level_sql('text')} as level,
                               {event_sql('text')} as event
                        from (select distinct text from staged)""")
        mine_new(con, "masks")
        con.execute(f"""insert into log_lines by name
                        select s.ts, s.component, s.service, s.node, m.template_id, s.message, {fid} as file_id,
                               k.level, s.trace_id, s.span_id, k.event
                        from staged s join masks k using (text) join log_masked m using (masked)""")
    elif file.kind in IMPOSSIBLE:
        reasons = IMPOSSIBLE[file.kind]
        counts, = con.execute(f"select {', '.join(f'count(*) filter ({p})' for p in reasons.values())} "
                              f"from ({select})", params).fetchall()
        left_out = [f"{reason} ({n:,})" for reason, n in zip(reasons, counts) if n]
        con.execute(f"insert into {table} select *, {fid} from ({select}) "
                    f"where not coalesce({' or '.join(reasons.values())}, false)", params)
    else:
        con.execute(f"insert into {table} select *, {fid} from ({select})", params)
    rows = con.execute(f"select count(*) from {table} where file_id = ?", [fid]).fetchall()[0][0]
    if file.kind in PLACEMENT_SOURCES:  # telemetry, with times (declared calls have none)
        (untimed, outside, example), = con.execute(
            f"""select count(*) - count(ts), count(*) filter (where ts::date not between ? and ?),
                       min(ts::text) filter (where ts::date not between ? and ?)
                from {table} where file_id = ?""", [FIRST_DAY, last_day(), FIRST_DAY, last_day(), fid]).fetchall()
        if untimed:
            raise ValueError(f"{untimed} rows without a time")
        if outside:
            raise ValueError(f"{outside} rows with times outside {FIRST_DAY}..{last_day()} (e.g. {example})")
        _mark_days(con, table, fid)
        _update_placement(con, file.kind, fid)
    said = [f"left out {', '.join(left_out)}; the rest loaded" if left_out else "",
            _rejected(con, file.path) if query.rejects else ""]
    _record(con, file, fid, rows, "loaded", "; ".join(filter(None, said)))
    con.execute("commit")
    return rows, bool(left_out)


def _rejected(con, path: Path) -> str:
    """What the manifest says of the malformed rows a read of `path` left out (DuckDB lists them in
    `reject_errors`, by scan)."""
    lines = [r[0] for r in con.execute("""
        select distinct line from reject_errors join reject_scans using (scan_id)
        where reject_scans.file_path = ? order by line""", [str(path)]).fetchall()]
    if not lines:
        return ""
    shown = ", ".join(map(str, lines[:5])) + (" ..." if len(lines) > 5 else "")
    return f"{len(lines)} malformed rows left out (lines {shown}); the rest loaded"


# Rows no system can produce, by reason: left out at load and counted in the manifest, so that one such row
# changes no answer and fails no day's features (a span of 2^63 us overflowed their sums).
IMPOSSIBLE = {
    "metric": {"readings that are not finite numbers": "value is null or not isfinite(value)",
               "readings of 1e18 or more in size": "abs(value) >= 1e18"},
    "trace": {"spans of negative duration": "duration_us < 0",
              "spans over a day long": f"duration_us > {24 * 3600 * 10**6}"},
}
FIRST_DAY = dt.date(2000, 1, 1)  # a time before it, or over a year ahead, is a broken clock or a bad parse
PLACEMENT_SOURCES = {
    "metric": "select component as pod, service, node, ts, file_id from metric_points where component_kind = 'pod'",
    "log": "select component as pod, service, node, ts, file_id from log_lines",
    "trace": "select pod, service, node, ts, file_id from spans",
}


def _update_placement(con, kind: str, fid: int) -> None:
    con.execute(f"""insert into placement select pod, service, node, min(ts), max(ts) from ({PLACEMENT_SOURCES[kind]})
                    where file_id = ? and pod is not null and node is not null group by all""", [fid])
    con.execute("""create or replace table placement as
                   select pod, service, node, min(first_seen) as first_seen, max(last_seen) as last_seen
                   from placement group by all""")

