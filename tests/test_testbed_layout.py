"""The simulated dump reads back against DATA.md and the three real spans."""

import csv
import json
import re

import duckdb
import pyarrow.parquet as pq

from conftest import PHASE_ONE, SHARED

DATA_MD = (SHARED / "challenge2025" / "DATA.md").read_text()
DAY = "2025-06-06"


def kpis_of(label):
    """The KPI list DATA.md gives for one infra family, e.g. '- pod: a, b, c'."""
    block = re.search(rf"^- {re.escape(label)}: (.*?)(?=^- |^#|\Z)", DATA_MD, re.S | re.M).group(1)
    return [k.strip() for k in block.replace("\n", " ").split(",") if k.strip()]


def test_day_folders_and_hourly_files(replay):
    assert sorted(p.name for p in replay.iterdir()) == [DAY, "groundtruth.jsonl", "input.json"]
    for kind, stem in (("log", "log_filebeat-server"), ("trace", "trace_jaeger-span")):
        names = sorted(p.name for p in (replay / DAY / f"{kind}-parquet").iterdir())
        assert names == [f"{stem}_{DAY}_{h:02d}-00-00.parquet" for h in range(24)]


def test_every_metric_file_of_data_md(replay):
    metric = replay / DAY / "metric-parquet"
    families = {"pod": "infra/infra_pod/infra_pod_", "node": "infra/infra_node/infra_node_",
                "tidb": "infra/infra_tidb/infra_tidb_", "tikv (other/)": "other/infra_tikv_",
                "pd (other/)": "other/infra_pd_"}
    for label, prefix in families.items():
        for kpi in kpis_of(label):
            path = metric / f"{prefix}{kpi}_{DAY}.parquet"
            table = pq.read_table(path)
            assert kpi in table.column_names and table.column("kpi_key")[0].as_py() == kpi, path
    for pod in ("frontend-0", "cartservice-2", "redis-cart-0"):
        assert (metric / "apm" / "pod" / f"pod_{pod}_{DAY}.parquet").exists()
    assert (metric / "apm" / "service" / f"service_checkoutservice_{DAY}.parquet").exists()
    assert (metric / "apm" / f"pod_ns_hipstershop_{DAY}.parquet").exists()


def test_apm_and_infra_columns(replay):
    apm = pq.read_table(replay / DAY / "metric-parquet" / "apm" / f"pod_ns_hipstershop_{DAY}.parquet")
    assert apm.column_names == ["time", "object_id", "object_type", "request", "response", "rrt", "rrt_max", "error",
                                "client_error", "server_error", "timeout", "error_ratio", "client_error_ratio",
                                "server_error_ratio"]
    assert set(apm.column("object_type").to_pylist()) == {"pod", "service"}
    infra = pq.read_table(replay / DAY / "metric-parquet" / "infra" / "infra_pod" /
                          f"infra_pod_pod_cpu_usage_{DAY}.parquet")
    assert infra.column_names == ["time", "cf", "device", "instance", "kpi_key", "kpi_name", "kubernetes_node",
                                  "mountpoint", "namespace", "object_type", "pod", "sql_type", "type", "pod_cpu_usage"]
    row = infra.slice(0, 1).to_pylist()[0]
    assert row["instance"].startswith("aiops-k8s-") and row["object_type"] == "pod"


def test_cst_file_names_hold_utc_times(replay):
    logs = pq.read_table(replay / DAY / "log-parquet" / f"log_filebeat-server_{DAY}_00-00-00.parquet")
    assert logs.column_names == ["k8_namespace", "@timestamp", "agent_name", "k8_pod", "message", "k8_node_name"]
    stamps = logs.column("@timestamp").to_pylist()
    assert all(s.startswith("2025-06-05T16:") and s.endswith("Z") for s in stamps)
    spans = pq.read_table(replay / DAY / "trace-parquet" / f"trace_jaeger-span_{DAY}_00-00-00.parquet")
    first = min(spans.column("startTimeMillis").to_pylist())
    assert 1749139200000 <= first < 1749139200000 + 3_600_000  # 2025-06-05T16:00Z


def _keys(text, field="key"):
    """The values of one field in a real row's numpy/python repr, in order."""
    return re.findall(rf"'{field}': '([^']*)'", text)


def test_spans_have_the_real_columns_and_nesting(replay):
    with open(SHARED / "challenge2025" / "trace-sample-rows.csv") as f:
        rows = list(csv.DictReader(f))
    spans = pq.read_table(replay / DAY / "trace-parquet" / f"trace_jaeger-span_{DAY}_03-00-00.parquet")
    assert spans.column_names == list(rows[0].keys())
    sim = {r["tags"][8]["value"]: r for r in spans.slice(0, 400).to_pylist()}
    for real in rows:
        kind = re.search(r"'span.kind', 'type': 'string', 'value': '(\w+)'", real["tags"]).group(1)
        mine = sim[kind]
        assert [t["key"] for t in mine["tags"]] == _keys(real["tags"])
        assert [t["type"] for t in mine["tags"]] == _keys(real["tags"], "type")
        assert [list(r) for r in mine["references"]] == [re.findall(r"'(\w+)': '", real["references"])]
        first_event = real["logs"].split("'timestamp'")[0]
        assert [f["key"] for f in mine["logs"][0]["fields"]] == _keys(first_event)
        assert [f["value"] for f in mine["logs"][0]["fields"]][0] == _keys(first_event, "value")[0]
        assert [t["key"] for t in mine["process"]["tags"]] == _keys(real["process"])
        assert len(mine["traceID"]) == 32 and len(mine["spanID"]) == 16 and mine["flags"] == 1.0


