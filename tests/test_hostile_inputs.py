"""What a user can type or a dump can hold destroys no store, hangs no run and prints no traceback: an output
path that names the store, a store cut short, pipes and broken links in a dump, replies an endpoint garbles,
and input files of the wrong shape."""

import json
import os
import subprocess
import sys

import duckdb
import pytest
from conftest import copy_store
from click.testing import CliRunner
from test_reliability import chat_for

from common.errors import OutputError
from etl import store
from rcalab.cli import cli
from reasoner.batch import run_batch, transcripts_path
from reasoner.stub import StubEndpoint


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def one_line_error(result, *words):
    assert result.exit_code == 1, result.output
    assert result.output.startswith("Error: ") and result.output.count("\n") == 1, result.output
    assert "Traceback" not in result.output
    for word in words:
        assert word in result.output, result.output


# --- data loss and hangs ----------------------------------------------------------------------------------

@pytest.fixture
def store_copy(replay_store, tmp_path):
    db = tmp_path / "store.duckdb"
    copy_store(replay_store[0], db)
    return db


def test_an_output_path_naming_the_store_is_refused_and_the_store_stays_whole(store_copy, replay, tmp_path):
    size = store_copy.stat().st_size
    result = invoke("diagnose", "--agent", "rank", "--db", store_copy, "--input", replay / "input.json",
                    "--out", store_copy)
    one_line_error(result, "is the store itself")
    assert store_copy.stat().st_size == size
    assert store.connect(store_copy, read_only=True).execute("select count(*) from spans").fetchone()[0] > 0


@pytest.mark.parametrize("kind", ["parquet", "folder", "binary"])
def test_an_output_path_of_another_kind_is_refused_before_anything_is_written(replay_store, tmp_path, kind):
    out = tmp_path / "out.jsonl"
    if kind == "folder":
        out.mkdir()
    else:
        out.write_bytes(b"PAR1\x00\x01" if kind == "parquet" else b"\x00\x00DUCK")
    before = b"" if kind == "folder" else out.read_bytes()
    with pytest.raises(OutputError):
        run_batch(replay_store[0], [], out, None)
    assert kind == "folder" or out.read_bytes() == before


