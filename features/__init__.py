"""Feature families computed from the canonical tables; one module per family."""

from __future__ import annotations

import duckdb
import polars as pl


def frame(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> pl.DataFrame:
    """A query's result as a polars DataFrame."""
    return pl.from_arrow(con.sql(sql, params=params or []).to_arrow_table())
