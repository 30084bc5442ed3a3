"""Detection on tiny stores: a quiet day finds nothing, one fault is one incident over its window, a gap in
collection is no incident; the confidence tells a fault's window from a quiet one."""

import datetime as dt
import json
import math
import os
import signal
from concurrent.futures import ThreadPoolExecutor

from click.testing import CliRunner
from conftest import copy_store
from test_ranking import END, START, T0, Tiny, digest

from etl import store
from features import detect
from features.cases import Question, load_questions
from features.detect import ABNORMAL, CLEAR, STAY, STEP, Level, alarm, as_questions, incidents, scan, span
from features.digest import build_digest
from features.evidence import Window
from features.refresh import nightly
from features.ranker import rank_window
from rcalab.cli import cli

SERVICES = ("cart", "frontend", "checkout")


def day(path, fault=None):
    """Three services of two pods each, cpu and memory a minute; `fault` is what cart-1's cpu does in the window
    (its memory triples), or "stop": every series stops."""
    t = Tiny(path)
    for service in SERVICES:
        for i in range(2):
            pod = f"{service}-{i}"
            t.place(pod, service)
            t.series(pod, "pod_cpu_usage", 0.2, service=service, node="node-1",
                     fault=fault if pod == "cart-1" or fault == "stop" else None)
            memory = fault if fault == "stop" else 9e8 if fault and pod == "cart-1" else None
            t.series(pod, "pod_memory_working_set_bytes", 3e8, service=service, node="node-1", fault=memory)
    return t.done()


def found(con):
    lo, hi = span(con)
    return incidents(scan(con, lo, hi))


def test_a_quiet_day_has_no_incident(tmp_path):
    con = day(tmp_path / "quiet.duckdb")
    threads = con.execute("select current_setting('threads')").fetchone()
    assert found(con) == []
    assert con.execute("select current_setting('threads')").fetchone() == threads  # the scan gives them back


def test_one_fault_is_one_incident_over_its_window(tmp_path):
    con = day(tmp_path / "fault.duckdb", fault=2.0)
    [incident] = found(con)
    assert incident.start <= START + dt.timedelta(minutes=2) and incident.end >= END - dt.timedelta(minutes=5)
    assert incident.end - incident.start <= (END - START) + dt.timedelta(minutes=20)
    assert incident.components[0] in ("cart-1", "cart")
    assert incident.confidence >= CLEAR
    [question] = as_questions([incident])
    path = tmp_path / "input.json"
    path.write_text(json.dumps([question]))
    asked = load_questions(path)[0]
    assert (asked.start, asked.end) == (incident.peak.start, incident.peak.end)  # its strongest window
    assert question["incident"] == f"{incident.start:%Y-%m-%dT%H:%M:%SZ}/{incident.end:%Y-%m-%dT%H:%M:%SZ}"


def test_a_window_s_level_is_read_from_the_minutes_its_question_is_answered_from(tmp_path):
    # The window that ends as the fault starts holds none of the fault's minutes for its question (`Window.around`),
    # so it must not be the incident's peak: its question would be answered from the quiet minutes before.
    con = day(tmp_path / "fault.duckdb", fault=2.0)
    for lv in scan(con, START - dt.timedelta(minutes=10), START + dt.timedelta(minutes=10)):
        ranked = build_digest(con, Question("q", lv.window.start, lv.window.end, "")).candidates
        top = (ranked[0].component, round(ranked[0].score, 6)) if ranked else (None, 0.0)
        assert (lv.component, round(lv.score, 6)) == top, lv.window


def test_a_day_s_reference_levels_are_ranked_once_for_every_process_of_the_same_code(replay_store, replay, tmp_path,
                                                                                        monkeypatch):
    db = copy_store(replay_store[0], tmp_path / "store.duckdb")
    for kept in store.cache_dir(db).glob("levels-*.json"):  # what other tests of the session ranked
        kept.unlink()
    q = load_questions(replay / "input.json")[0]
    w = Window.around(q.start, q.end)
    ranked = []
    level = detect.level
    monkeypatch.setattr(detect, "level", lambda con, ref: ranked.append(ref) or level(con, ref))
    con = store.connect(db, read_only=True)
    detect.forget()
    normal = detect.normal_around(con, w)
    assert ranked and normal
    once = len(ranked)
    detect.forget()  # as a new process
    assert detect.normal_around(con, w) == normal and len(ranked) == once  # read from beside the shards
    kept = sorted(store.cache_dir(db).glob("levels-*.json"))
    detect.forget()
    monkeypatch.setattr(detect, "code", lambda: "another version of rcalab")
    assert detect.normal_around(con, w) == normal and len(ranked) == 2 * once  # its levels ranked again
    now = sorted(store.cache_dir(db).glob("levels-*.json"))
    assert len(now) == len(kept) and not set(now) & set(kept)  # in place of the other version's
    con.close()
    nightly(replay, db)  # the next night's load: the cache is no shard, and an unchanged day's levels hold
    assert sorted(store.cache_dir(db).glob("levels-*.json")) == now


