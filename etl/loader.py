"""The ETL run: find the dump's files, and (re)build the load shard of every day of the dump one of whose files
is new, changed, failed before or gone; then mine the new shards' log lines for templates, in day order, and
mark the UTC days whose features read their rows (`dirty_days`) for the refresh (`features/refresh.py`).

A day is loaded in parts (`PART_BYTES` of its files a part, each file in the part a stable hash of its path names),
each a unit of work (`load_day`, a task that may run in this process or on a Dask worker): it writes a shard under a
temporary name, copying the rows of its unchanged files from the part's previous shard and reading the rest, each
file in one transaction, and renames it into place; once every part of the day is written, the catalog switches to
them in one transaction. A task that dies leaves the previous shards and the catalog as they were, and a rerun (or
the engine's retry) redoes the day. A file that fails is recorded in the manifest with the reason (the rows of its
previous load kept) and the rest goes on.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path
from stat import S_ISREG
from typing import Callable

import duckdb

from common.errors import LoadError, StoreError
from common.tasks import run_tasks, task_parts

from . import store
from .adapters import ADAPTERS, TABLES, InputFile, adapter_for, kubernetes
from .loglines import event_sql, level_sql, mask_sql, mine_new

log = logging.getLogger(__name__)


@dataclass
class Report:
    format: str
    loaded: list[str] = field(default_factory=list)
    unchanged: int = 0
    skipped: int = 0
    removed: int = 0  # files gone from the dump since the last run: their rows were dropped
    failed: list[tuple[str, str]] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)  # files some of whose rows no system can produce
    rows: int = 0
    feature_rows: dict[str, int] = field(default_factory=dict)
    rows_by_kind: dict[str, int] = field(default_factory=dict)
    seconds_by_kind: dict[str, float] = field(default_factory=dict)  # "features" for the refresh
    mended: list[str] = field(default_factory=list)  # shards found missing or unreadable, and what loads again

    @property
    def partial(self) -> bool:
        return bool(self.failed)


@dataclass(frozen=True)
class Source:
    """A file of a day to load: read it (`copy` False) or copy its rows from the day's previous shard."""
    path: str
    kind: str
    reason: str
    file_id: int
    copy: bool = False


@dataclass(frozen=True)
class Day:
    """The task of one day of a dump: its files, the shard it replaces (or None) and the shard it writes."""
    adapter: str
    sources: tuple[Source, ...]
    previous: str | None
    out: str


@dataclass
class Loaded:
    """What a day's task did to a file."""
    file_id: int
    path: str
    kind: str
    status: str  # loaded | failed | copied
    rows: int = 0
    error: str = ""
    left_out: bool = False
    seconds: float = 0.0


@dataclass
class DayResult:
    out: str
    files: list[Loaded]
    lo: dt.datetime | None  # the time span of its rows
    hi: dt.datetime | None


def run_etl(dump: Path, db: Path, fmt: str = "auto", progress: Callable[[int, str], None] | None = None,
            then: Callable[[duckdb.DuckDBPyConnection, Report], None] | None = None, client=None) -> Report:
    """Load `dump` into the store `db` incrementally (see the module docstring), each day a task: in this process,
    side by side in processes of this machine (`client` a `common.tasks.Local`), or on the Dask cluster of `client`
    (the store must then be on a file system every worker reaches).
    `then(con, report)` runs once the files are in, on the same connection and under the same lock (the nightly
    job refreshes the features)."""
    dump = Path(dump).resolve()  # a file is known by its real path, however the dump was named
    adapter = adapter_for(dump, fmt)
    with store.exclusive(db):
        con = store.connect(db, shards=False)
        try:
            report = Report(adapter.NAME, mended=mend(con, Path(db)))
            _run(con, Path(db), adapter, dump, progress, client, report)
            if then:
                then(con, report)
            return report
        finally:
            con.close()


DAY_FOLDER = re.compile(r"\d{4}-\d{2}-\d{2}")


def day_of(dump: Path, path: Path) -> str:
    """The day of the dump a file belongs to: the first folder (the dump's own included) named by a date, or
    'undated' (a dump of one period: a case folder, an OTLP export)."""
    return next((part for part in (dump.name, *path.relative_to(dump).parts[:-1]) if DAY_FOLDER.fullmatch(part)),
                "undated")


