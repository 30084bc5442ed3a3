"""Change points per metric series and day, with ruptures' KernelCPD (linear kernel, the fast one).

Penalty: each series is standardised robustly (median, 1.4826 MAD), so one penalty
fits all series; with `PENALTY_PER_LOG_N` x log(n) (about 73 for a day of minutes) a
level shift of a 20-minute window must be about 2.7 MADs to be reported, which keeps
ordinary noise out while every fault signature of the testbed is found. `min_size`
keeps segments at least 3 minutes long.
"""

from __future__ import annotations

import datetime as dt

import duckdb
import numpy as np
import polars as pl
import ruptures

from . import frame

PENALTY_PER_LOG_N = 10.0
MIN_SIZE = 3
MIN_POINTS = 30


def changepoints(values: np.ndarray) -> list[int]:
    """Indices where a new segment starts (none for short or flat series)."""
    n = len(values)
    if n < MIN_POINTS:
        return []
    median = np.median(values)
    scale = 1.4826 * np.median(np.abs(values - median))
    if scale <= 0:
        scale = np.std(values)
    if scale <= 0:
        return []
    signal = ((values - median) / scale).reshape(-1, 1)
    algo = ruptures.KernelCPD(kernel="linear", min_size=MIN_SIZE).fit(signal)
    return [int(b) for b in algo.predict(pen=PENALTY_PER_LOG_N * np.log(n))[:-1]]


def day_series(con: duckdb.DuckDBPyConnection, day: dt.date) -> pl.DataFrame:
    """Every metric series of one UTC day, a value a minute."""
    return frame(con, """
        select ts, source, component, service, metric, avg(value) as value from metric_points
        where ts >= ? and ts < ?::date + 1 group by all order by source, component, metric, ts""", [day, day])


def find_changepoints(df: pl.DataFrame, day: dt.date) -> pl.DataFrame:
    """The `changepoints` rows of a day's series (numpy and ruptures alone: no store)."""
    rows = []
    for (source, component, metric), series in df.partition_by(["source", "component", "metric"], maintain_order=True,
                                                                as_dict=True).items():
        values = series["value"].to_numpy()
        cuts = changepoints(values)
        bounds = [0, *cuts, len(values)]
        scale = max(float(np.std(values)), 1e-9)
        for i, cut in enumerate(cuts):
            before = float(values[bounds[i]:cut].mean())
            after = float(values[cut:bounds[i + 2]].mean())
            rows.append((series["ts"][cut], day, source, component, series["service"][0], metric, before, after,
                         abs(after - before) / scale))
    return pl.DataFrame(rows, orient="row", schema=["ts", "day", "source", "component", "service", "metric",
                                                    "before", "after", "score"])


def write_changepoints(con: duckdb.DuckDBPyConnection, day: dt.date, found: pl.DataFrame) -> int:
    con.execute("delete from changepoints where day = ?", [day])
    if len(found):
        con.execute("insert into changepoints select * from found")
    return len(found)
