"""The agents with a scripted model: options, checks, validation, repair, fallback, resumable batches."""

import json
import re

import pytest
from test_ranking import END, START, stops_calling, tiny  # noqa: F401 (a fixture)
from test_ranking import digest as ranked_digest_of

from etl import store
from features.cases import Question, load_questions
from features.digest import build_digest
from features.options import Option
from features.path import read
from reasoner import agent
from reasoner.agent import openai_chat
from reasoner.batch import answered_uuids, run_batch, transcripts_path
from reasoner.llm import LLMConfig, client, free_port
from reasoner.prompt import option_ids
from reasoner.tools import Context, Result, checks_of, run_tool

CASE = "38ee3d45-82"  # pod failure of cartservice


class ScriptedChat:
    """Replays queued replies; records what it was asked."""

    def __init__(self, *replies):
        self.replies = list(replies)
        self.asked = []

    def __call__(self, messages, schema, seconds):
        self.asked.append((list(messages), schema))
        reply = self.replies.pop(0)
        return (reply if isinstance(reply, str) else json.dumps(reply)), {"prompt_tokens": 10, "completion_tokens": 5}


def check(tool, target, keyword=""):
    return {"action": tool, "target": target, "keyword": keyword, "option": "", "fault_type": "", "reason": ""}


def answer(option="1a", fault_type="pod failure", reason="callers get no answer"):
    return {"action": "answer", "option": option, "fault_type": fault_type, "reason": reason}


@pytest.fixture(scope="module")
def questions(replay):
    return {q.uuid: q for q in load_questions(replay / "input.json")}


@pytest.fixture(scope="module")
def db(replay_store):
    return replay_store[0]


def connect(db):
    con = store.connect(db, read_only=True)
    con.execute("set TimeZone = 'UTC'")
    return con


def run(db, questions, chat, uuid=CASE, max_tools=1, **kw):
    return agent.diagnose(chat, connect(db), questions[uuid], max_tools=max_tools, **kw)


def ranked_digest(db, questions, uuid=CASE):
    return build_digest(connect(db), questions[uuid])


def ranked(db, questions, uuid=CASE):
    return agent.rank_only(connect(db), questions[uuid])


def test_option_1a_is_tested_then_the_model_checks_and_chooses_an_option(db, questions):
    chat = ScriptedChat(check("trace_edges", "cartservice"), answer())
    out = run(db, questions, chat)
    assert out.error is None and out.transcript["status"] == "answered"
    assert out.answer["component"] == "cartservice"
    key = ranked(db, questions).answer["reason"].split(": ", 1)[1].split()[0]
    assert out.answer["reason"].startswith(f"Pod failure in cartservice: {key}")  # the option's key comes first
    assert out.answer["reason"].endswith(". Callers get no answer.") and len(out.answer["reason"].split()) <= 40
    trace = out.answer["reasoning_trace"]
    assert [s["step"] for s in trace] == list(range(1, len(trace) + 1))
    steps = {s["action"]: s["observation"] for s in trace}
    assert "cartservice" in steps["TraceAnalysis(cartservice)"]
    rank_trace = ranked(db, questions).answer["reasoning_trace"]
    assert len(trace) <= len(rank_trace) + 1  # a check adds a step only where the ranking read no such evidence
    assert set(out.answer) == {"uuid", "component", "reason", "reasoning_trace"}
    first_prompt, schema = chat.asked[0][0][1]["content"], chat.asked[0][1]
    firsts = [o for o, (c, _) in option_ids(ranked_digest(db, questions)).items() if c == "cartservice"]
    assert "option 1a:" in first_prompt and schema["properties"]["option"]["enum"] == [*firsts, ""]
    # Pod failure rests on metrics and shows in them: one test, its result in the first prompt.
    tests = checks_of(option_ids(ranked_digest(db, questions))["1a"][1])
    assert tests == ["metric_anomalies"] and "Result of metric_anomalies(cartservice):" in first_prompt
    assert "checked: " in steps["MetricAnalysis(cartservice)"]  # the test of option 1a, in the step it checked
    assert not any(";;" in s["observation"] for s in trace)
    assert "cartservice" in schema["properties"]["target"]["enum"]
    answer_only = chat.asked[1][1]["properties"]
    assert answer_only["action"]["enum"] == ["answer"]  # one check of its own, then the answer
    assert "" not in answer_only["option"]["enum"] and "" not in answer_only["fault_type"]["enum"]
    assert "target" not in answer_only  # the answer's schema has no check fields
    assert out.transcript["tool_calls"] == 2 and out.transcript["tokens"] == {"prompt_tokens": 20,
                                                                              "completion_tokens": 10}


