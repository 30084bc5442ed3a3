"""The nightly job: the ETL loads a dump into day shards and marks the UTC days whose features read the rows
it changed (`dirty_days`); then every feature table of each such day is recomputed into a features shard of
that day, a task like the ETL's (in this process or on a Dask worker), written under a temporary name and
renamed into place. A day whose refresh fails stays marked and is tried again on the next run."""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import duckdb
import pyarrow as pa

from common.errors import RcalabError, StoreError
from common.tasks import Behind, run_tasks, task_parts
from etl import store
from etl.loader import Report, parted, run_etl

from . import metric_series, number_series
from .anomaly import WINDOW, refresh_edge_anomaly, refresh_metric_anomaly
from .changepoints import find_changepoints, write_changepoints
from .events import refresh_event_pairs
from .templates import count_templates, refresh_template_minute
from .trace_edges import refresh_span_self, refresh_trace_edges

log = logging.getLogger(__name__)


def nightly(dump: Path, db: Path, fmt: str = "auto", progress: Callable[[int, str], None] | None = None,
            client=None) -> Report:
    """Load `dump` into the store `db` (`etl.loader.run_etl`), then refresh the features of the days it touched;
    each day a task, run where `client` says (`run_tasks`)."""
    return run_etl(dump, db, fmt, progress, then=lambda con, report: refresh_dirty(con, db, report, progress, client),
                   client=client)


# A day of more metric series than this is computed in parts (a power of two, at most MAX_PARTS: `task_parts`): tasks
# that workers share, each the series of the components of a hash of their names (the first also the day's other
# tables). A part costs a task's start and a scan of the whole day's points for its components, and bounds what a
# task holds: on a day of 10,000 pods, 225,000 series, by hand, one task in one process took 106.3 and 98.8 s, eight
# parts 121.4 and 109.2 s; on one Dask worker (its DuckDB given `task_memory`'s 3 GiB) one part held 4.3 GB, eight
# parts 2.5 GB, in 138.1 and 147.0 s against 152.2 and 145.0 s. A simulated HipsterShop day has 1,000 series: one
# task. Chosen, not fitted.
PART_SERIES = 20_000
MAX_PARTS = 8


@dataclass(frozen=True)
class FeatureDay:
    """The task of one UTC day's features, or of a part of them: the load shards that hold its rows (and those within
    an hour of it), the templates of their masked log lines, the numbers of its series, and the shard it writes."""
    day: dt.date
    loads: tuple[tuple[str, int | None], ...]  # each shard's file and the schema step it was built at
    masked: pa.Table
    series: pa.Table
    out: str
    part: int = 0
    parts: int = 1

    @property
    def key(self) -> str:
        return parted(str(self.day), self.part, self.parts)


def series_span(day: dt.date) -> tuple[dt.datetime, dt.datetime]:
    """What a UTC day's metric series are read over: the day and the hour before it (its first hour's baseline)."""
    start = dt.datetime.combine(day, dt.time())
    return start - dt.timedelta(minutes=WINDOW), start + dt.timedelta(days=1)


def number_day(con: duckdb.DuckDBPyConnection, day: dt.date) -> tuple[int, pa.Table]:
    """A day's parts, and the numbers of the series they read (`number_series`): before `refresh_day`."""
    series = number_series(con, *series_span(day))
    return task_parts(series.num_rows, PART_SERIES, MAX_PARTS), series


def refresh_dirty(con: duckdb.DuckDBPyConnection, db: Path, report: Report,
                  progress: Callable[[int, str], None] | None = None, client=None) -> None:
    """Refresh every marked day; the rows written and the failures go into `report`. A day's parts take the place
    of its old shards together, once every part is written; a day with a part that failed keeps its old ones."""
    days = [row[0] for row in con.execute("select day from dirty_days order by day").fetchall()]
    if not days:
        return
    started = time.perf_counter()
    folder = store.shard_dir(db)
    loads = con.execute("select file, lo, hi, step from shards where kind = 'load' and lo is not null").fetchall()
    old: dict[dt.date, list[int]] = defaultdict(list)  # each day's features shards, one or its parts
    for day, built in con.execute("select lo::date, build from shards where kind = 'features'").fetchall():
        old[day].append(built)
    masked = con.sql("select masked, template_id from log_masked").to_arrow_table()
    build = store.next_build(con)
    todo, empty = [], []
    for day in days:
        lo = dt.datetime.combine(day, dt.time()) - store.REACH
        hi = lo + dt.timedelta(days=1) + 2 * store.REACH
        reads = tuple((str(folder / file), step) for file, first, last, step in loads if first < hi and last >= lo)
        if not reads:
            empty.append(day)
            continue
        parts, series = number_day(con, day)
        todo += [FeatureDay(day, reads, masked, series, str(folder / f"features-{day}.{build + len(todo) + i}.duckdb"),
                            i, parts) for i in range(parts)]
    for day in empty:  # no rows left near it: its features go
        _switch(con, db, day, [], old[day])
    done: dict[dt.date, list[FeatureDay]] = defaultdict(list)
    failed: set[dt.date] = set()
    try:
        for n, (i, result) in enumerate(run_tasks(feature_day, todo, client)):
            task = todo[i]
            if progress:
                progress(n, f"features of {task.day}" + (f", part {task.part + 1} of {task.parts}" if task.parts > 1
                                                         else ""))
            if isinstance(result, str):
                report.failed.append((f"features of {task.day}", result))
                log.warning("features of %s: %s", task.day, result)
                failed.add(task.day)
            else:
                for table, rows in result.items():
                    report.feature_rows[table] = report.feature_rows.get(table, 0) + rows
                done[task.day].append(task)
            if task.day in failed:  # its parts written are dropped
                for part in done.pop(task.day, []):
                    Path(part.out).unlink(missing_ok=True)
            elif len(done[task.day]) == task.parts:
                _switch(con, db, task.day, done.pop(task.day), old[task.day])
    except StoreError as e:
        raise StoreError(f"{e}; the days refreshed before are kept; run the same command again once that is "
                         "mended") from None
    store.open_shards(con, db)
    count_templates(con)
    report.seconds_by_kind["features"] = time.perf_counter() - started


