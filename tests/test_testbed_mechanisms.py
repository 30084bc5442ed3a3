"""Each fault is a mechanism, and its consequences follow from it: a test per consequence that no ground
truth names (those are checked in test_testbed_faults), so that a mechanism that stops producing one fails."""

import datetime as dt
import json

import pytest

from etl.store import connect
from features.refresh import nightly
from testbed.schedule import load_schedule
from testbed.simulate import simulate
from testbed.topology import Topology

START = dt.datetime(2025, 6, 6, 2, 0, tzinfo=dt.timezone.utc)
# (fault type, instance): one an hour, each 12 minutes long.
CASES = [("pod failure", ["tidb-tidb-0", "tidb-tidb"]), ("pod failure", ["tidb-tikv-0", "tidb-tikv"]),
         ("code error", ["shippingservice-1"]), ("target port misconfig", "paymentservice"),
         ("dns error", ["checkoutservice-0"]), ("io fault", ["tidb-tikv-0", "tidb-tikv"])]


def _window(i: int) -> tuple[dt.datetime, dt.datetime]:
    start = START + dt.timedelta(hours=i)
    return start, start + dt.timedelta(minutes=12)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mechanisms")
    rows = [dict(uuid=f"m{i}", fault_type=kind, instance=instance,
                 start_time=_window(i)[0].strftime("%Y-%m-%dT%H:%M:%SZ"),
                 end_time=_window(i)[1].strftime("%Y-%m-%dT%H:%M:%SZ")) for i, (kind, instance) in enumerate(CASES)]
    schedule = tmp / "schedule.jsonl"
    schedule.write_text("".join(json.dumps(r) + "\n" for r in rows))
    topo = Topology.build(2)
    simulate(tmp / "dump", load_schedule(schedule, topo), topo, scale=0.01, seed=2)
    nightly(tmp / "dump", tmp / "store.duckdb")
    con = connect(tmp / "store.duckdb", read_only=True)
    con.execute("set TimeZone = 'UTC'")
    yield con
    con.close()


def _mean(con, metric: str, component: str, lo, hi) -> float:
    return con.execute("select avg(value) from metric_points where metric = ? and component = ? and ts >= ? "
                       "and ts < ?", [metric, component, lo, hi]).fetchone()[0]


def _during_before(con, case: int, metric: str, component: str) -> tuple[float, float]:
    start, end = _window(case)
    return (_mean(con, metric, component, start + dt.timedelta(minutes=3), end),
            _mean(con, metric, component, start - dt.timedelta(minutes=40), start - dt.timedelta(minutes=5)))


def _lines(con, case: int, *words: str) -> int:
    start, end = _window(case)
    where = " and ".join("message ilike ?" for _ in words)
    return con.execute(f"select count(*) from log_lines where ts >= ? and ts < ? and {where}",
                       [start, end, *[f"%{w}%" for w in words]]).fetchone()[0]


def test_a_restarted_tidb_counts_its_uptime_from_zero(store):
    during, before = _during_before(store, 0, "uptime", "tidb-tidb-0")
    assert during == 0 and before > 86400
    start, end = _window(0)
    after = _mean(store, "uptime", "tidb-tidb-0", end + dt.timedelta(minutes=10), end + dt.timedelta(minutes=11))
    assert 0 < after < 3600


def test_a_failed_tikv_leaves_regions_pending_and_does_no_io(store):
    during, before = _during_before(store, 1, "region_pending", "tidb-tikv-0")
    assert during > 10 and before == 0
    during, before = _during_before(store, 1, "io_util", "tidb-tikv-0")
    assert during == 0 < before


def test_a_crash_loop_leaves_the_pod_without_a_process_and_its_clients_canceled(store):
    during, before = _during_before(store, 2, "pod_processes", "shippingservice-1")
    assert during < 1 < before
    assert _lines(store, 2, "context canceled") and _lines(store, 2, "nil pointer dereference")


def test_a_wrong_target_port_means_few_requests_and_checkout_answers_internal(store):
    during, before = _during_before(store, 3, "request", "paymentservice")
    assert during < 0.5 * before
    assert _lines(store, 3, "connection refused")
    assert _lines(store, 3, "code = Internal", "failed to prepare order")  # the frontend, of checkout


def test_failing_lookups_are_server_errors_at_the_target_answered_internal(store):
    during, before = _during_before(store, 4, "server_error_ratio", "checkoutservice-0")
    assert during > 10 and before < 1
    assert _lines(store, 4, "no such host") and _lines(store, 4, "code = Internal")


def test_a_slow_tikv_disk_backs_up_work_that_its_cpu_memory_and_qps_answer_to(store):
    for metric, up in (("region_pending", True), ("cpu_usage", True), ("memory_usage", True), ("qps", False)):
        during, before = _during_before(store, 5, metric, "tidb-tikv-0")
        assert (during > 1.2 * before + 1e-9) if up else (during < 0.8 * before), (metric, during, before)


def test_the_frontend_logs_every_request_it_serves(store):
    """In a quiet hour: a line per request at the scale's volume, cart updates redirected."""
    lo, hi = START - dt.timedelta(hours=2), START - dt.timedelta(hours=1)
    count = store.execute("select count(*) from log_lines where ts >= ? and ts < ? and service = 'frontend' "
                          "and message like '%request complete%'", [lo, hi]).fetchone()[0]
    redirects = store.execute("select count(*) from log_lines where ts >= ? and ts < ? and service = 'frontend' "
                              "and message like '%\"http.resp.status\":302%'", [lo, hi]).fetchone()[0]
    assert count > 0.5 * 3000 * 0.01 * 60 and redirects > 0.05 * count
