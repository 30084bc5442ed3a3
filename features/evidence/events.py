"""Events: expected paths against actual ones, as Nezha compares them. In the baseline, each event of a service
(a code position, a log template, a span's start or end) is followed by the next event of its span with some
probabilities; in the window, where an event still happens but what follows it changed (an exception skips
the rest of the method, a wrong return takes another branch), the service's own code changed course.

The change is the drop of the expected follow-up's probability, taken at its 95 % lower bound (Clopper-Pearson:
five occurrences prove less than fifty), counted only where the window has enough occurrences and the drop
is significant under the baseline's probability (a binomial test; Laplace's rule of succession keeps a
follow-up seen every time so far from being taken as certain). Probabilities, not counts: a service called
less often keeps its paths. The key is the expected pair that broke, `A_B` in Nezha's labels. A service whose
callees changed as much (at least `EXPLAINS` of its change: their paths, or slower or failing calls in the
trace family's evidence) is an echo of them: the deepest service whose own path changed while its callees
held is the cause.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import networkx as nx
from scipy.stats import beta, binom

from ..events import TEMPLATE
from . import Item, Window, flat, rows, traces
from .traces import DURING, MINUTES, _params

MIN_WINDOW = 5  # occurrences of an event in the window before its follow-ups say anything
MIN_BASELINE = 5  # and in the baseline (Nezha's support threshold)
CONFIDENCE = 0.95  # the score is the drop of the expected pair at this confidence (few occurrences, less sure)
ALPHA = 1e-3  # the drop of the expected pair is this unlikely under the baseline's probability
TROUBLE = {"link", "errors", "self time", "error origin"}  # trace signals of a callee that explain a caller
EXPLAINS = 0.5  # a callee whose path changed at least this share as much explains its caller's change


@dataclass(frozen=True)
class Change:
    """The pair of a service's that broke the most: event `a` was followed by `b` with probability `before`,
    in the window by `b` in `during` of `n` occurrences and most often instead by `taken`."""
    service: str
    score: float
    a: str
    b: str
    taken: str
    before: float
    during: float
    n: int


def changes(con, w: Window) -> dict[str, Change]:
    """Per service, its strongest significant change of path in the window."""
    window = {k: v for k, v in _params(w).items() if k != "min_calls"}
    # The baseline's probability of each follow-up is its median share over the baseline's minutes (where the
    # event happened at all), so that other incidents in reach do not set what is expected.
    counts = rows(con, f"""
        with m as (select minute, {DURING} as during, service, a, b, sum(pairs) as k
                   from event_pair_minute where {MINUTES} group by all),
             n as (select minute, service, a, sum(k) as n from m where not during group by all),
             share as (select service, a, b, median(coalesce(m.k, 0) / n.n) as p, sum(n.n) as n
                       from n join (select distinct service, a, b from m) using (service, a)
                       left join m using (minute, service, a, b) group by all),
             now as (select service, a, b, sum(k) as k from m where during group by all)
        select service, a, b, coalesce(now.k, 0) as during, coalesce(share.p, 0) as p, share.n as before
        from now full join share using (service, a, b)""", window)
    follow: dict[tuple[str, str], dict[str, tuple[int, float]]] = defaultdict(dict)
    seen: dict[tuple[str, str], int] = {}
    for r in counts:
        follow[r["service"], r["a"]][r["b"]] = (r["during"], r["p"])
        seen[r["service"], r["a"]] = max(seen.get((r["service"], r["a"]), 0), r["before"] or 0)
    found: dict[str, Change] = {}
    for (service, a), nexts in sorted(follow.items()):  # ties go the same way every run
        n = sum(d for d, _ in nexts.values())
        if n < MIN_WINDOW or seen[service, a] < MIN_BASELINE:
            continue
        drift = {b: d / n - p for b, (d, p) in nexts.items()}
        expected = min(drift, key=lambda b: (drift[b], b))  # the follow-up that lost the most
        taken = max(drift, key=lambda b: (drift[b], b))
        k, p = nexts[expected]
        base = (p * seen[service, a] + 1) / (seen[service, a] + 2)  # rule of succession: always so far is not always
        if k == n or binom.cdf(k, n, base) > ALPHA:
            continue
        score = base - beta.ppf(CONFIDENCE, k + 1, n - k)
        if score > (found[service].score if service in found else 0.0):
            found[service] = Change(service, score, a, expected, taken, p, k / n, n)
    return found


def collect(con, w: Window) -> list[Item]:
    changed = changes(con, w)
    if not changed:
        return []
    names = _names(con, {e for c in changed.values() for e in (c.a, c.b, c.taken)})
    calls = nx.DiGraph(con.execute(f"""select distinct caller, callee from trace_edge_minute
                                       where {DURING} and callee is not null and caller <> callee""",
                                   {"start": w.start, "end": w.end}).fetchall())
    # What else changes a caller's path: a callee that got slower or fails (a timeout takes another branch).
    # A component's own trouble reaches all its callers; a slow link among healthy ones (the share of the
    # component's links that are slow below 1) only the callers whose calls run over it.
    trouble = [it for it in traces.collect(con, w) if it.signal in TROUBLE and not it.echo]
    items = []
    for c in changed.values():
        under = nx.descendants(calls, c.service) if c.service in calls else set()
        troubled: dict[str, float] = {}
        for it in trouble:
            if it.share == 1.0 or it.peer == c.service or it.peer in under:
                troubled[it.component] = max(it.blame, troubled.get(it.component, 0.0))
        below = {d for d in under
                 if max(troubled.get(d, 0.0), changed[d].score if d in changed else 0.0) >= EXPLAINS * c.score}
        a, b, taken = (names.get(e, e) for e in (c.a, c.b, c.taken))
        text = (f"events of {c.service}: '{flat(a, 60)}' was followed by '{flat(b, 60)}' in {c.before:.0%} of "
                f"spans, now {c.during:.0%} of {c.n} (now by '{flat(taken, 60)}')")
        if below:
            text += f"; its callees {', '.join(sorted(below))} changed too (slower, failing or on other paths)"
        items.append(Item(c.service, "event", c.score, f"{a}_{b}", text, "path", echo=bool(below)))
    return items


def _names(con, events: set[str]) -> dict[str, str]:
    """Template events by their template text; code positions and span bounds are their own names."""
    ids = [int(e.removeprefix(TEMPLATE)) for e in events if e.startswith(TEMPLATE)]
    return {f"{TEMPLATE}{i}": t for i, t in con.execute(
        "select template_id, template from log_templates where template_id in (select unnest(?))", [ids]).fetchall()}
