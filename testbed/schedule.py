"""Cases to simulate: replayed from a ground-truth file or drawn at random; and the files that describe them."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from common.errors import ScheduleError

from . import faults
from .faults import Fault, Target
from .topology import Topology

PHRASINGS = (
    "The system experienced an anomaly from {start} to {end}. Please infer the possible cause.",
    "Please analyze the abnormal event between {start} and {end} and provide the root cause.",
    "A fault occurred from {start} to {end}. Please identify the root cause.",
    "Determine the root cause of the system fault during {start} to {end}.",
    "A fault was detected from {start} to {end}. Please analyze its root cause.",
)
REQUIRED = ("uuid", "fault_type", "instance", "start_time", "end_time")
# A random schedule starts at 01:10 CST (17:10 UTC the day before), one case an hour: an hour into its day, so that
# its first case too has the hour before it in the dump (the families' baseline; `--hours` writes no earlier day).
RANDOM_START = dt.datetime(2025, 6, 5, 17, 10, tzinfo=dt.timezone.utc)


@dataclass(frozen=True)
class Case:
    uuid: str
    fault: Fault
    target: Target
    start: dt.datetime
    end: dt.datetime
    truth: dict  # the ground-truth row, in the challenge's schema


def parse_time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(dt.timezone.utc)


def format_time(ts: dt.datetime) -> str:
    return ts.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def load_schedule(path: Path, topo: Topology, limit: int | None = None) -> list[Case]:
    """Cases of a ground-truth JSONL file, keeping each row as it is; errors name the line (and the description's
    field where a fault it applies cannot act on what it names)."""
    faults.check(topo.system)
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as e:
        raise ScheduleError(f"cannot read schedule {path}: {e.strerror}") from None
    cases = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if limit is not None and len(cases) >= limit:
            break
        where = f"{path}:{lineno}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ScheduleError(f"{where}: not valid JSON ({e.msg})") from None
        missing = [k for k in REQUIRED if k not in row]
        if missing:
            raise ScheduleError(f"{where}: missing field {', '.join(missing)}")
        try:
            fault = faults.get(row["fault_type"], topo.system)
            target = fault.resolve(topo, row["instance"])
            start, end = parse_time(row["start_time"]), parse_time(row["end_time"])
        except ScheduleError as e:
            raise ScheduleError(f"{where}: {e}") from None
        except ValueError as e:
            raise ScheduleError(f"{where}: bad start_time or end_time ({e})") from None
        if end <= start:
            raise ScheduleError(f"{where}: end_time is not after start_time")
        cases.append(Case(row["uuid"], fault, target, start, end, row))
    if not cases:
        raise ScheduleError(f"{path}: no cases in the schedule")
    return cases


def random_cases(n: int, topo: Topology, seed: int, types: list[str] | None = None) -> list[Case]:
    """`n` cases an hour apart, cycling in a seeded order through `types` (by default every fault type the system's
    description applies)."""
    faults.check(topo.system)
    rng = np.random.default_rng([seed, 3])
    names = list(rng.permutation(types or faults.fault_types(topo.system)))
    if n and not names:
        where = topo.system.path or topo.system.name
        raise ScheduleError(f"{where}: no fault applies to this system (its `faults` are empty): name the faults that "
                            "apply (docs/formats.md)")
    cases = []
    for i in range(n):
        fault = faults.get(names[i % len(names)], topo.system)
        options = fault.candidates(topo)
        target = options[int(rng.integers(len(options)))]
        start = RANDOM_START + dt.timedelta(hours=i, seconds=int(rng.integers(0, 60)))
        minutes = int(rng.integers(8, 26))
        end = start + (dt.timedelta(seconds=fault.window_seconds) if fault.window_seconds else
                       dt.timedelta(minutes=minutes))
        uuid = f"{rng.bytes(4).hex()}-{i}"
        truth = fault.truth(topo, target, format_time(start), format_time(end), uuid)
        cases.append(Case(uuid, fault, target, start, end, truth))
    return cases


def write_case_files(cases: list[Case], out: Path, seed: int) -> None:
    """`groundtruth.jsonl` and `input.json` beside the day folders."""
    rng = np.random.default_rng([seed, 4])
    with open(out / "groundtruth.jsonl", "w") as f:
        for case in cases:
            f.write(json.dumps(case.truth) + "\n")
    questions = [{"Anomaly Description": PHRASINGS[int(rng.integers(len(PHRASINGS)))].format(
        start=format_time(c.start), end=format_time(c.end)), "uuid": c.uuid} for c in cases]
    (out / "input.json").write_text(json.dumps(questions, indent=2) + "\n")
