"""Events in their traces: each span is a path of events (its start, the log lines written in it, its end),
and `event_pair_minute` counts, per service, operation, pod and minute, how often event `a` is followed by event
`b` in the same span: a path is an operation's, and a callee asked for other operations keeps its paths; the pod tells
a break in one replica from a break in all. A log
line's event is its code position (`logger#line`, verbatim) where it has one, else its Drain3 template
(`template:ID`). Only spans that log (a dump whose log lines carry their trace and span ids)
have paths of more than start and end; those are the spans counted here, with the spans of the same operations
that logged nothing (their path ran from start to end: an exception thrown before the first line leaves such a
span, and a path that vanished is a follow-up that changed).

A span's calls are a track of their own (`OPERATION calls start`, `call SERVICE OPERATION` for each child span
in the order they started, `OPERATION calls end`), counted the same way for every span that calls, and for the
spans of the same operations that called nothing: a call that vanished (an exception before it) is a follow-up
that changed in the caller's track, and the callee's spans that vanished with it leave no pair of the callee's.
A loop's repeated calls are one step: how often it ran depends on the data, not on the path. The consumers of a
message a span published are no calls of its code (they take the message when they will): they are not in its track.

How the same pairs run in the window and in the baseline is read by `features.evidence.events`.
"""

from __future__ import annotations

import datetime as dt
import math

import duckdb

TEMPLATE = "template:"  # the prefix of an event that is a template id, not a code position
START, END = " start", " end"  # the suffixes of a span's first and last events (`OPERATION start`)
CALLS_START, CALLS_END = " calls start", " calls end"  # the suffixes of the events that begin and end a calls track
CALL = "call "  # the prefix of a call's event in a calls track: `call SERVICE OPERATION`
CHUNK = dt.timedelta(hours=1)  # the calls track is counted an hour of spans at a time
SLACK = dt.timedelta(minutes=5)  # a span's log lines and calls may start a little before or after its minute


def refresh_event_pairs(con: duckdb.DuckDBPyConnection, lo: dt.datetime, hi: dt.datetime) -> int:
    con.execute("delete from event_pair_minute where minute >= ? and minute < ?", [lo, hi])
    con.execute(f"""
        insert into event_pair_minute (minute, service, operation, pod, a, b, pairs)
        with logged as (select trace_id, span_id, ts, coalesce(event, '{TEMPLATE}' || template_id) as event
                        from log_lines where span_id is not null and ts >= ? and ts < ?),
             every as (select trace_id, span_id, ts, service, operation, pod from spans where ts >= ? and ts < ?),
             s as (select * from every semi join (select distinct trace_id, span_id from logged) using (trace_id, span_id)),
             -- a span of an operation that logs, which logged nothing this time: its path ran start to end
             bare as (select * from every semi join (select distinct service, operation from s) using (service, operation)
                      anti join s using (trace_id, span_id)),
             path as (select trace_id, span_id, 0 as part, ts, operation || '{START}' as event from s
                      union all
                      select l.trace_id, l.span_id, 1, l.ts, l.event from logged l semi join s using (trace_id, span_id)
                      union all
                      select trace_id, span_id, 2, ts, operation || '{END}' from s),
             pairs as (select trace_id, span_id, event as a,
                              lead(event) over (partition by trace_id, span_id order by part, ts, event) as b
                       from path)
        select date_trunc('minute', s.ts) as minute, s.service, s.operation, s.pod, p.a, p.b, count(*) as pairs
        from pairs p join s using (trace_id, span_id) where p.b is not null group by all
        union all  -- no pair of these is one of those: a span that logged has a line between its start and end
        select date_trunc('minute', ts), service, operation, pod, operation || '{START}', operation || '{END}',
               count(*)
        from bare group by all""",
                [lo - SLACK, hi + SLACK, lo, hi])
    # The calls track an hour at a time: a day's spans and their calls at once take a third of a GB more.
    for hour in range(math.ceil((hi - lo) / CHUNK)):
        _calls_track(con, lo + hour * CHUNK, min(hi, lo + (hour + 1) * CHUNK))
    return con.execute("select count(*) from event_pair_minute where minute >= ? and minute < ?",
                       [lo, hi]).fetchall()[0][0]


def _calls_track(con: duckdb.DuckDBPyConnection, lo: dt.datetime, hi: dt.datetime) -> None:
    """The calls track's pairs of the spans that start in [lo, hi). Each service's operation is a number while the
    paths are built and counted (spans make few distinct paths); 0 is the track's start before the first call and
    its end after the last."""
    con.execute("""
        insert into event_pair_minute (minute, service, operation, pod, a, b, pairs)
        with near as (select trace_id, span_id, parent_span_id, ts, service, operation, pod, kind from spans
                      where ts >= $near_lo and ts < $near_hi),
             ops as (select service, operation, (row_number() over ())::integer as op
                     from (select distinct service, operation from near)),
             numbered as (select trace_id, span_id, parent_span_id, ts, op, pod, kind
                          from near join ops using (service, operation)),
             every as (select * from numbered where ts >= $lo and ts < $hi),
             calls as (select trace_id, parent_span_id as span_id, list(op order by ts, op) as ops
                       from numbered where parent_span_id is not null and kind is distinct from 'consumer'
                       group by all),
             paths as (select date_trunc('minute', e.ts) as minute, e.op, e.pod, c.ops, count(*) as spans
                       from every e join calls c using (trace_id, span_id) group by all),
             steps as (select minute, op, pod, list_filter(ops, lambda x, i: i = 1 or x <> ops[i - 1]) as ops, spans
                       from paths),
             pairs as (select minute, op, pod, p[1] as a, p[2] as b, sum(spans) as pairs
                       from (select minute, op, pod, unnest(list_zip([0] || ops, ops || [0])) as p, spans from steps)
                       group by all),
             -- a span of an operation that calls, which called nothing this time: its track ran start to end
             bare as (select date_trunc('minute', ts) as minute, op, pod, 0 as a, 0 as b, count(*) as pairs
                      from every semi join (select distinct op from paths) using (op)
                      anti join calls using (trace_id, span_id) group by all)
        select minute, o.service, o.operation, pod,
               if(a = 0, o.operation || $calls_start, $call || x.service || ' ' || x.operation) as a,
               if(b = 0, o.operation || $calls_end, $call || y.service || ' ' || y.operation) as b, sum(pairs)
        from (select * from pairs union all select * from bare) join ops o using (op)
        left join ops x on x.op = a left join ops y on y.op = b group by all""",
                {"near_lo": lo - SLACK, "near_hi": hi + SLACK, "lo": lo, "hi": hi, "calls_start": CALLS_START,
                 "calls_end": CALLS_END, "call": CALL})
