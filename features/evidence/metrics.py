"""Metric anomaly: the median robust z of each series over the window (a one-minute blip ranks
low), with the median value before and during, from `metric_anomaly`; a count's z no more than its
Poisson deviations; an error count that grew with its component's traffic is none."""

from __future__ import annotations

import datetime as dt
import math
import re

from . import (BASELINE, ECHO, GAP, Item, Window, faulty_change, fmt, kept, rows, signal_of, traffic_growth,
               with_traffic)

# A node's metric on a pod's row (Nezha writes NodeCpuUsageRate(%) beside each pod's own): it is
# shared by every pod of the node, so it says nothing of the pod itself.
NODE_METRIC = re.compile(r"^node", re.I)

Z_MIN = 3.0
DAY_AROUND = dt.timedelta(hours=12)  # a window's day, for what recurs; the hour before and after are the fault's
Z_FULL = 100.0  # a median z this high (the table's cap) scores 1; scores grow with log z

# A percentage of a bounded resource (CPU, memory, disk): the share of its headroom a rise took is an effect
# size with no scale to fit, and saturation is a fault however smooth the series (its z is capped by the
# table's scale floor).
PERCENT = re.compile(r"%|percent|usage_rate|util", re.I)
BOUNDED = {"cpu", "memory", "disk"}
COUNTED = {"errors", "traffic"}  # signals whose whole-number series count events: at least Poisson noise


def collect(con, w: Window) -> list[Item]:
    # What recurs is routine: a series that moved as far as in the window at other hours of its day (a change
    # point past halfway from its level before to the window's, the same way) counts those hours. A change point's
    # own family needs none of this: its shift is sized against the day already.
    lo, hi, own_lo, own_hi = w.start - DAY_AROUND, w.end + DAY_AROUND, w.start - BASELINE, w.end + BASELINE
    found = rows(con, """
        with -- a median past Z_MIN needs half its values past it: a sieve that sorts nothing (many series); the
             -- points by their series' number (`metric_anomaly`'s own), named once grouped
             moved as (select sid from anomaly_points where ts >= $start and ts <= $end
                       group by sid having count(*) filter (where abs(z) >= $z) * 2 >= count(z)),
             -- `sid in`: a filter the scan applies before it reads a row's other columns
             d as (select s.source, s.component, s.metric, p.* from series s join (
                       select sid, median(abs(z)) as z, median(value) as during from anomaly_points
                       where ts >= $start and ts <= $end and sid in (select sid from moved)
                       group by sid having median(abs(z)) >= $z) p using (sid)
                   order by z desc, source, component, metric limit 400),  -- ties: the same every run
             b as (select sid, median(value) as before, avg(value) as mean,
                          bool_and(value >= 0 and value = round(value)) as whole
                   from anomaly_points where ts >= $own_lo and ts < $gap and sid in (select sid from d) group by sid),
             m as (select d.* exclude (sid), b.before, b.mean, b.whole from d left join b using (sid)),
             r as (select m.source, m.component, m.metric, count(distinct date_trunc('hour', c.ts)) as hours
                   from m join changepoints c using (source, component, metric)
                   where c.ts >= $day_lo and c.ts <= $day_hi and (c.ts < $own_lo or c.ts > $own_hi)
                     and ((m.during > m.before and c.after > c.before and c.after >= (m.before + m.during) / 2)
                       or (m.during < m.before and c.after < c.before and c.after <= (m.before + m.during) / 2))
                   group by all)
        select m.*, coalesce(r.hours, 0) as hours from m left join r using (source, component, metric)
        order by m.z desc""", {"start": w.start, "end": w.end, "z": Z_MIN, "gap": w.start - GAP,
                                "day_lo": lo, "day_hi": hi, "own_lo": own_lo, "own_hi": own_hi})
    other = other_hours(con, lo, hi, own_lo, own_hi)
    found = [m | {"z": min(m["z"], chance_z(m))} for m in found]
    growth = traffic_growth((m["component"], m["metric"], m["before"], m["during"]) for m in found)
    return [item(m, min(1.0, m["hours"] / other) if other >= 1 else 0.0) for m in found
            if m["z"] >= Z_MIN and faulty_change(m["metric"], m["before"], m["during"])
            and not with_traffic(m["metric"], m["before"], m["during"], growth.get(m["component"]))]


def chance_z(m: dict) -> float:
    """How far a count moved in the Poisson deviations of its mean before (errors or calls counted a minute, whole
    numbers before): a count is at least that noisy however steady it looked. Sparse errors with a mean of 0.3
    before that read 1 in most of the window's minutes (the load tripled) are z 10-20 on the robust scale's floor,
    and one deviation here."""
    if not m["whole"] or m["during"] is None or not m["mean"] or signal_of(m["metric"]) not in COUNTED:
        return math.inf
    return abs(m["during"] - m["mean"]) / math.sqrt(m["mean"])


def other_hours(con, lo, hi, own_lo, own_hi) -> float:
    """Hours of [lo, hi] the store holds outside [own_lo, own_hi]."""
    first, last = kept(con, ("metric_anomaly span",),
                       lambda: con.execute("select min(ts), max(ts) from anomaly_points").fetchone())
    if first is None:
        return 0.0
    first, last = max(first, lo), min(last, hi)
    return max(0.0, ((min(own_lo, last) - first) + (last - max(own_hi, first))).total_seconds() / 3600)


def item(m: dict, usual: float = 0.0) -> Item:
    """`usual`: the share of the day's other hours in which the series moved as far (a routine's weighs less)."""
    z_score = math.log(min(m["z"], Z_FULL) / Z_MIN) / math.log(Z_FULL / Z_MIN)
    taken = headroom_taken(m["metric"], m["before"], m["during"])
    size = f"z {m['z']:.0f}" + (f", {taken:.0%} of its headroom" if taken > z_score else "")
    size += f", as in {usual:.0%} of its day's other hours" if usual else ""
    return Item(m["component"], "metric", max(z_score, taken) * (1 - usual), m["metric"],
                f"metric {m['metric']} of {m['component']}: {fmt(m['before'])} -> {fmt(m['during'])} ({size})",
                signal_of(m["metric"]), bool(ECHO.search(m["metric"])) or shared(m["metric"], m["source"]),
                (m["during"] or 0) < (m["before"] or 0))


def shared(metric: str, source: str) -> bool:
    return bool(NODE_METRIC.search(metric)) and "node" not in source


def headroom_taken(metric: str, before: float | None, during: float | None) -> float:
    """The share of a percentage's headroom that its rise took (0 for other metrics)."""
    if before is None or during is None or not 0 <= before < 100 or signal_of(metric) not in BOUNDED \
            or not PERCENT.search(metric):
        return 0.0
    return max(0.0, min(1.0, (during - before) / (100 - before)))
