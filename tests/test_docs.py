"""Docs that cannot drift: the command and store references are what the code says (cog), a bench rewrites its own
section of the benchmarks page, and the README stays short with links that lead somewhere."""

import re
from pathlib import Path

import pytest
from cogapp import Cog
from rich.table import Table

from rcalab.bench import write_page

ROOT = Path(__file__).resolve().parent.parent
GENERATED = [ROOT / "docs" / "cli.md", ROOT / "docs" / "store.md"]


def cog_check(*pages: Path) -> int:
    return Cog().main(["cog", "--check", *map(str, pages)])


def test_the_command_and_store_references_are_what_the_code_says():
    assert cog_check(*GENERATED) == 0, "stale: run 'make docs-pages'"


def test_a_changed_help_makes_the_command_reference_stale(tmp_path):
    page = tmp_path / "cli.md"
    page.write_text(GENERATED[0].read_text().replace("Show this message and exit.", "Show this and exit.", 1))
    assert cog_check(page) != 0


def test_a_bench_rewrites_its_own_section_of_the_benchmarks_page_and_no_other(tmp_path):
    page = tmp_path / "benchmarks.md"
    page.write_text("# Benchmarks\n\nBy hand.\n\n<!-- bench etl -->\nold etl\n<!-- /bench etl -->\n")
    table = Table(title="rcalab bench store")
    table.add_column("measure")
    table.add_column("day 30", justify="right")
    table.add_row("[bold]digest s[/]", "2.0")
    write_page("store", {}, [table], "rcalab bench store", page)
    write_page("store", {}, [table], "rcalab bench store --scale 0.01", page)
    text = page.read_text()
    assert "By hand." in text and "old etl" in text and text.count("<!-- bench store -->") == 1
    assert "| digest s | 2.0 |" in text and "`rcalab bench store --scale 0.01`" in text and "[bold]" not in text


def test_the_readme_is_short_and_its_links_lead_to_pages_that_exist():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    for link in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme):
        if not link.startswith("http"):
            assert (ROOT / link).exists(), link


def test_a_bench_that_compares_two_runs_orders_them_so_that_a_steady_drift_of_the_machine_cancels():
    from features.bench import in_turns, pair_ratios, ratio

    calls = []

    def run(name: str, cost: float):  # each run takes half its cost longer than the one before
        return lambda: calls.append(name) or (cost * (1 + 0.5 * (len(calls) - 1)), 0.0)

    a, b = in_turns(run("a", 2.0), run("b", 1.0))
    assert calls == ["a", "b", "b", "a"]
    assert ratio(a, b) == 2.0  # one run of each would read 2 / 1.5
    assert pair_ratios(a, b) == [1.33, 2.5]


def test_a_bench_counts_the_memory_a_command_and_the_processes_it_starts_hold_at_once():
    """The etl runs tasks side by side in processes of their own: its peak is theirs together, not its largest's."""
    import sys

    from features.bench import measured

    hold = "import time; x = bytearray({} * 2**20); time.sleep(1.5); print('held')"
    starts = (f"import subprocess, sys; x = bytearray(200 * 2**20); "
              f"subprocess.run([sys.executable, '-c', {hold.format(300)!r}])")
    _, alone, said = measured("hold", [sys.executable, "-c", hold.format(300)])
    _, together, _ = measured("starts", [sys.executable, "-c", starts])
    assert 300 <= alone < 400 and together >= alone + 200 and said == "held\n"


def test_a_bench_stops_a_command_past_its_time_with_the_processes_it_started():
    import sys
    import time

    import psutil

    from features.bench import measured

    sleeper = "import time; time.sleep(61)"
    starts = f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', {sleeper!r}]); exec({sleeper!r})"
    with pytest.raises(RuntimeError, match="sleeper took more than 2 s"):
        measured("sleeper", [sys.executable, "-c", starts], timeout=2)
    time.sleep(0.5)  # for init to reap the one whose parent was killed
    assert not [p for p in psutil.process_iter(["cmdline", "status"])
                if sleeper in " ".join(p.info["cmdline"] or []) and p.info["status"] != psutil.STATUS_ZOMBIE]
    with pytest.raises(RuntimeError, match="fails failed: no such thing"):
        measured("fails", [sys.executable, "-c", "raise SystemExit('no such thing')"])


