"""Does a labelled dump carry the signatures its ground truth names?

For each case of a loaded dump:
- each key metric (`key_metrics`) that the store has at all must move on the instance in the
  window: on the instance's own series (a service covers its pods; a link, either end; a network
  fault on a whole service, the ends of its links: its callers, who wait on it), the
  window's median must sit at least `SPREADS` robust spreads from the median of the hour before;
- each log observation (`key_observations` of type log) must be found: all its keywords in one
  log line of the window; a code path (Nezha's `A#12_B#34`: position A followed by position B in a span) must
  have changed: the share of A's follow-ups that are B moved in the instance's spans against the hour before,
  beyond what chance allows (a binomial test);
- each trace observation must be found: a call touching the named services whose p95 or errors
  rose in the window (the p95 of its pods' calls, minute by minute, averaged over the calls: one slow
  pod of three shows, and a sparse sample is not left to its median minute).
The result is a share per fault type, so that a simulator's faults can be held to the real
ground truth, and the simulated figures of the ranking and the agents mean something.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections import defaultdict
from pathlib import Path

import duckdb
from scipy.stats import binomtest

from etl import store
from etl.loglines import POSITION

SPREADS = 3.0
BEFORE = dt.timedelta(minutes=60)
GAP = dt.timedelta(minutes=2)
PATH = re.compile(rf"^({POSITION})_({POSITION})$")  # a code path's label: position A followed by position B
ALPHA = 1e-3  # a path's share moved: this unlikely under the hour before's


def _instances(row: dict) -> list[str]:
    instance = row["instance"]
    return list(instance) if isinstance(instance, list) else [instance]


def _time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", ""))


def metric_moves(con: duckdb.DuckDBPyConnection, metric: str, names: list[str], start, end) -> bool | None:
    """Whether `metric` moved on any of `names` (or their pods) in the window; None if the store lacks it there."""
    rows = con.execute("""
        with s as (select component, ts, value from metric_points
                   where metric = $metric and ts >= $lo and ts <= $end
                   and (component in (select unnest($names)) or service in (select unnest($names)))),
             b as (select component, median(value) as m from s where ts < $before group by all),
             spread as (select component, median(abs(value - m)) * 1.4826 as mad from s join b using (component)
                        where ts < $before group by all),
             d as (select component, median(value) as v from s where ts >= $start group by all)
        select d.v, b.m, spread.mad from d join b using (component) join spread using (component)""",
                       {"metric": metric, "names": names, "lo": start - BEFORE, "before": start - GAP,
                        "start": start, "end": end}).fetchall()
    if not rows:
        return None
    return any(abs(v - m) >= SPREADS * max(mad, 1e-3 * abs(m), 1e-9) for v, m, mad in rows)


def log_found(con: duckdb.DuckDBPyConnection, keywords: list[str], start, end) -> bool:
    where = " and ".join("message ilike ?" for _ in keywords)
    params = [start, end, *[f"%{k}%" for k in keywords]]
    return bool(con.execute(f"select count(*) from log_lines where ts >= ? and ts <= ? and {where}",
                            params).fetchall()[0][0])


def path_changed(con: duckdb.DuckDBPyConnection, names: list[str], a: str, b: str, start, end) -> bool:
    rows = dict(con.execute("""
        select minute >= $start, [coalesce(sum(pairs) filter (where b = $b), 0), sum(pairs)] from event_pair_minute
        where a = $a and service in (select unnest($names)) and minute >= $lo and minute <= $end
        and (minute < $before or minute >= $start) group by all""",
                            {"a": a, "b": b, "names": names, "lo": start - BEFORE, "before": start - GAP,
                             "start": start, "end": end}).fetchall())
    if True not in rows or False not in rows:
        return False
    (k, n), (kb, nb) = rows[True], rows[False]
    return bool(binomtest(int(k), int(n), (kb + 1) / (nb + 2)).pvalue < ALPHA)  # Laplace: a follow-up seen every time


def trace_found(con: duckdb.DuckDBPyConnection, services: list[str], start, end) -> bool:
    rows = con.execute("""
        with e as (select minute >= $start as during, caller, callee, sum(calls) as calls, sum(errors) as errors,
                          sum(p95_us * calls) / sum(calls) as p95
                   from trace_edge_minute where minute >= $lo and minute <= $end
                   and (caller in (select unnest($names)) or callee in (select unnest($names))) group by all)
        select d.errors / d.calls - coalesce(b.errors / b.calls, 0), d.p95 / greatest(coalesce(b.p95, 1), 1)
        from e d left join e b on b.caller = d.caller and b.callee = d.callee and not b.during
        where d.during""", {"names": services, "lo": start - BEFORE, "start": start, "end": end}).fetchall()
    return any(err > 0.01 or ratio >= 1.5 for err, ratio in rows)


def callers(con: duckdb.DuckDBPyConnection, names: list[str], start, end) -> list[str]:
    """The services whose traced calls reached any of `names` in the window."""
    return [r[0] for r in con.execute(
        "select distinct caller from trace_edge_minute where minute >= ? and minute <= ? and callee in "
        "(select unnest(?)) and caller not in (select unnest(?))", [start, end, names, names]).fetchall()]


def check(db: Path, truth: Path) -> dict:
    """Per fault type: key-metric checks that moved, and observations found, each over those made."""
    con = store.connect(db, read_only=True)
    known = {r[0] for r in con.execute("select distinct metric from metric_points").fetchall()}
    per: dict[str, dict[str, list[int]]] = defaultdict(lambda: {"metrics": [0, 0], "observations": [0, 0]})
    misses: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    try:
        for row in map(json.loads, Path(truth).read_text().splitlines()):
            kind, names = row["fault_type"], _instances(row)
            start = _time(row["start_time"]).replace(second=0)  # whole minutes, at least one, as metrics come
            end = max(_time(row["end_time"]), start + dt.timedelta(minutes=1))
            if row.get("fault_category") == "network attack" and not row.get("source"):
                names = names + callers(con, names, start, end)
            for metric in dict.fromkeys(row.get("key_metrics", [])):
                if metric not in known:
                    continue
                moved = metric_moves(con, metric, names, start, end)
                per[kind]["metrics"][1] += 1
                per[kind]["metrics"][0] += bool(moved)
                if not moved:
                    misses[kind][metric] += 1
            for obs in row.get("key_observations", []):
                if obs.get("type") == "log":
                    path = PATH.match(obs["keyword"][0]) if len(obs["keyword"]) == 1 else None
                    found = (path_changed(con, names, *path.groups(), start, end) if path
                             else log_found(con, obs["keyword"], start, end))
                elif obs.get("type") == "trace":
                    found = trace_found(con, obs["keyword"], start, end)
                else:
                    continue
                per[kind]["observations"][1] += 1
                per[kind]["observations"][0] += found
                if not found:
                    misses[kind][f"{obs['type']}: {' '.join(obs['keyword'])}"] += 1
    finally:
        con.close()

    def share(hit_total):
        hit, total = hit_total
        return round(hit / total, 3) if total else None

    result = {kind: {"metrics": share(v["metrics"]), "metric_checks": v["metrics"][1],
                     "observations": share(v["observations"]), "observation_checks": v["observations"][1],
                     "misses": dict(sorted(misses[kind].items(), key=lambda kv: -kv[1])[:4])}
              for kind, v in sorted(per.items())}
    totals = [sum(v[part][i] for v in per.values()) for part in ("metrics", "observations") for i in (0, 1)]
    result["all"] = {"metrics": share(totals[0:2]), "metric_checks": totals[1],
                     "observations": share(totals[2:4]), "observation_checks": totals[3], "misses": {}}
    return result
