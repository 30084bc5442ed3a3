"""The benchmarks: which sets each measures (every shipped system, a replay of the challenge's phase one, the real
days), the library functions that measure them, and the tables that show their results. `rcalab bench` calls
`measure` and prints what it returns."""

from __future__ import annotations

import itertools
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from common.errors import shown

BENCHES = ("testbed", "etl", "scale", "store", "wide", "load", "rank", "systems", "cluster", "diagnose", "detect")
PAGE = Path("docs/benchmarks.md")  # each bench rewrites its own section


@dataclass
class Settings:
    """What `rcalab bench` was asked: where results go and what to replay."""
    out: Path
    scale: float | None = None
    nezha: Path | None = None
    sample: int = 2
    schedule: Path | None = None  # the challenge's phase one, replayed in HipsterShop
    real: list[Path] = field(default_factory=list)
    random: int = 10  # cases of each fault type a system applies, drawn at random (systems: systems drawn)
    systems: list[str] = field(default_factory=list)
    seed: int = 1  # systems: which systems are drawn
    cases: Path | None = None  # cluster: Cloud-OpsBench's case folders
    workers: int = 1  # rank, systems, detect: stores measured at once, on a local Dask cluster
    stores: Path | None = None  # rank, systems, detect: where labelled stores are kept, to be used again


def cell(text) -> str:
    """Dump text for a rich table or progress line: shown, never obeyed, and no markup."""
    return escape(shown(text))


def figure(figures: dict, key: str) -> str:
    """A figure in a table: blank where the run does not measure it, "-" where the set cannot show it (None)."""
    if key not in figures:
        return ""
    return "-" if figures[key] is None else f"{figures[key]:g}"


def measure(what: str, settings: Settings, progress=lambda what: None) -> tuple[dict, list[Table]]:
    """Run one benchmark; its results and their tables."""
    return MEASURES[what](settings, progress)


def run(what: str, settings: Settings, page: Path = PAGE, progress=lambda what: None) -> list[Table]:
    """Run one benchmark, save its results as OUT/WHAT.json and its tables in its section of `page`."""
    result, tables = measure(what, settings, progress)
    settings.out.mkdir(parents=True, exist_ok=True)
    (settings.out / f"{what}.json").write_text(json.dumps(result, indent=2) + "\n")
    write_page(what, result, tables, "rcalab " + " ".join(sys.argv[1:]), page)
    return tables


def _replays(settings: Settings, per_type: int, limit: int | None = None, prefix: str = "random",
             kubernetes: bool = False) -> dict:
    """A random schedule of each system (saved beside the results), and for HipsterShop the phase-one replay; with
    `kubernetes`, also a random schedule of the cluster's own faults on each system, simulated with its state."""
    from features.bench import Replay
    from testbed.bench import random_schedule
    from testbed.faults import CLUSTER

    replays = {}
    if "hipstershop" in settings.systems and settings.schedule and Path(settings.schedule).is_file():
        replays["hipstershop phase one"] = Replay(Path(settings.schedule), "hipstershop")
    if per_type:
        settings.out.mkdir(parents=True, exist_ok=True)
        for system in settings.systems:
            path = random_schedule(settings.out / f"{prefix}-{Path(system).stem}.jsonl", per_type, system=system,
                                   limit=limit)
            replays[f"{Path(system).stem} {prefix}"] = Replay(path, system)
        for system in settings.systems if kubernetes else ():
            path = random_schedule(settings.out / f"kubernetes-{prefix}-{Path(system).stem}.jsonl", per_type,
                                   system=system, limit=limit, types=list(CLUSTER))
            replays[f"{Path(system).stem} kubernetes {prefix}"] = Replay(path, system, cluster=True)
    return replays


def _rank(settings: Settings, progress) -> tuple[dict, list[Table]]:
    from features.bench import REPLAY_SCALE, run
    from judge.bench import ranked

    result = run(_replays(settings, settings.random, kubernetes=True), settings.real,
                 scale=settings.scale or REPLAY_SCALE, progress=progress, measure=ranked,
                 **_kept(settings, settings.out / "rank"))
    return result, [rank_table(result), baselines_table(result), answers_table(result),
                    missed_table(result, *RANK_MISSED)]


