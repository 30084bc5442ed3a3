"""Each scoring rule against hand-made files whose scores are worked out by hand here."""

import json
import math

import pytest
from click.testing import CliRunner

from etl.cases import labelled_cases
from judge.scoring import score
from rcalab.cli import cli
from reasoner.batch import transcripts_path

from conftest import SHARED

TRUTH = [
    {"uuid": "t1", "fault_type": "cpu stress", "instance_type": "service", "instance": "emailservice",
     "key_metrics": ["pod_cpu_usage"], "fault_description": ["high CPU utilization"],
     "key_observations": [{"type": "metric", "keyword": ["pod_cpu_usage"]}, {"type": "metric", "keyword": ["rrt"]}]},
    {"uuid": "t2", "fault_type": "network corrupt", "instance_type": "service",
     "instance": ["checkoutservice", "shippingservice"], "key_metrics": ["rrt"], "fault_description": ["packet loss"],
     "key_observations": [{"type": "log", "keyword": ["Error", "while", "dialing"]},
                          {"type": "trace", "keyword": ["checkoutservice", "frontend"]}]},
    {"uuid": "t3", "fault_type": "jvm gc", "instance_type": "pod", "instance": ["adservice-0"],
     "key_metrics": ["adservice--gc"], "fault_description": ["long GC pause"],
     "key_observations": [{"type": "log", "keyword": ["GCHelper"]}]},
    {"uuid": "t4", "fault_type": "node cpu stress", "instance_type": "node", "instance": "aiops-k8s-01",
     "key_metrics": ["node_cpu_usage_rate"], "fault_description": ["node CPU overload"],
     "key_observations": [{"type": "metric", "keyword": ["node_cpu_usage_rate"]}]},
]


def steps(*pairs):
    return [{"step": i, "action": a, "observation": o} for i, (a, o) in enumerate(pairs, 1)]


A1 = {"uuid": "t1", "component": "emailservice", "reason": "cpu stress: pod_cpu_usage rose from 0.1 to 1.9",
      "reasoning_trace": steps(("MetricAnalysis(emailservice)", "pod_cpu_usage 0.1 -> 1.9 on all pods"),
                               ("MetricAnalysis(emailservice)", "rrt_max doubled"),  # rrt_max is not rrt
                               ("TraceAnalysis(emailservice)", "calls slower"))}
A2 = {"uuid": "t2", "component": "shippingservice", "reason": "network corrupt: latency rose on the link",
      "reasoning_trace": steps(("LogSearch(checkoutservice)", "Error while dialing shippingservice"),
                               ("MetricAnalysis(checkoutservice)", "checkoutservice frontend slow"))}  # not a trace step
A3 = {"uuid": "t3", "component": "adservice", "reason": "jvm gc: the adservice--gc rule fired",
      "reasoning_trace": steps(("MetricAnalysis(adservice)", "GCHelper forcing full gc"))}  # not a log step


def write(path, rows, extra=()):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "".join(extra))
    return path


@pytest.fixture
def files(tmp_path):
    truth = write(tmp_path / "truth.jsonl", TRUTH)
    dup = dict(A1, component="wrong")
    answers = write(tmp_path / "answers.jsonl", [A1, A2, A3, dup, dict(A1, uuid="nope")],
                    ["{broken\n", json.dumps({"uuid": "t4", "component": "x"}) + "\n"])
    return truth, answers


def test_official_score_worked_out_by_hand(files):
    truth, answers = files
    s = score(truth, answers).summary()
    # LA: t1 and t2 right (t2 by any element of the list), t3 is the pod not the service, t4 has no answer.
    assert s["LA"] == 0.5
    # TA: t1 names pod_cpu_usage, t3 names adservice--gc; t2 lacks rrt; t4 unanswered.
    assert s["TA"] == 0.5
    # Efficiency: APL over the right components = (3 + 2) / 2 = 2.5 -> min(1, e^0.5) = 1.
    assert s["APL"] == 2.5 and s["efficiency"] == 1.0
    # Explainability: 6 points, hit: t1 pod_cpu_usage, t2 log "Error while dialing" -> 2 / 6.
    assert s["explainability"] == round(2 / 6, 4)
    assert s["final"] == round(100 * (0.4 * 0.5 + 0.4 * 0.5 + 0.1 * 1 + 0.1 * (2 / 6)), 2) == 53.33
    assert s["cases"] == 4 and s["answered"] == 3


