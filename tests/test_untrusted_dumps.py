"""Dump content is untrusted: hostile column names, file names and cell values reach DuckDB
as bound parameters or quoted identifiers, never as SQL, and a terminal as text, never as commands."""

import datetime as dt
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
from click.testing import CliRunner
from conftest import copy_store

from etl import store
from features.refresh import nightly
from rcalab.cli import cli

HOSTILE = "x\"' as double); drop table spans; copy (select 1) to '{out}' (--"


def tables(db):
    con = store.connect(db, read_only=True)
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


OBEYED = "\x1b]0;owned\x07\x1b[6n\u202e"  # set the window title, make the terminal type a reply, reverse the text


def test_names_a_terminal_would_obey_are_shown_escaped_by_every_command(replay_store, replay, tmp_path):
    db = tmp_path / "store.duckdb"
    copy_store(replay_store[0], db)
    for part in (db, *Path(f"{db}.shards").glob("*.duckdb")):  # the catalog and its shards
        con = duckdb.connect(str(part))
        for table, column in con.execute("select table_name, column_name from information_schema.columns join "
                                         "information_schema.tables using (table_schema, table_name) where "
                                         "table_type = 'BASE TABLE' and data_type = 'VARCHAR' and table_name not in "
                                         "('manifest', 'shards')").fetchall():
            con.execute(f'update "{table}" set "{column}" = replace("{column}", ?, ?)',
                        ["cartservice", f"cart{OBEYED}service"])
        con.close()
    runner = CliRunner()
    digest = runner.invoke(cli, ["digest", "--db", str(db), "--input", str(replay / "input.json"),
                                 "--uuid", "38ee3d45-82"])
    detect = runner.invoke(cli, ["detect", "--db", str(db)])
    for result in (digest, detect):
        assert result.exit_code == 0, result.output
        assert not {"\x1b", "\x07", "\u202e"} & set(result.output)
    assert "cart\\x1b]0;owned\\x07\\x1b[6n\\u202eservice" in digest.output


def test_a_file_name_a_terminal_would_obey_is_shown_escaped_when_it_fails(tmp_path):
    folder = tmp_path / "dump" / "2025-06-06" / "metric-parquet" / "infra" / "infra_pod"
    folder.mkdir(parents=True)
    (folder / f"infra_pod_cpu{OBEYED}_2025-06-06.parquet").write_bytes(b"not parquet")
    result = subprocess.run([sys.executable, "-m", "rcalab", "etl", str(tmp_path / "dump"), "--db",
                             str(tmp_path / "s.duckdb")], capture_output=True, text=True)  # its own logging
    assert result.returncode == 2 and "cpu\\x1b]0;owned" in result.stderr
    assert not {"\x1b", "\x07", "\u202e"} & set(result.stdout + result.stderr)
