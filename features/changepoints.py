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

PENALTY_PER_LOG_N = 10.0
MIN_SIZE = 3
MIN_POINTS = 30


def changepoints(signal: np.ndarray) -> list[int]:
    """Indices where a new segment of a standardised series starts."""
    pen = PENALTY_PER_LOG_N * np.log(len(signal))
    return [] if _few_spikes(signal, pen) or _none(signal, pen) else _search(signal, pen, MIN_SIZE)


def _search(signal: np.ndarray, pen: float, min_size: int) -> list[int]:
    """Where ruptures' optimal search (a linear kernel: squares about the segments' means) cuts the signal."""
    import ruptures  # here: its half second of scipy is not the job's to wait for where no search runs (its coordinator)
    algo = ruptures.KernelCPD(kernel="linear", min_size=min_size).fit(signal.reshape(-1, 1))
    return [int(b) for b in algo.predict(pen=pen)[:-1]]


BIN = 5  # points a bin of the screen below; it decides how fast, never what is found (chosen, not fitted)


def _none(signal: np.ndarray, pen: float) -> bool:
    """Whether the search (a cost for every pair of points: most of the change points' time) is sure to find no change
    point, proven by the search of the series' bin means (a 25th of the pairs). The search reports k cuts only where
    they save more than k pen of squares about the segments' means (their gain). Cutting also at both bounds of each
    cut's bin loses no gain; undoing the cuts within bins then loses at most what a bin holds about its own mean
    (`worst` at most, each); what is left cuts at bin bounds only, at most 2k of them, and gains `BIN` times what those
    cuts gain on the bin means. So where no m cuts of the bin means gain more than m (pen - worst) / (2 BIN) (their own
    search with that penalty finds none), the series has none. Quiet series are dropped here; series with a change,
    or with a bin that holds `pen` or more (an error count's spike: `_few_spikes`), are searched."""
    if len(signal) % BIN:
        return False
    bins = signal.reshape(-1, BIN)
    means = bins.mean(axis=1)
    worst = float(((bins - means[:, None]) ** 2).sum(axis=1).max())
    if worst >= pen:
        return False
    return not _search(means, (pen - worst) / (2 * BIN), 1)


SPIKES = 64  # the most points off zero `_few_spikes` bounds; it decides how fast, never what is found (chosen)


def _few_spikes(signal: np.ndarray, pen: float) -> bool:
    """Whether a series that is zero but for a few points (a count of errors: its median and the most of its points
    the same) is sure to have no change point, proven from where they are. Cuts into J segments gain at most the
    sum over them of (their sum)^2 / their length (less the series' own, which is not negative). Where every segment
    of `MIN_SIZE` or more points gains at most `pen` by that measure and the first and last segments at most `pen` / 2,
    J segments gain at most (J - 1) pen, what their J - 1 cuts cost. The first and last segments are measured exactly
    (prefix sums); any other by the points off zero it holds, from the i-th to the j-th: at most (the sum of their
    sizes)^2 over their span (or `MIN_SIZE`). The bin screen (`_none`) cannot tell such a series: a spike's bin holds
    more than `pen` about its mean."""
    off = np.flatnonzero(signal)
    n = len(signal)
    if len(off) > SPIKES or n < 2 * MIN_SIZE:
        return False
    sums = np.cumsum(signal)
    ends = np.arange(MIN_SIZE, n - MIN_SIZE + 1)  # a first segment's ends, and the last segment's starts
    first = sums[ends - 1] ** 2 / ends
    last = (sums[-1] - sums[ends - 1]) ** 2 / (n - ends)
    if max(first.max(), last.max()) > pen / 2:
        return False
    sizes = np.concatenate([[0.0], np.cumsum(np.abs(signal[off]))])
    i, j = np.triu_indices(len(off))
    return bool(((sizes[j + 1] - sizes[i]) ** 2 / np.maximum(MIN_SIZE, off[j] - off[i] + 1)).max(initial=0.0) <= pen)


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
    first = names["sid"][0] if len(names) else 1  # a batch's series, numbered on from the batches before it
    points = points.filter(pl.col("ts") >= dt.datetime.combine(day, dt.time()))
    v = pl.col("value")
    stats = points.group_by("sid", maintain_order=True).agg(
        n=pl.len(), median=v.median(), mad=(v - v.median()).abs().median(), std=v.std(ddof=0)
    ).with_columns(end=pl.col("n").cum_sum(), scale=pl.when(pl.col("mad") > 0).then(1.4826 * pl.col("mad"))
                   .otherwise(pl.col("std")))
    values, ts = points["value"].to_numpy(), points["ts"]
    rows = []
    searched = stats.filter((pl.col("n") >= MIN_POINTS) & (pl.col("scale") > 0))
    for sid, n, median, scale, std, end in searched.select("sid", "n", "median", "scale", "std", "end").iter_rows():
        segment = values[end - n:end]
        cuts = changepoints((segment - median) / scale)
        if not cuts:
            continue
        name = names.row(sid - first, named=True)
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
