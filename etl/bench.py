"""Benchmark of the ETL: one simulated day (and the real Train Ticket day), each load in a child process."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

_CHILD = """
import json, resource, sys, time
from etl.loader import run_etl
t = time.perf_counter()
r = run_etl(sys.argv[1], sys.argv[2])
print(json.dumps(dict(seconds=time.perf_counter() - t, peak_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      rows=r.rows_by_kind, kind_seconds=r.seconds_by_kind, failed=len(r.failed))))
"""


def _etl(dump: Path, db: Path) -> dict:
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", _CHILD, str(dump), str(db)], check=True, capture_output=True,
                         text=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    result["wall_seconds"] = time.perf_counter() - started
    return result


def run(scale: float = 1.0, nezha: Path | None = None) -> dict:
    """ETL time, peak memory and rates on one simulated day; the scan floor; the rerun; the real day."""
    with tempfile.TemporaryDirectory() as tmp:
        dump, db = Path(tmp) / "dump", Path(tmp) / "store.duckdb"
        subprocess.run([sys.executable, "-m", "rcalab", "simulate", str(dump), "--cases", "1", "--scale", str(scale)],
                       check=True, stdout=subprocess.DEVNULL)
        started = time.perf_counter()
        duckdb.connect().execute("select count(*) from read_parquet(?, union_by_name = true)",
                                 [f"{dump}/*/**/*.parquet"]).fetchall()
        scan = time.perf_counter() - started
        first = _etl(dump, db)
        rerun = _etl(dump, db)
    rows, secs = first["rows"], first["kind_seconds"]
    result = {
        "scale": scale,
        "etl_seconds": round(first["wall_seconds"], 2),
        "etl_peak_memory_mb": round(first["peak_mb"], 1),
        "scan_seconds": round(scan, 3),
        "etl_over_scan": round(first["wall_seconds"] / scan, 1),
        "rerun_seconds": round(rerun["wall_seconds"], 2),
        "log_lines": rows.get("log", 0),
        "log_lines_per_s": round(rows.get("log", 0) / max(secs.get("log", 1e-9), 1e-9)),
        "spans": rows.get("trace", 0),
        "spans_per_s": round(rows.get("trace", 0) / max(secs.get("trace", 1e-9), 1e-9)),
        "metric_rows": rows.get("metric", 0),
        "metric_rows_per_s": round(rows.get("metric", 0) / max(secs.get("metric", 1e-9), 1e-9)),
        "features_seconds": round(secs.get("features", 0.0), 2),
    }
    if nezha and Path(nezha).is_dir():
        with tempfile.TemporaryDirectory() as tmp:
            real = _etl(Path(nezha), Path(tmp) / "tt.duckdb")
        result["trainticket_etl_seconds"] = round(real["wall_seconds"], 2)
        result["trainticket_failed_files"] = real["failed"]
    return result
