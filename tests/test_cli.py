"""The command line: exit codes and the exact one-line messages."""

import json

from click.testing import CliRunner

from conftest import PHASE_ONE
from rcalab.cli import cli


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_simulate_example_from_the_readme(tmp_path):
    result = run("simulate", tmp_path / "out", "--schedule", PHASE_ONE, "--limit", 2, "--scale", 0.002)
    assert result.exit_code == 0, result.output
    assert "wrote 2 cases of hipstershop over 1 day(s) (2025-06-06)" in result.output
    assert len((tmp_path / "out" / "groundtruth.jsonl").read_text().splitlines()) == 2


def test_missing_schedule_file(tmp_path):
    result = run("simulate", tmp_path / "out", "--schedule", tmp_path / "nope.jsonl")
    assert result.exit_code == 1
    assert result.output == f"Error: cannot read schedule {tmp_path / 'nope.jsonl'}: No such file or directory\n"


def test_unknown_fault_type_names_the_line(tmp_path):
    schedule = tmp_path / "gt.jsonl"
    row = json.loads(PHASE_ONE.read_text().splitlines()[0])
    schedule.write_text(json.dumps(row) + "\n" + json.dumps(dict(row, fault_type="disk melt")) + "\n")
    result = run("simulate", tmp_path / "out", "--schedule", schedule)
    assert result.exit_code == 1
    assert result.output.startswith(f"Error: {schedule}:2: unknown fault type 'disk melt' (known: code error, cpu stress, ")
    assert result.output.count("\n") == 1


def test_instance_the_fault_cannot_hit(tmp_path):
    schedule = tmp_path / "gt.jsonl"
    row = json.loads(PHASE_ONE.read_text().splitlines()[0])
    schedule.write_text(json.dumps(dict(row, instance="no-such-service")) + "\n")
    result = run("simulate", tmp_path / "out", "--schedule", schedule)
    assert result.output == f"Error: {schedule}:1: fault type 'cpu stress' cannot hit instance 'no-such-service'\n"


def test_malformed_schedule_line(tmp_path):
    schedule = tmp_path / "gt.jsonl"
    schedule.write_text("{not json\n")
    result = run("simulate", tmp_path / "out", "--schedule", schedule)
    assert result.exit_code == 1 and result.output.startswith(f"Error: {schedule}:1: not valid JSON")


def test_unwritable_out(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = run("simulate", blocker / "out", "--cases", 1)
    assert result.exit_code == 1
    assert result.output == f"Error: cannot write to {blocker / 'out'}: Not a directory\n"


def test_schedule_or_cases_required(tmp_path):
    result = run("simulate", tmp_path / "out")
    assert result.exit_code == 1 and result.output == "Error: give either --schedule FILE or --cases N\n"


def test_every_command_has_an_example():
    for name, command in cli.commands.items():
        assert "Example: rcalab " in (command.help or ""), name


def test_tables_fit_80_columns_with_names_whole(replay, replay_store, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    runner = CliRunner()
    answers = []
    for agent in ("rank-agent-answers", "another-rank-agent-answers"):
        out = tmp_path / "long-folder-name" / f"{agent}.jsonl"
        assert runner.invoke(cli, ["diagnose", "--agent", "rank", "--db", str(replay_store[0]), "--input",
                                   str(replay / "input.json"), "--out", str(out)]).exit_code == 0
        answers += ["--answers", str(out)]
    judged = runner.invoke(cli, ["judge", "--truth", str(replay / "groundtruth.jsonl"), *answers])
    detected = runner.invoke(cli, ["detect", "--db", str(replay_store[0])])
    for result in (judged, detected):
        assert result.exit_code == 0 and "…" not in result.output
        assert max(len(line) for line in result.output.splitlines() if line[:1] in "┏┃│└") <= 80
