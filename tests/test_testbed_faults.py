"""Every fault type leaves its ground-truth signature on its target, inside its window only."""

import datetime as dt
import hashlib

import duckdb
import pytest

from testbed.faults import FAULTS, Target
from testbed.schedule import random_cases
from testbed.simulate import simulate
from testbed.system import load
from testbed.topology import Topology

# fault type -> (where, what, direction): the key metric or log keyword the truth names.
SIGNATURES = {
    "cpu stress": ("pod", "pod_cpu_usage", "up"),
    "memory stress": ("pod", "pod_memory_working_set_bytes", "up"),
    "pod kill": ("pod", "pod_memory_working_set_bytes", "down"),
    "pod failure": ("log", "connection refused", "up"),
    "jvm cpu": ("log", "adservice--stress", "up"),
    "jvm gc": ("log", "GCHelper", "up"),
    "jvm latency": ("log", "adservice-getRandomAds-latency", "up"),
    "jvm exception": ("log", "adservice-getrandomads-exception", "up"),
    "network delay": ("apm", "rrt", "up"),
    "network loss": ("apm", "rrt", "up"),
    "network corrupt": ("apm", "error_ratio", "up"),
    "dns error": ("log", "no such host", "up"),
    "target port misconfig": ("log", "connection refused", "up"),
    "code error": ("log", "code error", "up"),
    "io fault": ("tikv", "io_util", "up"),
    "node cpu stress": ("node", "node_cpu_usage_rate", "up"),
    "node memory stress": ("node", "node_memory_usage_rate", "up"),
    "node disk fill": ("node", "node_filesystem_usage_rate", "up"),
}


def test_library_has_every_fault_type_of_the_challenge():
    assert set(load("hipstershop").faults) == set(SIGNATURES) <= set(FAULTS) and len(SIGNATURES) == 18
    for fault in FAULTS.values():
        assert fault.key_metrics and fault.key_observations and fault.fault_description


def _query(dump, case, where, what, lo, hi):
    day = (case.start + dt.timedelta(hours=8)).date().isoformat()
    metric = dump / day / "metric-parquet"
    truth = case.truth
    column = "cast(time as timestamptz)"
    if where == "log":
        column = 'cast("@timestamp" as timestamptz)'
    span = f"{column} >= TIMESTAMPTZ '{lo.isoformat()}' and {column} < TIMESTAMPTZ '{hi.isoformat()}'"
    if where == "pod":
        pods = ", ".join(f"'{p}'" for p in case.target.pods)
        sql = f"select avg({what}) from '{metric}/infra/infra_pod/infra_pod_{what}_{day}.parquet' where pod in ({pods})"
    elif where == "node":
        sql = (f"select avg({what}) from '{metric}/infra/infra_node/infra_node_{what}_{day}.parquet' "
               f"where kubernetes_node = '{truth['instance']}'")
    elif where == "tikv":
        sql = f"select avg({what}) from '{metric}/other/infra_tikv_{what}_{day}.parquet' where true"
    elif where == "apm":
        sql = (f"select avg({what}) from '{metric}/apm/pod_ns_hipstershop_{day}.parquet' "
               f"where object_id = '{truth['source']}'")
    else:
        sql = (f"select count(*) from '{dump}/{day}/log-parquet/*.parquet' "
               f"where message ilike '%{what}%' and {span}")
        return duckdb.execute(sql).fetchone()[0]
    return duckdb.execute(f"{sql} and {span}").fetchone()[0]


@pytest.mark.parametrize("fault_type", sorted(SIGNATURES))
def test_fault_signature_in_window_only(every_fault, fault_type):
    dump, cases = every_fault
    case = next(c for c in cases if c.fault.name == fault_type)
    where, what, direction = SIGNATURES[fault_type]
    if case.end - case.start < dt.timedelta(minutes=2):  # a window of seconds (pod kill): its first minutes
        lo, hi = case.start.replace(second=0), case.start + dt.timedelta(minutes=2)
    else:
        lo, hi = case.start + dt.timedelta(minutes=2), case.end
    during = _query(dump, case, where, what, lo, hi)
    before = _query(dump, case, where, what, case.start - dt.timedelta(minutes=30),
                    case.start - dt.timedelta(minutes=5))
    if where == "log":
        assert during >= 3 and before == 0, (during, before)
    elif direction == "up":
        assert during > 1.5 * before + 1e-3, (during, before)
    else:
        assert during < 0.7 * before, (during, before)


