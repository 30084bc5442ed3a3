"""Benchmarks on simulated and real labelled days: the nightly job (load and refresh, each run in a
child process: time, peak memory, rows/s); the ranking (top-1 / top-3 per fault type and overall, digest
time per case, on a replay of a ground-truth schedule and on the Nezha days); the detection."""

from __future__ import annotations

import datetime as dt
import hashlib
import itertools
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from scipy.stats import mannwhitneyu

from common.tasks import cluster, local_cluster, run_tasks
from etl import store
from etl.cases import write_cases

from . import baselines, detect, evidence
from .cases import Question, load_questions
from .digest import build_digest
from .evidence import Window
from .graph import service_of
from .refresh import nightly

DEMO_DAY = Path(__file__).resolve().parents[1] / "data" / "demo-schedule.jsonl"  # six faults, sixteen quiet hours
DETECT_RANDOM = 12  # random cases a detection benchmark replays: half a day, a fault an hour
# Replays of a ground-truth schedule run at a tenth of the real traffic: below that, a window of a
# quiet hour holds too few traces and failing calls for the observations a real dump shows.
REPLAY_SCALE = 0.1
FOUND_WITHIN = dt.timedelta(minutes=2)  # an incident that starts later than this after a fault's start missed it
STORE_SECONDS = 4 * 3600.0  # a bench's store (simulated, loaded and measured) past this is stuck
ON_TIME = dt.timedelta(minutes=5)  # an operator's patience: an incident that starts this soon after its fault

# The nightly job as `rcalab etl` runs it (its memory is measured from outside, with its task processes: `measured`).
_CHILD = """
import json, sys, time
from common.tasks import Local
from features.refresh import nightly
t = time.perf_counter()
r = nightly(sys.argv[1], sys.argv[2], client=Local())
print(json.dumps(dict(seconds=time.perf_counter() - t, rows=r.rows_by_kind, kind_seconds=r.seconds_by_kind,
                      failed=len(r.failed))))
"""


# The floor: what the ETL must at least do, DuckDB reading every column of the same files and writing them into
# tables of a store (one table per folder of files), in one process of its own. OTLP's JSON is read as its adapter
# reads it (`otlp.scan`: in its columns, as DuckDB's guess of a schema from a sample of nested requests fails where
# files differ; a record a line; each row's file).
_FLOOR = """
import json, sys, time
from pathlib import Path
import duckdb
from etl.adapters import otlp
t = time.perf_counter()
con = duckdb.connect(sys.argv[2])
files = {}
for p in sorted(Path(sys.argv[1]).rglob("*")):
    if p.name.endswith((".parquet", *otlp.SUFFIXES)):
        files.setdefault((p.parent, p.name.endswith(".parquet")), []).append(str(p))
for i, ((folder, parquet), paths) in enumerate(sorted(files.items())):
    if parquet:
        con.execute(f"create table t{i} as select * from read_parquet(?, union_by_name = true)", [paths])
    elif (kind := otlp.signal(con, Path(paths[0]))) in otlp.COLUMNS:
        con.execute(f"create table t{i} as select * from {otlp.scan(kind, '?')}", [paths])
con.close()
print(json.dumps(dict(seconds=time.perf_counter() - t)))
"""


# The nightly job with each day a task on a local cluster of N worker processes, one thread each; the cluster's
# start is not counted (its memory is: the workers' and this process's together).
_CLUSTER = """
import json, sys, time
from distributed import Client
from common.tasks import local_cluster
from features.refresh import nightly
with local_cluster(int(sys.argv[3])) as local, Client(local) as client:
    t = time.perf_counter()
    r = nightly(sys.argv[1], sys.argv[2], client=client)
    seconds = time.perf_counter() - t
print(json.dumps(dict(seconds=seconds, rows=r.rows_by_kind, failed=len(r.failed))))
"""


def floor(dump: Path, db: Path) -> dict:
    """The floor of loading `dump` (see `_FLOOR`): its wall seconds and peak memory (MB)."""
    return _child(_FLOOR, dump, db)


