"""Caller -> callee edges per minute from spans: a span whose child runs in another service is a call.

A failed client span with no child (the callee never answered: connection refused, DNS)
still counts, with the callee taken from its gRPC operation name.
"""

from __future__ import annotations

import duckdb


def refresh_trace_edges(con: duckdb.DuckDBPyConnection, lo, hi) -> int:
    con.execute("delete from trace_edge_minute where minute >= ? and minute < ?", [lo, hi])
    con.execute(r"""
        insert into trace_edge_minute
        with s as (select * from spans where ts >= ? and ts < ?),
        pairs as (
            select date_trunc('minute', p.ts) as minute, p.service as caller, p.pod as caller_pod,
                   c.service as callee, c.pod as callee_pod, p.duration_us as dur, c.duration_us as callee_dur,
                   (coalesce(p.status_code, 0) <> 0 or coalesce(c.status_code, 0) <> 0) as err
            from s p join s c on c.parent_span_id = p.span_id and c.trace_id = p.trace_id
            where p.service <> c.service
            union all
            select date_trunc('minute', p.ts), p.service, p.pod, lower(regexp_extract(p.operation, '\.(\w+)/', 1)),
                   null, p.duration_us, null, true
            from s p anti join s c on c.parent_span_id = p.span_id and c.trace_id = p.trace_id
            where p.kind = 'client' and coalesce(p.status_code, 0) <> 0
        )
        select minute, caller, caller_pod, callee, callee_pod, count(*), sum(err::int),
               quantile_cont(dur, 0.5), quantile_cont(dur, 0.95), quantile_cont(dur, 0.99),
               quantile_cont(callee_dur, 0.95)
        from pairs group by all""", [lo, hi])
    return con.execute("select count(*) from trace_edge_minute where minute >= ? and minute < ?",
                       [lo, hi]).fetchall()[0][0]

