"""Dump content is untrusted: hostile column names, file names and cell values reach DuckDB
as bound parameters or quoted identifiers, never as SQL."""

import datetime as dt

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from features.refresh import nightly

HOSTILE = "x\"' as double); drop table spans; copy (select 1) to '{out}' (--"


def tables(db):
    con = duckdb.connect(str(db), read_only=True)
    try:
        return {r[0] for r in con.execute("select table_name from information_schema.tables").fetchall()}, con.execute(
            "select distinct metric from metric_points").fetchall()
    finally:
        con.close()


def test_hostile_names_and_values_in_a_challenge_dump(tmp_path):
    escaped = tmp_path / "escaped.csv"
    hostile = HOSTILE.format(out=escaped)
    folder = tmp_path / "dump" / "2025-06-06" / "metric-parquet" / "infra" / "infra_pod"
    folder.mkdir(parents=True)
    times = [dt.datetime(2025, 6, 6, 0, m, tzinfo=dt.timezone.utc).isoformat() for m in range(3)]
    table = pa.table({"time": times, "pod": ["cartservice-0'; drop table spans; --"] * 3,
                      "instance": ["aiops-k8s-01"] * 3, hostile: [1.0, 2.0, 3.0]})
    pq.write_table(table, folder / f"infra_pod_{hostile.replace('/', '_')}_2025-06-06.parquet")
    db = tmp_path / "store.duckdb"
    report = nightly(tmp_path / "dump", db)
    assert not report.failed and report.rows == 3
    names, metrics = tables(db)
    assert "spans" in names and not escaped.exists()
    assert metrics == [(hostile,)]  # the name is kept verbatim, as data


def test_hostile_csv_headers_and_cells_in_a_nezha_dump(tmp_path):
    escaped = tmp_path / "escaped.csv"
    hostile = HOSTILE.format(out=escaped)
    metric = tmp_path / "dump" / "2023-01-30" / "metric"
    metric.mkdir(parents=True)
    header = ",".join(["Time", "TimeStamp", "PodName", '"' + hostile.replace('"', '""') + '"'])
    rows = [f"t,{1675036800 + 60 * i},ts-a-service-866bd68c97-dzqgd,{i}.5" for i in range(3)]
    (metric / "ts-a-service'; drop table spans; --_metric.csv").write_text("\n".join([header, *rows]) + "\n")
    db = tmp_path / "store.duckdb"
    report = nightly(tmp_path / "dump", db, "nezha")
    assert not report.failed and report.rows == 3
    names, metrics = tables(db)
    assert "spans" in names and not escaped.exists()
    assert metrics == [(hostile,)]