def test_the_etl_its_floor_and_a_cluster_are_each_measured_in_a_process_of_their_own(replay, tmp_path):
    from features.bench import _CHILD, _CLUSTER, _child, floor

    runs = [floor(replay, tmp_path / "floor.duckdb"), _child(_CHILD, replay, tmp_path / "etl.duckdb"),
            _child(_CLUSTER, replay, tmp_path / "cluster.duckdb", "1")]
    assert all(r["peak_mb"] > 50 and r["wall_seconds"] >= r["seconds"] for r in runs)
    assert runs[1]["rows"] == runs[2]["rows"] and runs[1]["failed"] == runs[2]["failed"] == 0


def test_a_bench_whose_results_a_picture_tells_better_draws_it_beside_its_tables(tmp_path):
    page = tmp_path / "benchmarks.md"
    etl = {"etl_seconds": 26.8, "floor_seconds": 25.0, "rerun_seconds": 1.2, "etl_peak_memory_mb": 1710,
           "floor_peak_memory_mb": 3070}
    scale = {"runs": {"default": {"seconds": 59.0, "speed_up": 1.0}, "2 workers": {"seconds": 40.0, "speed_up": 1.5}}}
    for what, result in (("etl", etl), ("scale", scale)):
        write_page(what, result, [], f"rcalab bench {what}", page)
        assert f"![{what}](bench/{what}.png)" in page.read_text()
        assert (tmp_path / "bench" / f"{what}.png").read_bytes()[:4] == b"\x89PNG"


def test_a_bench_keeps_each_store_s_result_as_it_ends_so_a_rerun_measures_only_those_it_lacks(tmp_path, monkeypatch):
    """bench systems (and rank, detect) after an interruption: the systems whose results the same code kept are not
    measured again, also by workers of their own; another code's, or another schedule's, are."""
    import features.bench
    import rcalab.bench
    from rcalab.bench import Settings, measure

    ranked = []

    def stores(tmp, replays, real, *args):
        for name in replays:
            ranked.append(name)
            yield name, None, None, None

    def ranking(db, input_json, truth):
        return {"cases": 5, "top1": 1.0, "top3": 1.0, "top1_exact": 0.8, "AC": {},
                "per_type": {"cpu stress": {"cases": 5, "top1": 1.0, "top3": 1.0, "top1_exact": 0.8}}}

    monkeypatch.setattr(features.bench, "labelled_stores", stores)
    monkeypatch.setattr(features.bench, "ranking", ranking)
    settings = Settings(tmp_path, random=2, seed=3)
    first, tables = measure("systems", settings)
    assert ranked == ["drawn-3000 random", "drawn-3001 random"] and first["drawn-3001 random"]["pods"] >= 1
    (tmp_path / "systems" / "ranking-drawn-3001-random.json").unlink()  # stopped before its second system ended
    again, _ = measure("systems", settings)
    assert ranked[2:] == ["drawn-3001 random"] and again == first
    assert tables[0].row_count == 3  # a row a system and all of them pooled
    monkeypatch.setattr(rcalab.bench, "code", lambda: "changed")  # another code's results are not reused
    changed, _ = measure("systems", settings)
    assert ranked[3:] == ["drawn-3000 random", "drawn-3001 random"]
    # measured two at once, in processes of their own, which find what this one kept
    assert measure("systems", Settings(tmp_path, random=2, seed=3, workers=2))[0] == changed and len(ranked) == 5
    schedule = tmp_path / "schedule.jsonl"
    schedule.write_text("{}\n")
    replays = {"day": features.bench.Replay(schedule)}
    features.bench.run(replays, [], measure=ranking, keep=tmp_path / "kept", code="1")
    schedule.write_text("{}\n{}\n")  # another schedule under the same name
    features.bench.run(replays, [], measure=ranking, keep=tmp_path / "kept", code="1")
    assert ranked[5:] == ["day", "day"]


