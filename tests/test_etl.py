"""ETL of both dump formats into the store: tables, features, incremental reruns, bad input."""

import json
import shutil
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from conftest import SHARED, copy_store
from common.errors import StoreError
from etl import loader, store
from features import refresh
from features.refresh import nightly
from rcalab.cli import cli

DAY = "2025-06-06"
FEATURES = ("metric_anomaly", "log_template_minute", "trace_edge_minute", "trace_edge_anomaly")


@pytest.fixture(scope="module")
def loaded(replay_store):
    return replay_store


def q(db, sql, params=None):
    con = store.connect(db, read_only=True)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def test_challenge_dump_loads_every_table(loaded, replay):
    db, report = loaded
    assert report.format == "challenge2025" and not report.failed
    names = {r[0] for r in q(db, "select distinct metric from metric_points")}
    assert {"pod_cpu_usage", "rrt", "error_ratio", "node_cpu_usage_rate", "io_util", "store_up_count"} <= names
    (pod, node), = q(db, "select pod, node from spans where service = 'frontend' and pod is not null limit 1")
    assert pod.startswith("frontend-") and node.startswith("aiops-k8s-")
    (with_parent,), = q(db, "select count(parent_span_id) from spans")
    assert with_parent > 0
    placement = dict(q(db, "select pod, node from placement where pod = 'cartservice-0'"))
    assert placement["cartservice-0"].startswith("aiops-k8s-")
    (skipped,), = q(db, "select count(*) from manifest where status = 'skipped' and path like '%pod_ns_%'")
    assert skipped == 1


def test_every_feature_table_has_rows_in_every_case_window(loaded, replay):
    db, _ = loaded
    for case in map(json.loads, (replay / "groundtruth.jsonl").read_text().splitlines()):
        window = [case["start_time"].rstrip("Z"), case["end_time"].rstrip("Z")]
        for table in FEATURES:
            col = "ts" if table == "metric_anomaly" else "minute"
            (n,), = q(db, f"select count(*) from {table} where {col} between ?::timestamp and ?::timestamp", window)
            assert n > 0, (table, case["uuid"])
    (n,), = q(db, "select count(*) from changepoints")
    assert n > 0


def test_fault_shows_in_the_features(loaded):
    db, _ = loaded
    # Case 345fbe93-80: cpu stress on emailservice, 16:10-16:31 UTC.
    (z,), = q(db, """select median(z) from metric_anomaly where metric = 'pod_cpu_usage' and service = 'emailservice'
                     and ts between '2025-06-05 16:13' and '2025-06-05 16:30'""")
    assert z > 5
    cps = q(db, """select ts from changepoints where metric = 'pod_cpu_usage' and component = 'emailservice-0'
                   and ts between '2025-06-05 16:05' and '2025-06-05 16:15'""")
    assert cps
    # Case 38ee3d45-82: pod failure of cartservice: calls to it fail, callers log 'connection refused'.
    (errors,), = q(db, """select sum(errors) from trace_edge_minute where callee = 'cartservice'
                          and minute between '2025-06-05 18:11' and '2025-06-05 18:33'""")
    assert errors > 0
    (lines,), = q(db, """select count(*) from log_template_minute m join log_templates t using (template_id)
                         where t.template ilike '%connection refused%'
                         and minute between '2025-06-05 18:10' and '2025-06-05 18:35'""")
    assert lines > 0


def test_rerun_on_unchanged_dump_does_no_work(loaded, replay):
    db, first = loaded
    again = nightly(replay, db)
    assert again.loaded == [] and again.unchanged == len(first.loaded) + first.skipped and not again.feature_rows


@pytest.fixture
def dump_copy(replay, tmp_path):
    out = tmp_path / "dump"
    shutil.copytree(replay, out)
    return out


def test_changed_file_is_reloaded_without_duplicates(dump_copy, tmp_path):
    db = tmp_path / "s.duckdb"
    nightly(dump_copy, db)
    path = dump_copy / DAY / "log-parquet" / f"log_filebeat-server_{DAY}_05-00-00.parquet"
    table = pq.read_table(path)
    pq.write_table(table.slice(0, 10), path)
    report = nightly(dump_copy, db)
    assert report.loaded == [str(path)]
    (rows,), = q(db, "select count(*) from log_lines l join manifest m using (file_id) where m.path = ?", [str(path)])
    assert rows == 10


