"""Write a labelled dump of a described system, in its layout or as OTLP: day folders, ground truth and questions."""

from __future__ import annotations

import datetime as dt
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from common.errors import OutputError, RcalabError
from common.tasks import Behind

from .cluster import write_cluster
from .logs import hour_logs
from .metrics import apm_tables, infra_tables
from .noise import add_noise
from .schedule import Case, load_schedule, random_cases, write_case_files
from .system import System, load
from .topology import Topology
from .traces import simulate_hour
from .workload import CST, MINUTES, Day, build_day, expected_latency



@dataclass
class Summary:
    days: list[str] = field(default_factory=list)
    files: int = 0
    bytes: int = 0
    spans: int = 0
    log_lines: int = 0
    metric_rows: int = 0


def case_days(cases: list[Case]) -> list[dt.date]:
    """The CST days the case windows touch, in order."""
    days = set()
    for case in cases:
        day = case.start.astimezone(CST).date()
        while day <= case.end.astimezone(CST).date():
            days.add(day)
            day += dt.timedelta(days=1)
    return sorted(days)


def simulate(out: Path, cases: list[Case], topo: Topology, *, scale: float = 0.01, seed: int = 0,
             progress: Callable[[str], None] | None = None, hours: int | None = None, cluster: bool = False) -> Summary:
    """Simulate every CST day the cases touch and write it under `out`; same seed, same bytes. With `hours`, a
    day's files hold only the hours that end with the hour its own last case ends in (the same bytes as those hours
    of the whole day's); with `cluster`, what Kubernetes shows of them too (`testbed.cluster`)."""
    out = Path(out)
    _check_writable(out)
    summary = Summary()
    for date in case_days(cases):
        day = build_day(date, topo, seed)
        add_noise(day, np.random.default_rng([seed, date.toordinal(), 5]))
        ends = []  # the minutes this day's own cases end in
        for case in cases:
            lo, hi = day.minute_of(case.start), day.minute_of(case.end + dt.timedelta(seconds=59))
            if hi > lo:
                case.fault.apply(day, case.target, slice(lo, hi), np.random.default_rng([seed, hash_uuid(case.uuid)]))
                ends.append(min(day.minute_of(case.end), MINUTES - 1))
        if hours:
            last = max(ends) // 60 + 1
            day.written = slice(max(0, last - hours) * 60, last * 60)
        _write_day(day, out / date.isoformat(), scale, seed, summary, progress)
        if cluster:
            written = write_cluster(day, out / date.isoformat())
            summary.files += 1
            summary.bytes += written.stat().st_size
        summary.days.append(date.isoformat())
    write_case_files(cases, out, seed)
    return summary


def simulate_system(out: Path, name_or_path: str, *, schedule: Path | None = None, cases: int | None = None,
                    limit: int | None = None, scale: float = 0.01, seed: int = 0, fmt: str | None = None,
                    hours: int | None = None, cluster: bool = False,
                    progress: Callable[[str], None] = lambda what: None) -> tuple[System, list[Case], Summary]:
    """Simulate a shipped or described system's cases (a schedule's, or `cases` random ones) and write them to
    `out` in the system's layout, or as OTLP (`fmt`), with the cluster's state where `cluster`; `progress` hears of
    each of the 25 steps of a day."""
    if (schedule is None) == (cases is None):
        raise RcalabError("give either --schedule FILE or --cases N")
    system = load(name_or_path)
    fmt = fmt or system.layout
    if fmt == "challenge2025" and system.layout != "challenge2025":
        raise RcalabError(f"the challenge's layout holds HipsterShop's dumps; write {system.name} with --format otlp")
    topo = Topology.build(seed, system)
    todo = load_schedule(schedule, topo, limit) if schedule else random_cases(cases, topo, seed)
    if fmt != "otlp":
        return system, todo, simulate(out, todo, topo, scale=scale, seed=seed, progress=progress, hours=hours,
                                      cluster=cluster)
    from .otlp import write_otlp

    with tempfile.TemporaryDirectory() as tmp:
        summary = simulate(Path(tmp) / "dump", todo, topo, scale=scale, seed=seed, progress=progress, hours=hours,
                           cluster=cluster)
        progress("writing OTLP")
        summary.files = write_otlp(Path(tmp) / "dump", out)
    summary.bytes = sum(p.stat().st_size for p in Path(out).rglob("*") if p.is_file())
    return system, todo, summary


