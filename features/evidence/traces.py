"""Traces, from `span_self_minute` and `trace_edge_minute`:
- self time: a service whose spans, less their children, got slower (its own CPU, GC, code);
- links: the gap of a call (caller span less callee span) that grew, given to the end that all
  of a component's anomalous links share: a network fault on a pod slows every link of the pod,
  while its callers each have one slow link among healthy ones;
- errors: calls into a service that fail, errors that start in a service (no failing child),
  and calls that get no answer at all.
The baseline is the median minute of the other traced minutes within `TRACE_REACH`.
"""

from __future__ import annotations

import math
from collections import defaultdict

from . import GAP, TRACE_REACH, Item, Window, fmt, rows

RATIO_FULL = 100.0  # a latency ratio this high scores 1; scores grow with the ratio's logarithm
MIN_RATIO = 1.5
MIN_CALLS = 3
MIN_DELTA_US = 2000  # a latency rise below this is noise whatever the ratio
ERROR_RISE = 0.05


def _ratio_score(during: float, before: float) -> float:
    ratio = during / max(before, 1.0)
    if ratio < MIN_RATIO or during - before < MIN_DELTA_US:
        return 0.0
    return min(1.0, math.log(ratio) / math.log(RATIO_FULL))


def _params(w: Window) -> dict:
    start = w.start
    return {"start": start, "end": w.end, "lo": w.start - TRACE_REACH, "hi": w.end + TRACE_REACH,
            "before": start - GAP, "after": w.end + GAP, "min_calls": MIN_CALLS}


# The window's minutes, and the baseline's: every other minute within reach, a gap away from the window.
MINUTES = """minute >= $lo and minute <= $hi
             and (minute between $start and $end or minute < $before or minute > $after)"""
DURING = "minute between $start and $end"


def collect(con, w: Window) -> list[Item]:
    items, selves = [], []
    for s in rows(con, f"""
            with m as (select {DURING} as during, service, sum(spans) as spans, sum(origin_errors) as origin,
                              max(self_p95_us) as self_p95
                       from span_self_minute where {MINUTES} group by minute, service)
            select service, sum(spans) filter (where during) as spans,
                   median(self_p95) filter (where during) as during, median(self_p95) filter (where not during) as before,
                   sum(origin) filter (where during) / sum(spans) filter (where during) as err,
                   coalesce(sum(origin) filter (where not during) / sum(spans) filter (where not during), 0) as err_before
            from m group by service having sum(spans) filter (where during) >= $min_calls""", _params(w)):
        if s["before"] is not None:
            score = _ratio_score(s["during"], s["before"])
            if score:
                selves.append((score, s))
        if s["err"] - s["err_before"] >= ERROR_RISE:
            items.append(Item(s["service"], "trace", min(1.0, s["err"] - s["err_before"]) ** 0.5, "error spans",
                              f"trace errors start in {s['service']}: {s['err_before']:.0%} -> {s['err']:.0%} of spans",
                              "error origin"))
    edges = rows(con, f"""
        with e as (select {DURING} as during, minute, caller, callee, sum(calls) as calls, sum(errors) as errors,
                          max(gap_p95_us) as gap, max(p95_us) as p95, count(callee_pod) as answered
                   from trace_edge_minute where {MINUTES} and callee is not null group by all)
        select caller, callee, sum(calls) filter (where during) as calls,
               sum(errors) filter (where during) / sum(calls) filter (where during) as err,
               coalesce(sum(errors) filter (where not during) / sum(calls) filter (where not during), 0) as err_before,
               median(gap) filter (where during) as gap, median(gap) filter (where not during) as gap_before,
               sum(answered) filter (where during) as answered
        from e group by caller, callee having sum(calls) filter (where during) >= $min_calls""", _params(w))
    links: dict[str, list[tuple[float, dict]]] = defaultdict(list)
    for e in edges:
        score = _ratio_score(e["gap"], e["gap_before"]) if e["gap"] is not None and e["gap_before"] else 0.0
        for end in (e["caller"], e["callee"]):
            links[end].append((score, e))
        rise = e["err"] - e["err_before"]
        if rise >= ERROR_RISE:
            answer = ", no answer from callee" if not e["answered"] else ""
            items.append(Item(e["callee"], "trace", min(1.0, rise) ** 0.5, "error calls",
                              f"trace {e['caller']} -> {e['callee']}: errors {e['err_before']:.0%} -> {e['err']:.0%} "
                              f"of {e['calls']} calls{answer}", "errors"))
    for score, s in selves:
        # Without client spans (Nezha), a caller's self time holds its wait on a slow link: then it is an echo.
        rise = s["during"] - s["before"]
        waits = [e for e in edges if e["caller"] == s["service"] and e["gap"] is not None and e["gap_before"]
                 and e["gap"] - e["gap_before"] >= 0.5 * rise and e["callee"] != s["service"]]
        on = f" (waiting on {waits[0]['callee']})" if waits else ""
        items.append(Item(s["service"], "trace", score, "span self time", f"trace self time of {s['service']} p95 "
                          f"{fmt(s['before'] / 1000)} -> {fmt(s['during'] / 1000)} ms{on}", "self time", bool(waits)))
    # A slow link belongs to the end whose links are slow the more often (a network fault on a pod slows
    # all its links; its peers each have one slow link among healthy ones); to both ends when they tie.
    share = {end: sum(1 for sc, _ in scored if sc > 0) / len(scored) for end, scored in links.items()}
    best: dict[str, tuple[float, dict]] = {}
    for e in edges:
        score = _ratio_score(e["gap"], e["gap_before"]) if e["gap"] is not None and e["gap_before"] else 0.0
        if not score:
            continue
        top = max(share[e["caller"]], share[e["callee"]])
        for end in (e["caller"], e["callee"]):
            if share[end] == top and score > best.get(end, (0.0, None))[0]:
                best[end] = (score, e)
    for end, (score, e) in best.items():
        slow = sum(1 for sc, _ in links[end] if sc > 0)
        confidence = share[end] * slow / (slow + 0.5)
        items.append(Item(end, "trace", score * confidence, "call latency",
                          f"trace {e['caller']} -> {e['callee']}: gap p95 {fmt(e['gap_before'] / 1000)} -> "
                          f"{fmt(e['gap'] / 1000)} ms; {slow} of {len(links[end])} links of {end} slow", "link"))
    return items
