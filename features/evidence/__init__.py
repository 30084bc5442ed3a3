"""Evidence families: each module turns the store and a case window into evidence items.

One contract: `collect(con, window) -> list[Item]`, every item naming the component as the
store names it (pod, service, node, TiDB part), a score in 0..1, the key metric or log
keyword verbatim, one line of text, the signal (what moved) and whether the item is an
echo (measured on a caller's side, so it says more about a callee than about the component);
where an anomaly lies between two components (a slow link), how much of it points at this one.
Adding a family is adding a module here and its name to the list in `collect`.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

import duckdb

GAP = dt.timedelta(minutes=2)  # minutes just before a window are neither baseline nor window
BASELINE = dt.timedelta(minutes=60)
# Traces may be kept only around incidents (a Nezha dump keeps three minutes a fault): their baseline is
# every other traced minute within this reach, before and after the window, and its median resists the
# other incidents in it.
TRACE_REACH = dt.timedelta(hours=6)


MINUTE = dt.timedelta(minutes=1)
T = TypeVar("T")


@dataclass(frozen=True)
class Window:
    start: dt.datetime  # naive UTC, as in the store
    end: dt.datetime

    @classmethod
    def around(cls, start: dt.datetime, end: dt.datetime) -> "Window":
        """Whole minutes, at least one: a window of seconds holds no minute-resolution point otherwise. From the
        minute the anomaly began in (its onset shows there) to the last minute mostly inside it (a minute's figures
        stand for all of it, and the minutes after an anomaly hold what came next)."""
        first = start.replace(second=0, microsecond=0)
        return cls(first, max(end - MINUTE / 2, first + MINUTE))


@dataclass
class Item:
    component: str
    kind: str  # the family: metric | changepoint | silence | log | trace | event | state (the cluster's objects)
    score: float  # 0..1
    key: str  # key metric or log keyword, verbatim
    text: str
    signal: str  # what moved: cpu, memory, latency, errors, traffic, network, disk, self time, link, silence, log,
    # path (the events that follow one another in a span)
    echo: bool = False
    fell: bool = False  # the value fell (a restarted container's memory, a dead process count)
    share: float = 1.0  # how much of the anomaly points at this component (a slow link, at one of its ends)
    peer: str | None = None  # a slow link's other end
    line: str = ""  # a log item's template with its placeholders filled from a line of it, whole
    logged: bool = False  # an event item's pair is of two log lines (read in the logs, not the spans)
    back: bool = False  # a silence of a process that died in the window and was back before its end: a restart
    brief: bool = False  # a change undone before it held half the window (a window's trouble holds half of it)

    @property
    def blame(self) -> float:
        """What the item says against this component: its score, times the share that points at it."""
        return self.score * self.share


# What a metric measures, from its name alone (any system): the first pattern that matches.
SIGNALS = (
    (re.compile(r"process", re.I), "processes"),
    (re.compile(r"cpu", re.I), "cpu"),
    (re.compile(r"mem", re.I), "memory"),
    (re.compile(r"filesystem|disk|io_util|syscall|raft|region|stall|compaction", re.I), "disk"),
    (re.compile(r"network|receive|transmit|packet|tcp", re.I), "network"),
    (re.compile(r"error|fail|success", re.I), "errors"),
    (re.compile(r"(^|_)lag", re.I), "lag"),  # the messages waiting for a consumer
    (re.compile(r"rrt|latency|duration|timeout", re.I), "latency"),
    (re.compile(r"request|response|qps|ops|workload|count|messages", re.I), "traffic"),
    (re.compile(r"up$|uptime|is_up", re.I), "up"),
)
# Measured on the caller's side of a call: the callee's trouble shows here too.
ECHO = re.compile(r"client", re.I)


# Signals whose fall is no fault (less CPU, faster answers); memory and processes fall when a container
# restarts, traffic and network fall when calls stop.
RISING = {"cpu", "disk", "errors", "latency", "lag"}


def signal_of(metric: str) -> str:
    return next((name for pattern, name in SIGNALS if pattern.search(metric)), "other")


# A latency that grew by less than this factor is noise whatever its z or its shift in deviations (a smooth
# series makes a small rise many of them); the trace family's floor too.
MIN_RATIO = 1.5


# What is left or what went right (free bytes, available memory, a success rate): its fall is the fault's way.
LEFT = re.compile(r"success|avail|free", re.I)


def faulty_change(metric: str, before: float | None, during: float | None) -> bool:
    """Whether a change is a fault's way: rising signals rise (what is left of them falls), and latency by
    MIN_RATIO at least."""
    signal = signal_of(metric)
    if signal not in RISING or before is None or during is None:
        return True
    if LEFT.search(metric):
        return during < before
    return during > before * (MIN_RATIO if signal == "latency" else 1)


ERROR_RATIO = 2.0  # an error count that grew this much faster than its traffic failed more; slower, it kept its ratio


def traffic_growth(changes: Iterable[tuple[str, str, float | None, float | None]]) -> dict[str, float]:
    """How much each component's traffic grew: the most any of its counts of calls rose by, of the changes
    (component, metric, before, after)."""
    growth: dict[str, float] = {}
    for component, metric, before, after in changes:
        if signal_of(metric) == "traffic" and before and after and after > before:
            growth[component] = max(growth.get(component, 0.0), after / before)
    return growth


def with_traffic(metric: str, before: float | None, after: float | None, growth: float | None) -> bool:
    """Whether an error count grew with its component's traffic (`growth`), no more than ERROR_RATIO times faster:
    its share of failing calls held, so more load, not more failing (a flood of users raises every count alike)."""
    if growth is None or signal_of(metric) != "errors" or not before or after is None or after <= before:
        return False
    return after / before <= ERROR_RATIO * growth


def store_file(con: duckdb.DuckDBPyConnection) -> str:
    """The file of the store a connection reads: what caches of a store's figures are kept by."""
    return con.execute("select file from pragma_database_list where name = current_database()").fetchone()[0]