RANK_MISSED = ("cases not named first", "named instead: the first candidate")
SYSTEM_CASES = 5  # bench systems: cases of every fault type a drawn system applies
# bench systems' scale. A drawn system of 140 pods writes 40 MB an hour at 0.1, and its five cases of every fault type
# take 90 minutes there; at 0.02 a third of that. Its metrics, which volume leaves as they are, carry most faults:
# 25 cases of that system ranked the same at both (top-1 0.96, top-3 1.0).
SYSTEMS_SCALE = 0.02


def code() -> str:
    """A fingerprint of the code a result depends on (the stages' packages and their data): a saved result is
    reused only by the same code."""
    return _fingerprint([path for package in ("etl", "features", "testbed", "judge", "reasoner")
                         for path in _package(package)])


def store_code() -> str:
    """A fingerprint of the code a labelled store is built by: the simulator, the ETL and the floor below them
    whole (their data too), and of the features the modules the nightly job imports; not the ranking or detection
    that read the store, so that a change to them is measured on the stores kept (`--stores`)."""
    return _fingerprint([path for package in ("common", "etl", "testbed") for path in _package(package)]
                        + sorted(_imported("features.refresh")))


def _package(package: str) -> list[Path]:
    import importlib.util

    root = Path(importlib.util.find_spec(package).origin).parent
    return sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def _imported(module: str) -> set[Path]:
    """The source files of `module` and of the modules of its package that it imports, and they import."""
    import ast
    import importlib.util

    package, todo, files = module.partition(".")[0], [module], set()
    while todo:
        name = todo.pop()
        path = Path(importlib.util.find_spec(name).origin)
        if path in files:
            continue
        files.add(path)
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = importlib.util.resolve_name("." * node.level + (node.module or ""), here)
                names = [base]
                if base.partition(".")[0] == package and importlib.util.find_spec(base).submodule_search_locations:
                    names += [f"{base}.{alias.name}" for alias in node.names]  # modules, or names in `base`
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            todo += [n for n in names if n.partition(".")[0] == package and importlib.util.find_spec(n)]
    return files


def _fingerprint(paths: list[Path]) -> str:
    """A hash of files of the stages' packages, each named from the folder that holds the packages."""
    import hashlib
    import importlib.util

    base = Path(importlib.util.find_spec("common").origin).parents[1]
    digest = hashlib.sha1()
    for path in paths:
        digest.update(f"{path.relative_to(base)}\0".encode() + path.read_bytes())
    return digest.hexdigest()[:12]


def _kept(settings: Settings, keep: Path) -> dict:
    """What `features.bench.run` keeps of a bench's run: each store's result in `keep`, measured by this code, and
    with `--stores`, the stores themselves, built by this code."""
    return {"keep": keep, "code": code(), "workers": settings.workers, "stores": settings.stores,
            "built": store_code() if settings.stores else ""}


def _systems(settings: Settings, progress) -> tuple[dict, list[Table]]:
    """`bench rank` on systems nobody here chose: `random` descriptions drawn from the schema's space (seeds
    1000 x SEED + k, saved beside the results), a random schedule of each, SYSTEM_CASES cases of every fault type;
    `workers` systems at once. Each system's result is kept as it ends: a rerun by the same code measures only the
    systems it lacks."""
    from features.bench import ranking, run
    from testbed.drawn import draw
    from testbed.system import dump, load

    folder = settings.out / "systems"
    folder.mkdir(parents=True, exist_ok=True)
    systems = {}
    for seed in range(1000 * settings.seed, 1000 * settings.seed + settings.random):
        path = folder / f"drawn-{seed}.yaml"
        path.write_text(dump(draw(seed)))
        systems[path] = load(path)
    replays = _replays(Settings(settings.out, systems=[str(path) for path in systems]), SYSTEM_CASES)
    result = run(replays, [], scale=settings.scale or SYSTEMS_SCALE, progress=progress, measure=ranking,
                 **_kept(settings, folder))
    for path, system in systems.items():
        result[f"{path.stem} random"] |= {"components": len(system.components),
                                          "pods": sum(c.replicas for c in system.components.values())}
    return result, [systems_table(result), baselines_table(result), missed_table(result, *RANK_MISSED)]


