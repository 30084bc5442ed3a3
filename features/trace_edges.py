"""Trace features per minute: caller -> callee edges, and each service's own (self) time and errors.

An edge is a span whose child runs in another service. A client, producer or consumer span that names its peer
(a datastore or broker that writes no span of its own) is an edge to that peer where no child of it runs there; a
failed client span with no child (the callee never answered: connection refused, DNS) still counts, with the callee
its peer or else taken from its gRPC operation name. The gap of an edge (caller span less callee span) is the time spent
between the two: network, queues, or the caller's own work around the call. Its offset (the caller
span's end less the callee span's end) is the return leg alone: Nezha's span offset, whose p90 it
calls a pod's NetworkP90(ms); a delay on the callee's traffic lengthens it.

Self time is a span less its children, on server (or unmarked) spans: where a service itself
got slow (CPU, GC, code), its self time rises, while its callers' self time stays flat. An
error span none of whose children failed is where errors start (`origin_errors`).
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
                   p.duration_us - c.duration_us as gap,
                   (epoch_us(p.ts) + p.duration_us) - (epoch_us(c.ts) + c.duration_us) as offset_us,
                   (coalesce(p.status_code, 0) <> 0 or coalesce(c.status_code, 0) <> 0) as err
            from s p join s c on c.parent_span_id = p.span_id and c.trace_id = p.trace_id
            where p.service <> c.service
            union all
            select date_trunc('minute', p.ts), p.service, p.pod,
                   coalesce(p.peer, lower(regexp_extract(p.operation, '\.(\w+)/', 1))), null, p.duration_us, null,
                   null, null, coalesce(p.status_code, 0) <> 0
            from s p anti join s c on c.parent_span_id = p.span_id and c.trace_id = p.trace_id
                                      and (c.service = p.peer or p.peer is null)
            where (p.kind = 'client' and coalesce(p.status_code, 0) <> 0)
               or (p.kind in ('client', 'producer', 'consumer') and p.peer is not null and p.peer <> p.service)
        )
        select minute, caller, caller_pod, callee, callee_pod, count(*), sum(err::int),
               quantile_cont(dur, 0.5), quantile_cont(dur, 0.95), quantile_cont(dur, 0.99),
               quantile_cont(callee_dur, 0.95), quantile_cont(gap, 0.95), quantile_cont(offset_us, 0.9)
        from pairs group by all""", [lo, hi])
    return con.execute("select count(*) from trace_edge_minute where minute >= ? and minute < ?",
                       [lo, hi]).fetchall()[0][0]


def refresh_span_self(con: duckdb.DuckDBPyConnection, lo, hi) -> int:
    con.execute("delete from span_self_minute where minute >= ? and minute < ?", [lo, hi])
    con.execute("""
        insert into span_self_minute
        with s as (select *, coalesce(status_code, 0) <> 0 as err from spans where ts >= ? and ts < ?),
        kids as (select trace_id, parent_span_id as span_id, sum(duration_us) as child_us, bool_or(err) as child_err
                 from s where parent_span_id is not null group by all)
        select date_trunc('minute', p.ts), p.service, p.pod, count(*), sum(p.err::int),
               sum((p.err and not coalesce(k.child_err, false))::int),
               quantile_cont(greatest(p.duration_us - coalesce(k.child_us, 0), 0), 0.5),
               quantile_cont(greatest(p.duration_us - coalesce(k.child_us, 0), 0), 0.95),
               quantile_cont(p.duration_us, 0.95)
        from s p left join kids k using (trace_id, span_id)
        where coalesce(p.kind, 'server') <> 'client'
        group by all""", [lo, hi])
    return con.execute("select count(*) from span_self_minute where minute >= ? and minute < ?",
                       [lo, hi]).fetchall()[0][0]

