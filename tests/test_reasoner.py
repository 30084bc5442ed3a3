"""The agent loop with a scripted model: tool calls, validation, repair, failures, resumable batches."""

import json

import duckdb
import pytest

from features.cases import load_questions
from reasoner import agent
from reasoner.agent import openai_chat
from reasoner.batch import answered_uuids, run_batch, transcripts_path
from reasoner.llm import LLMConfig, client, free_port


class ScriptedChat:
    """Replays queued replies; records what it was asked."""

    def __init__(self, *replies):
        self.replies = list(replies)
        self.asked = []

    def __call__(self, messages, schema, seconds):
        self.asked.append((list(messages), schema))
        reply = self.replies.pop(0)
        return (reply if isinstance(reply, str) else json.dumps(reply)), {"prompt_tokens": 10, "completion_tokens": 5}


def step(action, component, fault_type="pod failure", reason="", keyword=""):
    return {"action": action, "component": component, "keyword": keyword, "fault_type": fault_type, "reason": reason}


ANSWER = step("answer", "cartservice", reason="request of cartservice fell to 0; callers get no answer")


@pytest.fixture(scope="module")
def questions(replay):
    return {q.uuid: q for q in load_questions(replay / "input.json")}


@pytest.fixture(scope="module")
def db(replay_store):
    return replay_store[0]


def run(db, questions, chat, uuid="38ee3d45-82", **kw):
    con = duckdb.connect(str(db), read_only=True)
    con.execute("set TimeZone = 'UTC'")
    from reasoner.tools import known_components, known_metrics
    return agent.diagnose(chat, con, questions[uuid], components=known_components(con), metrics=known_metrics(con),
                          **kw)


def test_tool_call_then_answer(db, questions):
    chat = ScriptedChat(step("trace_edges", "cartservice"), ANSWER)
    out = run(db, questions, chat)
    assert out.error is None
    assert out.answer["component"] == "cartservice"
    assert out.answer["reason"].startswith("pod failure: request of cartservice")
    assert len(out.answer["reason"].split()) <= 20
    trace = out.answer["reasoning_trace"]
    assert [s["step"] for s in trace] == list(range(1, len(trace) + 1))
    assert trace[-1]["action"] == "TraceAnalysis(cartservice)"
    assert "cartservice" in " ".join(trace[-1]["observation"].split()[:20])
    assert any(s["action"].startswith("MetricAnalysis(") for s in trace)
    assert set(out.answer) == {"uuid", "component", "reason", "reasoning_trace"}
    # The tool result went back to the model, and the schema limits components to the candidates.
    assert "frontend -> cartservice" in chat.asked[1][0][-1]["content"]
    assert "cartservice" in chat.asked[0][1]["properties"]["component"]["enum"]
    assert out.transcript["tool_calls"] == 1 and out.transcript["tokens"]["prompt_tokens"] == 20


def test_step_limit_forces_an_answer(db, questions):
    chat = ScriptedChat(*[step("metric_anomalies", "cartservice")] * 2, ANSWER)
    out = run(db, questions, chat, max_tools=2)
    assert out.answer and chat.asked[2][1]["properties"]["action"]["enum"] == ["answer"]


def test_malformed_reply_gets_one_repair(db, questions):
    out = run(db, questions, ScriptedChat("I think it is cartservice", ANSWER))
    assert out.answer["component"] == "cartservice"


def ranked(db, questions, uuid="38ee3d45-82"):
    con = duckdb.connect(str(db), read_only=True)
    con.execute("set TimeZone = 'UTC'")
    return agent.rank_only(con, questions[uuid])


def test_malformed_twice_falls_back_to_the_ranking(db, questions):
    out = run(db, questions, ScriptedChat("not json", '{"action": "answer"}'))
    assert out.error.startswith("malformed reply (missing field component")
    assert out.transcript["status"] == "fallback" and out.answer == ranked(db, questions).answer


@pytest.mark.parametrize("name", ["paymentgateway", "emailservice"])  # unknown; known but without evidence
def test_a_component_outside_the_candidates_is_refused(db, questions, name):
    bad = step("answer", name, reason=f"request of {name} fell")
    out = run(db, questions, ScriptedChat(bad, bad))
    assert out.error.startswith(f"'{name}' is not one of the candidates (") and "cartservice" in out.error
    assert out.transcript["status"] == "fallback" and out.answer["component"] == "cartservice"


def test_the_rank_agent_answers_with_the_top_option_and_its_key_metric(db, questions):
    out = ranked(db, questions)
    assert out.answer["component"] == "cartservice" and out.transcript["model"] == "rank"
    fault, key = out.answer["reason"].split(": ", 1)
    assert fault == "pod failure" and key.split()[0] in out.answer["reasoning_trace"][0]["observation"].split()
    assert len(out.answer["reason"].split()) <= 20 and out.answer["reasoning_trace"]


def test_reason_must_name_a_metric_or_log_keyword(db, questions):
    vague = step("answer", "cartservice", reason="something went wrong somewhere")
    out = run(db, questions, ScriptedChat(vague, ANSWER))
    repair = out.transcript["messages"][-2]["content"]
    assert out.answer and repair.startswith("Not accepted: the reason must start with the key metric")
    assert "e.g. one of " in repair  # the metric names of the evidence, to choose from


def test_a_repeated_tool_call_forces_the_answer(db, questions):
    chat = ScriptedChat(step("trace_edges", "cartservice"), step("trace_edges", "cartservice"), ANSWER)
    out = run(db, questions, chat)
    assert out.answer and out.transcript["tool_calls"] == 1
    assert chat.asked[2][1]["properties"]["action"]["enum"] == ["answer"]


def test_endpoint_down_fails_the_case_not_the_batch(db, questions):
    dead = client(LLMConfig(base_url="x", timeout=2, max_retries=0), f"http://127.0.0.1:{free_port()}/v1")
    out = run(db, questions, openai_chat(dead, "m"))
    assert out.error.startswith("LLM call failed: APIConnectionError")
    assert out.transcript["status"] == "fallback" and out.answer == ranked(db, questions).answer


def test_batch_resumes_after_a_torn_line(db, replay, tmp_path):
    answers = tmp_path / "answers.jsonl"
    qs = load_questions(replay / "input.json")
    first = {"uuid": qs[0].uuid, "component": "x", "reason": "r", "reasoning_trace": []}
    answers.write_text(json.dumps(first) + "\n" + '{"uuid": "' + qs[1].uuid + '", "compo')
    chat = ScriptedChat(*[step("answer", "cartservice", reason="request of cartservice fell")] * 10)
    report = run_batch(db, qs, answers, chat, concurrency=2)
    assert report.skipped == 1 and report.answered == len(qs) - 1
    lines = answers.read_text().splitlines()
    assert [json.loads(l)["uuid"] for l in lines].count(qs[1].uuid) == 1 and len(lines) == len(qs)
    assert answered_uuids(answers) == {q.uuid for q in qs}
    transcripts = [json.loads(l) for l in transcripts_path(answers).read_text().splitlines()]
    assert {t["status"] for t in transcripts} == {"answered"} and len(transcripts) == len(qs) - 1
    again = run_batch(db, qs, answers, ScriptedChat())
    assert again.answered == 0 and again.skipped == len(qs)