def test_an_option_is_tested_where_its_evidence_was_read_and_where_its_fault_shows():
    option = Option("jvm exception", "error", "metric error of adservice: 0 -> 781", "metric")
    assert checks_of(option) == ["metric_anomalies", "log_templates"]
    assert checks_of(Option("network delay", "NetworkP90(ms)", "trace ...", "trace")) == ["trace_edges"]


def test_the_reason_keeps_the_rank_reason_and_adds_what_the_tests_found(db, questions):
    out = run(db, questions, ScriptedChat(answer(reason="")))
    found = run_tool(Context(connect(db), questions[CASE]), "metric_anomalies", "cartservice").keys
    assert found
    rank_reason = ranked(db, questions).answer["reason"].rstrip(".")
    assert out.answer["reason"].startswith(rank_reason)
    assert all(k in out.answer["reason"] for k in found[:2]), (found, out.answer["reason"])


def test_the_model_may_correct_the_fault_type(db, questions):
    out = run(db, questions, ScriptedChat(answer(fault_type="pod kill")))
    assert out.answer["reason"].startswith("Pod kill in cartservice: ")


def test_a_malformed_reply_gets_one_repair(db, questions):
    out = run(db, questions, ScriptedChat("I think it is cartservice", answer()))
    assert out.transcript["status"] == "answered" and out.answer["component"] == "cartservice"


def test_a_repair_is_asked_for_in_the_answer_s_schema(db, questions):
    chat = ScriptedChat(answer(option=""), answer())
    out = run(db, questions, chat)
    assert out.transcript["status"] == "answered"
    repair = chat.asked[1][1]["properties"]
    assert repair["action"]["enum"] == ["answer"] and "" not in repair["option"]["enum"]


def test_malformed_twice_falls_back_to_the_ranking(db, questions):
    out = run(db, questions, ScriptedChat("not json", '{"action": "answer"}'))
    assert out.error.startswith("malformed reply (missing field option, fault_type, reason")
    assert out.transcript["status"] == "fallback" and out.answer == ranked(db, questions).answer


@pytest.mark.parametrize("option", ["9z", ""])
def test_an_option_that_does_not_exist_is_refused(db, questions, option):
    out = run(db, questions, ScriptedChat(answer(option), answer(option)))
    assert out.error.startswith(f"'{option}' is not an option (options: 1a")
    assert out.transcript["status"] == "fallback" and out.answer["component"] == "cartservice"


def test_a_lower_candidate_needs_a_check_that_finds_nothing_on_the_first(db, questions):
    out = run(db, questions, ScriptedChat(answer("2a"), answer("2a")))
    assert out.error.startswith("option 2a is not candidate 1's")
    assert out.transcript["status"] == "fallback" and out.answer["component"] == "cartservice"


def _asked(db, questions):
    chat = ScriptedChat(answer())
    run(db, questions, chat, max_tools=0)
    return chat.asked[0][0][0]["content"], chat.asked[0][0][1]["content"]


def test_where_the_ranking_is_unsure_each_rival_is_tested_and_the_model_s_choice_stands(db, questions, monkeypatch):
    import features.digest

    monkeypatch.setattr(features.digest, "CLOSE", 0.0)  # every candidate with options is a rival
    ids = option_ids(ranked_digest(db, questions))
    rivals = list(dict.fromkeys(c for c, _ in ids.values()))
    assert len(rivals) > 1
    system, brief = _asked(db, questions)  # not asked to decide: it confirms candidate 1, as its brief says
    assert "Choose option 1a" in system and "own evidence " not in brief
    chat = ScriptedChat(answer("2a", fault_type=ids["2a"][1].fault_type))
    out = run(db, questions, chat, max_tools=0, decide=True)
    system, brief = chat.asked[0][0][0]["content"], chat.asked[0][0][1]["content"]
    assert "you decide" in system and "Choose option 1a" not in system
    numbers = [str(i) for i, c in enumerate(ranked_digest(db, questions).candidates, 1) if c.component in rivals]
    assert f"cannot tell candidates {', '.join(numbers)} apart" in system
    for c in rivals:  # side by side: each rival's onset and liveness, and its tests' results
        assert f"({c}):" in brief
    assert brief.count("own evidence ") == len(rivals) and "liveness " in brief
    assert set(chat.asked[0][1]["properties"]["option"]["enum"]) == set(ids)
    assert out.error is None and out.answer["component"] == ids["2a"][0]
    assert out.transcript["rivals"] == rivals and "the model chose" in out.transcript["why_not_top"]
    checked = [s["action"] for s in out.answer["reasoning_trace"] if "(" in s["action"]]
    assert not any(f"({rivals[0]})" in a for a in checked)  # the rivals set aside are not the trace's checks