def mend(con, db: Path) -> list[str]:
    """Take every shard that is missing or cannot be read whole out of the catalog, in one transaction each, and say
    so: a load shard's files are marked failed in the manifest, so that the load of their dump (this one, or the next
    of theirs) reads them again; the UTC days its rows reached, or a features shard's own, wait for the refresh."""
    said = []
    for build, kind, key, file, lo, hi in con.execute("select build, kind, key, file, lo, hi from shards "
                                                      "order by kind, key").fetchall():
        why = store.unreadable(con, db, f"shard_{build}", file)
        if not why:
            continue
        con.execute("begin")
        if kind == "load":
            ids = [fid for fid, path in con.execute("select file_id, path from manifest where status = 'loaded'"
                                                    ).fetchall() if _in_day(Path(path), key)]
            con.execute("update manifest set status = 'failed', error = ? where list_contains(?, file_id)",
                        [f"its day's shard {file} {why}; it loads again with its dump", ids])
            if lo is not None:
                con.execute("insert or ignore into dirty_days select unnest(range(?::date, ?::date + 1, "
                            "interval 1 day))", [lo - store.REACH, hi + store.REACH])
        else:
            con.execute("insert or ignore into dirty_days values (?::date)", [key])
        con.execute("delete from shards where build = ?", [build])
        store.publish(con)
        con.execute("commit")
        with suppress(duckdb.Error):
            con.execute(f"detach if exists shard_{build}")
        (store.shard_dir(db) / file).unlink(missing_ok=True)
        said.append(f"{store.shard_dir(db) / file} {why}: " + (
            f"its {len(ids)} files load again from the dump" if kind == "load" else "its day's features are computed "
            "again"))
        log.warning("mended: %s", said[-1])
    return said


def _tag(dump: Path) -> str:
    """What keeps the days of different dumps in one store apart (a load shard's key is its day and this, and
    which part of how many it is where its day is loaded in parts: `parted`)."""
    return hashlib.sha1(str(dump).encode()).hexdigest()[:8]


# A day of this many bytes of files or more is loaded in parts (a power of two, at most MAX_PARTS: `task_parts`):
# tasks that workers share. A part costs a shard and a task's start, and 128 MB of files take tens of seconds to load;
# a simulated HipsterShop day at full scale (370 MB) loads in four parts. Chosen, not fitted.
PART_BYTES = 128 * 2**20
MAX_PARTS = 16
PART_KEY = re.compile(r"(.+)-([0-9a-f]{8})(?:-(\d+)of(\d+))?")


def _part(path: str, parts: int) -> int:
    """The part of its day a file loads in: a stable hash of its path."""
    return int.from_bytes(hashlib.sha1(path.encode()).digest()[:4], "big") % parts


def parted(key: str, part: int, parts: int) -> str:
    """A shard's key where its day is built in parts (a load's, a day's features): which part of how many."""
    return key if parts == 1 else f"{key}-{part}of{parts}"


def _day_key(key: str) -> str:
    """The day (and dump) of a load shard's key, its part left off."""
    day, tag, _, _ = PART_KEY.fullmatch(key).groups()
    return f"{day}-{tag}"


def _in_day(path: Path, key: str) -> bool:
    """Whether a file of some dump belongs to the day (and part) of a load shard's key."""
    day, tag, part, parts = PART_KEY.fullmatch(key).groups()
    return (any(_tag(dump) == tag and day_of(dump, path) == day for dump in path.parents)
            and (parts is None or _part(str(path), int(parts)) == int(part)))


