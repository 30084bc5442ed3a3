"""Untrusted dumps and flaky endpoints: path spellings, odd files and times, stale rows, bounded waits,
exit status, one diagnose run per answers file, and one-line errors for bad input."""

import datetime as dt
import json
import re
import shutil
import subprocess
import sys
import threading
import time

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from conftest import SHARED, copy_store
from common.errors import RcalabError, StoreError
from etl import store
from features.cases import load_questions
from features.refresh import nightly
from rcalab.cli import cli
from reasoner.agent import openai_chat
from reasoner.batch import run_batch, transcripts_path
from reasoner.llm import LLMConfig, client
from reasoner.stub import StubEndpoint

DAY = "2025-06-06"


def count(db, sql, params=()):
    con = store.connect(db, read_only=True)
    try:
        return con.execute(sql, list(params)).fetchall()[0][0]
    finally:
        con.close()


def infra_file(root, name, times, pod="cartservice-0", value_column="pod_cpu_usage", pod_column="pod"):
    folder = root / DAY / "metric-parquet" / "infra" / "infra_pod"
    folder.mkdir(parents=True, exist_ok=True)
    table = pa.table({"time": times, pod_column: [pod] * len(times), "instance": ["aiops-k8s-01"] * len(times),
                      value_column: [1.0] * len(times)})
    pq.write_table(table, folder / name)
    return folder / name


def minutes(start, n):
    return [(start + dt.timedelta(minutes=m)).replace(tzinfo=dt.timezone.utc).isoformat() for m in range(n)]


# --- the ETL ---------------------------------------------------------------------------------------------

def test_a_dump_named_two_ways_loads_once(replay, tmp_path, monkeypatch):
    dump = tmp_path / "dump"
    shutil.copytree(replay, dump)
    db = tmp_path / "store.duckdb"
    monkeypatch.chdir(tmp_path)
    first = nightly("dump", db)
    again = nightly(dump.resolve(), db)
    assert first.rows > 0 and not again.loaded and not again.failed and again.unchanged > 0
    assert count(db, "select count(*) from spans") == first.rows_by_kind["trace"]


@pytest.mark.parametrize("when", [dt.datetime(9999, 12, 31), dt.datetime(1970, 1, 1)])
def test_times_from_a_broken_clock_fail_the_file_not_the_store(tmp_path, when):
    dump, db = tmp_path / "dump", tmp_path / "store.duckdb"
    good = dt.datetime(2025, 6, 6, 1, 0)
    infra_file(dump, f"infra_pod_pod_cpu_usage_{DAY}.parquet", minutes(good, 5))
    bad = infra_file(dump, f"infra_pod_pod_memory_working_set_bytes_{DAY}.parquet", minutes(good, 4) + minutes(when, 1),
                     value_column="pod_memory_working_set_bytes")
    report = nightly(dump, db)
    assert [p for p, _ in report.failed] == [str(bad)] and "rows with times outside" in report.failed[0][1]
    assert count(db, "select count(*) from metric_points") == 5
    assert count(db, "select count(*) from dirty_days") == 0
    infra_file(dump, bad.name, minutes(good, 5), value_column="pod_memory_working_set_bytes")  # fixed
    assert not nightly(dump, db).failed and count(db, "select count(*) from metric_points") == 10


def test_odd_metric_files_are_recorded_and_the_rest_loads(tmp_path):
    dump, db = tmp_path / "dump", tmp_path / "store.duckdb"
    start = dt.datetime(2025, 6, 6, 1, 0)
    infra_file(dump, f"infra_pod_pod_cpu_usage_{DAY}.parquet", minutes(start, 5))
    renamed = infra_file(dump, f"infra_pod_pod_memory_working_set_bytes_{DAY}.parquet", minutes(start, 5),
                         value_column="pod_memory_working_set_bytes", pod_column="podname")
    stray = infra_file(dump, f"something_else_{DAY}.parquet", minutes(start, 5))
    result = CliRunner().invoke(cli, ["etl", str(dump), "--db", str(db)])
    assert result.exit_code == 2, result.output
    failed = dict(store.connect(db, read_only=True).execute(
        "select path, error from manifest where status = 'failed'").fetchall())
    assert set(failed) == {str(renamed), str(stray)} and "not an apm or infra metric file" in failed[str(stray)]
    assert count(db, "select count(*) from metric_points") == 5