@pytest.mark.parametrize("command", ["digest", "diagnose", "etl"])
def test_a_store_cut_short_is_damaged_for_every_command(store_copy, replay, tmp_path, command):
    with open(store_copy, "r+b") as f:
        f.truncate(store_copy.stat().st_size * 9 // 10)
    questions = replay / "input.json"
    args = {"digest": ["digest", "--db", store_copy, "--input", questions, "--uuid", "38ee3d45-82"],
            "diagnose": ["diagnose", "--agent", "rank", "--db", store_copy, "--input", questions,
                         "--out", tmp_path / "a.jsonl"],
            "etl": ["etl", replay, "--db", store_copy]}[command]
    one_line_error(invoke(*args), "is damaged", "rcalab etl DUMP --db NEW")


@pytest.mark.parametrize("kind, harm", [("load", "deleted"), ("load", "cut"), ("features", "cut")])
def test_a_shard_missing_or_cut_short_is_mended_by_the_next_load(store_copy, replay, tmp_path, kind, harm):
    """Readers refuse a store whose shard is lost, in one line naming the shard; the next `etl` of the dump finds it,
    says so, reads that day again (or computes its features again) and leaves the store as it was before the harm
    (once, a shard cut in half was 'loaded 0 files, 136 unchanged', exit 0, and the store stayed broken)."""
    def counts():
        con = store.connect(store_copy, read_only=True)
        try:
            return [con.execute(f"select count(*) from {t}").fetchone()[0] for t in store.LOADED + store.FEATURES]
        finally:
            con.close()

    whole = counts()
    shard = next(store.shard_dir(store_copy).glob(f"{kind}-*.duckdb"))
    if harm == "deleted":
        shard.unlink()
    else:
        with open(shard, "r+b") as f:
            f.truncate(shard.stat().st_size // 2)
    one_line_error(invoke("digest", "--db", store_copy, "--input", replay / "input.json", "--uuid", "38ee3d45-82"),
                   f"its shard {shard}", f"'rcalab etl DUMP --db {store_copy}' of its dump mends it")
    result = invoke("etl", replay, "--db", store_copy)
    assert result.exit_code == 0, result.output
    said = next(line for line in result.output.splitlines() if line.startswith(f"mended: {shard} "))
    assert ("is missing" if harm == "deleted" else "is cut short" if kind == "load" else "cannot be read") in said
    assert counts() == whole
    again = invoke("etl", replay, "--db", store_copy)
    assert "mended" not in again.output and "loaded 0 files" in again.output


def test_a_store_whose_free_blocks_were_cut_from_its_end_is_whole(tmp_path):
    db = tmp_path / "s.duckdb"
    for sql in ("create table kept as select range as x, random() as y from range(3000000)",
                "create table gone as select range as x, random() as y from range(3000000)",
                "drop table gone"):  # DuckDB cuts the free blocks from the file's end; its count of blocks stays
        con = store.connect(db)
        con.execute(sql)
        con.close()
    store.connect(db, read_only=True).close()


def test_pipes_and_broken_links_in_a_dump_are_recorded_and_the_rest_loads(tmp_path):
    log = tmp_path / "dump" / "rca_data" / "2023-01-29" / "log"
    log.mkdir(parents=True)
    (log.parent / "2023-01-29-fault_list.json").write_text("{}")
    (log / "10_05_log.csv").write_text("Timestamp,TimeUnixNano,Node,PodName,Container,TraceID,SpanID,Log\n"
                                       "2023-01-29T10:05:00Z,1,n,ts-a-service-6f94c49ccd-4rdb2,server,t,s,hello\n")
    os.mkfifo(log / "10_06_log.csv")
    (log / "10_07_log.csv").symlink_to("nowhere.csv")
    (log / "10_08_log.csv").symlink_to("10_09_log.csv")
    (log / "10_09_log.csv").symlink_to("10_08_log.csv")
    db = tmp_path / "s.duckdb"
    run = subprocess.run([sys.executable, "-m", "rcalab", "etl", str(tmp_path / "dump"), "--db", str(db)],
                         capture_output=True, text=True, timeout=120)  # a pipe once blocked the ETL for ever
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    con = store.connect(db, read_only=True)
    status = dict(con.execute("select regexp_extract(path, '[0-9_]+_log.csv'), error from manifest "
                              "where path like '%_log.csv'").fetchall())
    assert status["10_05_log.csv"] is None
    assert status["10_06_log.csv"].startswith("not a regular file")
    assert all(status[f"10_0{i}_log.csv"].startswith("a link that cannot be followed") for i in (7, 8, 9))
    assert con.execute("select count(*) from log_lines").fetchone()[0] == 1


# --- endpoints that garble ----------------------------------------------------------------------------------

@pytest.fixture
def case(replay, replay_store):
    from features.cases import load_questions
    questions = {q.uuid: q for q in load_questions(replay / "input.json")}
    return replay_store[0], questions["38ee3d45-82"]  # pod failure of cartservice


def completion(content, usage=None, choices=...):
    body = {"id": "x", "object": "chat.completion", "created": 0, "model": "fake",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}]
            if choices is ... else choices, "usage": usage or {"prompt_tokens": 1, "completion_tokens": 1}}
    return json.dumps(body).encode()