def _cluster(settings: Settings, progress) -> tuple[dict, list[Table]]:
    from judge.bench import cluster

    result = cluster(Path(settings.cases), settings.out / "cluster", progress)
    return result, [cluster_table(result)]


def _diagnose(settings: Settings, progress) -> tuple[dict, list[Table]]:
    from features.bench import REPLAY_SCALE
    from judge.bench import run

    result = run(_replays(settings, settings.sample), settings.real, per_type=settings.sample,
                 scale=settings.scale or REPLAY_SCALE, progress=progress)
    return result, diagnose_tables(result)


def _detect(settings: Settings, progress) -> tuple[dict, list[Table]]:
    from features.bench import DEMO_DAY, DETECT_RANDOM, Replay, detection, folds, run

    days = {"hipstershop demo day": Replay(DEMO_DAY)} if "hipstershop" in settings.systems else {}
    if settings.random:  # half a day of each system, a random fault an hour; and of the cluster's own faults
        days |= _replays(Settings(settings.out, systems=settings.systems), DETECT_RANDOM, DETECT_RANDOM, "half day",
                         kubernetes=True)
    keep = _kept(settings, settings.out / "detect")
    result = run(days, settings.real, scale=settings.scale or 0.05, seed=7, progress=progress, measure=detection,
                 **keep)
    if "hipstershop" in settings.systems:  # the day's volume of a real system: the scan's time
        result |= run({"hipstershop demo day, full scale": Replay(DEMO_DAY)}, [], scale=1.0, seed=7,
                      progress=progress, measure=detection, **keep)
    tables = [detect_table(result), missed_table(result)]
    names = [Path(path).name for path in settings.real]
    if len(names) >= 2:
        result["leave one day out"] = folds(result, names)
        tables.append(folds_table(result["leave one day out"]))
    return result, tables


def _testbed(settings: Settings, progress) -> tuple[dict, list[Table]]:
    from testbed.bench import SIGNATURE_SCALES, fidelity, run, signatures

    result = run(scale=settings.scale or 1.0)
    result["signatures"] = {}  # in the JSON and in a table of its own
    for name, replay in _replays(settings, settings.random).items():
        for at in SIGNATURE_SCALES:
            progress(f"signatures: replaying {name} at scale {at}")
            result["signatures"][f"{name} at {at}"] = signatures(replay.schedule, at, system=replay.system)
    progress("a simulated day of each system at scale 0.01")
    result["days"] = {Path(system).stem: run(scale=0.01, system=system) for system in settings.systems}
    tables = [signature_table(result["signatures"]), measure_table("testbed", result), days_table(result["days"])]
    if "trainticket" in settings.systems and any("trainticket" in Path(p).name for p in settings.real):
        progress("fidelity: simulated Train Ticket faults against the real days'")
        result["fidelity"] = fidelity(settings.real)
        tables.append(fidelity_table(result["fidelity"]))
    return result, tables


def _scale(settings: Settings, progress) -> tuple[dict, list[Table]]:
    from features.bench import scale_run

    progress("scale: four simulated days, as etl runs them and on local clusters of 1 and 2 workers")
    result = scale_run(scale=settings.scale or 0.25)
    return result, [scale_table(result)]


def _etl(settings: Settings, progress) -> tuple[dict, list[Table]]:
    from features.bench import nightly_run

    result = nightly_run(scale=settings.scale or 1.0, nezha=settings.nezha)
    return result, [measure_table("etl", result)]


def _store(settings: Settings, progress) -> tuple[dict, list[Table]]:
    from features.bench import store_run

    result = store_run(scale=settings.scale or 0.01, progress=progress)
    return result, [store_table(result)]


def _wide(settings: Settings, progress) -> tuple[dict, list[Table]]:
    from testbed.bench import wide_run

    result = wide_run(scale=settings.scale or 0.01, progress=progress)
    widest = {k: v for k, v in result.items() if k not in ("sizes", "detect by seed")}
    return result, [rows_table(f"rcalab bench wide: the load as the cluster widens, and over a whole day (scale "
                               f"{result['scale']})",
                               result["sizes"]),
                    measure_table(f"wide: {result['services']:,} services, {result['pods']:,} pods, ranked", widest),
                    rows_table(f"rcalab bench wide: detect over {result['pods']:,} pods, three faults of each seed",
                               result["detect by seed"])]