def test_a_nezha_call_graph_is_read_and_per_call_latency_skipped_with_a_reason(tmp_path):
    day = tmp_path / "dump" / "2022-08-22"
    (day / "metric").mkdir(parents=True)
    source = SHARED / "nezha-onlineboutique" / "rca_data" / "2022-08-22" / "metric"
    for name in ("dependency.csv", "source_50.csv", "frontend-579b9bff58-t2dbm_metric.csv"):
        shutil.copy(source / name, day / "metric" / name)
    db = tmp_path / "store.duckdb"
    report = nightly(tmp_path / "dump", db, "nezha")
    assert not report.failed
    assert count(db, "select count(*) from declared_calls where caller = 'frontend' and callee = 'checkoutservice'") == 1
    assert count(db, "select count(*) from manifest where status = 'skipped' and path like '%source_50.csv'") == 1


def test_reloads_and_deletions_leave_no_stale_rows(tmp_path):
    dump, db = tmp_path / "dump", tmp_path / "store.duckdb"
    monday, tuesday = dt.datetime(2025, 6, 6, 1, 0), dt.datetime(2025, 6, 7, 1, 0)
    moving = infra_file(dump, f"infra_pod_pod_cpu_usage_{DAY}.parquet", minutes(monday, 40))
    gone = infra_file(dump, f"infra_pod_pod_memory_working_set_bytes_{DAY}.parquet", minutes(monday, 40),
                      value_column="pod_memory_working_set_bytes")
    nightly(dump, db)
    assert count(db, "select count(*) from metric_anomaly where ts::date = '2025-06-06'") == 80
    infra_file(dump, moving.name, minutes(tuesday, 40))  # its rows move to another day
    gone.unlink()
    report = nightly(dump, db)
    assert report.removed == 1
    assert count(db, "select count(*) from metric_anomaly where ts::date = '2025-06-06'") == 0
    assert count(db, "select count(*) from metric_anomaly where ts::date = '2025-06-07'") == 40
    assert count(db, "select count(*) from metric_points where metric = 'pod_memory_working_set_bytes'") == 0
    assert count(db, "select status from manifest where path = ?", [str(gone)]) == "removed"


def test_a_failed_reload_keeps_its_old_rows_and_says_so(tmp_path):
    dump, db = tmp_path / "dump", tmp_path / "store.duckdb"
    path = infra_file(dump, f"infra_pod_pod_cpu_usage_{DAY}.parquet", minutes(dt.datetime(2025, 6, 6, 1, 0), 5))
    nightly(dump, db)
    path.write_bytes(b"PAR1 not parquet any more")
    nightly(dump, db)
    con = store.connect(db, read_only=True)
    rows, status, error = con.execute("select rows, status, error from manifest where path = ?", [str(path)]).fetchall()[0]
    assert (rows, status) == (5, "failed") and "the 5 rows of its previous load are kept" in error
    assert con.execute("select count(*) from metric_points").fetchall()[0][0] == 5


def test_store_paths_that_cannot_be_written_or_read_give_one_line(tmp_path):
    runner = CliRunner()
    missing = runner.invoke(cli, ["etl", str(tmp_path), "--db", str(tmp_path / "no" / "such" / "store.duckdb"),
                                  "--format", "nezha"])
    assert missing.exit_code == 1 and missing.output.startswith("Error: cannot write beside")
    plain = tmp_path / "plain.duckdb"
    duckdb.connect(str(plain)).execute("create table t (x int)").close()
    (tmp_path / "input.json").write_text(json.dumps([{"uuid": "u", "Anomaly Description":
                                                      "from 2025-06-06T00:00:00Z to 2025-06-06T00:10:00Z"}]))
    result = runner.invoke(cli, ["digest", "--db", str(plain), "--input", str(tmp_path / "input.json"), "--uuid", "u"])
    assert result.exit_code == 1 and "is a DuckDB file but not an rcalab store" in result.output
    assert result.output.count("\n") == 1


# --- questions and the judge ------------------------------------------------------------------------------

@pytest.mark.parametrize("content, message", [
    (b"\xff\xfe[{]", "not UTF-8 text (byte 0)"),
    (b'{"uuid": "u"}', "expected a JSON list of cases, found a dict"),
    (b'["text"]', "entry 0: expected an object"),
    (b'[{"uuid": "u", "Anomaly Description": "from 2025-06-06T00:00:00Z to 2025-06-06T00:00:00Z"}]',
     "the window is empty"),
])
def test_bad_questions_are_one_line(tmp_path, content, message):
    path = tmp_path / "input.json"
    path.write_bytes(content)
    with pytest.raises(RcalabError, match=re.escape(message)):
        load_questions(path)


