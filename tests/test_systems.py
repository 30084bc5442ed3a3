"""Systems described in files: a bad description is one line naming the file and the field, and nothing is written;
a system written only for this test simulates, loads and ranks; a consumer's lag with no failed call is the
consumer's trouble or the producer's, whichever holds; Train Ticket's calls are those of its real days' traces."""

import datetime as dt
import json
from collections import Counter
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pytest
import yaml
from click.testing import CliRunner

from conftest import SHARED
from common.errors import DescriptionError
from features.cases import load_questions
from features.digest import build_digest
from features.refresh import nightly
from etl import store
from etl.loader import run_etl
from rcalab.cli import cli
from testbed.faults import FAULTS, Target, busiest_site, code_site, get
from testbed.metrics import apm_tables
from testbed.schedule import Case, format_time, random_cases
from testbed.simulate import simulate
from testbed.system import load, shipped_names
from testbed.topology import Topology
from testbed.workload import build_day, expected_latency

# A shop written for this test alone: an entry, a service that writes orders to PostgreSQL and publishes them to
# Kafka, two consumers of the topic, and a cache.
SHOP = {
    "name": "testshop",
    "namespace": "shop",
    "nodes": {"workers": ["w1", "w2", "w3"]},
    "workload": {"entry": "web", "requests_per_minute": 600, "traces_per_minute": 60,
                 "mix": {"GET /items": 0.7, "POST /order": 0.3}},
    "components": {
        "web": {"kind": "service", "language": "python", "replicas": 2, "own_ms": 2.0, "protocol": "http", "port": 80,
                "failure": "web request failed",
                "operations": {"GET /items": {"steps": [{"call": "catalog.List"}]},
                               "POST /order": {"steps": [{"call": "orders.Place"}]}}},
        "catalog": {"kind": "service", "language": "go", "replicas": 2, "own_ms": 1.5,
                    "rpc": {"service": "shop.Catalog", "port": 7000}, "failure": "could not list items",
                    "operations": {"List": {"steps": [{"log": "listing items"}, {"call": "cache.GET"}]}}},
        "orders": {"kind": "service", "language": "java", "replicas": 1, "own_ms": 3.0,
                   "rpc": {"service": "shop.Orders", "port": 7001}, "failure": "could not place order",
                   "operations": {"Place": {"method": "placeOrder", "steps": [
                       {"log": "placing order {id}"}, {"call": "db.INSERT"}, {"publish": "queue.orders"}]}}},
        "billing": {"kind": "service", "language": "go", "replicas": 1, "own_ms": 2.0,
                    "rpc": {"service": "shop.Billing", "port": 7002}, "failure": "billing failed",
                    "operations": {"orders process": {"consumes": "queue.orders", "steps": [{"log": "billed {id}"}]}}},
        "mailer": {"kind": "service", "language": "python", "replicas": 1, "own_ms": 2.0,
                   "rpc": {"service": "shop.Mailer", "port": 7003}, "failure": "mail failed",
                   "operations": {"orders process": {"consumes": "queue.orders", "steps": [{"log": "mailed {id}"}]}}},
        "cache": {"kind": "cache", "replicas": 1, "own_ms": 0.3, "port": 6379, "client_spans": True,
                  "failure": "cache unreachable", "operations": {"GET": {}}},
        "db": {"kind": "database", "replicas": 1, "own_ms": 0.8, "port": 5432, "client_spans": True,
               "failure": "database unreachable", "operations": {"INSERT": {}},
               "metrics": {"source": "postgresql", "kpis": {"pg_up": [1.0, 0.0, 0.0, ["stops"]],
                                                            "pg_commits": [20.0, 0.1, 1.0, ["stops", "throughput"]]}}},
        "queue": {"kind": "broker", "replicas": 1, "own_ms": 0.5, "port": 9092, "topics": ["orders"],
                  "failure": "broker unreachable", "operations": {},
                  "metrics": {"source": "kafka", "kpis": {"kafka_messages_in": [20.0, 0.1, 1.0, ["stops", "messages"]]}}},
    },
    "faults": {"cpu stress": ["service"], "pod failure": ["service", "database"], "consumer stall": ["service"],
               "producer flood": ["service"], "jvm gc": ["service:java"], "network delay": ["link"]},
}


