"""Change points: a level shift that starts inside the window (or just before it), sized against
the series' own noise, from the `changepoints` table (ruptures, computed per day by the ETL)."""

from __future__ import annotations

from collections import defaultdict

from . import ECHO, GAP, Item, Window, faulty_change, fmt, rows, signal_of, traffic_growth, with_traffic
from .metrics import shared

SHIFT_FULL = 6.0  # a shift of this many standard deviations of the day scores `WEIGHT`
SHIFT_MIN = 1.0
WEIGHT = 0.6  # a level shift against the whole day corroborates; alone it is weaker than a robust z


def collect(con, w: Window) -> list[Item]:
    found = rows(con, """
        select ts, source, component, metric, before, after, score as shift from changepoints
        where ts >= ? and ts <= ? and score >= ? order by ts, source, component, metric""",
                 [w.start - GAP, w.end, SHIFT_MIN])
    changes: dict[tuple, list[dict]] = defaultdict(list)
    for c in found:
        earlier = changes[c["source"], c["component"], c["metric"]]
        undone = [e for e in earlier if undoes(c, e)]
        for e in undone:  # held less than half the window, as a metric's trouble must: over before the window was
            e["brief"] = e.get("brief", False) or c["ts"] - max(e["ts"], w.start) < (w.end - w.start) / 2
        if not undone:
            earlier.append(c)
    faulty = ([c for c in cs if faulty_change(c["metric"], c["before"], c["after"])] for cs in changes.values())
    strongest = [max(cs, key=lambda c: c["shift"]) for cs in faulty if cs]
    growth = traffic_growth((c["component"], c["metric"], c["before"], c["after"]) for c in strongest)
    strongest = [c for c in strongest
                 if not with_traffic(c["metric"], c["before"], c["after"], growth.get(c["component"]))]
    return [Item(c["component"], "changepoint", WEIGHT * min(c["shift"], SHIFT_FULL) / SHIFT_FULL, c["metric"],
                 f"change point {c['metric']} of {c['component']}: {fmt(c['before'])} -> {fmt(c['after'])} "
                 f"({c['shift']:.1f} sd)", signal_of(c["metric"]),
                 bool(ECHO.search(c["metric"])) or shared(c["metric"], c["source"]), c["after"] < c["before"],
                 brief=c.get("brief", False))
            for c in sorted(strongest, key=lambda c: -c["shift"])]


def undoes(c: dict, earlier: dict) -> bool:
    """Whether change `c` brings its series back past halfway to where it was before an `earlier` change: a window
    that holds a whole short fault holds its end too, and the level's return is no change of its own (a CPU that
    rises back after its callers stopped calling is no fault)."""
    return (c["after"] - c["before"]) * (earlier["after"] - earlier["before"]) < 0 \
        and abs(c["after"] - earlier["before"]) <= abs(earlier["after"] - earlier["before"]) / 2
