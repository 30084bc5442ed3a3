"""What the terminal shows: lines and tables in which dump text is shown, never obeyed; one line for an error;
a spinner while long work runs; the tables of the commands that print one (incidents, judged answers)."""

from __future__ import annotations

import functools
import logging
import tempfile
import traceback
from contextlib import contextmanager

import click
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from common.errors import RcalabError, shown
from rcalab.bench import cell

console = Console(stderr=True)


class _Shown(logging.Formatter):
    """A warning names a dump's file: shown, never obeyed, as every other console line."""

    def format(self, record: logging.LogRecord) -> str:
        return shown(super().format(record))


logging.lastResort.setFormatter(_Shown())  # warnings reach stderr through it where no handler is set


def echo(text: str, err: bool = False) -> None:
    """A line for the terminal: dump text in it is shown, never obeyed."""
    click.echo(shown(text), err=err)


def show(table: Table) -> None:
    """A table on stdout whose names and headers wrap, whole, where the terminal is narrow (never cut with …)."""
    for column in table.columns:
        column.overflow = "fold"
    Console().print(table)


def failure(message: str, exit_code: int = 1) -> click.ClickException:
    error = click.ClickException(shown(message))
    error.exit_code = exit_code
    return error


def reports_errors(command):
    """Turn rcalab's own errors into one line on stderr and their exit status; a file system or store that cannot
    be written says so, a store that fails a read is damaged; anything else is a bug: one line naming the file
    that holds its traceback, to report with."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        import duckdb

        try:
            return command(*args, **kwargs)
        except RcalabError as e:
            raise failure(str(e), e.exit_code) from None
        except (KeyboardInterrupt, duckdb.InterruptException):  # DuckDB turns a Ctrl-C inside a query into the latter
            echo("Interrupted: what was done is kept (each file and each answer is whole); "
                 "run the same command again to go on.", err=True)
            raise SystemExit(130) from None
        except OSError as e:  # the file system refused: full, read-only, not allowed
            raise failure(f"{e.filename or 'an output'}: {e.strerror or e}; what was done before is kept; "
                          "run the same command again once that is mended") from None
        except duckdb.Error as e:
            from etl.store import unwritable

            first = str(e).splitlines()[0]
            if unwritable(e):
                raise failure(f"the store cannot be written ({first}); what was committed before is kept; run the "
                              "same command again once that is mended") from None
            if isinstance(e, (duckdb.IOException, duckdb.SerializationException, duckdb.InternalException)):
                raise failure(f"a store is damaged: {first}; rebuild it with 'rcalab etl DUMP --db NEW'") from None
            raise bug(e) from None
        except Exception as e:
            raise bug(e) from None

    return wrapper


def bug(e: Exception) -> click.ClickException:
    """A bug: the user gets one line and the file that holds the traceback."""
    with tempfile.NamedTemporaryFile("w", prefix="rcalab-error-", suffix=".txt", delete=False) as f:
        traceback.print_exc(file=f)
    return failure(f"unexpected error ({type(e).__name__}: {str(e)[:200]}); please report it with {f.name}")


@contextmanager
def working(description: str, total: int | None = None):
    """A spinner on stderr while long work runs, or a bar of `total` steps; yields a function that names the step
    now done (and advances the bar)."""
    with Progress(console=console, transient=True, disable=not console.is_terminal) as bar:
        task = bar.add_task(description, total=total)
        yield lambda what: bar.update(task, description=cell(what), advance=1 if total else None)


def incidents_table(found: list, given: list, lo, hi) -> Table:
    """The incidents found, each with the given cases it overlaps (where some were given), then the given cases no
    incident overlaps, as missed."""
    def overlap(a, b) -> bool:
        return a.start <= b.end and b.start <= a.end

    table = Table(title=f"incidents {lo:%Y-%m-%d %H:%M} to {hi:%Y-%m-%d %H:%M} UTC")
    for column in ("window", "asks", "score", "confidence", "components") + (("given",) if given else ()):
        table.add_column(column)
    for i in found:
        table.add_row(f"{i.start:%m-%d %H:%M}-{i.end:%H:%M}", f"{i.peak.start:%H:%M}-{i.peak.end:%H:%M}",
                      f"{i.score:.2f}", f"{i.confidence:.2f}", cell(", ".join(i.components[:3])),
                      *([cell(", ".join(q.uuid for q in given if overlap(q, i)) or "none")] if given else []))
    for q in given:
        if lo <= q.end and q.start <= hi and not any(overlap(q, i) for i in found):
            table.add_row(f"{q.start:%m-%d %H:%M}-{q.end:%H:%M}", "-", "-", "-", "missed", cell(q.uuid))
    return table


def judged_table(results: dict, rules: str, grounded: bool) -> Table:
    """The judge's measures, a column per answers file (names stay whole)."""
    table = Table(title=f"rcalab judge (rules: {rules})")
    table.add_column("measure")
    for name in results:
        table.add_column(cell(name), justify="right")
    for k in (("A@1", "A@3", "object@1", "cause@1", "cases", "answered") if rules == "cloudopsbench" else
              ("final", "LA", "TA", "efficiency", "explainability", "APL", "cases", "answered")):
        table.add_row(k, *[str(r["summary"][k]) for r in results.values()])
    if grounded:
        table.add_row("grounded", *[f"{r['grounding']['grounded']} of {r['grounding']['walked']}"
                                    for r in results.values()])
        table.add_row("held", *[str(r["grounding"]["held"]) for r in results.values()])
    return table


def judged_lines(results: dict) -> list[tuple[str, bool]]:
    """Below the judge's table: each answers file's transcript figures (beside the Nezha paper's where a real day
    was judged) on stdout, its first problems on stderr."""
    lines = []
    for name, r in results.items():
        t = r["transcripts"]
        if t:
            lines.append((f"{name}: " + ", ".join(f"{k} {v}" for k, v in t.items() if k != "nezha_paper"), False))
            if "nezha_paper" in t:
                paper = t["nezha_paper"]
                lines.append((f"  beside the Nezha paper on {paper['system']}: AS@1 {paper['AS@1']:.2%}, "
                              f"AS@3 {paper['AS@3']:.2%}", False))
        lines += [(f"  {p}", True) for p in r["problems"][:20]]
    return lines


def loaded_lines(report, db) -> list[tuple[str, bool]]:
    """What a night's load did: the shards it mended, the files loaded, unchanged, skipped, failed and gone; the
    features computed; the rows left out and the files that failed, on stderr."""
    lines = [(f"mended: {line}", True) for line in report.mended]
    lines += [(f"{report.format}: loaded {len(report.loaded)} files ({report.rows:,} rows), {report.unchanged} "
              f"unchanged, {report.skipped} skipped, {len(report.failed)} failed, {report.removed} gone from the dump "
              f"(rows dropped) -> {db}", False)]
    if report.feature_rows:
        lines.append(("features: " + ", ".join(f"{k} {v:,}" for k, v in report.feature_rows.items()), False))
    if report.left_out:
        lines.append((f"left out rows no system can produce (NaN, negative or day-long spans, ...) from "
                      f"{len(report.left_out)} files, e.g. {report.left_out[0]}; the manifest says how many of each, "
                      "file by file", True))
    return lines + [(f"failed: {path}: {reason}", True) for path, reason in report.failed]


def rows_table(names: list[str], rows: list[tuple]) -> Table:
    """A query's rows under its column names."""
    table = Table()
    for name in names:
        table.add_column(cell(name))
    for row in rows:
        table.add_row(*(cell("" if v is None else v) for v in row))
    return table