def write(tmp_path, description, name="shop.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(description, sort_keys=False))
    return path


def changed(description, where: str, value):
    """A copy of `description` with the field at the path `where` (parts split by /, a / in a part as %2F) set to
    `value` (None: removed)."""
    out = json.loads(json.dumps(description))
    *path, last = [part.replace("%2F", "/") for part in where.split("/")]
    node = out
    for part in path:
        node = node[int(part)] if part.isdigit() else node[part]
    if value is None:
        del node[last]
    elif last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value
    return out


def with_code_positions(description):
    """The shop with orders' Place logging two code positions in a row (`logger#line`): where a code fault acts."""
    return changed(description, "components/orders/operations/Place/steps",
                   [{"log": "o.Orders#10 placing order {id}"}, {"log": "o.Orders#20 placed {id}"},
                    {"call": "db.INSERT"}, {"publish": "queue.orders"}])


@pytest.mark.parametrize("where, value, message", [
    ("components/catalog/operations/List/steps/1", {"call": "nowhere.GET"},
     "components.catalog.operations.List.steps[1].call: 'nowhere' is not a declared component"),
    ("components/cache/operations/GET", {"steps": [{"call": "catalog.List"}]},
     "components.cache.operations.GET.steps[0].call: a cycle of synchronous calls: catalog.List -> cache.GET -> "
     "catalog.List"),
    ("faults/jvm gc", ["database"], "faults.jvm gc[0]: it acts on services on a JVM, and no database is one"),
    ("components/orders/kind", None, "components.orders: 'kind' is a required property"),
    ("components/catalog/replicas", "two", "components.catalog.replicas: 'two' is not of type 'integer'"),
    ("components/web/operations/GET %2Fitems/steps/0", {"call": "catalog.List", "p": 1.5},
     "components.web.operations.GET /items.steps[0].p: 1.5 is greater than the maximum of 1"),
    ("components/catalog/operations/List/steps/1", {"call": "cache.GET", "p": float("nan")},
     "components.catalog.operations.List.steps[1].p: not a finite number"),
    ("workload/mix/GET %2Fitems", float("nan"), "workload.mix.GET /items: not a finite number"),
    ("components/..%2F..%2Fup", {"kind": "cache"},
     "components: '../../up' is not a name (at most 63 letters, digits, '.', '_' and '-', the first a letter or a "
     "digit)"),
    ("nodes/workers/0", "w" * 10_000, f"nodes.workers[0]: '{'w' * 40}...' is not a name (at most 63 letters, digits, "
                                      "'.', '_' and '-', the first a letter or a digit)"),
    ("components/db/metrics/file", "../../elsewhere",
     "components.db.metrics.file: '../../elsewhere' does not match '^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*$'"),
])
def test_a_bad_description_is_one_line_naming_the_file_and_field(tmp_path, where, value, message):
    path = write(tmp_path, changed(SHOP, where, value))
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["simulate", str(out), "--system", str(path), "--cases", "2"])
    assert result.exit_code == 1
    assert result.output == f"Error: {path}: {message}\n"
    assert not out.exists()


@pytest.mark.parametrize("text, message", [
    ("components:\n  web: {kind: service}\n  web: {kind: cache}\n",
     "not valid YAML at line 3 ('web' is given twice in one mapping)"),
    ("a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{b}: &{b} [{', '.join([f'*{a}'] * 10)}]\n" for a, b in zip("abcdefgh", "bcdefghi")),
     "not valid YAML at line 5 (its aliases expand to more than 100,000 values)"),
    ("a: &a [1, *a]\n", "not valid YAML at line 1 (an alias refers to a value that holds it)"),
])
def test_a_description_that_would_hide_a_field_or_exhaust_the_checks_is_refused_at_once(tmp_path, text, message):
    """A key given twice would silently replace the first; an alias bomb of a kilobyte would run the schema's checks
    for minutes through gigabytes (and its refusal would quote the whole expanded value)."""
    path = tmp_path / "shop.yaml"
    path.write_text(text)
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["simulate", str(out), "--system", str(path), "--cases", "2"])
    assert (result.exit_code, result.output) == (1, f"Error: {path}: {message}\n")
    assert not out.exists()


def test_anchors_and_merge_keys_that_override_stay_usable(tmp_path):
    """What a description of several instances of one datastore writes: an anchor reused, a merge key overridden."""
    text = yaml.safe_dump(SHOP, sort_keys=False).replace("  db:\n", "  db: &pg\n", 1)
    text = text.replace("\nfaults:", "\n  db2:\n    <<: *pg\n    port: 5433\nfaults:", 1)
    path = tmp_path / "shop.yaml"
    path.write_text(text)
    system = load(path)
    assert system.components["db2"].port == 5433 and system.components["db"].port == 5432


def test_every_instance_of_one_datastore_kind_keeps_its_own_metrics(tmp_path):
    """Two PostgreSQL instances write the same exporter's files, one row per instance: each keeps its series in the
    store (once, the last one written took the file, and the other had no metrics of its own)."""
    shop = changed(SHOP, "components/db2", dict(SHOP["components"]["db"]))
    shop = changed(shop, "components/orders/operations/Place/steps/1", {"call": "db2.INSERT"})
    _, con = one_hour(tmp_path, shop, "cpu stress")
    rows = dict(con.execute("""select service, count(*) from metric_points where metric = 'pg_up'
                               group by all""").fetchall())
    assert set(rows) == {"db", "db2"} and rows["db"] == rows["db2"] > 0, rows