def test_only_a_check_of_the_evidence_an_option_rests_on_can_find_it_gone(db, questions):
    read = {checks_of(o)[0] for c, o in option_ids(ranked_digest(db, questions)).values() if c == "cartservice"}
    assert "log_templates" not in read  # pod failure rests on metrics; its logs say nothing either way
    chat = ScriptedChat(check("log_templates", "cartservice", "no-such-word"), answer("2a"), answer("2a"))
    out = run(db, questions, chat)
    assert chat.asked[1][0][-1]["content"].startswith("Result of log_templates(cartservice, no-such-word):\nno ")
    assert out.error.startswith("option 2a is not candidate 1's") and out.answer["component"] == "cartservice"


def test_a_test_that_finds_candidate_1_s_evidence_gone_opens_the_other_options(db, questions, monkeypatch):
    monkeypatch.setattr(agent, "run_tool", lambda *a: Result("no anomalies in the window", found=False))
    chat = ScriptedChat(answer("2a"))
    out = run(db, questions, chat)
    enum = chat.asked[0][1]["properties"]["option"]["enum"]
    assert "2a" in enum and "1a" not in enum  # acted on: candidate 1's options close
    assert out.transcript["status"] == "answered" and out.answer["component"] != "cartservice"
    assert out.transcript["why_not_top"].startswith("a check of cartservice found its evidence gone")


def test_an_answer_a_check_contradicts_is_refused_and_never_printed_beside_that_check(db, questions, monkeypatch):
    monkeypatch.setattr(agent, "run_tool", lambda *a: Result("no anomalies in the window", found=False))
    out = run(db, questions, ScriptedChat(answer("1a"), answer("1a")))
    assert out.error.startswith("a check of cartservice found its evidence gone: choose another candidate's option")
    assert out.transcript["status"] == "fallback" and out.transcript["clear"] is False
    assert not any("no anomalies" in s["observation"] for s in out.answer["reasoning_trace"])


def test_a_check_that_could_not_run_contradicts_nothing(db, questions, monkeypatch):
    """A query that failed (a shard gone, a store busy) read nothing either way: it is no evidence gone."""
    monkeypatch.setattr(agent, "run_tool", lambda *a: Result.failure("Error: IO Error: Cannot open file"))
    out = run(db, questions, ScriptedChat(answer("1a")))
    assert out.transcript["status"] == "answered" and out.answer["component"] == "cartservice"
    assert out.transcript["why_not_top"] is None


def test_the_token_count_covers_every_call(db, questions):
    chat = ScriptedChat(check("metric_anomalies", "cartservice"), "bad", answer())
    out = run(db, questions, chat)
    assert len(out.transcript["calls"]) == 3
    assert out.transcript["tokens"] == {"prompt_tokens": 30, "completion_tokens": 15}


def test_a_repeated_check_forces_the_answer(db, questions):
    chat = ScriptedChat(check("trace_edges", "cartservice"), check("trace_edges", "cartservice"), answer())
    out = run(db, questions, chat, max_tools=3)
    assert out.transcript["status"] == "answered" and out.transcript["tool_calls"] == 2, out.error  # the test, one
    assert chat.asked[2][1]["properties"]["action"]["enum"] == ["answer"]


def test_a_check_repeated_with_its_choice_made_is_the_answer(db, questions):
    repeated = {**check("metric_anomalies", "cartservice"), "option": "1a", "fault_type": "pod kill"}
    chat = ScriptedChat(repeated)  # metric_anomalies(cartservice) is option 1a's test
    out = run(db, questions, chat)
    assert out.transcript["status"] == "answered" and len(chat.asked) == 1, out.error
    assert out.answer["component"] == "cartservice" and out.answer["reason"].startswith("Pod kill in cartservice: ")