def in_turns(a: Callable[[], tuple], b: Callable[[], tuple]) -> tuple[list[tuple], list[tuple]]:
    """Two runs each of two measures to be compared (each run's seconds first), in the order a b b a: this machine's
    speed drifts by the hour (a step of the same code has run twice as long an hour later), and the order cancels a
    steady drift from their ratio, where one run of each would put it there."""
    first, second = [a()], [b()]
    second.append(b())
    first.append(a())
    return first, second


def mean_seconds(runs: list[tuple]) -> float:
    return round(sum(run[0] for run in runs) / len(runs), 1)


def ratio(a: list[tuple], b: list[tuple]) -> float:
    """The ratio of the runs' total seconds."""
    return round(sum(run[0] for run in a) / sum(run[0] for run in b), 2)


def pair_ratios(a: list[tuple], b: list[tuple]) -> list[float]:
    """Each pair's ratio: the first runs of a and b (run one after the other), then the second ones."""
    return [round(x[0] / y[0], 2) for x, y in zip(a, b)]


def measured(name: str, args: list[str], timeout: float = STORE_SECONDS) -> tuple[float, float, str]:
    """Wall seconds, peak memory (MB) and standard output of the command `args` (`name` in errors), run in a process
    of its own. Its peak is the most that it and the processes it starts (the etl's tasks side by side, a cluster's
    workers) hold at once, their resident sets sampled every tenth of a second. The kernel's own peak of a process
    (`getrusage`, VmHWM) would count one process only, and a child's counts its parent's memory as it was at the
    fork. A command past `timeout` seconds is killed, with the processes it started."""
    import psutil

    started, held = time.perf_counter(), 0
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = subprocess.Popen(args, stdout=out, stderr=err)
        tree = psutil.Process(child.pid)
        while not (ended := os.wait4(child.pid, os.WNOHANG))[0]:
            processes = [tree]
            with suppress(psutil.Error):  # a process that ended between the listing and the reading
                processes += tree.children(recursive=True)
                held = max(held, sum(p.memory_info().rss for p in processes))
            if time.perf_counter() - started > timeout:
                for process in reversed(processes):  # its children first
                    with suppress(psutil.Error):
                        process.kill()
                child.wait(10)
                raise RuntimeError(f"{name} took more than {timeout:.0f} s: it was stopped")
            time.sleep(0.1)
        err.seek(0), out.seek(0)
        if ended[1]:
            raise RuntimeError(f"{name} failed: {err.read().decode(errors='replace').strip()[-500:] or '?'}")
        return round(time.perf_counter() - started, 2), round(held / 2**20), out.read().decode()


def _child(script: str, dump: Path, db: Path, *args: str) -> dict:
    seconds, mb, out = measured(f"the run on {dump}", [sys.executable, "-c", script, str(dump), str(db), *args])
    return json.loads(out.strip().splitlines()[-1]) | {"wall_seconds": seconds, "peak_mb": mb}