def _run(con, db: Path, adapter, dump: Path, progress, client, report: Report) -> None:
    found = adapter.discover(dump)
    listed = {f.path for f in found}
    beside = (kubernetes.claim(InputFile(p, "skip")) for p in kubernetes.candidates(dump) if p not in listed)
    files = [kubernetes.claim(f) for f in found] + [f for f in beside if f.kind == kubernetes.KIND]
    known = {row[0]: row[1:] for row in con.execute("select path, bytes, mtime, status, file_id from manifest").fetchall()}
    present = {str(f.path) for f in files}
    tag = _tag(dump)
    shards = {key: (build, file, lo, hi) for build, key, file, lo, hi in
              con.execute("select build, key, file, lo, hi from shards where kind = 'load'").fetchall()}
    days: dict[str, list] = {}
    for file in files:
        stat, problem = _stat(file.path)
        if problem:  # only regular files are read: a pipe would block the run, a dangling link has nothing
            file = InputFile(file.path, "skip", problem)
        prev = known.get(str(file.path))
        same = prev and prev[0] == stat.st_size and prev[1] == stat.st_mtime
        if same and prev[2] in ("loaded", "skipped"):
            report.unchanged += 1
        if file.kind == "skip":
            if not (same and prev[2] == "skipped"):
                _record(con, [(str(file.path), file.kind, _file_id(con, prev), 0, "skipped", file.reason)])
                report.skipped += 1
            continue
        days.setdefault(f"{day_of(dump, file.path)}-{tag}", []).append((file, prev, same and prev[2] == "loaded",
                                                                        stat.st_size))
    gone: dict[str, list[tuple[str, int]]] = {}
    for path, (_, _, status, fid) in known.items():
        if status == "loaded" and path.startswith(f"{dump}/") and path not in present:
            gone.setdefault(f"{day_of(dump, Path(path))}-{tag}", []).append((path, fid))
    todo = []  # (the day's key, the part's, its task)
    replaced: dict[str, list] = {}  # the day's shards its new parts replace
    waiting: dict[str, int] = {}  # the day's parts to load
    next_id = con.execute("select coalesce(max(file_id), 0) + 1 from manifest").fetchall()[0][0]
    build = _next_build(con, db)
    for key in sorted(set(days) | set(gone)):
        entries = []  # (the file, its id, whether its rows may be copied, its size)
        for file, prev, copy, size in days.get(key, []):
            if prev:
                fid = prev[3]
            else:
                fid, next_id = next_id, next_id + 1
            entries.append((file, fid, copy, size))
        plan, replaced[key] = _plan(key, entries, gone.get(key, []), shards)
        waiting[key] = len(plan)
        for part, sources, previous in plan:
            todo.append((key, part, Day(adapter.NAME, sources, previous and str(store.shard_dir(db) / previous),
                                        str(store.shard_dir(db) / f"load-{part}.{build + len(todo)}.duckdb"))))
    results: dict[str, list] = {}
    done = 0
    try:
        for i, result in run_tasks(load_day, [task for _, _, task in todo], client):
            key, part, _ = todo[i]
            results.setdefault(key, []).append((part, result))
            if len(results[key]) < waiting[key]:
                continue
            if progress:
                progress(done, f"day {key.rsplit('-', 1)[0]} of the dump")
            _switch(con, db, results.pop(key), replaced[key], gone.get(key, []), report)
            done += 1
    except StoreError as e:
        raise StoreError(f"{e}; the {done} days loaded before it are kept; run the same command again once that is "
                         "mended") from None
    mine_shards(con, db)
    con.execute("delete from dirty_days where day not between ? and ?", [FIRST_DAY, last_day()])  # none can load


def _plan(key: str, entries: list, gone: list[tuple[str, int]], shards: dict) -> tuple[list, list]:
    """The parts of a day to load, (part key, its files, the file of its previous shard to copy from), and the
    shards (build, file, lo, hi) they replace. Where the day's shards are parts of its split, each part is loaded
    alone where a file of it is new, changed or gone, the others kept; where they are not (its bytes grew past
    another part), every part, in place of them all."""
    parts = task_parts(sum(size for *_, size in entries), PART_BYTES, MAX_PARTS)
    mine, lost = [[] for _ in range(parts)], [set() for _ in range(parts)]
    for entry in entries:
        mine[_part(str(entry[0].path), parts)].append(entry)
    for path, _ in gone:
        lost[_part(path, parts)].add(path)
    keys = [parted(key, i, parts) for i in range(parts)]
    held = [k for k in shards if _day_key(k) == key]
    split = set(held) <= set(keys)
    plan, replaced = [], []
    for part, files, dropped in zip(keys, mine, lost):
        kept = split and part in shards
        if split and (kept and all(copy for _, _, copy, _ in files) and not dropped or not (files or kept)):
            continue  # as it is, or nothing to load or drop
        plan.append((part, tuple(Source(str(file.path), file.kind, file.reason, fid, copy and kept)
                                 for file, fid, copy, _ in files), shards[part][1] if kept else None))
        replaced += [shards[part]] if kept else []
    return plan, replaced if split or not plan else [shards[k] for k in held]