def test_the_rank_agent_answers_with_the_top_option_and_its_key_metric(db, questions):
    out = ranked(db, questions)
    assert out.answer["component"] == "cartservice" and out.transcript["model"] == "rank"
    fault, key = out.answer["reason"].split(": ", 1)
    assert fault == "Pod failure in cartservice"
    metrics = next(s for s in out.answer["reasoning_trace"] if s["action"] == "MetricAnalysis(cartservice)")
    assert re.search(rf"(?<![\w]){key.split()[0]}(?![\w])", metrics["observation"])  # a whole word, as judged
    assert len(out.answer["reason"].split()) <= 40 and out.answer["reason"].endswith(".")


def test_endpoint_down_falls_back_to_the_ranking(db, questions):
    dead = client(LLMConfig(base_url="x", timeout=2, max_retries=0), f"http://127.0.0.1:{free_port()}/v1")
    out = run(db, questions, openai_chat(dead, "m"))
    assert out.error.startswith("LLM call failed: APIConnectionError")
    assert out.transcript["status"] == "fallback" and out.answer == ranked(db, questions).answer


def test_batch_resumes_after_a_torn_line(db, replay, tmp_path):
    answers = tmp_path / "answers.jsonl"
    qs = load_questions(replay / "input.json")
    first = {"uuid": qs[0].uuid, "component": "x", "reason": "r", "reasoning_trace": []}
    answers.write_text(json.dumps(first) + "\n" + '{"uuid": "' + qs[1].uuid + '", "compo')
    chat = ScriptedChat(*[answer()] * 10)  # 'pod failure' does not fit a node: such a case falls back, answered
    report = run_batch(db, qs, answers, chat, concurrency=2)
    assert report.skipped == 1 and report.answered == len(qs) - 1 and not report.failed
    lines = answers.read_text().splitlines()
    assert [json.loads(line)["uuid"] for line in lines].count(qs[1].uuid) == 1 and len(lines) == len(qs)
    assert answered_uuids(answers) == {q.uuid for q in qs}
    transcripts = [json.loads(line) for line in transcripts_path(answers).read_text().splitlines()]
    assert {t["status"] for t in transcripts} <= {"answered", "fallback"} and len(transcripts) == len(qs) - 1
    again = run_batch(db, qs, answers, ScriptedChat())
    assert again.answered == 0 and again.skipped == len(qs)


def test_a_log_check_names_what_the_template_hides_from_a_line_of_the_window(every_fault_store):
    db, truth = every_fault_store
    case = next(r for r in map(json.loads, truth.read_text().splitlines()) if r["fault_type"] == "jvm exception")
    question = next(q for q in load_questions(truth.parent / "input.json") if q.uuid == case["uuid"])
    found = run_tool(Context(connect(db), question), "log_templates", case["service"])
    rule = case["key_metrics"][0]  # the Byteman rule's name, a variable of its template
    assert any(rule in key for key in found.keys)


def test_a_check_of_a_pod_reads_the_service_wide_evidence_the_ranking_gave_it(every_fault_store):
    db, truth = every_fault_store
    con = connect(db)
    checked = 0
    for q in load_questions(truth.parent / "input.json"):
        top = next(iter(build_digest(con, q).candidates), None)
        if top and top.level == "pod" and any(e.kind == "trace" and e.component != top.component for e in top.evidence):
            assert run_tool(Context(con, q), "trace_edges", top.component).found
            checked += 1
    assert checked


@pytest.mark.parametrize("own, kept", [
    ("callers get no answer", True),
    ("the pod is gone and every caller times out while waiting on it for good", False),  # too long: left out
    ("looks like network delay to me", False),  # another fault type than the one chosen: left out
])
def test_the_model_s_words_are_a_whole_sentence_or_left_out(db, questions, own, kept):
    out = run(db, questions, ScriptedChat(answer(reason=own)))
    reason = out.answer["reason"]
    assert reason.endswith(".") and len(reason.split()) <= 40
    assert (own[:1].upper() + own[1:] + "." in reason) == kept
    assert reason.startswith("Pod failure in cartservice: ")