def test_every_fault_s_truth_names_metrics_its_system_writes():
    """On every shipped system, each fault's metric observations (and a datastore fault's key metrics) are series
    its simulated dump writes."""
    from testbed.faults import fault_types
    from testbed.workload import series_names

    for name in shipped_names():
        system = load(name)
        topo, written = Topology.build(0, system), series_names(system)
        for kind in fault_types(system):
            fault = get(kind, system)
            for target in fault.candidates(topo):
                truth = fault.truth(topo, target, "2025-06-06T00:00:00Z", "2025-06-06T00:10:00Z", "u")
                metrics = {k for o in truth["key_observations"] if o["type"] == "metric" for k in o["keyword"]}
                metrics |= set(truth["key_metrics"]) if fault.own_roles else set()
                assert metrics <= written, (name, kind, target, metrics - written)


def test_a_datastore_fault_on_a_stranger_s_database_names_its_own_series(tmp_path):
    """An io fault on a PostgreSQL instance: its truth names the instance's own io and wait series, which the store
    holds (once, TiDB's io_util and raft_apply_wait, on a system with no TiDB)."""
    shop = changed(SHOP, "components/db/metrics/kpis/pg_io_busy", [0.2, 0.1, 0.5, ["io"]])
    shop = changed(changed(shop, "components/db/metrics/kpis/pg_io_wait_ms", [2.0, 0.1, 0.5, ["wait"]]),
                   "faults/io fault", ["database"])
    case, con = one_hour(tmp_path, shop, "io fault")
    assert case.truth["key_metrics"] == ["pg_io_busy", "pg_io_wait_ms"]
    assert [o["keyword"] for o in case.truth["key_observations"] if o["type"] == "metric"][:2] == \
        [["pg_io_busy"], ["pg_io_wait_ms"]]
    held = {m for m, in con.execute("select distinct metric from metric_points where service = 'db'").fetchall()}
    assert set(case.truth["key_metrics"]) <= held


def test_an_io_fault_in_one_replica_of_a_datastore_moves_that_replica_s_own_series_alone(tmp_path):
    """Each replica of a datastore reports its own series (once, a replicated datastore's were all its first
    replica's, and an io fault on its second was named as the first)."""
    shop = changed(SHOP, "components/db/metrics/kpis/pg_io_busy", [0.2, 0.1, 0.5, ["io"]])
    shop = changed(changed(shop, "components/db/replicas", 2), "faults/io fault", ["database"])
    case, con = one_hour(tmp_path, shop, "io fault", lambda t: t.level == "pod" and t.pods == ("db-1",))
    during = con.execute("""select component, avg(value) from metric_points where metric = 'pg_io_busy' and ts >= ?
                            and ts < ? group by all""", [case.start.replace(tzinfo=None), case.end.replace(tzinfo=None)])
    assert dict(during.fetchall()) == pytest.approx({"db-0": 0.2, "db-1": 0.9}, abs=0.1)


def test_a_described_system_reads_back_with_the_same_names(tmp_path):
    """`describe` writes what `simulate` reads: a name YAML 1.2 reads as a number (6e3) stays a name, and a name
    with a dot is called by an unambiguous reference."""
    from testbed.system import dump

    shop = json.loads(json.dumps(SHOP).replace('"catalog": {', '"6e3": {').replace('"catalog.', '"6e3.')
                      .replace('"cache": {', '"cache.v1": {').replace('"cache.GET"', '"cache.v1.GET"'))
    path = tmp_path / "shop.yaml"
    path.write_text(dump(shop))
    system = load(path)
    assert {"6e3", "cache.v1"} <= set(system.components)
    assert ("6e3", "cache.v1") in system.calls() and ("web", "6e3") in system.calls()
    ambiguous = changed(changed(shop, "components/cache", {"kind": "cache", "operations": {"v1.GET": {}}}),
                        "components/cache.v1/failure", "x")
    path = tmp_path / "ambiguous.yaml"
    path.write_text(dump(ambiguous))
    with pytest.raises(DescriptionError, match=r"steps\[1\]\.call: 'cache.v1.GET' names both cache's 'v1.GET' and "
                                        r"cache.v1's 'GET'; rename one"):
        load(path)


def test_a_drawn_system_s_description_reads_back_from_its_own_telemetry(tmp_path):
    """`rcalab describe` of a drawn system's simulated store gives back its services, their operations (gRPC's
    `package.Service/Method` and HTTP's routes as the description names them) and its calls: into services, into
    datastores its clients trace (by the peer they name), and a message published once to a topic two consumers
    take."""
    from testbed.drawn import draw
    from testbed.system import dump

    path = tmp_path / "drawn.yaml"
    path.write_text(dump(draw(3)))
    system = load(path)
    topo = Topology.build(4, system)
    simulate(tmp_path / "dump", random_cases(1, topo, seed=4), topo, scale=0.05, seed=4, hours=1)
    run_etl(tmp_path / "dump", tmp_path / "drawn.duckdb")
    result = CliRunner().invoke(cli, ["describe", "--db", str(tmp_path / "drawn.duckdb"), "--name", "back"])
    assert result.exit_code == 0, result.output
    back = load(write(tmp_path, yaml.safe_load(result.output), "back.yaml"))

    def operations(s):
        return {(name, op) for name, c in s.components.items() if c.traced for op in c.operations}

    assert {n for n, c in back.components.items() if c.traced} == {n for n, c in system.components.items() if c.traced}
    assert operations(back) == operations(system)
    assert set(back.calls()) == set(system.calls())
    assert any(len(system.consumers(b, t)) == 2 for b, c in system.components.items() for t in c.topics)