def test_the_judge_names_bad_lines_and_bad_files(tmp_path):
    truth = tmp_path / "truth.jsonl"
    truth.write_text(json.dumps({"uuid": "u", "instance": "cartservice", "key_metrics": ["rrt"]}) + "\n")
    answers = tmp_path / "answers.jsonl"
    answers.write_text(json.dumps({"uuid": "u", "component": 5, "reason": "rrt", "reasoning_trace": []}) + "\n")
    result = CliRunner().invoke(cli, ["judge", "--truth", str(truth), "--answers", str(answers)])
    assert result.exit_code == 0 and f"{answers}:1: field component of the wrong type" in result.output
    answers.write_bytes(b"\xff\n")
    result = CliRunner().invoke(cli, ["judge", "--truth", str(truth), "--answers", str(answers)])
    assert result.exit_code == 1 and "not UTF-8 text" in result.output and "Traceback" not in result.output


# --- endpoints, time limits, exit status, concurrent runs -------------------------------------------------

@pytest.fixture
def case(replay, replay_store):
    questions = {q.uuid: q for q in load_questions(replay / "input.json")}
    return replay_store[0], questions["38ee3d45-82"]  # pod failure of cartservice


def chat_for(fake, timeout=120.0, retries=2):
    return openai_chat(client(LLMConfig(base_url=fake.url, timeout=timeout, max_retries=retries), fake.url), "fake")


def test_any_openai_compatible_endpoint_answers_over_http(case, tmp_path):
    db, question = case
    reply = {"action": "answer", "option": "1a", "fault_type": "pod failure", "reason": "callers get no answer"}
    fake = StubEndpoint("answer", json.dumps(reply))
    try:
        report = run_batch(db, [question], tmp_path / "a.jsonl", chat_for(fake), model="fake")
    finally:
        fake.close()
    transcript = json.loads(transcripts_path(tmp_path / "a.jsonl").read_text())
    assert report.answered == 1 and not report.fallback and transcript["status"] == "answered"
    assert transcript["tokens"] == {"prompt_tokens": 100, "completion_tokens": 20} and fake.requests == 1


@pytest.mark.parametrize("mode, retries", [("hang", 2), ("fail", 2), ("throttle", 2), ("drip", 2), ("fail", 1000)])
def test_a_case_time_limit_is_a_deadline_whatever_the_endpoint_does(case, tmp_path, mode, retries):
    db, question = case
    fake = StubEndpoint(mode, json.dumps({"action": "answer"}))
    started = time.monotonic()
    try:
        report = run_batch(db, [question], tmp_path / "a.jsonl", chat_for(fake, retries=retries), model="fake",
                           time_limit=4)
    finally:
        fake.close()
    assert time.monotonic() - started < 8  # the limit and the digest: no retry, wait or slow reply runs past it
    assert report.answered == 1 and [u for u, _ in report.fallback] == [question.uuid]
    assert json.loads((tmp_path / "a.jsonl").read_text())["component"] == "cartservice"


def test_a_case_whose_digest_used_up_its_time_answers_from_the_ranking_without_asking_the_model(case, tmp_path):
    db, question = case

    def chat(messages, schema, seconds):
        raise AssertionError("the model was asked past the case's time limit")
    report = run_batch(db, [question], tmp_path / "a.jsonl", chat, model="fake", time_limit=0.001)
    transcript = json.loads(transcripts_path(tmp_path / "a.jsonl").read_text())
    assert [u for u, _ in report.fallback] == [question.uuid] and transcript["past_limit"]
    assert transcript["error"].startswith("time limit of 0 s reached before the model was asked (the digest took ")
    assert transcript["skipped"] == ["paths", "confidence"] and transcript["tool_calls"] == 0
    assert json.loads((tmp_path / "a.jsonl").read_text())["component"] == "cartservice"


def test_concurrent_cases_build_no_more_digests_at_once_than_the_machine_has_cores(case, replay, tmp_path,
                                                                                  monkeypatch):
    import os

    from reasoner import agent

    db, _ = case
    building, most, lock = 0, 0, threading.Lock()
    build = agent.build_digest

    def counted(*args, **kwargs):
        nonlocal building, most
        with lock:
            building += 1
            most = max(most, building)
        try:
            return build(*args, **kwargs)
        finally:
            with lock:
                building -= 1
    monkeypatch.setattr(agent, "build_digest", counted)
    questions = load_questions(replay / "input.json")  # five
    report = run_batch(db, questions, tmp_path / "a.jsonl", None, concurrency=5)
    assert report.answered == 5 and 1 <= most <= (os.cpu_count() or 1)