def test_the_trace_walks_the_fault_s_path_then_tells_the_chosen_evidence_and_sets_the_next_aside(db, questions):
    out = ranked(db, questions)
    trace, digest = out.answer["reasoning_trace"], ranked_digest(db, questions)
    steps = [(s["action"], s["observation"]) for s in trace]
    assert len(steps) == len(set(steps)) and len(steps) <= 5  # no step twice; efficiency stays 1
    walk = next(i for i, (a, _) in enumerate(steps) if a.startswith("TraceAnalysis"))
    path = read(steps[walk][0])
    assert path[0] == "frontend" and path[-1] == "cartservice"
    assert steps[walk][1].startswith(" -> ".join(path))
    assert walk == 0 or steps[0][0] == "LogSearch(frontend)"  # where users met it, when its answers moved
    others = [c.component for c in digest.candidates[1:3]]
    aside = steps[-1][1].startswith("set aside")  # where a step is left
    if aside:
        assert steps[-1] == (f"{steps[-1][0].split('(')[0]}({', '.join(others)})", steps[-1][1])
        assert steps[-1][1].startswith(f"set aside {others[0]} (")
    for action, _ in steps[walk + 1:len(steps) - aside]:
        named = action[action.index("(") + 1:-1].split(", ")
        assert named == ["cartservice"] or (action.startswith("LogSearch") and set(named) <= set(path[:-1]))
    assert "MetricAnalysis(cartservice)" in [a for a, _ in steps]


def test_a_node_s_fault_type_stays_a_node_s():
    from reasoner.prompt import fault_types_for

    assert fault_types_for({"node"}) == ["node cpu stress", "node memory stress", "node disk fill"]
    assert "pod kill" in fault_types_for({"service", "pod"}) and "node cpu stress" not in fault_types_for({"pod"})


def test_words_the_schema_cut_are_left_out():
    from reasoner.agent import with_words

    reason = "Pod failure in cartservice: response fell from 660 to 0."
    assert with_words(reason, "x" * 59, "pod failure").endswith("X" + "x" * 58 + ".")
    assert with_words(reason, "The silence response of cartservice-0 and cartservice-1 is 0", "pod failure") == reason


def test_a_check_adds_to_the_reason_only_the_keys_of_the_checked_component_s_own_lines():
    from features.evidence import Item
    from reasoner.tools import _items

    caller = Item("a", "event", 0.9, "A_B", "a's spans of b stopped at A_B", "path")
    own = Item("b-0", "trace", 0.5, "error calls", "trace a -> b: errors 0% -> 40% of 20 calls", "errors")
    found = _items([caller, own], "nothing", {"b", "b-0"})
    assert "A_B" in found.text and found.keys == ("error calls",)


def test_no_check_of_a_caller_finds_gone_the_missing_calls_the_ranking_derived_from_its_callees(tiny, monkeypatch):
    """Seen on the Online Boutique day: the caller's own traces and logs say nothing of calls it never made; its
    callees' falls are the evidence. A check that finds nothing there opens no other candidate."""
    con = stops_calling(tiny)
    assert ranked_digest_of(con).options["checkout"][0].kind == "derived"
    monkeypatch.setattr(agent, "run_tool", lambda *a: Result("no traced calls of checkout changed", found=False))
    chat = ScriptedChat(answer("2a", "pod failure"), answer("2a", "pod failure"))
    out = agent.diagnose(chat, con, Question("case", START, END, ""), max_tools=0)
    assert "1a" in chat.asked[0][1]["properties"]["option"]["enum"] and out.answer["component"] == "checkout"


def test_the_model_s_words_that_state_what_the_store_does_not_hold_are_left_out(db, questions):
    out = run(db, questions, ScriptedChat(answer(reason="rss_kilobytes_total hit 9731")))
    assert "9731" not in out.answer["reason"] and out.transcript["status"] == "answered"
    assert out.transcript["unfounded"] == [{"action": "reason", "unfounded": ["rss_kilobytes_total", "9731"]}]
    kept = run(db, questions, ScriptedChat(answer(reason="pod_processes fell")))  # a series the store has
    assert kept.answer["reason"].endswith(" Pod_processes fell.") and kept.transcript["unfounded"] == []


def test_a_step_that_quotes_a_line_nobody_logged_is_dropped(db, questions):
    from reasoner.facts import held, known

    con, q = connect(db), questions[CASE]
    d = build_digest(con, q)
    said = known(con, Context(con, q).window, d)
    line = con.execute("select message from log_lines where ts between ? and ? and level = 'ERROR' limit 1",
                       [q.start, q.end]).fetchone()[0]
    words = " ".join(re.findall(r"[A-Za-z]{4,}", line)[:4])
    trace = [{"step": 1, "action": "LogSearch(frontend)", "observation": f"frontend logs '{words}'"},
             {"step": 2, "action": "LogSearch(cartservice)", "observation": "cartservice logs 'disk quota exceeded'"},
             {"step": 3, "action": "MetricAnalysis(cartservice)", "observation": "cpu 0.2 -> 31337"}]
    kept, dropped = held({"reasoning_trace": trace}, said)
    assert [s["action"] for s in kept["reasoning_trace"]] == ["LogSearch(frontend)"]  # a line's words, as logged
    assert kept["reasoning_trace"][0]["step"] == 1
    assert dropped == [{"action": "LogSearch(cartservice)", "unfounded": ["disk quota exceeded"]},
                       {"action": "MetricAnalysis(cartservice)", "unfounded": ["31337"]}]


