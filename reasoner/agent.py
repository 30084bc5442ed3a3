"""The `llm` agent: option 1a is tested on the top candidate with read-only tools (where its evidence was read,
where its fault type shows); the model reads the ranking's options with those results, may check further, and
chooses an option (and may correct its fault type). Asked to decide, where the ranking is unsure (`Digest.unsure`)
the model gets the rivals side by side, each tested, and its choice among them stands. The reason is the `rank`
reason, then the keys the checks found moving on the chosen candidate, then the model's words; the reasoning trace is
the ranking's steps and the checks of the chosen candidate (and of any whose evidence a check found gone).
Where the model fails (malformed twice, endpoint down, time limit), the `rank` answer stands.

The model is called through `Chat`: a function from (messages, JSON schema, seconds it may take)
to (reply text, usage). `openai_chat` makes one for any OpenAI-compatible endpoint, the seconds given a
deadline over its retries and their waits; tests use a scripted one.
"""

from __future__ import annotations

import asyncio
import json
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Callable

import duckdb
import openai

from features.cases import Question
from features.digest import build_digest
from features.evidence import flat
from features.options import DERIVED

from .facts import held, known, unfounded
from .prompt import FAULT_TYPES, REASON_CHARS, fault_types_for, option_ids, step_schema, system_prompt, user_prompt
from .rank import REASON_WORDS, evidence_steps, reason, trace_of, where_felt, words
from .rank import answer as rank_answer
from .tools import TOOLS, TRACE_ACTION, Context, checks_of, run_tool

Chat = Callable[[list[dict], dict, float], tuple[str, dict]]
OBSERVATION_WORDS = 30


MAX_REPLY = 20_000  # characters; a longer reply is malformed (the schema's answer is a few hundred)


class MalformedReply(Exception):
    """The endpoint answered, but not with a chat completion (no choices, no text, a body of another kind)."""


class CaseFailed(Exception):
    """The model gave no valid answer for a case: the ranking's answer stands (a fallback), never a made-up one."""


def openai_chat(client, model: str, max_tokens: int = 200) -> Chat:
    """A Chat for `client`'s endpoint (an `openai.AsyncOpenAI`). The seconds given are a deadline over the whole
    request: its retries, their back-off (a 429's Retry-After too) and a reply that arrives a byte at a time."""
    def chat(messages: list[dict], schema: dict, seconds: float) -> tuple[str, dict]:
        if seconds <= 0:
            raise CaseFailed("time limit reached")

        async def create():
            async with openai.DefaultAsyncHttpxClient() as http:  # a client per call: one per event loop
                return await asyncio.wait_for(client.with_options(http_client=http).chat.completions.create(
                    model=model, messages=messages, temperature=0, max_tokens=max_tokens,
                    response_format={"type": "json_schema", "json_schema": {"name": "step", "schema": schema,
                                                                            "strict": True}}), seconds)
        try:
            reply = asyncio.run(create())
        except asyncio.TimeoutError:
            raise CaseFailed(f"time limit reached while the endpoint answered ({seconds:.0f} s were left)") from None
        except ValueError as e:  # a body that is not JSON (or not UTF-8) where a completion was due
            raise MalformedReply(f"a body that is not a JSON completion ({flat(str(e), 80)})") from None
        try:
            content = reply.choices[0].message.content
        except (AttributeError, IndexError, KeyError, TypeError):
            raise MalformedReply(f"not a chat completion: {flat(repr(reply), 80)}") from None
        if content is not None and not isinstance(content, str):
            raise MalformedReply(f"the reply's content is a {type(content).__name__}, not text")
        usage = getattr(reply, "usage", None)
        return (content or "")[:MAX_REPLY + 1], {key: _count(getattr(usage, key, 0))
                                                 for key in ("prompt_tokens", "completion_tokens")}
    return chat


