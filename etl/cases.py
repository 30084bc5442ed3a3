"""Cases of a dump that carries its own fault labels (the Nezha fault list): `input.json` and
`groundtruth.jsonl` in the challenge's schemas, so that diagnose and the judge run on real data."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from rcalab.errors import DumpError, read_json

from .adapters import adapter_for

WINDOW = dt.timedelta(minutes=3)  # the inject minute and the two after it, as the dump keeps them
# Nezha fault types -> the nearest challenge fault type (used in `fault_description`).
NEAREST = {"network_delay": "network delay", "cpu_contention": "cpu stress", "cpu_consumed": "cpu stress",
           "exception": "code error", "return": "code error"}


def labelled_cases(dump: Path) -> list[dict]:
    """Ground-truth rows from the fault lists of a Nezha dump, ordered by time."""
    adapter = adapter_for(dump)
    if adapter.NAME != "nezha":
        raise DumpError(f"{dump}: a {adapter.NAME} dump carries no fault labels")
    root = Path(dump)
    indicators_file = next(root.rglob("root_cause_*.json"), None)  # root_cause_ts.json, root_cause_hipster.json
    indicators = read_json(indicators_file) if indicators_file else {}
    if not isinstance(indicators, dict) or not all(isinstance(v, dict) for v in indicators.values()):
        raise DumpError(f"{indicators_file}: expected an object of services, each an object of fault types")
    system = indicators_file.stem.removeprefix("root_cause_") if indicators_file else ""  # Nezha's namespace
    rows = []
    for path in sorted(root.rglob("*fault_list.json")):
        try:
            faults = [f for hour in read_json(path).values() for f in hour]
        except (AttributeError, TypeError) as e:
            raise DumpError(f"{path}: not a fault list ({e})") from None
        for i, fault in enumerate(faults):
            try:
                start = dt.datetime.fromisoformat(fault["inject_time"])  # UTC, like the telemetry
                pod, kind = fault["inject_pod"], fault["inject_type"]
                if not (isinstance(pod, str) and isinstance(kind, str)):
                    raise ValueError("inject_pod and inject_type must be text")
            except (KeyError, ValueError, TypeError) as e:
                raise DumpError(f"{path}: fault {i}: {e}") from None
            service = pod.rsplit("-", 2)[0]
            indicator = indicators.get(service, {}).get(kind)
            rows.append({
                "fault_category": "nezha", "system": system, "fault_type": kind, "instance_type": "service",
                "service": service, "instance": service, "source": "", "destination": "",
                "start_time": start.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "end_time": (start + WINDOW).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "uuid": f"nezha-{start:%Y%m%d-%H%M%S}", "key_observations": [],
                "key_metrics": [indicator] if indicator else [], "inject_pod": pod,
                "fault_description": [kind.replace("_", " "), NEAREST.get(kind, kind.replace("_", " "))],
            })
    if not rows:
        raise DumpError(f"{dump}: no fault list found")
    return sorted(rows, key=lambda r: r["start_time"])


def write_cases(dump: Path, out: Path) -> int:
    rows = labelled_cases(dump)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "groundtruth.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    questions = [{"Anomaly Description": f"The system experienced an anomaly from {r['start_time']} to "
                                         f"{r['end_time']}. Please infer the possible cause.", "uuid": r["uuid"]}
                 for r in rows]
    (out / "input.json").write_text(json.dumps(questions, indent=2) + "\n")
    return len(rows)