def rows_table(title: str, rows: list[dict]) -> Table:
    """Rows of one shape, a column each of their keys (each width's simulate and load beside the floor; each seed's
    detection)."""
    table = Table(title=title)
    columns = list(rows[0])
    for col in columns:
        table.add_column(col, justify="right")
    for row in rows:
        table.add_row(*(f"{row[c]:,}" if isinstance(row[c], int) else f"{row[c]:g}" if isinstance(row[c], float)
                        else " ".join(map(str, row[c])) if isinstance(row[c], list) else str(row[c]) for c in columns))
    return table


def _load(settings: Settings, progress) -> tuple[dict, list[Table]]:
    from features.bench import run
    from judge.bench import LOAD_CASES, under_load

    replays = _replays(Settings(settings.out, systems=["hipstershop"]), 1, LOAD_CASES, "load")
    result = run(replays, [], scale=settings.scale or 0.01, progress=progress, measure=under_load)
    return result, [measure_table(f"load: {name}, diagnose against a stand-in endpoint", r)
                    for name, r in result.items()]


MEASURES = {"testbed": _testbed, "etl": _etl, "scale": _scale, "store": _store, "wide": _wide, "load": _load,
            "rank": _rank, "systems": _systems, "cluster": _cluster, "diagnose": _diagnose, "detect": _detect}


def measure_table(what: str, result: dict) -> Table:
    table = Table(title=f"rcalab bench {what}")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for key, value in result.items():
        if not isinstance(value, dict):
            table.add_row(key, f"{value:,.2f}" if isinstance(value, float) else f"{value:,}" if isinstance(value, int)
                          else str(value))
    return table


def days_table(days: dict) -> Table:
    table = Table(title="a simulated day of each system at scale 0.01, one fault")
    for col in ("system", "seconds", "peak MB", "dump MB"):
        table.add_column(col, justify="left" if col == "system" else "right")
    for system, r in days.items():
        table.add_row(system, f"{r['seconds']:.1f}", f"{r['peak_memory_mb']:,.0f}", f"{r['dump_mb']:,.1f}")
    return table


def scale_table(result: dict) -> Table:
    table = Table(title=f"rcalab bench scale: {result['days']} simulated days at scale {result['scale']} "
                        f"({result['parquet_mb']:,} MB of parquet)")
    for col in ("run", "seconds", "speed-up", "rows/s", "peak MB"):
        table.add_column(col, justify="left" if col == "run" else "right")
    for name, r in result["runs"].items():
        table.add_row(name, f"{r['seconds']:.1f}", f"{r['speed_up']:.2f}", f"{r['rows_per_s']:,}", f"{r['peak_mb']:,}")
    return table


def store_table(result: dict) -> Table:
    table = Table(title=f"rcalab bench store: {result['days']} simulated days loaded night after night into one "
                        f"store (scale {result['scale']})")
    for col in ("measure", *result["columns"]):
        table.add_column(col, justify="left" if col == "measure" else "right")
    for name, row in result["rows"].items():
        table.add_row(name, *("-" if row.get(c) is None else f"{row[c]:g}" for c in result["columns"]))
    return table


def rank_table(result: dict) -> Table:
    caption = "; ".join(f"{name}: digest {r['digest_seconds_mean']:.3f} s a case, {r['digest_seconds_max']:.3f} s at most"
                        for name, r in result.items())
    table = Table(title="rcalab bench rank", caption=caption)
    for col in ("set", "fault type", "cases", "top-1", "top-3", "top-1 exact"):
        table.add_column(col, justify="left" if col in ("set", "fault type") else "right")
    for name, r in result.items():
        for fault, t in r["per_type"].items():
            table.add_row(cell(name), cell(fault), str(t["cases"]), f"{t['top1']:.2f}", f"{t['top3']:.2f}",
                          f"{t['top1_exact']:.2f}")
        table.add_row(f"[bold]{cell(name)}[/]", "[bold]all[/]", str(r["cases"]), f"[bold]{r['top1']:.3f}[/]",
                      f"[bold]{r['top3']:.3f}[/]", f"[bold]{r['top1_exact']:.3f}[/]", end_section=True)
    return table