def test_bad_files_are_recorded_and_the_rest_loads(dump_copy, tmp_path):
    logs = dump_copy / DAY / "log-parquet"
    (dump_copy / DAY / "trace-parquet" / f"trace_jaeger-span_{DAY}_07-00-00.parquet").write_bytes(b"not parquet")
    no_message = pq.read_table(logs / f"log_filebeat-server_{DAY}_08-00-00.parquet").drop_columns(["message"])
    pq.write_table(no_message, logs / f"log_filebeat-server_{DAY}_08-00-00.parquet")
    bad_time = pq.read_table(logs / f"log_filebeat-server_{DAY}_09-00-00.parquet")
    bad_time = bad_time.set_column(1, "@timestamp", pa.array(["yesterday"] * bad_time.num_rows))
    pq.write_table(bad_time, logs / f"log_filebeat-server_{DAY}_09-00-00.parquet")
    shutil.copy(logs / f"log_filebeat-server_{DAY}_10-00-00.parquet",
                logs / f"log_filebeat-server_{DAY}_10-00-00-deleted.parquet")
    db = tmp_path / "s.duckdb"
    result = CliRunner().invoke(cli, ["etl", str(dump_copy), "--db", str(db)])
    assert result.exit_code == 2, result.output
    failed = dict(q(db, "select path, error from manifest where status = 'failed'"))
    assert set(failed) == {str(logs / f"log_filebeat-server_{DAY}_0{h}-00-00.parquet") for h in (8, 9)} | {
        str(dump_copy / DAY / "trace-parquet" / f"trace_jaeger-span_{DAY}_07-00-00.parquet")}
    assert "message" in failed[str(logs / f"log_filebeat-server_{DAY}_08-00-00.parquet")]
    assert "yesterday" in failed[str(logs / f"log_filebeat-server_{DAY}_09-00-00.parquet")]
    assert f"failed: {logs / f'log_filebeat-server_{DAY}_08-00-00.parquet'}: " in result.output
    (loaded,), = q(db, "select count(*) from manifest where status = 'loaded'")
    assert loaded == 166 - 1 - 3
    (deleted,), = q(db, "select status from manifest where path like '%-deleted.parquet'")
    assert deleted == "skipped"


def test_interrupted_load_leaves_no_half_written_day(dump_copy, tmp_path, monkeypatch):
    db = tmp_path / "s.duckdb"
    real = loader._load

    def crash(con, adapter, unit):
        if unit[0].kind == "trace":
            raise KeyboardInterrupt
        return real(con, adapter, unit)

    monkeypatch.setattr(loader, "_load", crash)
    with pytest.raises(KeyboardInterrupt):
        nightly(dump_copy, db)
    assert q(db, "select count(*) from spans") == [(0,)] and q(db, "select count(*) from shards") == [(0,)]
    assert q(db, "select count(*) from manifest where status = 'loaded'") == [(0,)]
    monkeypatch.setattr(loader, "_load", real)
    report = nightly(dump_copy, db)
    assert not report.failed and report.feature_rows["trace_edge_minute"] > 0
    (dupes,), = q(db, "select count(*) - count(distinct (file_id, ts, metric, component)) from metric_points")
    assert dupes == 0
    listed = {f for f, in q(db, "select file from shards")}
    assert {p.name for p in Path(f"{db}.shards").iterdir()} == listed  # the interrupted day's file is gone


def test_plain_duckdb_reads_every_row_of_a_moved_store_from_anywhere(loaded, tmp_path, monkeypatch):
    moved = tmp_path / "moved"
    moved.mkdir()
    db = copy_store(loaded[0], moved / "s.duckdb")  # the file and its folder, taken elsewhere
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    plain = duckdb.connect(str(db), read_only=True)  # as a stranger opens it: no rcalab
    for table in store.LOADED + store.FEATURES:
        (n,), = plain.execute(f"select count(*) from {table}").fetchall()
        assert (n,) == tuple(q(db, f"select count(*) from {table}")[0]), table
    (spans,), = plain.execute("select count(*) from spans").fetchall()
    (templated,), = plain.execute("select count(template_id) from log_lines").fetchall()
    assert spans > 0 and templated > 0
    plain.close()
    other = duckdb.connect()  # attached to another database, the store's views cannot find its folder: they say so
    other.execute(f"attach '{db}' as s (read_only)")
    with pytest.raises(duckdb.InvalidInputException, match=r"open the store file itself .* rcalab sql --db STORE"):
        other.execute("select count(*) from s.spans").fetchall()