def _digest(folder):
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_same_seed_same_bytes(tmp_path):
    for name, seed in (("a", 5), ("b", 5), ("c", 6)):
        topo = Topology.build(seed)
        simulate(tmp_path / name, random_cases(2, topo, seed), topo, scale=0.002, seed=seed)
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
    assert _digest(tmp_path / "a") != _digest(tmp_path / "c")


@pytest.fixture(scope="module")
def signatures(every_fault_store):
    from testbed.signatures import check

    return check(*every_fault_store)


@pytest.mark.parametrize("fault_type", sorted(SIGNATURES))
def test_every_consequence_the_fault_entry_names_shows(signatures, fault_type):
    """Every key metric the entry's ground truth names moves on the instance, every log observation is found.
    Trace observations may miss: at the test's scale a window holds a few traces a minute."""
    r = signatures[fault_type]
    assert r["metrics"] in (None, 1.0), r["misses"]
    assert all(miss.startswith("trace:") for miss in r["misses"]), r["misses"]


def test_a_network_fault_on_a_whole_service_names_no_count_or_byte_of_its_own():
    """A delay on a whole service's network (Train Ticket's, as Nezha injects it) keeps its request counts and bytes
    level: its callers wait on it and give up no call, and the real days show them flat. Its truth names where it
    is felt (the calls' times), not them; a delay on one link names both, as the challenge's truth does."""
    system = load("trainticket")
    topo = Topology.build(4, system)
    delay = FAULTS["network delay"]
    whole = next(t for t in delay.candidates(topo) if not t.edge)
    truth = delay.truth(topo, whole, "2025-06-06T10:10:00Z", "2025-06-06T10:20:00Z", "tt-1")
    named = truth["key_metrics"] + [k for o in truth["key_observations"] if o["type"] == "metric" for k in o["keyword"]]
    assert "rrt" in truth["key_metrics"] and not {"request", "pod_network_receive_bytes"} & set(named)
    link = delay.truth(topo, Target("service", edge=("ts-gateway-service", "ts-order-service")), "a", "b", "l")
    assert {"rrt", "request", "pod_network_receive_bytes"} <= set(link["key_metrics"])


def test_a_truth_names_the_systems_entry_and_its_clients_words():
    """A Train Ticket truth names its own entry, not HipsterShop's frontend, and a failed HTTP call by the words
    its callers' lines carry (Spring's 'Read timed out'), not gRPC's status names."""
    from testbed.failures import HTTP_ERRORS, HTTP_WORDS, failure_line

    system = load("trainticket")
    topo = Topology.build(4, system)
    loss = FAULTS["network loss"]
    target = next(t for t in loss.candidates(topo) if t.edge and system.components[t.edge[1]].protocol == "http")
    truth = loss.truth(topo, target, "2025-06-06T10:10:00Z", "2025-06-06T10:20:00Z", "tt-1")
    words = [k for o in truth["key_observations"] for k in o["keyword"]]
    assert system.entry in words and "frontend" not in words and "deadlineexceeded" not in words
    line = failure_line("deadline", topo, topo.pods_of(target.edge[1])[0])
    assert any(k in line for o in truth["key_observations"] if o["type"] == "log" for k in o["keyword"]), line
    for said in HTTP_WORDS.values():  # every word put in gRPC's place is one an HTTP client's line carries
        assert not said or any(said[0] in line for line in HTTP_ERRORS.values()), said


@pytest.mark.parametrize("system", ["hipstershop", "otel-demo", "trainticket"])
def test_the_cluster_s_own_faults_act_on_any_system_s_workloads_though_its_description_names_none(system, tmp_path):
    import json

    from testbed.faults import CLUSTER
    from testbed.schedule import load_schedule

    described = load(system)
    assert CLUSTER and not set(CLUSTER) & set(described.faults)
    topo = Topology.build(0, described)
    cases = random_cases(2 * len(CLUSTER), topo, 0, list(CLUSTER))
    assert {c.fault.name for c in cases} == set(CLUSTER)
    assert {c.target.level for c in cases} == {"service"}  # a workload's spec, all its pods
    assert all(c.truth["instance"] in described.components for c in cases)
    path = tmp_path / "k8s.jsonl"  # its truth replays as a schedule
    path.write_text("".join(json.dumps(c.truth) + "\n" for c in cases))
    assert [c.target for c in load_schedule(path, topo)] == [c.target for c in cases]
