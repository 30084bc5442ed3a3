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


# The columns' types, not guessed from the first rows: a node's series has no service, and a batch whose first hundred
# change points were a node's failed at the first pod's.
SCHEMA = {"ts": pl.Datetime("us"), "day": pl.Date, "source": pl.String, "component": pl.String, "service": pl.String,
          "metric": pl.String, "before": pl.Float64, "after": pl.Float64, "score": pl.Float64}


def find_changepoints(series: tuple[pl.DataFrame, pl.DataFrame], day: dt.date) -> pl.DataFrame:
    """The `changepoints` rows of a UTC day, from `metric_series` over the day (points before it are left out: the
    read may hold the hour before, for the anomaly table's baseline); numpy and ruptures alone, no store."""
    names, points = series
    first = names["sid"][0] if len(names) else 1  # a batch's series, numbered on from the batches before it
    sids, values, ts = points["sid"].to_numpy(), points["value"].to_numpy(), points["ts"]
    when, start = ts.to_numpy(), np.datetime64(dt.datetime.combine(day, dt.time()))
    starts = [0, *(np.flatnonzero(np.diff(sids)) + 1), len(sids)] if len(sids) else []
    rows = []
    for lo, hi in zip(starts, starts[1:]):
        lo += int(np.searchsorted(when[lo:hi], start))
        if lo == hi:
            continue
        name = names.row(int(sids[lo]) - first, named=True)
        segment = values[lo:hi]
        cuts = changepoints(segment)
        bounds = [0, *cuts, len(segment)]
        scale = max(float(np.std(segment)), 1e-9)
        for i, cut in enumerate(cuts):
            before = float(segment[bounds[i]:cut].mean())
            after = float(segment[cut:bounds[i + 2]].mean())
            rows.append((ts[int(lo + cut)], day, name["source"], name["component"], name["service"], name["metric"],
                         before, after, abs(after - before) / scale))
    return pl.DataFrame(rows, orient="row", schema=SCHEMA)


def write_changepoints(con: duckdb.DuckDBPyConnection, day: dt.date, found: list[pl.DataFrame]) -> int:
    """A day's change points, found a batch of series at a time."""
    con.execute("delete from changepoints where day = ?", [day])
    for rows in found:
        if len(rows):
            con.execute("insert into changepoints select * from rows")
    return sum(map(len, found))