def test_stores_measured_at_once_each_in_a_process_of_its_own_give_what_one_at_a_time_gives(tmp_path):
    """`bench rank --workers 2`: two replays, each a real simulated store, ranked on a local Dask cluster of two; their
    results kept as they end, and what one process measures of the same stores."""
    import json

    from features.bench import Replay, ranking, run

    shared = Path(__file__).resolve().parents[2] / "shared" / "challenge2025" / "groundtruth-phaseone.jsonl"
    replays = {}
    for k, line in enumerate(shared.read_text().splitlines()[:2]):
        (tmp_path / f"{k}.jsonl").write_text(line + "\n")
        replays[f"case {k}"] = Replay(tmp_path / f"{k}.jsonl")
    both = run(replays, [], scale=0.005, measure=ranking, keep=tmp_path / "kept", code="1", workers=2)
    assert sorted(both) == ["case 0", "case 1"] and all(r["cases"] == 1 for r in both.values())
    assert {p.name for p in (tmp_path / "kept").iterdir()} == {"ranking-case-0.json", "ranking-case-1.json"}
    one = run(replays, [], scale=0.005, measure=ranking)
    digest_times = ("digest_seconds_mean", "digest_seconds_max")
    assert [{k: v for k, v in r.items() if k not in digest_times} for r in both.values()] == \
           [{k: v for k, v in r.items() if k not in digest_times} for r in one.values()]
    assert json.loads((tmp_path / "kept" / "ranking-case-0.json").read_text())["result"] == both["case 0"]


def test_a_bench_builds_a_kept_store_once_while_the_code_that_builds_stores_is_the_same(tmp_path, monkeypatch):
    """`bench rank --stores DIR`: a replay's store is kept in DIR (without its dump) and measured again without
    simulating or loading; another fingerprint of the code that builds stores, or another schedule, builds it anew.
    The fingerprint reads the features the nightly job computes, not those the ranking reads."""
    import subprocess

    from features.bench import Replay, ranking, run
    from rcalab.bench import _imported

    shared = Path(__file__).resolve().parents[2] / "shared" / "challenge2025" / "groundtruth-phaseone.jsonl"
    schedule = tmp_path / "case.jsonl"
    schedule.write_text(shared.read_text().splitlines()[0] + "\n")
    replays, stores = {"case 0": Replay(schedule)}, tmp_path / "stores"

    def measured(built):
        result = run(replays, [], scale=0.005, measure=ranking, stores=stores, built=built)["case 0"]
        return {k: v for k, v in result.items() if not k.startswith("digest_seconds")}

    first = measured("1")
    kept = {p.name for p in (stores / "case-0").iterdir()}
    assert {"built.json", "cases", "store.duckdb", "store.duckdb.shards"} <= kept and "dump" not in kept
    assert first["cases"] == 1
    simulated = []
    monkeypatch.setattr(subprocess, "run", lambda *args, **kwargs: simulated.append(args) or 1 / 0)
    assert measured("1") == first and simulated == []
    with pytest.raises(ZeroDivisionError):
        measured("2")
    assert not (stores / "case-0" / "built.json").exists()  # an unfinished store is not used
    with pytest.raises(ZeroDivisionError):
        schedule.write_text(schedule.read_text() * 2)
        measured("1")
    assert {p.name for p in _imported("features.refresh")} >= {"refresh.py", "anomaly.py", "changepoints.py"}
    assert not {p.name for p in _imported("features.refresh")} & {"ranker.py", "digest.py", "detect.py"}