SHARD_FILE = re.compile(r"(load|features)-.*\.duckdb(\.tmp)?(\.wal)?")


def _next_build(con, db: Path) -> int:
    """The next shard's build number. Shard files that the catalog does not list are what an interrupted run left (a
    temporary file, or a shard renamed into place before the catalog switched): removed. Nothing else is (the
    readers' cache)."""
    folder = store.shard_dir(db)
    folder.mkdir(exist_ok=True)
    listed = {file for file, in con.execute("select file from shards").fetchall()}
    for path in folder.iterdir():
        if path.name not in listed and SHARD_FILE.fullmatch(path.name):
            path.unlink()
    return store.next_build(con)


def _switch(con, db: Path, parts: list[tuple[str, DayResult]], old: list, gone: list[tuple[str, int]],
            report: Report) -> None:
    """In one transaction: the manifest rows of a day's files, its new shards (a part each, under its key) in the
    catalog in place of the `old` (build, file, lo, hi) they replace, and the UTC days whose features read their rows
    marked; then the old shards' files go."""
    con.execute("begin")
    read = [f for _, result in parts for f in result.files if f.status != "copied"]
    _record(con, [(f.path, f.kind, f.file_id, f.rows, f.status, f.error) for f in read])
    for f in read:
        if f.status == "failed":
            report.failed.append((f.path, f.error))
            log.warning("%s: %s", f.path, f.error)
            continue
        report.loaded.append(f.path)
        report.left_out += [f.path] if f.left_out else []
        report.rows += f.rows
        report.rows_by_kind[f.kind] = report.rows_by_kind.get(f.kind, 0) + f.rows
        report.seconds_by_kind[f.kind] = report.seconds_by_kind.get(f.kind, 0.0) + f.seconds
    for path, fid in gone:
        con.execute("update manifest set status = 'removed', rows = 0, error = ?, "
                    "loaded_at = current_timestamp::timestamp where file_id = ?",
                    ["the file is gone from the dump; its rows were dropped", fid])
        log.info("%s: gone from the dump, rows dropped", path)
        report.removed += 1
    for build, *_ in old:
        con.execute("delete from shards where build = ?", [build])
    for key, result in parts:
        out = Path(result.out)
        if result.files:
            con.execute("insert into shards values (?, 'load', ?, ?, ?, ?, false, ?)",
                        [int(out.suffixes[-2][1:]), key, out.name, result.lo, result.hi, len(store.MIGRATIONS)])
    for lo, hi in [(lo, hi) for _, _, lo, hi in old] + [(r.lo, r.hi) for _, r in parts]:
        if lo is not None:
            con.execute("insert or ignore into dirty_days select unnest(range(?::date, ?::date + 1, interval 1 day))",
                        [lo - store.REACH, hi + store.REACH])
    store.publish(con)
    con.execute("commit")
    for _, file, _, _ in old:
        (store.shard_dir(db) / file).unlink(missing_ok=True)
    for _, result in parts:
        if not result.files:  # every file of the part is gone
            Path(result.out).unlink(missing_ok=True)


def mine_shards(con, db: Path) -> None:
    """Give the masked log lines of every shard not yet mined their templates: day by day (a day's parts together),
    each text in the order it first appears, so that template ids depend neither on which day a worker finished
    first nor on the parts a day was loaded in."""
    store.open_shards(con, db)
    unmined = con.execute("select key, build from shards where kind = 'load' and not mined order by key").fetchall()
    for _, shards in groupby(unmined, key=lambda row: _day_key(row[0])):
        builds = [build for _, build in shards]
        lines = " union all ".join(f"select masked, ts from shard_{build}.log_lines" for build in builds)
        new = [t for t, in con.execute(f"""select masked from ({lines})
                                            where masked not in (select masked from log_masked)
                                            group by masked order by min(ts), masked""").fetchall()]
        con.execute("begin")
        mine_new(con, new)
        con.execute("update shards set mined = true where list_contains(?, build)", [builds])
        con.execute("commit")


