"""Events: expected paths against actual ones, as Nezha compares them. In the baseline, each event of a service's
operation (a code position, a log template, a span's start or end) is followed by the next event of its span
with some probabilities; in the window, where an event still happens but what follows it changed (an exception
skips the rest of the method, a wrong return takes another branch), the service's own code changed course.
Probabilities, not counts, and within an operation: a service called less often, or asked for other operations,
keeps its paths.

The change is the drop of the expected follow-up's probability, taken at its 95 % lower bound (Clopper-Pearson:
five occurrences prove less than fifty), counted only where the window has enough occurrences and the drop is
significant under the baseline's probability (a binomial test; Laplace's rule of succession keeps a follow-up seen
every time so far from being taken as certain). The drop is measured over the whole window or the run of `MIN_RUN`
or more of its minutes where it is strongest: a fault that starts or ends inside the window would be watered down
by the minutes it does not hold (the test's level is shared among the runs tried, Bonferroni). The key is the
expected pair that broke, `A_B` in Nezha's labels; of a service's breaks that read the same, one between two of its
log lines (where in its code it broke) before one of its calls track (only that a call was not made). A service
whose callees changed as much (at least `EXPLAINS` of its change: their paths, or slower or failing calls in the
trace family's evidence) is an echo of them: the deepest service whose own path changed while its callees held is
the cause. So is a service whose caller's network is slow (its requests come late, and a caller that gives up on a
call ends the callee's span early). An operation that makes another first call than before chose it before any
callee answered: only its input can change that from outside, so it echoes a caller whose path changed as much,
never a callee, and explains no caller. A change explains another only while it holds: one that began later, or had
ended before, is no cause.

A path that broke right after a call broke on the callee's answer (it ended the operation, or sent it another way,
as a wrong return does): the callee explains it, unless its own spans show it answered as usual (its own paths ran
and held, or its spans carry a status); a callee whose answers nothing shows (it logs nothing in its spans, and
they carry no status) is the suspect, with the caller's break for evidence. A callee that a changed path now asks
was asked because its caller changed course: it echoes that caller, and explains none.

A break confined to one replica is that pod's: of two readings of the counts, one pod broke alone (its own share of
the expected follow-up, its siblings' at the baseline's) or every replica broke alike (one share for all), the first
is likelier. Where several replicas' drops are significant, or the second reading is as likely (siblings that ran
none of the operation say nothing), the break is the service's.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, replace
from functools import cache

import networkx as nx
import numpy as np
from scipy.stats import beta, binom

from ..events import CALL, CALLS_END, CALLS_START, END, START, TEMPLATE
from . import MINUTE, Item, Window, flat, rows, traces
from .traces import DURING, MINUTES, _params

MIN_WINDOW = 5  # occurrences of an event in the window before its follow-ups say anything
MIN_BASELINE = 5  # and in the baseline (Nezha's support threshold)
BLOCK = 20  # occurrences a baseline share is taken over, at least (thin minutes together)
MIN_RUN = 2  # minutes of a run shorter than the window: one minute alone may be that minute's (a restart, retries)
CONFIDENCE = 0.95  # the score is the drop of the expected pair at this confidence (few occurrences, less sure)
ALPHA = 1e-3  # the drop of the expected pair is this unlikely under the baseline's probability
TROUBLE = {"link", "errors", "self time", "error origin", "up"}  # trace signals of a callee that explain a caller
EXPLAINS = 0.5  # a callee whose path changed at least this share as much explains its caller's change


@dataclass(frozen=True)
class Change:
    """The pair of a service's that broke the most: event `a` was followed by `b` with probability `before`,
    in the window's minutes `first` to `last` by `b` in `during` of `n` occurrences and most often instead by
    `taken`, with the baseline's `seen` occurrences of `a`; in one `pod` alone where the others held."""
    service: str
    operation: str
    score: float
    a: str
    b: str
    taken: str
    before: float
    during: float
    n: int
    first: dt.datetime
    last: dt.datetime
    seen: int
    pod: str | None = None
    after: Change | None = None  # the service's strongest break right after a call (the callee's answer), if strong


