"""Metric parquet files of one day: DeepFlow APM per pod and service, Prometheus infra per KPI."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from .workload import APM_COUNTS, MINUTES, Day, own_failures

INFRA_COLUMNS = ("cf", "device", "instance", "kpi_key", "kpi_name", "kubernetes_node", "mountpoint", "namespace",
                 "object_type", "pod", "sql_type", "type")
RETRIES = 0.3  # tries a refusing pod gets, per call it would have served (reconnect back-off)


def _times(day: Day) -> pa.Array:
    """The minutes the day's files hold."""
    start = np.datetime64(day.start_utc.replace(tzinfo=None), "ns")
    return pa.array(start + np.arange(MINUTES)[day.written] * np.timedelta64(60, "s"), pa.timestamp("ns", tz="UTC"))


def apm_tables(day: Day, expected: tuple[np.ndarray, np.ndarray], rng: np.random.Generator
               ) -> Iterator[tuple[str, pa.Table]]:
    """One APM table per pod, as each is made, then one per service: (name, table); `expected` is the day's
    `expected_latency`. A minute's rrt_max is its slowest requests': a few times its mean, or its slowest
    operation's time with its tail, whichever is longer."""
    topo = day.topo
    system = topo.system
    pod_ms, pod_err, slowest = expected
    times = _times(day)
    traced = [c.name for c in system.components.values() if c.apm]
    own_err = own_failures(day)
    services: dict[str, pa.Table] = {}  # a service's minute is its pods' of that minute
    for service in traced:
        rows = []
        pods = topo.pods_of(service)
        idx = [topo.index(p) for p in pods]
        # Clients still try an unreachable pod and each try fails there (DeepFlow counts it, as a client error),
        # but they back off between reconnect attempts, so it gets fewer tries than its share of calls;
        # a restarting pod gets none.
        routed = ~day.unrouted[:, idx]
        share = np.where(routed.any(1, keepdims=True), routed / np.maximum(routed.sum(1, keepdims=True), 1), 0)
        rate = day.requests(service)
        for j, (pod, i) in enumerate(zip(pods, idx)):
            tries = np.where(day.unreachable[:, i], RETRIES, 1.0)
            request = rng.poisson(rate * share[:, j] * day.traffic[:, i] * tries)
            failed = np.where(day.unreachable[:, i], request, 0)
            own = own_err[:, i]
            downstream = np.clip(pod_err[:, i] - own - day.unreachable[:, i], 0, 1)
            timeout = rng.binomial(request - failed, np.clip((pod_ms[:, i] - 800) / 5000, 0, 0.5))
            row = {
                "request": request,
                "response": request - failed - timeout,
                "server_error": rng.binomial(request - failed, own),
                "client_error": failed + rng.binomial(request - failed, downstream),
                "timeout": timeout,
                "rrt": np.where(request > 0, pod_ms[:, i] * 1000 * rng.lognormal(0, 0.05, MINUTES), 0.0),
            }
            row["error"] = row["server_error"] + row["client_error"]
            row["rrt_max"] = np.where(request > 0, np.maximum(row["rrt"] * rng.uniform(3, 6, MINUTES),
                                                              slowest[:, i] * 1000 * rng.uniform(1.2, 1.6, MINUTES)), 0.0)
            rows.append({k: v[day.written].copy() for k, v in row.items()})
            yield pod, _apm_table(times, pod, "pod", rows[-1])
        total = {k: sum(r[k] for r in rows) for k in APM_COUNTS}
        weights = np.array([r["request"] for r in rows], float)
        rrt = np.array([r["rrt"] for r in rows])
        total["rrt"] = np.where(weights.sum(0) > 0, (rrt * weights).sum(0) / np.maximum(weights.sum(0), 1), 0.0)
        total["rrt_max"] = np.max([r["rrt_max"] for r in rows], axis=0)
        services[service] = _apm_table(times, service, "service", total)
    yield from services.items()


