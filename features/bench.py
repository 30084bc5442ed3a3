"""Benchmark of the ranking: top-1 / top-3 per fault type and overall, and digest time per case, on
a simulated replay of a ground-truth schedule and on real labelled dumps (the Nezha days)."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from etl import store
from etl.cases import write_cases
from etl.loader import run_etl
from judge.report import service_of
from testbed.bench import REPLAY_SCALE

from .cases import load_questions
from .digest import build_digest

def names(row: dict) -> set[str]:
    instance = row["instance"]
    return set(instance if isinstance(instance, list) else [instance])


def hit(component: str, truth: set[str], node_fault: bool) -> bool:
    """A candidate names the truth: itself, its service (a pod of a true service), or a pod of it."""
    if node_fault:
        return component in truth
    return component in truth or service_of(component) in truth or any(service_of(t) == component for t in truth)


def ranking(db: Path, input_json: Path, truth: Path) -> dict:
    """Top-1 / top-3 overall and per fault type, and digest seconds, for every case of a store."""
    rows = {r["uuid"]: r for r in map(json.loads, Path(truth).read_text().splitlines())}
    con = store.connect(db, read_only=True)
    per: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    seconds = []
    try:
        for q in load_questions(input_json):
            started = time.perf_counter()
            digest = build_digest(con, q)
            seconds.append(time.perf_counter() - started)
            row = rows[q.uuid]
            found = [hit(c.component, names(row), row["instance_type"] == "node") for c in digest.candidates]
            counts = per[row["fault_type"]]
            counts[0] += 1
            counts[1] += any(found[:1])
            counts[2] += any(found[:3])
    finally:
        con.close()
    n = sum(c[0] for c in per.values())
    return {"cases": n, "top1": round(sum(c[1] for c in per.values()) / n, 3),
            "top3": round(sum(c[2] for c in per.values()) / n, 3),
            "digest_seconds_mean": round(sum(seconds) / n, 3), "digest_seconds_max": round(max(seconds), 3),
            "per_type": {t: {"cases": c[0], "top1": round(c[1] / c[0], 3), "top3": round(c[2] / c[0], 3)}
                         for t, c in sorted(per.items())}}


def labelled_stores(tmp: Path, schedule: Path | None, real: list[Path], scale: float = REPLAY_SCALE, seed: int = 1,
                    progress=lambda what: None):
    """(name, store, input.json, groundtruth.jsonl) for a simulated replay of `schedule` and each real dump."""
    if schedule and Path(schedule).is_file():
        progress(f"simulating {Path(schedule).name}")
        dump, db = tmp / "simulated", tmp / "simulated.duckdb"
        subprocess.run([sys.executable, "-m", "rcalab", "simulate", str(dump), "--schedule", str(schedule),
                        "--scale", str(scale), "--seed", str(seed)], check=True, stdout=subprocess.DEVNULL)
        progress("loading the simulated replay")
        run_etl(dump, db)
        yield "simulated", db, dump / "input.json", dump / "groundtruth.jsonl"
    for path in real:
        if Path(path).is_dir():
            name = Path(path).name
            progress(f"loading {name}")
            cases, db = tmp / f"{name}-cases", tmp / f"{name}.duckdb"
            write_cases(path, cases)
            run_etl(path, db)
            yield name, db, cases / "input.json", cases / "groundtruth.jsonl"


def run(schedule: Path | None, real: list[Path], scale: float = REPLAY_SCALE, seed: int = 1,
        progress=lambda what: None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        result = {}
        for name, db, input_json, truth in labelled_stores(Path(tmp), schedule, real, scale, seed, progress):
            progress(f"ranking {name}")
            result[name] = ranking(db, input_json, truth)
        return result
