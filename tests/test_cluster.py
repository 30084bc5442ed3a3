"""The nightly job with each day a task on a Dask cluster (in-process here, no cluster needed): the same store,
incidents and answers as in one process, also when a worker dies in the middle of a day."""

import datetime as dt
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from distributed import Client, LocalCluster

from common.tasks import TASK_MEMORY, Local, task_memory
from etl import store
from features.cases import load_questions
from features.detect import incidents, scan
from features.refresh import nightly
from reasoner.batch import run_batch
from testbed.schedule import random_cases
from testbed.simulate import simulate
from testbed.topology import Topology


@pytest.fixture(scope="module")
def three_days(tmp_path_factory):
    """A fault an hour over three simulated CST days (four UTC days), at a tiny scale."""
    out = tmp_path_factory.mktemp("three_days")
    topo = Topology.build(5)
    simulate(out, random_cases(54, topo, seed=5), topo, scale=0.002, seed=5)
    return out


@pytest.fixture(scope="module")
def alone(three_days, tmp_path_factory):
    db = tmp_path_factory.mktemp("alone") / "store.duckdb"
    nightly(three_days, db)
    return db


def fingerprint(db: Path) -> dict:
    """Every table's rows (count and an order-free hash), the manifest's without its load times."""
    con = store.connect(db, read_only=True)
    try:
        out = {t: con.execute(f"select count(*), sum(hash(x)::hugeint) from {t} x").fetchone()
               for t in (*store.LOADED, *store.FEATURES, "log_templates", "log_masked", "dirty_days")}
        out["manifest"] = con.execute("select count(*), sum(hash(file_id, path, kind, rows, bytes, status, error)"
                                      "::hugeint) from manifest").fetchone()
        return out
    finally:
        con.close()


# Fourteen hours across where two days of the dump meet (16:00 UTC) and two UTC days do (midnight).
LO, HI = dt.datetime(2025, 6, 6, 13, 0), dt.datetime(2025, 6, 7, 3, 0)


def findings(db: Path, three_days: Path, tmp_path: Path) -> tuple[list, str]:
    """The incidents a scan finds and the ranking's answers to the dump's questions, from LO to HI."""
    con = store.connect(db, read_only=True)
    try:
        found = [(i.start, i.end, i.components) for i in incidents(scan(con, LO, HI))]
    finally:
        con.close()
    answers = tmp_path / f"{db.stem}.jsonl"
    run_batch(db, [q for q in load_questions(three_days / "input.json") if LO <= q.start < HI], answers, None)
    return found, "".join(sorted(answers.read_text().splitlines(keepends=True)))


def test_days_loaded_as_tasks_on_a_cluster_make_the_same_store(three_days, alone, tmp_path):
    spread = tmp_path / "spread.duckdb"
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as local, \
            Client(local) as client:
        report = nightly(three_days, spread, client=client)
    assert not report.failed
    assert fingerprint(spread) == fingerprint(alone)
    con = store.connect(spread, read_only=True)
    kinds = dict(con.execute("select kind, count(*) from shards group by all").fetchall())
    con.close()
    assert kinds == {"load": 3, "features": 4}  # three CST days of the dump, the four UTC days they cover
    found, answers = findings(alone, three_days, tmp_path)
    assert findings(spread, three_days, tmp_path) == (found, answers)
    assert len(found) >= 5 and answers.count("\n") >= 12


@pytest.mark.parametrize("limit, threads, expected", [("2GiB", 2, int(0.75 * 2**30)), ("16GiB", 2, TASK_MEMORY)])
def test_a_task_s_duckdb_holds_its_share_of_its_worker_s_memory_and_never_more_than_task_memory(limit, threads,
                                                                                                 expected):
    """Three quarters of a worker's memory limit, shared among its threads, at most `TASK_MEMORY`: one big part of a
    day's features took all it was given (issue 73)."""
    with LocalCluster(n_workers=1, threads_per_worker=threads, processes=False, memory_limit=limit,
                      dashboard_address=":0") as local, Client(local) as client:
        assert client.submit(task_memory, pure=False).result(timeout=30) == expected


def test_days_loaded_side_by_side_in_processes_of_this_machine_make_the_same_store(three_days, alone, tmp_path):
    """`rcalab etl`'s way without a cluster: several tasks run in processes of their own, a core each."""
    side = tmp_path / "side.duckdb"
    report = nightly(three_days, side, client=Local())
    assert not report.failed
    assert fingerprint(side) == fingerprint(alone)


def test_a_worker_killed_in_the_middle_of_a_day_changes_nothing(three_days, alone, tmp_path):
    killed = tmp_path / "killed.duckdb"
    folder = store.shard_dir(killed)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as local, \
            Client(local) as client:
        pids = list(client.run(os.getpid).values())
        with ThreadPoolExecutor(1) as pool:
            running = pool.submit(nightly, three_days, killed, client=client)
            deadline = time.monotonic() + 120
            while not any(folder.glob("*.tmp")) and time.monotonic() < deadline:  # a day is being written
                time.sleep(0.05)
            os.kill(pids[0], signal.SIGKILL)
            report = running.result(timeout=600)
    assert not report.failed
    assert fingerprint(killed) == fingerprint(alone)
    con = store.connect(killed, read_only=True)
    listed = {file for file, in con.execute("select file from shards").fetchall()}
    con.close()
    assert {p.name for p in folder.iterdir()} == listed  # nothing left half written beside them