def _switch(con, db: Path, day: dt.date, parts: list[FeatureDay], old: list[int]) -> None:
    """The catalog takes a day's new features shards (none, one, or its parts) in place of the old, and the day is
    done."""
    con.execute("begin")
    gone = []
    for built in old:
        (file,), = con.execute("select file from shards where build = ?", [built]).fetchall()
        con.execute("delete from shards where build = ?", [built])
        gone.append(file)
    for part in parts:
        con.execute("insert into shards values (?, 'features', ?, ?, ?, ?, null, ?)",
                    [int(Path(part.out).suffixes[-2][1:]), part.key, Path(part.out).name, day,
                     day + dt.timedelta(days=1), len(store.MIGRATIONS)])
    con.execute("delete from dirty_days where day = ?", [day])
    store.publish(con)
    con.execute("commit")
    for file in gone:
        (store.shard_dir(db) / file).unlink(missing_ok=True)


def feature_day(task: FeatureDay) -> dict[str, int] | str:
    """A day's features task: the rows each table holds for the day, or why the refresh failed."""
    try:
        with store.write_shard(Path(task.out)) as con:
            aliases = {}
            for i, (path, step) in enumerate(task.loads):
                store.attach(con, path, f"load_{i}")
                aliases[f"load_{i}"] = step
            con.register("log_masked", task.masked)
            con.register("series", task.series)
            store.shard_views(con, aliases, {})
            # The first hour's baseline of trace edges is the hour before the day: computed again from the rows
            # here (as the previous day's shard holds it), and not kept; by the part that computes the trace edges.
            start = dt.datetime.combine(task.day, dt.time())
            if task.part == 0:
                refresh_trace_edges(con, start - dt.timedelta(minutes=WINDOW), start)
            counts = refresh_day(con, task.day, task.part, task.parts)
            con.execute("delete from trace_edge_minute where minute < ?", [start])
    except (duckdb.InterruptException, StoreError):  # a Ctrl-C, or a disk that refuses the store: the run stops
        raise
    except (duckdb.Error, ValueError, RcalabError) as e:  # the day's failure (a helper process that died too)
        return str(e).splitlines()[0]
    return counts


def refresh_day(con: duckdb.DuckDBPyConnection, day: dt.date, part: int = 0, parts: int = 1) -> dict[str, int]:
    """Recompute every feature table for one UTC day, or a part of it (`metric_series`' part of the series; the first
    part also every table that is not of series); returns the rows each holds for it. The metric series are read once
    for the anomaly table and the change points, a batch of series at a time; the batches' change points (ruptures,
    which holds Python's lock) are found in helper processes, as many batches at once as DuckDB has threads, while
    DuckDB and polars compute the next batch's anomalies and then the other tables (a task given one thread, as a
    cluster's worker is, keeps to it). At most one batch more than DuckDB's threads is held at once. On a whole day
    of 1,000 pods, whose series of 1,440 minutes make the search most of the features' time, a thread of this
    process searched them in 41 s, two helpers in 31 s."""
    start = dt.datetime.combine(day, dt.time())
    end = start + dt.timedelta(days=1)
    threads = store.threads(con)
    with Behind(inline=threads == 1, processes=threads) as finder:
        def batches():
            for batch in metric_series(con, *series_span(day), part, parts):
                finder.put(find_changepoints, batch, day)
                yield batch

        counts = {"metric_anomaly": refresh_metric_anomaly(con, start, end, batches())}
        if part == 0:
            counts |= {"log_template_minute": refresh_template_minute(con, start, end),
                       "trace_edge_minute": refresh_trace_edges(con, start, end),
                       "span_self_minute": refresh_span_self(con, start, end),
                       "event_pair_minute": refresh_event_pairs(con, start, end)}
            counts["trace_edge_anomaly"] = refresh_edge_anomaly(con, start, end)
        finder.wait()
        counts["changepoints"] = write_changepoints(con, day, finder.results)
    return counts
