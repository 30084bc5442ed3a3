"""Does the simulator fault a system as the real one faults? A fault's signature, read the same way from any store:
which way each kind of the cause's own metrics moved (cpu, memory, latency, traffic, errors, network, disk), whether
its code path changed, and what its callers saw (slower calls, failing calls, paths of their own that changed).
Per fault type, the signature most of its cases show in a real store is held against the one most of its simulated
cases show: the agreement is the share of the signature's parts that agree, of those that moved in either (parts
that moved in neither are left out: they would agree for free, and so are parts a store cannot show: failing calls
where its spans carry no status, as Nezha's do not, and a kind of metric whose every series in the store stays the
same value all along, as Nezha's success rates do, at 0)."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter, defaultdict
from pathlib import Path

from etl import store
from features.evidence import BASELINE, GAP, LEFT, Window, events, signal_of
from features.graph import service_of

Z = 3.0  # a robust z this far from the hour before is a move
SIGNALS = ("cpu", "memory", "latency", "traffic", "errors", "network", "disk")
# The names the real days give their fault types, and the library's.
REAL_TYPES = {"cpu_contention": "cpu stress", "network_delay": "network delay", "exception": "exception",
              "return": "wrong return"}


def _signal(metric: str) -> str:
    signal = signal_of(metric)
    return "cpu" if signal == "processes" else signal


def signature(con, row: dict) -> dict[str, str]:
    """The signature of one case (a ground-truth row) in a store."""
    cause = service_of(row["service"] or (row["instance"] if isinstance(row["instance"], str) else row["instance"][0]))
    start = dt.datetime.fromisoformat(row["start_time"].replace("Z", ""))
    end = dt.datetime.fromisoformat(row["end_time"].replace("Z", ""))
    w = Window.around(start, end)
    out = {f"own {s}": "none" for s in SIGNALS}
    moves = con.execute("""
        with b as (select component, metric, median(value) as m, 1.4826 * mad(value) as s from metric_points
                   where ts >= $lo and ts < $before and (service = $cause or component = $cause) group by all),
             d as (select component, metric, median(value) as v from metric_points
                   where ts >= $start and ts <= $end and (service = $cause or component = $cause) group by all)
        select metric, (d.v - b.m) / greatest(b.s, abs(b.m) * 0.02, 1e-9) as z from d join b using (component, metric)""",
                        {"cause": cause, "lo": w.start - BASELINE, "before": w.start - GAP, "start": w.start,
                         "end": w.end}).fetchall()
    strongest: dict[str, float] = {}
    for metric, z in moves:
        signal = _signal(metric)
        if signal not in SIGNALS or abs(z) < Z:
            continue
        z = -z if LEFT.search(metric) else z  # what is left falls where the fault's signal rises
        if abs(z) > abs(strongest.get(signal, 0.0)):
            strongest[signal] = z
    for signal, z in strongest.items():
        out[f"own {signal}"] = "up" if z > 0 else "down"
    changed = {(it.component, it.echo) for it in events.collect(con, w)}
    out["own code path"] = "changed" if any(service_of(c) == cause and not echo for c, echo in changed) else "none"
    edges = con.execute("""
        with e as (select minute >= $start as during, caller, sum(calls) as calls, sum(errors) as errors,
                          sum(p95_us * calls) / sum(calls) as p95
                   from trace_edge_minute where callee = $cause and caller <> $cause
                     and minute >= $lo and minute <= $end group by all)
        select max(d.p95 / greatest(b.p95, 1)), max(d.errors / d.calls - coalesce(b.errors / b.calls, 0))
        from e d left join e b on b.caller = d.caller and not b.during where d.during""",
                        {"cause": cause, "lo": w.start - BASELINE, "start": w.start, "end": w.end}).fetchall()[0]
    slower, failing = edges
    out["callers' calls slower"] = "up" if slower and slower >= 1.5 else "none"
    out["callers' calls failing"] = "up" if failing and failing > 0.01 else "none"
    out["callers' code paths"] = "changed" if any(service_of(c) != cause and not echo for c, echo in changed) else "none"
    return out


UNSEEN = "unseen"  # a part the store cannot show


def signatures(db: Path, truth: Path, types: dict[str, str] | None = None) -> dict[str, list[dict]]:
    """Every case's signature in a store, by fault type (named by `types` where the store's names differ)."""
    con = store.connect(db, read_only=True)
    out: dict[str, list[dict]] = defaultdict(list)
    try:
        status = con.execute("select count(status_code) from spans").fetchall()[0][0]
        varies = {_signal(m) for (m,) in con.execute(
            "select metric from metric_points group by metric having min(value) < max(value)").fetchall()}
        for row in map(json.loads, Path(truth).read_text().splitlines()):
            found = signature(con, row)
            if not status:
                found["callers' calls failing"] = UNSEEN
            for signal in set(SIGNALS) - varies:
                found[f"own {signal}"] = UNSEEN
            out[(types or {}).get(row["fault_type"], row["fault_type"])].append(found)
    finally:
        con.close()
    return out


def typical(cases: list[dict]) -> dict[str, str]:
    """What most cases show, part by part."""
    return {part: Counter(c[part] for c in cases).most_common(1)[0][0] for part in cases[0]}


def agreement(real: dict[str, list[dict]], simulated: dict[str, list[dict]]) -> dict:
    """Per fault type both hold: the share of the signature's parts (moved in either) whose typical values agree,
    the parts that disagree, and how many cases each side has."""
    out = {}
    for kind in sorted(set(real) & set(simulated)):
        r, s = typical(real[kind]), typical(simulated[kind])
        moved = [p for p in r if (r[p] != "none" or s[p] != "none") and UNSEEN not in (r[p], s[p])]
        differ = {p: f"real {r[p]}, simulated {s[p]}" for p in moved if r[p] != s[p]}
        out[kind] = {"agreement": round(1 - len(differ) / len(moved), 3) if moved else None, "parts": len(moved),
                     "real cases": len(real[kind]), "simulated cases": len(simulated[kind]), "differ": differ,
                     "real": r, "simulated": s}
    return out
