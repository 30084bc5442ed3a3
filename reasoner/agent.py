"""One case: digest, a few tool calls, a validated answer and a reasoning trace from the steps taken.

The model is called through `Chat`: a function from (messages, JSON schema, seconds it may take)
to (reply text, usage). `openai_chat` makes one for any OpenAI-compatible endpoint, its retries
included in the seconds given; tests use a scripted one.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Callable

import duckdb

from features.cases import Question
from features.digest import Digest, build_digest

from .prompt import FAULT_TYPES, step_schema, system_prompt, user_prompt
from .rank import REASON_WORDS, evidence_steps, words
from .rank import answer as rank_answer
from .tools import TRACE_ACTION, Context, run_tool

Chat = Callable[[list[dict], dict, float], tuple[str, dict]]
OBSERVATION_WORDS = 30


class CaseFailed(Exception):
    """The model gave no valid answer for a case: the ranking's answer stands (a fallback), never a made-up one."""


def openai_chat(client, model: str, max_tokens: int = 200) -> Chat:
    def chat(messages: list[dict], schema: dict, seconds: float) -> tuple[str, dict]:
        attempts = client.max_retries + 1  # every attempt shares the seconds left to the case
        bounded = client.with_options(timeout=max(1.0, min(client.timeout, seconds / attempts)))
        reply = bounded.chat.completions.create(
            model=model, messages=messages, temperature=0, max_tokens=max_tokens,
            response_format={"type": "json_schema", "json_schema": {"name": "step", "schema": schema, "strict": True}})
        usage = reply.usage
        return reply.choices[0].message.content or "", {
            "prompt_tokens": getattr(usage, "prompt_tokens", 0) or 0,
            "completion_tokens": getattr(usage, "completion_tokens", 0) or 0}
    return chat


@dataclass
class Outcome:
    uuid: str
    answer: dict | None = None
    error: str | None = None
    transcript: dict = field(default_factory=dict)


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def _parse(reply: str) -> dict:
    text = reply.strip()
    fence = re.search(r"\{.*\}", text, re.S)  # some endpoints wrap JSON in prose or a code fence
    step = json.loads(fence.group(0) if fence else text)
    if not isinstance(step, dict):
        raise ValueError("the reply is not a JSON object")
    missing = [k for k in ("action", "component", "fault_type", "reason") if not isinstance(step.get(k), str)]
    if missing:
        raise ValueError(f"missing field {', '.join(missing)}")
    return step


def check_answer(step: dict, components: set[str], metrics: set[str], seen_text: str) -> str | None:
    """Why an answer is not acceptable (with what would be), or None; `components` are the digest's choices."""
    if step["component"] not in components:
        return f"'{step['component']}' is not one of the candidates ({', '.join(sorted(components))})"
    if step["fault_type"] not in FAULT_TYPES:
        return f"'{step['fault_type']}' is not one of the fault types"
    lead = words(step["reason"], REASON_WORDS - len(step["fault_type"].split()) - 1)
    lowered = lead.lower()
    if any(m.lower() in lowered for m in metrics if len(m) >= 3):  # names like CpuUsageRate(%) included
        return None
    tokens = re.findall(r"[A-Za-z_][\w.-]*", lead)
    quoted = " ".join(re.findall(r'"([^"]*)"', seen_text)).lower()
    if any(len(t) >= 5 and t.lower() in quoted for t in tokens):
        return None
    named = [m for m in dict.fromkeys(re.findall(r"[A-Za-z_][\w.()%-]*", seen_text)) if m in metrics][:6]
    return ("the reason must start with the key metric or a log keyword from the evidence"
            + (f", e.g. one of {', '.join(named)}" if named else ""))


def choices(digest: Digest, node_of: dict[str, str], service_of: dict[str, str]) -> list[str]:
    """What the model may name: the candidates, the services of candidate pods and the nodes they run on."""
    out: list[str] = []
    for c in digest.candidates:
        for name in (c.component, service_of.get(c.component), node_of.get(c.component)):
            if name and name not in out:
                out.append(name)
    return out


def rank_only(con: duckdb.DuckDBPyConnection, question: Question) -> Outcome:
    """The `rank` agent: the ranking's top option, no model."""
    started = time.monotonic()
    digest = build_digest(con, question)
    answer = rank_answer(digest)
    error = None if answer else "no candidates: no component left its baseline in the window"
    seconds = round(time.monotonic() - started, 3)
    return Outcome(question.uuid, answer, error, {
        "uuid": question.uuid, "status": "answered" if answer else "failed", "error": error, "model": "rank",
        "messages": [], "calls": [], "tool_calls": 0, "tokens": {"prompt_tokens": 0, "completion_tokens": 0},
        "seconds": seconds, "digest_seconds": seconds, "candidates": [c.component for c in digest.candidates]})


