"""Nightly, incremental ETL of telemetry dumps into a DuckDB feature store."""