def test_a_migration_alters_the_tables_a_catalog_shows_as_views(loaded, tmp_path, monkeypatch):
    db = copy_store(loaded[0], tmp_path / "s.duckdb")
    monkeypatch.setattr(store, "MIGRATIONS", store.MIGRATIONS + [("a later column", "alter table spans add column x int")])
    store.connect(db).close()  # as the next `rcalab etl` opens it
    spans = q(db, "select count(*) from spans")
    plain = duckdb.connect(str(db), read_only=True)
    assert plain.execute("select count(*) from spans").fetchall() == spans != [(0,)]  # a view over the shards again
    assert plain.execute("select table_type from information_schema.tables where table_name = 'spans'").fetchall() \
        == [("VIEW",)]


def test_sql_runs_a_query_on_a_store(loaded):
    result = CliRunner().invoke(cli, ["sql", "--db", str(loaded[0]), "--csv",
                                      "select count(*) as spans from spans where service = 'frontend'"])
    assert result.exit_code == 0, result.output
    header, value = result.output.splitlines()
    assert header == "spans" and int(value) == q(loaded[0], "select count(*) from spans where service = 'frontend'")[0][0]
    wrong = CliRunner().invoke(cli, ["sql", "--db", str(loaded[0]), "select nothing from nowhere"])
    assert wrong.exit_code == 1 and wrong.output.startswith("Error: the query failed: Catalog Error: Table with name")


@pytest.mark.parametrize("query, said", [
    ("detach shard_1", "is detach, not a read"),
    ("attach 'SHARD' as w (read_only false)", "is attach, not a read"),
    ("delete from spans", "is delete, not a read"),
    ("copy (select 1) to 'OUT/x.csv'", "is copy, not a read"),
    ("export database 'OUT/exp'", "is export, not a read"),
    ("install httpfs", "is install or load, not a read"),
    ("load httpfs", "is install or load, not a read"),
    ("set enable_external_access = true", "is set, not a read"),
    ("select 1; delete from spans", "holds 2 statements"),
    ("select * from read_csv('OUT/missing.csv')", "reaches outside the store, which rcalab sql does not allow"),
])
def test_sql_reads_and_cannot_write(loaded, tmp_path_factory, query, said):
    """What once emptied the store's spans (a detach, a read-write attach and a delete), wrote files outside it or
    folders under the home, or was said to be a damaged store: one line saying what was refused, nothing written."""
    folder = tmp_path_factory.getbasetemp() / "sql-refused"
    if not folder.exists():  # one copy for every case: each leaves it as it was
        folder.mkdir()
        copy_store(loaded[0], folder / "s.duckdb")
        (folder / "out").mkdir()
    db, out = folder / "s.duckdb", folder / "out"
    shard = next(Path(f"{db}.shards").glob("load-*.duckdb"))
    before = {p: p.stat().st_mtime_ns for p in folder.rglob("*")}
    spans = q(db, "select count(*) from spans")
    text = query.replace("SHARD", str(shard)).replace("OUT", str(out))
    result = CliRunner().invoke(cli, ["sql", "--db", str(db), text])
    assert result.exit_code == 1 and result.output.startswith("Error: the query ") and said in result.output, \
        result.output
    assert len(result.output.splitlines()) == 1
    assert {p: p.stat().st_mtime_ns for p in folder.rglob("*")} == before
    assert q(db, "select count(*) from spans") == spans


def test_second_etl_on_the_same_store_refuses(replay, tmp_path):
    db = tmp_path / "s.duckdb"
    with store.exclusive(db):
        with pytest.raises(StoreError, match=r"another ETL is writing .*s\.duckdb"):
            nightly(replay, db)


def test_template_ids_survive_nightly_runs(dump_copy, tmp_path):
    db = tmp_path / "s.duckdb"
    first_day = dump_copy / DAY
    moved = tmp_path / "later"
    shutil.move(first_day / "log-parquet", moved)  # night 1: no logs yet
    (first_day / "log-parquet").mkdir()
    shutil.copy(moved / f"log_filebeat-server_{DAY}_02-00-00.parquet", first_day / "log-parquet")
    nightly(dump_copy, db)
    before = dict(q(db, "select masked, template_id from log_masked"))
    for p in moved.iterdir():  # night 2: the rest of the logs arrive
        shutil.copy(p, first_day / "log-parquet")
    nightly(dump_copy, db)
    after = dict(q(db, "select masked, template_id from log_masked"))
    assert len(after) >= len(before) and all(after[m] == t for m, t in before.items())


