"""Feature families computed from the canonical tables; one module per family."""

from __future__ import annotations

import duckdb
import polars as pl


def frame(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> pl.DataFrame:
    """A query's result as a polars DataFrame."""
    return pl.from_arrow(con.sql(sql, params=params or []).to_arrow_table())


def metric_series(con: duckdb.DuckDBPyConnection, lo, hi) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The metric series of [lo, hi): the series (`sid`, source, component, service, metric), and their points, a
    value a minute (`sid`, ts, value) ordered by series and time. A series' names are not repeated on each of its
    points: a day of 10,000 pods holds hundreds of millions of points."""
    con.execute("""
        create or replace temp table series_names as
        select row_number() over (order by source, component, metric) as sid, *
        from (select source, component, metric, any_value(service) as service from metric_points
              where ts >= ? and ts < ? group by all)""", [lo, hi])
    try:
        names = frame(con, "select sid, source, component, service, metric from series_names order by sid")
        points = frame(con, """
            select sid, ts, avg(value) as value from metric_points m join series_names s
                on m.source is not distinct from s.source and m.component is not distinct from s.component
                and m.metric is not distinct from s.metric
            where ts >= ? and ts < ? group by all order by sid, ts""", [lo, hi])
    finally:
        con.execute("drop table series_names")
    return names, points