def test_a_gap_in_collection_is_no_incident(tmp_path):
    assert found(day(tmp_path / "gap.duckdb", fault="stop")) == []


def test_a_link_slow_between_two_otherwise_healthy_ends_is_an_incident(tmp_path):
    """The challenge's network faults are a link's (source -> destination): the link's anomaly is the window's,
    though its two ends, each with a healthy link beside it, share the blame for it."""
    t = Tiny(tmp_path / "link.duckdb")
    t.series("a-0", "pod_cpu_usage", 0.2, service="a")
    t.chain(["a", "b"], slow="b", gap_us=2_000_000)  # 10 ms -> 2 s
    t.chain(["a", "c"])
    t.chain(["d", "b"])
    con = t.done()
    ranked = rank_window(con, Window(START, END), 5).candidates
    assert ranked[0].score < ABNORMAL <= alarm(ranked)
    [incident] = found(con)
    assert incident.start <= START + dt.timedelta(minutes=2) and incident.components[0] in ("a", "b")


def test_an_incident_runs_on_over_its_culprits_weaker_windows():
    def levels(*scored):
        return [Level(Window(T0 + i * STEP, T0 + i * STEP + 2 * STEP), score, name, name)
                for i, (score, name) in enumerate(scored)]
    weak, strong, low = (STAY + ABNORMAL) / 2, ABNORMAL + 0.1, STAY / 2
    [one] = incidents(levels((low, "a"), (weak, "cart"), (strong, "cart"), (weak, "cart"), (low, "a")))
    assert (one.start, one.end) == (T0 + STEP, T0 + 5 * STEP) and one.components == ["cart"]
    assert one.peak == Window(T0 + 2 * STEP, T0 + 4 * STEP)  # what its question asks about
    assert incidents(levels((weak, "cart"), (weak, "cart"), (weak, "cart"))) == []  # never abnormal
    [other, cart] = incidents(levels((strong, "email"), (weak, "cart"), (strong, "cart")))  # back to back
    assert other.components == ["email"] and cart.start == T0 + STEP


def test_the_confidence_tells_a_fault_from_a_quiet_window(tmp_path):
    con = day(tmp_path / "fault.duckdb", fault=2.0)
    at_fault = digest(con)
    assert at_fault.clear and at_fault.confidence >= CLEAR
    assert "confidence" in at_fault.text
    quiet = build_digest(con, Question("quiet", T0 + dt.timedelta(minutes=40), T0 + dt.timedelta(minutes=60), ""))
    assert not quiet.clear