def load_day(day: Day) -> DayResult:
    """A day's task: its shard written under a temporary name and renamed into place. Its files load side by side,
    as many at once as DuckDB has threads, each unit (a file, or the files one scan reads: `units`) on a connection
    and in a transaction of its own: DuckDB reads a file of one row group (a challenge dump's are) on one thread, so
    one file at a time leaves the other cores idle."""
    adapter = ADAPTERS[day.adapter]
    with store.write_shard(Path(day.out)) as con:
        if day.previous:
            store.attach(con, day.previous, "previous")
        cursors, stop = [], threading.Event()

        def one(unit: tuple[Source, ...]) -> list[Loaded]:
            if stop.is_set():  # a file before it could not be written: the day is given up
                return []
            cur = con.cursor()
            cursors.append(cur)
            try:
                return [_copied(cur, unit[0])] if unit[0].copy else _loaded(cur, adapter, unit, day.previous)
            except BaseException:
                stop.set()
                raise
            finally:
                cur.close()

        with ThreadPoolExecutor(store.threads(con)) as pool:
            try:
                done = [f for loaded in pool.map(one, units(adapter, day.sources)) for f in loaded]
            except BaseException:  # a refusal of the disk, or a Ctrl-C: no file begins, those loading stop
                stop.set()
                for cur in list(cursors):
                    with suppress(duckdb.Error):  # one that finished is closed
                        cur.interrupt()
                raise
        con.execute(f"""insert into placement select pod, service, node, min(ts), max(ts)
                        from ({' union all '.join(PLACEMENT_SOURCES.values())})
                        where pod is not null and node is not null group by all""")
        (lo, hi), = con.execute("select min(ts), max(ts) from (" + " union all ".join(
            f"select ts from {table}" for table in ("metric_points", "log_lines", "spans")) + ")").fetchall()
    return DayResult(day.out, done, lo, hi)


# A scan of many small files costs about what a scan of one file of their rows does, and a query a file costs
# tens of milliseconds more: files one query reads alike are read together, up to these bounds (the memory a
# scan's window functions hold grows with its files; files of megabytes gain nothing from company).
BATCH_FILES = 256
BATCH_BYTES = 64 * 2**20


def units(adapter, sources) -> list[tuple[Source, ...]]:
    """The day's work: each file to copy or read alone, and the files to read in one scan, those of one key of the
    adapter's `batch` (a query of that key reads any list of its files as one, each row with its `filename`)."""
    alone, batches = [], {}
    for src in sources:
        key = None if src.copy else _batch(adapter, InputFile(Path(src.path), src.kind, src.reason))
        if key is None:
            alone.append((src,))
            continue
        size = _stat(Path(src.path))[0].st_size
        chunks = batches.setdefault(key, [[]])
        if len(chunks[-1]) == BATCH_FILES or sum(b for _, b in chunks[-1]) + size > BATCH_BYTES and chunks[-1]:
            chunks.append([])
        chunks[-1].append((src, size))
    return [tuple(src for src, _ in chunk) for chunks in batches.values() for chunk in chunks] + alone


def _reader(adapter, kind: str):
    """What reads a file of `kind`: its dump's adapter, or for a cluster's exports beside any dump, `kubernetes`."""
    return kubernetes if kind == kubernetes.KIND else adapter


def _batch(adapter, file: InputFile):
    """The key of the files one scan of its reader reads with `file`, or None where it is read alone (a reader
    without `batch` reads each file with a query of its own)."""
    batch = getattr(_reader(adapter, file.kind), "batch", None)
    return batch(file) if batch and file.kind != "unreadable" else None


def _copied(con, src: Source) -> Loaded:
    """An unchanged file: its rows as the day's previous shard holds them."""
    return Loaded(src.file_id, src.path, src.kind, "copied", _copy(con, src.file_id))


def _copy(con, fid: int) -> int:
    return sum(con.execute(f"insert into {table} by name select * from previous.{table} where file_id = ?",
                           [fid]).fetchall()[0][0] for tables in TABLES.values() for table in tables)


