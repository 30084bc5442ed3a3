"""Feature families computed from the canonical tables; one module per family."""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import polars as pl


def frame(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> pl.DataFrame:
    """A query's result as a polars DataFrame."""
    return pl.from_arrow(con.sql(sql, params=params or []).to_arrow_table())


SERIES_POINTS = 2_000_000  # about how many points a batch of `metric_series` holds: a day's features hold a few
# batches at once, not the day (a day of 10,000 pods holds hundreds of millions of points)


def metric_series(con: duckdb.DuckDBPyConnection, lo, hi, part: int = 0, parts: int = 1
                  ) -> Iterator[tuple[pl.DataFrame, pl.DataFrame]]:
    """The metric series of [lo, hi), in batches of whole series of about `SERIES_POINTS` points: the series (`sid`,
    source, component, service, metric), and their points, a value a minute (`sid`, ts, value) ordered by series and
    time. `sid` numbers the series in the order of their names, over all batches. A series' names are not repeated on
    each of its points; DuckDB holds the day's points between batches (and spills what its memory does not hold).
    With `parts`, only the series of one `part` (a hash of its names, taken of each series, not of each point: on a day
    of 10,000 pods, hashing every point took six times as long as grouping them all), so that tasks may share a day's
    series."""
    con.execute("""
        create or replace temp table series_names as
        select *, (sum(n) over (order by sid) - n) // $points as batch from (
            select row_number() over (order by source, component, metric) as sid, *
            from (select source, component, metric, any_value(service) as service, count(*) as n from metric_points
                  where ts >= $lo and ts < $hi group by all)
            where hash(source, component, metric) % $parts = $part)""",
                {"lo": lo, "hi": hi, "points": SERIES_POINTS, "part": part, "parts": parts})
    try:
        con.execute("""
            create or replace temp table series_points as
            select sid, ts, avg(value) as value from metric_points m join series_names s
                on m.source is not distinct from s.source and m.component is not distinct from s.component
                and m.metric is not distinct from s.metric
            where ts >= ? and ts < ? group by all order by sid, ts""", [lo, hi])
        for first, last in con.execute("select min(sid), max(sid) from series_names group by batch order by batch"
                                       ).fetchall():
            yield (frame(con, "select sid, source, component, service, metric from series_names "
                              "where sid between ? and ? order by sid", [first, last]),
                   frame(con, "select sid, ts, value from series_points where sid between ? and ? order by sid, ts",
                         [first, last]))
    finally:
        con.execute("drop table if exists series_names")
        con.execute("drop table if exists series_points")
