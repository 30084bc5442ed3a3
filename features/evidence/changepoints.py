"""Change points: a level shift that starts inside the window (or just before it), sized against
the series' own noise, from the `changepoints` table (ruptures, computed per day by the ETL)."""

from __future__ import annotations

from . import ECHO, GAP, Item, Window, faulty_change, fmt, rows, signal_of
from .metrics import shared

SHIFT_FULL = 6.0  # a shift of this many standard deviations of the day scores `WEIGHT`
SHIFT_MIN = 1.0
WEIGHT = 0.6  # a level shift against the whole day corroborates; alone it is weaker than a robust z


def collect(con, w: Window) -> list[Item]:
    found = rows(con, """
        select source, component, metric, arg_max(before, score) as before, arg_max(after, score) as after, max(score) as shift
        from changepoints where ts >= ? and ts <= ? and score >= ? group by all order by shift desc limit 300""",
                 [w.start - GAP, w.end, SHIFT_MIN])
    return [Item(c["component"], "changepoint", WEIGHT * min(c["shift"], SHIFT_FULL) / SHIFT_FULL, c["metric"],
                 f"change point {c['metric']} of {c['component']}: {fmt(c['before'])} -> {fmt(c['after'])} "
                 f"({c['shift']:.1f} sd)", signal_of(c["metric"]),
                 bool(ECHO.search(c["metric"])) or shared(c["metric"], c["source"]), c["after"] < c["before"])
            for c in found if faulty_change(c["metric"], c["before"], c["after"])]