def _loaded(con, adapter, unit: tuple[Source, ...], previous: str | None) -> list[Loaded]:
    """Files read into the day's shard in one transaction. Where files read together fail, each is read alone, so
    that the one at fault is named; one that fails keeps its previous load's rows."""
    started = time.perf_counter()
    try:
        said = _load(con, adapter, unit)
    except duckdb.InterruptException:  # a Ctrl-C inside a query: the run ends
        _rollback(con)
        raise
    except (duckdb.Error, ValueError, LoadError) as e:
        _rollback(con)
        if isinstance(e, duckdb.Error) and store.unwritable(e):
            raise
        if len(unit) > 1:
            return [f for src in unit for f in _loaded(con, adapter, (src,), previous)]
        src, = unit
        reason = str(e).splitlines()[0]
        kept = _copy(con, src.file_id) if previous else 0  # under whatever kind it loaded as before
        if kept:  # a failed reload: the previous load's rows stay, and the manifest says so
            reason += f"; the {kept} rows of its previous load are kept"
        return [Loaded(src.file_id, src.path, src.kind, "failed", kept, reason)]
    total = sum(rows for rows, _, _ in said) or 1
    seconds = time.perf_counter() - started
    return [Loaded(src.file_id, src.path, src.kind, "loaded", rows, note, left_out, seconds * rows / total)
            for src, (rows, left_out, note) in zip(unit, said)]


def last_day() -> dt.date:
    return dt.date.today() + dt.timedelta(days=366)


def _rollback(con) -> None:
    try:
        con.execute("rollback")
    except duckdb.Error:
        pass  # the failure came before the transaction began


def _file_id(con, prev) -> int:
    if prev:
        return prev[3]
    return con.execute("select coalesce(max(file_id), 0) + 1 from manifest").fetchall()[0][0]


def _stat(path: Path) -> tuple[os.stat_result, str]:
    """A file's stat, and why it cannot be read as a file of the dump ('' when it can)."""
    try:
        stat = path.stat()
    except OSError as e:  # a link that leads nowhere or loops
        return path.lstat(), f"a link that cannot be followed ({e.strerror})"
    if not S_ISREG(stat.st_mode):
        return stat, "not a regular file (a named pipe, a socket or a device is not read)"
    return stat, ""


def _record(con, entries: list[tuple[str, str, int, int, str, str]]) -> None:
    """The manifest rows of files (path, kind, file id, rows, status, error), in two statements however many."""
    if not entries:
        return
    stats = [_stat(Path(path))[0] for path, *_ in entries]
    paths, kinds, fids, rows, statuses, errors = map(list, zip(*entries))
    con.execute("delete from manifest where list_contains(?, file_id)", [fids])
    con.execute("""insert into manifest select unnest(?), unnest(?), unnest(?), unnest(?), unnest(?), unnest(?),
                                             unnest(?), unnest(?), current_timestamp::timestamp""",
                [fids, paths, kinds, rows, [s.st_size for s in stats], [s.st_mtime for s in stats], statuses,
                 [e or None for e in errors]])