def hash_uuid(uuid: str) -> int:
    return int.from_bytes(uuid.encode()[:16].ljust(16, b"\0"), "little")


def _write_day(day: Day, folder: Path, scale: float, seed: int, summary: Summary, progress) -> None:
    date = day.date.isoformat()
    system = day.topo.system
    rng = np.random.default_rng([seed, day.date.toordinal(), 6])
    expected = expected_latency(day)
    entry = [day.topo.index(p) for p in day.topo.pods_of(system.entry)]
    entry_err = expected[1][:, entry]
    untraced = (system.requests_per_minute - system.traces_per_minute) * scale
    # Each table in a file of its own and all of them in the namespace's, never all held at once.
    with _Appended(folder / "metric-parquet" / "apm" / f"pod_ns_{system.namespace}_{date}.parquet", summary) as every:
        for name, table in apm_tables(day, expected, rng):
            kind = "service" if name in system.components else "pod"
            _save(table, folder / "metric-parquet" / "apm" / kind / f"{kind}_{name}_{date}.parquet", summary)
            every.add(table)
    for rel, table in infra_tables(day):
        _save(table, folder / "metric-parquet" / f"{rel}_{date}.parquet", summary)
        summary.metric_rows += table.num_rows
    if progress:
        progress(f"{date} metrics")
    # An hour's files are written in a thread of their own while the next hour is simulated (pyarrow lets go of
    # Python's lock): at most one hour waits to be written.
    with Behind() as writer:
        for hour in range(day.written.start // 60, day.written.stop // 60):
            hour_rng = np.random.default_rng([seed, day.date.toordinal(), 7, hour])
            traffic = simulate_hour(day, hour, scale, hour_rng)
            logs = hour_logs(day, hour, traffic, hour_rng, untraced, entry_err).to_arrow()
            logs = logs.cast(pa.schema([(c, pa.string()) for c in logs.column_names]))
            stem = f"{date}_{hour:02d}-00-00.parquet"
            writer.put(_save_hour, {
                folder / "trace-parquet" / f"trace_jaeger-span_{stem}": traffic.spans,
                folder / "log-parquet" / f"log_filebeat-server_{stem}": logs}, summary)
            summary.spans += traffic.spans.num_rows
            summary.log_lines += logs.num_rows
            if progress:
                progress(f"{date} {hour:02d}:00")


def _save_hour(tables: dict[Path, pa.Table], summary: Summary) -> None:
    for path, table in tables.items():
        _save(table, path, summary)


def _save(table: pa.Table, path: Path, summary: Summary) -> None:
    with _Appended(path, summary) as file:
        file.add(table)


class _Appended:
    """A parquet file written a row group at a time from the tables added, atomically: an interrupted run leaves no
    half-written file."""

    ROWS = 2**20  # a row group's rows, as `pq.write_table` groups them

    def __init__(self, path: Path, summary: Summary):
        self.path, self.tmp, self.summary = path, path.with_name(path.name + ".tmp"), summary
        self.tables: list[pa.Table] = []
        self.rows = 0  # of the tables not yet written
        self.writer: pq.ParquetWriter | None = None

    def add(self, table: pa.Table) -> None:
        self.tables.append(table)
        self.rows += table.num_rows
        if self.rows >= self.ROWS:
            self._flush()

    def _flush(self) -> None:
        if not self.tables:
            return
        if self.writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.writer = pq.ParquetWriter(self.tmp, self.tables[0].schema, compression="snappy")
        self.writer.write_table(pa.concat_tables(self.tables), row_group_size=self.ROWS)
        self.tables, self.rows = [], 0

    def __enter__(self) -> "_Appended":
        return self

    def __exit__(self, kind, *_) -> None:
        if kind is None:
            self._flush()
        if self.writer is not None:
            self.writer.close()
            if kind is None:
                os.replace(self.tmp, self.path)
                self.summary.files += 1
                self.summary.bytes += self.path.stat().st_size
            else:
                self.tmp.unlink(missing_ok=True)


def _check_writable(out: Path) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".rcalab-write-check"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise OutputError(f"cannot write to {out}: {e.strerror or e}") from None