def changes(con, w: Window) -> dict[str, Change]:
    """Per service, its strongest significant change of path in the window."""
    window = {k: v for k, v in _params(w).items() if k != "min_calls"}
    # The baseline's probability of each follow-up is its median share over the baseline's minutes (where the
    # event happened at all), so that other incidents in reach do not set what is expected; thin minutes are taken
    # together, in order, until they hold `BLOCK` occurrences (a minute of one occurrence has a share of 0 or 1).
    counts = rows(con, f"""
        with m as (select minute, {DURING} as during, service, coalesce(operation, '') as operation, a, b,
                          sum(pairs) as k
                   from event_pair_minute where {MINUTES} group by all),  -- '': a shard from before operations
             n as (select minute, service, operation, a, sum(k) as n from m where not during group by all),
             blocks as (select minute, service, operation, a, n,
                               floor((sum(n) over (partition by service, operation, a order by minute) - n) / $block)
                               as block from n),
             kb as (select service, operation, a, b, block, sum(m.k) as k from m join blocks
                    using (minute, service, operation, a) group by all),
             nb as (select service, operation, a, block, sum(n) as n from blocks group by all),
             share as (select service, operation, a, b, median(coalesce(kb.k, 0) / nb.n) as p, sum(nb.n) as n
                       from nb join (select distinct service, operation, a, b from m) using (service, operation, a)
                       left join kb using (service, operation, a, b, block) group by all),
             now as (select minute, service, operation, a, b, k from m where during)
        select service, operation, a, b, minute, coalesce(now.k, 0) as during, coalesce(share.p, 0) as p,
               share.n as before
        from now full join share using (service, operation, a, b)""", window | {"block": BLOCK})
    follow: dict[tuple[str, str, str], dict[str, float]] = defaultdict(dict)
    minutes: dict[tuple[str, str, str], dict[tuple[str, dt.datetime], int]] = defaultdict(dict)
    seen: dict[tuple[str, str, str], int] = {}
    for r in counts:
        key = r["service"], r["operation"], r["a"]
        follow[key][r["b"]] = r["p"]
        if r["minute"] is not None:
            minutes[key][r["b"], r["minute"]] = r["during"]
        seen[key] = max(seen.get(key, 0), r["before"] or 0)
    found: dict[str, Change] = {}
    after_call: dict[str, Change] = {}  # the strongest break right after a call, of each service
    for key, p in sorted(follow.items()):  # ties go the same way every run
        if seen[key] < MIN_BASELINE or not minutes[key]:
            continue
        service, _, a = key
        change = _strongest(*key, p, minutes[key], seen[key])
        if change and (service not in found or _stronger(change, found[service])):
            found[service] = change
        if change and a.startswith(CALL) and change.score > (after_call[service].score if service in after_call else 0):
            after_call[service] = change
    # A service's log lines and its calls break together where a callee's answer ended its path: the break after the
    # call tells whose answer it was, though the log's break be as strong.
    return {s: replace(c, after=after_call[s]) if s in after_call and after_call[s].score >= EXPLAINS * c.score else c for s, c in found.items()}


def _stronger(c: Change, than: Change) -> bool:
    """Of two breaks of a service that read the same (their shares before and now, in whole percents, of as many
    spans), the code's own lines place it where a calls track says only that a call was not made."""
    if _read(c) == _read(than):
        return _logged(c) and not _logged(than)
    return c.score > than.score


def _read(c: Change) -> tuple:
    return round(c.before, 2), round(c.during, 2), c.n


