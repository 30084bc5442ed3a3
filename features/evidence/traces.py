"""Traces, from `span_self_minute` and `trace_edge_minute`:
- self time: a service whose spans, less their children, got slower (its own CPU, GC, code);
- links: the gap of a call (caller span less callee span; all of a call into a peer that writes no span of its
  own, a database seen only in its callers' client spans) that grew and carries most of the call's
  slowdown (a callee that got slower itself lengthens the call, not the gap), given to the end whose
  links in that direction are all slow: a network fault on a pod slows all its calls in or out,
  while its peers each have one slow link among healthy ones. Where both ends' links are all slow, the end
  that more slow links share is the one cause that explains them all (a caller that sends its calls into three
  services late, each of which it alone calls). The item's score is the link's anomaly, the
  share of the end's links that are slow how much of it points at that end. Where the return leg of the slow
  calls into that end (the span offset) got slower too, the link is named as Nezha names that measure,
  NetworkP90(ms) of the callee;
- errors: calls into a service that fail, errors that start in a service (no failing child),
  and calls that get no answer at all (given, as slow links are, to the end whose calls that way fail so: a
  callee no call reaches is not up; a caller that reaches none of its callees fails itself); a rise counts
  where so many errors would be unlikely at the baseline's rate, the test's level shared among the calls a
  window tests (one failed call of six is chance among fifty).
The baseline is the median minute of the other traced minutes within `TRACE_REACH`.
"""

from __future__ import annotations

import math
from collections import defaultdict

from scipy.stats import binom

from . import GAP, MIN_RATIO, TRACE_REACH, Item, Window, fmt, rows

RATIO_FULL = 100.0  # a latency ratio this high scores 1; scores grow with the ratio's logarithm
MIN_CALLS = 3
MIN_DELTA_US = 2000  # a latency rise below this is noise whatever the ratio
ERROR_RISE = 0.05
SURPRISE = 0.05  # a rise in errors counts where as many at the baseline's rate have at most this chance, shared
                 # among the calls (or services) a window tests
NETWORK_SHARE = 0.5  # a slow link's gap carries at least this share of its call's slowdown


def _ratio_score(during: float, before: float) -> float:
    ratio = during / max(before, 1.0)
    if ratio < MIN_RATIO or during - before < MIN_DELTA_US:
        return 0.0
    return min(1.0, math.log(ratio) / math.log(RATIO_FULL))


def failing(errors: float, calls: float, errors_before: float, calls_before: float, tested: int = 1) -> bool:
    """Whether calls' errors rose: by `ERROR_RISE` of them, and, where the baseline has calls, more than chance at
    its rate (its Jeffreys estimate, so a baseline of few calls and no error is no certainty of none), the level
    shared among the `tested` calls."""
    errors = errors or 0
    if not calls or errors / calls - errors_before / max(calls_before, 1) < ERROR_RISE:
        return False
    return not calls_before or binom.sf(round(errors) - 1, round(calls),
                                        (errors_before + 0.5) / (calls_before + 1)) <= SURPRISE / tested


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
    services = rows(con, f"""
            with m as (select {DURING} as during, service, sum(spans) as spans, sum(origin_errors) as origin,
                              max(self_p95_us) as self_p95
                       from span_self_minute where {MINUTES} group by minute, service)
            select service, sum(spans) filter (where during) as spans,
                   median(self_p95) filter (where during) as during, median(self_p95) filter (where not during) as before,
                   sum(origin) filter (where during) as origin, coalesce(sum(spans) filter (where not during), 0)
                   as spans_before, coalesce(sum(origin) filter (where not during), 0) as origin_before
            from m group by service having sum(spans) filter (where during) >= $min_calls""", _params(w))
    for s in services:
        _shares(s, "origin", "spans")
        if s["before"] is not None:
            score = _ratio_score(s["during"], s["before"])
            if score:
                selves.append((score, s))
        if failing(s["origin"], s["spans"], s["origin_before"], s["spans_before"], len(services)):
            items.append(Item(s["service"], "trace", min(1.0, s["err"] - s["err_before"]) ** 0.5, "error spans",
                              f"trace errors start in {s['service']}: {s['err_before']:.0%} -> {s['err']:.0%} of spans",
                              "error origin"))
    traced = call_figures(con, w, min_calls=1)
    lost = _lost(traced)
    edges = [e for e in traced if e["calls"] >= MIN_CALLS]
    slow = {(e["caller"], e["callee"]): _link_score(e) for e in edges}
    for e in edges:
        if lost[e["caller"], e["callee"]]:
            continue  # given to the end where such calls fail (`_unanswered`)
        rise = e["err"] - e["err_before"]
        if failing(e["errors"], e["calls"], e["errors_before"], e["calls_before"], len(edges)):
            answer = ", no answer from callee" if not e["answered"] else ""
            items.append(Item(e["callee"], "trace", min(1.0, rise) ** 0.5, "error calls",
                              f"trace {e['caller']} -> {e['callee']}: errors {e['err_before']:.0%} -> {e['err']:.0%} "
                              f"of {e['calls']} calls{answer}", "errors"))
    for score, s in selves:
        # Without client spans (Nezha), a caller's self time holds its wait on a slow link: then it is an echo.
        # The self time is measured on the caller's spans, so any of their calls can show the wait, however few.
        rise = s["during"] - s["before"]
        waits = [e for e in traced if e["caller"] == s["service"] and e["callee"] != s["service"] and not e["peer"]
                 and e["gap"] is not None and e["gap_before"] and e["gap"] - e["gap_before"] >= 0.5 * rise]
        on = f" (waiting on {waits[0]['callee']})" if waits else ""
        items.append(Item(s["service"], "trace", score, "span self time", f"trace self time of {s['service']} p95 "
                          f"{fmt(s['before'] / 1000)} -> {fmt(s['during'] / 1000)} ms{on}", "self time", bool(waits)))
    return items + _slow_links(edges, slow) + _unanswered(traced, lost)