def test_a_system_no_fault_applies_to_is_one_line_at_simulate(tmp_path):
    """A description as `describe` drafts it names no faults yet: simulating cases of it says so, not a crash."""
    path = write(tmp_path, changed(SHOP, "faults", {}))
    result = CliRunner().invoke(cli, ["simulate", str(tmp_path / "out"), "--system", str(path), "--cases", "1"])
    assert result.exit_code == 1 and result.output.strip().splitlines()[-1] == (
        f"Error: {path}: no fault applies to this system (its `faults` are empty): name the faults that apply "
        "(docs/formats.md)"), result.output


def test_every_shipped_system_loads_and_names_what_it_simulates():
    assert {"hipstershop", "trainticket", "otel-demo"} <= set(shipped_names())
    for name in shipped_names():
        system = load(name)
        assert system.entry in system.components and system.faults


def test_a_scenario_that_names_its_key_metrics_looks_for_them_where_its_target_writes_them():
    """The demo's Kafka queue problems name the broker's own backlog as its exporter does: the truth's key metrics and
    its metric observation alike, not the consumers' lag the mechanism names by default (the broker has none)."""
    system = load("otel-demo")
    fault = get("kafka queue problems", system)
    topo = Topology.build(0, system)
    truth = fault.truth(topo, fault.candidates(topo)[0], "2025-06-06T00:00:00Z", "2025-06-06T00:10:00Z", "u")
    assert truth["key_metrics"] == ["kafka_consumergroup_lag_sum"]
    assert [o["keyword"] for o in truth["key_observations"] if o["type"] == "metric"] == [truth["key_metrics"]]
    assert set(truth["key_metrics"]) <= set(system.components["kafka"].kpis)


def test_a_code_fault_acts_where_requests_run(tmp_path):
    """Of a service's operations with code positions to break, a code fault acts in the one the workload calls, not
    in a longer one no request reaches (that fault would leave nothing abnormal to find)."""
    shop = with_code_positions(SHOP)
    shop = changed(shop, "components/orders/operations/Audit",
                   {"steps": [{"log": f"o.Audit#{n} step {n}"} for n in (1, 2, 3, 4, 5, 6)]})
    system = load(write(tmp_path, shop))
    assert code_site(system.components["orders"], "exception")[0] == "Audit"
    assert busiest_site(system, "orders", "exception") == ("Place", 0, "o.Orders#10_o.Orders#20")


def test_a_code_site_starts_at_a_line_its_operation_logs_once(tmp_path):
    """Train Ticket's trips/left logs #469 twice (a loop), followed once by #459 and once by #366: a pair that starts
    there is followed as expected half of the time, and names no one place in the code."""
    loop = [{"log": f"o.Orders#{n} line {n}"} for n in (10, 20, 30, 20, 40)] + [{"publish": "queue.orders"}]
    system = load(write(tmp_path, changed(SHOP, "components/orders/operations/Place/steps", loop)))
    assert code_site(system.components["orders"], "exception")[2] == "o.Orders#10_o.Orders#20"


def ten_minutes(topo, kind, target) -> Case:
    """A case of ten minutes of `kind` on `target` from 02:10 of the simulated day."""
    start = dt.datetime(2025, 6, 6, 2, 10, tzinfo=dt.timezone.utc)
    end = start + dt.timedelta(minutes=10)
    return Case("x-0", kind, target, start, end, kind.truth(topo, target, format_time(start), format_time(end), "x-0"))


def answered(tmp_path, case, topo, scale: float, seed: int):
    """The digest of `case`, simulated with the hours before it (its baseline), and loaded."""
    simulate(tmp_path / "dump", [case], topo, scale=scale, seed=seed, hours=3)
    nightly(tmp_path / "dump", tmp_path / "case.duckdb")
    con = store.connect(tmp_path / "case.duckdb", read_only=True)
    return build_digest(con, load_questions(tmp_path / "dump" / "input.json")[0])


def one_hour(tmp_path, description, fault: str, pick=lambda target: target.level == "service"):
    """An hour of the described system with a ten-minute `fault` on the first of its targets `pick` takes (a whole
    service by default), loaded."""
    system = load(write(tmp_path, description))
    topo = Topology.build(4, system)
    kind = get(fault, system)
    target = next(t for t in kind.candidates(topo) if pick(t))
    case = ten_minutes(topo, kind, target)
    simulate(tmp_path / "dump", [case], topo, scale=0.2, seed=4, hours=1)
    run_etl(tmp_path / "dump", tmp_path / "shop.duckdb")
    return case, store.connect(tmp_path / "shop.duckdb", read_only=True)