def _count(value) -> int:
    """A token count as the endpoint gives it; anything but a whole number counts 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


@dataclass
class Outcome:
    uuid: str
    answer: dict | None = None
    error: str | None = None
    transcript: dict = field(default_factory=dict)


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def _parse(reply: str) -> dict:
    if len(reply) > MAX_REPLY:
        raise ValueError(f"the reply is over {MAX_REPLY:,} characters")
    text = reply.strip()
    first, last = text.find("{"), text.rfind("}")  # some endpoints wrap JSON in prose or a code fence
    step = json.loads(text[first:last + 1] if 0 <= first < last else text)
    if not isinstance(step, dict):
        raise ValueError("the reply is not a JSON object")
    fields = ("option", "fault_type", "reason") if step.get("action") == "answer" else ("target",)
    missing = [k for k in ("action", *fields) if not isinstance(step.get(k), str)]
    if missing:
        raise ValueError(f"missing field {', '.join(missing)}")
    return step


OWN_WORDS = 12


def with_words(reason_text: str, own: str, fault_type: str) -> str:
    """The model's words as a sentence of their own after the reason, whole or not at all: left out where they
    are long, would run the reason past its words, or name a fault type other than the one chosen."""
    if len(own) >= REASON_CHARS:  # cut at the schema's length: not whole
        return reason_text
    own = flat(own, 200).strip().rstrip(".")
    if not own or len(own.split()) > OWN_WORDS or len(f"{reason_text} {own}".split()) > REASON_WORDS:
        return reason_text
    if any(t in own.lower() for t in FAULT_TYPES if t != fault_type):
        return reason_text
    return f"{reason_text} {own[:1].upper()}{own[1:]}."


def check_answer(step: dict, options: dict, open_: list[str], levels: dict[str, str], contradicted: set[str],
                 top: str) -> str | None:
    """Why an answer is not acceptable (with what would be), or None. `open_` are the candidates that may be chosen."""
    option = step.get("option")
    if not isinstance(option, str) or option not in options:
        return f"'{flat(str(option), 8)}' is not an option (options: {', '.join(options)})"
    component = options[step["option"]][0]
    if step.get("fault_type") not in fault_types_for({levels[component]}):
        return f"'{flat(str(step.get('fault_type')), 40)}' is not a fault type of a {levels[component]}"
    if component not in open_:
        choose = ", ".join(o for o, (c, _) in options.items() if c in open_)
        if component in contradicted:  # a check that found its evidence gone is acted on
            return f"a check of {flat(component, 60)} found its evidence gone: choose another candidate's option ({choose})"
        return (f"option {flat(step['option'], 8)} is not candidate 1's: choose {choose}"
                + (f", or first check {flat(top, 60)} and find nothing" if open_ == [top] else ""))
    return None


def standing(digest) -> dict:
    """What a transcript says of the ranking: the candidates, whether the top one stands out, and what the digest
    left out, the case's time being up."""
    return {"candidates": [c.component for c in digest.candidates], "confidence": digest.confidence,
            "clear": digest.clear, "features_missing": digest.unready, "skipped": digest.skipped}


def rank_only(con: duckdb.DuckDBPyConnection, question: Question, gate=nullcontext()) -> Outcome:
    """The `rank` agent: the ranking's top option, no model. The digest is built inside `gate` (a bound on how
    many are built at once)."""
    started = time.monotonic()
    with gate:
        digest = build_digest(con, question)
    answer = rank_answer(digest)
    error = None if answer else "no candidates: no component left its baseline in the window"
    seconds = round(time.monotonic() - started, 3)
    return Outcome(question.uuid, answer, error, {
        "uuid": question.uuid, "status": "answered" if answer else "failed", "error": error, "model": "rank",
        "messages": [], "calls": [], "tool_calls": 0, "tokens": {"prompt_tokens": 0, "completion_tokens": 0},
        "seconds": seconds, "digest_seconds": seconds, **standing(digest)})