def _load(con, adapter, unit: tuple[Source, ...]) -> list[tuple[int, bool, str]]:
    """Load files in one transaction, in one scan where the adapter reads them together (`units`); returns each
    file's row count, whether rows no system can produce were left out, and what the manifest says of it."""
    first = unit[0]
    if first.kind == "unreadable":  # the adapter could not read it to tell what it holds
        raise LoadError(first.reason)
    table = TABLES[first.kind][0]
    file = InputFile(Path(first.path), first.kind, first.reason)
    query = _reader(adapter, first.kind).query(con, file)
    fids = [src.file_id for src in unit]
    if _batch(adapter, file) is None:
        params, ids = query.params | {"file_ids": fids}, "select *, $file_ids[1] as file_id from ({})"
    else:  # the query reads the list of paths, each row with its `filename`
        params = query.params | {"path": [src.path for src in unit], "file_ids": fids}
        ids = ("select * exclude (filename) from ({}) join (select unnest($path) as filename, unnest($file_ids) "
               "as file_id) using (filename)")
    select = query.sql if isinstance(query.sql, dict) else {table: query.sql}
    left_out: dict[int, list[str]] = {}
    for name, frame in query.frames.items():
        con.register(name, frame)
    con.execute("begin")
    if first.kind == "log":  # lines repeat: each distinct text is masked once; templates are mined in the catalog
        con.execute(f"create or replace temp table staged as {ids.format(select[table])}", params)
        con.execute(f"""create or replace temp table masks as
                        select text, {mask_sql('text')} as masked, {level_sql('text')} as level,
                               {event_sql('text')} as event
                        from (select distinct text from staged)""")
        con.execute("""insert into log_lines by name
                       select s.ts, s.component, s.service, s.node, k.masked, s.message, s.file_id,
                              k.level, s.trace_id, s.span_id, k.event
                       from staged s join masks k using (text)""")
    elif first.kind in IMPOSSIBLE:  # inserted as read; the rows left out are counted, then deleted
        reasons = IMPOSSIBLE[first.kind]
        con.execute(f"insert into {table} by name {ids.format(select[table])}", params)
        counts = ", ".join(f"count(*) filter ({p})" for p in reasons.values())
        for fid, *n in con.execute(f"select file_id, {counts} from {table} where list_contains(?, file_id) "
                                   "group by file_id", [fids]).fetchall():
            left_out[fid] = [f"{reason} ({k:,})" for reason, k in zip(reasons, n) if k]
        if any(left_out.values()):
            con.execute(f"delete from {table} where list_contains(?, file_id) and ({' or '.join(reasons.values())})",
                        [fids])
    else:
        for each, sql in select.items():
            con.execute(f"insert into {each} by name {ids.format(sql)}", params)
    rows = dict.fromkeys(fids, 0)
    for each in TABLES[first.kind]:
        for fid, n in con.execute(f"select file_id, count(*) from {each} where list_contains(?, file_id) "
                                  "group by file_id", [fids]).fetchall():
            rows[fid] += n
    if first.kind in PLACEMENT_SOURCES:  # telemetry, with times (declared calls have none)
        for fid, untimed, outside, example in con.execute(
                f"""select file_id, count(*) - count(ts), count(*) filter (where ts::date not between ? and ?),
                           min(ts::text) filter (where ts::date not between ? and ?)
                    from {table} where list_contains(?, file_id) group by file_id""",
                [FIRST_DAY, last_day(), FIRST_DAY, last_day(), fids]).fetchall():
            if untimed:
                raise ValueError(f"{untimed} rows without a time")
            if outside:
                raise ValueError(f"{outside} rows with times outside {FIRST_DAY}..{last_day()} (e.g. {example})")
    rejected = _rejected(con, file.path) if query.rejects else ""  # such a query reads its file alone
    said = {fid: "; ".join(filter(None, [f"left out {', '.join(left_out[fid])}; the rest loaded" if left_out.get(fid)
                                         else "", rejected, *query.notes])) for fid in fids}
    con.execute("commit")
    return [(rows[fid], bool(left_out.get(fid)), said[fid]) for fid in fids]


def _rejected(con, path: Path) -> str:
    """What the manifest says of the malformed rows a read of `path` left out (DuckDB lists them in
    `reject_errors`, by scan)."""
    lines = [r[0] for r in con.execute("""
        select distinct line from reject_errors join reject_scans using (scan_id)
        where reject_scans.file_path = ? order by line""", [str(path)]).fetchall()]
    if not lines:
        return ""
    shown = ", ".join(map(str, lines[:5])) + (" ..." if len(lines) > 5 else "")
    return f"{len(lines)} malformed rows left out (lines {shown}); the rest loaded"


# Rows no system can produce, by reason: left out at load and counted in the manifest, so that one such row
# changes no answer and fails no day's features (a span of 2^63 us overflowed their sums).
IMPOSSIBLE = {
    "metric": {"readings that are not finite numbers": "value is null or not isfinite(value)",
               "readings of 1e18 or more in size": "abs(value) >= 1e18"},
    "trace": {"spans of negative duration": "duration_us < 0",
              "spans over a day long": f"duration_us > {24 * 3600 * 10**6}"},
}
FIRST_DAY = dt.date(2000, 1, 1)  # a time before it, or over a year ahead, is a broken clock or a bad parse
PLACEMENT_SOURCES = {
    "metric": "select component as pod, service, node, ts, file_id from metric_points where component_kind = 'pod'",
    "log": "select component as pod, service, node, ts, file_id from log_lines",
    "trace": "select pod, service, node, ts, file_id from spans",
}