def test_bad_lines_are_reported_with_line_numbers_and_scoring_goes_on(files):
    truth, answers = files
    problems = score(truth, answers).problems
    assert f"{answers}:4: duplicate uuid t1 (line 1 counts)" in problems
    assert f"{answers}:6: malformed JSON (Expecting property name enclosed in double quotes)" in problems
    assert f"{answers}:7: missing field reason, reasoning_trace" in problems
    assert f"{answers}:5: unknown uuid nope" in problems
    assert f"{answers}: no answer for t4" in problems


def test_efficiency_falls_with_long_traces(tmp_path):
    truth = write(tmp_path / "t.jsonl", TRUTH[:1])
    long = dict(A1, reasoning_trace=steps(*[("MetricAnalysis(x)", "pod_cpu_usage up")] * 10))
    s = score(truth, write(tmp_path / "a.jsonl", [long])).summary()
    assert s["APL"] == 10 and s["efficiency"] == round(math.exp(-1), 4)


def test_only_the_first_20_words_count(tmp_path):
    truth = write(tmp_path / "t.jsonl", TRUTH[:1])
    late = dict(A1, reason="cpu stress " + "word " * 20 + "pod_cpu_usage",
                reasoning_trace=steps(("MetricAnalysis(x)", "word " * 20 + "pod_cpu_usage")))
    s = score(truth, write(tmp_path / "a.jsonl", [late])).summary()
    assert s["TA"] == 0 and s["explainability"] == 0


def test_trace_point_needs_a_trace_step_naming_a_path_component(tmp_path):
    truth = write(tmp_path / "t.jsonl", TRUTH[1:2])
    a = dict(A2, reasoning_trace=steps(("TraceAnalysis(checkoutservice)", "frontend -> checkoutservice p95 up")))
    assert score(truth, write(tmp_path / "a.jsonl", [a])).summary()["explainability"] == 0.5


def test_semantic_rules_rejudge_a_keyword_miss(files):
    truth, answers = files
    # t2's reason has no keyword; a similarity of 0.7 >= 0.6 makes it right under `semantic` only.
    fake = lambda text, phrases: 0.7 if "latency" in text else 0.1  # noqa: E731
    assert score(truth, answers, "semantic", similarity=fake).summary()["TA"] == 0.75
    official = score(truth, answers, "official", similarity=fake)
    assert official.summary()["TA"] == 0.5 and official.cases[1].similarity == 0.7


def test_judge_command_json_and_report(files, tmp_path):
    truth, answers = files
    result = CliRunner().invoke(cli, ["judge", "--truth", str(truth), "--answers", str(answers), "--json",
                                      "--report", str(tmp_path / "report")])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output[: result.output.rindex("}") + 1])
    assert {"final", "LA", "TA", "efficiency", "explainability", "cases", "answered"} <= set(data)
    assert data["final"] == 53.33 and data["rules"] == "official"
    page = (tmp_path / "report" / "report.html").read_text()
    assert "Rule set: <b>official</b>" in page and "data:image/png;base64," in page and "t3" in page
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report[str(answers)]["breakdown"]["by_level"]["pod"] == {"cases": 1, "LA": 0.0, "TA": 1.0}


def test_semantic_rules_with_the_real_embedding_model(files):
    """all-MiniLM-L6-v2 from the offline PyPI package: t2's reason is near enough 'packet loss' or not,
    and the raw similarity is reported under both rule sets."""
    from judge.similarity import best_similarity

    truth, answers = files
    near = best_similarity("packet loss on the network link", ["packet loss"])
    far = best_similarity("the weather is nice today", ["packet loss"])
    assert near >= 0.6 > far
    semantic = score(truth, answers, "semantic")
    sim = semantic.cases[1].similarity
    assert 0 < sim < 1 and semantic.cases[1].reason_ok == (sim >= 0.6)


@pytest.mark.parametrize("day, system", [("nezha-trainticket", "Train Ticket"),
                                         ("nezha-onlineboutique", "Online Boutique")])
def test_a_nezha_day_is_set_beside_the_paper_s_figures_on_its_own_system(tmp_path, day, system):
    rows = labelled_cases(SHARED / day)
    truth = write(tmp_path / "truth.jsonl", rows)
    answers = write(tmp_path / "answers.jsonl", [{"uuid": r["uuid"], "component": r["service"]} for r in rows])
    write(transcripts_path(answers), [{"uuid": r["uuid"], "candidates": [r["service"]]} for r in rows])
    result = CliRunner().invoke(cli, ["judge", "--truth", str(truth), "--answers", str(answers)])
    assert result.exit_code == 0 and "AC@1 1.0" in result.output, result.output
    assert f"beside the Nezha paper on {system}: AS@1" in result.output
