"""Detection and confidence: which windows of a store are abnormal, found without being told, and how far
a case's top candidate stands above what the normal windows of the same store show.

A window's level is the score of its top candidate, from the same evidence families and ranker a
case gets. Each family already measures its series against their own hour before, so a level has
one scale on every store: a window is abnormal from `ABNORMAL` up. An incident is found with
hysteresis, as alarms are: it needs one abnormal window, and it runs on, before and after it, over
the windows in a row whose top candidate is the same culprit at `STAY` or more (a fault's first
minutes fill only part of a window, and its strength wavers; back-to-back faults of other
components are incidents of their own). An incident's question asks about its strongest window, where its
culprit stood out: the run's first and last windows also hold the ends of the faults before and after it,
and a digest over the whole run can name one of those (an Online Boutique incident whose windows all
named currencyservice, diagnosed over its 25 minutes, answered the checkoutservice fault that ended in its
first minute).

The confidence of an answer asks that its level stand out twice: against this day's normal, and
on the scale all stores share. Most windows of a day are normal, so the median and the MAD of the
levels of windows of the case's length spread over its day describe normal there, however noisy
the store: the share of that normal (a normal fit) below the level is the first; how far the
level is past `ABNORMAL` (a logistic of width `WIDTH`) the second; the confidence is their
geometric mean, so either alone can make it low (a noisy day where everything scores high; a
quiet day whose best is still weak). Principles: the families' own baselines, the robust null.
Constants: `ABNORMAL`, `STAY`, `CLEAR` and `WIDTH` were fitted on two real days (Train Ticket 2023-01-30,
Online Boutique 2022-08-22) and checked on the third (Train Ticket 2023-01-29 morning) and the
demo's simulated day; `STEP`, `LENGTH`, `REFERENCES`, `FLOOR` were chosen on the demo's day.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import multiprocessing
import os
import statistics
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cache, partial
from itertools import groupby
from pathlib import Path

import duckdb
from scipy.stats import norm

from common.tasks import TASK_SECONDS, Behind, run_tasks
from etl import store
from etl.store import connect

from .evidence import Window, store_file
from .ranker import Candidate, rank_window

STEP = dt.timedelta(minutes=5)  # the scan's stride
LENGTH = dt.timedelta(minutes=10)  # the scan's windows: a fault shows in a few minutes' median
ABNORMAL = 0.6  # a window whose top candidate scores this much is abnormal
STAY = 0.4  # an incident runs on over its culprit's windows that score this much
WIDTH = 0.1  # of the logistic that says how far a level is past ABNORMAL
CLEAR = 0.45  # below this confidence an answer says "no clear root cause"
REFERENCES = 12  # windows of a case's length, spread over its day, that describe normal
SPACING = dt.timedelta(hours=2)  # between a day's reference windows
MIN_REFERENCES = 4  # fewer of a day's windows in the store, and they are spread over the store instead
FLOOR = 0.05  # the least spread of normal levels: a store whose windows all score alike is not infinitely sure
DAY = dt.timedelta(hours=24)
CANDIDATES = 5  # a window's candidates: a digest's, and those whose slow links can tell its level
ROUND = dt.timedelta(minutes=5)  # reference windows' lengths, so that cases of about one length share them


@dataclass(frozen=True)
class Level:
    window: Window
    score: float | None  # None: no data in the window (a gap in collection says nothing of the system)
    component: str | None
    unit: str | None = None  # the component's service where it is a pod: one culprit across windows


@dataclass
class Normal:
    median: float
    spread: float

    @classmethod
    def of(cls, scores: list[float]) -> "Normal | None":
        if len(scores) < 3:
            return None
        median = statistics.median(scores)
        mad = statistics.median(abs(s - median) for s in scores)
        return cls(median, max(1.4826 * mad, FLOOR))

    def z(self, score: float) -> float:
        return (score - self.median) / self.spread

    def below(self, score: float) -> float:
        """The share of normal windows that score below `score`, from the normal fit."""
        return float(norm.cdf(self.z(score)))

    def confidence(self, score: float) -> float:
        """That `score` stands out from this normal and past ABNORMAL (their geometric mean)."""
        return round(math.sqrt(self.below(score) / (1 + math.exp(-(score - ABNORMAL) / WIDTH))), 3)


def clear(confidence: float | None) -> bool:
    """Whether an answer of this confidence names a clear root cause (unknown counts as clear)."""
    return confidence is None or confidence >= CLEAR


@dataclass
class Incident:
    start: dt.datetime
    end: dt.datetime
    score: float  # the strongest window's level
    confidence: float  # of its strongest window, against the scan's normal windows
    peak: Window  # its strongest window, which its question asks about
    components: list[str] = field(default_factory=list)  # the windows' top candidates, most frequent first


def alarm(ranked: list[Candidate]) -> float:
    """How abnormal a window is, from its top candidate: its score, or the anomaly of a slow link at either of
    its ends before the link is shared out between them (a link slow between two otherwise healthy ends is an
    incident still: the challenge's network faults are a link's, source -> destination)."""
    top = ranked[0].component
    return max([ranked[0].score] + [it.score for c in ranked for it in c.found
                                    if it.signal == "link" and top in (it.component, it.peer)])


def level(con: duckdb.DuckDBPyConnection, w: Window) -> Level:
    """The level of the window a question from w.start to w.end asks about (`Window.around`: its last minute is
    the one after it), so that an incident's peak names what its question will be answered from."""
    read = Window.around(w.start, w.end)
    if con.execute("select 1 from metric_points where ts >= ? and ts <= ? limit 1", [read.start, read.end]).fetchone() is None:
        return Level(w, None, None)
    ranking = rank_window(con, read, limit=CANDIDATES)
    ranked = ranking.candidates
    if not ranked:
        return Level(w, 0.0, None)
    top = ranked[0].component
    return Level(w, alarm(ranked), top, ranking.service_of.get(top, top))