def systems_table(result: dict) -> Table:
    """A row a drawn system, its fault types ranked below 1.0 named, and all systems' cases pooled."""
    table = Table(title="rcalab bench systems: drawn systems, every fault type each applies")
    for col in ("system", "components", "pods", "cases", "top-1", "top-3", "top-1 exact", "types below 1.0 at top-1"):
        table.add_column(col, justify="left" if col in ("system", "types below 1.0 at top-1") else "right")
    for name, r in result.items():
        weak = ", ".join(f"{fault} {t['top1']:.1f}" for fault, t in r["per_type"].items() if t["top1"] < 1)
        table.add_row(cell(name), str(r["components"]), str(r["pods"]), str(r["cases"]), f"{r['top1']:.3f}",
                      f"{r['top3']:.3f}", f"{r['top1_exact']:.3f}", cell(weak))
    cases = sum(r["cases"] for r in result.values())
    pooled = {k: sum(r[k] * r["cases"] for r in result.values()) / max(cases, 1)
              for k in ("top1", "top3", "top1_exact")}
    table.add_row("[bold]all[/]", "", "", str(cases), *(f"[bold]{pooled[k]:.3f}[/]" for k in pooled), "",
                  end_section=True)
    return table


def cluster_table(result: dict) -> Table:
    table = Table(title=f"the cluster's state: Cloud-OpsBench's {result['cases']} development cases, the rank agent",
                  caption=f"the llm agent asks its model only where findings tie at the top "
                          f"({result.get('model_asked', 0)} of these cases; the others it answers as rank does); load "
                          f"{result['load_seconds_per_case']:.2f} s and answer {result['answer_seconds_per_case']:.3f} "
                          f"s a case; chance: the commonest label, A@1 {result['constant']:.3f}; the benchmark's best "
                          f"LLM agent: A@1 {result['best_agent']:.2f}")
    for col in ("category", "cases", "A@1", "A@3"):
        table.add_column(col, justify="left" if col == "category" else "right")
    for category, r in result["by_category"].items():
        table.add_row(category, str(r["cases"]), f"{r['A@1']:.2f}", f"{r['A@3']:.2f}")
    table.add_row("[bold]all[/]", str(result["cases"]), f"[bold]{result['A@1']:.3f}[/]",
                  f"[bold]{result['A@3']:.3f}[/]", end_section=True)
    table.add_row("object@1, cause@1", "", f"{result['object@1']:.3f}", f"{result['cause@1']:.3f}")
    return table


def baselines_table(result: dict) -> Table:
    table = Table(title="beside RCAEval's metric baselines and chance (services; a pod counts as its service)")
    for col in ("set", "method", "AC@1", "AC@3", "Avg@5"):
        table.add_column(col, justify="left" if col in ("set", "method") else "right")
    for name, r in result.items():
        for i, (who, figures) in enumerate(r["AC"].items()):
            table.add_row(cell(name), cell(who), *(f"{figures[k]:.3f}" for k in ("AC@1", "AC@3", "Avg@5")),
                          end_section=i == len(r["AC"]) - 1)
    return table


def answers_table(result: dict) -> Table:
    table = Table(title="the rank agent's answers to every case, judged (explainability where the truth names "
                        "key observations)")
    columns = ("final", "LA", "TA", "explainability", "APL")
    for col in ("set", *columns):
        table.add_column(col, justify="left" if col == "set" else "right")
    for name, r in result.items():
        judged = r["rank agent"]
        table.add_row(cell(name), *(figure(judged, c) for c in columns))
    return table


def diagnose_tables(result: dict) -> list[Table]:
    """A table per set (the agents side by side on the same cases), so that each fits an 80-column terminal."""
    sets = list(dict.fromkeys(name.rsplit("/", 1)[0] for name in result))
    tables = []
    for s in sets:
        agents = {name.rsplit("/", 1)[1]: r for name, r in result.items() if name.rsplit("/", 1)[0] == s}
        table = Table(title=f"rcalab bench diagnose: {s}")
        table.add_column("measure")
        for agent in agents:
            table.add_column(agent, justify="right")
        for measure_ in ("final", "LA", "TA", "explainability", "grounded", "held", "APL", "cases", "unsure", "LA_unsure",
                         "answered", "fallback", "seconds_per_case", "llm_calls_per_case", "prompt_tokens_per_case",
                         "output_tokens_per_case"):
            table.add_row(measure_.replace("_per_case", " a case").replace("LA_unsure", "LA where unsure")
                          .replace("_", " "), *[figure(r, measure_) for r in agents.values()])
        tables.append(table)
    return tables