def test_a_method_that_throws_logs_its_exception_after_the_line_before_it(tmp_path):
    """The framework logs a thrown exception as the request unwinds: after the line the method wrote before it threw,
    by at least the millisecond a log line is written to (in the same millisecond the two read in either order, and
    the path seems to break before that line, not after it, where the truth says)."""
    shop = with_code_positions(SHOP)
    shop = changed(changed(shop, "faults/exception", ["service"]), "components/orders/log_style", "spring")
    case, con = one_hour(tmp_path, shop, "exception")
    after = con.execute("""select bool_and(thrown.ts > line.ts), count(*) from log_lines thrown
                           join log_lines line using (trace_id, span_id)
                           where thrown.service = 'orders' and thrown.level = 'ERROR' and line.event = 'o.Orders#10'
                        """).fetchone()
    assert case.truth["key_metrics"] == ["o.Orders#10_o.Orders#20"] and after[0] and after[1] >= 10, after


def callee_spans(con, callee: str, *also: str) -> tuple:
    """How many server spans of `callee` there are and how many failed, and how many of the client spans that called
    them failed; `also`: more counts over the server spans `s` (and their callers' spans `c`)."""
    return con.execute(f"""select count(*), count(*) filter (where s.status_code <> 0),
                                  count(*) filter (where c.status_code <> 0) {''.join(', ' + a for a in also)}
                           from spans s join spans c on c.trace_id = s.trace_id and c.span_id = s.parent_span_id
                           left join log_lines line on line.trace_id = s.trace_id and line.span_id = s.span_id
                                and line.event = 'o.Orders#20'
                           where s.service = ? and s.kind = 'server' and c.kind = 'client'""", [callee]).fetchone()


def test_a_callee_whose_caller_gave_up_waiting_still_logs_what_its_code_ran(tmp_path):
    """A caller's deadline ends its wait, not the callee's work: a slow callee's spans keep every line their code
    writes (else a latency would read as a broken code path), and end as their code did: the caller's span failed
    (once every callee's span failed with it, and a caller whose own callee was slow read as where errors start)."""
    shop = changed(changed(with_code_positions(SHOP), "components/web/operations/POST %2Forder/steps/0",
                           {"call": "orders.Place", "deadline_ms": 1}), "components/orders/log_style", "spring")
    _, con = one_hour(tmp_path, shop, "cpu stress")
    spans, failed, gave_up, logged = callee_spans(con, "orders", "count(line.span_id)")
    assert spans >= 10 and failed == 0 and gave_up == spans and logged == spans, (spans, failed, gave_up, logged)


def test_a_call_that_fails_on_the_wire_fails_its_caller_s_span_not_the_callee_s(tmp_path):
    """Packets lost on the way: the callee's code ran to its end (or never heard of the call); only the caller saw
    the call fail."""
    _, con = one_hour(tmp_path, changed(SHOP, "faults/network loss", ["link"]), "network loss",
                      lambda t: t.edge == ("web", "orders"))
    spans, failed, lost = callee_spans(con, "orders")
    assert lost >= 3 and failed <= spans * 0.01, (spans, failed, lost)


@pytest.fixture(scope="module")
def shop_store(tmp_path_factory):
    """The test's shop, a day of it with a fault an hour of five kinds, loaded."""
    tmp = tmp_path_factory.mktemp("shop")
    system = load(write(tmp, SHOP))
    topo = Topology.build(4, system)
    cases = []
    for i, (fault, target) in enumerate([("cpu stress", "catalog"), ("consumer stall", "billing"),
                                         ("producer flood", "orders"), ("pod failure", "db"),
                                         ("consumer stall", "mailer"), ("cpu stress", "web")]):
        kind = get(fault, system)
        chosen = next(t for t in kind.candidates(topo) if t.pods and topo.service_of[t.pods[0]] == target
                      and t.level == "service")
        start = dt.datetime(2025, 6, 6, 2 + 3 * i, 10, tzinfo=dt.timezone.utc)
        end = start + dt.timedelta(minutes=12)
        uuid = f"shop-{i}"
        cases.append(Case(uuid, kind, chosen, start, end, kind.truth(topo, chosen, format_time(start), format_time(end),
                                                                     uuid)))
    dump = tmp / "dump"
    simulate(dump, cases, topo, scale=0.2, seed=4)
    db = tmp / "shop.duckdb"
    nightly(dump, db)
    return db, dump, cases