def reach(w: Window) -> tuple[dt.datetime, dt.datetime]:
    """What a window's ranking and confidence read: its UTC day's reference windows, and a day either side, as far
    as their baselines and a day's routine reach."""
    day = w.start.replace(hour=0, minute=0, second=0, microsecond=0)
    return day - DAY, max(day + 2 * DAY, w.end + DAY)


def span(con: duckdb.DuckDBPyConnection) -> tuple[dt.datetime, dt.datetime] | None:
    lo, hi = con.execute("select min(ts), max(ts) from metric_points").fetchone()
    return (lo, hi) if lo else None


def references(con: duckdb.DuckDBPyConnection, w: Window) -> list[Window]:
    """Windows of w's length (rounded to `ROUND`) spread over w's UTC day, none touching w: one every `SPACING` from
    the day's midnight, within the store, so that the cases of one day and length share them. A store that holds
    less of the day than `MIN_REFERENCES` of them: as many windows of the length as fit in it, evenly."""
    known = span(con)
    if known is None:
        return []
    length = max(ROUND, (w.end - w.start + ROUND / 2) // ROUND * ROUND)
    day = w.start.replace(hour=0, minute=0, second=0, microsecond=0)
    lo, hi = max(known[0], day), min(known[1], day + DAY) - length
    starts = [day + SPACING * k for k in range(REFERENCES) if lo <= day + SPACING * k <= hi]
    if len(starts) < MIN_REFERENCES:
        lo, hi = known[0], known[1] - length
        gap = max((hi - lo) / REFERENCES, dt.timedelta(minutes=1))
        starts = [lo + gap * i for i in range(REFERENCES) if lo + gap * i <= hi]
    return [Window(s, s + length) for s in starts if s + length < w.start - STEP or s > w.end + STEP]


_seen: dict[tuple, Level] = {}  # levels of reference windows, per store file and window


@cache
def code() -> str:
    """What ranks a level: the evidence families' and the ranker's code (this package). Kept levels name it, so that
    another version of rcalab does not read the levels this one ranked."""
    digest = hashlib.sha1()
    for path in sorted(Path(__file__).parent.rglob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def forget() -> None:
    """Drop the levels this process keeps (a benchmark that times reads as a new process meets them)."""
    _seen.clear()


def normal_around(con: duckdb.DuckDBPyConnection, w: Window) -> Normal | None:
    """The normal levels of w's day: its reference windows' levels, ranked once per store, day and length and kept
    for every process beside the store's shards (`_kept`), until a shard they read changes."""
    name = store_file(con)
    refs = references(con, w)
    kept = _kept(con, name, w, refs)
    scores = []
    for ref in refs:
        key = (name, ref)
        if key not in _seen:
            _seen[key] = Level(ref, kept[ref.start], None) if ref.start in kept else level(con, ref)
        if _seen[key].score is not None:
            scores.append(_seen[key].score)
    _keep(con, name, w, refs, kept)
    return Normal.of(scores)


def _cache_file(con: duckdb.DuckDBPyConnection, name: str, w: Window, refs: list[Window]) -> Path | None:
    """Where the levels of w's day and length are kept: a file beside the store's shards named by the code that ranks
    them and the builds of the shards their windows read (so that another version of rcalab, a day reloaded, or a
    neighbour's, leaves the old file unread); None for a store without shards."""
    if not refs:
        return None
    lo, hi = refs[0].start - DAY, refs[-1].end + DAY
    builds = [b for b, in con.execute("select build from shards where hi >= ? and lo <= ? order by build",
                                      [lo, hi]).fetchall()]
    if not builds:
        return None
    minutes = int((refs[0].end - refs[0].start).total_seconds() // 60)
    key = hashlib.sha1(",".join([code(), *map(str, builds)]).encode()).hexdigest()[:12]
    return store.cache_dir(name) / f"levels-{refs[0].start:%Y-%m-%d}-{minutes}m-{key}.json"


def _kept(con, name: str, w: Window, refs: list[Window]) -> dict[dt.datetime, float | None]:
    path = _cache_file(con, name, w, refs)
    try:
        return {dt.datetime.fromisoformat(k): v for k, v in json.loads(path.read_text()).items()} if path else {}
    except (OSError, ValueError):
        return {}


def _keep(con, name: str, w: Window, refs: list[Window], kept: dict) -> None:
    """Keep the levels of w's reference windows for other processes, where the store's folder may be written (a
    read-only store is read all the same), in place of those of the same day and length that another code or
    other shards ranked."""
    path = _cache_file(con, name, w, refs)
    levels = {**{k.isoformat(): v for k, v in kept.items()},
              **{ref.start.isoformat(): _seen[(name, ref)].score for ref in refs if (name, ref) in _seen}}
    if path is None or levels.keys() <= {k.isoformat() for k in kept}:
        return
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(exist_ok=True)
        tmp.write_text(json.dumps(levels))
        os.replace(tmp, path)
        for stale in path.parent.glob(f"{path.name.rsplit('-', 1)[0]}-*.json"):
            if stale != path:
                stale.unlink(missing_ok=True)
    except OSError:
        tmp.unlink(missing_ok=True)


def confidence(con: duckdb.DuckDBPyConnection, w: Window, score: float) -> float | None:
    """How sure it is that the top candidate stands out (0-1): against the normal windows of the same length on
    the same day, and past ABNORMAL. None where the store holds too few windows to tell."""
    normal = normal_around(con, w)
    return normal.confidence(score) if normal else None


def windows(lo: dt.datetime, hi: dt.datetime) -> list[Window]:
    """The scan's windows from lo to hi: LENGTH long, one every STEP."""
    out = []
    at = lo.replace(second=0, microsecond=0)
    while at < hi:
        out.append(Window(at, min(at + LENGTH, hi)))
        at += STEP
    return out


def scan(con: duckdb.DuckDBPyConnection, lo: dt.datetime, hi: dt.datetime, progress=lambda done, total: None
         ) -> list[Level]:
    """The level of every window from lo to hi."""
    return levels_of(con, windows(lo, hi), progress)


def levels_of(con: duckdb.DuckDBPyConnection, todo: list[Window], progress=lambda done, total: None,
              cores: int | None = None) -> list[Level]:
    """The levels of these windows, a window on each core, each query on one (a window's queries are small, and
    DuckDB's own workers on them only contend with the other windows'). A store file opened read-only is read in
    helper processes, a run of windows at a time (`CHUNKS` a core): of 10,000 pods, half a window's time is the
    ranker's Python, which threads of one process take turns at (a scan of 48 windows: 59 s in threads, 46 s in two
    processes). Another store is read in threads of this process: their queries let go of Python's lock."""
    cores = cores or os.cpu_count() or 1
    (db, shared), = con.execute("select path, readonly from duckdb_databases() "
                                "where database_name = current_database()").fetchall()
    if cores > 1 and len(todo) > cores and db and shared and not multiprocessing.current_process().daemon:
        return _in_helpers(db, todo, progress, cores)
    cursors = threading.local()
    lo, hi = (reach(todo[0])[0], reach(todo[-1])[1]) if todo else (None, None)

    def one(w: Window) -> Level:
        if not hasattr(cursors, "con"):
            cursors.con = store.cursor(con, lo, hi)
        return level(cursors.con, w)

    levels = []
    threads = store.threads(con)
    con.execute("set threads = 1")
    try:
        with ThreadPoolExecutor(max_workers=cores) as pool:
            for lv in pool.map(one, todo):
                levels.append(lv)
                progress(len(levels), len(todo))
    finally:
        con.execute(f"set threads = {threads}")
    return levels


CHUNKS = 4  # runs of windows a helper process gets: its windows of an hour share what it read for the hour


def _in_helpers(db: str, todo: list[Window], progress, cores: int) -> list[Level]:
    size = math.ceil(len(todo) / (cores * CHUNKS))
    with Behind(processes=cores) as helpers:
        for i in range(0, len(todo), size):
            helpers.put(_levels_from, db, todo[i:i + size])
            progress(sum(map(len, helpers.results)), len(todo))
    progress(len(todo), len(todo))
    return [lv for run in helpers.results for lv in run]


def _levels_from(db: str, todo: list[Window]) -> list[Level]:
    """A task of `scan_on` or of `levels_of`: the levels of a run of windows, the store opened read-only where the
    task runs."""
    con = connect(db, read_only=True)
    try:
        return levels_of(con, todo, cores=1)
    finally:
        con.close()


def scan_on(client, db, lo: dt.datetime, hi: dt.datetime, progress=lambda done, total: None,
            timeout: float = TASK_SECONDS) -> list[Level]:
    """`scan` with each day's windows a task on a Dask cluster (`client`, a `distributed.Client`): the store must
    be a file every worker reaches. A task whose worker dies is run again by the scheduler elsewhere; past
    `timeout` seconds a day the scan ends with an error."""
    days = [list(day) for _, day in groupby(windows(lo, hi), key=lambda w: w.start.date())]
    done: dict[int, list[Level]] = {}
    for i, levels in run_tasks(partial(_levels_from, str(db)), days, client, timeout):
        done[i] = levels
        progress(sum(len(days[i]) for i in done), sum(len(d) for d in days))
    return [lv for i in range(len(days)) for lv in done[i]]


def incidents(levels: list[Level], abnormal: float = ABNORMAL, stay: float = STAY) -> list[Incident]:
    """Runs of windows with the same culprit at `stay` or more, those of them that reach `abnormal` (hysteresis)."""
    normal = Normal.of([lv.score for lv in levels if lv.score is not None])
    out = []
    for unit, run in groupby(levels, key=lambda lv: lv.unit if lv.score is not None and lv.score >= stay else None):
        run = list(run)
        peak = max(run, key=lambda lv: lv.score or 0.0)  # the first of equal windows
        if unit is None or peak.score < abnormal:
            continue
        names = [lv.component for lv in run if lv.component]
        out.append(Incident(run[0].window.start, run[-1].window.end, round(peak.score, 3),
                            normal.confidence(peak.score) if normal else 1.0, peak.window,
                            sorted(set(names), key=lambda n: (-names.count(n), n))))
    return out


def as_questions(found: list[Incident]) -> list[dict]:
    """Incidents as the challenge's `input.json` entries, each asking about its strongest window; the whole run
    goes beside it (`incident`)."""
    return [{"Anomaly Description": f"The system experienced an anomaly from {i.peak.start:%Y-%m-%dT%H:%M:%SZ} to "
                                    f"{i.peak.end:%Y-%m-%dT%H:%M:%SZ}. Please infer the possible cause.",
             "uuid": f"detected-{i.start:%Y%m%d-%H%M}", "incident": f"{i.start:%Y-%m-%dT%H:%M:%SZ}/{i.end:%Y-%m-%dT%H:%M:%SZ}",
             "components": i.components[:3], "score": i.score, "confidence": i.confidence} for i in found]