def detect_table(result: dict) -> Table:
    table = Table(title="rcalab bench detect")
    columns = ("faults", "incidents", "recall", "precision", "found_and_named", "on_time", "median_delay_minutes",
               "detect_seconds", "confidence_auroc", "no_clear_on_quiet", "no_clear_on_right")
    table.add_column("set")
    for column in columns:
        table.add_column(column.replace("_", " "), justify="right")
    for name, figures in result.items():
        if name != "leave one day out":
            table.add_row(cell(name), *("-" if figures.get(c) is None else str(figures[c]) for c in columns))
    return table


def missed_table(result: dict, title: str = "faults not found and named",
                 caption: str = "named instead: the incidents' answers over the fault") -> Table:
    """The cases a set missed, with what was named instead (detect's incidents' answers; rank's first candidate)."""
    table = Table(title=title, caption=caption)
    for column in ("set", "fault type", "cause", "start", "named instead"):
        table.add_column(column)
    for name, figures in result.items():
        for m in figures.get("missed", []) if name != "leave one day out" else []:
            cause = m["instance"] if isinstance(m["instance"], str) else ", ".join(m["instance"])
            table.add_row(cell(name), cell(m["fault_type"]), cell(cause), m["start"],
                          cell(", ".join(map(str, m["named instead"])) or "none found"))
    return table


def folds_table(rows: list[dict]) -> Table:
    table = Table(title="detection's thresholds fitted on the other real days, on the day left out",
                  caption="abnormal and stay; found and named / precision")
    for column in ("day left out", "fitted", "fitted's", "shipped", "shipped's"):
        table.add_column(column, justify="left" if column == "day left out" else "right")
    for r in rows:
        table.add_row(cell(r["day left out"]), r["fitted"], f"{r['found and named']} / {r['precision']}",
                      r["shipped"], f"{r['found and named, shipped']} / {r['precision, shipped']}")
    return table


def signature_table(replays: dict) -> Table:
    """Per fault type, key metrics moved / observations found on each replay (schedule at scale)."""
    table = Table(title="testbed signatures: key metrics moved / observations found (misses in the JSON)")
    table.add_column("fault type")
    for name in replays:
        table.add_column(cell(name), justify="right")
    kinds = sorted({kind for checked in replays.values() for kind in checked}, key=lambda kind: (kind == "all", kind))

    def figures(r):
        if r is None:
            return "-"
        return "/".join("-" if r[part] is None else f"{r[part]:.2f}" for part in ("metrics", "observations"))

    for kind in kinds:
        table.add_row(f"[bold]{kind}[/]" if kind == "all" else cell(kind),
                      *[figures(checked.get(kind)) for checked in replays.values()])
    return table


def fidelity_table(result: dict) -> Table:
    """Per fault type, the agreement of simulated Train Ticket's signature with the real days'."""
    table = Table(title="testbed fidelity: simulated Train Ticket against its real days, per fault type",
                  caption="agreement: the share of the signature's parts (moved in either) whose values agree")
    for col in ("fault type", "agreement", "parts", "real cases", "simulated cases", "parts that differ"):
        table.add_column(col, justify="left" if col in ("fault type", "parts that differ") else "right")
    for kind, r in result.items():
        table.add_row(cell(kind), "-" if r["agreement"] is None else f"{r['agreement']:.2f}", str(r["parts"]),
                      str(r["real cases"]), str(r["simulated cases"]),
                      cell("; ".join(f"{p}: {d}" for p, d in r["differ"].items()) or "none"))
    return table



