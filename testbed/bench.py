"""Benchmark of the testbed: write one simulated day at a given scale, in a child process; the signature
check (`testbed.signatures`) on a replay of a ground-truth schedule; and a random schedule to replay."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import yaml

from features.bench import REPLAY_SCALE, in_turns, mean_seconds, measured, pair_ratios, ratio
from features.refresh import nightly

from .faults import fault_types, get
from . import fidelity as fidelity_of
from .schedule import RANDOM_START, format_time, random_cases
from .system import load
from .signatures import check
from .topology import Topology

SIGNATURE_SCALES = (0.005, 0.05)


def random_schedule(path: Path, per_type: int, seed: int = 11, system: str = "hipstershop",
                    limit: int | None = None, types: list[str] | None = None) -> Path:
    """A ground truth of `per_type` cases of every fault type the system applies, or of `types` (at most `limit`),
    drawn at random (every fault type in turn, random instances and windows), as `simulate --cases` draws them, a
    fault an hour: a schedule no one tuned to."""
    described = load(system)
    types = types or fault_types(described)
    cases = min(per_type * len(types), limit or 10**6)
    rows = [case.truth for case in random_cases(cases, Topology.build(seed, described), seed, types)]
    Path(path).write_text("".join(json.dumps(row) + "\n" for row in rows))
    return Path(path)


def run(scale: float = 1.0, seed: int = 0, system: str = "hipstershop") -> dict:
    """Time, peak memory and size of writing one day of a system with one case; spans/s and rows/s."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "dump"
        seconds, peak_mb, _ = measured("simulate", [sys.executable, "-m", "rcalab", "simulate", str(out), "--system",
                                                    system, "--cases", "1", "--scale", str(scale), "--seed", str(seed)])
        rows = {kind: sum(pq.ParquetFile(p).metadata.num_rows for p in out.glob(f"*/{kind}-parquet/**/*.parquet"))
                for kind in ("trace", "log", "metric")}
        size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    result = {"system": Path(system).stem, "scale": scale, "seconds": round(seconds, 2),
              "peak_memory_mb": round(peak_mb, 1), "dump_mb": round(size / 1e6, 1)}
    if any(rows.values()):  # the challenge layout's parquet files (an OTLP dump's rows are not counted here)
        result |= {"spans": rows["trace"], "log_lines": rows["log"], "metric_rows": rows["metric"],
                   "spans_per_s": round(rows["trace"] / seconds), "rows_per_s": round(sum(rows.values()) / seconds)}
    return result


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
    kinds = [get(kind, system) for kind in fidelity_of.REAL_TYPES.values()]
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
        simulated = fidelity_of.signatures(tmp / "simulated.duckdb", tmp / "dump" / "groundtruth.jsonl")
        observed: dict = {}
        for path in real:
            if Path(path).is_dir() and "trainticket" in Path(path).name:
                cases, db = tmp / f"{Path(path).name}-cases", tmp / f"{Path(path).name}.duckdb"
                write_cases(path, cases)
                nightly(path, db)
                for kind, found in fidelity_of.signatures(db, cases / "groundtruth.jsonl", fidelity_of.REAL_TYPES).items():
                    observed.setdefault(kind, []).extend(found)
    return fidelity_of.agreement(observed, simulated)


