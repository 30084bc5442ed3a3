"""Log templates per minute: how many lines of each template a component wrote, and how many of them
were errors (the templates themselves are mined at load, `etl/loglines.py`)."""

from __future__ import annotations

import duckdb

from etl.loglines import ERROR_LEVELS


def refresh_template_minute(con: duckdb.DuckDBPyConnection, lo, hi) -> int:
    con.execute("delete from log_template_minute where minute >= ? and minute < ?", [lo, hi])
    con.execute("""
        insert into log_template_minute
        select date_trunc('minute', ts), component, service, template_id, count(*),
               count(*) filter (where level in (select unnest(?)))
        from log_lines where ts >= ? and ts < ? group by all""", [list(ERROR_LEVELS), lo, hi])
    return con.execute("select count(*) from log_template_minute where minute >= ? and minute < ?",
                       [lo, hi]).fetchall()[0][0]


def count_templates(con: duckdb.DuckDBPyConnection) -> None:
    """Each template's lines and first minute, over every day."""
    con.execute("""
        update log_templates t set lines = c.n, first_seen = c.first
        from (select template_id, sum(lines) as n, min(minute) as first from log_template_minute group by all) c
        where t.template_id = c.template_id""")