def test_client_span_is_parent_of_server_span(replay):
    con = duckdb.connect()
    path = str(replay / DAY / "trace-parquet" / "*.parquet")
    pairs = con.sql(f"""
        with s as (select spanID, "references"[1].spanID as parent, process.serviceName as svc,
                          list_filter(tags, lambda t: t.key = 'span.kind')[1].value as kind,
                          list_filter(process.tags, lambda t: t.key = 'name')[1].value as pod
                   from read_parquet('{path}'))
        select c.svc as caller, p.svc as callee, count(*) as n
        from s p join s c on p.parent = c.spanID
        where p.kind = 'server' and c.kind = 'client' group by all""").fetchall()
    edges = {(a, b) for a, b, _ in pairs}
    assert ("frontend", "checkoutservice") in edges and ("checkoutservice", "paymentservice") in edges
    assert ("recommendationservice", "productcatalogservice") in edges
    assert all(a != b for a, b in edges)


def test_replay_keeps_the_schedule(replay):
    truth = [json.loads(line) for line in (replay / "groundtruth.jsonl").read_text().splitlines()]
    original = [json.loads(line) for line in PHASE_ONE.read_text().splitlines()[:5]]
    assert truth == original
    questions = json.loads((replay / "input.json").read_text())
    assert [q["uuid"] for q in questions] == [t["uuid"] for t in truth]
    for q, t in zip(questions, truth):
        assert t["start_time"] in q["Anomaly Description"] and t["end_time"] in q["Anomaly Description"]


def test_a_day_cut_to_its_last_hours_holds_those_hours_of_the_whole_day_byte_for_byte(replay, tmp_path):
    from testbed.schedule import load_schedule
    from testbed.simulate import simulate
    from testbed.topology import Topology
    from testbed.workload import CST

    topo = Topology.build(0)
    cases = load_schedule(PHASE_ONE, topo, limit=5)
    simulate(tmp_path, cases, topo, scale=0.005, seed=0, hours=2)
    last = max(c.end for c in cases).astimezone(CST)
    day = last.date().isoformat()
    traces = sorted(p.name for p in (tmp_path / day / "trace-parquet").iterdir())
    assert [int(name[-16:-14]) for name in traces] == [last.hour - 1, last.hour]
    for name in traces:
        assert (tmp_path / day / "trace-parquet" / name).read_bytes() == \
            (replay / day / "trace-parquet" / name).read_bytes()
    name = sorted(p.name for p in (tmp_path / day / "metric-parquet" / "apm" / "pod").iterdir())[0]
    cut = pq.read_table(tmp_path / day / "metric-parquet" / "apm" / "pod" / name).to_pylist()
    whole = pq.read_table(replay / day / "metric-parquet" / "apm" / "pod" / name).to_pylist()
    assert len(cut) == 120 and cut == [r for r in whole if cut[0]["time"] <= r["time"] <= cut[-1]["time"]]


def test_an_hour_s_spans_built_a_few_at_a_time_are_the_spans_built_at_once(replay, tmp_path, monkeypatch):
    """Seen on a random system of `bench systems` (over half a million spans an hour): pyarrow handed back a NumPy
    array of more than 2**22 strings in pieces, which an Arrow struct cannot hold. An hour is built in pieces of its
    own: the same spans, in the same order, with the same draws."""
    from testbed import traces
    from testbed.schedule import load_schedule
    from testbed.simulate import simulate
    from testbed.topology import Topology

    monkeypatch.setattr(traces, "SPANS_AT_ONCE", 100)
    topo = Topology.build(0)
    simulate(tmp_path, load_schedule(PHASE_ONE, topo, limit=5), topo, scale=0.005, seed=0, hours=1)
    (hour,) = (tmp_path / DAY / "trace-parquet").iterdir()
    pieces = pq.read_table(hour)
    assert pieces.num_rows > 300 and pieces.equals(pq.read_table(replay / DAY / "trace-parquet" / hour.name))


def test_each_day_cut_to_its_hours_holds_the_hours_of_its_own_cases(tmp_path):
    """With cases on two days, each day's hours end with its own last case's (counted from the last case of all
    days, the first day was written at 23:00, and its case had no data)."""
    from testbed.schedule import load_schedule
    from testbed.simulate import simulate
    from testbed.topology import Topology
    from testbed.workload import CST

    topo = Topology.build(0)
    by_day = {}
    for case in load_schedule(PHASE_ONE, topo):
        by_day.setdefault(case.start.astimezone(CST).date(), case)
    cases = [by_day[day] for day in sorted(by_day)[:2]]
    assert all(c.start.astimezone(CST).date() == c.end.astimezone(CST).date() for c in cases)
    simulate(tmp_path, cases, topo, scale=0.002, seed=0, hours=1)
    for case in cases:
        end = case.end.astimezone(CST)
        traces = sorted(p.name for p in (tmp_path / end.date().isoformat() / "trace-parquet").iterdir())
        assert [int(name[-16:-14]) for name in traces] == [end.hour], (case.uuid, traces)