def test_detect_writes_questions_diagnose_takes(tmp_path):
    day(tmp_path / "fault.duckdb", fault=2.0).close()
    out = tmp_path / "detected.json"
    result = CliRunner().invoke(cli, ["detect", "--db", str(tmp_path / "fault.duckdb"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "1 incidents written" in result.output and len(load_questions(out)) == 1
    result = CliRunner().invoke(cli, ["detect", "--db", str(tmp_path / "fault.duckdb"), "--out",
                                      str(tmp_path / "fault.duckdb")])
    assert result.exit_code == 1 and "is the store itself; name a questions file" in result.output
    answers = tmp_path / "answers.jsonl"
    answers.write_text('{"uuid": "a"}\n')
    result = CliRunner().invoke(cli, ["detect", "--db", str(tmp_path / "fault.duckdb"), "--out", str(answers)])
    assert result.exit_code == 1 and "is not a questions file" in result.output
    assert answers.read_text() == '{"uuid": "a"}\n'
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)  # read, it would block forever
    result = CliRunner().invoke(cli, ["detect", "--db", str(tmp_path / "fault.duckdb"), "--out", str(pipe)])
    assert result.exit_code == 1 and "not a regular file" in result.output


def test_the_ranking_is_unsure_where_a_rival_is_close_or_the_first_does_not_stand_out():
    from features.digest import Digest
    from features.options import Option
    from features.ranker import Candidate

    option = Option("pod failure", "pod_processes", "metric")

    def digest(scores, confidence=0.9, offered=None):
        names = [f"c{i}" for i in range(len(scores))]
        return Digest("u", ("", ""), [Candidate(n, "pod", s) for n, s in zip(names, scores)], "",
                      {n: [option] for n in (offered or names)}, confidence)

    assert digest([1.0, 0.5]).rivals == ["c0"] and not digest([1.0, 0.5]).unsure
    assert digest([1.0, 0.85, 0.5]).rivals == ["c0", "c1"]  # within 0.8 of the first
    assert digest([1.0, 0.5, 0.2], confidence=0.1).rivals == ["c0", "c1", "c2"]  # no clear root cause: all
    assert digest([1.0, 0.9], offered=["c0"]).rivals == ["c0"]  # a model can choose only what has options
    assert digest([]).rivals == [] and not digest([]).unsure


def test_the_bench_sets_apart_the_cases_where_the_ranking_is_unsure(tmp_path):
    from judge.bench import unsure

    path = tmp_path / "fault.duckdb"
    day(path, fault=2.0).close()
    fault = Question("fault", START, END, "")
    quiet = Question("quiet", T0 + dt.timedelta(minutes=40), T0 + dt.timedelta(minutes=60), "")
    assert unsure(path, [fault, quiet]) == set()  # one clear candidate; none at all: nothing to decide


def test_bench_rank_judges_the_rank_agent_s_answers_from_the_digests_it_ranked(tmp_path):
    from judge.bench import ranked
    from rcalab.bench import figure

    path = tmp_path / "fault.duckdb"
    day(path, fault=2.0).close()
    fmt = "%Y-%m-%dT%H:%M:%SZ"
    (tmp_path / "input.json").write_text(json.dumps([{"uuid": "fault", "Anomaly Description":
        f"The system experienced an anomaly from {START:{fmt}} to {END:{fmt}}. Please infer the possible cause."}]))
    truth = {"uuid": "fault", "fault_type": "cpu stress", "instance_type": "pod", "instance": "cart-1",
             "key_metrics": ["pod_cpu_usage"], "key_observations": [{"type": "metric", "keyword": ["pod_cpu_usage"]}]}
    (tmp_path / "truth.jsonl").write_text(json.dumps(truth) + "\n")
    result = ranked(path, tmp_path / "input.json", tmp_path / "truth.jsonl")
    assert result["top1"] == 1.0
    assert result["rank agent"]["LA"] == 1.0 and result["rank agent"]["explainability"] == 1.0
    truth["key_observations"] = []  # a real day's labels: no explainability to judge, shown as "-", not 0
    (tmp_path / "truth.jsonl").write_text(json.dumps(truth) + "\n")
    unobserved = ranked(path, tmp_path / "input.json", tmp_path / "truth.jsonl")["rank agent"]
    assert unobserved["explainability"] is None and figure(unobserved, "explainability") == "-"
    assert figure({"LA": 1.0}, "explainability") == ""  # a run that does not measure it (the model deciding)


def test_bench_detect_says_which_faults_it_missed_and_what_it_named_instead(tmp_path):
    from features.bench import flow, missed

    con = day(tmp_path / "fault.duckdb", fault=2.0)
    incidents_ = found(con)
    questions = [Question("cart", START, END, ""), Question("frontend", START, END, ""),
                 Question("later", END + dt.timedelta(minutes=30), END + dt.timedelta(minutes=31), "")]
    rows = {q.uuid: {"fault_type": "cpu stress", "instance_type": "service", "instance": q.uuid} for q in questions}
    answers = {}
    assert flow(con, incidents_, questions, rows, answers) == (round(1 / 3, 3), 1.0)
    by = {m["uuid"]: m for m in missed(con, incidents_, questions, rows, answers)}
    assert set(by) == {"frontend", "later"}
    assert by["frontend"]["named instead"][0] in ("cart", "cart-1") and by["later"]["named instead"] == []


def test_thresholds_fitted_on_the_other_days_are_reported_on_the_day_left_out():
    from features.bench import folds

    shipped = f"{ABNORMAL:g} {STAY:g}"
    grid = {"a": {shipped: (0.8, 0.9), "0.7 0.3": (1.0, 1.0)}, "b": {shipped: (0.8, 0.9), "0.7 0.3": (1.0, 1.0)},
            "c": {shipped: (0.9, 0.9), "0.7 0.3": (0.5, 1.0)}}
    rows = {r["day left out"]: r for r in folds({day: {"grid": g} for day, g in grid.items()}, ["a", "b", "c"])}
    assert rows["c"]["fitted"] == "0.7 0.3" and rows["c"]["found and named"] == 0.5  # fitted on a and b, worse on c
    assert rows["c"]["found and named, shipped"] == 0.9 and rows["c"]["fitted on"] == "a, b"


def test_rcaeval_s_baselines_rank_the_same_windows_from_the_store(tmp_path):
    from features import baselines

    con = day(tmp_path / "fault.duckdb", fault=2.0)
    wide, units = baselines.frame(con, Question("fault", START, END, ""))
    assert units["cart_pod_cpu_usage"] == "cart" and "time" in wide.columns
    assert set(baselines.methods()) == {"BARO", "n-sigma"}
    for method, rank in baselines.methods().items():
        order = baselines.ranked_units(rank(wide, baselines.inject_time(Question("f", START, END, "")))["ranks"], units)
        assert order[0] == "cart", method  # cart-1's cpu and memory moved


def test_days_scanned_as_tasks_on_a_dask_cluster_find_what_one_process_finds(tmp_path):
    """Two days across midnight, a fault on each: the scan with each day a task on a local cluster (in-process
    workers; worker processes, one of them killed while the days are scanned; a running cluster's scheduler), and
    in this process's helpers, gives the same levels, incidents and table as one process."""
    from distributed import Client, LocalCluster

    from features.detect import scan_on

    db = tmp_path / "two-days.duckdb"
    t = Tiny(db)
    start = dt.datetime(2025, 6, 6, 22, 0)
    faults = [(start + dt.timedelta(minutes=60), "cart-1"), (start + dt.timedelta(minutes=150), "frontend-0")]
    rows = []
    for i in range(240):
        ts = start + dt.timedelta(minutes=i)
        for service in SERVICES:
            for k in range(2):
                pod = f"{service}-{k}"
                hot = any(a <= ts < a + dt.timedelta(minutes=15) and pod == p for a, p in faults)
                wave = 1 + 0.03 * math.sin(i * 1.7)
                rows += [(ts, "infra_pod", pod, "pod", service, "node-1", "pod_cpu_usage", (2.0 if hot else 0.2) * wave, 1),
                         (ts, "infra_pod", pod, "pod", service, "node-1", "pod_memory_working_set_bytes",
                          (9e8 if hot else 3e8) * wave, 1)]
    t.con.executemany("insert into metric_points values (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    for service in SERVICES:
        for k in range(2):
            t.place(f"{service}-{k}", service)
    for day in (start.date(), start.date() + dt.timedelta(days=1)):
        t.refresh(day)
    lo, hi = span(t.con)
    alone = scan(t.con, lo, hi)
    t.con.close()
    read_only = store.connect(db, read_only=True)  # a store opened read-only: its windows are read in helper processes
    helped = scan(read_only, lo, hi)
    read_only.close()
    assert [(lv.window, lv.component, round(lv.score, 9)) for lv in helped] == \
        [(lv.window, lv.component, round(lv.score, 9)) for lv in alone]
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as local, \
            Client(local) as client:
        spread = scan_on(client, db, lo, hi)
    assert [(lv.window, lv.component, round(lv.score, 9)) for lv in spread] == \
        [(lv.window, lv.component, round(lv.score, 9)) for lv in alone]
    assert len({lv.window.start.date() for lv in spread}) == 2
    assert [i.components[0] for i in incidents(spread)] == [i.components[0] for i in incidents(alone)]
    assert len(incidents(alone)) == 2
    # A worker process killed while the days are scanned: its task runs again elsewhere, nothing lost or doubled.
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as local, \
            Client(local) as client:
        pids = list(client.run(os.getpid).values())
        with ThreadPoolExecutor(1) as pool:
            running = pool.submit(scan_on, client, db, lo, hi)
            os.kill(pids[0], signal.SIGKILL)
            survived = running.result(timeout=120)
    assert [(lv.window, lv.component, round(lv.score, 9)) for lv in survived] == \
        [(lv.window, lv.component, round(lv.score, 9)) for lv in alone]
    # As a user runs it: worker processes of a local cluster, or a running cluster's scheduler; the same table.
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, protocol="tcp://",
                      dashboard_address=":0") as running:
        alone, spread, remote = (CliRunner().invoke(cli, ["detect", "--db", str(db), *more]) for more in (
            [], ["--workers", "2"], ["--scheduler", running.scheduler_address]))
    assert spread.exit_code == alone.exit_code == remote.exit_code == 0
    assert spread.output == alone.output == remote.output
    assert "cart" in alone.output and "frontend" in alone.output
