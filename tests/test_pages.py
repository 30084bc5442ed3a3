"""A page per case, opened in a real headless browser (Debian's chromium, which `make test` installs): each page
loads with no console message, its pictures render, and a screenshot is taken."""

import datetime as dt
import json
from html.parser import HTMLParser
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from features.cases import load_questions
from features.path import walked
from judge.pages import write_pages
from rcalab.cli import cli
from reasoner.batch import run_batch

BROWSER = shutil.which("chromium")


def browse(page: Path, *args) -> subprocess.CompletedProcess:
    assert BROWSER, "chromium is missing: 'make test' installs it (apt-get install chromium)"
    return subprocess.run([BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
                           "--v=0", "--virtual-time-budget=3000", *args, page.as_uri()],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def pages(replay, replay_store, tmp_path_factory):
    out = tmp_path_factory.mktemp("pages")
    questions = load_questions(replay / "input.json")
    run_batch(replay_store[0], questions, out / "answers.jsonl", None)
    return write_pages(replay_store[0], questions, out / "answers.jsonl", out / "cases")


def test_every_case_page_loads_in_a_browser_with_its_pictures_and_no_console_message(pages, tmp_path):
    for uuid, page in pages.items():
        text = page.read_text()
        assert uuid in text and "Candidates" in text and "Transcript" in text and "http" not in text.split("<h1>")[0]
        loaded = browse(page, "--dump-dom")
        assert loaded.returncode == 0, loaded.stderr[-500:]
        images = text.count("<img ")
        assert images >= 1 and f'data-images="{images}"' in loaded.stdout and "<svg" in text, uuid
        assert ":CONSOLE" not in loaded.stderr, loaded.stderr[-500:]
    assert any("Where users met it" in page.read_text() for page in pages.values())  # the entry's status codes
    shot = tmp_path / "case.png"
    browse(next(iter(pages.values())), "--hide-scrollbars", "--window-size=1200,2400", f"--screenshot={shot}")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000


class Ids(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids = []

    def handle_starttag(self, tag, attrs):
        self.ids += [v for k, v in attrs if k == "id" and v]


def test_the_page_draws_every_call_and_highlights_the_fault_s_path(pages, replay_store):
    answers = {json.loads(line)["uuid"]: json.loads(line) for line in
               (next(iter(pages.values())).parent.parent / "answers.jsonl").read_text().splitlines()}
    uuid = next(u for u in pages if len(walked(answers[u])) > 1)
    path = walked(answers[uuid])
    parser = Ids()
    parser.feed(pages[uuid].read_text())
    drawn = [i for i in parser.ids if i.startswith(("call ", "path "))]
    assert [i for i in drawn if i.startswith("path ")] == sorted(f"path {a} -> {b}" for a, b in zip(path, path[1:]))
    assert len(drawn) == len(set(drawn)) >= 10  # every call of the system, once
    assert {f"component {c}" for c in path} <= set(parser.ids)


def test_names_on_a_page_are_text_not_markup(replay, replay_store, tmp_path):
    q = load_questions(replay / "input.json")[0]
    hostile = [type(q)("<b>u</b>", q.start, q.end, q.description + "<script>alert(1)</script>")]
    page = write_pages(replay_store[0], hostile, tmp_path / "none.jsonl", tmp_path / "cases")["<b>u</b>"]
    text = page.read_text()
    assert "<script>alert" not in text and "&lt;script&gt;alert(1)" in text and "<b>u</b>" not in text
    assert page.name == "case-0001.html"  # a uuid is never a file name


def test_the_judge_report_links_each_case_to_its_page(replay, replay_store, tmp_path):
    answers = tmp_path / "a.jsonl"
    run_batch(replay_store[0], load_questions(replay / "input.json"), answers, None)
    result = CliRunner().invoke(cli, ["judge", "--truth", str(replay / "groundtruth.jsonl"), "--answers", str(answers),
                                      "--report", str(tmp_path / "report"), "--db", str(replay_store[0]),
                                      "--input", str(replay / "input.json")])
    assert result.exit_code == 0, result.output
    report = (tmp_path / "report" / "report.html").read_text()
    assert "href='cases-1/index.html'" in report
    index = (tmp_path / "report" / "cases-1" / "index.html").read_text()
    first = json.loads(answers.read_text().splitlines()[0])
    assert first["uuid"] in index and "case-0001.html" in index
    assert browse(tmp_path / "report" / "report.html", "--dump-dom").returncode == 0
    # Both notebooks, executed on the store, rendered beside the report and linked from it; they open offline.
    for name in ("explore_features", "day"):
        assert f"<a href='{name}.html'>{name}.ipynb</a>" in report
        rendered = tmp_path / "report" / f"{name}.html"
        assert "data:image/png;base64," in rendered.read_text() and "http" not in rendered.read_text().split("<body")[0]
        opened = browse(rendered, "--dump-dom")
        assert opened.returncode == 0 and ":CONSOLE" not in opened.stderr, opened.stderr[-500:]
    assert list((tmp_path / "report" / "day-pages").glob("case-*.html"))


def test_the_judge_checks_that_the_fault_s_path_and_the_facts_of_each_answer_hold_in_the_store(replay, replay_store, tmp_path):
    answers, forged = tmp_path / "a.jsonl", tmp_path / "forged.jsonl"
    run_batch(replay_store[0], load_questions(replay / "input.json"), answers, None)
    rows = [json.loads(line) for line in answers.read_text().splitlines()]
    row = next(r for r in rows if walked(r))
    walk = next(s for s in row["reasoning_trace"] if s["action"].startswith("TraceAnalysis("))
    assert walk["action"].startswith("TraceAnalysis(frontend -> ")
    walk["action"] = "TraceAnalysis(tidb-tikv -> frontend)"  # upside down, off the graph
    other = next(r for r in rows if r is not row)
    other["reasoning_trace"][-1]["observation"] += " pod_cpu_usage 0.2 -> 31337"  # a number nothing gave
    forged.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = CliRunner().invoke(cli, ["judge", "--truth", str(replay / "groundtruth.jsonl"), "--answers", str(answers),
                                      "--answers", str(forged), "--json", "--report", str(tmp_path / "report"),
                                      "--db", str(replay_store[0]), "--input", str(replay / "input.json")])
    assert result.exit_code == 0, result.output
    judged = json.loads(result.output[: result.output.rindex("}") + 1])
    honest, bent = judged[str(answers)]["grounding"], judged[str(forged)]["grounding"]
    assert honest["walked"] == bent["walked"] >= 3 and honest["grounded"] == 1.0
    assert "no call or placement links tidb-tikv to frontend" in bent["not_grounded"][row["uuid"]]
    assert honest["held"] == 1.0 and honest["unfounded"] == {}  # every quote logged, every number the evidence's
    assert list(bent["unfounded"]) == [other["uuid"]] and "31337" in bent["unfounded"][other["uuid"]]
    assert "Grounded: 1.0 of the" in (tmp_path / "report" / "report.html").read_text()


def test_a_window_with_no_rows_is_a_page_that_says_so(replay, replay_store, tmp_path):
    """An answer for a window days past the store's last row (no calls, no metrics, no lines): the page says the
    window is empty, where the call graph's drawing once failed on its empty layers."""
    q = load_questions(replay / "input.json")[0]
    late = type(q)("late", q.start + dt.timedelta(days=3), q.end + dt.timedelta(days=3), q.description)
    answers = tmp_path / "a.jsonl"
    answers.write_text(json.dumps({"uuid": "late", "component": "frontend", "reason": "x", "reasoning_trace": []}) + "\n")
    page = write_pages(replay_store[0], [late], answers, tmp_path / "cases")["late"]
    text = page.read_text()
    assert "This window is empty" in text and "the store holds no calls in this window" in text
    assert browse(page, "--dump-dom").returncode == 0