def markdown(table: Table) -> str:
    """A rich table as a Markdown table under its title, its caption below (markup dropped, text kept)."""
    plain = [[Text.from_markup(str(c)).plain.replace("|", "\\|") for c in column.cells] for column in table.columns]
    rows = [" | ".join(row) for row in zip(*plain)]
    head = " | ".join(Text.from_markup(str(c.header)).plain for c in table.columns)
    align = " | ".join("---:" if c.justify == "right" else "---" for c in table.columns)
    lines = [f"### {Text.from_markup(str(table.title or '')).plain}", "", f"| {head} |", f"| {align} |",
             *(f"| {r} |" for r in rows)]
    if table.caption:
        lines += ["", Text.from_markup(str(table.caption)).plain]
    return "\n".join(lines) + "\n"


def _figure(height: float, columns: int = 1):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt, *plt.subplots(1, columns, figsize=(8, height))


def rank_plot(result: dict) -> tuple:
    """Top-1 per fault type of every set, as bars coloured by set: where a set's misses are."""
    bars = [(name, fault, t["top1"]) for name, r in result.items() for fault, t in r["per_type"].items()]
    plt, fig, ax = _figure(0.2 * len(bars) + 1)
    colours = dict(zip(result, itertools.cycle(plt.rcParams["axes.prop_cycle"].by_key()["color"])))
    rows = range(len(bars), 0, -1)
    for name in result:
        mine = [(row, top1) for row, (set_, _, top1) in zip(rows, bars) if set_ == name]
        ax.barh([row for row, _ in mine], [top1 for _, top1 in mine], color=colours[name], label=name)
    ax.set_yticks(list(rows), [fault for _, fault, _ in bars], fontsize=7)
    ax.set_ylim(0.4, len(bars) + 0.6)
    ax.set_xlim(0, 1)
    ax.set_xlabel("top-1 (the cause ranked first)")
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1), ncols=3, fontsize=7, frameon=False)
    return plt, fig


def etl_plot(result: dict) -> tuple:
    """The load beside its floor (DuckDB reading the same files into a store): time and peak memory."""
    plt, fig, (time_ax, memory_ax) = _figure(3, columns=2)
    time_ax.bar(["etl", "floor", "rerun"], [result["etl_seconds"], result["floor_seconds"], result["rerun_seconds"]],
                color=["tab:blue", "tab:gray", "tab:green"])
    time_ax.set_ylabel("seconds")
    memory_ax.bar(["etl", "floor"], [result["etl_peak_memory_mb"], result["floor_peak_memory_mb"]],
                  color=["tab:blue", "tab:gray"])
    memory_ax.set_ylabel("peak MB")
    return plt, fig


def scale_plot(result: dict) -> tuple:
    """The nightly job as `rcalab etl` runs it and on Dask clusters: its time, and the speed-up over one worker."""
    plt, fig, (time_ax, speed_ax) = _figure(3, columns=2)
    runs = result["runs"]
    time_ax.bar(list(runs), [r["seconds"] for r in runs.values()], color="tab:blue")
    time_ax.set_ylabel("seconds")
    speed_ax.bar(list(runs), [r["speed_up"] for r in runs.values()], color="tab:green")
    speed_ax.set_ylabel("speed-up over one worker")
    for ax in (time_ax, speed_ax):
        ax.tick_params(axis="x", labelsize=7, rotation=20)
    return plt, fig


PLOTS = {"rank": rank_plot, "etl": etl_plot, "scale": scale_plot}  # where a picture says more than the table


def write_page(what: str, result: dict, tables: list[Table], command: str, page: Path = PAGE) -> None:
    """Rewrite this bench's section of the benchmarks page (the others stay as they are): its tables, the plot
    where one says more, and the command and day that measured them."""
    import datetime as dt

    begin, end = f"<!-- bench {what} -->", f"<!-- /bench {what} -->"
    text = page.read_text() if page.is_file() else "# Benchmarks\n"
    body = [f"## {what}", "", f"Measured {dt.date.today():%Y-%m-%d} with `{command}` on a machine of "
            f"{os.cpu_count()} cores.", ""]
    if what in PLOTS:
        plt, fig = PLOTS[what](result)
        fig.tight_layout()
        (page.parent / "bench").mkdir(parents=True, exist_ok=True)
        fig.savefig(page.parent / "bench" / f"{what}.png", dpi=90)
        plt.close(fig)
        body += [f"![{what}](bench/{what}.png)", ""]
    section = "\n".join([begin, *body, *(markdown(t) for t in tables), end])
    if begin in text and end in text:
        text = text[:text.index(begin)] + section + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(text)