ANSWER = {"action": "answer", "option": "1a", "fault_type": "pod failure", "reason": "ok"}
GARBLED = {
    "a reply of 400,000 braces": dict(body=completion("{" * 400_000)),
    "a body that is not UTF-8": dict(body=b"\xff\xfe\x00garbage"),
    "a text/plain body": dict(body=b"Internal hiccup", content_type="text/plain"),
    "no choices": dict(body=completion("", choices=[])),
    "null choices": dict(body=completion("", choices=None)),
    "content that is a number": dict(body=completion(42)),
    "usage counts that are text": dict(body=completion(json.dumps(ANSWER), usage={"prompt_tokens": "many"})),
    "a lone surrogate in the reason": dict(body=completion(json.dumps(ANSWER).replace("ok", "\\ud800 ok"))),
    "a check whose keyword is a list": dict(body=completion(json.dumps(
        {"action": "log_templates", "target": "cartservice", "keyword": ["a", "b"]}))),
}


@pytest.mark.parametrize("name", list(GARBLED))
def test_a_garbled_reply_is_a_failed_call_and_the_ranking_answers(case, tmp_path, name):
    db, question = case
    fake = StubEndpoint("answer", **GARBLED[name])
    try:
        report = run_batch(db, [question], tmp_path / "a.jsonl", chat_for(fake, retries=0), model="fake",
                           time_limit=5, max_tools=1)
    finally:
        fake.close()
    assert report.answered == 1 and not report.failed
    answer = json.loads((tmp_path / "a.jsonl").read_text())
    assert answer["component"] == "cartservice"
    transcript = json.loads(transcripts_path(tmp_path / "a.jsonl").read_text())
    assert transcript["status"] in ("answered", "fallback") and transcript["seconds"] < 15


# --- inputs of the wrong shape --------------------------------------------------------------------------------

def questions_file(tmp_path, items):
    path = tmp_path / "input.json"
    path.write_text(json.dumps(items))
    return path


def window(a="2025-06-06T00:00:00Z", b="2025-06-06T00:10:00Z"):
    return f"The system was abnormal from {a} to {b}."


@pytest.mark.parametrize("items, message", [
    ([{"uuid": "u", "Anomaly Description": window()}, {"uuid": "u", "Anomaly Description": window()}],
     "entry 1 (u): the uuid is listed twice (first at entry 0)"),
    ([{"uuid": 7, "Anomaly Description": window()}], "entry 0: expected an object with 'uuid'"),
    ([{"uuid": "u", "Anomaly Description": window("0001-01-01T00:00:00Z", "0001-01-01T00:10:00Z")}],
     "is outside the years"),
    ([{"uuid": "u", "Anomaly Description": window("9999-12-31T23:00:00Z", "9999-12-31T23:50:00Z")}],
     "is outside the years"),
])
def test_questions_of_the_wrong_shape_are_one_line(replay_store, tmp_path, items, message):
    path = questions_file(tmp_path, items)
    one_line_error(invoke("diagnose", "--agent", "rank", "--db", replay_store[0], "--input", path,
                          "--out", tmp_path / "a.jsonl"), message)


def test_deeply_nested_json_is_one_line(replay_store, tmp_path):
    path = tmp_path / "input.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    one_line_error(invoke("digest", "--db", replay_store[0], "--input", path, "--uuid", "u"), "nested too deeply")


def test_a_limited_rerun_moves_on_past_cases_without_data(replay_store, case, tmp_path):
    empty = [{"uuid": f"quiet-{i}", "Anomaly Description": window("2030-01-01T00:00:00Z", "2030-01-01T00:10:00Z")}
             for i in range(2)]
    path = questions_file(tmp_path, empty + [{"uuid": case[1].uuid, "Anomaly Description": case[1].description}])
    args = ["diagnose", "--agent", "rank", "--db", replay_store[0], "--input", path, "--out", tmp_path / "a.jsonl",
            "--limit", "2"]
    assert invoke(*args).exit_code == 2  # two cases without candidates
    rerun = invoke(*args)
    assert "answered 1" in rerun.output, rerun.output
    assert json.loads((tmp_path / "a.jsonl").read_text())["uuid"] == "38ee3d45-82"


