"""Events in their traces: each span is a path of events (its start, the log lines written in it, its end),
and `event_pair_minute` counts, per service and minute, how often event `a` is followed by event `b` in the
same span. A log line's event is its code position (`logger#line`, verbatim) where it has one, else its
Drain3 template (`template:ID`). Only spans that log (a dump whose log lines carry their trace and span ids)
have paths of more than start and end; those are the spans counted here, with the spans of the same operations
that logged nothing (their path ran from start to end: an exception thrown before the first line leaves such a
span, and a path that vanished is a follow-up that changed).

How the same pairs run in the window and in the baseline is read by `features.evidence.events`.
"""

from __future__ import annotations

import datetime as dt

import duckdb

TEMPLATE = "template:"  # the prefix of an event that is a template id, not a code position
LOG_SLACK = dt.timedelta(minutes=5)  # a span's log lines may be written a little before or after its minute


def refresh_event_pairs(con: duckdb.DuckDBPyConnection, lo: dt.datetime, hi: dt.datetime) -> int:
    con.execute("delete from event_pair_minute where minute >= ? and minute < ?", [lo, hi])
    con.execute(f"""
        insert into event_pair_minute
        with logged as (select trace_id, span_id, ts, coalesce(event, '{TEMPLATE}' || template_id) as event
                        from log_lines where span_id is not null and ts >= ? and ts < ?),
             every as (select trace_id, span_id, ts, service, operation from spans where ts >= ? and ts < ?),
             s as (select * from every semi join (select distinct trace_id, span_id from logged) using (trace_id, span_id)),
             -- a span of an operation that logs, which logged nothing this time: its path ran start to end
             bare as (select * from every semi join (select distinct service, operation from s) using (service, operation)
                      anti join s using (trace_id, span_id)),
             path as (select trace_id, span_id, 0 as part, ts, operation || ' start' as event from s
                      union all
                      select l.trace_id, l.span_id, 1, l.ts, l.event from logged l semi join s using (trace_id, span_id)
                      union all
                      select trace_id, span_id, 2, ts, operation || ' end' from s),
             pairs as (select trace_id, span_id, event as a,
                              lead(event) over (partition by trace_id, span_id order by part, ts, event) as b
                       from path)
        select date_trunc('minute', s.ts) as minute, s.service, p.a, p.b, count(*) as pairs
        from pairs p join s using (trace_id, span_id) where p.b is not null group by all
        union all  -- no pair of these is one of those: a span that logged has a line between its start and end
        select date_trunc('minute', ts), service, operation || ' start', operation || ' end', count(*)
        from bare group by all""",
                [lo - LOG_SLACK, hi + LOG_SLACK, lo, hi])
    return con.execute("select count(*) from event_pair_minute where minute >= ? and minute < ?",
                       [lo, hi]).fetchall()[0][0]