_kept: dict[tuple, object] = {}  # figures of stores, by file, load and what (`kept`): the newest KEPT
KEPT = 32  # a day's hours and a few: the pods and nodes of an hour of 10,000 pods hold about 3 MB


def kept(con: duckdb.DuckDBPyConnection, what: tuple, compute: Callable[[], T]) -> T:
    """`compute()`, once per store file, load and `what` in this process: a figure the windows of a scan share.
    A store loaded again computes it again."""
    key = (store_file(con), con.execute("select max(loaded_at) from manifest").fetchone()[0], *what)
    if key not in _kept:
        _kept[key] = compute()
        while len(_kept) > KEPT:
            _kept.pop(next(iter(_kept)), None)
    return _kept[key]


def forget() -> None:
    """Drop the figures this process keeps (a benchmark that times reads as a new process meets them)."""
    _kept.clear()


def rows(con: duckdb.DuckDBPyConnection, sql: str, params: list | dict) -> list[dict]:
    cur = con.execute(sql, params)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]


def fmt(value: float | None) -> str:
    if value is None:
        return "n/a"
    a = abs(value)
    if a >= 1e9:
        return f"{value / 1e9:.2f}G"
    if a >= 1e6:
        return f"{value / 1e6:.1f}M"
    if a >= 1e3:
        return f"{value / 1e3:.1f}k"
    if a >= 10 or a == 0:
        return f"{value:.0f}"
    return f"{value:.3g}"


def flat(text: str, limit: int = 140) -> str:
    """Telemetry text for a prompt: one line, no double quotes, cut."""
    return " ".join(str(text).replace('"', "'").split())[:limit]


def collect(con: duckdb.DuckDBPyConnection, window: Window) -> list[Item]:
    from . import changepoints, events, kubernetes, logs, metrics, silence, traces

    return [item for family in (metrics, changepoints, silence, logs, traces, events, kubernetes)
            for item in family.collect(con, window)]