def test_names_that_look_like_markup_or_mathtext_are_shown_as_they_are(tmp_path):
    truth = tmp_path / "truth.jsonl"
    truth.write_text(json.dumps({"uuid": "u", "fault_type": "cpu $\\frac{1}{0}$", "instance_type": "service",
                                 "service": "a", "instance": "a", "key_metrics": [], "key_observations": [],
                                 "fault_description": ["cpu"], "start_time": "", "end_time": ""}) + "\n")
    (tmp_path / "a[").mkdir()
    answers = tmp_path / "a[" / "]answers.jsonl"  # the path reads "a[/]answers": a closing tag to console markup
    answers.write_text(json.dumps({"uuid": "u", "component": "a", "reason": "cpu", "reasoning_trace": []}) + "\n")
    transcripts_path(answers).write_text('{"uuid": "u", "seconds": "slow", "tokens": [1]}\n[[[\n')
    result = invoke("judge", "--truth", truth, "--answers", answers, "--report", tmp_path / "report")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "report" / "report.html").exists()
    assert "a[/]answers" in (tmp_path / "report" / "report.json").read_text()


@pytest.mark.parametrize("content", [b"[1, 2]", b'{"base_url": 5}', b"\xff\xfe not utf-8"])
def test_a_config_file_of_the_wrong_shape_is_one_line(replay_store, replay, tmp_path, monkeypatch, content):
    config = tmp_path / "config.json"
    config.write_bytes(content)
    monkeypatch.setenv("RCALAB_CONFIG", str(config))
    one_line_error(invoke("diagnose", "--db", replay_store[0], "--input", replay / "input.json",
                          "--out", tmp_path / "a.jsonl"), str(config))


@pytest.mark.parametrize("variable, value", [("RCALAB_LLM_RETRIES", "-1"), ("RCALAB_LLM_RETRIES", "2.5"),
                                             ("RCALAB_LLM_TIMEOUT", "soon"), ("RCALAB_LLM_TIMEOUT", "nan"),
                                             ("RCALAB_LLM_TIMEOUT", "-3"), ("RCALAB_LLM_TIMEOUT", "inf")])
def test_a_setting_that_is_not_a_usable_number_is_one_line_naming_it(replay_store, replay, tmp_path, monkeypatch,
                                                                     variable, value):
    monkeypatch.setenv("RCALAB_CONFIG", str(tmp_path / "none.json"))
    monkeypatch.setenv(variable, value)
    one_line_error(invoke("diagnose", "--db", replay_store[0], "--input", replay / "input.json",
                          "--out", tmp_path / "a.jsonl"), variable)


@pytest.mark.parametrize("name, content, message", [
    ("2023-01-29-fault_list.json", b"[1, 2]", "not a fault list"),
    ("2023-01-29-fault_list.json", b'{"08": [{"inject_time": 5}]}', "fault 0"),
    ("2023-01-29-fault_list.json", b"\xff\xfe", "not UTF-8"),
    ("root_cause_ts.json", b"[1]", "expected an object of services"),
])
def test_labels_of_the_wrong_shape_are_one_line(tmp_path, name, content, message):
    day = tmp_path / "dump" / "rca_data" / "2023-01-29"
    (day / "metric").mkdir(parents=True)
    (day / "2023-01-29-fault_list.json").write_text('{"08": []}')
    (day / name).write_bytes(content)
    one_line_error(invoke("cases", tmp_path / "dump", "--out", tmp_path / "cases"), message)


def test_an_unexpected_error_is_one_line_naming_the_file_to_report_with(monkeypatch, replay_store, replay, tmp_path):
    import features.digest

    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(features.digest, "build_digest", broken)
    monkeypatch.setattr("reasoner.agent.build_digest", broken)
    result = invoke("diagnose", "--agent", "rank", "--db", replay_store[0], "--input", replay / "input.json",
                    "--out", tmp_path / "a.jsonl", "--limit", "1")
    one_line_error(result, "unexpected error (ZeroDivisionError: a bug)", "please report it with")
    report = result.output.rsplit(" ", 1)[1].strip()
    assert "ZeroDivisionError" in open(report).read()


