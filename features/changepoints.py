"""Change points per metric series and day, with ruptures' KernelCPD (linear kernel, the fast one).

Penalty: each series is standardised robustly (median, 1.4826 MAD), so one penalty
fits all series; with `PENALTY_PER_LOG_N` x log(n) (about 73 for a day of minutes) a
level shift of a 20-minute window must be about 2.7 MADs to be reported, which keeps
ordinary noise out while every fault signature of the testbed is found. `min_size`
keeps segments at least 3 minutes long.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict

import duckdb
import numpy as np
import polars as pl

PENALTY_PER_LOG_N = 10.0
MIN_SIZE = 3
MIN_POINTS = 30


def changepoints(signals: list[np.ndarray]) -> list[list[int]]:
    """For each standardised series, the indices where a new segment starts. The search (a cost for every pair of
    points) runs only on the series the screen (`_quiet`) cannot prove have none; it screens those of one length at
    once."""
    found: list[list[int]] = [[] for _ in signals]
    lengths: dict[int, list[int]] = defaultdict(list)
    for i, signal in enumerate(signals):
        lengths[len(signal)].append(i)
    for n, same in lengths.items():
        if n < 2 * MIN_SIZE:  # too short to cut
            continue
        pen = PENALTY_PER_LOG_N * np.log(n)
        for i in np.asarray(same)[~_quiet(np.stack([signals[i] for i in same]), pen)]:
            found[i] = _search(signals[i], pen, MIN_SIZE)
    return found


def _search(signal: np.ndarray, pen: float, min_size: int) -> list[int]:
    """Where ruptures' optimal search (a linear kernel: squares about the segments' means) cuts the signal."""
    import ruptures  # here: its half second of scipy is not the job's to wait for where no search runs (its coordinator)
    algo = ruptures.KernelCPD(kernel="linear", min_size=min_size).fit(signal.reshape(-1, 1))
    return [int(b) for b in algo.predict(pen=pen)[:-1]]


RATIO = 1.25  # each class of segment lengths `_quiet` bounds this many times the last; it decides how fast, never
# what is found (chosen, not fitted)


def _quiet(signals: np.ndarray, pen: float) -> np.ndarray:
    """Which rows of `signals` (standardised series of n points each) the search is sure to find no change point in,
    proven from D, each series' cumulative sums about its mean. Cuts into segments lower the squares about the means
    by the sum over the segments of (what D moves across the segment)^2 / its length, their gain; the search reports
    k cuts only where they gain more than k `pen`. One cut's gain is computed at every place. Two cuts or more: the
    first and last segments gain at most their most at any cut (`ends`), each segment between at most the most that any
    segment of `MIN_SIZE` points or more gains (`inner`); so where inner < pen and ends + inner < 2 pen, no k cuts gain
    k pen (two cuts come closest). `inner` is bounded class by class of lengths (from `MIN_SIZE`, each class `RATIO`
    times the last) by how far D moves from each point within the class's reach over the class's shortest length (a
    sliding maximum and minimum), until a series is proven to move too far, or no segment that long can gain what it
    has room for (D's whole range, squared, over the length). It tells series of every kind: noise, and counts that
    are zero but for a few spikes."""
    from scipy.ndimage import maximum_filter1d, minimum_filter1d  # here, as ruptures: the coordinator never screens

    pen *= 1 - 1e-9  # a gain within rounding of the penalty is searched
    count, n = signals.shape
    d = np.zeros((count, n + 1))
    np.cumsum(signals - signals.mean(axis=1, keepdims=True), axis=1, out=d[:, 1:])
    cut = np.arange(MIN_SIZE, n - MIN_SIZE + 1)
    squared = d[:, MIN_SIZE:n - MIN_SIZE + 1] ** 2
    one = (squared * (n / (cut * (n - cut)))).max(axis=1)
    ends = (squared / cut).max(axis=1) + (squared / (n - cut)).max(axis=1)
    room = np.minimum(pen, 2 * pen - ends)  # what a segment between may gain
    quiet = (one < pen) & (room > 0)
    spread = np.ptp(d, axis=1) ** 2
    shortest = MIN_SIZE
    while shortest <= n and len(rows := np.flatnonzero(quiet & (spread / shortest >= room))):
        width = max(1, int(np.ceil(shortest * RATIO)) - shortest)
        moved = d[rows]
        start = moved[:, :n + 1 - shortest]
        window = {"size": width, "axis": 1, "mode": "nearest", "origin": -(width // 2)}  # [i, i + width)
        top = maximum_filter1d(moved, **window)[:, shortest:] - start
        bottom = start - minimum_filter1d(moved, **window)[:, shortest:]
        inner = np.maximum(top.max(axis=1), bottom.max(axis=1)) ** 2 / shortest  # the class's bound
        quiet[rows] = inner < room[rows]
        shortest += width
    return quiet


# The columns' types, not guessed from the first rows: a node's series has no service, and a batch whose first hundred
# change points were a node's failed at the first pod's.
SCHEMA = {"ts": pl.Datetime("us"), "day": pl.Date, "source": pl.String, "component": pl.String, "service": pl.String,
          "metric": pl.String, "before": pl.Float64, "after": pl.Float64, "score": pl.Float64}


def find_changepoints(series: tuple[pl.DataFrame, pl.DataFrame], day: dt.date) -> pl.DataFrame:
    """The `changepoints` rows of a UTC day, from `metric_series` over the day (points before it are left out: the
    read may hold the hour before, for the anomaly table's baseline); polars, numpy and ruptures alone, no store. Each
    series' robust scale (and its spread, for a change's score) is computed for the whole batch at once (one series at
    a time in numpy, it was a fifth of the change points' CPU on a day of 10,000 pods; ruptures' search is the rest).
    Short and flat series have none."""
    names, points = series
    row_of = dict(zip(names["sid"].to_list(), range(len(names))))
    points = points.filter(pl.col("ts") >= dt.datetime.combine(day, dt.time()))
    v = pl.col("value")
    stats = points.group_by("sid", maintain_order=True).agg(
        n=pl.len(), median=v.median(), mad=(v - v.median()).abs().median(), std=v.std(ddof=0)
    ).with_columns(end=pl.col("n").cum_sum(), scale=pl.when(pl.col("mad") > 0).then(1.4826 * pl.col("mad"))
                   .otherwise(pl.col("std")))
    values, ts = points["value"].to_numpy(), points["ts"]
    rows = []
    candidates = list(stats.filter((pl.col("n") >= MIN_POINTS) & (pl.col("scale") > 0))
                    .select("sid", "n", "median", "scale", "std", "end").iter_rows())
    found = changepoints([(values[end - n:end] - median) / scale for _, n, median, scale, _, end in candidates])
    for (sid, n, _, _, std, end), cuts in zip(candidates, found):
        if not cuts:
            continue
        segment = values[end - n:end]
        name = names.row(row_of[sid], named=True)
        bounds = [0, *cuts, n]
        for i, cut in enumerate(cuts):
            before = float(segment[bounds[i]:cut].mean())
            after = float(segment[cut:bounds[i + 2]].mean())
            rows.append((ts[end - n + cut], day, name["source"], name["component"], name["service"], name["metric"],
                         before, after, abs(after - before) / max(std, 1e-9)))
    return pl.DataFrame(rows, orient="row", schema=SCHEMA)


def write_changepoints(con: duckdb.DuckDBPyConnection, day: dt.date, found: list[pl.DataFrame]) -> int:
    """A day's change points, found a batch of series at a time."""
    con.execute("delete from changepoints where day = ?", [day])
    for rows in found:
        if len(rows):
            con.execute("insert into changepoints select * from rows")
    return sum(map(len, found))
