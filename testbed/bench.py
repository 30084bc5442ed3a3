"""Benchmark of the testbed: write one simulated day at a given scale, in a child process; the signature
check (`testbed.signatures`) on a replay of a ground-truth schedule; and a random schedule to replay."""

from __future__ import annotations

import datetime as dt
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from features.bench import REPLAY_SCALE
from features.refresh import nightly

from .faults import fault_types, get
from .fidelity import REAL_TYPES, agreement, signatures
from .schedule import RANDOM_START, format_time, random_cases
from .system import load
from .signatures import check
from .topology import Topology

SIGNATURE_SCALES = (0.005, 0.05)


def random_schedule(path: Path, per_type: int, seed: int = 11, system: str = "hipstershop",
                    limit: int | None = None) -> Path:
    """A ground truth of `per_type` cases of every fault type the system applies (at most `limit`), drawn at random
    (every fault type in turn, random instances and windows), as `simulate --cases` draws them, a fault an hour: a
    schedule no one tuned to."""
    described = load(system)
    cases = min(per_type * len(fault_types(described)), limit or 10**6)
    rows = [case.truth for case in random_cases(cases, Topology.build(seed, described), seed)]
    Path(path).write_text("".join(json.dumps(row) + "\n" for row in rows))
    return Path(path)


def run(scale: float = 1.0, seed: int = 0) -> dict:
    """Time, peak memory and size of writing one day with one case; spans/s and rows/s."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "dump"
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "rcalab", "simulate", str(out), "--cases", "1",
                        "--scale", str(scale), "--seed", str(seed)], check=True, stdout=subprocess.DEVNULL)
        seconds = time.perf_counter() - start
        peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        rows = {kind: sum(pq.ParquetFile(p).metadata.num_rows for p in out.glob(f"*/{kind}-parquet/**/*.parquet"))
                for kind in ("trace", "log", "metric")}
        size = sum(p.stat().st_size for p in out.rglob("*.parquet"))
    return {
        "scale": scale,
        "seconds": round(seconds, 2),
        "peak_memory_mb": round(peak_mb, 1),
        "parquet_mb": round(size / 1e6, 1),
        "spans": rows["trace"],
        "log_lines": rows["log"],
        "metric_rows": rows["metric"],
        "spans_per_s": round(rows["trace"] / seconds),
        "rows_per_s": round(sum(rows.values()) / seconds),
    }


def signatures(schedule: Path, scale: float = REPLAY_SCALE, seed: int = 1, system: str = "hipstershop") -> dict:
    """Per fault type, the share of key-metric checks that move and of observations found, on a replay."""
    with tempfile.TemporaryDirectory() as tmp:
        dump, db = Path(tmp) / "dump", Path(tmp) / "store.duckdb"
        subprocess.run([sys.executable, "-m", "rcalab", "simulate", str(dump), "--schedule", str(schedule),
                        "--system", system, "--scale", str(scale), "--seed", str(seed)], check=True,
                       stdout=subprocess.DEVNULL)
        nightly(dump, db)
        return check(db, dump / "groundtruth.jsonl")


def fidelity(real: list[Path], scale: float = 0.05, per_type: int = 8, seed: int = 2) -> dict:
    """Per fault type of the real Train Ticket days, the agreement between the signature its real cases show and
    the one simulated Train Ticket cases of the same type show (`testbed.fidelity`). The simulated day is about as
    busy as Nezha's recorded one at the default scale."""
    from etl.cases import write_cases

    system = load("trainticket")
    topo = Topology.build(seed, system)
    rng = np.random.default_rng(seed)
    kinds = [get(kind, system) for kind in REAL_TYPES.values()]
    rows = []
    for i in range(per_type * len(kinds)):
        kind = kinds[i % len(kinds)]
        targets = [t for t in kind.candidates(topo) if t.level == "service"]
        target = targets[int(rng.integers(len(targets)))]
        start = RANDOM_START + dt.timedelta(hours=i, seconds=int(rng.integers(0, 60)))
        end = start + dt.timedelta(minutes=int(rng.integers(4, 9)))
        rows.append(kind.truth(topo, target, format_time(start), format_time(end), f"fidelity-{i}"))
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "truth.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        subprocess.run([sys.executable, "-m", "rcalab", "simulate", str(tmp / "dump"), "--system", "trainticket",
                        "--schedule", str(tmp / "truth.jsonl"), "--scale", str(scale), "--seed", str(seed)],
                       check=True, stdout=subprocess.DEVNULL)
        nightly(tmp / "dump", tmp / "simulated.duckdb")
        simulated = signatures(tmp / "simulated.duckdb", tmp / "dump" / "groundtruth.jsonl")
        observed: dict = {}
        for path in real:
            if Path(path).is_dir() and "trainticket" in Path(path).name:
                cases, db = tmp / f"{Path(path).name}-cases", tmp / f"{Path(path).name}.duckdb"
                write_cases(path, cases)
                nightly(path, db)
                for kind, found in signatures(db, cases / "groundtruth.jsonl", REAL_TYPES).items():
                    observed.setdefault(kind, []).extend(found)
    return agreement(observed, simulated)