def test_unknown_format_and_undetectable_dump(tmp_path):
    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(cli, ["etl", str(tmp_path / "empty"), "--db", str(tmp_path / "s.duckdb")])
    assert result.exit_code == 1
    assert result.output == (f"Error: {tmp_path / 'empty'}: no known dump layout (looked for challenge2025, nezha, otlp, rcaeval, "
                             "cloudopsbench); "
                             "pass --format\n")


def test_schema_lists_every_table(loaded):
    db, _ = loaded
    result = CliRunner().invoke(cli, ["schema", "--db", str(db)])
    assert result.exit_code == 0
    for table in ("manifest", "metric_points", "log_lines", "spans", "placement", *FEATURES, "changepoints",
                  "log_templates"):
        assert f"\n{table}: " in "\n" + result.output


NEZHA = SHARED / "nezha-trainticket" / "rca_data" / "2023-01-30"


@pytest.fixture(scope="module")
def nezha_few_minutes(tmp_path_factory):
    """Three minutes of the real Train Ticket day (the first fault) and eight pods' metrics."""
    root = tmp_path_factory.mktemp("nezha") / "rca_data" / "2023-01-30"
    for sub in ("log", "trace", "metric"):
        (root / sub).mkdir(parents=True)
    shutil.copy(NEZHA / "2023-01-30-fault_list.json", root)
    for minute in ("11_51", "11_52", "11_53"):
        shutil.copy(NEZHA / "log" / f"{minute}_log.csv", root / "log")
        shutil.copy(NEZHA / "trace" / f"{minute}_trace.csv", root / "trace")
    for path in sorted((NEZHA / "metric").glob("ts-[a-c]*_metric.csv"))[:8] + [NEZHA / "metric" / "front_service.csv"]:
        shutil.copy(path, root / "metric")
    normal, published = root.parents[1] / "construct_data" / "2023-01-30", NEZHA.parents[1] / "construct_data" / "2023-01-30"
    for sub, name in (("log", "11_39_log.csv"), ("trace", "11_39_trace.csv"), ("metric", "front_service.csv")):
        (normal / sub).mkdir(parents=True)
        shutil.copy(published / sub / name, normal / sub)
    return root.parents[1]


def test_real_train_ticket_minutes_load(nezha_few_minutes, tmp_path):
    db = tmp_path / "tt.duckdb"
    report = nightly(nezha_few_minutes, db)
    assert report.format == "nezha" and not report.failed, report.failed
    services = {r[0] for r in q(db, "select distinct service from spans")}
    assert {"ts-contacts-service", "ts-gateway-service"} <= services
    assert q(db, "select count(*) from spans where parent_span_id = 'root'") == [(0,)]
    # The normal period's minute (11:39) loads with the day, its repeated metric file is skipped.
    assert q(db, "select count(*) > 0 from log_lines where ts < '2023-01-30 11:45'") == [(True,)]
    assert q(db, "select count(*) > 0 from spans where ts < '2023-01-30 11:45'") == [(True,)]
    assert q(db, "select min(ts) >= '2023-01-30 11:35' from log_lines") == [(True,)]
    assert q(db, "select count(*) from manifest where status = 'skipped' and error like 'the normal period%'") \
        == [(1,)]
    (metric,), = q(db, "select count(distinct metric) from metric_points where component_kind = 'pod'")
    assert metric >= 15
    assert q(db, "select count(*) > 0 from log_templates") == [(True,)]
    (edges,), = q(db, "select count(*) from trace_edge_minute where caller = 'ts-gateway-service'")
    assert edges > 0


@pytest.mark.parametrize("line, level, masked", [
    ("16:53:55.201 INFO  t.s.TravelServiceImpl#532 TraceID: 7 [getRoute]", "INFO", "t.s.TravelServiceImpl#<NUM> TraceID: <NUM> [getRoute]"),
    ("12:01:02.3 ERROR t.s.TravelServiceImpl#532 TraceID: 7 [getRoute]", "ERROR", "t.s.TravelServiceImpl#<NUM> TraceID: <NUM> [getRoute]"),
    ("[INFO] [cluster.go:12] [store]", "INFO", "cluster.go:<NUM>] [store]"),
    ("plain line with an error inside", None, "plain line with an error inside"),
])
def test_severity_is_its_own_column_and_not_part_of_the_template(line, level, masked):
    from etl.loglines import level_sql, mask_sql

    got = duckdb.connect().execute(f"select {level_sql('t')}, {mask_sql('t')} from (select ? as t)", [line]).fetchall()
    assert got == [(level, masked)]


