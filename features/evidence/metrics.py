"""Metric anomaly: the median robust z of each series over the window (a one-minute blip ranks
low), with the median value before and during, from `metric_anomaly`."""

from __future__ import annotations

import re

from . import BASELINE, ECHO, GAP, Item, Window, faulty_direction, fmt, rows, signal_of

# A node's metric on a pod's row (Nezha writes NodeCpuUsageRate(%) beside each pod's own): it is
# shared by every pod of the node, so it says nothing of the pod itself.
NODE_METRIC = re.compile(r"^node", re.I)

import math

Z_MIN = 3.0
Z_FULL = 100.0  # a median z this high (the table's cap) scores 1; scores grow with log z


def collect(con, w: Window) -> list[Item]:
    found = rows(con, """
        with d as (select source, component, metric, median(abs(z)) as z, median(value) as during
                   from metric_anomaly where ts >= ? and ts <= ? group by all),
             b as (select source, component, metric, median(value) as before
                   from metric_anomaly where ts >= ? and ts < ? group by all)
        select d.*, b.before from d left join b using (source, component, metric)
        where d.z >= ? order by d.z desc limit 400""", [w.start, w.end, w.start - BASELINE, w.start - GAP, Z_MIN])
    return [Item(m["component"], "metric", math.log(min(m["z"], Z_FULL) / Z_MIN) / math.log(Z_FULL / Z_MIN), m["metric"],
                 f"metric {m['metric']} of {m['component']}: {fmt(m['before'])} -> {fmt(m['during'])} (z {m['z']:.0f})",
                 signal_of(m["metric"]), bool(ECHO.search(m["metric"])) or shared(m["metric"], m["source"]),
                 (m["during"] or 0) < (m["before"] or 0))
            for m in found if faulty_direction(m["metric"], m["before"], m["during"])]


def shared(metric: str, source: str) -> bool:
    return bool(NODE_METRIC.search(metric)) and "node" not in source