def wide_system(path: Path, services: int = 2000, replicas: int = 5, per_node: int = 50) -> Path:
    """A system of many components, traffic thin on each: an entry whose operations each call a front service that
    calls four leaves (`services` in all, of `replicas` pods each), every pod of its own, `per_node` pods a node."""
    fronts = (services - 1) // 5
    leaves = {f"f{i}": [f"l{i}x{j}" for j in range(4)] for i in range(fronts)}

    def service(language: str, port: int, steps: list) -> dict:
        return {"kind": "service", "language": language, "replicas": replicas, "own_ms": 1.5,
                "rpc": {"service": f"wide.S{port}", "port": port}, "failure": "request failed",
                "operations": {"Serve": {"steps": steps}}}

    components = {"gateway": {"kind": "service", "language": "go", "replicas": replicas, "own_ms": 1.0,
                              "protocol": "http", "port": 80, "failure": "upstream request failed",
                              "operations": {f"GET /{f}": {"steps": [{"call": f"{f}.Serve"}]} for f in leaves}}}
    for f, ls in leaves.items():
        components[f] = service("java", 7000, [{"log": "serving {id}"}] + [{"call": f"{leaf}.Serve"} for leaf in ls])
        components |= {leaf: service("go", 7001, [{"log": "served {id}"}]) for leaf in ls}
    pods = replicas * len(components)
    description = {"name": "wide", "namespace": "wide", "nodes": {"workers": [f"node-{k}" for k in range(pods // per_node)]},
                   "workload": {"entry": "gateway", "requests_per_minute": 20 * len(components),
                                "traces_per_minute": 2 * len(components),
                                "mix": {f"GET /{f}": 1 / len(leaves) for f in leaves}},
                   "components": components,
                   "faults": {"cpu stress": ["service"], "pod failure": ["service"], "network delay": ["link"]}}
    Path(path).write_text(yaml.safe_dump(description, sort_keys=False))
    return Path(path)


WIDE_PODS = (1000, 5000, 10000)
WIDE_SEEDS = (5, 6, 7)  # the widest's faults that detect is measured on; the first's are ranked


WIDE_DAY = (1000, 23)  # pods, faults an hour apart: a whole day of them, its series of 1,440 minutes


def wide_run(sizes: tuple[int, ...] = WIDE_PODS, replicas: int = 5, scale: float = 0.01, cases: int = 3,
             seeds: tuple[int, ...] = WIDE_SEEDS, whole_day: tuple[int, int] = WIDE_DAY, progress=lambda what: None
             ) -> dict:
    """Systems of `sizes` pods (services of `replicas` pods): for each, `cases` random faults simulated (their hours
    and the one before each, OTLP) and loaded, each step in a process of its own (seconds, peak memory), beside the
    floor (DuckDB reading the same files into a store); and the same over a `whole_day` (pods, faults). On the
    widest, the etl on 1 and 2 Dask workers, each fault ranked, and detect over the store; then detect over the
    widest's faults of each other seed: is each fault's window an incident, named right, and how many incidents are
    faults?"""
    from features.bench import hit, names
    from features.cases import load_questions
    from features.digest import build_digest
    from etl import store

    out: dict = {"scale": scale, "sizes": [], "detect by seed": []}
    with tempfile.TemporaryDirectory() as root:
        for pods in sizes:
            tmp = Path(root) / f"pods-{pods}"
            out["sizes"].append(_width(tmp, pods, replicas, cases, scale, seeds[0], progress))
        widest = out["sizes"][-1]
        out |= {"services": widest["services"], "pods": widest["pods"]}
        day_pods, day_faults = whole_day
        out["sizes"].append(_width(Path(root) / "whole-day", day_pods, replicas, day_faults, scale, seeds[0], progress))
        progress("wide: etl on 1 and 2 workers")  # the widest day on local Dask clusters: its parts are tasks
        one, two = in_turns(*(partial(_load, tmp, f"workers-{n}.duckdb", "--workers", str(n)) for n in (1, 2)))
        out |= {"etl s, 1 worker": mean_seconds(one), "etl s, 2 workers": mean_seconds(two),
                "speed-up of 2 workers": ratio(one, two), "speed-up of 2 workers, each pair": pair_ratios(one, two)}
        truth = [json.loads(line) for line in (tmp / "dump" / "groundtruth.jsonl").read_text().splitlines()]
        questions = load_questions(tmp / "dump" / "input.json")
        con = store.connect(tmp / "store.duckdb", read_only=True)
        progress("wide: ranking")
        started = time.perf_counter()
        firsts = [build_digest(con, q).candidates[0].component for q in questions]
        out["digest s a case"] = round((time.perf_counter() - started) / len(questions), 2)
        out["top-1"] = round(sum(hit(c, names(t), False) for c, t in zip(firsts, truth)) / len(truth), 3)
        out["faults"] = [f"{t['fault_type']} of {t['instance']}: {c} first" for c, t in zip(firsts, truth)]
        con.close()
        for seed in seeds:
            progress(f"wide: detect, seed {seed}")
            day = tmp
            if seed != seeds[0]:  # the widest system's faults of another seed
                day = Path(root) / f"seed-{seed}"
                day.mkdir()
                measured("simulate", _simulate(day, tmp / "wide.yaml", cases, scale, seed))
                _load(day, "store.duckdb")
            out["detect by seed"].append({"seed": seed} | _detected(day))
    return out


def _width(tmp: Path, pods: int, replicas: int, cases: int, scale: float, seed: int, progress) -> dict:
    """A system of `pods` pods, `cases` faults of it an hour apart and the hour before simulated, loaded, and read by
    the floor in `tmp`: each step's seconds and peak memory, and the rates."""
    from features.bench import floor
    from etl import store

    tmp.mkdir()
    hours = cases + 1
    size: dict = {"pods": pods, "services": pods // replicas, "hours": hours}
    system = wide_system(tmp / "wide.yaml", pods // replicas, replicas)
    progress(f"wide, {pods:,} pods, {hours} hours: simulate")
    size["simulate s"], size["simulate MB"], _ = measured("simulate", _simulate(tmp, system, cases, scale, seed))
    progress(f"wide, {pods:,} pods, {hours} hours: etl and floor, twice")

    def floor_run() -> tuple[float, float]:
        least = floor(tmp / "dump", tmp / "floor.duckdb")
        (tmp / "floor.duckdb").unlink()
        return least["wall_seconds"], least["peak_mb"]

    etl, least = in_turns(partial(_load, tmp, "store.duckdb"), floor_run)
    size |= {"etl s": mean_seconds(etl), "etl MB": max(mb for _, mb in etl),
             "floor s": mean_seconds(least), "floor MB": max(mb for _, mb in least)}
    con = store.connect(tmp / "store.duckdb", read_only=True)
    (rows, files), = con.execute("select sum(rows), count(*) from manifest where status = 'loaded'").fetchall()
    con.close()
    return size | {"files": files, "rows": rows, "etl / floor": ratio(etl, least),
                   "etl / floor, each pair": pair_ratios(etl, least), "etl us a row": round(size["etl s"] / rows * 1e6, 2),
                   "simulate ms a pod-hour": round(size["simulate s"] / (pods * hours) * 1e3, 2)}


def _simulate(tmp: Path, system: Path, cases: int, scale: float, seed: int) -> list[str]:
    return [sys.executable, "-m", "rcalab", "simulate", str(tmp / "dump"), "--system", str(system), "--cases",
            str(cases), "--scale", str(scale), "--seed", str(seed), "--hours", str(cases + 1)]


def _load(tmp: Path, db: str, *options: str) -> tuple[float, float]:
    """The etl of the dump in `tmp` into a new store `db` beside it (any store of that name before it removed: the
    etl of a dump it loaded has nothing to do): seconds and peak MB."""
    for old in tmp.glob(f"{db}*"):
        shutil.rmtree(old) if old.is_dir() else old.unlink()
    return measured("rcalab etl", [sys.executable, "-m", "rcalab", "etl", str(tmp / "dump"), "--db", str(tmp / db),
                                   *options])[:2]


def _detected(tmp: Path) -> dict:
    """Detect over the store in `tmp` of the dump beside it: the faults found (a window of theirs in an incident),
    found and named (the incident's culprit the fault's), the incidents and the share of them that are faults, the
    seconds, and the scan's highest level over each fault."""
    from features import detect
    from features.bench import hit, names
    from features.cases import load_questions
    from etl import store

    truth = [json.loads(line) for line in (tmp / "dump" / "groundtruth.jsonl").read_text().splitlines()]
    questions = load_questions(tmp / "dump" / "input.json")
    con = store.connect(tmp / "store.duckdb", read_only=True)
    try:
        lo, hi = detect.span(con)
        started = time.perf_counter()
        levels = detect.scan(con, lo, hi)
        found = detect.incidents(levels)
        seconds = round(time.perf_counter() - started, 1)
    finally:
        con.close()
    over = [[i for i in found if i.start <= q.end and q.start <= i.end] for q in questions]
    named = [any(hit(c, names(t), False) for i in its for c in i.components[:1]) for its, t in zip(over, truth)]
    return {"faults": len(questions), "found": sum(map(bool, over)), "found and named": sum(named),
            "incidents": len(found),
            "precision": round(sum(any(i in its for its in over) for i in found) / len(found), 3) if found else None,
            "detect s": seconds,
            "levels at the faults": [round(max((lv.score or 0) for lv in levels  # the scan's windows over each
                                               if lv.window.start <= q.end and q.start <= lv.window.end), 3)
                                     for q in questions]}