def nightly_run(scale: float = 1.0, nezha: Path | None = None) -> dict:
    """The nightly job's time, peak memory and rates on one simulated day, beside the floor (DuckDB materialising
    every column of the same files, in a process of its own), each run twice in turns (`in_turns`), each into a new
    store; a rerun of the last (nothing new to load); the real day. The rates are the first run's."""
    with tempfile.TemporaryDirectory() as tmp:
        dump = Path(tmp) / "dump"
        subprocess.run([sys.executable, "-m", "rcalab", "simulate", str(dump), "--cases", "1", "--scale", str(scale)],
                       check=True, stdout=subprocess.DEVNULL)
        made = itertools.count()

        def run(script: str) -> tuple[float, dict, Path]:
            db = Path(tmp) / f"store-{next(made)}.duckdb"  # a new one: an etl into a loaded store has nothing to do
            result = _child(script, dump, db)
            return result["wall_seconds"], result, db

        etl, least = in_turns(partial(run, _CHILD), partial(run, _FLOOR))
        rerun = _child(_CHILD, dump, etl[-1][2])
    rows, secs = etl[0][1]["rows"], etl[0][1]["kind_seconds"]
    result = {
        "scale": scale,
        "etl_seconds": mean_seconds(etl),
        "etl_peak_memory_mb": round(max(r["peak_mb"] for _, r, _ in etl), 1),
        "floor_seconds": mean_seconds(least),
        "floor_peak_memory_mb": round(max(r["peak_mb"] for _, r, _ in least), 1),
        "etl_over_floor": ratio(etl, least),
        "etl_over_floor_each_pair": pair_ratios(etl, least),
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
            real = _child(_CHILD, Path(nezha), Path(tmp) / "tt.duckdb")
        result["trainticket_etl_seconds"] = round(real["wall_seconds"], 2)
        result["trainticket_failed_files"] = real["failed"]
    return result


def scale_run(scale: float = 0.25, days: int = 4) -> dict:
    """The nightly job on `days` simulated days (a fault an hour) as `rcalab etl` runs it and on local Dask clusters
    of 1 and 2 worker processes: time (the job's, not the cluster's start), peak memory (all its processes'),
    speed-up over one worker, rows per second."""
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        dump = Path(tmp) / "dump"
        subprocess.run([sys.executable, "-m", "rcalab", "simulate", str(dump), "--cases", str(24 * (days - 1) + 1),
                        "--scale", str(scale)], check=True, stdout=subprocess.DEVNULL)
        runs["default"] = _child(_CHILD, dump, Path(tmp) / "one.duckdb")
        for n in (1, 2):
            runs[f"{n} worker{'s' * (n > 1)}"] = _child(_CLUSTER, dump, Path(tmp) / f"w{n}.duckdb", str(n))
        parquet = sum(p.stat().st_size for p in dump.rglob("*.parquet"))
    one = runs["1 worker"]["seconds"]
    return {"scale": scale, "days": days, "parquet_mb": round(parquet / 2**20), "runs": {
        name: {"seconds": round(r["seconds"], 1), "speed_up": round(one / r["seconds"], 2),
               "rows_per_s": round(sum(r["rows"].values()) / r["seconds"]), "peak_mb": round(r["peak_mb"]),
               "failed": r["failed"]}
        for name, r in runs.items()}}


def store_run(scale: float = 0.01, days: int = 30, progress=lambda what: None) -> dict:
    """A store filled night after night, as the nightly job fills it: `days` simulated days (a fault an hour), each
    night one more day loaded. Each read is timed on the same case in two stores of two days and in the month's: the
    first day's (the month's store after its second night) and the newest day's (the last two days, loaded night
    after night into a store of their own); so is the newest day's night. The reads: a digest of the day's sixth
    case (caches cleared), `detect` over its UTC day, twelve cases of its hour, and one of them asked twelve times."""
    with tempfile.TemporaryDirectory() as tmp:
        src, db = Path(tmp) / "dump", Path(tmp) / "store.duckdb"
        progress(f"store: simulating {days} days")
        # a case an hour from an hour into the first CST day: six on the last day, whose sixth is read
        subprocess.run([sys.executable, "-m", "rcalab", "simulate", str(src), "--cases", str(24 * (days - 1) + 6),
                        "--scale", str(scale), "--seed", "1"], check=True, stdout=subprocess.DEVNULL)
        folders = sorted(p for p in src.iterdir() if p.is_dir())
        questions = load_questions(src / "input.json")
        first, newest = folders[0].name, folders[-1].name
        nights, two = [], {}
        for night, folder in enumerate(folders, 1):
            progress(f"store: night {night} of {len(folders)}")
            nights.append(_night(folder, Path(tmp) / "incoming", db))
            if night == 2:
                two["first"] = _reads(db, questions, first)
        month = {"first": _reads(db, questions, first), "newest": _reads(db, questions, newest)}
        progress("store: the last two days in a store of their own")
        last_two = [_night(folder, Path(tmp) / "incoming2", Path(tmp) / "two.duckdb") for folder in folders[-2:]]
        two["newest"] = _reads(Path(tmp) / "two.duckdb", questions, newest)
    n = f"{len(folders)} days"
    rows = {f"{name} ({day} day), s": {"2 days": two[day][name], n: month[day][name],
                                       "ratio": round(month[day][name] / two[day][name], 2) if two[day][name] else None}
            for day in ("first", "newest") for name in two[day]}
    rows["the newest day's night, s"] = {"2 days": round(last_two[-1], 2), n: round(nights[-1], 2),
                                         "ratio": round(nights[-1] / last_two[-1], 2)}
    return {"scale": scale, "days": len(folders), "columns": ["2 days", n, "ratio"], "rows": rows,
            "nights": [round(t, 2) for t in nights]}


def _night(folder: Path, incoming: Path, db: Path) -> float:
    """Seconds of the nightly job after one more day arrived in `incoming`."""
    incoming.mkdir(exist_ok=True)
    shutil.copytree(folder, incoming / folder.name, copy_function=os.link)
    started = time.perf_counter()
    nightly(incoming, db)
    return time.perf_counter() - started


def _reads(db: Path, questions: list[Question], day: str) -> dict[str, float]:
    """Seconds of a store's reads of one CST day (caches cleared before each, the process's and those kept beside
    the store): a digest of its sixth case, detect over that case's UTC day, twelve cases of its hour and one of them
    twelve times (seconds a case)."""
    def digest(q: Question) -> float:
        started = time.perf_counter()
        build_digest(con, q)
        return time.perf_counter() - started

    case = [q for q in questions if (q.start + dt.timedelta(hours=8)).date().isoformat() == day][5]
    con = store.connect(db, read_only=True)
    try:
        out = {}
        cold(db)
        out["a case's digest"] = round(digest(case), 2)
        cold(db)
        lo = case.start.replace(hour=0, minute=0, second=0, microsecond=0)
        started = time.perf_counter()
        detect.scan(con, lo, lo + dt.timedelta(days=1))
        out["detect over its UTC day"] = round(time.perf_counter() - started, 1)
        hour = [Question(f"h{i}", case.start + dt.timedelta(minutes=4 * i), case.start + dt.timedelta(minutes=4 * i + 8),
                         "") for i in range(12)]
        cold(db)
        out["twelve cases of one hour, a case"] = round(sum(digest(q) for q in hour) / 12, 2)
        cold(db)
        out["one case twelve times, a case"] = round(sum(digest(hour[0]) for _ in range(12)) / 12, 2)
    finally:
        con.close()
    return out


def cold(db: Path) -> None:
    """Clear what this process keeps of a store's reads and the levels kept beside its shards: the next read is a
    new process's on a store never read."""
    detect.forget()
    evidence.forget()
    for kept in store.cache_dir(db).glob("levels-*.json"):
        kept.unlink()


def names(row: dict) -> set[str]:
    instance = row["instance"]
    return set(instance if isinstance(instance, list) else [instance])


def hit(component: str, truth: set[str], node_fault: bool) -> bool:
    """A candidate names the truth: itself, its service (a pod of a true service), or a pod of it."""
    if node_fault:
        return component in truth
    return component in truth or service_of(component) in truth or any(service_of(t) == component for t in truth)


def _add(ac: list[float], found: list[bool]) -> None:
    for k in range(len(ac)):
        ac[k] += any(found[:k + 1])


def ranking(db: Path, input_json: Path, truth: Path, each=lambda question, digest: None) -> dict:
    """Top-1 / top-3 overall and per fault type, digest seconds, and the cases missed at top-1 (what the first
    candidate named instead), for every case of a store. A hit names the
    truth's service or one of its pods; top-1 exact names the very instance (the pod of a pod fault, the service
    of a service fault), as the challenge's LA counts it. `each` sees every case's digest (an agent answering
    from it)."""
    rows = {r["uuid"]: r for r in map(json.loads, Path(truth).read_text().splitlines())}
    con = store.connect(db, read_only=True)
    per: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])  # cases, top-1, top-3, top-1 at its level
    seconds, missed = [], []
    # AC@1..AC@5 of rcalab, of RCAEval's baselines where installed, and of chance, summed over the cases
    ac: dict[str, list[float]] = defaultdict(lambda: [0.0] * baselines.K)
    try:
        for q in load_questions(input_json):
            started = time.perf_counter()
            digest = build_digest(con, q)
            seconds.append(time.perf_counter() - started)
            each(q, digest)
            row = rows[q.uuid]
            node_fault = row["instance_type"] == "node"
            found = [hit(c.component, names(row), node_fault) for c in digest.candidates]
            counts = per[row["fault_type"]]
            counts[0] += 1
            counts[1] += any(found[:1])
            counts[2] += any(found[:3])
            counts[3] += bool(digest.candidates) and digest.candidates[0].component in names(row)
            if not any(found[:1]):
                missed.append({"uuid": q.uuid, "fault_type": row["fault_type"], "instance": row["instance"],
                               "start": q.start.isoformat(),
                               "named instead": [c.component for c in digest.candidates[:1]]})
            _add(ac["rcalab"], found)
            if baselines.methods():
                wide, units = baselines.frame(con, q)
                pool = sorted(set(units.values()))
                right = [hit(u, names(row), node_fault) for u in pool]
                for k in range(baselines.K):  # a random order of the same candidates
                    ac["chance"][k] += sum(right) and min(k + 1, len(pool)) / len(pool)
                for method, rank in baselines.methods().items():
                    order = baselines.ranked_units(rank(wide, baselines.inject_time(q))["ranks"], units) \
                        if wide is not None else []
                    _add(ac[method], [hit(u, names(row), node_fault) for u in order])
    finally:
        con.close()
    n = sum(c[0] for c in per.values())
    return {"cases": n, "top1": round(sum(c[1] for c in per.values()) / n, 3),
            "top3": round(sum(c[2] for c in per.values()) / n, 3),
            "top1_exact": round(sum(c[3] for c in per.values()) / n, 3),
            "AC": {who: {"AC@1": round(v[0] / n, 3), "AC@3": round(v[2] / n, 3),
                         "Avg@5": round(sum(v) / baselines.K / n, 3)} for who, v in ac.items()},
            "digest_seconds_mean": round(sum(seconds) / n, 3), "digest_seconds_max": round(max(seconds), 3),
            "per_type": {t: {"cases": c[0], "top1": round(c[1] / c[0], 3), "top3": round(c[2] / c[0], 3),
                             "top1_exact": round(c[3] / c[0], 3)} for t, c in sorted(per.items())},
            "missed": missed}