@pytest.mark.parametrize("level", ["pod", "service"])
def test_a_code_fault_in_one_replica_is_named_as_the_pod_and_in_all_as_the_service(tmp_path, level):
    """A wrong return whose other branch logs a line of the same shape (one template) leaves no new log line: only the
    path of catalog's List tells. Where one of its two replicas broke and the other held, the pod is the answer;
    where both broke, the service is."""
    steps = [{"log": "c.Catalog#10 listing items"},
             {"log": "c.Catalog#20 listed {id}", "else": "c.Catalog#21 listed {id}", "else_level": "info"},
             {"call": "cache.GET"}]
    shop = changed(changed(SHOP, "components/catalog/operations/List/steps", steps), "faults/wrong return", ["service"])
    shop = changed(changed(shop, "components/catalog/log_style", "spring"), "components/catalog/language", "java")
    system = load(write(tmp_path, shop))
    topo = Topology.build(4, system)
    kind = get("wrong return", system)
    target = next(t for t in kind.candidates(topo) if t.level == level and topo.service_of[t.pods[0]] == "catalog")
    case = ten_minutes(topo, kind, target)
    digest = answered(tmp_path, case, topo, scale=0.05, seed=5)
    named = {"pod": "catalog-0", "service": "catalog"}[level]
    assert case.truth["instance"] in (named, [named]) and digest.candidates[0].component == named, digest.text[:800]


def test_the_requests_a_code_fault_fails_are_errors_in_the_metrics_as_in_the_spans(tmp_path):
    """A failure switch on one operation fails a share of its requests: its service's server errors and its caller's
    client errors count them, in the share that operation has of their requests (the spans already failed them)."""
    system = load(write(tmp_path, SHOP))
    topo = Topology.build(0, system)
    day = build_day(dt.date(2025, 6, 6), topo, 0)
    during, before = slice(600, 660), slice(300, 560)
    catalog = Target("service", tuple(topo.pods_of("catalog")))
    FAULTS["operation failure"].apply(day, catalog, during, np.random.default_rng(0), operation="List", share=0.5)
    tables = dict(apm_tables(day, expected_latency(day), np.random.default_rng(0)))

    def ratio(component, kind, minutes):  # percent of the component's requests, over the minutes
        return tables[component].column(f"{kind}_ratio").to_numpy()[minutes].mean()

    assert ratio("catalog", "server_error", before) < 1 and ratio("catalog", "server_error", during) > 40
    assert ratio("web", "client_error", before) < 1 and 25 < ratio("web", "client_error", during) < 45


def test_a_flood_of_a_service_comes_by_the_routes_that_reach_it(tmp_path):
    """Users flood orders: the entry's orders route takes three to four times its requests, and every service on it
    with it; the items route and its services keep their load (once, a flood raised the whole system's, so every
    service's traffic rose alike and the entry read as where it came from)."""
    topo = Topology.build(0, load(write(tmp_path, changed(SHOP, "faults/flood", ["service"]))))
    day = build_day(dt.date(2025, 6, 6), topo, 0)
    during, before = slice(600, 660), slice(300, 560)
    before_flood = {s: day.requests(s) for s in ("web", "orders", "billing", "catalog")}
    FAULTS["flood"].apply(day, Target("service", tuple(topo.pods_of("orders"))), during, np.random.default_rng(0))
    rose = {s: day.requests(s)[during].sum() / before_flood[s][during].sum() for s in before_flood}
    assert rose["catalog"] == pytest.approx(1.0) and rose["orders"] == pytest.approx(rose["billing"])
    assert 2.5 <= rose["orders"] <= 4.0
    assert 1.3 < rose["web"] < 2.0  # its orders route is a third of its requests
    assert (day.requests("orders")[before] == before_flood["orders"][before]).all()


def test_a_flood_is_a_service_s_never_one_replica_s(tmp_path):
    """Users' requests come through the Service, which spreads them over its replicas: every replica's requests rise,
    so a truth that names one of them (whose cpu alone rose) describes no flood a cluster can have."""
    topo = Topology.build(0, load(write(tmp_path, changed(SHOP, "faults/flood", ["service"]))))
    targets = FAULTS["flood"].candidates(topo)
    assert {t.level for t in targets} == {"service"} and len(targets) == 5


@pytest.mark.parametrize("kind", ["network delay", "network loss", "network corrupt"])
def test_a_network_fault_on_the_entry_which_only_users_call_slows_or_fails_its_calls(kind, tmp_path):
    """Seen on a drawn system: a network fault on the entry's own network degraded the links into it, of which the
    entry has none, and left no trace while its truth named the entry's response time. Its calls out meet it."""
    from testbed.workload import expected_latency

    topo = Topology.build(0, load(write(tmp_path, SHOP)))
    day = build_day(dt.date(2025, 6, 6), topo, 0)
    during, before = slice(600, 660), slice(300, 560)
    FAULTS[kind].apply(day, Target("service", tuple(topo.pods_of("web"))), during, np.random.default_rng(0))
    ms, err, _ = expected_latency(day)
    web = [topo.index(p) for p in topo.pods_of("web")]
    assert ms[during][:, web].mean() > 20 * ms[before][:, web].mean() or err[during][:, web].mean() > 0.2


def test_a_service_that_only_takes_messages_is_no_network_fault_s_target(tmp_path):
    """billing and mailer only consume from the queue: no call goes into or out of them that a network fault could
    slow, so a schedule never names them for one (a fault that leaves no trace under a truth that names it)."""
    topo = Topology.build(0, load(write(tmp_path, changed(SHOP, "faults", {"network loss": ["service"]}))))
    named = {topo.service_of[t.pods[0]] for t in FAULTS["network loss"].candidates(topo)}
    assert named == {"web", "catalog", "orders"}


