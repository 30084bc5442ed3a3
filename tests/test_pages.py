"""A page per case, opened in a real headless browser (Debian's chromium, which `make test` installs): each page
loads with no console message, its pictures render, and a screenshot is taken."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from features.cases import load_questions
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
        assert images >= 2 and f'data-images="{images}"' in loaded.stdout, uuid
        assert ":CONSOLE" not in loaded.stderr, loaded.stderr[-500:]
    shot = tmp_path / "case.png"
    browse(next(iter(pages.values())), "--hide-scrollbars", "--window-size=1200,2400", f"--screenshot={shot}")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000


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
