"""Benchmark of the testbed: write one simulated day at a given scale, in a child process; the signature
check (`testbed.signatures`) on a replay of a ground-truth schedule; and a random schedule to replay."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

from features.bench import REPLAY_SCALE
from features.refresh import nightly

from .schedule import random_cases
from .signatures import check
from .topology import Topology

SIGNATURE_SCALES = (0.005, 0.05)


def random_schedule(path: Path, cases: int, seed: int = 11) -> Path:
    """A ground truth of `cases` drawn at random (every fault type in turn, random instances and windows), as
    `simulate --cases` draws them: a schedule no one tuned to."""
    rows = [case.truth for case in random_cases(cases, Topology.build(seed), seed)]
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


def signatures(schedule: Path, scale: float = REPLAY_SCALE, seed: int = 1) -> dict:
    """Per fault type, the share of key-metric checks that move and of observations found, on a replay."""
    with tempfile.TemporaryDirectory() as tmp:
        dump, db = Path(tmp) / "dump", Path(tmp) / "store.duckdb"
        subprocess.run([sys.executable, "-m", "rcalab", "simulate", str(dump), "--schedule", str(schedule),
                        "--scale", str(scale), "--seed", str(seed)], check=True, stdout=subprocess.DEVNULL)
        nightly(dump, db)
        return check(db, dump / "groundtruth.jsonl")