def test_a_system_written_only_for_the_test_simulates_loads_and_ranks(shop_store):
    db, dump, cases = shop_store
    con = store.connect(db, read_only=True)
    first = {q.uuid: build_digest(con, q).candidates[0].component for q in load_questions(dump / "input.json")}
    right = [c.uuid for c in cases if first[c.uuid].startswith(c.truth["service"])]
    assert len(right) >= 5, first  # of six


def test_a_consumers_lag_is_the_consumers_or_the_producers_whichever_holds(shop_store):
    """A stalled consumer lags alone (its own trouble); a producer that floods its topic makes every consumer lag
    (the producer's trouble, felt downstream): no call fails in either."""
    db, dump, cases = shop_store
    con = store.connect(db, read_only=True)
    questions = {q.uuid: q for q in load_questions(dump / "input.json")}
    for case in cases:
        if case.fault.name in ("consumer stall", "producer flood"):
            digest = build_digest(con, questions[case.uuid])
            assert digest.candidates[0].component == case.truth["service"], (case.fault.name, digest.text)
    (errors,), = con.execute("select count(*) filter (where status_code <> 0) from spans where ts between ? and ?",
                             [cases[1].start.replace(tzinfo=None), cases[1].end.replace(tzinfo=None)]).fetchall()
    assert errors < 5  # a stall fails nothing


def test_every_fault_a_drawn_system_applies_acts_on_every_target_it_may_draw(tmp_path):
    """A fault that changes nothing on a target a schedule may draw leaves a case no method can answer, under a truth
    that names it (a network fault on the entry, which only users call, once did). Each fault, on each target, in a
    window of its own: something in that window must change (a series, a link, a log burst, a code break, the
    cluster's state)."""
    from testbed import faults
    from testbed.drawn import draw
    from testbed.system import dump

    def seen(day, sl):
        series = [day.load, day.own_factor, day.own_extra_ms, day.own_err, day.unreachable, day.unrouted, day.traffic,
                  *day.pod_kpi.values(), *day.node_kpi.values(), *(a for k in day.db_kpi.values() for a in k.values()),
                  *day.edge_ms.values(), *day.edge_err.values(), *day.lag_ms.values()]
        return ([float(np.abs(a[sl].astype(float)).sum()) for a in series], len(day.bursts),
                sum(map(len, day.breaks.values())), len(day.cluster), len(day.edge_err_kind))

    idle = []
    for seed in range(8):
        path = tmp_path / f"drawn-{seed}.yaml"
        path.write_text(dump(draw(seed)))
        system = load(path)
        topo, used = Topology.build(0, system), 40
        for name in faults.fault_types(system):
            fault = faults.get(name, system)
            for target in fault.candidates(topo):
                if used == 40:  # a day holds 40 windows
                    day, used = build_day(dt.date(2025, 6, 6), topo, 0), 0
                sl, used = slice(60 + 30 * used, 80 + 30 * used), used + 1
                before = seen(day, sl)
                fault.apply(day, target, sl, np.random.default_rng(0))
                if seen(day, sl) == before:
                    idle.append((seed, name, target.edge or target.node or target.pods[0]))
    assert not idle


def test_train_tickets_calls_are_those_of_its_real_days():
    system = load("trainticket")
    described = {(c, d) for c, d in system.calls() if system.components[d].traced}
    real = set()
    for day in ("nezha-trainticket", "nezha-trainticket-0129am"):
        traces = SHARED / day / "rca_data"
        rows = duckdb.execute(f"""
            select distinct regexp_replace(p.PodName, '-[a-z0-9]{{8,10}}-[a-z0-9]{{5}}$', ''),
                            regexp_replace(c.PodName, '-[a-z0-9]{{8,10}}-[a-z0-9]{{5}}$', '')
            from read_csv('{traces}/*/trace/*.csv', all_varchar = true) c
            join read_csv('{traces}/*/trace/*.csv', all_varchar = true) p
              on c.ParentID = p.SpanID and c.TraceID = p.TraceID""").fetchall()
        real |= {(a, b) for a, b in rows if a != b}
    assert described <= real and len(described) >= 0.9 * len(real), (described - real, real - described)