@dataclass(frozen=True)
class Replay:
    """A ground truth to replay in the simulator, and the system it describes (a shipped name or a file)."""
    schedule: Path
    system: str = "hipstershop"
    cluster: bool = False  # simulated with the cluster's state: its objects and events


def labelled_stores(tmp: Path, replays: dict[str, Replay], real: list[Path], scale: float = REPLAY_SCALE,
                    seed: int = 1, progress=lambda what: None, kept: Path | None = None, built: str = ""):
    """(name, store, input.json, groundtruth.jsonl) for a simulated replay of each schedule (a missing file is
    skipped) and each real dump, each built in a folder of its own under `tmp`. With `kept`, the folders are there
    instead, and a store is used again while what built it is the same: `built` (a fingerprint of the code that
    builds stores), and the schedule, system, scale and seed of a replay, the files of a real dump."""
    for name, replay in replays.items():
        if not Path(replay.schedule).is_file():
            continue
        system = Path(replay.system)
        folder, ready = _folder(kept or tmp, name, {
            "code": built, "schedule": _sha1(Path(replay.schedule).read_bytes()), "scale": scale, "seed": seed,
            "cluster": replay.cluster, "system": _sha1(system.read_bytes()) if system.is_file() else replay.system})
        db, cases = folder / "store.duckdb", folder / "cases"
        if not ready:
            progress(f"simulating {name}")
            dump = folder / "dump"
            subprocess.run([sys.executable, "-m", "rcalab", "simulate", str(dump), "--schedule",
                            str(replay.schedule), "--system", replay.system, "--scale", str(scale), "--seed",
                            str(seed), *(["--cluster-state"] if replay.cluster else [])], check=True,
                           stdout=subprocess.DEVNULL)
            progress(f"loading {name}")
            nightly(dump, db)
            cases.mkdir()
            for labels in ("input.json", "groundtruth.jsonl"):
                (dump / labels).rename(cases / labels)
            shutil.rmtree(dump)  # the store holds what the measures read
            _built(folder)
        yield name, db, cases / "input.json", cases / "groundtruth.jsonl"
    for path in real:
        if Path(path).is_dir():
            name = Path(path).name
            files = sorted((str(f.relative_to(path)), f.stat().st_size, f.stat().st_mtime_ns)
                           for f in Path(path).rglob("*") if f.is_file())
            folder, ready = _folder(kept or tmp, name, {"code": built, "dump": str(Path(path).resolve()),
                                                        "files": _sha1(json.dumps(files).encode())})
            db, cases = folder / "store.duckdb", folder / "cases"
            if not ready:
                progress(f"loading {name}")
                write_cases(path, cases)
                nightly(path, db)
                _built(folder)
            yield name, db, cases / "input.json", cases / "groundtruth.jsonl"