def diagnose(chat: Chat, con: duckdb.DuckDBPyConnection, question: Question, *, components: set[str],
             metrics: set[str], placement: dict[str, tuple[str, str]] | None = None, model: str = "",
             max_tools: int = 3, time_limit: float = 600.0) -> Outcome:
    """Diagnose one case; the outcome carries the answer or the reason it failed, and the transcript."""
    started = time.monotonic()
    t0 = time.perf_counter()
    digest = build_digest(con, question)
    digest_seconds = time.perf_counter() - t0
    ctx = Context(con, question)
    placement = placement or {}
    allowed = [c for c in choices(digest, {p: n for p, (_, n) in placement.items()},
                                  {p: s for p, (s, _) in placement.items()}) if c in components]
    messages = [{"role": "system", "content": system_prompt(max_tools)},
                {"role": "user", "content": user_prompt(question.description, digest.text)}]
    tool_steps: list[dict] = []
    done_calls: set[tuple] = set()
    must_answer = False  # set when the model repeats a tool call: it has learnt all it will
    calls: list[dict] = []
    tokens = {"prompt_tokens": 0, "completion_tokens": 0}
    seen = digest.text
    repairs = 1
    outcome = Outcome(question.uuid)
    try:
        if not allowed:
            raise CaseFailed("no candidates: no component left its baseline in the window")
        for _ in range(max_tools + 3):  # hard step limit: tools, the answer, one repair
            if time.monotonic() - started > time_limit:
                raise CaseFailed(f"time limit of {time_limit:.0f} s reached")
            allow = len(tool_steps) < max_tools and not must_answer
            t = time.perf_counter()
            reply, usage = chat(messages, step_schema(allow, allowed), time_limit - (time.monotonic() - started))
            calls.append({"reply": reply, "seconds": round(time.perf_counter() - t, 2), **usage})
            for k in tokens:
                tokens[k] += usage.get(k, 0)
            messages.append({"role": "assistant", "content": reply})
            try:
                step = _parse(reply)
            except (ValueError, json.JSONDecodeError) as e:
                problem = f"malformed reply ({e})"
            else:
                if step["action"] in TRACE_ACTION and allow:
                    call = (step["action"], step["component"], step.get("keyword", ""))
                    if call in done_calls:
                        must_answer = True
                        messages.append({"role": "user", "content": "You already have that result. Answer now."})
                        continue
                    done_calls.add(call)
                    result = run_tool(ctx, step["action"], step["component"], step.get("keyword", "")
                                      if step["action"] == "log_templates" else "")
                    seen += "\n" + result
                    name = TRACE_ACTION[step["action"]]
                    keyword = step.get("keyword", "") if step["action"] == "log_templates" else ""
                    arg = step["component"] + (f", {keyword}" if keyword else "")
                    tool_steps.append({"action": f"{name}({arg})",
                                       "observation": words(_first_line(result), OBSERVATION_WORDS)})
                    messages.append({"role": "user", "content": f"Result of {step['action']}({arg}):\n{result}\n"
                                                                f"Take one step."})
                    continue
                problem = check_answer(step, set(allowed), metrics, seen)
                if problem is None:
                    reason = words(f"{step['fault_type']}: {step['reason']}", REASON_WORDS)
                    trace = evidence_steps(digest, step["component"]) + tool_steps
                    outcome.answer = {"uuid": question.uuid, "component": step["component"], "reason": reason,
                                      "reasoning_trace": [{"step": i, **s} for i, s in enumerate(trace, 1)]}
                    break
            if repairs == 0:
                raise CaseFailed(problem)
            repairs -= 1
            messages.append({"role": "user", "content": f"Not accepted: {problem}. Reply with one JSON object "
                                                        f"as described; action \"answer\"."})
        else:
            raise CaseFailed("step limit reached without an answer")
    except CaseFailed as e:
        outcome.error = str(e)
    except Exception as e:  # the endpoint: down, slow, or refusing; the batch goes on
        outcome.error = f"LLM call failed: {type(e).__name__}: {e}"
    status = "answered"
    if outcome.answer is None:  # the ranking's evidence-backed answer stands; nothing is made up
        outcome.answer = rank_answer(digest)
        status = "fallback" if outcome.answer else "failed"
    outcome.transcript = {
        "uuid": question.uuid, "status": status, "error": outcome.error,
        "model": model, "messages": messages, "calls": calls, "tool_calls": len(tool_steps), "tokens": tokens,
        "seconds": round(time.monotonic() - started, 2), "digest_seconds": round(digest_seconds, 3),
        "candidates": [c.component for c in digest.candidates],
    }
    return outcome