def test_an_answers_file_nested_too_deeply_is_a_bad_line_for_the_judge(replay, tmp_path):
    answers = tmp_path / "a.jsonl"
    answers.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    result = invoke("judge", "--truth", replay / "groundtruth.jsonl", "--answers", answers)
    assert result.exit_code == 0 and "a.jsonl:1: JSON nested too deeply" in result.output


def test_a_store_path_naming_a_file_of_another_kind_is_refused_and_kept(replay, tmp_path):
    parquet = tmp_path / "x.parquet"
    parquet.write_bytes(b"PAR1" + b"\x00" * 64 + b"PAR1")
    one_line_error(invoke("etl", replay, "--db", parquet), "is not a DuckDB store")
    assert parquet.read_bytes() == b"PAR1" + b"\x00" * 64 + b"PAR1"


# --- the file system refuses, and odd requests: one line that says what was kept -----------------------

def test_a_store_whose_disk_is_full_stops_the_load_in_one_line_keeping_what_loaded(replay, tmp_path, monkeypatch):
    from etl import loader

    real, calls = loader._load, []

    def full_after_two(*args):
        calls.append(1)
        if len(calls) > 2:
            raise duckdb.TransactionException('Failed to commit: Could not write file "s.duckdb.wal": '
                                              "No space left on device\nmore text")
        return real(*args)

    monkeypatch.setattr(loader, "_load", full_after_two)
    db = tmp_path / "s.duckdb"
    result = invoke("etl", replay, "--db", db)
    one_line_error(result, "the store cannot be written", "No space left on device",
                   "the 0 days loaded before it are kept")
    # The run stopped at the first refusal: no file began after it (files load side by side, one a core).
    assert 3 <= len(calls) <= 2 + (os.cpu_count() or 1)
    con = store.connect(db, read_only=True)
    assert con.execute("select count(*) from shards").fetchone() == (0,)  # the day is not half written
    con.close()
    monkeypatch.setattr(loader, "_load", real)
    assert invoke("etl", replay, "--db", db).exit_code == 0  # once mended, the same command loads it


@pytest.mark.parametrize("error", [OSError(28, "No space left on device"), OSError(30, "Read-only file system")])
def test_outputs_the_file_system_refuses_are_one_line(replay_store, replay, tmp_path, monkeypatch, error):
    def refuse(path, *args, **kwargs):
        raise type(error)(error.errno, error.strerror, str(path))

    monkeypatch.setattr("pathlib.Path.write_text", refuse)
    for args in (["detect", "--db", replay_store[0], "--out", tmp_path / "d.json"],
                 ["judge", "--truth", replay / "groundtruth.jsonl", "--answers", replay / "groundtruth.jsonl",
                  "--report", tmp_path / "report"]):
        result = invoke(*args)  # detect prints its table first; the error is the last line
        assert result.exit_code == 1 and "Traceback" not in result.output
        last = result.output.splitlines()[-1]
        assert last.startswith("Error: ") and error.strerror in last and "what was done before is kept" in last


def test_detect_makes_the_folder_of_its_output_and_takes_any_day(replay_store, tmp_path):
    result = invoke("detect", "--db", replay_store[0], "--out", tmp_path / "new" / "folder" / "d.json")
    assert result.exit_code == 0 and (tmp_path / "new" / "folder" / "d.json").exists()
    one_line_error(invoke("detect", "--db", replay_store[0], "--day", "9999-12-31"), "nothing in the asked time")


def test_a_ctrl_c_inside_a_commit_is_an_interruption_not_a_bug(replay, tmp_path, monkeypatch):
    from etl import loader

    def interrupted(*args):
        raise duckdb.InterruptException("INTERRUPT Error: Interrupted!")

    monkeypatch.setattr(loader, "_load", interrupted)
    result = invoke("etl", replay, "--db", tmp_path / "s.duckdb")
    assert result.exit_code == 130 and result.output.startswith("Interrupted: what was done is kept")
