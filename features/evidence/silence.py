"""Silence: what stops. A metric series that had values before and falls to zero or stops in the
window; a component that logged before and logs nothing; a pod that served spans and serves none.
A failed pod, a dead TiDB part or a killed process says more by what stops than by what rises."""

from __future__ import annotations

import datetime as dt
import math

from . import BASELINE, GAP, SIGNALS, Item, Window, faulty_change, fmt, rows, signal_of

# Lines or spans the window would hold at the rate before: fewer, and none may be chance (Poisson: e^-10).
MIN_EXPECTED = 10.0
PRESENT = 0.9  # a series must have values in this share of the baseline's minutes for its stop to count
LEAST_MINUTES = 5  # the baseline's minutes the store has (in the hour before) must be this many at least
ZEROS = 0.1  # and be zero in at most this share of them
# A process count or an up flag says the process died in any minute it reads 0, however short the window's part:
# a killed pod is back within a minute or two, and the median of a longer window would not see it go.
DIES = {"processes", "up"}
# A process that died and is back within this long of the window's start was started again (a pod killed and
# replaced, a container killed for its memory), not gone: Kubernetes restarts a container at once. A pod kill's
# window is a moment (the challenge gives it one second), so the minutes after it say whether the pod came back.
RESTART = dt.timedelta(minutes=5)
DEAD = "(?i)" + "|".join(f"(?:{pattern.pattern})" for pattern, name in SIGNALS if name in DIES)


def collect(con, w: Window) -> list[Item]:
    items = []
    lo, hi = w.start - BASELINE, w.start - GAP
    # The baseline's minutes the store has (a store may begin just before the window: a gap in collection says
    # nothing of the system), newest first.
    had = [m for m, in con.execute("select distinct date_trunc('minute', ts) as m from anomaly_points "
                                   "where ts >= ? and ts < ? order by m desc", [lo, hi]).fetchall()]
    # A series by its number (`metric_anomaly`'s own: named once grouped). Only series that may have stopped are read
    # over the whole baseline: a sieve on its last minutes, as many as a series that counts may miss or read zero in,
    # and one more (of a large system's series, most go on, or are errors that are mostly zero). Points come at a
    # steady rate, so such a series has points there, and no more of them are zero than ZEROS of the baseline's
    # minutes' worth, against the fewest minutes it may have there.
    last = math.ceil((1 - PRESENT + ZEROS) * len(had)) + 1
    share = ZEROS * len(had) / max(last - (1 - PRESENT) * len(had), 1)
    for m in rows(con, """
            with d as (select sid, median(value) filter (where ts <= $end) as during,
                              min(value) filter (where ts <= $end) as least, arg_max(value, ts) as last
                       from anomaly_points where ts >= $start and ts <= $until group by sid
                       having count(*) filter (where ts <= $end) > 0),
                 stopped as (select sid from anomaly_points
                             anti join (select sid from d join series using (sid) where during <> 0
                                        and (least <> 0 or not regexp_matches(metric, $dead)))
                             using (sid)  -- the rest goes on
                             where ts >= $since and ts < $hi group by sid
                             having count(*) filter (where value = 0) <= $share * count(*)),
                 b as (select sid, median(value) as before from anomaly_points
                       where ts >= $lo and ts < $hi and sid in (select sid from stopped)  -- scanned first
                       group by sid
                       having count(*) filter (where value = 0) <= $zeros * count(*)  -- a sieve for the quantile's cost
                       and quantile_disc(abs(value), $zeros) > 0  -- hardly ever zero before
                       and count(distinct date_trunc('minute', ts)) >= $present * $had)  -- and hardly ever missing
            select s.component, s.metric, b.before, d.during, d.least, d.last
            from b join series s using (sid) left join d using (sid)
            where exists (select 1 from d)""",
                  {"start": w.start, "end": w.end, "until": max(w.end, w.start + RESTART), "lo": lo, "hi": hi,
                   "since": had[min(last, len(had)) - 1] if had else hi, "share": share, "had": len(had),
                   "present": PRESENT, "zeros": ZEROS, "dead": DEAD}) if len(had) >= LEAST_MINUTES else []:
        measures = signal_of(m["metric"])
        if m["during"] and not (measures in DIES and m["least"] == 0):
            continue  # a minute of a series that goes on reads 0: only a process count says more than noise
        during = "no values" if m["during"] is None else "0"
        # A series that stops reporting, or a live process's memory, process count or up flag at 0, says the
        # process is gone: silence. Activity at 0 (requests, CPU, syscalls, bytes) while values still come, or
        # a latency that stops (it has no value without calls), says nobody calls: traffic, which falls down
        # the call graph from a failing caller.
        if measures == "errors" and not faulty_change(m["metric"], m["before"], m["during"]):
            continue  # errors that stop while the series goes on: a recovery
        gone = (m["during"] is None and measures != "latency") or measures in ("memory", "processes", "up")
        items.append(Item(m["component"], "silence", 1.0, m["metric"],
                          f"silence {m['metric']} of {m['component']}: {fmt(m['before'])} -> {during}",
                          "silence" if gone else "traffic", back=measures in DIES and bool(m["last"])))
    min_rate = MIN_EXPECTED / max((w.end - w.start).total_seconds() / 60, 1)
    # From the minute tables: the lines a component logged, the spans a pod served, steady over the whole hour
    # before: lines and spans come a request's at a time, and a dump may keep them only around incidents (the
    # Nezha days), where a few minutes of another incident's are no steady state.
    minutes = (BASELINE - GAP).total_seconds() / 60
    for table, who, count, what in (("log_template_minute", "component", "lines", "log lines"),
                                    ("span_self_minute", "pod", "spans", "spans")):
        for r in rows(con, f"""
                with b as (select {who} as component, sum({count}) / ? as rate from {table}
                           where minute >= ? and minute < ? and {who} is not null group by all
                           having sum({count}) / ? >= ? and count(distinct minute) >= ?),
                     d as (select distinct {who} as component from {table} where minute >= ? and minute <= ?)
                select b.* from b anti join d using (component)
                where exists (select 1 from {table} where minute >= ? and minute <= ?)""",
                      [minutes, w.start - BASELINE, w.start - GAP, minutes, min_rate, PRESENT * minutes,
                       w.start, w.end, w.start, w.end]):
            items.append(Item(r["component"], "silence", 0.8, what,
                              f"silence: {r['component']} wrote {r['rate']:.1f} {what}/min before, none in the window",
                              "silence"))
    return items