def _strongest(service: str, operation: str, a: str, p: dict[str, float],
               counts: dict[tuple[str, dt.datetime], int], seen: int) -> Change | None:
    """The strongest significant drop of an expected follow-up of `a` over the window's minutes or a run of
    `MIN_RUN` or more of them. A fault may hold only part of a window (it starts or ends inside it), and the minutes
    it does not hold would water its change down; every run is tested, so the test's level is shared among them
    (Bonferroni)."""
    if sum(counts.values()) < MIN_WINDOW:
        return None
    follows = sorted(p)
    times = sorted({m for _, m in counts})
    k = np.array([[counts.get((b, m), 0) for m in times] for b in follows])
    total = np.concatenate([np.zeros((len(follows), 1)), k.cumsum(axis=1)], axis=1)
    first, last = _runs(len(times))
    at = np.array([(m - times[0]) // MINUTE for m in times])
    k = total[:, last + 1] - total[:, first]  # follow-ups x runs
    n = k.sum(axis=0)
    whole = (first == 0) & (last == len(times) - 1)
    runs = (n >= MIN_WINDOW) & ((at[last] - at[first] + 1 >= MIN_RUN) | whole)
    if not runs.any():
        return None
    k, n, first, last = k[:, runs], n[runs], first[runs], last[runs]
    drift = k / n - np.array([p[b] for b in follows])[:, None]
    expected = drift.argmin(axis=0)  # the follow-up that lost the most; ties to the first name
    taken = len(follows) - 1 - drift[::-1].argmax(axis=0)  # the one that gained the most; ties to the last name
    kept = k[expected, np.arange(len(n))]
    rate = np.array([p[follows[e]] for e in expected])
    base = _expected(rate, seen)
    significant = np.flatnonzero((kept < n) & (binom.cdf(kept, n, base) <= ALPHA / len(n)))
    if not len(significant):
        return None
    score = base[significant] - beta.ppf(CONFIDENCE, kept[significant] + 1, n[significant] - kept[significant])
    top = score.argmax()
    if score[top] <= 0:
        return None
    best = significant[top]
    return Change(service, operation, float(score[top]), a, follows[expected[best]], follows[taken[best]],
                  float(rate[best]), float(kept[best] / n[best]), int(n[best]), times[first[best]], times[last[best]],
                  seen)


def _expected(rate, seen: int):
    """The baseline's probability of a follow-up by the rule of succession: always so far is not always."""
    return (rate * seen + 1) / (seen + 2)


def _confined(con, c: Change) -> Change:
    """The break as the one pod it is confined to shows it: the only replica whose drop is significant, where its
    breaking alone (its own share, its siblings' at the baseline's) is likelier than every replica breaking alike (one
    share for all); the service's break where it is not, or the store tells no pods apart."""
    counts = con.execute("""
        select pod, coalesce(sum(pairs) filter (where b = $b), 0), sum(pairs) from event_pair_minute
        where service = $service and coalesce(operation, '') = $operation and a = $a
          and minute >= $first and minute <= $last group by pod""",
                         {"service": c.service, "operation": c.operation, "a": c.a, "b": c.b, "first": c.first,
                          "last": c.last}).fetchall()
    if len(counts) < 2 or any(pod is None for pod, _, _ in counts):
        return c
    base = _expected(c.before, c.seen)
    broke = [(pod, k, n) for pod, k, n in counts if n >= MIN_WINDOW and binom.cdf(k, n, base) <= ALPHA]
    if len(broke) != 1:
        return c
    pod, k, n = broke[0]
    k_others, n_others = (sum(x) for x in zip(*((k, n) for p, k, n in counts if p != pod)))
    alike = (k + k_others) / (n + n_others)
    alone = binom.logpmf(k, n, k / n) + binom.logpmf(k_others, n_others, base)
    if alone <= binom.logpmf(k, n, alike) + binom.logpmf(k_others, n_others, alike):
        return c
    return replace(c, pod=pod, during=k / n, n=n)


@cache
def _runs(minutes: int) -> tuple[np.ndarray, np.ndarray]:
    """The first and last minute of every run of `minutes` minutes."""
    return np.triu_indices(minutes)


def collect(con, w: Window) -> list[Item]:
    changed = changes(con, w)
    if not changed:
        return []
    names = _names(con, {e for c in changed.values() for o in (c, c.after) if o for e in (o.a, o.b, o.taken)})
    calls = nx.DiGraph(con.execute(f"""select distinct caller, callee from trace_edge_minute
                                       where {DURING} and callee is not null and caller <> callee""",
                                   {"start": w.start, "end": w.end}).fetchall())
    # What else changes a caller's path: a callee that got slower or fails (a timeout takes another branch).
    # A component's own trouble reaches all its callers; a slow link among healthy ones (the share of the
    # component's links that are slow below 1) only the callers whose calls run over it.
    trouble = [it for it in traces.collect(con, w) if it.signal in TROUBLE and not it.echo]
    answering = _answering(con, w, changed, calls)
    items = []
    for c in changed.values():
        under = nx.descendants(calls, c.service) if c.service in calls else set()
        troubled: dict[str, float] = {}
        for it in trouble:
            if it.share == 1.0 or it.peer == c.service or it.peer in under:
                troubled[it.component] = max(it.blame, troubled.get(it.component, 0.0))
        # A change explains another only while it holds: one that began later, or had ended before, is no cause.
        holding = {d: o.score for d, o in changed.items() if o.first <= c.first <= o.last}
        # An operation that makes another first call than before chose it before any callee answered, from what it
        # was asked: no callee explains it, and a caller whose own path changed may (it asks otherwise). Nor does
        # such a choice explain its caller. (A first call that vanished may be a callee that is gone.) A callee that
        # a caller's changed path now calls was asked because the caller changed course: it explains no caller.
        causes = {d: score for d, score in holding.items() if not chose(changed[d])}
        asks = _asks(c, calls)
        below = set() if chose(c) else {
            d for d in under - {asks} if max(troubled.get(d, 0.0), causes.get(d, 0.0)) >= EXPLAINS * c.score}
        asked = {d for d in (calls.predecessors(c.service) if c.service in calls else ())
                 if (chose(c) and holding.get(d, 0.0) >= EXPLAINS * c.score)
                 or (d in holding and _asks(changed[d], calls) == c.service)}
        # A path that broke right after a call: the callee's answer ended it or sent it another way. The callee is
        # the suspect unless its own spans show it answered as usual (its paths ran and held, its status is known
        # and was no worse).
        answered = _answered(c, calls)
        after = answered if answered and (answered in causes or answered in troubled
                                          or answered not in answering) else None
        # A caller whose network is slow sends its calls late and hangs up on them: the callee's spans end early.
        late = {it.component for it in trouble
                if it.signal == "link" and c.service in calls and calls.has_edge(it.component, c.service)
                and (it.share == 1.0 or it.peer == c.service) and it.blame >= EXPLAINS * c.score}
        shown = _confined(con, c)
        text = f"events of {shown.pod} ({c.service}'s other pods held)" if shown.pod else f"events of {c.service}"
        text += f": {_told(shown, names)}"
        if below:
            text += f"; its callees {', '.join(sorted(below))} changed too (slower, failing or on other paths)"
        if after:
            text += f"; it broke right after {after} answered"
        if late:
            text += f"; calls from {', '.join(sorted(late))} came over a slow link"
        if asked:
            text += f"; its callers {', '.join(sorted(asked))} changed their paths too (it was asked otherwise)"
        items.append(Item(shown.pod or c.service, "event", c.score, _key(c, names), text, "path",
                          echo=bool(below or after or late or asked), logged=_logged(c)))
        if after and after not in changed and after not in troubled:  # its answers are not seen: its callers' are
            items.append(Item(after, "event", c.score, _key(c.after, names),
                              f"{c.service}'s path broke right after its call into {after}, whose spans show no "
                              f"answer as usual: {_told(c.after, names)}", "path", peer=c.service,
                              logged=_logged(c.after)))
    return items


def _answered(c: Change, calls: nx.DiGraph) -> str | None:
    """The callee whose answer came right before the service's break."""
    return _callee(c.service, c.after.a, calls) if c.after else None


def _asks(c: Change, calls: nx.DiGraph) -> str | None:
    """The callee the changed path now calls instead of what followed before."""
    return _callee(c.service, c.taken, calls)


def _callee(service: str, event: str, calls: nx.DiGraph) -> str | None:
    """The service a calls-track event of `service` calls (`call SERVICE OPERATION`)."""
    callee = event.split(" ", 2)[1] if event.startswith(CALL) and event.count(" ") >= 2 else None
    return callee if calls.has_edge(service, callee) else None


def _answering(con, w: Window, changed: dict[str, Change], calls: nx.DiGraph) -> set[str]:
    """Of the callees right before a broken pair, those whose spans in the window show how they answered: their own
    paths were counted (and held, or they changed), or their spans carry a status."""
    callees = sorted({x for c in changed.values() if (x := _answered(c, calls))})
    if not callees:
        return set()
    return {s for s, in con.execute("""
        select distinct service from event_pair_minute
        where minute between $start and $end and service in (select unnest($callees))
        union select distinct service from spans
        where ts between $start and $end and service in (select unnest($callees)) and status_code is not null""",
                                    {"start": w.start, "end": w.end, "callees": callees}).fetchall()}


def chose(c: Change) -> bool:
    """Whether the change is an operation's first call, made to another callee than before."""
    return c.a.endswith(CALLS_START) and not c.taken.endswith(CALLS_END)


def _key(c: Change, names: dict[str, str]) -> str:
    """The expected pair that broke, `A_B` in Nezha's labels."""
    return f"{names.get(c.a, c.a)}_{names.get(c.b, c.b)}"


def _logged(c: Change) -> bool:
    """Whether both events of the pair are log lines (code positions or templates), neither a call nor a span's or
    a calls track's start or end."""
    return all(e.startswith(TEMPLATE) or not (e.startswith(CALL) or e.endswith((START, END))) for e in (c.a, c.b))


def _told(c: Change, names: dict[str, str]) -> str:
    a, b, taken = (flat(names.get(e, e), 60) for e in (c.a, c.b, c.taken))
    return (f"'{a}' was followed by '{b}' in {c.before:.0%} of spans, now {c.during:.0%} of {c.n} in {_minutes(c)} "
            f"(now by '{taken}')")


def _minutes(c: Change) -> str:
    return f"{c.first:%H:%M}" + (f"-{c.last:%H:%M}" if c.last > c.first else "")


def _names(con, events: set[str]) -> dict[str, str]:
    """Template events by their template text; code positions and span bounds are their own names."""
    ids = [int(e.removeprefix(TEMPLATE)) for e in events if e.startswith(TEMPLATE)]
    return {f"{TEMPLATE}{i}": t for i, t in con.execute(
        "select template_id, template from log_templates where template_id in (select unnest(?))", [ids]).fetchall()}