def test_every_drawn_description_passes_the_schema_and_the_checks(tmp_path):
    """A drawn description the checks refuse is the generator's bug. Across 200 seeds the drawings span the schema's
    space: 5 to 60 components, replicas 1 to 5, several instances of one datastore kind, brokers with two
    consumers, every log style and both protocols, code positions or none, chains eight calls deep."""
    from testbed.drawn import draw
    from testbed.system import dump

    seen = {"styles": set(), "protocols": set(), "replicas": set(), "sizes": set(), "kinds": set()}
    several = consumed_twice = positions = deep = 0
    for seed in range(200):
        path = tmp_path / f"drawn-{seed}.yaml"
        path.write_text(dump(draw(seed)))
        system = load(path)
        comps = system.components.values()
        seen["sizes"].add(len(comps))
        seen["styles"] |= {c.log_style for c in comps if c.kind == "service"}
        seen["protocols"] |= {c.protocol for c in comps if c.kind == "service"}
        seen["replicas"] |= {c.replicas for c in comps}
        seen["kinds"] |= {c.kind for c in comps}
        sources = [c.source for c in comps if c.source]
        several += len(sources) > len(set(sources))
        consumed_twice += any(len(system.consumers(b, t)) >= 2 for b, c in system.components.items() for t in c.topics)
        positions += any("#" in s.log for c in comps for op in c.operations.values() for s in op.steps)
        deep += _depth(system, system.entry) >= 8
    assert min(seen["sizes"]) <= 8 and max(seen["sizes"]) >= 55
    assert seen["styles"] == {"go-json", "log4j-json", "spring", "python-json", "pino", "plain"}
    assert seen["protocols"] == {"grpc", "http"} and seen["replicas"] == {1, 2, 3, 4, 5}
    assert seen["kinds"] == {"service", "database", "cache", "storage", "coordinator", "broker"}
    assert several > 50 and consumed_twice > 20 and 50 < positions < 150 and deep > 20, (several, consumed_twice,
                                                                                         positions, deep)


def test_a_system_of_500_components_with_dozens_of_one_datastore_kind_simulates(tmp_path):
    """Past the drawn sizes: 500 components, among them a hundred datastores of two kinds, simulate an hour, and every
    replica of every instance of a kind keeps its own rows in the kind's files."""
    from testbed.drawn import draw
    from testbed.system import dump

    path = tmp_path / "big.yaml"
    path.write_text(dump(draw(1, size=500)))
    system = load(path)
    topo = Topology.build(4, system)
    simulate(tmp_path / "dump", random_cases(1, topo, seed=4), topo, scale=0.002, seed=4, hours=1)
    kinds = Counter(c.source for c in system.components.values() if c.source)
    assert len(system.components) == 500 and min(kinds.values()) >= 10, kinds
    for kind in kinds:
        comp = next(c for c in system.components.values() if c.source == kind)
        kpi = next(iter(comp.kpis))
        rows = pl.read_parquet(next((tmp_path / "dump").glob(f"*/metric-parquet/{comp.metrics_file}_{kpi}_*.parquet")))
        assert set(rows["pod"]) == {p for n, c in system.components.items() if c.source == kind
                                    for p in topo.pods_of(n)}


def _depth(system, component: str, known: dict | None = None) -> int:
    """How many synchronous calls deep the longest chain from `component` goes."""
    known = {} if known is None else known
    if component not in known:
        known[component] = max((1 + _depth(system, c, known) for c in set(system.callees(component))), default=0)
    return known[component]


def test_a_drawn_system_simulates_loads_and_ranks(tmp_path):
    """A drawn system's pod failure, with the hours before it as the baseline, is ranked first."""
    from testbed.drawn import draw

    system = load(write(tmp_path, draw(3)))
    topo = Topology.build(4, system)
    kind = get("pod failure", system)
    target = next(t for t in kind.candidates(topo) if t.level == "service" and system.components[
        topo.service_of[t.pods[0]]].kind == "service")
    case = ten_minutes(topo, kind, target)
    digest = answered(tmp_path, case, topo, scale=0.1, seed=4)
    assert digest.candidates and digest.candidates[0].component == case.truth["service"], digest.text[:600]


def test_a_network_fault_on_a_whole_service_simulates(tmp_path):
    """The library lets a network fault act on every link into a service; a corruption there once crashed on the
    link it assumed (a description drawn at random applied it first)."""
    case, con = one_hour(tmp_path, changed(SHOP, "faults/network corrupt", ["service"]), "network corrupt")
    assert case.target.edge is None and con.execute("select count(*) from spans").fetchone()[0] > 0


def test_a_broker_that_declares_no_series_of_its_backlog_holds_it_in_its_pods_memory(tmp_path):
    """A queue backs up in the broker's process. Where its description declares no series of its waiting messages
    (a stranger's RabbitMQ may declare none), its pods' memory and disk writes swell with the backlog: the broker
    shows a change of its own beside its consumers' lag, which drawn-1002's queue overloads did not."""
    system = load(write(tmp_path, SHOP))
    topo = Topology.build(0, system)
    day = build_day(dt.date(2025, 6, 6), topo, 0)
    broker = Target("service", tuple(topo.pods_of("queue")))
    idx = [topo.index(p) for p in broker.pods]
    during, before = slice(600, 660), slice(300, 560)
    FAULTS["queue overload"].apply(day, broker, during, np.random.default_rng(0))
    for kpi in ("pod_memory_working_set_bytes", "pod_fs_writes_bytes"):
        series = day.pod_kpi[kpi][:, idx]
        assert series[during].mean() > 1.5 * series[before].mean()