def test_error_lines_are_counted_per_template_minute(loaded):
    db, _ = loaded
    (errors, lines), = q(db, """select sum(m.errors), sum(m.lines) from log_template_minute m join log_templates t
                                using (template_id) where t.template like 'request %'""")
    assert 0 < errors < lines  # the frontend's error and debug "request complete" lines share one template


def test_spans_that_cannot_be_are_left_out_counted_and_change_no_answer(dump_copy, replay_store, replay, tmp_path):
    for path in sorted((dump_copy / DAY / "trace-parquet").glob("*.parquet")):
        table = pq.read_table(path)
        column = table.schema.get_field_index("duration")
        fifth = table.slice(0, table.num_rows // 5)  # new spans lasting -123 s, and one lasting 2^63 us
        absurd = fifth.set_column(column, "duration", pa.array([-123_000_000] * (fifth.num_rows - 1) + [2**63 - 1]))
        pq.write_table(pa.concat_tables([table, absurd]), path)
    db = tmp_path / "s.duckdb"
    report = nightly(dump_copy, db)
    assert not report.failed
    said = dict(q(db, "select path, error from manifest where kind = 'trace' and path like ?", [f"%{DAY}_05-%"]))
    assert list(said.values())[0].startswith("left out ") and "spans of negative duration" in list(said.values())[0]
    assert "spans over a day long (1)" in list(said.values())[0]
    (spans,), = q(db, "select count(*) from spans where duration_us < 0 or duration_us > 86400e6")
    assert spans == 0 and not q(db, "select * from dirty_days")
    clean, dirty = tmp_path / "clean.jsonl", tmp_path / "dirty.jsonl"
    for store_path, answers in ((replay_store[0], clean), (db, dirty)):
        result = CliRunner().invoke(cli, ["diagnose", "--agent", "rank", "--db", str(store_path),
                                          "--input", str(replay / "input.json"), "--out", str(answers)])
        assert result.exit_code == 0, result.output
    assert dirty.read_text() == clean.read_text()


def test_a_case_whose_window_lacks_features_says_so_and_exits_2(replay_store, replay, tmp_path):
    db = tmp_path / "s.duckdb"
    copy_store(replay_store[0], db)
    con = store.connect(db)
    con.execute("insert into dirty_days select distinct ts::date from spans")  # as after a failed refresh
    con.close()
    answers = tmp_path / "a.jsonl"
    result = CliRunner().invoke(cli, ["diagnose", "--agent", "rank", "--db", str(db), "--input",
                                      str(replay / "input.json"), "--out", str(answers), "--limit", "1"])
    assert result.exit_code == 2 and "incomplete: " in result.output and "were not computed" in result.output
    transcript = json.loads((tmp_path / "a.transcripts.jsonl").read_text())
    assert transcript["features_missing"] and answers.read_text()


def test_a_day_s_change_points_leave_out_the_hour_before_it_that_the_read_holds():
    """One read serves the anomaly table (the hour before the day is its baseline) and the change points: a level
    shift in that hour is no change point of the day, and the day's own are found as on the day's points alone."""
    import datetime as dt

    import polars as pl

    from features.changepoints import find_changepoints

    day = dt.date(2025, 6, 5)
    start = dt.datetime.combine(day, dt.time())
    minutes = range(-60, 240)
    values = [30.0 if m < -30 else 1.0 if m < 120 else 9.0 for m in minutes]  # steps at -30 and at 120 minutes
    points = pl.DataFrame({"sid": [1] * len(values), "ts": [start + dt.timedelta(minutes=m) for m in minutes],
                           "value": values})
    names = pl.DataFrame({"sid": [1], "source": ["infra_pod"], "component": ["a-0"], "service": ["a"],
                          "metric": ["pod_cpu_usage"]})
    found = find_changepoints((names, points), day)
    alone = find_changepoints((names, points.filter(pl.col("ts") >= start)), day)
    assert found["ts"].to_list() == alone["ts"].to_list() == [start + dt.timedelta(minutes=120)]


def _searched_alone(x) -> list[int]:
    """ruptures' search of a series with no screen before it: the reference the screens' tests compare with."""
    import numpy as np
    import ruptures

    from features import changepoints as cp

    algo = ruptures.KernelCPD(kernel="linear", min_size=cp.MIN_SIZE).fit(x.reshape(-1, 1))
    return [int(b) for b in algo.predict(pen=cp.PENALTY_PER_LOG_N * np.log(len(x)))[:-1]]


def test_the_screen_drops_only_series_the_search_finds_nothing_in():
    """The search of every pair of points is most of a long day's features; a screen drops the series it proves have
    no change point (issue 73). On series of every kind near the penalty (noise and counts with shifts and bumps of
    every height; mostly-zero counts with spikes alone, in bursts, at the ends, of either sign; a level shift written
    in spikes), what is found is what the search alone finds, and most quiet series are dropped."""
    import numpy as np

    from features import changepoints as cp

    rng = np.random.default_rng(7)
    series = []
    for i in range(600):
        n = (240, 1440, 243)[i % 3]
        x = rng.standard_normal(n) if i % 4 else rng.poisson(0.3, n).astype(float)
        start, width = rng.integers(0, n - 30), rng.integers(3, 30)
        x[start:start + width] += rng.choice([0.0, 1.0, 2.0, 3.0, 8.0]) * rng.choice([-1, 1])
        if i % 5 == 0:
            x[rng.integers(0, n)] += rng.uniform(5, 20)
        series.append(x)
    for i in range(400):
        x = np.zeros((240, 240, 1440, 243)[i % 4])
        for _ in range(rng.integers(0, 6)):  # bursts of 1 to 3 spikes
            at, width = rng.integers(0, len(x)), rng.integers(1, 4)
            x[at:at + width] += rng.uniform(1, 12, size=len(x[at:at + width])) * rng.choice([-1, 1], p=[0.2, 0.8])
        if i % 7 == 0:
            x[-rng.integers(1, 4):] += rng.uniform(3, 10)
        series.append(x)
    shift = np.zeros(240)
    shift[5:120:4], shift[125::4] = 2.2, -2.2  # cut in two, each half gains
    series.append(shift)
    found = cp.changepoints(series)
    assert found == [_searched_alone(x) for x in series]
    assert found[-1] != []
    dropped = [cp._quiet(x[None, :], cp.PENALTY_PER_LOG_N * np.log(len(x)))[0] for x in series]
    assert sum(dropped[:600]) > 150 and sum(dropped[600:]) > 100


def test_a_rise_stands_out_against_its_own_hour_however_high_the_day_s_other_faults_went():
    """Seen on a simulated phase-one day: JVM latency faults took adservice's response time to 1.2M, and its later
    CPU fault's fivefold rise (3k -> 16k) read z 0.2, the day's 99th percentile its scale's floor."""
    import polars as pl

    from features.anomaly import robust_z

    minutes = 24 * 60
    value = [3000.0 + 50 * (i % 7) for i in range(minutes)]
    for start, level in ((60, 1.2e6), (240, 1.2e6), (600, 16_000.0)):  # two earlier faults, then the rise
        value[start:start + 20] = [level] * 20
    out = robust_z(pl.DataFrame({"sid": [1] * minutes, "minute": list(range(minutes)), "value": value}),
                   ["sid"], "value", "minute")
    assert out["z"][605] > 10


def test_a_day_s_features_computed_a_batch_of_series_at_a_time_are_those_of_the_whole_day(replay, loaded, tmp_path,
                                                                                         monkeypatch):
    """The anomaly table and the change points are computed over batches of whole series, so that a day of many
    components holds a few batches, not the day (issue 73): a hundred small batches give the same rows as one."""
    import features

    monkeypatch.setattr(features, "SERIES_POINTS", 2_000)
    nightly(replay, tmp_path / "small.duckdb")
    for table in ("metric_anomaly", "changepoints"):
        assert sorted(q(tmp_path / "small.duckdb", f"select * from {table}")) == sorted(q(loaded[0], f"select * from {table}"))
    (batches,), = q(tmp_path / "small.duckdb", "select count(*) // 2000 from metric_points")
    assert batches > 100


def test_a_series_points_of_one_time_are_read_as_their_mean_and_parts_share_the_series():
    """Points of one series at one time (two files of the same minute) are read as one, their mean, without grouping
    every point; the parts of a day hold every series once, those without a component in the first."""
    import datetime as dt

    from features import metric_series, number_series

    con = duckdb.connect()
    con.execute("create table metric_points (ts timestamp, source text, component text, service text, metric text, "
                "value double)")
    t, later = dt.datetime(2025, 6, 5), dt.datetime(2025, 6, 5, 0, 1)
    rows = [(t, "a-0", 1.0), (t, "a-0", 3.0), (later, "a-0", 5.0), (t, None, 7.0), (t, None, 9.0),
            *((t, f"b-{i}", float(i)) for i in range(20))]
    con.executemany("insert into metric_points values (?, 'apm', ?, 'a', 'rrt', ?)", rows)
    con.execute("create table series (sid integer, source text, component text, service text, metric text)")
    number_series(con, t, later + dt.timedelta(minutes=1))
    (names, points), = metric_series(con, t, later + dt.timedelta(minutes=1))
    assert names["component"][0] == "a-0" and names["component"][-1] is None
    assert points.filter(points["sid"] == 1)["value"].to_list() == [2.0, 5.0]
    assert points.filter(points["sid"] == len(names))["value"].to_list() == [8.0]

    parts = [[(n["component"], len(p.filter(p["sid"] == n["sid"])))
              for names, p in metric_series(con, t, later + dt.timedelta(minutes=1), part, 4)
              for n in names.iter_rows(named=True)] for part in range(4)]
    assert sorted(sum(parts, []), key=str) == sorted([("a-0", 2), (None, 1), *((f"b-{i}", 1) for i in range(20))],
                                                     key=str)
    assert (None, 1) in parts[0]


def test_change_points_of_series_without_a_service_and_then_with_one_make_one_table():
    """A batch whose first hundred change points were a node's (no service) failed at the first pod's: polars
    guessed the service column's type from the first rows."""
    import datetime as dt

    import polars as pl

    from features.changepoints import find_changepoints

    day = dt.date(2025, 6, 5)
    start = dt.datetime.combine(day, dt.time())
    minutes = range(240)
    steps = [1.0 if m < 120 else 9.0 for m in minutes]
    points = pl.DataFrame({"sid": [s for s in range(101, 203) for _ in minutes],
                           "ts": [start + dt.timedelta(minutes=m) for _ in range(101, 203) for m in minutes],
                           "value": steps * 102})
    names = pl.DataFrame({"sid": range(101, 203), "source": ["infra_node"] * 101 + ["infra_pod"],
                          "component": [f"node-{i}" for i in range(101)] + ["f1-0"], "service": [None] * 101 + ["f1"],
                          "metric": ["cpu"] * 102})
    found = find_changepoints((names, points), day)
    assert len(found) == 102 and found["service"].to_list()[-1] == "f1"


def test_a_task_s_duckdb_holds_at_most_its_share_of_memory_and_spills_the_rest(tmp_path):
    """DuckDB's own bound is 80 % of the machine: a day of 10,000 pods took 12 GB to sort its anomaly table, and a
    machine's workers would each take as much. A task's connection holds `task_memory` (issue 73)."""
    from common.tasks import TASK_MEMORY

    with store.write_shard(tmp_path / "x.duckdb") as con:
        (limit,), = con.execute("select current_setting('memory_limit')").fetchall()
    assert limit == f"{TASK_MEMORY / 2**30:.1f} GiB"


def _tables(db: Path) -> dict[str, list]:
    """Every table a reader sees (the shards' through the catalog's views), its rows sorted: what a store holds,
    whatever shards hold it."""
    con = store.connect(db, read_only=True)
    try:
        names = [*store.LOADED, *store.FEATURES, "log_templates", "log_masked"]
        tables = {t: sorted(map(str, con.execute(f"select * from {t}").fetchall())) for t in names}
        tables["manifest"] = sorted(con.execute("select path, kind, rows, status from manifest").fetchall())
        return tables
    finally:
        con.close()


def _feature_shards(db: Path) -> dict[str, str]:
    con = store.connect(db, read_only=True)
    try:
        return dict(con.execute("select key, file from shards where kind = 'features'").fetchall())
    finally:
        con.close()


def _dirty(db: Path) -> None:
    con = store.connect(db)
    con.execute("insert or ignore into dirty_days select distinct lo::date from shards where kind = 'features'")
    con.close()


def test_a_day_s_features_in_parts_hold_what_one_task_does_and_take_the_day_s_place_together(
        replay, replay_store, tmp_path, monkeypatch):
    """A day of many series computes its features in parts (tasks a worker each: a hash of the components' names each,
    the first also the tables not of series), with the tables of one task's. Refreshed in another split, the new
    parts replace the old together; a part that fails leaves the day's old shards and the day marked (issue 73)."""
    whole, _ = replay_store
    db = tmp_path / "parts.duckdb"
    monkeypatch.setattr(refresh, "PART_SERIES", 200)  # the replay's day: about a thousand series
    assert not nightly(replay, db).failed
    first = _feature_shards(db)
    assert len(first) >= 3 and all("of" in k for k in first)
    assert _tables(db) == _tables(whole)

    monkeypatch.setattr(refresh, "PART_SERIES", 10**9)  # one task again: the parts go
    _dirty(db)
    nightly(replay, db)
    again = _feature_shards(db)
    assert len(again) == len({k[:10] for k in first}) and not set(again.values()) & set(first.values())
    assert {p.name for p in store.shard_dir(db).glob("features-*.duckdb")} == set(again.values())
    assert _tables(db) == _tables(whole)

    real = refresh.feature_day
    monkeypatch.setattr(refresh, "PART_SERIES", 200)
    monkeypatch.setattr(refresh, "feature_day", lambda task: "broken" if task.part == 1 else real(task))
    _dirty(db)
    report = nightly(replay, db)
    assert report.failed and _feature_shards(db) == again
    assert {p.name for p in store.shard_dir(db).glob("features-*.duckdb")} == set(again.values())
    con = store.connect(db, read_only=True)
    assert con.execute("select count(*) from dirty_days").fetchone()[0] >= 1
    con.close()


def test_a_day_loaded_in_parts_holds_what_one_task_does_and_each_part_rebuilds_alone(replay, replay_store, tmp_path,
                                                                                      monkeypatch):
    """A day of many bytes loads in parts, tasks a worker each, with the tables of one task's load (file ids and
    template ids too); a day split otherwise (its bytes grew past another part) is rebuilt whole, its old parts gone;
    a part's shard lost loads its own files again, and no other's."""
    whole, _ = replay_store
    db = tmp_path / "parts.duckdb"
    monkeypatch.setattr(loader, "PART_BYTES", 2**22)  # the replay's day: about ten megabytes
    report = nightly(replay, db)
    con = store.connect(db, read_only=True)
    keys = [k for k, in con.execute("select key from shards where kind = 'load' order by key").fetchall()]
    con.close()
    assert len(keys) >= 3 and all("of" in k for k in keys) and not report.failed
    assert _tables(db) == _tables(whole)

    monkeypatch.setattr(loader, "PART_BYTES", 2**20)  # another split: every part rebuilt, the old ones gone
    assert len(nightly(replay, db).loaded) == len(report.loaded)
    con = store.connect(db, read_only=True)
    again = {k for k, in con.execute("select key from shards where kind = 'load'").fetchall()}
    files = {f for f, in con.execute("select file from shards").fetchall()}
    con.close()
    assert not again & set(keys) and {p.name for p in store.shard_dir(db).glob("*.duckdb")} == files
    assert _tables(db) == _tables(whole)
    assert nightly(replay, db).loaded == []  # as it is: nothing to do

    lost = sorted(again)[1]
    (store.shard_dir(db) / next(f for f in files if f.startswith(f"load-{lost}."))).unlink()
    mended = nightly(replay, db)
    parts = int(lost.rsplit("of", 1)[1])
    assert mended.mended and mended.loaded and all(
        f"{loader._part(path, parts)}of{parts}" == lost.rsplit("-", 1)[1] for path in mended.loaded)
    assert _tables(db) == _tables(whole)


def test_a_series_keeps_its_number_from_day_to_day_and_new_ones_are_numbered_after():
    """`series` numbers each series once: a later day's new series after the highest number, in the order of their
    names, and `metric_anomaly` names each point through it."""
    import datetime as dt

    from etl import store
    from features import number_series

    con = duckdb.connect()
    for _, sql in store.MIGRATIONS:
        con.execute(sql)
    day1, day2 = dt.datetime(2025, 6, 5), dt.datetime(2025, 6, 6)
    con.executemany("insert into metric_points (ts, source, component, service, metric, value) "
                    "values (?, 'apm', ?, ?, 'rrt', 1.0)",
                    [(day1, "b-0", "b"), (day1, "a-0", "a"), (day2, "b-0", "b"), (day2, "a-1", "a")])
    first = number_series(con, day1, day2).to_pylist()
    second = number_series(con, day2, day2 + dt.timedelta(days=1)).to_pylist()
    assert [(s["sid"], s["component"]) for s in first] == [(1, "a-0"), (2, "b-0")]
    assert [(s["sid"], s["component"]) for s in second] == [(2, "b-0"), (3, "a-1")]
    con.execute("insert into anomaly_points values (?, 3, 1.0, 1.0, 0.0)", [day2])
    assert con.execute("select component, service from metric_anomaly").fetchall() == [("a-1", "a")]