def test_a_broken_pair_of_log_lines_is_told_as_a_log_search_one_of_calls_as_a_trace_analysis():
    """Which analysis found an item is where it was read: a pair of two log lines' code positions in the logs (the
    judge counts a log keyword only in a log step), a pair of calls in the spans."""
    from features.digest import Digest
    from features.evidence import Item
    from features.ranker import Candidate
    from reasoner.rank import evidence_steps

    logged = Item("b", "event", 0.8, "B#12_B#14", "events of b: 'B#12' was followed by 'B#14' in 100% of spans, "
                  "now 10% of 40", "path", logged=True)
    called = Item("b", "event", 0.5, "call c GET_call d GET", "events of b: 'call c GET' was followed by "
                  "'call d GET' in 100% of spans, now 60% of 40", "path")
    digest = Digest("case", ("", ""), [Candidate("b", "service", 1.0, [logged, called], found=[logged, called])], "")
    steps = {s["action"]: s["observation"] for s in evidence_steps(digest, "b")}
    assert "B#12_B#14" in steps["LogSearch(b)"] and "B#12_B#14" not in steps["TraceAnalysis(b)"]
    assert "call c GET" in steps["TraceAnalysis(b)"]


def test_the_judge_holds_an_answer_to_what_its_checks_read_from_the_store_and_no_more(db, replay, tmp_path,
                                                                                       monkeypatch):
    """The agent holds an answer to the digest and to all its checks read, keys included (a keyword can lie past the
    part of its line the model reads: a Train Ticket line's id); the judge reads those checks again from the store,
    and a transcript's own words add nothing."""
    from judge.grounding import grounding
    from reasoner import tools

    monkeypatch.setitem(tools.TOOLS, "metric_anomalies",
                        lambda ctx, component: Result(f"{component}: a line cut before its keyword", ("far_key_4456",)))
    qs = [q for q in load_questions(replay / "input.json") if q.uuid == CASE]
    answers = tmp_path / "a.jsonl"
    run_batch(db, qs, answers, ScriptedChat(answer()), model="fake")  # option 1a tested first, then chosen
    transcript = json.loads(transcripts_path(answers).read_text())
    assert transcript["checks"] == [["metric_anomalies", "cartservice", ""]] and transcript["unfounded"] == []
    assert "far_key_4456" in json.loads(answers.read_text())["reason"]
    assert grounding(db, qs, answers)["held"] == 1.0
    transcript["checks"] = [["neighbours", "no-such-component 31337", ""], ["no_such_tool", "cartservice", ""]]
    row = json.loads(answers.read_text())
    row["reasoning_trace"][-1]["observation"] += " 31337"
    answers.write_text(json.dumps(row) + "\n")
    transcripts_path(answers).write_text(json.dumps(transcript) + "\n")
    assert grounding(db, qs, answers)["unfounded"][CASE] == ["far_key_4456", "31337"]


def test_a_keyword_a_check_searched_for_and_found_nowhere_is_no_fact(db, replay, tmp_path):
    """A check that found nothing echoes its request ("no log template of X contains '31337'"): the keyword is the
    model's, not the store's, so neither the agent nor the judge holds an answer to it."""
    from judge.grounding import grounding

    qs = [q for q in load_questions(replay / "input.json") if q.uuid == CASE]
    answers = tmp_path / "a.jsonl"
    chat = ScriptedChat(check("log_templates", "cartservice", "31337"), answer(reason="its logs hold 31337"))
    run_batch(db, qs, answers, chat, model="fake", max_tools=1)
    transcript = json.loads(transcripts_path(answers).read_text())
    assert transcript["checks"][-1] == ["log_templates", "cartservice", "31337"]
    assert "no log template of cartservice contains '31337'" in transcript["messages"][-2]["content"]
    assert {"action": "reason", "unfounded": ["31337"]} in transcript["unfounded"]
    assert "31337" not in answers.read_text() and grounding(db, qs, answers)["held"] == 1.0