def call_figures(con, w: Window, min_calls: int = MIN_CALLS) -> list[dict]:
    """Each traced call (caller -> callee) with at least `min_calls` calls in the window: errors, gap, return leg
    and p95 there and in the baseline."""
    edges = rows(con, f"""
        with e as (select {DURING} as during, minute, caller, callee, sum(calls) as calls, sum(errors) as errors,
                          max(gap_p95_us) as gap, max(offset_p90_us) as ret, max(p95_us) as p95,
                          count(callee_pod) as answered
                   from trace_edge_minute where {MINUTES} and callee is not null group by all)
        select caller, callee, sum(calls) filter (where during) as calls,
               sum(errors) filter (where during) as errors, coalesce(sum(calls) filter (where not during), 0)
               as calls_before, coalesce(sum(errors) filter (where not during), 0) as errors_before,
               median(gap) filter (where during) as gap, median(gap) filter (where not during) as gap_before,
               median(ret) filter (where during) as ret,
               median(ret) filter (where not during) as ret_before,
               median(p95) filter (where during) as p95, median(p95) filter (where not during) as p95_before,
               sum(answered) filter (where during) as answered,
               coalesce(sum(answered) filter (where not during), 0) as answered_before
        from e group by caller, callee having sum(calls) filter (where during) >= $min_calls
        order by caller, callee""", {**_params(w), "min_calls": min_calls})  # the first of equal links wins, the same one every run
    for e in edges:
        _shares(e, "errors", "calls")
        # A peer that writes no span of its own: all of a call's time is the link's, and it is in the caller's
        # client span, never in its self time.
        e["peer"] = e["gap"] is None and e["gap_before"] is None and not e["answered"] and not e["answered_before"]
        if e["peer"]:
            e["gap"], e["gap_before"] = e["p95"], e["p95_before"]
    return edges


def _shares(row: dict, errors: str, calls: str) -> None:
    """The error shares of a row of counts: `err` in the window, `err_before` in the baseline (0 without calls)."""
    row["err"] = (row[errors] or 0) / row[calls]
    row["err_before"] = row[f"{errors}_before"] / row[f"{calls}_before"] if row[f"{calls}_before"] else 0.0


def _link_score(e: dict) -> float:
    if e["gap"] is None or not e["gap_before"]:
        return 0.0
    slowdown = (e["p95"] or 0.0) - (e["p95_before"] or 0.0)
    if e["gap"] - e["gap_before"] < NETWORK_SHARE * slowdown:
        return 0.0  # the callee got slower itself: the call is slower, not the network
    return _ratio_score(e["gap"], e["gap_before"])