def diagnose(chat: Chat, con: duckdb.DuckDBPyConnection, question: Question, *, model: str = "",
             max_tools: int = 0, time_limit: float = 600.0, decide: bool = False, gate=nullcontext()) -> Outcome:
    """Diagnose one case; the outcome carries the answer (the model's, or the ranking's where it failed),
    the reason the model failed if it did, and the transcript. With `decide`, where the ranking is unsure the model
    chooses among its rivals, each tested; otherwise it confirms candidate 1. The time limit runs from the case's
    start, the digest's wait for `gate` (a bound on how many digests are built at once) and the digest included:
    where they used it up, the ranking's answer stands and the model is not asked."""
    started = time.monotonic()
    with gate:
        digest = build_digest(con, question, deadline=started + time_limit)
    digest_seconds = time.monotonic() - started
    ctx = Context(con, question)
    options = option_ids(digest)
    levels = {c.component: c.level for c in digest.candidates}
    targets = list(dict.fromkeys(c for c, _ in options.values()))
    top = targets[0] if targets else ""
    # Where the ranking is sure the model confirms candidate 1; where it is unsure, it decides among the rivals.
    rivals = [c for c in digest.rivals if c in targets] if decide and digest.unsure else targets[:1]
    tool_steps: list[dict] = []
    contradicted: set[str] = set()  # candidates whose option's evidence a check found gone
    confirmed: dict[str, list[str]] = {}  # candidate -> the keys its checks found moving
    done_calls: dict[tuple, None] = {}  # (tool, target, keyword) in the order they ran
    results: list[str] = []  # what the checks read from the store
    unheld: list[dict] = []  # what the model stated that the store does not hold, left out of the answer

    def check(tool: str, target: str, keyword: str = "") -> str:
        done_calls[(tool, target, keyword)] = None
        found = run_tool(ctx, tool, target, keyword)
        results.append(found.read)
        read = {checks_of(o)[0] for c, o in options.values() if c == target and o.kind != DERIVED}
        if found.empty and tool in read and not keyword:
            contradicted.add(target)
        confirmed.setdefault(target, []).extend(found.keys)
        arg = flat(target, 60) + (f", {flat(keyword, 40)}" if keyword else "")
        tool_steps.append({"action": f"{TRACE_ACTION[tool]}({arg})", "target": target,
                           "observation": words(_first_line(found.text), OBSERVATION_WORDS)})
        return f"Result of {tool}({arg}):\n{found.text}"

    # Each rival's first option (1a where the ranking is sure) is tested before the model reads the brief: where
    # its evidence was read, where its fault shows.
    tests = [check(tool, c) for c in rivals for tool in checks_of(next(o for k, o in options.values() if k == c))
             if digest_seconds <= time_limit]
    numbers = [i for i, c in enumerate(digest.candidates, 1) if c.component in rivals]
    messages = [{"role": "system", "content": system_prompt(max_tools, numbers)},
                {"role": "user", "content": user_prompt(question.description, digest, tests,
                                                        rivals if len(rivals) > 1 else [])}]
    tested = len(tool_steps)
    must_answer = False  # set when the model repeats a check (it has learnt all it will) or is repaired
    calls: list[dict] = []
    tokens = {"prompt_tokens": 0, "completion_tokens": 0}
    repairs = 1
    outcome = Outcome(question.uuid)
    why_not_top = None
    try:
        if not options:
            raise CaseFailed("no candidates: no component left its baseline in the window")
        if digest_seconds > time_limit:
            raise CaseFailed(f"time limit of {time_limit:.0f} s reached before the model was asked (the digest took "
                             f"{digest_seconds:.1f} s)")
        for _ in range(max_tools + 3):  # hard step limit: checks, the answer, one repair
            if time.monotonic() - started > time_limit:
                raise CaseFailed(f"time limit of {time_limit:.0f} s reached")
            allow = len(tool_steps) - tested < max_tools and not must_answer
            # The options open now: the rivals' whose evidence no check found gone; failing them, the others'.
            open_ = ([c for c in rivals if c not in contradicted]
                     or [c for c in targets if c not in rivals and c not in contradicted])
            open_options = [o for o, (c, _) in options.items() if c in open_]
            if not open_options:
                gone = ", ".join(flat(c, 60) for c in contradicted)
                raise CaseFailed(f"checks found the evidence of {gone} gone and no other candidate has options: "
                                 "no clear root cause")
            schema = step_schema([*TOOLS, "answer"] if allow else ["answer"], targets, open_options,
                                 fault_types_for({levels[options[o][0]] for o in open_options}))
            t = time.perf_counter()
            reply, usage = chat(messages, schema, time_limit - (time.monotonic() - started))
            calls.append({"reply": reply, "seconds": round(time.perf_counter() - t, 2), **usage})
            for k in tokens:
                tokens[k] += usage.get(k, 0)
            messages.append({"role": "assistant", "content": reply})
            try:
                step = _parse(reply)
            except (ValueError, RecursionError) as e:
                problem = f"malformed reply ({e})"
            else:
                repeated = False  # a check it already has: with its choice made, that choice is the answer
                if step["action"] in TRACE_ACTION and allow and step["target"] in targets:
                    keyword = step.get("keyword", "") if step["action"] == "log_templates" else ""
                    keyword = keyword if isinstance(keyword, str) else ""
                    if (step["action"], step["target"], keyword) not in done_calls:
                        result = check(step["action"], step["target"], keyword)
                        messages.append({"role": "user", "content": f"{result}\nTake one step."})
                        continue
                    repeated = True
                problem = check_answer(step, options, open_, levels, contradicted, top)
                if problem is None:
                    component, option = options[step["option"]]
                    if component != top and top in contradicted:
                        why_not_top = f"a check of {top} found its evidence gone: " + "; ".join(
                            s["observation"] for s in tool_steps if s["target"] == top)
                    elif component != top:
                        why_not_top = f"the ranking was unsure between {', '.join(rivals)}; the model chose {component}"
                    chosen = next(c for c in digest.candidates if c.component == component)
                    text = reason(component, step["fault_type"], option.key, chosen.found or chosen.evidence,
                                  confirmed.get(component, []), where_felt(digest, component))
                    # The model may word the reason, never add a fact: what it states must be what the store holds.
                    store_said = known(con, ctx.window, digest, results)
                    own = str(step.get("reason", ""))
                    made_up = unfounded(own, store_said)
                    if made_up:
                        unheld.append({"action": "reason", "unfounded": made_up})
                    outcome.answer, dropped = held(
                        {"uuid": question.uuid, "component": component,
                         "reason": text if made_up else with_words(text, own, step["fault_type"]),
                         "reasoning_trace": trace_of(evidence_steps(digest, component) + [
                             s for s in tool_steps if s["target"] in {component, *contradicted}])}, store_said)
                    unheld += dropped
                    break
                if repeated:
                    must_answer = True
                    messages.append({"role": "user", "content": "You already have that result. Answer now."})
                    continue
            if repairs == 0:
                raise CaseFailed(problem)
            repairs -= 1
            must_answer = True  # the repair is an answer, in the answer's schema
            messages.append({"role": "user", "content": f"Not accepted: {problem}. Reply with one JSON object "
                                                        "as described; action \"answer\"."})
        else:
            raise CaseFailed("step limit reached without an answer")
    except CaseFailed as e:
        outcome.error = str(e)
    except (openai.OpenAIError, OSError, MalformedReply) as e:  # the endpoint: down, slow, refusing, garbled
        outcome.error = f"LLM call failed: {type(e).__name__}: {e}"
    status = "answered"
    if outcome.answer is None:  # the ranking's evidence-backed answer stands; nothing is made up
        outcome.answer = rank_answer(digest)
        status = "fallback" if outcome.answer else "failed"
    outcome.transcript = {
        "uuid": question.uuid, "status": status, "error": outcome.error, "why_not_top": why_not_top,
        "unfounded": unheld,
        "rivals": rivals if len(rivals) > 1 else [],
        "model": model, "messages": messages, "calls": calls, "tool_calls": len(tool_steps), "tokens": tokens,
        "checks": [list(c) for c in done_calls],  # so that a judge reads again what they read
        "seconds": round(time.monotonic() - started, 2), "digest_seconds": round(digest_seconds, 3),
        "past_limit": time.monotonic() - started > time_limit,
        **standing(digest),
    }
    if top in contradicted and outcome.answer and outcome.answer["component"] == top:
        outcome.transcript["clear"] = False  # the ranking's answer stands, without the check that contradicts it
    return outcome