def _sha1(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()


def _folder(root: Path, name: str, tag: dict) -> tuple[Path, bool]:
    """The folder of the labelled store `name` under `root`, and whether it holds a store built as `tag` says (its
    `built.json`, which `_built` writes once the store is whole); if not, it is emptied for a new one."""
    folder = root / re.sub(r"[^\w.-]+", "-", name)
    if (folder / "built.json").is_file() and json.loads((folder / "built.json").read_text()) == tag:
        return folder, True
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    (folder / "tag.json").write_text(json.dumps(tag) + "\n")
    return folder, False


def _built(folder: Path) -> None:
    (folder / "tag.json").rename(folder / "built.json")


def run(replays: dict[str, Replay], real: list[Path], scale: float = REPLAY_SCALE, seed: int = 1,
        progress=lambda what: None, measure=None, keep: Path | None = None, code: str = "", workers: int = 1,
        stores: Path | None = None, built: str = "") -> dict:
    """`measure` (by default `ranking`; or `detection`) on each labelled store, `workers` stores at once (tasks on a
    local Dask cluster, a process each). With `keep`, each store's result is saved there as it ends, and a rerun by
    the same `code` (at the same scale and seed, of the same schedule) measures only the stores it lacks: an
    interrupted run goes on where it stopped. With `stores`, the stores themselves are kept there, and used again
    while the code that builds them (`built`) is the same (`labelled_stores`)."""
    measure = measure or ranking
    names = [*replays, *(Path(p).name for p in real)]
    saved, tags, result = {}, {}, {}
    if keep:  # each store's file, and what its result was measured by
        schedules = {name: _sha1(Path(r.schedule).read_bytes())
                     for name, r in replays.items() if Path(r.schedule).is_file()}
        tags = {name: {"scale": scale, "seed": seed, "measure": measure.__name__, "code": code,
                       "schedule": schedules.get(name)} for name in names}
        saved = {name: keep / (re.sub(r"[^\w.-]+", "-", f"{measure.__name__} {name}") + ".json") for name in names}
    for name, path in saved.items():
        kept = json.loads(path.read_text()) if path.is_file() else {}
        if kept.get("tag") == tags[name]:
            result[name] = kept["result"]
    todo = [({n: r}, []) for n, r in replays.items() if n not in result]
    todo += [({}, [p]) for p in real if Path(p).name not in result]
    one = partial(_measured, scale=scale, seed=seed, measure=measure, stores=stores, built=built)
    with cluster(workers if workers > 1 else None, None) as client:
        for _, got in run_tasks(one if client else partial(one, progress=progress), todo, client, STORE_SECONDS):
            for name, figures in got.items():
                result[name] = figures
                if keep:
                    keep.mkdir(parents=True, exist_ok=True)
                    saved[name].write_text(json.dumps({"tag": tags[name], "result": figures}, indent=2) + "\n")
            progress(f"{sum(n in result for n in names)} of {len(names)} stores measured, {workers} at once")
    return {name: result[name] for name in names if name in result}


def _measured(store: tuple[dict[str, Replay], list[Path]], scale: float, seed: int, measure,
              stores: Path | None = None, built: str = "", progress=lambda what: None) -> dict:
    """`measure` on one labelled store (a replay or a real dump; none where its schedule is missing), in a folder
    of its own that is gone when it ends, or kept in `stores`."""
    with tempfile.TemporaryDirectory() as tmp:
        for name, db, input_json, truth in labelled_stores(Path(tmp), *store, scale, seed, progress, stores, built):
            progress(f"{measure.__name__}: {name}")
            return {name: measure(db, input_json, truth)}
    return {}


def detection(db: Path, input_json: Path, truth: Path) -> dict:
    """Detected incidents against the labelled faults (precision, recall, delay), and the confidence between the
    fault windows and as many windows of the same lengths with no fault in them (AUROC, 'no clear' shares)."""
    questions = load_questions(input_json)
    faults = [(q.start, q.end) for q in questions]
    rows = {r["uuid"]: r for r in map(json.loads, Path(truth).read_text().splitlines())}
    con = store.connect(db, read_only=True)
    try:
        started = time.perf_counter()
        lo, hi = detect.span(con)
        levels = detect.scan(con, lo, hi)
        found = detect.incidents(levels)
        seconds = time.perf_counter() - started
        delays = [min((max(i.start - a, dt.timedelta(0)) for i in found if i.start <= b and a <= i.end),
                      default=None) for a, b in faults]
        caught = [d for d in delays if d is not None and d <= FOUND_WITHIN]
        on_time = [d for d in delays if d is not None and d <= ON_TIME]
        answers: dict[Window, str | None] = {}
        found_and_named, precision = flow(con, found, questions, rows, answers)
        misses = missed(con, found, questions, rows, answers)
        # The thresholds' alternatives, for fitting them on some days and reporting the others (`folds`).
        grid = {f"{a:g} {s:g}": flow(con, detect.incidents(levels, a, s), questions, rows, answers) for a, s in GRID}
        fault_conf, quiet_conf = [], []
        for q in questions:
            d = build_digest(con, q)
            row = rows[q.uuid]
            right = bool(d.candidates) and hit(d.candidates[0].component, names(row), row["instance_type"] == "node")
            fault_conf.append((d.confidence, right))
        for w in quiet_windows(faults, [b - a for a, b in faults], lo, hi):
            dq = build_digest(con, Question("quiet", w.start, w.end, ""))
            quiet_conf.append(dq.confidence if dq.candidates else 0.0)
    finally:
        con.close()
    scored = [c for c, _ in fault_conf if c is not None]
    quiet = [c for c in quiet_conf if c is not None]
    auroc = (mannwhitneyu(scored, quiet).statistic / (len(scored) * len(quiet))) if scored and quiet else None
    right = [c for c, ok in fault_conf if ok and c is not None]
    return {"faults": len(faults), "incidents": len(found), "recall": round(len(caught) / len(faults), 3),
            "precision": precision,
            "found_and_named": found_and_named, "missed": misses,
            "on_time": round(len(on_time) / len(faults), 3),
            "median_delay_minutes": round(statistics.median(d.total_seconds() / 60 for d in caught), 1) if caught else None,
            "detect_seconds": round(seconds, 1), "confidence_auroc": round(auroc, 3) if auroc is not None else None,
            "quiet_windows": len(quiet),
            "no_clear_on_quiet": round(sum(not detect.clear(c) for c in quiet) / len(quiet), 3) if quiet else None,
            "no_clear_on_right": round(sum(not detect.clear(c) for c in right) / len(right), 3) if right else None,
            "grid": grid}


# Detection's two thresholds (ABNORMAL, STAY) over a grid, for the leave-one-day-out fit of `folds`.
GRID = [(a / 100, s / 100) for a in range(40, 95, 5) for s in range(20, a + 1, 5)]


def flow(con, found: list[detect.Incident], questions: list[Question], rows: dict, answers: dict
         ) -> tuple[float, float | None]:
    """Found and named (the share of faults for which an incident over the fault, diagnosed by the rank agent as
    `diagnose` answers `detect --out`, names its component) and precision (the share of incidents over a fault).
    `answers` keeps the rank agent's answer per window, for the next call."""
    named = sum(_right(_said(con, found, q, answers), rows[q.uuid]) for q in questions)
    true = sum(any(_over(i, q) for q in questions) for i in found)
    return round(named / len(questions), 3), round(true / len(found), 3) if found else None


def _over(incident: detect.Incident, q: Question) -> bool:
    return incident.start <= q.end and q.start <= incident.end


def _said(con, found: list[detect.Incident], q: Question, answers: dict) -> list[str | None]:
    """What the rank agent named for each incident over fault `q` (answers kept in `answers` per window)."""
    over = [i for i in found if _over(i, q)]
    for i in over:
        if i.peak not in answers:
            answers[i.peak] = answer(con, i)
    return [answers[i.peak] for i in over]


def _right(said: list[str | None], row: dict) -> bool:
    return any(a is not None and hit(a, names(row), row["instance_type"] == "node") for a in said)


def missed(con, found: list[detect.Incident], questions: list[Question], rows: dict, answers: dict) -> list[dict]:
    """The faults not found and named: their type, cause, window, and what the incidents over them named."""
    out = []
    for q in questions:
        row, said = rows[q.uuid], _said(con, found, q, answers)
        if not _right(said, row):
            out.append({"uuid": q.uuid, "fault_type": row["fault_type"], "instance": row["instance"],
                        "start": q.start.isoformat(), "minutes": round((q.end - q.start).total_seconds() / 60, 1),
                        "named instead": said})
    return out


def folds(result: dict, days: list[str]) -> list[dict]:
    """Leave one day out: detection's thresholds fitted on the other days (the grid point with the best mean of
    found-and-named and precision's harmonic mean) and reported on the day left out, beside the shipped ones."""
    def f1(figures) -> float:
        named, precision = figures
        return 2 * named * precision / (named + precision) if named and precision else 0.0

    shipped = f"{detect.ABNORMAL:g} {detect.STAY:g}"
    out = []
    for held in days:
        others = [d for d in days if d != held]
        fitted = max(result[held]["grid"], key=lambda k: (statistics.mean(f1(result[d]["grid"][k]) for d in others), k))
        out.append({"day left out": held, "fitted on": ", ".join(others), "fitted": fitted,
                    "found and named": result[held]["grid"][fitted][0], "precision": result[held]["grid"][fitted][1],
                    "shipped": shipped, "found and named, shipped": result[held]["grid"][shipped][0],
                    "precision, shipped": result[held]["grid"][shipped][1]})
    return out


def answer(con, incident: detect.Incident) -> str | None:
    """The component the rank agent names for a detected incident (as `diagnose` answers `detect --out`)."""
    d = build_digest(con, Question("detected", incident.peak.start, incident.peak.end, ""))
    return d.candidates[0].component if d.candidates else None


def quiet_windows(faults: list, lengths: list[dt.timedelta], lo: dt.datetime, hi: dt.datetime) -> list[Window]:
    """As many windows as faults, each of a fault's length, none within two minutes of a fault, spread evenly
    over the store's time after its first hour (the same windows every run)."""
    def free(w: Window) -> bool:
        return all(b + FOUND_WITHIN < w.start or w.end + FOUND_WITHIN < a for a, b in faults)

    out = []
    for k, length in enumerate(lengths):
        starts = [lo + dt.timedelta(hours=1, minutes=m) for m in range(int((hi - lo - length).total_seconds() // 60) - 60)]
        fits = [Window(s, s + length) for s in starts if free(Window(s, s + length))]
        if fits:
            out.append(fits[(k * len(fits)) // len(lengths)])
    return out