def _apm_table(times: pa.Array, object_id: str, object_type: str, row: dict) -> pa.Table:
    request = np.maximum(row["request"], 1)
    cols = {
        "time": times,
        "object_id": pa.array(np.full(len(times), object_id)),
        "object_type": pa.array(np.full(len(times), object_type)),
        **{k: pa.array(row[k].astype(np.int64)) for k in ("request", "response")},
        "rrt": pa.array(np.round(row["rrt"], 2)),
        "rrt_max": pa.array(np.round(row["rrt_max"], 2)),
        **{k: pa.array(row[k].astype(np.int64)) for k in ("error", "client_error", "server_error", "timeout")},
    }
    for k in ("error", "client_error", "server_error"):
        cols[f"{k}_ratio"] = pa.array(np.round(row[k] / request * 100, 2))
    return pa.table(cols)


def _infra_table(day: Day, kpi: str, values: np.ndarray, labels: list[dict]) -> pa.Table:
    """Rows for every written minute x entity: `values` is (minutes, entities), `labels` one dict per entity. A label
    column is its entities' labels taken minute after minute (text copied once a row, not held in NumPy's fixed-width
    strings as wide as the longest: a day of 10,000 pods' took gigabytes)."""
    values = values[day.written]
    n_ent = values.shape[1]
    entity = pa.array(np.tile(np.arange(n_ent), len(values)))
    cols = {"time": pa.array(np.repeat(_times(day).to_numpy(zero_copy_only=False), n_ent),
                             pa.timestamp("ns", tz="UTC"))}
    for c in INFRA_COLUMNS:
        per_entity = [kpi] * n_ent if c in ("kpi_key", "kpi_name") else [lab.get(c, "") for lab in labels]
        cols[c] = pa.array(per_entity, pa.string()).take(entity)
    cols[kpi] = pa.array(np.round(values.ravel(), 6))
    return pa.table(cols)


def consumer_lag(day: Day) -> np.ndarray:
    """Messages waiting for each consumer pod's group, per minute: the messages it takes a minute times how long
    each waits in its topic (a few ms, or what a stall or a backlog adds)."""
    topo = day.topo
    system = topo.system
    lag = np.zeros((MINUTES, len(topo.pods)))
    for name, comp in system.components.items():
        if not any(op.consumes for op in comp.operations.values()):
            continue
        idx = [topo.index(p) for p in topo.pods_of(name)]
        rate = day.requests(name) / len(idx)
        wait_ms = 3.0 + day.lag_ms.get(name, np.zeros(MINUTES))
        lag[:, idx] = (rate * wait_ms / 60_000)[:, None]
    return lag


def infra_tables(day: Day) -> Iterator[tuple[str, pa.Table]]:
    """Each KPI's table with its relative path (without the date suffix), one at a time."""
    topo = day.topo
    if any(op.consumes for c in topo.system.components.values() for op in c.operations.values()):
        day.pod_kpi["consumer_lag"] = consumer_lag(day)
    system = topo.system
    pod_labels = [dict(instance=topo.node_of[p], namespace=system.namespace, object_type="pod", pod=p)
                  for p in topo.pods]
    for kpi, values in day.pod_kpi.items():
        labels = [dict(lab, device="eth0" if "network" in kpi else ("/dev/vda" if "fs_" in kpi else ""))
                  for lab in pod_labels]
        yield f"infra/infra_pod/infra_pod_{kpi}", _infra_table(day, kpi, values, labels)
    node_labels = [dict(instance=n, kubernetes_node=n, object_type="node") for n in system.nodes]
    for kpi, values in day.node_kpi.items():
        labels = [dict(lab, mountpoint="/" if "filesystem" in kpi else "",
                       device="eth0" if "network" in kpi else ("vda" if "disk" in kpi else "")) for lab in node_labels]
        yield f"infra/infra_node/infra_node_{kpi}", _infra_table(day, kpi, values, labels)
    shared: dict[str, list[pa.Table]] = {}  # instances of one kind share its files, each row labelled with its pod
    for part, kpis in day.db_kpi.items():
        comp = system.components[part]
        labels = [dict(instance=topo.node_of[pod], namespace=comp.namespace, object_type=comp.source, pod=pod)
                  for pod in topo.pods_of(part)]
        for kpi, values in kpis.items():
            shared.setdefault(f"{comp.metrics_file}_{kpi}", []).append(_infra_table(day, kpi, values, labels))
    for path, tables in shared.items():
        yield path, pa.concat_tables(tables)