def test_diagnose_exit_status_says_when_the_model_failed(case, replay, tmp_path, monkeypatch):
    db, question = case
    fake = StubEndpoint("fail")
    monkeypatch.setenv("RCALAB_LLM_BASE_URL", fake.url)
    monkeypatch.setenv("RCALAB_LLM_RETRIES", "0")
    try:
        result = CliRunner().invoke(cli, ["diagnose", "--db", str(db), "--input", str(replay / "input.json"),
                                          "--out", str(tmp_path / "a.jsonl"), "--limit", "2"])
    finally:
        fake.close()
    assert result.exit_code == 2 and "fallback:" in result.output


def test_two_diagnose_runs_on_one_answers_file_are_refused(case, tmp_path):
    db, question = case
    answers = tmp_path / "a.jsonl"
    with store.exclusive(answers, "diagnose run"):
        with pytest.raises(StoreError, match="another diagnose run is writing"):
            run_batch(db, [question], answers, None)
    assert run_batch(db, [question], answers, None).answered == 1


@pytest.mark.parametrize("holder_writes", [True, False])
def test_a_store_another_process_holds_is_busy_not_damaged(replay_store, replay, tmp_path, holder_writes):
    db = tmp_path / "store.duckdb"
    copy_store(replay_store[0], db)
    holder = subprocess.Popen([sys.executable, "-c", "import duckdb, sys, time\n"
                               f"con = duckdb.connect(sys.argv[1], read_only={not holder_writes})\n"
                               "print('open', flush=True)\ntime.sleep(60)", str(db)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "open\n"
        args = ["detect", "--db", str(db)] if holder_writes else ["etl", str(replay), "--db", str(db)]
        result = CliRunner().invoke(cli, args)
    finally:
        holder.kill()
        holder.wait()
    assert result.exit_code == 75, result.output
    assert "in use by another rcalab process" in result.output and f"PID {holder.pid}" in result.output
    assert "damaged" not in result.output and result.output.count("\n") == 1


def test_a_torn_transcripts_line_is_cut_on_resume(case, tmp_path):
    db, question = case
    answers = tmp_path / "a.jsonl"
    transcripts_path(answers).write_text('{"uuid": "torn')
    run_batch(db, [question], answers, None)
    lines = transcripts_path(answers).read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["uuid"] == question.uuid


def test_a_nezha_metric_row_takes_its_time_from_the_text_where_the_epoch_is_wrong(tmp_path):
    metric = tmp_path / "dump" / "2022-08-22" / "metric"
    metric.mkdir(parents=True)
    rows = [f"2022-08-22 03:5{i}:19.60 +0000 UTC m=+0.11,{1861140279 + 60 * i},adservice-5f6585d649-fnmft,{i}.0"
            for i in range(3)]  # the epoch is 200,000,000 s ahead, as in a real Online Boutique file
    (metric / "adservice-5f6585d649-fnmft_metric.csv").write_text("Time,TimeStamp,PodName,CpuUsage(m)\n" +
                                                                  "\n".join(rows) + "\n")
    db = tmp_path / "store.duckdb"
    assert not nightly(tmp_path / "dump", db, "nezha").failed
    assert count(db, "select min(ts)::text from metric_points") == "2022-08-22 03:50:19"


def test_a_store_of_an_older_schema_asks_for_an_etl_run(tmp_path):
    db = tmp_path / "old.duckdb"
    store.connect(db).execute("delete from schema_version where step = (select max(step) from schema_version)").close()
    (tmp_path / "input.json").write_text(json.dumps([{"uuid": "u", "Anomaly Description":
                                                      "from 2025-06-06T00:00:00Z to 2025-06-06T00:10:00Z"}]))
    result = CliRunner().invoke(cli, ["digest", "--db", str(db), "--input", str(tmp_path / "input.json"), "--uuid", "u"])
    assert result.exit_code == 1 and "was built by an older rcalab" in result.output and f"--db {db}" in result.output
    assert result.output.count("\n") == 1


def test_a_store_s_queries_draw_no_progress_bar_of_their_own(tmp_path):
    """DuckDB draws a bar on any query past two seconds; on a day of 10,000 pods it broke into the etl's progress,
    from each Dask worker too. Every store connection, a task's shard's as well, leaves the terminal to rcalab."""
    con = store.connect(tmp_path / "store.duckdb")
    assert con.execute("select current_setting('enable_progress_bar')").fetchone() == (False,)
    con.close()
    with store.write_shard(tmp_path / "shard.duckdb") as shard:
        assert shard.execute("select current_setting('enable_progress_bar')").fetchone() == (False,)