def _ends(edges: list[dict], scores: dict) -> dict[str, tuple[float, dict, str, list[float]]]:
    """The end each scored link belongs to: the end whose links in that direction (a callee's calls in, a caller's
    calls out) score the more often, then that has more of them scoring, then whose links of both directions score
    the more often; both ends when they tie. Each end with its strongest link's score, the link, the direction and
    the scores of its links that way."""
    way: dict[tuple[str, str], list[float]] = defaultdict(list)  # (component, "in" | "out") -> link scores
    for e in edges:
        way[e["callee"], "in"].append(scores[e["caller"], e["callee"]])
        way[e["caller"], "out"].append(scores[e["caller"], e["callee"]])

    def standing(end: str, direction: str) -> tuple[float, int, float]:
        return _share(way[end, direction]), _scoring(way[end, direction]), _share(way[end, "in"] + way[end, "out"])

    best: dict[str, tuple[float, dict, str, list[float]]] = {}
    for e in edges:
        score = scores[e["caller"], e["callee"]]
        if not score:
            continue
        ends = ((e["callee"], "in"), (e["caller"], "out"))
        top = max(standing(*end) for end in ends)
        for end, direction in ends:
            if standing(end, direction) == top and score > best.get(end, (0.0,))[0]:
                best[end] = (score, e, direction, way[end, direction])
    return best


def _scoring(scores: list[float]) -> int:
    return sum(1 for sc in scores if sc > 0)


def _share(scores: list[float]) -> float:
    return _scoring(scores) / len(scores) if scores else 0.0


def _counted(end: str, direction: str, scores: list[float]) -> tuple[str, float]:
    """How many of an end's links that way score ("2 of 3 calls into x"), and how sure so many make it."""
    n = _scoring(scores)
    return f"{n} of {len(scores)} calls {'into' if direction == 'in' else 'from'} {end}", n / (n + 0.5)


def _slow_links(edges: list[dict], slow: dict) -> list[Item]:
    """The slow links (`_link_score`), each given to its end (`_ends`)."""
    items = []
    for end, (score, e, direction, scores) in _ends(edges, slow).items():
        counted, sure = _counted(end, direction, scores)
        said = (f"trace {e['caller']} -> {e['callee']}: gap p95 {fmt(e['gap_before'] / 1000)} -> "
                f"{fmt(e['gap'] / 1000)} ms; {counted} slow")
        returning = [x for x in edges if x["callee"] == end and slow[x["caller"], x["callee"]] and _return_leg(x)]
        if returning:
            x = max(returning, key=lambda x: x["ret"] - x["ret_before"])
            said = (f"trace NetworkP90(ms) of {end} (span offset, calls from {x['caller']}): "
                    f"{fmt(x['ret_before'] / 1000)} -> {fmt(x['ret'] / 1000)} ms; {said}")
        items.append(Item(end, "trace", score * sure, "NetworkP90(ms)" if returning else "call latency",
                          said, "link", share=_share(scores),
                          peer=e["caller"] if end == e["callee"] else e["callee"]))
    return items


def _lost(traced: list[dict]) -> dict[tuple[str, str], float]:
    """Each traced call's score as a call that now fails with no answer where it was answered before (0 if not)."""
    return {(e["caller"], e["callee"]): min(1.0, e["err"] - e["err_before"]) ** 0.5
            if not e["answered"] and e["answered_before"]
            and failing(e["errors"], e["calls"], e["errors_before"], e["calls_before"], len(traced)) else 0.0
            for e in traced}


def _unanswered(traced: list[dict], lost: dict[tuple[str, str], float]) -> list[Item]:
    """Calls lost (`_lost`). Where a callee's calls in go unanswered more often than its callers' calls out, no call
    reaches it (it is gone or its address leads nowhere): it is not up, whatever its callers log. Where a caller's
    calls out are the more often unanswered, it cannot send them: the errors start in it."""
    items = []
    for end, (score, e, direction, scores) in _ends(traced, lost).items():
        counted, sure = _counted(end, direction, scores)
        said = (f"trace {e['caller']} -> {e['callee']}: {e['errors']:.0f} of {e['calls']:.0f} calls failed with no "
                f"answer ({e['err_before']:.0%} failed before); {counted} unanswered")
        items.append(Item(end, "trace", score * sure, "error calls", said,
                          "up" if direction == "in" else "error origin", fell=direction == "in", share=_share(scores)))
    return items


def _return_leg(e: dict) -> bool:
    """The call's return leg (the callee span's end to the caller span's end) got slower too."""
    return e["ret"] is not None and e["ret_before"] is not None and _ratio_score(e["ret"], e["ret_before"]) > 0
