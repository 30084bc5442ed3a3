"""Feature families computed from the canonical tables; one module per family."""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import polars as pl
import pyarrow as pa


def frame(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> pl.DataFrame:
    """A query's result as a polars DataFrame."""
    return pl.from_arrow(con.sql(sql, params=params or []).to_arrow_table())


SERIES_POINTS = 2_000_000  # about how many points a batch of `metric_series` holds: a day's features hold a few
# batches at once, not the day (a day of 10,000 pods holds hundreds of millions of points)


def same_series(a: str, b: str) -> str:
    """SQL: the rows `a` and `b` name the same metric series (a name may be null)."""
    return " and ".join(f"{a}.{name} is not distinct from {b}.{name}" for name in ("source", "component", "metric"))


def number_series(con: duckdb.DuckDBPyConnection, lo, hi) -> pa.Table:
    """The metric series of [lo, hi) as `series` numbers them, those it lacked numbered after its highest number in
    the order of their names (a component's series next to each other). A series keeps its number and its service
    (the first a day of it named) from day to day."""
    con.execute("create or replace temp table named as select source, component, metric, any_value(service) as service "
                "from metric_points where ts >= ? and ts < ? group by all", [lo, hi])
    try:
        con.execute(f"""
            insert into series
            select (select coalesce(max(sid), 0) from series) + row_number() over (order by source, component, metric),
                   source, component, service, metric
            from named n anti join series s on {same_series("n", "s")}""")
        return con.sql(f"select s.* from series s semi join named n on {same_series('n', 's')} order by sid"
                       ).to_arrow_table()
    finally:
        con.execute("drop table if exists named")


def metric_series(con: duckdb.DuckDBPyConnection, lo, hi, part: int = 0, parts: int = 1
                  ) -> Iterator[tuple[pl.DataFrame, pl.DataFrame]]:
    """The metric series of [lo, hi), in batches of whole series of about `SERIES_POINTS` points: the series (`sid`,
    source, component, service, metric), and their points, a value a minute (`sid`, ts, value) ordered by series and
    time. `sid` is the series' number in `series` (`number_series`), which names every series of [lo, hi). A
    series' names are not repeated on each of its points; DuckDB holds the day's points between batches (and spills
    what its memory does not hold).
    With `parts`, only the series of one `part`: those of the components of a hash of their name (the first part's
    also those of none), so that tasks may share a day's series. A part's scans keep to its components' points before
    they group or join any (a part of a day of 10,000 pods, one of eight, read its series in 4.0 s of CPU when it
    grouped every point of the day first, in 2.6 s this way; a hash compared with an untyped parameter is cast to a
    128-bit integer on every point, and took 6 s)."""
    con.execute("create or replace temp table series_components as select distinct component from metric_points "
                "where ts >= ? and ts < ? and hash(component) % ?::ubigint = ?::ubigint", [lo, hi, parts, part])
    mine = "({0} in (select component from series_components) or {0} is null and $part = 0)"  # a part's points
    con.execute(f"""
        create or replace temp table series_names as
        select *, (sum(n) over (order by sid) - n) // $points as batch from (
            select s.sid, p.source, p.component, s.service, p.metric, p.n
            from (select source, component, metric, count(*) as n from metric_points
                  where ts >= $lo and ts < $hi and {mine.format('component')} group by all) p
            join series s on {same_series("p", "s")})""",
                {"lo": lo, "hi": hi, "points": SERIES_POINTS, "part": part})
    try:
        con.execute(f"""
            create or replace temp table series_points as
            select sid, ts, value from metric_points m join series_names s
                on m.source is not distinct from s.source and m.component is not distinct from s.component
                and m.metric is not distinct from s.metric
            where ts >= $lo and ts < $hi and {mine.format('m.component')} order by sid, ts""",
                    {"lo": lo, "hi": hi, "part": part})
        for first, last in con.execute("select min(sid), max(sid) from series_names group by batch order by batch"
                                       ).fetchall():
            yield (frame(con, "select sid, source, component, service, metric from series_names "
                              "where sid between ? and ? order by sid", [first, last]),
                   merged(frame(con, "select sid, ts, value from series_points where sid between ? and ? "
                                     "order by sid, ts", [first, last])))
    finally:
        con.execute("drop table if exists series_components")
        con.execute("drop table if exists series_names")
        con.execute("drop table if exists series_points")


def merged(points: pl.DataFrame) -> pl.DataFrame:
    """Points ordered by series and time, each series' points of the same time merged into their mean. Such points
    are rare, and found next to each other: a batch without them is returned as it is (DuckDB grouping a part's
    6.7 M points of a wide day to merge them took 3 s of CPU, most of its read)."""
    same = (pl.col("sid") == pl.col("sid").shift()) & (pl.col("ts") == pl.col("ts").shift())
    if not points.select(same.any()).item():
        return points
    return points.group_by("sid", "ts", maintain_order=True).agg(pl.col("value").mean())
