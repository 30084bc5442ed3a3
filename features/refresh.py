"""The nightly job: the ETL loads a dump and marks the days whose rows changed (`dirty_days`), then
every feature table of each such day is recomputed here. A day whose refresh fails stays marked and
is tried again on the next run."""

from __future__ import annotations

import datetime as dt
import logging
import time
from pathlib import Path
from typing import Callable

import duckdb

from etl.loader import Report, run_etl

from .anomaly import refresh_edge_anomaly, refresh_metric_anomaly
from .changepoints import refresh_changepoints
from .events import refresh_event_pairs
from .templates import refresh_template_minute
from .trace_edges import refresh_span_self, refresh_trace_edges

log = logging.getLogger(__name__)


def nightly(dump: Path, db: Path, fmt: str = "auto", progress: Callable[[int, str], None] | None = None) -> Report:
    """Load `dump` into the store `db` (`etl.loader.run_etl`), then refresh the features of the days it touched."""
    return run_etl(dump, db, fmt, progress, then=lambda con, report: refresh_dirty(con, report, progress))


def refresh_dirty(con: duckdb.DuckDBPyConnection, report: Report,
                  progress: Callable[[int, str], None] | None = None) -> None:
    """Refresh every marked day; the rows written and the failures go into `report`."""
    days = [row[0] for row in con.execute("select day from dirty_days order by day").fetchall()]
    started = time.perf_counter()
    for i, day in enumerate(days):
        if progress:
            progress(i, f"features of {day}")
        try:
            refreshed = refresh_day(con, day)
        except duckdb.InterruptException:  # a Ctrl-C: the day stays marked for the next run
            raise
        except (duckdb.Error, ValueError) as e:
            report.failed.append((f"features of {day}", str(e).splitlines()[0]))
            log.warning("features of %s: %s", day, e)
            continue
        for table, rows in refreshed.items():
            report.feature_rows[table] = report.feature_rows.get(table, 0) + rows
        con.execute("delete from dirty_days where day = ?", [day])
    if days:
        report.seconds_by_kind["features"] = time.perf_counter() - started


def refresh_day(con: duckdb.DuckDBPyConnection, day: dt.date) -> dict[str, int]:
    """Recompute every feature table for one UTC day; returns the rows each holds for it."""
    start = dt.datetime.combine(day, dt.time())
    end = start + dt.timedelta(days=1)
    counts = {
        "metric_anomaly": refresh_metric_anomaly(con, start, end),
        "log_template_minute": refresh_template_minute(con, start, end),
        "trace_edge_minute": refresh_trace_edges(con, start, end),
        "span_self_minute": refresh_span_self(con, start, end),
        "event_pair_minute": refresh_event_pairs(con, start, end),
    }
    counts["trace_edge_anomaly"] = refresh_edge_anomaly(con, start, end)
    counts["changepoints"] = refresh_changepoints(con, day)
    return counts
